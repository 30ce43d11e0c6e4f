"""The population's update stage, one member at a time vs all members in one pass.

Builds the preset's population twice on one base (rl.update=sequential and rl.update=batched), gives
every member the rows a population step trains it on (each teacher: kinds x teacher proposals on
the preset's own proposer prompts; each student: kinds x tasks x rollouts on its solver prompts,
built from the packaged seed tasks), completions of the measured lengths with ±50% spread, and
signed advantages so every member takes a step. Then it times the update stage both ways, in
alternation, on the same rows, and prints the batched ÷ sequential ratio pair by pair with the
trained (completion) and processed (prompt + completion) tokens per second.

    python benchmarks/bench_update.py                 # smoke preset: SmolLM2-135M, 4T+4S, CPU
    python benchmarks/bench_update.py --preset cpu    # the laptop protocol's counts and bf16 base
    python benchmarks/bench_update.py --quick         # tiny preset, one pair, seconds
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from populora_nb.buffers import load_seed_triplets
from populora_nb.config import ExperimentConfig, load_config
from populora_nb.model.base import Base, load_base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Sample
from populora_nb.prompts import propose_prompt, render, solve_prompt
from populora_nb.state import roster_for
from populora_nb.tasks import Task


def seed_tasks(kind: str) -> list[Task]:
    return [Task(kind, s["program"], tuple(s["inputs"][:1]), tuple(s["outputs"][:1])) for s in load_seed_triplets()]


def step_rows(config: ExperimentConfig, base: Base, lengths: tuple[int, int], seed: int) -> dict[str, list[Sample]]:
    """Each member's rows of one population step: its real prompts, random completions of the
    measured lengths (±50%), advantages ±1."""
    rng = random.Random(seed)
    tok, fmt, rl = base.tokenizer, config.tasks.prompt_format, config.rl
    vocab = len(tok)
    out: dict[str, list[Sample]] = {}
    for member, role in roster_for(config).items():
        prompts = []
        for kind in config.tasks.kinds:
            tasks = seed_tasks(kind)
            if role == "teacher":
                for _ in range(rl.teacher_proposals):
                    refs = rng.sample(tasks, config.tasks.n_references)
                    prompts.append((render(propose_prompt(kind, refs, style=config.tasks.prompt_style), tok, fmt), 0))
            else:
                for _ in range(rl.student_tasks):
                    task, example = rng.sample(tasks, 2)
                    prompts += [(render(solve_prompt(task, example), tok, fmt), 1)] * rl.rollouts
        rows = []
        for i, (text, solve) in enumerate(prompts):
            n = max(1, round(lengths[solve] * rng.uniform(0.5, 1.5)))
            ids = (
                tuple(tok(text, add_special_tokens=False)["input_ids"]),
                tuple(rng.randrange(vocab) for _ in range(n)),
            )
            rows.append(Sample(member, text, "", 0.0, (member,), 1.0 if i % 2 == 0 else -1.0, ids))
        out[member] = rows
    return out


def timed(policy: LoRAPolicy, rows: dict[str, list[Sample]]) -> float:
    started = time.perf_counter()
    stats = policy.update_members(rows)
    seconds = time.perf_counter() - started
    if any(s.get("optim/skipped") for s in stats.values()) or stats.keys() != rows.keys():
        raise RuntimeError("every member must take a step")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--quick", action="store_true", help="tiny preset, one pair")
    ap.add_argument("--pairs", type=int, default=3, help="timed (sequential, batched) pairs after one warm-up pair")
    ap.add_argument("--propose-tokens", type=int, default=48, help="mean proposal length (smoke-27: 48)")
    ap.add_argument("--solve-tokens", type=int, default=14, help="mean answer length (smoke-27: 14)")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    preset, pairs = ("tiny", 1) if args.quick else (args.preset, args.pairs)
    torch.set_num_threads(args.threads)
    # --quick: tiny's full AZR prompts (~1,000 tokens) would make even the check take a minute
    settings = {"run.agent": "population", "probe.every": 0}
    settings |= {"tasks.prompt_style": "short", "tasks.n_references": 1} if args.quick else {}
    config = load_config(preset, settings)
    base = load_base(config)
    rows = step_rows(config, base, (args.propose_tokens, args.solve_tokens), seed=0)
    n_rows = sum(len(r) for r in rows.values())
    trained = sum(len(s.token_ids[1]) for r in rows.values() for s in r if s.token_ids)
    processed = trained + sum(len(s.token_ids[0]) for r in rows.values() for s in r if s.token_ids)
    policies = {}
    for mode in ("sequential", "batched"):
        cfg = load_config(preset, {**settings, "rl.update": mode})
        policies[mode] = LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=base)
    print(
        f"preset {preset}: {config.model.name} ({config.model.dtype}) on {base.device}, {args.threads} threads; "
        f"{len(rows)} members, {n_rows} rows, {trained} trained / {processed} processed tokens per update stage, "
        f"micro-batch {config.rl.micro_batch} rows"
    )
    times: dict[str, list[float]] = {"sequential": [], "batched": []}
    for i in range(pairs + 1):  # pair 0 warms allocators and caches
        order = ("sequential", "batched") if i % 2 == 0 else ("batched", "sequential")
        for mode in order:
            seconds = timed(policies[mode], rows)
            if i:
                times[mode].append(seconds)
    ratios = [b / s for s, b in zip(times["sequential"], times["batched"])]
    for mode, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{mode:>10}: {med:7.2f} s (median of {len(ts)}; {min(ts):.2f}-{max(ts):.2f}), "
            f"{trained / med:7.1f} trained tok/s, {processed / med:8.1f} processed tok/s"
        )
    print(
        f"batched / sequential = {statistics.median(ratios):.2f}x (median of {len(ratios)} pairs; "
        f"pairs: {', '.join(f'{r:.2f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
