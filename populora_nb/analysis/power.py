"""How many seeds would separate baseline and population: a power estimate from the seeds at hand.

For a series whose runs are paired by seed, the per-seed differences d_i = population_i − baseline_i
have a mean d̄ and a standard deviation s. A two-sided paired t-test at level α detects a true mean
difference δ with power 1 − β once n satisfies n ≥ ((t_{1−α/2, n−1} + t_{1−β, n−1}) · s / δ)²
(the usual t-based sample-size equation, solved by increasing n). `seeds_needed` answers it for
δ = the observed d̄: "if the difference these seeds show is real, how many seeds would a test see
it in 80% of replications?". With 3 seeds, s itself is uncertain (its 95% interval spans a factor
of ~6), so the answer is an order of magnitude, and it is stated as one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from populora_nb.analysis.seed_stats import t_quantile

MAX_SEEDS = 10_000


def seeds_needed(sd: float, effect: float, power: float = 0.8, level: float = 0.95) -> float:
    """The smallest n (>= 2) at which a paired t-test at ``level`` detects a mean difference
    ``effect`` with ``power``, given per-seed differences of standard deviation ``sd``; inf when
    ``effect`` is 0 or the answer exceeds `MAX_SEEDS`; NaN when either input is NaN."""
    if math.isnan(sd) or math.isnan(effect):
        return math.nan
    if effect == 0:
        return math.inf
    if sd == 0:
        return 2.0
    for n in range(2, MAX_SEEDS + 1):
        need = ((t_quantile(0.5 + level / 2, n - 1) + t_quantile(power, n - 1)) * sd / abs(effect)) ** 2
        if n >= need:
            return float(n)
    return math.inf


def paired_differences(baseline: Sequence[float], population: Sequence[float]) -> np.ndarray:
    return np.asarray(population, dtype=float) - np.asarray(baseline, dtype=float)


def power_row(label: str, baseline: Sequence[float], population: Sequence[float]) -> dict:
    """The numbers behind one line of the report: mean and SD of the per-seed differences and the
    seeds a paired test would need to see that mean with 80% power."""
    d = paired_differences(baseline, population)
    sd = float(d.std(ddof=1)) if len(d) >= 2 else math.nan
    mean = float(d.mean()) if len(d) else math.nan
    return {
        "series": label,
        "n": len(d),
        "mean_difference": mean,
        "sd_difference": sd,
        "seeds_needed": seeds_needed(sd, mean),
    }


def power_json(rows: Sequence[dict]) -> list[dict]:
    """The rows with every non-finite number as None (strict JSON)."""
    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()} for r in rows]


def power_lines(rows: Sequence[dict]) -> list[str]:
    """A markdown section: per series, the seeds a paired t-test would need (80% power, 95% level)."""

    def n_text(row: dict) -> str:
        n = row["seeds_needed"]
        if math.isnan(n):
            return "n/a"
        if math.isinf(n):
            return "never (no difference)" if row["mean_difference"] == 0 else f"> {MAX_SEEDS}"
        return f"{n:.0f}"

    n_seeds = max((r["n"] for r in rows), default=0)

    return [
        "## How many seeds would separate them",
        "",
        "If the mean end difference these seeds show were the true one, a paired t-test (95% level) would "
        "detect it in 80% of replications with this many seeds, given the per-seed differences' standard "
        f"deviation. With {n_seeds} seeds that deviation is itself uncertain: read the answer as an order of "
        "magnitude.",
        "",
        "| series | seeds | mean difference | SD of per-seed differences | seeds needed |",
        "|---|---|---|---|---|",
        *[
            f"| {r['series']} | {r['n']} | {r['mean_difference']:+.3g} | {r['sd_difference']:.3g} | {n_text(r)} |"
            for r in rows
        ],
    ]
