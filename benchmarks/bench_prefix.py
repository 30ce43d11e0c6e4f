"""Each prompt processed once (rl.share_prompts) against every row through its own prompt pass.

One population step's rows of the preset (`bench_update.step_rows`: each teacher's proposer prompts,
each student's solver prompts times k rollouts, the preset's counts), run through the three model
stages of a step by two policies on one base, one with rl.share_prompts=true and one with false:
propose (the teachers' generation), solve (the students' k rollouts of each task, one batch) and
update (every member's policy-gradient update on the step's rows, random completions of the measured
lengths). Generation decodes a fixed number of tokens per row (the measured mean lengths, EOS
ignored), so both arms do the same work; the samples are the same by construction (tests/test_shared_prompt.py).

The arms alternate in one process, pair by pair, their order swapped every pair, after one warm-up
pair: the machine is shared with other jobs, so only ratios taken side by side mean anything. Per
arm and stage it prints the median seconds, the peak RSS within the stage and its rise over the RSS
before it (the prefill's or the update's transient; "per row" divides it by the stage's rows), the
token positions the model processed (an embedding hook: padding included, what the matmuls run
over), and the FLOP floor: the time this machine, at its measured matrix-multiply throughput in
the model's dtype, needs for those positions (2 x the decoder's parameters per position forward,
twice that under gradient: the frozen base's input gradients; plus the head on the rows it scores),
and the stage's share of that floor (floor / measured). glibc's mmap threshold is fixed at 64 KiB
(the script re-executes itself so) so freed buffers return to the kernel and each stage's peak is its own.

    python benchmarks/bench_prefix.py --preset cpu      # the laptop protocol's rows, bf16 base
    python benchmarks/bench_prefix.py --preset cpu --members 1   # one teacher's and one student's rows
    python benchmarks/bench_prefix.py --preset smoke    # the same rows: smoke runs the cpu preset's step
    python benchmarks/bench_prefix.py --quick           # tiny preset, one pair, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import psutil
import torch
from bench_update import step_rows

from populora_nb.config import ExperimentConfig, load_config
from populora_nb.model.base import Base, load_base
from populora_nb.model.multilora import decoder_layers
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Sample
from populora_nb.state import roster_for
from populora_nb.step_records import peak_memory_gb, reset_peak_memory

STAGES = ("propose", "solve", "update")
ARMS = ("shared", "unshared")


def matmul_flops(dtype: torch.dtype, n: int = 1024, seconds: float = 1.0) -> float:
    """This machine's measured matrix-multiply throughput (FLOP/s) in ``dtype``, the best of a few runs."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


class Positions:
    """Token positions the model's embedding sees (padding included), under gradient or not."""

    def __init__(self, base: Base) -> None:
        self.counts = {"forward": 0, "training": 0}
        base.model.get_input_embeddings().register_forward_hook(self._seen)

    def _seen(self, module, args, out) -> None:
        self.counts["training" if torch.is_grad_enabled() else "forward"] += int(args[0].numel())

    def take(self) -> dict[str, int]:
        out, self.counts = self.counts, {"forward": 0, "training": 0}
        return out


def stage_jobs(rows: dict[str, list[Sample]], policy: LoRAPolicy) -> dict[str, list[tuple[str, str]]]:
    """(member, prompt) per generated row: the teachers' proposals, the students' rollouts."""
    role = {m: policy.population.member(m).role for m in rows}
    return {
        "propose": [(s.member, s.prompt) for m, r in rows.items() if role[m] == "teacher" for s in r],
        "solve": [(s.member, s.prompt) for m, r in rows.items() if role[m] == "student" for s in r],
    }


def run_arm(
    policy: LoRAPolicy,
    rows: dict[str, list[Sample]],
    jobs: dict[str, list[tuple[str, str]]],
    new_tokens: dict[str, int],
    positions: Positions,
) -> dict[str, dict[str, float]]:
    """One step's three stages: seconds, peak RSS and its rise (GB), processed positions."""
    actions: dict[str, Callable[[], object]] = {
        stage: (lambda s=stage: policy.generate([m for m, _ in jobs[s]], [p for _, p in jobs[s]], new_tokens[s], 7))
        for stage in ("propose", "solve")
    }
    actions["update"] = lambda: policy.update_members(rows)
    out = {}
    for stage in STAGES:
        before = psutil.Process().memory_info().rss / 2**30
        reset_peak_memory()
        positions.take()
        t0 = time.perf_counter()
        actions[stage]()
        seconds = time.perf_counter() - t0
        peak = peak_memory_gb()["memory/peak_rss_gb"]
        out[stage] = {"s": seconds, "peak_gb": peak, "rise_gb": peak - before, **positions.take()}
    return out


