"""Intervals over seeds: pure statistics for the seed protocol (`studies.protocol`), on the t and Welch
intervals of `populora_nb.analysis.seed_stats`.

One number per seed goes in (a run's start or end value of a series, or a difference between two
runs at the same seed); a mean, a 95% interval and a p-value for it come out. Two intervals are
computed, and only one carries the verdict:

  Student t (the headline)  ``t_interval``, ``paired_t_interval``, ``welch_interval`` (scipy.stats'
                            one-sample, paired and Welch t-tests): 95% coverage at any n if the seed
                            values are normal. Two runs at the same seeds are compared by the PAIRED
                            t: their values can be correlated either way, so an unpaired interval is
                            neither right nor conservative. Every verdict (``Estimate.separated``) is
                            this interval's.
  spread of the seeds       ``seed_spread``: the companion, no normality assumed: the seeds' range at
                            n <= 3 (what their 95% percentile bootstrap is), the percentile bootstrap
                            (scipy.stats.bootstrap, pairs resampled together) from 4.

A family of series tested together is corrected with ``holm`` (Holm 1979: step-down Bonferroni,
family-wise error at most α). Every bootstrap takes an explicit, seeded ``numpy.random.Generator``
(never the global RNG), so a report is reproducible to the digit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from populora_nb.analysis.seed_stats import Triple, fmt_interval, fmt_number, is_constant, t_test, welch_test

RANGE_MAX_N = 3
"""Up to this many seeds the companion interval is the seeds' range: their 95% percentile bootstrap
(1 resample in 27 repeats the smallest of 3 values, more than the 2.5% the percentile cuts), named for
what it is and computed exactly. Excluding 0 it only says the seeds share a sign."""


def paired_t_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Triple:
    """(mean(b − a), low, high): the paired t-interval, i.e. the t-interval of the per-pair
    differences (``scipy.stats.ttest_rel(b, a)`` gives the same)."""
    x, y = _pairs(a, b)
    return t_test(y, level, before=x)[:3]


# ----------------------------------------------------------------------------- percentile bootstrap
def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired values need equal lengths, got {len(x)} and {len(y)}")
    return x, y


def _mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(b, axis=axis) - np.mean(a, axis=axis)


def _bootstrap(
    data: tuple[np.ndarray, ...], paired: bool, level: float, n_resamples: int, rng: np.random.Generator
) -> Triple:
    """The percentile bootstrap of the mean of ``data[0]``, or of the difference of means of ``data[1]``
    and ``data[0]`` (``paired``: pairs resampled together). NaN bounds below 2 values a side; no
    spread gives a zero-width interval."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if min(map(len, data)) == 0:
        return math.nan, math.nan, math.nan
    x, y = data[0], data[-1]
    d = float(x.mean()) if len(data) == 1 else float((y - x).mean()) if paired else float(y.mean() - x.mean())
    if min(map(len, data)) < 2:
        return d, math.nan, math.nan
    if is_constant(y - x) if paired else all(map(is_constant, data)):
        return d, d, d
    ci = stats.bootstrap(
        data,
        np.mean if len(data) == 1 else _mean_diff,
        paired=paired,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=level,
        method="percentile",  # BCa's acceleration is undefined on 3 values; the percentile is honest about it
        rng=rng,
    ).confidence_interval
    return d, float(ci.low), float(ci.high)


