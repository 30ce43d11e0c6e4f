"""Rollout throughput: the native multi-LoRA decoder against the vLLM engine, in one run.

    .venv/bin/python benchmarks/bench_rollouts.py                    # SmolLM2-135M fp32, batch 8, 128 tokens
    .venv/bin/python benchmarks/bench_rollouts.py --dtype bfloat16   # as the `cpu` preset runs
    .venv/bin/python benchmarks/bench_rollouts.py --quick            # tiny model, 16 tokens: a dry run

The same 8 chat prompts go through both engines three ways: the bare base, one adapter on all 8 rows,
and a mixed batch with a different member on every row (8 members, rank 8, random nonzero factors
so every adapter changes the output). The native path is ``Population.generate`` (the base path is
``model.decoding.decode`` with no routing, as benchmarks/bench_adapters.py measures "our loop
base"); the vLLM path is ``model.vllm_engine.VLLMEngine`` with the very same factors pushed in.
Every row makes exactly ``--new-tokens`` tokens (no stop tokens, greedy), so tokens/s compare like
for like. Runs are interleaved (rotating order) and repeated; medians are reported.

Both engines get the same cores (all of this process's, 2 on the CPU box): the native decoder runs
in this process on torch's threads (``--threads``, default every core); vLLM V1 runs its engine core
(scheduler and model worker, ``distributed_executor_backend="uni"``) in its own process, and
``--vllm-bind all`` (the default, as ``VLLMEngine`` does) sets ``VLLM_CPU_OMP_THREADS_BIND`` so its
OpenMP threads use those same cores; ``--vllm-bind auto`` is vLLM's own default. Only one engine
works at a time. Wall time is the measure (tokens/s); CPU seconds (this process plus its children,
i.e. vLLM's process) are printed beside it.

Also timed: the engine's start (``VLLMEngine.load_s``: model load, profiling, KV cache) and the two
weight-sync methods, ``rollout.sync="new_id"`` (a fresh adapter id, the old one dropped) and
``"inplace"`` (vLLM's ``load_inplace`` under the same id): seconds per ``push`` of one member,
median over ``--pushes`` alternating pushes of fresh factors. After the pushes the member's
original factors go back in place and its greedy row is compared with the native one again, so an
in-place reload that did not take effect would show.

Correctness: every greedy row of vLLM's mixed and base batches is compared token by token with native's.

Measured on the 2-core CPU box, nothing else running (loadavg 0.5 before, 2.0 during: this run's own
two threads), vllm-cpu 0.32.0, torch 2.13.0, transformers 5.19.0, SmolLM2-135M, 8 members r = 8 on
q,k,v,o,gate,up,down, batch 8, 128 tokens, 2026-12-01:

    fp32, --repeats 3, worker bound to both cores (the default)
    | engine | base tok/s | one adapter tok/s | mixed 8 tok/s | mixed / one | start s | sync new_id s | sync inplace s |
    |---|---:|---:|---:|---:|---:|---:|---:|
    | native | 73.2 | 61.9 | 58.3 | 0.941x | - | - | - |
    | vLLM | 87.1 | 46.8 | 42.3 | 0.903x | 30.1 | 0.067 | 0.066 |
    | vLLM / native | 1.19x | 0.76x | 0.73x | | | | |
    correctness: 8/8 mixed rows and 8/8 base rows token-identical (128/128), also after in-place reloads

    fp32, --repeats 1, --vllm-bind auto (vLLM's default): native 73.5 / 65.1 / 57.5, vLLM 66.6 / 46.6 / 40.4
    bf16 (--dtype bfloat16), --repeats 1: native 104.5 / 83.8 / 71.8, vLLM 143.4 / 58.7 / 52.3 tok/s
    (base / one adapter / mixed); in bf16 the engines' greedy rows part after a few dozen tokens
    (different bf16 kernels), as expected.

So on this CPU vLLM's base model is faster (1.2x fp32, 1.4x bf16) but its CPU LoRA kernels are not:
with adapters it generates at 0.7x of the native mixed-adapter decoder, mixed or single. The CPU
presets therefore keep ``rollout.engine="native"``; ``gpu`` and ``paper`` use vLLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from bench_adapters import QUESTIONS  # the same prompts, so the two benchmarks compare

from populora_nb.config import load_config
from populora_nb.lowrank import LoRAFactors, LoRAPair
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.base import load_base
from populora_nb.model.batch import left_pad
from populora_nb.model.decoding import decode

WAYS = ("base", "one adapter", "mixed")
CORES = sorted(os.sched_getaffinity(0))


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and every live descendant (vLLM's engine core)."""
    try:
        import psutil

        me = psutil.Process()
        total = sum(me.cpu_times()[:2])
        for child in me.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return total
    except ImportError:
        return time.process_time()


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    return time.perf_counter() - wall, cpu_seconds() - cpu, out


