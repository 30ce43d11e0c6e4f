"""What the seed protocol could have detected: the minimum detectable difference (MDD) at its n.

For a series whose runs are paired by seed, the per-seed differences d_i = population_i − baseline_i
have a standard deviation s. A two-sided paired t-test at level α on n pairs rejects "no difference"
with probability 1 − β when the true mean difference is δ = k(n) · s, where k solves
    P(|T| > t_{1−α/2, n−1}) = 1 − β,   T ~ noncentral t(n − 1 degrees of freedom, noncentrality k·√n)
(the exact power of the t-test, ``scipy.stats.nct``; the familiar (t_{1−α/2,n−1} + t_{1−β,n−1})/√n
is its approximation, 5% low at n = 3: 3.10 against the exact 3.26). MDD = k(n) · s, in the series'
own units, is a property of the design (how many seeds, how noisy the series), not an estimate of
the effect: it replaces the "seeds needed to detect the observed difference", which is post-hoc
power computed on noise. With few seeds s is itself uncertain (at n = 3 its 95% interval runs from
0.52 to 6.3 times the estimate, ``sd_factors``), and the MDD with it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

from populora_nb.analysis.seed_stats import md_table


def _power(nc: float, dof: int, critical: float) -> float:
    """Two-sided power of a t-test at noncentrality ``nc``; the lower tail by symmetry, as
    ``nct.sf(critical, dof, -nc)`` (``nct.cdf`` far in the lower tail returns NaN)."""
    return float(stats.nct.sf(critical, dof, nc) + stats.nct.sf(critical, dof, -nc))


@functools.cache
def mdd_factor(n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """k(n): the minimum detectable difference of a two-sided paired t-test on ``n`` pairs, in units
    of the per-pair differences' SD (exact, noncentral t). NaN for n < 2."""
    if n < 2:
        return math.nan
    dof, critical = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))
    hi = 1.0
    while _power(hi, dof, critical) < power:
        hi *= 2.0
    nc = optimize.brentq(lambda nc: _power(nc, dof, critical) - power, hi / 2, hi, xtol=1e-12)
    return nc / math.sqrt(n)


def minimum_detectable_difference(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The true mean difference a two-sided paired t-test at ``alpha`` on ``n`` pairs detects with
    ``power``, given per-pair differences of standard deviation ``sd`` (NaN when sd is NaN or n < 2)."""
    return math.nan if math.isnan(sd) else mdd_factor(n, power, alpha) * sd


def sd_factors(n: int, level: float = 0.95) -> tuple[float, float]:
    """The 95% interval of the true SD as multiples of a sample SD from ``n`` normal values
    (chi-square with n − 1 degrees of freedom)."""
    low, high = (math.sqrt((n - 1) / stats.chi2.ppf(0.5 + side * level / 2, n - 1)) for side in (1, -1))
    return low, high


def power_row(label: str, baseline: Sequence[float], population: Sequence[float]) -> dict:
    """The numbers behind one line of the report: mean and SD of the per-seed differences and the
    minimum detectable difference at this n (80% power, α = 0.05 two-sided, exact)."""
    d = np.asarray(population, dtype=float) - np.asarray(baseline, dtype=float)
    sd = float(d.std(ddof=1)) if len(d) >= 2 else math.nan
    return {
        "series": label,
        "n": len(d),
        "mean_difference": float(d.mean()) if len(d) else math.nan,
        "sd_difference": sd,
        # Seeds that tie (coarse counts at a ceiling) measure no spread: an MDD of 0 would claim any
        # difference is detectable, so there is none to state.
        "mdd": minimum_detectable_difference(sd, len(d)) if sd > 0 else math.nan,
    }


def power_lines(rows: Sequence[dict]) -> list[str]:
    """A markdown section: per series, the smallest difference these seeds could detect."""
    n_seeds = max((r["n"] for r in rows), default=0)
    if n_seeds < 2:
        return ["## Smallest detectable difference", "", "Fewer than 2 paired seeds: no spread to compute it from."]
    low, high = sd_factors(n_seeds)
    more = ", ".join(f"{m} seeds {mdd_factor(m):.2f}" for m in (5, 10, 20) if m > n_seeds)
    return [
        "## Smallest detectable difference",
        "",
        f"The population − baseline difference a two-sided paired t-test (α = 0.05) on these {n_seeds} seeds "
        f"would detect with 80% power: MDD = {mdd_factor(n_seeds):.2f} × the SD of the per-seed differences "
        "(exact, from the noncentral t; `studies/power.py`), in the series' own units. It describes the design, "
        "not the effect: a true difference smaller than the MDD is detected less than 80% of the time, so "
        '"no detectable difference" in this report does not mean "no difference". An MDD excludes nothing: what '
        "the data allow is each difference's t-interval in the table above, every difference inside it being "
        "compatible with these seeds (a wide interval around 0 allows a large effect either way). With "
        f"{n_seeds} seeds the SD is itself uncertain (its 95% interval runs from {low:.2f} to {high:.1f} times "
        "the value shown) and the MDD with it."
        + (f" The same SD would give an MDD of (× SD): {more}." if more else ""),
        "",
        *md_table(
            [
                ["series", "seeds", "mean difference", "SD of per-seed differences", "MDD (80% power, α = 0.05)"],
                *[
                    [r["series"], str(r["n"]), f"{r['mean_difference']:+.3g}", f"{r['sd_difference']:.3g}"]
                    + ["n/a (the seeds tie: no spread measured)" if r["sd_difference"] == 0 else f"{r['mdd']:.3g}"]
                    for r in rows
                ],
            ]
        ),
    ]
