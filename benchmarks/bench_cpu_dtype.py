"""float32 vs bfloat16 base on this CPU: the same smoke baseline step, side by side, per stage.

Where a CPU step's time goes and whether bf16 (AVX-512 BF16 / AMX on this machine's
CPU) makes it faster. `model.dtype=bfloat16` stores the frozen base in bf16; the LoRA factors stay
float32 masters and the LoRA term is computed in the base's dtype (`model/multilora.py`). Both runs
use the same seed tasks, the same prompts and greedy decoding, so they do the same work up to where
bf16 changes a token; the number of generated and trained tokens is printed beside each time so a
speed-up from shorter text is not mistaken for a faster kernel.

    python benchmarks/bench_cpu_dtype.py             # smoke preset, 2 timed steps per dtype
    python benchmarks/bench_cpu_dtype.py --quick     # tiny preset, 1 timed step (a smoke test)
    python benchmarks/bench_cpu_dtype.py --agent population --set rl.micro_batch=4
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from populora_nb.config import load_config
from populora_nb.model.base import load_base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.presets import parse_override
from populora_nb.state import initial_state, roster_for
from populora_nb.step import baseline_step, population_step
from populora_nb.step_records import token_counts
from populora_nb.verify import Verifier


def measure(preset: str, dtype: str, repeats: int, agent: str = "baseline", overrides: dict | None = None) -> dict:
    """Median step time, mean stage times and tokens per step (summed over members) of `repeats`
    steps of `agent` (after one warm-up step) with the base in `dtype`."""
    config = load_config(
        preset,
        {
            "model.dtype": dtype,
            "run.agent": agent,
            "sampling.temperature": 0.0,
            "evolution.enabled": False,
            **(overrides or {}),
        },
    )
    base = load_base(config)
    policy = LoRAPolicy.create(config, list(roster_for(config).items()), base=base)
    out: dict[str, float] = {}
    times: list[float] = []
    with Verifier.from_config(config.verifier) as verifier:
        state = initial_state(config, verifier)
        for i in range(repeats + 1):  # the first step warms caches and allocators
            state.step = i
            t0 = time.perf_counter()
            step = (baseline_step if agent == "baseline" else population_step)(policy, verifier, state, config)
            if not i:
                continue
            times.append(time.perf_counter() - t0)
            for k, v in step.timings.items():
                out[k] = out.get(k, 0.0) + v / repeats
            for counts in token_counts(step, base.tokenizer).values():
                for k, v in counts.items():
                    out[k] = out.get(k, 0.0) + v / repeats
    out["step_s"] = statistics.median(times)
    print(f"  {dtype}: base loaded as {base.dtype}, {len(times)} timed step(s)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--quick", action="store_true", help="tiny preset, 1 timed step")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--agent", choices=("baseline", "population"), default="baseline")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override (repeatable)")
    args = ap.parse_args()
    overrides = dict(parse_override(s) for s in args.set)
    preset, repeats = ("tiny", 1) if args.quick else (args.preset, args.repeats)
    torch.set_num_threads(args.threads)
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    isa = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    print(
        f"preset {preset}, {args.agent} step, overrides {overrides or 'none'}, {args.threads} threads, "
        f"CPU bf16 support: {', '.join(isa) or 'none'}"
    )
    results = {dtype: measure(preset, dtype, repeats, args.agent, overrides) for dtype in ("float32", "bfloat16")}
    keys = list(results["float32"])
    print(f"{'':28}{'float32':>12}{'bfloat16':>12}{'bf16/fp32':>11}")
    for k in keys:
        a, b = results["float32"][k], results["bfloat16"][k]
        ratio = f"{b / a:.2f}x" if a else "-"
        print(f"{k:28}{a:12.1f}{b:12.1f}{ratio:>11}")


if __name__ == "__main__":
    main()