def random_factors(like: LoRAFactors, gen: torch.Generator, b_std: float) -> LoRAFactors:
    """Nonzero factors of ``like``'s shapes: A ~ N(0, 1/d_in) (kaiming-like), B ~ N(0, b_std)."""
    out = {}
    for name, pair in like.items():
        r, d_in = pair.A.shape
        a = torch.randn(r, d_in, generator=gen) / d_in**0.5
        b = torch.randn(pair.B.shape[0], r, generator=gen) * b_std
        out[name] = LoRAPair(a.to(pair.A.dtype), b.to(pair.B.dtype))
    return out


def leading_same(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="smoke", help="smoke: the bundled SmolLM2-135M; tiny: a quick dry run")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=8, help="rows per batch = members in the mixed batch")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pushes", type=int, default=5, help="pushes per sync method")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--b-std", type=float, default=0.02, help="std of the random B factors")
    ap.add_argument("--threads", type=int, default=len(CORES), help="torch threads of the native path")
    ap.add_argument(
        "--vllm-bind",
        default="all",
        help="all: vLLM's worker on the same cores as the native path; auto: vLLM's default binding; "
        "or a VLLM_CPU_OMP_THREADS_BIND value such as 0-1",
    )
    ap.add_argument("--quick", action="store_true", help="a dry run: tiny preset, 16 tokens, 1 repeat, 3 pushes")
    args = ap.parse_args()
    if args.quick:
        args.preset, args.new_tokens, args.repeats, args.pushes = "tiny", 16, 1, 3
    torch.set_num_threads(args.threads)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress shows when piped to a file
    print(
        f"machine: {os.cpu_count()} cores ({len(CORES)} usable), native torch threads {args.threads}; "
        f"loadavg at start {loadavg()}"
    )

    cfg = load_config(args.preset, {"model.dtype": args.dtype, "lora.rank": args.rank})
    base = load_base(cfg)
    tok = base.tokenizer
    pop = Population.create(base, roles_for(args.batch // 2, args.batch - args.batch // 2), cfg.lora, seed=0)
    members = pop.ids()
    gen = torch.Generator().manual_seed(0)
    for m in members:
        pop.set_factors(m, random_factors(pop.factors(m), gen, args.b_std))
    prompts = [
        tok(
            tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
        for q in (QUESTIONS * args.batch)[: args.batch]
    ]
    ids, mask = left_pad(prompts, tok.pad_token_id, base.device)
    n_new, batch = args.new_tokens, args.batch
    print(
        f"model {base.name}: {base.n_parameters / 1e6:.1f}M params, {str(base.dtype).removeprefix('torch.')}; "
        f"{len(members)} members r={cfg.lora.rank} alpha={cfg.lora.alpha} on {len(pop.multi.modules)} modules, "
        f"B ~ N(0, {args.b_std}); batch {batch}, prompt lengths {min(map(len, prompts))}-{max(map(len, prompts))}, "
        f"{n_new} new tokens per row, greedy, no stop tokens"
    )

    single = [members[0]] * batch
    runs: dict[tuple[str, str], Callable[[], list[list[int]]]] = {
        ("native", "base"): lambda: decode(base.model, ids, mask, n_new, [], tok.pad_token_id)[0].tolist(),
        ("native", "one adapter"): lambda: [
            g.completion_ids for g in pop.generate(single, prompts, n_new, stop_token_ids=[])
        ],
        ("native", "mixed"): lambda: [
            g.completion_ids for g in pop.generate(members, prompts, n_new, stop_token_ids=[])
        ],
    }

    engine = None
    if importlib.util.find_spec("vllm") is None:
        from populora_nb.model.vllm_engine import install_hint

        print(f"vLLM is not installed ({install_hint()}): native numbers only")
    else:
        from populora_nb.model.vllm_engine import VLLMEngine
        from populora_nb.model.vllm_setup import core_list

        if args.vllm_bind == "all":
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", core_list(CORES))
        else:  # "auto" is vLLM's own default (VLLMEngine binds every core unless this is set)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = args.vllm_bind
        print(f"vLLM worker binding: VLLM_CPU_OMP_THREADS_BIND={os.environ.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')}")

        max_len = max(map(len, prompts)) + n_new + 8
        engine = VLLMEngine(base, cfg.lora, cfg.rollout, max_loras=len(members), max_model_len=max_len, seed=0)
        torch.set_num_threads(args.threads)  # in case importing vLLM touched this process's threads
        first_push = [engine.push(m, pop.factors(m)) for m in members]
        print(
            f"vLLM engine started in {engine.load_s:.1f} s (max_model_len {max_len}, "
            f"KV cache {cfg.rollout.cpu_kv_cache_gib} GiB); first push of {len(members)} adapters "
            f"{sum(first_push):.2f} s; native torch threads now {torch.get_num_threads()}"
        )

        def vllm_run(adapters: list[str | None]) -> Callable[[], list[list[int]]]:
            return lambda: [
                o.completion_ids for o in engine.generate(adapters, prompts, n_new, temperature=0.0, stop_token_ids=[])
            ]

        runs[("vLLM", "base")] = vllm_run([None] * batch)
        runs[("vLLM", "one adapter")] = vllm_run(list(single))
        runs[("vLLM", "mixed")] = vllm_run(list(members))

    try:
        outputs: dict[tuple[str, str], list[list[int]]] = {}
        with torch.no_grad():
            for k, fn in runs.items():  # warm-up (and the outputs checked below), not timed
                outputs[k] = fn()  # type: ignore[assignment]
        for k, rows in outputs.items():
            lengths = {len(r) for r in rows}
            assert lengths == {n_new}, f"{k}: rows of {lengths} tokens, expected exactly {n_new}"
        results: dict[tuple[str, str], list[tuple[float, float]]] = {k: [] for k in runs}
        order = list(runs)
        for rep in range(args.repeats):
            for k in order[rep % len(order) :] + order[: rep % len(order)]:  # rotate: no run always goes first
                with torch.no_grad():
                    wall, cpu, _ = timed(runs[k])
                results[k].append((wall, cpu))
            print(f"  repeat {rep + 1}/{args.repeats} done; loadavg {loadavg()}")

        sync: dict[str, list[float]] = {"new_id": [], "inplace": []}
        sync_check = ""
        if engine is not None:
            m0 = members[0]
            original = pop.factors(m0)
            for _ in range(args.pushes):  # alternate the methods, fresh factors every push
                for method in sync:
                    engine.rollout = dataclasses.replace(cfg.rollout, sync=method)
                    sync[method].append(engine.push(m0, random_factors(original, gen, args.b_std)))
            engine.rollout = dataclasses.replace(cfg.rollout, sync="inplace")
            engine.push(m0, original)  # the last new_id push left other factors under another id
            again = engine.generate([m0], prompts[:1], n_new, temperature=0.0, stop_token_ids=[])[0].completion_ids
            want = outputs[("native", "mixed")][0]
            sync_check = (
                f"after the pushes, original factors reloaded in place: vLLM row 0 "
                f"{'token-identical to' if again == want else 'DIFFERS from'} native "
                f"({leading_same(again, want)}/{n_new} leading tokens equal)"
            )
    finally:
        if engine is not None:
            engine.close()

    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in results.items()}
    tps = {k: batch * n_new / w for k, (w, _) in med.items()}
    engines = ["native"] + (["vLLM"] if engine is not None else [])

    title = f"generation, {batch} x {n_new} tokens (median of {args.repeats})"
    print(f"\n{title:<44} {'wall s':>8} {'cpu s':>8} {'tok/s':>8}")
    for k, (w, c) in med.items():
        print(f"{k[0] + ': ' + k[1]:<44} {w:8.2f} {c:8.2f} {tps[k]:8.1f}")

    print("\nratios of tokens/s (wall)")
    for e in engines:
        print(
            f"  {e:<6} mixed / one adapter {tps[(e, 'mixed')] / tps[(e, 'one adapter')]:.3f}x, "
            f"one adapter / base {tps[(e, 'one adapter')] / tps[(e, 'base')]:.3f}x"
        )
    if engine is not None:
        for way in WAYS:
            print(f"  vLLM / native, {way:<12} {tps[('vLLM', way)] / tps[('native', way)]:.2f}x")

        print(f"\nweight sync, seconds per push of one member (median of {args.pushes}; all pushes)")
        for method, secs in sync.items():
            print(f"  {method:<8} {statistics.median(secs):.3f} s   [{', '.join(f'{s:.3f}' for s in secs)}]")

        ours, theirs = outputs[("native", "mixed")], outputs[("vLLM", "mixed")]
        same_rows = sum(a == b for a, b in zip(ours, theirs))
        lead = leading_same(ours[0], theirs[0])
        print(
            f"\ncorrectness: greedy mixed-batch row 0 (member {members[0]}) vLLM vs native: "
            f"{'token-identical' if ours[0] == theirs[0] else 'DIFFERENT'} ({lead}/{n_new} leading tokens equal); "
            f"{same_rows}/{batch} mixed rows identical"
        )
        base_same = sum(a == b for a, b in zip(outputs[("native", "base")], outputs[("vLLM", "base")]))
        print(f"             base rows identical: {base_same}/{batch}; {sync_check}")

    print(f"\nloadavg at end {loadavg()}")
    dt = str(base.dtype).removeprefix("torch.")
    print(
        f"\n{base.name} {dt}, batch {batch} x {n_new} new tokens, greedy; tokens/s (wall), median of {args.repeats}\n"
    )
    print(
        "| engine | base tok/s | one adapter tok/s | mixed 8 tok/s | mixed / one "
        "| start s | sync new_id s | sync inplace s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for e in engines:
        start = f"{engine.load_s:.1f}" if e == "vLLM" and engine is not None else "-"
        syncs = (
            [f"{statistics.median(sync[m]):.3f}" for m in sync] if e == "vLLM" and engine is not None else ["-", "-"]
        )
        print(
            f"| {e} | {tps[(e, 'base')]:.1f} | {tps[(e, 'one adapter')]:.1f} | {tps[(e, 'mixed')]:.1f} | "
            f"{tps[(e, 'mixed')] / tps[(e, 'one adapter')]:.3f}x | {start} | {syncs[0]} | {syncs[1]} |"
        )
    if engine is not None:
        r = [tps[("vLLM", w)] / tps[("native", w)] for w in WAYS]
        print(f"| vLLM / native | {r[0]:.2f}x | {r[1]:.2f}x | {r[2]:.2f}x | | | | |")
    else:
        print("| vLLM / native | n/a | n/a | n/a | | | | |")


if __name__ == "__main__":
    main()
