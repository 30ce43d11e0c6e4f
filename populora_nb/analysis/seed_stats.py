"""Intervals over seeds: the Student-t interval of a mean and Welch's interval of a difference of
unpaired means (scipy.stats' one-sample and Welch t-tests: 95% coverage at any n if the seed values
are normal), with their formatting, for the report's tables and the difficulty probe. The seed
protocol's estimates (paired t, bootstrap companions, Holm) build on these in `studies/seed_stats.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

Triple = tuple[float, float, float]
"""(estimate, low, high); low and high are NaN when the data cannot give an interval."""


# ----------------------------------------------------------------------------- Student t
def is_constant(x: np.ndarray) -> bool:
    """All values equal up to float rounding (0.3 − 0.2 against 0.2 − 0.1): their spread is 0, and
    scipy's moments would lose all precision dividing rounding error by rounding error."""
    return bool(np.ptp(x) <= 1e-12 * np.abs(x).max())


def t_test(x: np.ndarray, level: float, before: np.ndarray | None = None) -> tuple[float, float, float, float]:
    """(mean, low, high, two-sided p against 0) of the one-sample t over ``x``, or with ``before``
    the paired t of ``x`` against it (``ttest_rel``; the one-sample t of ``x − before``).

    Identical values (scipy would divide 0 by 0): a level (one-sample) gets a zero-width interval,
    which is what the seeds show. A difference or change that every seed gave exactly (both runs at
    a ceiling, or rates of a few proposals that happen to tie) has no measured spread, and a t with
    zero spread is not certainty but a model that no longer applies: its interval is undefined
    (NaN, so no verdict rests on it) and its p is the exact sign test's (0.25 at 3 seeds). All-zero
    differences keep [0, 0] and p = 1."""
    d = x if before is None else x - before
    m = float(d.mean()) if len(d) else math.nan
    if len(d) < 2:
        return m, math.nan, math.nan, math.nan
    if is_constant(d):
        if before is None or m == 0:
            return m, m, m, 1.0 if m == 0 else 0.0
        return m, math.nan, math.nan, min(1.0, 2.0 * 0.5 ** len(d))  # the exact sign test
    res = stats.ttest_1samp(d, 0.0) if before is None else stats.ttest_rel(x, before)
    ci = res.confidence_interval(level)
    return m, float(ci.low), float(ci.high), float(res.pvalue)


def t_interval(values: Sequence[float], level: float = 0.95) -> Triple:
    """(mean, low, high) of a Student-t interval for the mean over seeds; NaN bounds for n < 2.
    Measures where the mean of the seeds' distribution lies, assuming the values are normal."""
    return t_test(np.asarray(values, dtype=float), level)[:3]


def welch_test(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float, float]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(y.mean() - x.mean()) if len(x) and len(y) else math.nan
    if len(x) < 2 or len(y) < 2:
        return d, math.nan, math.nan, math.nan
    if is_constant(x) and is_constant(y):
        # No spread on either side (see t_test): no interval; every b above every a has the exact
        # two-sided rank-test p 2 / C(n_a + n_b, n_a) (0.1 at 3 and 3 seeds).
        exact_p = min(1.0, 2 / math.comb(len(x) + len(y), len(x)))
        return (0.0, 0.0, 0.0, 1.0) if d == 0 else (d, math.nan, math.nan, exact_p)
    res = stats.ttest_ind(y, x, equal_var=False)
    ci = res.confidence_interval(level)
    return d, float(ci.low), float(ci.high), float(res.pvalue)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Triple:
    """(mean(b) − mean(a), low, high): Welch's interval for a difference of means of UNPAIRED
    samples with unequal variances; NaN bounds when either side has fewer than 2 values, and when
    neither side varies (zero width when the means are equal). For runs at the same seeds use
    ``paired_t_interval``: Welch ignores the pairing and is then not conservative either."""
    return welch_test(a, b, level)[:3]


def fmt_number(x: float, signed: bool = False, scale: float | None = None) -> str:
    """``x`` with the decimals that suit ``scale`` (default: its own size): rates, rewards, μ, lengths."""
    if math.isnan(x):
        return "n/a"
    size = abs(x) if scale is None else scale
    digits = 0 if size >= 100 else 1 if size >= 10 else 3
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_interval(low: float, high: float, signed: bool = False, scale: float | None = None) -> str:
    """``[low, high]`` at one precision; empty when there is no interval."""
    scale = max(abs(low), abs(high)) if scale is None else scale
    return "" if math.isnan(low) else f"[{fmt_number(low, signed, scale)}, {fmt_number(high, signed, scale)}]"


def md_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines; the first row is the header."""
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    return [lines[0], "|" + "---|" * len(rows[0]), *lines[1:]]
