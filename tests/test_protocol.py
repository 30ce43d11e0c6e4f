"""The seed protocol: a comparison that separates runs only when the paired t allows it, coverage
that volume alone cannot raise, the rating spread, and the report (seeds.md, seeds.json, figures),
whose every sentence about a rise, fall or difference is backed by a t-interval that excludes 0.
The interval arithmetic itself is tested in test_seed_stats.py."""

import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from populora_nb.analysis.coverage import rarefy
from populora_nb.analysis.frames import read_stream
from populora_nb.config import AGENTS, load_config, load_saved_config
from populora_nb.matchmaking import Match, initial_ratings, make_trueskill, update_ratings
from studies.liveness_report import protocol_liveness
from studies.probe_floor import probe_floor_lines
from studies.protocol import COLUMNS, compare, comparison_table, finding_lines, write_seed_report
from studies.protocol_series import (
    RunRecords,
    band,
    coverage_window_units,
    end_value,
    expected_distinct,
    final_ranking,
    plot_step_band,
    programs_per_step,
    rating_spread_series,
    run_records,
    start_value,
)
from studies.series import BAND_KEY, HEADLINE
from studies.synthetic import random_program, write_synthetic_experiment
from studies.windows import complexity_windows


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
        tmp_path, baseline=[[0.2, 0.31], [0.5, 0.6], [0.1, 0.19]], population=[[0.3, 0.4], [0.2, 0.3], [0.6, 0.5]]
    )
    (c,) = compare(exps, keys=("student/solve_rate",), window=1)
    assert c.baseline == (0.31, 0.6, 0.19) and c.population == (0.4, 0.3, 0.5) and c.paired
    assert not c.separated and c.low < 0 < c.high and c.t_low < c.low and c.estimate.t_kind == "paired t"
    # Start and change: every seed rises by 0.09-0.11 in the baseline, so its change is separated.
    base = c.runs["baseline"]
    assert base.start == pytest.approx((0.2, 0.5, 0.1)) and base.change.mean == pytest.approx(0.1)
    assert base.change.separated and 0 < base.change.t_low < 0.09 == pytest.approx(base.change.low)
    row = comparison_table([c])[1]
    assert row[-1] == "no detectable difference" and row[6] == "paired t"
    (said,) = finding_lines([c])
    assert "no detectable difference between population and baseline" in said and "baseline rose" in said
    assert "population shows no detectable change" in said  # 0.1, -0.1 and ... straddle 0


def test_a_consistent_difference_is_separated_and_tabled(tmp_path):
    exps = _experiments(
        tmp_path, baseline=[[0.1, 0.2], [0.15, 0.2], [0.1, 0.25]], population=[[0.5, 0.6], [0.55, 0.65], [0.5, 0.62]]
    )
    (c,) = compare(exps, keys=("student/solve_rate",), window=2)
    assert c.separated and c.t_low > 0 and c.low > 0
    row = comparison_table([c])[1]
    assert row[0] == "fresh-task solve rate ρ" and row[1] == "3 / 3" and row[6] == "paired t"
    assert row[5].startswith("range [+") and row[-1] == "population higher"  # a family of 1: Holm keeps it
    b = band([e / "population" for e in exps], "student/solve_rate")
    assert list(b.steps) == [0, 1] and list(b.n_seeds) == [3, 3] and b.low[0] < b.mean[0] < b.high[0]
    assert end_value(exps[0] / "baseline", "student/solve_rate", window=2) == pytest.approx(0.15)
    assert start_value(exps[0] / "baseline", "student/solve_rate", window=1) == pytest.approx(0.1)
    md = write_seed_report(exps, tmp_path / "report")
    assert "| fresh-task solve rate ρ | 3 / 3 |" in md.read_text()
    assert (tmp_path / "report" / "seeds_student_solve_rate.png").stat().st_size > 1000


