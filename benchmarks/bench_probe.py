"""The difficulty probe's choices, measured at step 0: which solver, rollouts, temperature and scoring
put the probe's step-0 tasks in 0 < ρ < 1 often enough for the probe to move both ways.

    .venv/bin/python benchmarks/bench_probe.py --warmup runs/pilot-new-tasks/control/warmup \\
        --step-seconds 12.3 51.9 --out docs/results/probe-choice     # the cpu preset's warm-up adapter
    .venv/bin/python benchmarks/bench_probe.py --quick                   # tiny model: a dry run

At step 0 every proposer of both runs is the same adapter (the shared warm-up), so one measurement
serves both runs: the warm-up adapter answers ``--prompts`` probe prompts (the probe's fixed
references and seed, `probe.fixed_config`), the verifier keeps the valid tasks, and each solver
choice attempts every valid task ``--rollouts`` times, in rounds of ``--round`` rollouts under their
own seeds (the rounds' samples are independent draws, so the first k of them are a k-rollout probe,
and each round is timed). Read per choice, over the valid tasks:

* the **band share**: tasks with 0 < ρ < 1 (the aim: >= 30% of >= 40 valid tasks per run), its
  95% Wilson interval (the tasks answer distinct prompts: independent draws at step 0), and the ρ = 0
  share (the floor);
* **pass@k scoring** from all rollouts (the unbiased estimator 1 − C(n−c, k)/C(n, k)): a task is in
  its band when 0 < pass@k < 1, i.e. c >= 1 and n − c >= k; it is a monotone map of the count c,
  so it cannot lift a task off ρ = 0, and is measured to show that;
* the **cost** of one probe event (proposing and the solves at that choice, measured seconds) over
  ``probe.every`` steps of each run's step seconds (``--step-seconds``: baseline and population,
  from a run on the same machine at the same time), at every = 5 and 10.

Solvers: ``warm-up`` (the probe's frozen solver, `probe.PROBE_SOLVER`: the starting adapter) and
``base`` (zero ΔW: the base model). Temperatures: ``--temperatures``. The prompts needed for 40 valid
tasks follow from the valid rate. Wall times are from whatever else the machine ran at the time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import torch

from populora_nb.analysis.liveness import share_interval
from populora_nb.config import ExperimentConfig, load_config
from populora_nb.copies import known_fingerprints, mark_copies
from populora_nb.lowrank import LoRAPair
from populora_nb.model.policy import LoRAPolicy
from populora_nb.probe import PROBE_SOLVER, fixed_config
from populora_nb.solve_batches import worked_examples
from populora_nb.stages import SolveJob, propose, solve, validate
from populora_nb.state import seed_buffers
from populora_nb.tasks import Task
from populora_nb.verify import Verifier

BASE_SOLVER = "base-solver"
TARGET_SHARE, TARGET_VALID = 0.30, 40


def in_band_pass_at_k(c: int, n: int, k: int) -> bool:
    """0 < pass@k < 1 for c correct of n samples: c >= 1 and n − c >= k (below that the estimator is 1)."""
    return c >= 1 and n - c >= k


def pass_at_k(c: int, n: int, k: int) -> float:
    """The unbiased pass@k estimator 1 − C(n−c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def with_temperature(config: ExperimentConfig, temperature: float) -> ExperimentConfig:
    return dataclasses.replace(config, sampling=dataclasses.replace(config.sampling, temperature=temperature))


def solve_rounds(policy, verifier, tasks, solver, config, refs, rollouts, per_round, chunk):
    """Per task, its rollouts' verdicts (True = correct) in order; and the seconds of each round."""
    verdicts: list[list[bool]] = [[] for _ in tasks]
    seconds = []
    for r in range(rollouts // per_round):
        started = time.perf_counter()
        for lo in range(0, len(tasks), chunk):
            jobs = [SolveJob(solver, t, lo + i, per_round, train=False) for i, t in enumerate(tasks[lo : lo + chunk])]
            for a in solve(policy, verifier, jobs, config, r, worked_examples(refs)):
                verdicts[a.proposed_index].append(a.status == "correct")
        seconds.append(time.perf_counter() - started)
    return verdicts, seconds


def band_row(name, verdicts, k, seconds):
    attempted = [v[:k] for v in verdicts if len(v) >= k]
    n = len(attempted)
    band = sum(0 < sum(v) < k for v in attempted)
    zero = sum(sum(v) == 0 for v in attempted)
    low, high = share_interval(band, n) if n else (math.nan, math.nan)
    rho = sum(sum(v) / k for v in attempted) / n if n else math.nan
    return {"choice": name, "k": k, "tasks": n, "band": band, "zero": zero, "band_low": low, "band_high": high}, {
        "rho": rho,
        "solve_s": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--warmup", type=Path, default=None, help="the warm-up directory (lora.warmup); none: base")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--rollouts", type=int, default=32)
    ap.add_argument("--round", type=int, default=8, help="rollouts per timed round")
    ap.add_argument(
        "--choices",
        nargs="+",
        default=["warm-up:0.7", "warm-up:1.0", "base:0.7"],
        help="solver:temperature[:rollouts]; solver is warm-up (the probe's frozen solver) or base (zero ΔW)",
    )
    ap.add_argument("--chunk", type=int, default=8, help="tasks per solve batch (memory)")
    ap.add_argument("--step-seconds", type=float, nargs=2, default=None, metavar=("BASELINE", "POPULATION"))
    ap.add_argument("--out", type=Path, default=None, help="where choice.md and choice.json go")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny preset, 8 prompts, 4 rollouts")
    ap.add_argument("--render", type=Path, default=None, help="a choice.json: write its table again (--step-seconds)")
    args = ap.parse_args()
    if args.render is not None:
        write_table(json.loads(args.render.read_text()), args.step_seconds, args.render.parent)
        return
    torch.set_num_threads(args.threads)
    if args.quick:
        args.preset, args.prompts, args.rollouts, args.round, args.choices = (
            "tiny",
            8,
            4,
            2,
            ["warm-up:0.7", "base:0.7"],
        )
    parts = [c.split(":") for c in args.choices]
    if any(len(p) not in (2, 3) or p[0] not in ("warm-up", "base") for p in parts):
        raise SystemExit(f"--choices: solver:temperature[:rollouts], solver warm-up or base; got {args.choices}")
    choices = [(p[0], float(p[1]), int(p[2]) if len(p) == 3 else args.rollouts) for p in parts]
    overrides = {"probe.every": 1, "run.agent": "baseline"}
    if args.warmup is not None:
        overrides["lora.warmup"] = str(args.warmup.resolve())
    config = load_config(args.preset, overrides)
    fixed = fixed_config(config)
    with Verifier.from_config(config.verifier) as verifier:
        policy = LoRAPolicy.create(config, [("agent", "agent"), (BASE_SOLVER, "student")])
        zero = {n: LoRAPair(f.A, torch.zeros_like(f.B)) for n, f in policy.population.factors(BASE_SOLVER).items()}
        policy.population.set_factors(BASE_SOLVER, zero)
        refs = seed_buffers(config, verifier)
        started = time.perf_counter()
        proposals = validate(
            verifier, propose(policy, ["agent"], refs, fixed, 0, args.prompts), config.tasks.code_f_inputs
        )
        propose_s = time.perf_counter() - started
        proposals = mark_copies(proposals, known_fingerprints(t for b in refs.values() for t in b.tasks))
        tasks = [p.result for p in proposals if isinstance(p.result, Task)]
        new = sum(p.copy == "new" for p in proposals if isinstance(p.result, Task))
        print(f"{len(tasks)}/{len(proposals)} valid probe tasks ({new} new) in {propose_s:.0f} s", flush=True)
        rows = []
        for solver, temp, rollouts in choices:
            ks = sorted({args.round} | {k for k in (4, 8, 16, 32, 64) if k <= rollouts and k % args.round == 0})
            cfg = with_temperature(fixed, temp)
            policy.config = with_temperature(policy.config, temp)
            slot = PROBE_SOLVER if solver == "warm-up" else BASE_SOLVER
            verdicts, seconds = solve_rounds(policy, verifier, tasks, slot, cfg, refs, rollouts, args.round, args.chunk)
            rows += choice_rows(f"{solver} solver, T = {temp:g}", verdicts, seconds, ks, args.round)
            print(f"{solver} solver, T = {temp:g}: {sum(seconds):.0f} s", flush=True)
    facts = {"prompts": len(proposals), "valid": len(tasks), "new": new, "propose_s": propose_s, "rows": rows}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "choice.json").write_text(json.dumps(facts, indent=1) + "\n")
    write_table(facts, args.step_seconds, args.out)


def choice_rows(name: str, verdicts: list[list[bool]], seconds: list[float], ks: list[int], per_round: int) -> list:
    """The table's rows of one solver choice: the band at each k (the first k rollouts), and pass@8
    scored from all n rollouts."""
    rows = []
    for k in ks:
        row, more = band_row(name, verdicts, k, sum(seconds[: k // per_round]))
        rows.append(row | more)
    n = len(verdicts[0]) if verdicts else 0
    if 8 < n:
        band = sum(in_band_pass_at_k(sum(v), n, 8) for v in verdicts)
        low, high = share_interval(band, len(verdicts))
        rows.append(
            {"choice": f"{name}, pass@8 from {n}", "k": n, "tasks": len(verdicts), "band": band}
            | {"zero": sum(not any(v) for v in verdicts), "band_low": low, "band_high": high}
            | {"rho": sum(pass_at_k(sum(v), n, 8) for v in verdicts) / len(verdicts), "solve_s": sum(seconds)}
        )
    return rows


def write_table(facts: dict, step_seconds, out: Path | None) -> None:
    md = choice_table(facts["rows"], facts["prompts"], facts["valid"], facts["new"], facts["propose_s"], step_seconds)
    print("\n".join(md))
    if out is not None:
        (out / "choice.md").write_text("\n".join(md) + "\n")


def choice_table(rows, asked, valid, new, propose_s, step_seconds) -> list[str]:
    """The choice table (markdown): per choice, the band share with its interval, the floor, the
    mean ρ, the event's seconds and its cost per step in each run."""
    per_40 = math.ceil(TARGET_VALID * asked / valid) if valid else None
    lines = [
        f"Step-0 probe tasks: {valid}/{asked} valid ({new} new, not a copy of a shown reference), proposing took "
        f"{propose_s:.0f} s; {per_40 or 'n/a'} prompts per run give {TARGET_VALID} valid tasks at this rate.",
        "",
        "| choice | rollouts | 0 < ρ < 1 [95% Wilson] | ρ = 0 | mean ρ | event s (this many prompts) "
        "| cost per step, every 5: baseline / population | every 10 | meets ≥ 30% |",
        "|---|---:|---|---|---:|---:|---|---|---|",
    ]
    for r in rows:
        n = r["tasks"]
        event = propose_s + r["solve_s"]
        share = r["band"] / n if n else math.nan
        cost = (
            " / ".join(f"{event / (every * s):.0%}" for s in step_seconds) if step_seconds else "n/a"
            for every in (5, 10)
        )
        meets = "yes" if n and share >= TARGET_SHARE else "no"
        lines.append(
            f"| {r['choice']} | {r['k']} | {share:.0%} ({r['band']}/{n}) [{r['band_low']:.0%}, {r['band_high']:.0%}] | "
            f"{r['zero'] / n if n else math.nan:.0%} | {r['rho']:.3f} | {event:.0f} | {' | '.join(cost)} | {meets} |"
        )
    return lines


if __name__ == "__main__":
    main()
