"""The seed protocol: intervals that have the stated coverage, and a comparison that separates runs
only when the seeds' spread allows it."""

import json
import math
import random

import pytest

from populora_nb.analysis.protocol import (
    band,
    compare,
    comparison_table,
    end_value,
    t_interval,
    t_quantile,
    welch_interval,
    write_seed_report,
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


def _run(path, values_per_step, members=("T0", "S0")):
    path.mkdir(parents=True)
    rows = [{"step": s, "member": m, "student/solve_rate": v} for s, v in enumerate(values_per_step) for m in members]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _experiments(tmp_path, baseline, population):
    exps = []
    for k, (b, p) in enumerate(zip(baseline, population)):
        e = tmp_path / f"seed-{k}"
        _run(e / "baseline", b, members=("agent",))
        _run(e / "population", p)
        exps.append(e)
    return exps


def test_a_difference_within_the_seed_spread_is_not_separated(tmp_path):
    exps = _experiments(
        tmp_path, baseline=[[0.2, 0.3], [0.5, 0.6], [0.1, 0.2]], population=[[0.3, 0.4], [0.2, 0.3], [0.6, 0.5]]
    )
    (c,) = compare(exps, keys=("student/solve_rate",), window=1)
    assert c.baseline == (0.3, 0.6, 0.2) and c.population == (0.4, 0.3, 0.5)
    assert not c.separated and c.low < 0 < c.high


def test_a_consistent_difference_is_separated_and_tabled(tmp_path):
    exps = _experiments(
        tmp_path, baseline=[[0.1, 0.2], [0.15, 0.2], [0.1, 0.25]], population=[[0.5, 0.6], [0.55, 0.65], [0.5, 0.62]]
    )
    (c,) = compare(exps, keys=("student/solve_rate",), window=2)
    assert c.separated and c.low > 0
    row = comparison_table([c])[1]
    assert row[0] == "fresh-task solve rate ρ" and row[1] == "3 / 3" and row[-1] == "yes"
    b = band([e / "population" for e in exps], "student/solve_rate")
    assert list(b.steps) == [0, 1] and list(b.n_seeds) == [3, 3] and b.low[0] < b.mean[0] < b.high[0]
    assert end_value(exps[0] / "baseline", "student/solve_rate", window=2) == pytest.approx(0.15)
    md = write_seed_report(exps, tmp_path / "report")
    assert "| fresh-task solve rate ρ | 3 / 3 |" in md.read_text()
    assert (tmp_path / "report" / "seeds_student_solve_rate.png").stat().st_size > 1000