def test_seeds_that_tie_at_a_ceiling_get_a_sentence_but_no_verdict(tmp_path):
    """The interim records of issue #31's protocol: the baseline's valid rate ends at 1.0 and the
    population's at 0.95 in every seed. The sentence and the table say so, and claim nothing."""
    exps = _experiments(tmp_path, baseline=[[0.8, 1.0], [0.9, 1.0], [1.0, 1.0]], population=[[0.9, 0.95]] * 3)
    (c,) = compare(exps, keys=("student/solve_rate",), window=1)
    assert not c.separated and c.estimate.p == 0.25
    row = dict(zip(COLUMNS, comparison_table([c])[1]))
    assert row["population − baseline [95% t]"] == "-0.050 [none: the seeds tie]"
    assert row["verdict"] == "no detectable difference"
    (said,) = finding_lines([c])
    assert "no detectable difference between population and baseline at the end (-0.050, no spread" in said
    assert "population shows no detectable change" in said  # +0.05 in every seed: a tie, not a rise


def test_runs_at_different_seeds_are_compared_unpaired(tmp_path):
    exps = _experiments(tmp_path, baseline=[[0.1], [0.2], [0.15]], population=[[0.5], [0.6], [0.55]])
    (exps[0] / "population" / "metrics.jsonl").unlink()  # seed-0's population never logged
    (c,) = compare(exps, keys=("student/solve_rate",), window=1)
    assert not c.paired and c.baseline == (0.1, 0.2, 0.15) and c.population == (0.6, 0.55)
    assert c.difference == pytest.approx(0.575 - 0.15) and c.estimate.t_kind == "Welch t"
    assert comparison_table([c])[1][6] == "Welch t (unpaired)"


# ----------------------------------------------------------------------------- coverage
def _task_run(path, rhos_per_step, program="def f(x):\n    return x + 1"):
    """A run directory whose tasks.jsonl holds valid fresh tasks of the given solve rates per step, plus an
    invalid task and a buffer top-up (no rho) each step, which the band share must not count."""
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text(json.dumps({"step": 0, "member": "agent"}) + "\n")
    rows = []
    for step, rhos in enumerate(rhos_per_step):
        extra = [{"valid": False, "solve_rate": None}, {"valid": True, "solve_rate": None}]
        for t in [{"valid": True, "solve_rate": r} for r in rhos] + extra:
            rows.append({"step": step, "kind": "code_i", "program": program, "proposer": "agent", **t})
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_band_share_counts_played_tasks_in_0_rho_1_per_step_whatever_their_number(tmp_path):
    """Issue #31: the band share is a share of each step's played tasks, so a run that plays four times
    as many tasks with the same mix scores the same; ρ = 0 and ρ = 1 are outside the band."""
    few = run_records(_task_run(tmp_path / "few", [[0.0, 0.5], [1.0, 1.0], [0.25, 0.75, 0.0, 1.0]]))
    many = run_records(_task_run(tmp_path / "many", [[0.0, 0.5] * 4, [1.0] * 8, [0.25, 0.75, 0.0, 1.0] * 4]))
    assert few.series(BAND_KEY) == {0: 0.5, 1: 0.0, 2: 0.5}
    assert many.series(BAND_KEY) == few.series(BAND_KEY)
    assert BAND_KEY in HEADLINE


def test_expected_distinct_is_the_mean_of_random_draws():
    units = [frozenset({"a", "b"}), frozenset({"a"}), frozenset({"c"}), frozenset(), frozenset({"b", "d"})]
    curve = rarefy(units, np.random.default_rng(0), n_resamples=20_000)
    for n in range(len(units) + 1):
        assert expected_distinct(units, n) == pytest.approx(curve.mean[n], abs=0.03)
    assert expected_distinct(units, 5) == 4 and expected_distinct(units, 0) == 0
    assert math.isnan(expected_distinct(units, 6))


