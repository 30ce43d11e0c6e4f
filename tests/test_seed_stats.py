"""Intervals over seeds: the t family has its stated coverage, the percentile bootstrap is right where
it can be (many seeds) and honestly narrow where it cannot (3 seeds), and pairing is used."""

import math
import random

import numpy as np
import pytest

from populora_nb.analysis.seed_stats import (
    bootstrap_difference,
    bootstrap_interval,
    difference_estimate,
    mean_estimate,
    paired_bootstrap_difference,
    paired_t_interval,
    t_interval,
    t_quantile,
    welch_interval,
)


@pytest.mark.parametrize("dof,expected", [(1, 12.706205), (2, 4.302653), (3, 3.182446), (10, 2.228139), (30, 2.042272)])
def test_t_quantile_matches_the_table(dof, expected):
    assert t_quantile(0.975, dof) == pytest.approx(expected, abs=1e-5)


def test_t_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """The bias test for the interval: with 3 seeds, a normal interval (±1.96 se) would cover ~80%."""
    rng = random.Random(0)
    hits = 0
    for _ in range(2000):
        _, low, high = t_interval([rng.gauss(0.3, 0.1) for _ in range(3)])
        hits += low <= 0.3 <= high
    assert 0.93 <= hits / 2000 <= 0.97


def test_one_seed_has_no_interval_and_welch_handles_zero_variance():
    m, low, high = t_interval([0.5])
    assert m == 0.5 and math.isnan(low) and math.isnan(high)
    assert welch_interval([0.2, 0.2], [0.5, 0.5]) == pytest.approx((0.3, 0.3, 0.3))


def test_bootstrap_interval_of_normal_data_is_mean_plus_minus_1_96_se():
    x = np.random.default_rng(1).normal(2.0, 0.5, size=40)
    m, low, high = bootstrap_interval(x, rng=np.random.default_rng(2))
    # The bootstrap's standard error is sd·sqrt((n−1)/n)/sqrt(n); compare with the normal interval.
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert m == pytest.approx(x.mean())
    assert low == pytest.approx(m - half, abs=0.1 * half) and high == pytest.approx(m + half, abs=0.1 * half)


def test_bootstrap_covers_about_95_percent_with_30_seeds():
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(200):
        _, low, high = bootstrap_interval(rng.normal(0.0, 1.0, size=30), n_resamples=2000, rng=rng)
        hits += low <= 0.0 <= high
    assert 0.89 <= hits / 200 <= 0.99


def test_with_3_seeds_the_bootstrap_under_covers_and_stays_inside_the_sample():
    """The caveat in the docstring, measured: the t-interval is the conservative companion."""
    rng = np.random.default_rng(4)
    boot = t_hits = 0
    for _ in range(400):
        x = rng.normal(0.0, 1.0, size=3)
        _, low, high = bootstrap_interval(x, n_resamples=1000, rng=rng)
        assert x.min() - 1e-12 <= low <= high <= x.max() + 1e-12  # means of resamples: rounding only
        boot += low <= 0.0 <= high
        _, t_low, t_high = t_interval(x)
        t_hits += t_low <= 0.0 <= t_high
    assert boot / 400 < 0.85 < 0.92 < t_hits / 400


def test_bootstrap_is_deterministic_given_the_generator():
    x = np.random.default_rng(0).normal(size=12)  # 12 seeds: resample means are nearly continuous
    first = bootstrap_interval(x, n_resamples=500, rng=np.random.default_rng(7))
    assert bootstrap_interval(x, n_resamples=500, rng=np.random.default_rng(7)) == first
    assert bootstrap_interval(x, n_resamples=500, rng=np.random.default_rng(8)) != first


def test_constant_data_has_a_zero_width_interval_and_one_value_none():
    m, low, high = bootstrap_interval([0.25, 0.25, 0.25], rng=np.random.default_rng(0))
    assert low == high == pytest.approx(0.25) and m == pytest.approx(0.25)
    m, low, high = bootstrap_interval([0.7], rng=np.random.default_rng(0))
    assert m == 0.7 and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(v) for v in bootstrap_interval([], rng=np.random.default_rng(0)))
    d, low, high = paired_bootstrap_difference([1.0], [2.0], rng=np.random.default_rng(0))
    assert d == 1.0 and math.isnan(low)


def test_the_generator_is_required():
    with pytest.raises(TypeError):
        bootstrap_interval([1.0, 2.0])  # type: ignore[call-arg]


def test_pairing_cancels_what_a_seed_shares_with_its_pair():
    """Seeds differ a lot (0.1 .. 0.9), but every pair's b − a is 0.05: only the paired interval
    sees the consistent difference; the unpaired ones are dominated by the seeds' spread."""
    a = [0.10, 0.50, 0.90, 0.30, 0.70]
    b = [0.15, 0.56, 0.94, 0.35, 0.75]
    d, low, high = paired_bootstrap_difference(a, b, rng=np.random.default_rng(0))
    assert d == pytest.approx(0.05) and 0.0 < low <= high < 0.1
    d2, low2, high2 = bootstrap_difference(a, b, rng=np.random.default_rng(0))
    assert d2 == pytest.approx(d) and low2 < 0.0 < high2
    assert welch_interval(a, b)[1] < 0.0 < paired_t_interval(a, b)[1]
    # The pairing is by position: shuffling one side breaks it.
    _, low3, _ = paired_bootstrap_difference(a, b[::-1], rng=np.random.default_rng(0))
    assert low3 < 0.0


def test_estimates_report_both_verdicts():
    a, b = [0.10, 0.50, 0.90], [0.15, 0.56, 0.94]
    paired = difference_estimate(a, b, True, rng=np.random.default_rng(0))
    unpaired = difference_estimate(a, b, False, rng=np.random.default_rng(0))
    assert paired.separated and paired.t_separated  # per-pair differences 0.05, 0.06, 0.04
    assert not unpaired.separated and not unpaired.t_separated
    e = mean_estimate([1.0, 2.0, 3.0], rng=np.random.default_rng(0))
    assert e.mean == 2.0 and 1.0 <= e.low < e.high <= 3.0 and e.t_low < e.low and e.t_high > e.high
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap_difference([1.0, 2.0], [1.0], rng=np.random.default_rng(0))


def test_seeds_needed_matches_the_t_sample_size_equation():
    from populora_nb.analysis.power import power_row, seeds_needed

    # d = 1 SD: the textbook paired t-test needs 10 pairs for 80% power at alpha = 0.05.
    assert seeds_needed(1.0, 1.0) == 10
    assert seeds_needed(1.0, 0.5) > 30 and seeds_needed(1.0, 2.0) < 6  # smaller effects need more seeds
    assert seeds_needed(1.0, -1.0) == seeds_needed(1.0, 1.0)
    assert math.isinf(seeds_needed(1.0, 0.0)) and math.isnan(seeds_needed(math.nan, 1.0))
    row = power_row("x", [0.0, 1.0, 2.0], [1.0, 1.5, 3.5])  # differences 1.0, 0.5, 1.5
    assert row["mean_difference"] == pytest.approx(1.0) and row["sd_difference"] == pytest.approx(0.5)
    assert row["seeds_needed"] == seeds_needed(0.5, 1.0)


def test_the_power_section_names_its_seed_count_and_a_null_difference():
    from populora_nb.analysis.power import power_lines, power_row

    lines = "\n".join(power_lines([power_row("same", [0.5, 0.5], [0.5, 0.5]), power_row("x", [0.0, 1.0], [1.0, 1.5])]))
    assert "With 2 seeds" in lines and "| same | 2 | +0 | 0 | never (no difference) |" in lines
