"""The GPU check: memory and step-stage times at the `gpu` and `paper` shapes, with random weights.

One prepared script for a CUDA machine that has only torch, transformers and peft (no vLLM, no
Unsloth, no hub, no package registry), run from the repository root in under 9 minutes:

    python benchmarks/gpu_check.py --out $OUT/gpu_check.json
    python benchmarks/gpu_check.py --cpu             # the CPU fallback CI runs: the tiny model, seconds

For each shape it builds the preset's architecture with random weights (`model.weights=random`,
populora_nb/model/random_base.py) and measures, on the native path (the trainer's own multi-LoRA
decoder, transformers + peft):

* a synthetic step at per-adapter compute matching, for the single AZR agent (1 adapter) and the
  4T + 4S population (8 adapters, 8x the rows): one mixed-adapter generation of ``rows`` rows per
  adapter at fixed lengths (``prompt`` tokens in, ``new`` tokens out, no stop token), then every
  member's real update on its rows (`LoRAPolicy.update_members`, alternating +-1 advantages: random
  weights would tie every reward); seconds per stage, population / baseline, peak reserved memory
  per stage;
* the update stage alone (issue #30) on the same fixed-length rows: the agent's, and the population's
  one member at a time, in one batched pass (``rl.update``) at the preset's micro-batch, and batched
  at N times it; each over the agent's (the GPU model of docs/performance.md reads these);
* the update at the preset's full length (prompt budget + its max new tokens, one micro-batch of
  ``rl.micro_batch`` rows, the preset's gradient checkpointing): the peak memory that decides
  whether a preset fits, halving the micro-batch after an out-of-memory error until one fits.

Where vLLM imports, the same population's mixed vs single-adapter generation on a vLLM engine with
dummy weights; where Unsloth imports, a note (it loads weights from a directory: use the doctor with
real weights). Every section that fails is recorded as its error and the rest still runs, so one
JSON comes back either way.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import torch  # noqa: E402

from populora_nb.config import ExperimentConfig, load_config  # noqa: E402
from populora_nb.model.adapters import Population, roles_for  # noqa: E402
from populora_nb.model.base import Base, load_base  # noqa: E402
from populora_nb.model.policy import LoRAPolicy  # noqa: E402
from populora_nb.stages import Sample  # noqa: E402

GPU_SHAPES = {"gpu": {"rows": 8, "prompt": 1024, "new": 256}, "paper": {"rows": 8, "prompt": 1024, "new": 256}}
"""Synthetic-step sizes per preset on a GPU: a prompt of K = 6 references is ~1,000 tokens (issue #28);
256 new tokens keep both shapes' four generations within the 9-minute budget."""
CPU_SHAPES = {"tiny": {"rows": 2, "prompt": 32, "new": 8}}
"""The CPU fallback: the tiny random model, a few seconds."""


def memory() -> dict[str, float | None]:
    """Peak reserved (since the last reset) and free memory now, GB; on CPU the host's available RAM."""
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return {
            "peak_reserved_gb": torch.cuda.max_memory_reserved() / 2**30,
            "peak_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
            "free_gb": free / 2**30,
            "total_gb": total / 2**30,
        }
    import psutil

    return {"peak_reserved_gb": None, "free_gb": psutil.virtual_memory().available / 2**30}


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def release() -> None:
    """Hand cached blocks back, so the next section's peak is its own."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def random_ids(n_rows: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n_rows, length), generator=gen).tolist()  # past the special ids


def signed_samples(member: str, prompts: list[list[int]], completions: list[list[int]]) -> list[Sample]:
    """Samples of the given token ids with alternating +-1 advantages (so no update is skipped)."""
    return [
        Sample(member, "", "", 0.0, (), 1.0 if i % 2 == 0 else -1.0, (tuple(p), tuple(c)))
        for i, (p, c) in enumerate(zip(prompts, completions))
    ]


def synthetic_step(config: ExperimentConfig, base: Base, roster: dict, size: dict) -> dict[str, Any]:
    """One generation over every member's rows, then every member's update; seconds and memory."""
    population = Population.create(base, roster, config.lora, seed=config.run.seed)
    policy = LoRAPolicy(config, base, population)
    members = population.ids()
    vocab = len(base.tokenizer)
    prompts = random_ids(size["rows"] * len(members), size["prompt"], vocab, seed=1)
    rows_of = [m for m in members for _ in range(size["rows"])]
    out: dict[str, Any] = {"adapters": len(members), "prompt": size["prompt"], "new": size["new"]}
    out |= {"rows_per_adapter": size["rows"], "rows": len(rows_of)}
    release()
    reset_peak()
    started = time.perf_counter()
    gen = torch.Generator(device=base.device).manual_seed(0)
    gens = population.generate(
        rows_of, prompts, max_new_tokens=size["new"], temperature=1.0, generator=gen, stop_token_ids=[]
    )
    sync()
    out["generate_s"] = time.perf_counter() - started
    out["generate_memory"] = memory()
    out["new_tokens"] = sum(len(g.completion_ids) for g in gens)
    rows = {
        m: signed_samples(
            m, [g.prompt_ids for g in gens if g.member_id == m], [g.completion_ids for g in gens if g.member_id == m]
        )
        for m in members
    }
    release()
    reset_peak()
    started = time.perf_counter()
    stats = policy.update_members(rows)
    sync()
    out["train_s"] = time.perf_counter() - started
    out["update"] = config.rl.update
    out["micro_batch"] = config.rl.micro_batch
    if any(s.get("optim/skipped") for s in stats.values()) or stats.keys() != rows.keys():
        raise RuntimeError("every member's update must take a step")
    out["train_memory"] = memory()
    out["step_s"] = out["generate_s"] + out["train_s"]
    out["memory_mib"] = population.memory()
    del policy, population, gens
    release()
    return out


def update_stage(preset: str, overrides: dict[str, Any], base: Base, roster: dict, size: dict) -> dict[str, Any]:
    """Issue #30: the update stage alone on the same fixed-length rows (``rows`` per adapter), the agent's
    and the population's, the latter one member at a time, in one batched pass at the preset's
    micro-batch (one member's memory per pass), and batched at N times it (as many passes as the agent's).
    Seconds, peak memory, and each population mode over the agent: docs/performance.md's GPU model reads
    the last (if it is near 1, the agent's passes leave the card mostly idle)."""
    n, mb = len(roster), load_config(preset, overrides).rl.micro_batch
    vocab = len(base.tokenizer)
    modes = {
        "agent": ({"agent": "agent"}, {"rl.update": "sequential"}),
        "sequential": (roster, {"rl.update": "sequential"}),
        "batched": (roster, {"rl.update": "batched"}),
        "batched_wide": (roster, {"rl.update": "batched", "rl.micro_batch": n * mb}),
    }
    out: dict[str, Any] = {"rows_per_adapter": size["rows"], "prompt": size["prompt"], "new": size["new"]}
    for name, (members, settings) in modes.items():
        cfg = load_config(preset, {**overrides, **settings})
        population = Population.create(base, members, cfg.lora, seed=cfg.run.seed)
        policy = LoRAPolicy(cfg, base, population)
        rows = {
            m: signed_samples(
                m,
                random_ids(size["rows"], size["prompt"], vocab, seed=10 + i),
                random_ids(size["rows"], size["new"], vocab, seed=20 + i),
            )
            for i, m in enumerate(population.ids())
        }
        release()
        reset_peak()
        try:
            started = time.perf_counter()
            policy.update_members(rows)
            sync()
            out[name] = {"train_s": time.perf_counter() - started, "micro_batch": cfg.rl.micro_batch, **memory()}
        except torch.cuda.OutOfMemoryError as e:  # a wide pass may not fit: that is an answer too
            out[name] = {"error": str(e).splitlines()[0], "micro_batch": cfg.rl.micro_batch, **memory()}
        finally:
            del policy, population
            release()
    agent = out["agent"].get("train_s")
    out["over_agent"] = {
        k: out[k]["train_s"] / agent for k in ("sequential", "batched", "batched_wide") if agent and "train_s" in out[k]
    }
    return out


def full_length_update(config: ExperimentConfig, base: Base) -> dict[str, Any]:
    """One member's update on one micro-batch at the preset's longest rows: the trainer's peak. On an
    out-of-memory error the micro-batch halves until one fits (each attempt recorded)."""
    new = config.sampling.solve_max_new_tokens
    prompt = config.model.max_seq_len - max(config.sampling.propose_max_new_tokens, new)
    attempts = []
    rows = config.rl.micro_batch
    while rows >= 1:
        population = Population.create(base, {"S0": "student"}, config.lora, seed=config.run.seed)
        policy = LoRAPolicy(config, base, population)
        prompts = random_ids(rows, prompt, len(base.tokenizer), seed=2)
        completions = random_ids(rows, new, len(base.tokenizer), seed=3)
        release()
        reset_peak()
        started = time.perf_counter()
        try:
            policy.update("S0", signed_samples("S0", prompts, completions))
            sync()
            attempts.append({"rows": rows, "ok": True, "s": time.perf_counter() - started, **memory()})
            break
        except torch.cuda.OutOfMemoryError as e:  # the card is full: try half the rows
            attempts.append({"rows": rows, "ok": False, "error": str(e).splitlines()[0], **memory()})
            rows //= 2
        finally:
            del policy, population
            release()
    return {
        "prompt_tokens": prompt,
        "completion_tokens": new,
        "gradient_checkpointing": config.lora.gradient_checkpointing,
        "micro_batch_configured": config.rl.micro_batch,
        "attempts": attempts,
    }


def vllm_mixed_vs_single(config: ExperimentConfig, base: Base, size: dict) -> dict[str, Any]:
    """The population's mixed-adapter generation on a vLLM engine with dummy weights, against the
    same rows on one adapter (fixed lengths, greedy, best of two after a warm-up)."""
    from populora_nb.model.vllm_engine import VLLMEngine

    roster = roles_for(config.population.n_teachers, config.population.n_students)
    population = Population.create(base, roster, config.lora, seed=config.run.seed)
    members = population.ids()
    release()
    started = time.perf_counter()
    with VLLMEngine(base, config.lora, config.rollout, len(members), config.model.max_seq_len) as engine:
        start_s = time.perf_counter() - started
        for m in members:
            engine.push(m, population.factors(m))
        prompts = random_ids(size["rows"] * len(members), size["prompt"], len(base.tokenizer), seed=4)
        mixed = [m for m in members for _ in range(size["rows"])]

        def best(adapters: list[str | None]) -> float:
            engine.generate(adapters, prompts, size["new"], 0.0, stop_token_ids=[])
            runs = []
            for _ in range(2):
                t0 = time.perf_counter()
                engine.generate(adapters, prompts, size["new"], 0.0, stop_token_ids=[])
                runs.append(time.perf_counter() - t0)
            return min(runs)

        mixed_s, single_s = best(list(mixed)), best([members[0]] * len(mixed))
        after = memory()
    return {
        "engine_start_s": start_s,
        "mixed_s": mixed_s,
        "single_s": single_s,
        "mixed_over_single": mixed_s / single_s,
        "memory": after,
    }


def section(result: dict[str, Any], name: str, fn: Any, *args: Any) -> None:
    """Run one measurement; a failure is recorded as its error, never ends the check."""
    print(f"[gpu_check] {name} ...", flush=True)
    started = time.perf_counter()
    try:
        result[name] = fn(*args)
    except Exception as e:  # noqa: BLE001 - every failure becomes data in the JSON
        result[name] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
        traceback.print_exc()
    print(f"[gpu_check] {name} done in {time.perf_counter() - started:.1f}s", flush=True)


def check_shape(preset: str, size: dict, cpu: bool, deadline: float) -> dict:
    overrides: dict[str, Any] = {"evolution.enabled": False}
    # CPU: the tiny model's 2,048-token rows would take the fallback past a few seconds
    overrides |= {"model.max_seq_len": 160, "rl.micro_batch": 2} if cpu else {"model.weights": "random"}
    config = load_config(preset, overrides)
    result: dict[str, Any] = {"model": config.model.name, "weights": config.model.weights, "size": size}
    reset_peak()
    started = time.perf_counter()
    base = load_base(config, seed=0)
    sync()
    result["base"] = {
        "load_s": time.perf_counter() - started,
        "parameters": base.n_parameters,
        "dtype": str(base.dtype),
        **memory(),
    }
    population = roles_for(config.population.n_teachers, config.population.n_students)
    for name, roster in (("baseline", {"agent": "agent"}), ("population", population)):
        section(result, name, synthetic_step, config, base, roster, size)
    pop, bl = result.get("population", {}), result.get("baseline", {})
    if "step_s" in pop and "step_s" in bl:
        result["population_over_baseline"] = {k: pop[k] / bl[k] for k in ("step_s", "generate_s", "train_s")}
    section(result, "update_stage", update_stage, preset, overrides, base, population, size)
    if time.perf_counter() < deadline:
        section(result, "full_length_update", full_length_update, config, base)
    else:
        result["full_length_update"] = "skipped: over the time budget"
    if cpu or not importlib_has("vllm"):
        result["vllm"] = "not run on the CPU fallback" if cpu else "not installed"
    elif time.perf_counter() < deadline:
        vllm_config = load_config(preset, {**overrides, "rollout.engine": "vllm"})
        section(result, "vllm", vllm_mixed_vs_single, vllm_config, base, size)
    else:
        result["vllm"] = "skipped: over the time budget"
    result["unsloth"] = (
        "importable; not measured here: Unsloth loads weights from a directory (run the doctor with real weights)"
        if importlib_has("unsloth")
        else "not installed"
    )
    del base
    release()
    return result


def importlib_has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else Path("gpu_check.json")
    ap.add_argument("--out", type=Path, default=default_out, help="the JSON to write (default: $OUT/gpu_check.json)")
    ap.add_argument("--cpu", action="store_true", help="the CPU fallback (also taken when CUDA is absent)")
    ap.add_argument("--presets", nargs="*", default=None, help="a subset of: gpu paper")
    ap.add_argument("--budget-s", type=float, default=480.0, help="skip later sections past this many seconds")
    args = ap.parse_args()
    cpu = args.cpu or not torch.cuda.is_available()
    shapes = CPU_SHAPES if cpu else {p: GPU_SHAPES[p] for p in (args.presets or GPU_SHAPES)}
    started = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "CPU",
        "cpu_fallback": cpu,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, **versions()},
        "shapes": {},
    }
    for preset, size in shapes.items():
        print(f"[gpu_check] shape {preset}", flush=True)
        deadline = started + args.budget_s
        try:
            report["shapes"][preset] = check_shape(preset, size, cpu, deadline)
        except Exception as e:  # noqa: BLE001 - a shape that cannot even load is data too
            report["shapes"][preset] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
            traceback.print_exc()
        release()
    report["total_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for preset, r in report["shapes"].items():
        ratio = r.get("population_over_baseline", {}).get("step_s")
        print(f"[gpu_check] {preset}: population / baseline step = {ratio if ratio is None else f'{ratio:.2f}x'}")
        updates = r.get("update_stage", {}).get("over_agent", {})
        said = ", ".join(f"{k} {v:.2f}x" for k, v in updates.items()) or "not measured"
        print(f"[gpu_check] {preset}: update stage / the agent's, equal rows per adapter: {said}")
    print(f"[gpu_check] wrote {args.out} in {report['total_s']:.0f}s")
    return 0


def versions() -> dict[str, str]:
    """Installed versions, read from package metadata: importing unsloth would patch transformers."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("transformers", "peft", "vllm", "unsloth"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


if __name__ == "__main__":
    sys.exit(main())
