"""EvalPlus candidates scored per second: the project's sandbox against official evalplus 0.3.1.

    .venv/bin/python benchmarks/bench_scoring.py [--tasks 30] [--workers 2]

One run on this machine, both scorers on the same candidates with the same number of workers: the
candidates of evalplus_crosscheck.py beside it (reference solutions, mutants, base-only lookup
tables, float variants, printing, stateful, importing and looping programs) for a seeded draw of
HumanEval+ and MBPP+ tasks. Official evalplus runs as `evalplus.evaluate --parallel WORKERS` does:
a process pool, each candidate's base and plus sets through `untrusted_check`. Ground truth is timed
apart from scoring, since both scorers cache it between runs. Needs evalplus (`make setup`) and the
HumanEval+ / MBPP+ files under $POPULORA_DATA; without them it says so and exits 0 (nothing to time).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def crosscheck_module():
    spec = importlib.util.spec_from_file_location("evalplus_crosscheck", ROOT / "benchmarks" / "evalplus_crosscheck.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the pool's workers find its functions by this name
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=30, help="tasks per benchmark (HumanEval+, MBPP+)")
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers here, pool processes there")
    parser.add_argument("--quick", action="store_true", help="a dry run: 8 tasks per benchmark")
    args = parser.parse_args()
    if args.quick:
        args.tasks = 8
    cc = crosscheck_module()
    if cc.missing_data():
        print(f"skipped: {cc.missing_data()}")
        return
    try:
        importlib.import_module("evalplus.eval")
    except ImportError as e:
        sys.exit(f"evalplus is not importable ({e}): `make setup` installs evalplus==0.3.1 --no-deps")
    check = cc.score_both(args.tasks, workers=args.workers)
    n, s = len(check.rows), check.seconds
    agree = sum(m[:2] == tuple(t) for m, t in zip(check.mine, check.theirs)) / n
    print(
        f"{n} candidates on {2 * args.tasks} tasks, {args.workers} workers; "
        f"verdicts agree on {agree:.1%} (documented exceptions included)"
    )
    print("| scorer | ground truth s | scoring s | candidates/s |")
    print("|---|---:|---:|---:|")
    for who in ("project", "evalplus"):
        print(f"| {who} | {s[f'{who}/ground_truth']:.1f} | {s[f'{who}/score']:.1f} | {n / s[f'{who}/score']:.1f} |")
    theirs_total = s["evalplus/ground_truth"] + s["evalplus/score"]
    mine_total = s["project/ground_truth"] + s["project/score"]
    print(
        f"project / evalplus candidates per second: {s['evalplus/score'] / s['project/score']:.2f}x "
        f"(with ground truth: {theirs_total / mine_total:.2f}x)"
    )


if __name__ == "__main__":
    main()
