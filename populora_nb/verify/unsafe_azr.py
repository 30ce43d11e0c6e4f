"""AZR's unisolated executor, kept only as the anchor the hardened `Verifier` is measured against
(`benchmarks/bench_verifier.py`, notebook 01). It execs programs with no limits and no isolation:
give it trusted seed programs, never model output.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from concurrent.futures import Executor

from populora_nb.tasks import Proposal


def _unsafe_azr_run(job: tuple[str, str]) -> str | None:
    """AZR's check in its worker: exec the program, call f twice on the pasted input, compare reprs."""
    program, inputs = job
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # as AZR's executor does
            namespace: dict = {}
            exec(program, namespace)  # noqa: S102 -- deliberately unsafe: this is the baseline
            first, second = (repr(eval(f"f({inputs})", namespace)) for _ in range(2))  # noqa: S307
        return first if first == second else None
    except Exception:  # AZR maps every failure to an error status
        return None


def unsafe_azr_validate_many(proposals: Sequence[Proposal], pool: Executor) -> list[tuple[str, ...] | None]:
    """AZR's executor, for throughput comparisons on trusted seed programs only: exec in a worker of
    `pool` (AZR: one pebble worker), inputs pasted into code, no limits, no isolation. Never give
    it model output."""
    jobs = [(p.program, text) for p in proposals for text in p.inputs]
    outputs = iter(list(pool.map(_unsafe_azr_run, jobs)))
    runs = [[next(outputs) for _ in p.inputs] for p in proposals]
    # one failed input fails the proposal
    return [None if None in run else tuple(x for x in run if x is not None) for run in runs]