def _iid_run(path, seed, per_step, n_steps=4):
    """Valid code_o tasks whose programs are drawn independently from one distribution (levels 1-3)."""
    rng = random.Random(seed)
    rows = [
        {"step": s, "proposer": f"T{i % 4}", "kind": "code_o", "program": random_program(rng, rng.choice((1, 2, 3))),
         "valid": True, "inputs": ["1"], "outputs": ["1"], "solve_rate": 0.5}
        for s in range(n_steps)
        for i in range(per_step)
    ]  # fmt: skip
    path.mkdir(parents=True)
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_coverage_rewards_diversity_not_volume(tmp_path):
    """Same program distribution, the population writing 3x the programs per step. Under this null a
    95% interval still excludes 0 for about 1 seed set in 20 (the bootstrap more often, it
    under-covers), so the seeds are fixed; the gap it must stay well under is the raw one."""
    exps = []
    for k in range(6):
        _iid_run(tmp_path / f"seed-{k}" / "baseline", 2 * k, per_step=3)
        _iid_run(tmp_path / f"seed-{k}" / "population", 2 * k + 1, per_step=9)
        exps.append(tmp_path / f"seed-{k}")
    # Counted raw, the 3x run "covers" far more: the confound the rarefaction removes.
    raw = {
        run: np.mean([expected_distinct(u, len(u)) for e in exps for u in coverage_window_units(
            run_records(e / run).tasks, "coverage/ngrams", 2)])
        for run in ("baseline", "population")
    }  # fmt: skip
    raw_gap = raw["population"] - raw["baseline"]
    assert raw_gap > 0.1 * raw["baseline"]
    (c,) = compare(exps, keys=("coverage/ngrams",), window=2)
    assert c.n_units == 6 and c.paired  # 3 programs x 2 steps in the smaller run's windows
    assert c.low < 0 < c.high and c.t_low < 0 < c.t_high and not c.separated
    assert abs(c.difference) < 0.25 * raw_gap

    # Genuinely more diverse programs (the arms race vs the collapse) do score higher, although
    # the collapsing baseline's windows fix a small common n.
    diverse = [write_synthetic_experiment(tmp_path / "diverse" / f"seed-{k}", n_steps=8, seed=k) for k in range(3)]
    (d,) = compare(diverse, keys=("coverage/ngrams",), window=3)
    assert d.separated and d.t_separated and d.low > 0
    assert d.runs["baseline"].change.mean < 0 < d.runs["population"].change.mean


# ----------------------------------------------------------------------------- ratings
def test_rating_spread_is_the_within_role_standard_deviation_of_mu():
    def row(step, member, mu):
        return {"step": step, "member": member, "role": "teacher" if member[0] == "T" else "student", "rating/mu": mu}

    rows = [row(0, m, mu) for m, mu in (("T0", 20.0), ("T1", 24.0), ("S0", 25.0), ("S1", 31.0))]
    rows.append(row(1, "T0", 22.0))  # one member of one role: no spread
    rows = pd.DataFrame(rows)
    assert rating_spread_series(rows) == {0: pytest.approx((2.0 + 3.0) / 2)}
    # Teachers far below students but equal within each role: the roles' gap is not a spread.
    gap = [row(0, m, mu) for m, mu in (("T0", 10.0), ("T1", 10.0), ("S0", 40.0), ("S1", 40.0))]
    assert rating_spread_series(pd.DataFrame(gap)) == {0: 0.0}
    assert final_ranking(rows) == ["T0"] and final_ranking(pd.DataFrame([{"step": 0, "member": "agent"}])) == []