def flops(stage: str, counts: dict[str, float], body: int, head: int, head_rows: int) -> float:
    """FLOPs of a stage's processed positions: 2·body per position forward, 4·body under gradient,
    and the head (2·head per row, 4·head under gradient) on the rows it scores or samples from."""
    per_head = 4 * head if stage == "update" else 2 * head
    return 2 * body * counts["forward"] + 4 * body * counts["training"] + per_head * head_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--quick", action="store_true", help="tiny preset, short prompts, 2 + 2 members, one pair")
    ap.add_argument("--pairs", type=int, default=3, help="timed (shared, unshared) pairs after one warm-up pair")
    ap.add_argument("--propose-tokens", type=int, default=37, help="proposal length (cpu: 37; smoke-27: 48)")
    ap.add_argument("--solve-tokens", type=int, default=13, help="answer length (cpu: 13; smoke-27: 14)")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument(
        "--members",
        type=int,
        default=None,
        help="teachers = students = this many (default: the preset's); each keeps the preset's rows per member",
    )
    args = ap.parse_args()
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":  # each stage's peak its own (module docstring)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
    preset, pairs = ("tiny", 1) if args.quick else (args.preset, args.pairs)
    torch.set_num_threads(args.threads)
    settings = {"run.agent": "population", "probe.every": 0, "sampling.ignore_eos": True, "evolution.enabled": False}
    members = 2 if args.quick else args.members  # --quick: 2 + 2 members, so CI's check stays well under a minute
    if members:
        settings |= {"population.n_teachers": members, "population.n_students": members}
    settings |= (
        {"tasks.prompt_style": "short", "tasks.n_references": 1, "tasks.kinds": ["code_i"]} if args.quick else {}
    )
    config: ExperimentConfig = load_config(preset, settings)
    base = load_base(config)
    lengths = (args.propose_tokens, args.solve_tokens) if not args.quick else (8, 4)
    rows = step_rows(config, base, lengths, seed=0)
    policies = {
        arm: LoRAPolicy.create(
            load_config(preset, {**settings, "rl.share_prompts": arm == "shared"}),
            list(roster_for(config).items()),
            base=base,
        )
        for arm in ARMS
    }
    jobs = stage_jobs(rows, policies["shared"])
    new_tokens = {"propose": lengths[0], "solve": lengths[1]}
    n_rows = {"propose": len(jobs["propose"]), "solve": len(jobs["solve"]), "update": sum(map(len, rows.values()))}
    trained = sum(len(s.token_ids[1]) for r in rows.values() for s in r if s.token_ids)
    head_rows = {"propose": n_rows["propose"] * lengths[0], "solve": n_rows["solve"] * lengths[1], "update": trained}
    model = base.model
    body = sum(p.numel() for p in decoder_layers(model).parameters())
    head = model.get_output_embeddings().weight.numel()
    dtype = next(model.parameters()).dtype
    peak_flops = matmul_flops(dtype)
    positions = Positions(base)
    print(
        f"preset {preset}: {config.model.name} ({config.model.dtype}) on {base.device}, {args.threads} threads, "
        f"shared machine; rows per step: {n_rows['propose']} proposals x {lengths[0]} new tokens, "
        f"{n_rows['solve']} rollouts (k = {config.rl.rollouts}) x {lengths[1]}, {n_rows['update']} trained "
        f"({trained} completion tokens), micro-batch {config.rl.micro_batch}; decoder {body / 1e6:.1f}M + head "
        f"{head / 1e6:.1f}M params; matmul throughput {peak_flops / 1e9:.1f} GFLOP/s ({dtype})"
    )
    runs: dict[str, list[dict[str, dict[str, float]]]] = {arm: [] for arm in ARMS}
    for i in range(pairs + 1):  # pair 0 warms allocators and caches
        for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
            result = run_arm(policies[arm], rows, jobs, new_tokens, positions)
            said = ", ".join(
                f"{s} {result[s]['s']:.1f} s (peak {result[s]['peak_gb']:.2f} GB, rise {result[s]['rise_gb']:.2f})"
                for s in STAGES
            )
            print(f"pair {i}{' (warm-up)' if not i else ''} {arm}: {said}", flush=True)
            if i:
                runs[arm].append(result)
    step: dict[str, list[float]] = {arm: [sum(r[s]["s"] for s in STAGES) for r in runs[arm]] for arm in ARMS}
    print("| arm | stage | s (median) | peak RSS GB | rise GB | MB/row | positions fwd / train | floor s | floor / s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in ARMS:
        for stage in STAGES:
            med = {k: statistics.median(r[stage][k] for r in runs[arm]) for k in runs[arm][0][stage]}
            floor = flops(stage, med, body, head, head_rows[stage]) / peak_flops
            print(
                f"| {arm} | {stage} | {med['s']:.2f} | {med['peak_gb']:.2f} | {med['rise_gb']:.2f} | "
                f"{med['rise_gb'] * 1024 / n_rows[stage]:.1f} | {med['forward']:.0f} / {med['training']:.0f} | "
                f"{floor:.2f} | {floor / med['s']:.2f} |"
            )
        peak = max(r[s]["peak_gb"] for r in runs[arm] for s in STAGES)
        print(f"| {arm} | step | {statistics.median(step[arm]):.2f} | {peak:.2f} | | | | | |")
    for stage in STAGES:
        ratios = [a[stage]["s"] / b[stage]["s"] for a, b in zip(runs["shared"], runs["unshared"])]
        pairs_text = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"{stage} shared/unshared = {statistics.median(ratios):.2f}x (pairs: {pairs_text})")
    ratios = [a / b for a, b in zip(step["shared"], step["unshared"])]
    print(f"step pairs: {', '.join(f'{r:.2f}' for r in ratios)} (shared/unshared, the median below)")
    print(f"population step shared/unshared = {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
