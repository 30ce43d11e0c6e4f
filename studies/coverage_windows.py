"""Coverage in the first and last windows of a run, and its exact rarefaction to a common n (the seed
protocol's coverage series, `studies.protocol_series`).

Rarefaction uses the exact expectation (Hurlbert 1971): among n of N units drawn without
replacement, E[distinct] = Σ_f 1 − C(N − k_f, n) / C(N, n), k_f the units holding feature f. It is
the mean of ``coverage.rarefy``'s random orders without their Monte Carlo noise or an RNG.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

import pandas as pd

from populora_nb.analysis.coverage import coverage_units

COVERAGE_KIND: Mapping[str, str] = {"coverage/ngrams": "ngrams", "coverage/signatures": "program_signatures"}
"""The ``coverage.coverage_units`` kind behind each coverage series."""


def coverage_window_units(
    tasks: pd.DataFrame, key: str, window: int
) -> tuple[list[frozenset[Hashable]], list[frozenset[Hashable]]]:
    """(start units, end units) of coverage series ``key``: ``coverage.coverage_units`` over the
    tasks (a run's tasks frame) of the first ``window`` and of the last ``window`` steps with task
    records (a step whose every proposal was invalid still counts as a step: it wrote nothing that window)."""
    if window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    kind = COVERAGE_KIND[key]
    steps = sorted(set(tasks["step"].tolist()))

    def units(keep: Sequence[int]) -> list[frozenset[Hashable]]:
        return coverage_units(tasks[tasks["step"].isin(keep)], kind)

    return units(steps[:window]), units(steps[-window:])


def expected_distinct(units: Sequence[frozenset[Hashable]], n: int) -> float:
    """The expected number of distinct features among ``n`` of ``units`` drawn without replacement
    (module docstring); NaN when n exceeds the units or is negative."""
    size = len(units)
    if not 0 <= n <= size:
        return math.nan
    holders = Counter(f for u in units for f in u)  # feature -> k, the units holding it
    log_all = math.lgamma(size + 1) - math.lgamma(size - n + 1)
    total = 0.0
    # Features sharing k share the term; summed in k order so the result does not depend on set
    # iteration order (string hashing is randomised per process: reports must be bit-reproducible).
    for k, features in sorted(Counter(holders.values()).items()):
        rest = size - k
        missed = math.exp(math.lgamma(rest + 1) - math.lgamma(rest - n + 1) - log_all) if rest >= n else 0.0
        total += features * (1.0 - missed)
    return total