def _rated_run(path, seed, n_steps=12, loser=True):
    """A population of teachers T0-T2 and students S0, S1 trading wins; with ``loser`` teacher T2
    writes only invalid tasks (loses every match), without it T2 plays like T0 and T1."""
    rng = random.Random(seed)
    env = make_trueskill()
    ratings = initial_ratings(["T0", "T1", "T2", "S0", "S1"], env)
    rows = []
    for step in range(n_steps):
        pairs = (("T0", "S0"), ("T1", "S1"), ("T0", "S1"), ("T1", "S0"), ("T2", "S1"))
        matches = [Match(t, s, valid=True, rho=rng.choice([0.25, 0.75]), rollouts=4) for t, s in pairs]
        matches[-1] = Match("T2", "S1", valid=False, rollouts=4) if loser else matches[-1]
        ratings = update_ratings(ratings, matches, env)
        rows += [
            {"step": step, "member": m, "role": "teacher" if m[0] == "T" else "student", "rating/mu": r.mu}
            for m, r in ratings.items()
        ]
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_member_that_always_loses_ranks_last_and_spreads_the_ratings(tmp_path):
    exps = []
    for k in range(3):
        e = tmp_path / f"seed-{k}"
        _run(e / "baseline", [0.5] * 12, members=("agent",))  # no ratings: a single agent plays no matches
        _rated_run(e / "population", seed=k)
        exps.append(e)
        assert final_ranking(run_records(e / "population").metrics)[-1] == "T2"
    (c,) = compare(exps, keys=("rating/mu_spread",), window=3)
    assert c.runs["baseline"].seeds == () and math.isnan(c.difference)
    assert comparison_table([c])[1][2] == "n/a (no ratings)"
    # The same population without the loser (the control, in the baseline slot) spreads less.
    controls = []
    for k in range(3):
        e = tmp_path / f"control-{k}"
        _rated_run(e / "baseline", seed=k, loser=False)
        _rated_run(e / "population", seed=k)
        controls.append(e)
    (d,) = compare(controls, keys=("rating/mu_spread",), window=3)
    assert d.paired and d.difference > 1.0 and d.separated


# ----------------------------------------------------------------------------- the report
def test_the_report_writes_tables_numbers_and_a_figure_per_series(tmp_path):
    exps = [write_synthetic_experiment(tmp_path / f"seed-{k}", n_steps=10, seed=k) for k in range(3)]
    md = write_seed_report(exps, tmp_path / "report", window=5, n_resamples=2000).read_text()
    assert "n = 3 seeds" in md and "the 95% percentile bootstrap is the seeds' own range" in md
    assert "about 0.7 would exclude 0 by chance" in md and "| Holm p |" in md and "conservative" not in md
    assert "| paired t |" in md and "## What the seeds show" in md
    assert md.count("| series | seeds (baseline / population) |") == 1 and "| series | run | seeds |" in md
    for meaning in HEADLINE.values():
        assert f"| {meaning}" in md
    assert "- **population − baseline [95% t]**:" in md and "- **change end − start**:" in md
    assert "## Smallest detectable difference" in md and "seeds needed" not in md.lower()

    def no_nan(token):
        raise AssertionError(f"{token} in seeds.json: not strict JSON")

    record = json.loads((tmp_path / "report" / "seeds.json").read_text(), parse_constant=no_nan)
    assert record["n_seeds"] == 3 and record["window"] == 5 and set(record["series"]) == set(HEADLINE)
    sloc = record["series"]["complexity/sloc"]
    base = sloc["runs"]["baseline"]
    assert base["seeds"] == ["seed-0", "seed-1", "seed-2"]
    # complexity: pooled over fixed step windows, the first and last 5 of the 10 steps
    start, end = complexity_windows(run_records(exps[1] / "baseline").tasks, "sloc", 5)
    assert (start.first, start.last, end.first, end.last) == (0, 4, 5, 9) and min(start.n, end.n) >= 5
    assert (base["start"]["seed-1"], base["end"]["seed-1"]) == pytest.approx((start.value, end.value))
    assert (
        end_value(exps[1] / "baseline", "student/solve_rate", 5)
        == pytest.approx(base_rho := record["series"]["student/solve_rate"]["runs"]["baseline"]["end"]["seed-1"])
        and start_value(exps[1] / "baseline", "student/solve_rate", 5) != base_rho
    )
    low, high = base["end_interval"]["t"]
    # per step with a newly written program (a step of copies only has no complexity value)
    assert low <= base["end_interval"]["mean"] <= high and 0 < len(base["per_step"]["seed-0"]) <= 10
    assert sloc["difference"]["paired"] and sloc["difference"]["separated"] and sloc["difference"]["mean"] > 0
    assert sloc["difference"]["t_kind"] == "paired t" and 0 <= sloc["difference"]["holm_p"] <= 1
    assert "range" in sloc["difference"] and "bootstrap" not in sloc["difference"]
    assert all(p is None or "mdd" in p for p in record["power"])
    coverage = record["series"]["coverage/ngrams"]
    assert coverage["n_units"] >= 2 and len(coverage["runs"]["population"]["end"]) == 3
    assert record["series"]["reward/propose_mean"]["difference"]["mean"] is None  # synthetic runs log none
    for key in HEADLINE:
        png = tmp_path / "report" / f"seeds_{key.replace('/', '_')}.png"
        assert png.stat().st_size > 1000, png
        assert f"]({png.name})" in md


