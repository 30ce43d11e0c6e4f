"""Hardened validations per second against AZR's executor, on the same AZR-style programs.

    .venv/bin/python benchmarks/bench_verifier.py [--n 200] [--workers 2] [--repeats 3]
    setpriv --reuid=65534 --regid=65534 --clear-groups python3 benchmarks/bench_verifier.py  # as nobody

Each hardened validation is two confined runs (two processes, two PYTHONHASHSEEDs); the AZR-style
anchor execs each program in one worker process and calls f twice, without limits or isolation.
Programs: the first N code_o seed tasks of ../shared/azr_seeds that the hardened verifier accepts
(round-robin over the files), or built-in programs when that folder is absent. Also prints the CPU
time per validation (parent + zygotes + children), which says what 2 idle cores would sustain on a
machine busy with other work.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from populora_nb.verify import Proposal, Task, Verifier
from populora_nb.verify.unsafe_azr import unsafe_azr_validate_many

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "azr_seeds"
BUILTIN = [
    "def f(xs):\n    return sorted(xs)[::-1]",
    "from collections import Counter\ndef f(s):\n    return Counter(s).most_common(2)",
    "def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "import re\ndef f(s):\n    return re.sub('[aeiou]', '*', s).upper()",
    "from itertools import permutations\ndef f(s):\n    return sorted(set(''.join(p) for p in permutations(s)))[:5]",
]
BUILTIN_INPUTS = ["[3, 1, 2, 9]", "'mississippi'", "30", "'hello world'", "'abcd'"]


def candidate_programs() -> list[Proposal]:
    if not SEEDS.is_dir():
        return [
            Proposal("code_o", p + f"\n# variant {i}", (x,))
            for i, (p, x) in enumerate(itertools.islice(itertools.cycle(zip(BUILTIN, BUILTIN_INPUTS)), 1000))
        ]
    files = [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(SEEDS.glob("*_seed_io.jsonl"))
        if "code_f" not in path.name
    ]
    records = [r for group in itertools.zip_longest(*files) for r in group if r is not None]
    return [Proposal("code_o", r["snippet"], (r["input"],)) for r in records]


def with_children(pids: list[int]) -> list[int]:
    """The zygotes and their direct children: with namespaces each zygote is the pid 1 its
    launcher forked (the launcher reaps it only at exit, so its cutime would miss all the work)."""
    out = list(pids)
    for pid in pids:
        children = Path(f"/proc/{pid}/task/{pid}/children")
        out += [int(c) for c in children.read_text().split()] if children.exists() else []
    return out


def cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200, help="programs per timed batch")
    parser.add_argument("--workers", type=int, default=2, help="hardened verifier workers")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches; the best is reported")
    parser.add_argument("--quick", action="store_true", help="a dry run: 40 programs, 1 batch")
    parser.add_argument("--unsafe", action="store_true", help="allow a run without OS-level isolation (measuring only)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.repeats = 40, 1
    with Verifier(workers=args.workers, allow_unsafe_no_isolation=args.unsafe) as verifier:
        candidates = candidate_programs()
        accepted = verifier.validate_many(candidates[: 2 * args.n])
        programs = [p for p, r in zip(candidates, accepted) if isinstance(r, Task)][: args.n]
        assert len(programs) == args.n, f"only {len(programs)} valid programs"
        hardened, cpu = [], []
        for _ in range(args.repeats):
            pids = with_children([z.proc.pid for z in verifier._zygotes])
            cpu0, parent0, start = cpu_seconds(pids), time.process_time(), time.perf_counter()
            results = verifier.validate_many(programs)
            hardened.append(args.n / (time.perf_counter() - start))
            cpu.append((cpu_seconds(pids) - cpu0 + time.process_time() - parent0) / args.n)
            assert all(isinstance(r, Task) for r in results)
    with ProcessPoolExecutor(max_workers=1) as pool:
        unsafe_azr_validate_many(programs[:5], pool)  # start the worker outside the timing
        unsafe = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            unsafe_results = unsafe_azr_validate_many(programs, pool)
            unsafe.append(args.n / (time.perf_counter() - start))
    agree = sum(u is not None and u == r.outputs for u, r in zip(unsafe_results, results))
    print(
        f"programs: {args.n} ({'AZR seeds' if SEEDS.is_dir() else 'built-in'}), load average {os.getloadavg()[0]:.1f}, "
        f"uid {os.geteuid()}, isolation: {verifier.isolation}"
    )
    runs = ", ".join(f"{h:.0f}" for h in hardened)
    print(f"hardened, {args.workers} workers: {max(hardened):7.0f} validations/s  (runs: {runs})")
    print(
        f"AZR-style, 1 worker, exec:  {max(unsafe):7.0f} validations/s  (runs: {', '.join(f'{u:.0f}' for u in unsafe)})"
    )
    print(f"ratio hardened/unsafe:      {max(hardened) / max(unsafe):7.2f}")
    print(f"hardened CPU per validation: {min(cpu) * 1000:.2f} ms -> {2 / min(cpu):.0f} validations/s on 2 idle cores")
    print(f"outputs identical to the AZR-style run: {agree}/{args.n}")


if __name__ == "__main__":
    main()
