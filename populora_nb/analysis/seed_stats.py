"""Intervals over seeds: pure statistics for the seed protocol (`populora_nb.analysis.protocol`).

One number per seed goes in (a run's start or end value of a series, or a difference between two
runs at the same seed); a mean and a 95% interval for it come out. Two families, reported side by
side because with the 3 seeds a reproduction can afford neither is right on its own:

  percentile bootstrap  ``bootstrap_interval``, ``paired_bootstrap_difference``, ``bootstrap_difference``:
                        resample the seeds with replacement, take the mean of each resample, read
                        the 2.5th and 97.5th percentiles. No normality assumption, which is why the
                        issue asks for it as the headline. Its caveat: it can only recombine the
                        seeds it has. With n = 3 there are 27 ordered resamples but only 10
                        distinct multisets, and the interval can never reach beyond the sample's
                        own min and max, so it UNDER-covers (about 75% for normal data, not 95%).
  Student t             ``t_interval``, ``paired_t_interval``, ``welch_interval``: assumes the seed
                        values are normal; its quantile (4.30 at 2 degrees of freedom) pays for
                        estimating the spread from 3 values. The conservative companion: when the
                        bootstrap separates two runs and t does not, 3 seeds are not enough.

Every bootstrap takes an explicit, seeded ``numpy.random.Generator`` (never the global RNG), so a
report is reproducible to the digit. No scipy: the t quantile is computed here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Triple = tuple[float, float, float]
"""(estimate, low, high); low and high are NaN when the data cannot give an interval."""
_NAN3: Triple = (math.nan, math.nan, math.nan)


# ----------------------------------------------------------------------------- Student t
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t with ``dof`` (real, > 0) degrees of freedom, by bisection on its
    CDF (1 − ½ I_{dof/(dof+t²)}(dof/2, ½) for t > 0)."""
    if not 0.5 <= p < 1.0 or dof <= 0:
        raise ValueError(f"need 0.5 <= p < 1 and dof > 0, got p={p}, dof={dof}")
    lo, hi = 0.0, 1.0
    while 1.0 - 0.5 * _betainc(dof / 2, 0.5, dof / (dof + hi * hi)) < p:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 1.0 - 0.5 * _betainc(dof / 2, 0.5, dof / (dof + mid * mid)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def t_interval(values: Sequence[float], level: float = 0.95) -> Triple:
    """(mean, low, high) of a Student-t interval for the mean over seeds; NaN bounds for n < 2.
    Measures where the mean of the seeds' distribution lies, assuming the values are normal."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean()) if len(x) else math.nan
    if len(x) < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + level / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def paired_t_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Triple:
    """(mean(b − a), low, high): the t-interval of the per-pair differences (same seed in both)."""
    x, y = _pairs(a, b)
    return t_interval(y - x, level)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Triple:
    """(mean(b) − mean(a), low, high): Welch's interval for a difference of means with unequal
    variances, ignoring any pairing; NaN bounds when either side has fewer than 2 values. Zero
    variance on both sides gives a zero-width interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(y.mean() - x.mean()) if len(x) and len(y) else math.nan
    if len(x) < 2 or len(y) < 2:
        return d, math.nan, math.nan
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(vx + vy)
    if se == 0.0:
        return d, d, d
    dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = t_quantile(0.5 + level / 2, dof) * se
    return d, d - half, d + half


# ----------------------------------------------------------------------------- percentile bootstrap
def _check(level: float, n_resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


def _percentiles(means: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` range of the resampled means (the percentile method)."""
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def _resampled_means(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples,) means of ``x`` resampled with replacement, each resample as long as ``x``."""
    return x[rng.integers(0, len(x), size=(n_resamples, len(x)))].mean(axis=1)


def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired values need equal lengths, got {len(x)} and {len(y)}")
    return x, y


def bootstrap_interval(
    values: Sequence[float], level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Triple:
    """(mean, low, high): the percentile-bootstrap interval of the mean over seeds.

    Measures where the seeds' mean would land had training been rerun with other seeds, using only
    the spread of the seeds at hand. NaN bounds for n < 2 (one seed says nothing about spread);
    constant values give a zero-width interval. Caveat (module docstring): with 3 seeds it has 10
    distinct resamples, cannot be wider than the sample's range and under-covers; read it with
    ``t_interval``."""
    _check(level, n_resamples)
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return _NAN3
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    return (m, *_percentiles(_resampled_means(x, n_resamples, rng), level))


def paired_bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    level: float = 0.95,
    n_resamples: int = 10_000,
    *,
    rng: np.random.Generator,
) -> Triple:
    """(mean(b − a), low, high) over paired items: ``a[i]`` and ``b[i]`` share seed i (the same
    run's start and end, or baseline and population of one experiment, which share the seed and
    the warm-up). Resamples whole pairs, so what the two sides share (a lucky seed lifts both)
    cancels: the interval is that of the per-seed differences. NaN bounds for fewer than 2 pairs;
    the 3-seed caveat of ``bootstrap_interval`` applies."""
    x, y = _pairs(a, b)
    return bootstrap_interval(y - x, level, n_resamples, rng=rng)


def bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    level: float = 0.95,
    n_resamples: int = 10_000,
    *,
    rng: np.random.Generator,
) -> Triple:
    """(mean(b) − mean(a), low, high) for unpaired samples: each side resampled independently
    (the two-sample percentile bootstrap). Use it when the sides do not share seeds; it keeps the
    between-seed variance that pairing would cancel, so it is wider. NaN bounds when either side
    has fewer than 2 values; the 3-seed caveat of ``bootstrap_interval`` applies to each side."""
    _check(level, n_resamples)
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(x) or not len(y):
        return _NAN3
    d = float(y.mean() - x.mean())
    if len(x) < 2 or len(y) < 2:
        return d, math.nan, math.nan
    diffs = _resampled_means(y, n_resamples, rng) - _resampled_means(x, n_resamples, rng)
    return (d, *_percentiles(diffs, level))


def excludes_zero(low: float, high: float) -> bool:
    """The interval [low, high] lies wholly above or below 0 (False when it is NaN)."""
    return not (math.isnan(low) or math.isnan(high)) and (low > 0 or high < 0)


# ----------------------------------------------------------------------------- both, side by side
@dataclass(frozen=True)
class Estimate:
    """A mean over seeds (or of per-seed differences) with its 95% percentile-bootstrap interval
    (the headline) and a t-interval (the conservative companion); NaN bounds from < 2 seeds."""

    mean: float
    low: float
    high: float
    t_low: float
    t_high: float

    @property
    def separated(self) -> bool:
        """The bootstrap interval excludes 0."""
        return excludes_zero(self.low, self.high)

    @property
    def t_separated(self) -> bool:
        """The t-interval excludes 0."""
        return excludes_zero(self.t_low, self.t_high)

    def as_dict(self) -> dict[str, object]:
        """The numbers and both verdicts, for a JSON record (NaN stays NaN: the writer decides)."""
        return {
            "mean": self.mean,
            "bootstrap": [self.low, self.high],
            "t": [self.t_low, self.t_high],
            "separated": self.separated,
            "t_separated": self.t_separated,
        }


def mean_estimate(
    values: Sequence[float], level: float = 0.95, n_resamples: int = 10_000, *, rng: np.random.Generator
) -> Estimate:
    """The mean over seeds: ``bootstrap_interval`` with ``t_interval`` beside it."""
    m, low, high = bootstrap_interval(values, level, n_resamples, rng=rng)
    _, t_low, t_high = t_interval(values, level)
    return Estimate(m, low, high, t_low, t_high)


def difference_estimate(
    a: Sequence[float],
    b: Sequence[float],
    paired: bool,
    level: float = 0.95,
    n_resamples: int = 10_000,
    *,
    rng: np.random.Generator,
) -> Estimate:
    """b − a over seeds. Paired (``a[i]``, ``b[i]`` share seed i): ``paired_bootstrap_difference``
    with ``paired_t_interval``; unpaired: ``bootstrap_difference`` with ``welch_interval``."""
    if paired:
        m, low, high = paired_bootstrap_difference(a, b, level, n_resamples, rng=rng)
        _, t_low, t_high = paired_t_interval(a, b, level)
    else:
        m, low, high = bootstrap_difference(a, b, level, n_resamples, rng=rng)
        _, t_low, t_high = welch_interval(a, b, level)
    return Estimate(m, low, high, t_low, t_high)
