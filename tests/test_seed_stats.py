"""Intervals over seeds: the t family equals the textbook and has its stated coverage, the percentile
bootstrap is right where it can be (many seeds) and is the seeds' range at 3 (so it is named so),
pairing is used, Holm and the minimum detectable difference equal hand computations, and the words
a report may use follow the t-interval."""

import math
import random

import numpy as np
import pytest
from scipy import stats

from populora_nb.analysis.seed_stats import t_interval, welch_interval
from studies.power import mdd_factor, minimum_detectable_difference, power_lines, power_row, sd_factors
from studies.seed_stats import (
    bootstrap_difference,
    bootstrap_interval,
    claim,
    difference_estimate,
    estimate_cell,
    holm,
    how_to_read,
    mean_estimate,
    paired_bootstrap_difference,
    paired_t_interval,
    seed_spread,
    verdict,
)

# Student's sleep data (Cushny & Peebles 1905; R's `sleep`): extra hours of sleep of 10 patients
# under each of two drugs. R: t.test(extra ~ group, data = sleep, paired = TRUE) gives
# mean difference -1.58, 95% CI [-2.4598858, -0.7001142], p = 0.002833; unpaired (Welch)
# [-3.3654832, 0.2054832], p = 0.07939.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_paired_t_equals_the_textbook_sleep_data_and_welch_ignores_the_pairing():
    d, low, high = paired_t_interval(SLEEP_2, SLEEP_1)  # b − a = drug 1 − drug 2
    assert (d, low, high) == pytest.approx((-1.58, -2.4598858, -0.7001142), abs=1e-6)
    e = difference_estimate(SLEEP_2, SLEEP_1, paired=True, rng=np.random.default_rng(0))
    assert e.t_kind == "paired t" and e.p == pytest.approx(0.002833, abs=1e-6) and e.separated
    assert welch_interval(SLEEP_2, SLEEP_1)[1:] == pytest.approx((-3.3654832, 0.2054832), abs=1e-6)
    w = difference_estimate(SLEEP_2, SLEEP_1, paired=False, rng=np.random.default_rng(0))
    assert w.t_kind == "Welch t" and w.p == pytest.approx(0.07939, abs=1e-5) and not w.separated


def test_paired_t_at_3_seeds_is_the_hand_computation():
    """Per-seed differences 0.05, 0.06, 0.04: mean 0.05, SD 0.01, half-width t_{0.975,2}·0.01/√3."""
    a, b = [0.10, 0.50, 0.90], [0.15, 0.56, 0.94]
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert paired_t_interval(a, b) == pytest.approx((0.05, 0.05 - half, 0.05 + half))
    assert stats.ttest_rel(b, a).confidence_interval().low == pytest.approx(0.05 - half)


def test_t_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """The bias test for the interval: with 3 seeds, a normal interval (±1.96 se) would cover ~80%."""
    rng = random.Random(0)
    hits = 0
    for _ in range(2000):
        _, low, high = t_interval([rng.gauss(0.3, 0.1) for _ in range(3)])
        hits += low <= 0.3 <= high
    assert 0.93 <= hits / 2000 <= 0.97


def test_one_seed_has_no_interval_and_a_level_without_spread_a_zero_width_one():
    m, low, high = t_interval([0.5])
    assert m == 0.5 and math.isnan(low) and math.isnan(high)
    assert t_interval([0.8, 0.8, 0.8]) == pytest.approx((0.8, 0.8, 0.8))  # what the seeds show
    none = mean_estimate([0.0, 0.0, 0.0], rng=np.random.default_rng(0))
    assert none.p == 1.0 and not none.separated


