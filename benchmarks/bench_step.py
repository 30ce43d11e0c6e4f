"""One population step over one baseline step at per-adapter compute matching, from one run.

Per-adapter compute matching (PopuLoRA §4): every member of the 4T+4S population gets the samples
and updates the single AZR agent gets, so a population step does 8x the adapter work of a baseline
step. The paper reports a 1.31x wall-clock overhead on GPU, where the mixed-adapter batches fill the
hardware; on a CPU, compute-bound, the ratio is closer to the work ratio. Both steps run here on
the same base, the same seed tasks and the same prompts, after one warm-up step each.

    python benchmarks/bench_step.py                # smoke preset (SmolLM2-135M), CPU
    python benchmarks/bench_step.py --preset gpu   # on a GPU
    python benchmarks/bench_step.py --quick        # tiny preset, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import torch

from populora_nb.config import load_config
from populora_nb.model.base import load_base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.state import initial_state, roster_for
from populora_nb.step import baseline_step, population_step
from populora_nb.verify import Verifier


def time_steps(step_fn, policy, verifier, config, repeats: int) -> tuple[list[float], dict[str, float]]:
    state = initial_state(config, verifier)
    times, parts = [], {}
    for i in range(repeats + 1):  # the first step warms caches and allocators
        state.step = i
        t0 = time.perf_counter()
        out = step_fn(policy, verifier, state, config)
        if i:
            times.append(time.perf_counter() - t0)
            for k, v in out.timings.items():
                parts[k] = parts.get(k, 0.0) + v / repeats
    return times, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--quick", action="store_true", help="tiny preset, 1 timed step")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    preset, repeats = ("tiny", 1) if args.quick else (args.preset, args.repeats)
    torch.set_num_threads(args.threads)
    config = load_config(preset, {"evolution.enabled": False})
    base = load_base(config)
    print(
        f"preset {preset}: {config.model.name} on {base.device}, {args.threads} threads, "
        f"{config.rl.proposals_per_kind} proposals/kind x {len(config.tasks.kinds)} kinds, "
        f"{config.rl.rollouts} rollouts, "
        f"{config.sampling.propose_max_new_tokens}/{config.sampling.solve_max_new_tokens} new tokens"
    )
    results = {}
    with Verifier.from_config(config.verifier) as verifier:
        for agent, step_fn in (("baseline", baseline_step), ("population", population_step)):
            cfg = dataclasses.replace(config, run=dataclasses.replace(config.run, agent=agent))
            policy = LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=base)
            # Sampling would make the two steps write different amounts; greedy keeps lengths comparable.
            cfg = dataclasses.replace(cfg, sampling=dataclasses.replace(cfg.sampling, temperature=0.0))
            policy.config = cfg
            times, parts = time_steps(step_fn, policy, verifier, cfg, repeats)
            results[agent] = (statistics.median(times), parts, len(policy.members))
            print(
                f"{agent:>10}: {len(policy.members)} adapter(s), step {statistics.median(times):6.1f} s "
                f"(median of {len(times)}); " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
            )
    (tb, _, _), (tp, _, npop) = results["baseline"], results["population"]
    print(
        f"population step / baseline step = {tp / tb:.2f}x for {npop}x the adapter work "
        f"(paper, GPU: 1.31x); per adapter: {tp / npop / tb:.2f}x the baseline's time"
    )


if __name__ == "__main__":
    main()