def test_proposer_rewards_of_different_definitions_are_not_differenced(tmp_path):
    """AZR's proposer reward and PopuLoRA's teacher reward score the same outcomes differently
    (−0.5 vs 0 for a task solved by none or all): a population − baseline gap would be definitional."""
    exps = []
    for k in range(3):
        e = tmp_path / f"seed-{k}"
        for run, level, members in (("baseline", -0.5, ("agent",)), ("population", 0.0, ("T0", "S0"))):
            (e / run).mkdir(parents=True)
            rows = [
                {"step": s, "member": m, "reward/propose_mean": level + 0.01 * s} for s in range(6) for m in members
            ]
            (e / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        exps.append(e)
    (c,) = compare(exps, keys=("reward/propose_mean",), window=2)
    assert math.isnan(c.difference) and not c.separated
    assert c.runs["population"].change.mean == pytest.approx(0.04)  # within a run it still means something
    assert "not comparable" in comparison_table([c])[1][4]


def test_rarefied_coverage_is_bit_identical_whatever_the_order_of_units():
    """A report is reproducible to the last digit: the sum may not follow set or insertion order."""
    rng = random.Random(1)  # a draw where summing in first-seen order differs in the last digit
    units = [frozenset(f"f{rng.randrange(60)}" for _ in range(rng.randrange(1, 8))) for _ in range(40)]
    shuffled = units[:]
    random.Random(1).shuffle(shuffled)
    assert expected_distinct(units, 9) == expected_distinct(shuffled, 9)
    assert expected_distinct(units, 9) == expected_distinct(units[::-1], 9)


# ----------------------------------------------------------------------------- the committed protocol
# The first protocol, under the rules before issue #27: its numbers are pinned as a check of the statistics.
PROTOCOL = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu-protocol-before-27"
COMMITTED = [PROTOCOL / f"seed{k}" for k in range(3)]


def test_the_committed_valid_rate_difference_is_the_paired_t_of_the_issue():
    """Issue #28: across the 3 committed seeds the runs are negatively correlated, so the paired t
    [-0.080, +0.205] is wider than the Welch interval [-0.02, +0.15] the report used to print."""
    (c,) = compare(COMMITTED, keys=("teacher/valid_rate",))
    row = dict(zip(COLUMNS, comparison_table([c])[1]))
    assert row["test"] == "paired t" and row["population − baseline [95% t]"] == "+0.062 [-0.080, +0.205]"
    assert row["spread of the per-seed differences"] == "range [+0.013, +0.125]"
    assert row["verdict"] == "no detectable difference"


def _intervals(sentence: str) -> list[tuple[float, float]]:
    return [(float(lo), float(hi)) for lo, hi in re.findall(r"t \[([-+]?[\d.]+), ([-+]?[\d.]+)\]", sentence)]


MOVED = re.compile(r"\b(rose|fell|higher|lower|raised|lowered)\b")


def _check_claims(md: str) -> int:
    """Every clause of the findings and the warm-up sentence: a word of movement exactly where its
    t-interval excludes 0, and none where there is no interval (seeds that tie). Returns the claims."""
    claims = [line for line in md.splitlines() if line.startswith("- **") and " (" in line and "p = " in line]
    for line in claims + [line for line in md.splitlines() if line.startswith(("The warm-up", "Every seed gained"))]:
        for part in line.split(";"):
            moved = MOVED.search(part.split("(")[0])
            (low, high), *_ = _intervals(part) or [(math.nan, math.nan)]
            if math.isnan(low):
                assert not moved, part
                continue
            assert bool(moved) == (low > 0 or high < 0), part
    return len(claims)


def test_no_sentence_of_the_committed_report_claims_more_than_its_interval():
    md = (PROTOCOL / "seeds.md").read_text()
    assert _check_claims(md) >= 9 and "The warm-up raised the held-out valid rate" in md
    # The regenerated report is what the analysis writes from the committed records.
    lines = finding_lines(compare(COMMITTED))
    assert all(line in md for line in lines)


# The protocol at the preset issue #31's pilot chose, under the first probe (3 seeds x 40 steps; its
# README says how it ran and why it was re-run).
FIRST_PROBE = PROTOCOL.parent / "cpu-protocol-first-probe"
FIRST_PROBE_SEEDS = [FIRST_PROBE / f"seed{k}" for k in range(3)]


def test_the_first_probe_protocol_is_what_the_analysis_writes_and_claims_only_its_intervals():
    md = (FIRST_PROBE / "seeds.md").read_text()
    assert _check_claims(md) >= 12
    assert all(line in md for line in finding_lines(compare(FIRST_PROBE_SEEDS)))
    # Read before any curve: the mechanism section is what the analysis writes from the records, with
    # per seed the repeat rate, teacher games won, children judged at eligible events and the band share
    # over non-repeats; the probe section flags the floor-bound probe the records hold.
    lines, live = protocol_liveness(FIRST_PROBE_SEEDS)
    assert all(line in md for line in lines)
    for seed in live["seeds"]:
        pop = seed["population"]
        assert pop["repeats"][0] > 0 and pop["teacher_games"][1] > 0 and pop["children"]["born"] == 6, seed
        assert pop["band"][1] < pop["band_all"][1], seed
    assert live["pooled_children"]["n"] == 6  # only the step-10 children reach an eligible event in 40 steps
    assert "floor-bound" in md and "## Complexity in fixed step windows" in md
    # Streams over 100 KB are committed compressed and read the same.
    assert (FIRST_PROBE_SEEDS[0] / "population" / "tasks.jsonl.gz").is_file()
    assert run_records(FIRST_PROBE_SEEDS[0] / "population").played


# The protocol re-run under the current probe (issue #53), committed one finished seed at a time.
RERUN = PROTOCOL.parent / "cpu-protocol"


def test_every_committed_seed_of_the_rerun_is_finished_and_carries_the_presets_probe():
    """What the README quotes comes from the current instrument: every committed seed's configs carry
    the probe the `cpu` preset asks for now, and each of its runs holds all its steps (a half-copied
    seed, or one run under another probe, fails)."""
    seeds = sorted(RERUN.glob("seed?"))
    assert seeds, f"no committed seed under {RERUN}"
    preset = load_config("cpu")
    for seed in seeds:
        assert load_saved_config(seed / "config.yaml").probe == preset.probe, seed
        for agent in AGENTS:
            config = load_saved_config(seed / agent / "config.yaml")
            assert config.probe == preset.probe and config.run.steps == preset.run.steps, (seed, agent)
            rows = read_stream(seed / agent, "metrics")
            assert sorted(set(rows["step"])) == list(range(config.run.steps)), (seed, agent)
            probed = sorted(set(read_stream(seed / agent, "probe")["step"]))
            assert probed == list(range(0, config.run.steps, preset.probe.every)), (seed, agent)


RERUN_SEEDS = [RERUN / f"seed{k}" for k in range(3)]


def test_the_rerun_is_what_the_analysis_writes_and_claims_only_its_intervals():
    """The report the README, docs/laptop-run.md and notebook 07 quote: `seeds.md` is what the
    analysis writes from the three committed seeds now (its findings, the mechanism section and the
    probe section), and no sentence of it claims more than its interval."""
    md = (RERUN / "seeds.md").read_text()
    assert "n = 3 seeds" in md and _check_claims(md) >= 12
    assert all(line in md for line in finding_lines(compare(RERUN_SEEDS)))
    lines, live = protocol_liveness(RERUN_SEEDS)
    assert all(line in md for line in lines)
    for seed in live["seeds"]:
        pop = seed["population"]
        assert pop["repeats"][0] > 0 and pop["teacher_games"][1] > 0 and pop["children"]["born"] > 0, seed
    probe, _ = probe_floor_lines(RERUN_SEEDS)
    assert all(line in md for line in probe if line)


def test_repeats_are_their_own_series_and_leave_the_non_repeat_band_and_rho(tmp_path):
    """A run that poses one task and then replays it: the replays count in the repeat rate and in the ρ
    of repeats (rising: memory), not in the band share or ρ of non-repeats."""
    path = tmp_path / "run"
    path.mkdir()
    (path / "metrics.jsonl").write_text(json.dumps({"step": 0, "member": "agent"}) + "\n")
    task = {"kind": "code_i", "proposer": "agent", "valid": True, "inputs": ["1"], "outputs": ["2"]}
    rows = [
        {**task, "step": 0, "program": "def f(x):\n    return x + 1", "solve_rate": 0.25},
        {**task, "step": 1, "program": "def f(x):\n    return x+1  # again", "solve_rate": 0.75},
        {**task, "step": 1, "program": "def f(x):\n    return x - 1", "solve_rate": 0.0},
        {**task, "step": 2, "program": "def f(x):\n    return x + 1", "solve_rate": 1.0},
    ]
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = run_records(path)
    assert run.series("repeats/repeat_rate") == {0: 0.0, 1: 0.5, 2: 1.0}
    assert run.series("rho/repeats") == {1: 0.75, 2: 1.0} and run.series("rho/non_repeats") == {0: 0.25, 1: 0.0}
    assert run.series("band/share_non_repeats") == {0: 1.0, 1: 0.0} and run.series(BAND_KEY)[1] == 0.5
    assert {"repeats/repeat_rate", "band/share_non_repeats", "rho/non_repeats", "rho/repeats"} <= set(HEADLINE)


def test_a_complexity_figure_says_how_few_new_programs_each_point_averages(tmp_path):
    """A complexity curve's point is a mean over one seed's newly written programs of a step; at 135M
    that is 0-3 programs, so the figure's title says so, per run, from the records."""
    exps = [write_synthetic_experiment(tmp_path / f"seed-{k}", n_steps=6, seed=k) for k in range(2)]
    title = plot_step_band(exps, "complexity/sloc", smooth=5).axes[0].get_title()
    for run in ("baseline", "population"):
        counts = [c for e in exps for c in programs_per_step(run_records(e / run))]
        tasks = [run_records(e / run).tasks for e in exps]
        assert len(counts) == sum(t["step"].nunique() for t in tasks)  # every step with tasks, zeros included
        assert sum(counts) == sum(int((t["valid"].astype(bool) & t["measured"].astype(bool)).sum()) for t in tasks)
        assert f"{run} median {np.median(counts):g} ({min(counts)}-{max(counts)})" in title
    assert "new programs" not in plot_step_band(exps, "student/solve_rate").axes[0].get_title()
    # a run that only copies: every step holds 0 new programs, and a step of invalid proposals counts 0 too
    copies = pd.DataFrame({"step": [0, 0, 1, 2], "valid": [True, True, True, False], "measured": [False] * 4})
    assert programs_per_step(RunRecords(tmp_path, pd.DataFrame(), copies)) == [0, 0, 0]
    written = copies.assign(measured=[True, True, False, True])
    assert programs_per_step(RunRecords(tmp_path, pd.DataFrame(), written)) == [2, 0, 0]