def test_a_difference_every_seed_ties_on_is_not_a_certainty():
    """The bias this catches: the baseline's 3 proposals a step are all valid at the end (15/15 in
    every seed's window) and the population's 76/80 in both seeds, so every per-seed difference is
    exactly -0.05. A zero-spread t would call that p = 0, "kept by Holm"; it is a tie of coarse
    counts, not a measured spread. No interval, no verdict, and the exact sign test's p."""
    tie = difference_estimate([1.0, 1.0, 1.0], [0.95, 0.95, 0.95], paired=True, rng=np.random.default_rng(0))
    assert tie.mean == pytest.approx(-0.05) and math.isnan(tie.t_low) and not tie.separated
    assert tie.p == 0.25  # all 3 seeds share a sign: 2 * 2^-3
    said = claim(tie, "higher", "lower", "no detectable difference", holm_p=1.0, family="3 differences")
    assert said.startswith("no detectable difference (-0.050, no spread over the 3 seeds: paired t undefined")
    assert "sign test p = 0.25" in said
    shifted = difference_estimate([0.1, 0.2, 0.3], [0.2, 0.3, 0.4], paired=True, rng=np.random.default_rng(0))
    assert math.isnan(shifted.t_low) and not shifted.separated
    zero = difference_estimate([0.1, 0.2], [0.1, 0.2], paired=True, rng=np.random.default_rng(0))
    assert (zero.t_low, zero.t_high, zero.p) == (0.0, 0.0, 1.0)
    d, low, high = welch_interval([0.2, 0.2, 0.2], [0.5, 0.5, 0.5])  # unpaired: exact rank test
    assert d == pytest.approx(0.3) and math.isnan(low) and math.isnan(high)
    unpaired = difference_estimate([0.2] * 3, [0.5] * 3, paired=False, rng=np.random.default_rng(0))
    assert unpaired.p == pytest.approx(0.1) and "rank test p = 0.1" in claim(unpaired, "up", "down", "none", 1.0, "f")


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