def bootstrap_interval(
    values: Sequence[float] | np.ndarray, level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Triple:
    """(mean, low, high): the percentile-bootstrap interval of the mean over seeds
    (``scipy.stats.bootstrap``). NaN bounds for n < 2 (one seed says nothing about spread); constant
    values give a zero-width interval. At n = 3 it is the sample's range (module docstring)."""
    return _bootstrap((np.asarray(values, dtype=float),), False, level, n_resamples, rng)


def paired_bootstrap_difference(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Triple:
    """(mean(b − a), low, high) over paired items: ``a[i]`` and ``b[i]`` share seed i. Resamples
    whole pairs (``scipy.stats.bootstrap(paired=True)``), so what the two sides share cancels: the
    interval is that of the per-seed differences. NaN bounds for fewer than 2 pairs."""
    return _bootstrap(_pairs(a, b), True, level, n_resamples, rng)


def bootstrap_difference(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Triple:
    """(mean(b) − mean(a), low, high) for unpaired samples: each side resampled independently
    (the two-sample percentile bootstrap). Use it when the sides do not share seeds; it keeps the
    between-seed variance that pairing would cancel. NaN bounds when either side has < 2 values."""
    return _bootstrap((np.asarray(a, dtype=float), np.asarray(b, dtype=float)), False, level, n_resamples, rng)


def seed_spread(
    values: Sequence[float] | np.ndarray, level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> tuple[str, float, float]:
    """(kind, low, high): the companion interval of the mean of ``values`` (per-seed values or
    per-seed differences). kind "range" at n <= `RANGE_MAX_N` (the exact value of the percentile
    bootstrap there), "bootstrap" above."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return "range", math.nan, math.nan
    if len(x) <= RANGE_MAX_N:
        return "range", float(x.min()), float(x.max())
    _, low, high = bootstrap_interval(x, level, n_resamples, rng=rng)
    return "bootstrap", low, high


def excludes_zero(low: float, high: float) -> bool:
    """The interval [low, high] lies wholly above or below 0 (False when it is NaN)."""
    return not (math.isnan(low) or math.isnan(high)) and (low > 0 or high < 0)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down Bonferroni): reject where the adjusted p < α and the
    family-wise error rate is at most α. NaN entries stay NaN and do not count in the family."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (len(idx) - rank) * pvalues[i]))
        out[i] = running
    return out


# ----------------------------------------------------------------------------- the headline and its companion
@dataclass(frozen=True)
class Estimate:
    """A mean over seeds (or of per-seed differences): its 95% t-interval (the headline: paired t
    for a paired difference), the two-sided t-test's p against 0, and the companion interval
    (``spread``: the seeds' range at n <= 3, else the percentile bootstrap); NaN from < 2 seeds."""

    mean: float
    t_low: float
    t_high: float
    p: float
    t_kind: str
    """"t" (a mean), "paired t" (a difference at the same seeds) or "Welch t" (unpaired)."""
    low: float
    high: float
    spread: str
    """What ``low``, ``high`` are: "range" (of the seeds' values or differences) or "bootstrap"."""
    n: int

    @property
    def separated(self) -> bool:
        """The headline t-interval excludes 0: the only verdict the report states."""
        return excludes_zero(self.t_low, self.t_high)

    @property
    def spread_separated(self) -> bool:
        """The companion excludes 0 (at n <= 3: the seeds share a sign). Not a test."""
        return excludes_zero(self.low, self.high)

    def as_dict(self) -> dict[str, object]:
        """The numbers and the verdict, for a JSON record (NaN stays NaN: the writer decides)."""
        return {
            "mean": self.mean,
            "n": self.n,
            "t": [self.t_low, self.t_high],
            "t_kind": self.t_kind,
            "p": self.p,
            "separated": self.separated,
            self.spread: [self.low, self.high],
        }


MISSING = Estimate(math.nan, math.nan, math.nan, math.nan, "t", math.nan, math.nan, "range", 0)
"""No value: a series that cannot be estimated (no seeds, or a difference that is not computed)."""


def mean_estimate(
    values: Sequence[float], level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Estimate:
    """The mean over seeds: ``t_interval`` with ``seed_spread`` beside it."""
    x = np.asarray(values, dtype=float)
    m, t_low, t_high, p = t_test(x, level)
    kind, low, high = seed_spread(x, level, n_resamples, rng=rng)
    return Estimate(m, t_low, t_high, p, "t", low, high, kind, len(x))


def difference_estimate(
    a: Sequence[float],
    b: Sequence[float],
    paired: bool,
    level: float = 0.95,
    n_resamples: int = 10_000,
    *,
    rng: np.random.Generator,
) -> Estimate:
    """b − a over seeds. Paired (``a[i]``, ``b[i]`` share seed i): the paired t with the spread of
    the per-seed differences; unpaired: Welch's t with the two-sample bootstrap."""
    if paired:
        x, y = _pairs(a, b)
        m, t_low, t_high, p = t_test(y, level, before=x)
        kind, low, high = seed_spread(y - x, level, n_resamples, rng=rng)
        return Estimate(m, t_low, t_high, p, "paired t", low, high, kind, len(x))
    d, t_low, t_high, p = welch_test(a, b, level)
    _, low, high = bootstrap_difference(a, b, level, n_resamples, rng=rng)
    return Estimate(d, t_low, t_high, p, "Welch t", low, high, "bootstrap", min(len(a), len(b)))


# ----------------------------------------------------------------------------- the words an interval allows
def fmt_p(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:.2g}" if p >= 0.001 else "< 0.001"


def scale_of(e: Estimate) -> float:
    """The size that sets an estimate's decimals: the largest of its numbers."""
    return max((abs(v) for v in (e.mean, e.t_low, e.t_high, e.low, e.high) if not math.isnan(v)), default=0.0)


def estimate_cell(e: Estimate, signed: bool = False, spread: bool = True) -> str:
    """``mean [t low, t high] (range: low, high)`` at one precision; the spread part only when ``spread``."""
    if math.isnan(e.mean):
        return "n/a"
    scale = scale_of(e)
    # Seeds that all gave one value have no spread: a [0.000, 0.000] t-interval would read as precision.
    if e.n >= 2 and (math.isnan(e.t_low) or e.t_low == e.t_high):
        cell = f"{fmt_number(e.mean, signed, scale)} [none: the seeds tie]"
    else:
        cell = f"{fmt_number(e.mean, signed, scale)} {fmt_interval(e.t_low, e.t_high, signed, scale)}".strip()
    if spread and not math.isnan(e.low):
        cell += f" ({e.spread}: {fmt_number(e.low, signed, scale)}, {fmt_number(e.high, signed, scale)})"
    return cell


def verdict(e: Estimate, up: str, down: str, none: str) -> str:
    """The words a report may use for ``e``: ``up`` or ``down`` only when the headline t-interval
    excludes 0, else ``none`` ("no detectable change")."""
    if not e.separated:
        return none
    return up if e.mean > 0 else down


def claim(e: Estimate, up: str, down: str, none: str, holm_p: float, family: str) -> str:
    """A sentence worded by ``verdict`` with the numbers behind it; a rise, fall or difference also
    says whether Holm's correction over ``family`` ("8 differences") keeps it."""
    scale = scale_of(e)
    said = f"{verdict(e, up, down, none)} ({fmt_number(e.mean, True, scale)}, "
    if math.isnan(e.t_low) and e.n >= 2:  # see t_test: every seed gave this same value
        exact = "rank test" if e.t_kind == "Welch t" else "sign test"
        said += f"no spread over the {e.n} seeds: {e.t_kind} undefined, {exact} p = {fmt_p(e.p)}"
    else:
        said += f"{e.t_kind} {fmt_interval(e.t_low, e.t_high, True, scale)}, p = {fmt_p(e.p)}"
    if e.separated:
        said += f"; {'kept' if holm_p < 0.05 else 'not kept'} by Holm over the {family}: p = {fmt_p(holm_p)}"
    return said + ")"


def how_to_read(n: int, families: Sequence[tuple[int, str, str]], alpha: float = 0.05) -> str:
    """A paragraph on what n seeds allow: the range that the bootstrap is at n <= 3 and the chance
    that it excludes 0, the t quantile, and per family of ``(size, what, where Holm is reported)``
    the false separations chance alone gives at ``alpha`` per test."""
    if n < 2:
        return f"**How to read {n} seed.** One seed says nothing about the spread: no interval, no verdict."
    text = f"**How to read {n} seeds.** "
    if n <= RANGE_MAX_N:
        sign = 2 * 0.5**n  # a null, symmetric effect: all n seeds above 0 or all below
        k = families[0][0] if families else 1
        text += (
            f"With {n} seeds the 95% percentile bootstrap is the seeds' own range (1 resample in {n**n} is the "
            f"smallest value {n} times over, more than the 2.5% the percentile cuts), so the tables print it as the "
            f"range it is. A range that excludes 0 says only that the {n} seeds share a sign, which they do with "
            f"probability {sign:.2f} when there is no effect at all ({1 - (1 - sign) ** k:.0%} for at least one of "
            f"{k} independent series): no verdict rests on it. "
        )
    text += (
        "Every verdict is the 95% t-interval's (paired t for a difference at the same seeds; at "
        f"{n - 1} degrees of freedom its quantile is {stats.t.ppf(0.975, n - 1):.2f}, the price of estimating the "
        f"spread from {n} values)."
    )
    for k, what, where in families:
        text += (
            f" {k} {what} are tested: at α = {alpha} each, about {alpha * k:.1f} would exclude 0 by chance if "
            f"none differed, so Holm's correction over the {k} (family-wise error {alpha}) is given {where}."
        )
    return text