def test_with_3_seeds_the_bootstrap_is_the_sample_range_and_the_report_says_range():
    """1 resample in 27 repeats the smallest value three times: more than the 2.5% the percentile cuts."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        x = rng.normal(size=3)
        assert bootstrap_interval(x, rng=rng)[1:] == pytest.approx((x.min(), x.max()))
        a, b = rng.normal(size=3), rng.normal(size=3)
        assert paired_bootstrap_difference(a, b, rng=rng)[1:] == pytest.approx(((b - a).min(), (b - a).max()))
    assert seed_spread([1.0, 3.0, 2.0], rng=rng) == ("range", 1.0, 3.0)
    assert seed_spread([1.0, 3.0, 2.0, 2.5], rng=rng)[0] == "bootstrap"
    e = difference_estimate([0.0, 0.0, 0.0], [0.1, -0.2, 0.3], paired=True, rng=rng)
    assert (e.spread, e.low, e.high) == ("range", -0.2, 0.3) and "range" in e.as_dict()


def test_with_3_seeds_a_null_range_excludes_0_a_quarter_of_the_time_and_t_5_percent():
    """The claim the report makes: three seeds share a sign with probability 1/4 under a symmetric null."""
    rng = np.random.default_rng(5)
    trials, range_hits, t_hits = 4000, 0, 0
    for _ in range(trials):
        e = mean_estimate(rng.normal(size=3), rng=rng)
        range_hits += e.spread_separated
        t_hits += e.separated
    assert range_hits / trials == pytest.approx(0.25, abs=0.02)
    assert t_hits / trials == pytest.approx(0.05, abs=0.012)
    assert "probability 0.25" in how_to_read(3, [(8, "differences", "beside them")])
    assert "90% for at least one of 8" in how_to_read(3, [(8, "differences", "beside them")])
    assert "about 0.4 would exclude 0 by chance" in how_to_read(3, [(8, "differences", "beside them")])


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
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap_difference([1.0, 2.0], [1.0], rng=np.random.default_rng(0))


def test_negatively_correlated_pairs_make_the_paired_t_wider_than_welch():
    """Why Welch is no conservative companion: when a seed's good baseline comes with a poor
    population, the per-seed differences vary more than either side."""
    a, b = [0.80, 0.85, 0.80], [0.925, 0.8625, 0.85]
    _, p_low, p_high = paired_t_interval(a, b)
    _, w_low, w_high = welch_interval(a, b)
    assert p_high - p_low > w_high - w_low


def test_holm_equals_the_hand_computation():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.5, math.nan, 0.02])  # NaN is not in the family: m = 2
    assert adjusted[0] == pytest.approx(0.5) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0]) and holm([0.6, 0.7, 0.9]) == pytest.approx([1.0, 1.0, 1.0])


def test_the_words_follow_the_t_interval():
    rng = np.random.default_rng(0)
    rise = difference_estimate([0.1, 0.5, 0.9], [0.15, 0.56, 0.94], paired=True, rng=rng)
    flat = difference_estimate([0.1, 0.5, 0.9], [0.2, 0.4, 0.95], paired=True, rng=rng)
    assert verdict(rise, "rose", "fell", "no detectable change") == "rose"
    assert flat.spread_separated is False and verdict(flat, "rose", "fell", "no detectable change") == (
        "no detectable change"
    )
    said = claim(rise, "rose", "fell", "no detectable change", holm_p=0.3, family="19 changes")
    assert said.startswith("rose (+0.050, paired t [+0.025, +0.075], p = 0.0") and "not kept by Holm" in said
    assert "Holm" not in claim(flat, "rose", "fell", "no detectable change", holm_p=1.0, family="19 changes")


def test_mdd_is_the_exact_noncentral_t_answer():
    # The textbook (G*Power, paired t, d_z = 1, α = 0.05 two-sided): 10 pairs give power 0.803,
    # 9 give less than 0.8, so the MDD in SDs is just under 1 at n = 10 and above 1 at n = 9.
    assert mdd_factor(10) == pytest.approx(0.99600, abs=1e-4) and mdd_factor(9) > 1.0
    df, critical = 9, stats.t.ppf(0.975, 9)
    assert stats.nct.sf(critical, df, math.sqrt(10)) == pytest.approx(0.803, abs=1e-3)
    # At n = 3: 3.264 SDs, against 3.097 from (t_{0.975,2} + t_{0.8,2})/√3, the approximation.
    approx = (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) / math.sqrt(3)
    assert mdd_factor(3) == pytest.approx(3.2640, abs=1e-4) and approx == pytest.approx(3.0965, abs=1e-4)
    assert mdd_factor(30) == pytest.approx((stats.t.ppf(0.975, 29) + stats.t.ppf(0.8, 29)) / math.sqrt(30), rel=1e-3)
    assert minimum_detectable_difference(0.5, 3) == pytest.approx(0.5 * mdd_factor(3))
    assert math.isnan(minimum_detectable_difference(math.nan, 3)) and math.isnan(mdd_factor(1))
    assert sd_factors(3) == pytest.approx((0.5207, 6.2847), abs=1e-4)


def test_the_power_section_reports_the_mdd_in_the_series_units():
    row = power_row("x", [0.0, 1.0, 2.0], [1.0, 1.5, 3.5])  # differences 1.0, 0.5, 1.5
    assert row["mean_difference"] == pytest.approx(1.0) and row["sd_difference"] == pytest.approx(0.5)
    assert row["mdd"] == pytest.approx(0.5 * mdd_factor(3)) and "seeds_needed" not in row
    lines = "\n".join(power_lines([row, power_row("same", [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])]))
    assert "MDD = 3.26 × the SD of the per-seed differences" in lines and "from 0.52 to 6.3 times" in lines
    assert "| x | 3 | +1 | 0.5 | 1.63 |" in lines
    # Tied seeds measure no spread: an MDD of 0 ("any difference is detectable") would be the bias.
    assert "| same | 3 | +0 | 0 | n/a (the seeds tie: no spread measured) |" in lines
    assert "10 seeds 1.00" in lines


def test_seeds_that_all_give_one_level_print_no_interval_not_a_zero_width_one():
    """Three seeds at 0.000 (a share over a few tasks each): a [0.000, 0.000] t-interval would read as
    precision; the cell says the seeds tie."""
    tie = mean_estimate([0.0, 0.0, 0.0], rng=np.random.default_rng(0))
    assert (tie.t_low, tie.t_high) == (0.0, 0.0)
    assert "[none: the seeds tie]" in estimate_cell(tie)
    assert "[0.000, 0.000]" not in estimate_cell(tie) and "[0, 0]" not in estimate_cell(tie)
    spread = mean_estimate([0.1, 0.2, 0.3], rng=np.random.default_rng(0))
    assert "seeds tie" not in estimate_cell(spread)
