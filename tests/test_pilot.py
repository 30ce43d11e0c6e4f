"""The pilot of issue #31: its counts are the records' (band, zero, teacher wins, cost), candidates
with one warm-up setting share one warm-up, and the table names every count behind a share."""

from __future__ import annotations

import json

import pytest

from populora_nb.analysis.liveness import share_interval
from populora_nb.config import load_config
from populora_nb.errors import UserInputError
from populora_nb.records import RunDir
from studies.pilot import (
    Candidate,
    RunFacts,
    _intervals,
    run_facts,
    run_pilot,
    warmup_key,
    write_pilot,
)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_run_facts_count_the_band_the_zeros_and_the_teacher_wins(tmp_path):
    config = load_config("tiny", {"run.agent": "population"})  # win_threshold 1: every contested task
    rd = RunDir.create(tmp_path / "population", config)
    rhos = [0.0, 0.0, 0.25, 0.5, 1.0, None]  # None: valid but never attempted
    written = [{"kind": "code_i", "program": f"def f(x):\n    return x + {i}", "inputs": ["1"]} for i in range(7)]
    tasks = [{"step": 0, "valid": True, "solve_rate": r, **w} for r, w in zip(rhos, written)] + [
        {"step": 0, "valid": False, "solve_rate": None, **written[-1]}
    ]
    _write(rd.path / "tasks.jsonl", tasks)
    _write(
        rd.path / "matches.jsonl",
        [{"step": 0, "valid": True, "rho": r} for r in rhos] + [{"step": 0, "valid": False, "rho": None}],
    )
    _write(
        rd.path / "metrics.jsonl",
        [{"step": s, "member": m, "time/step_s": 10.0 * (s + 1)} for s in range(2) for m in ("T0", "S0")],
    )
    f = run_facts(rd.path)
    assert (f.played, f.in_band, f.at_zero, f.valid, f.proposals) == (5, 2, 2, 6, 7)
    assert f.band_share == 2 / 5 and f.zero_share == 2 / 5
    # the teacher won most games only at ρ = 1/4 (3 of 4); at ρ = 1/2 it won 2 of 4: contested, not won
    assert (f.valid_matches, f.teacher_wins) == (6, 1) and f.win_share == 1 / 6
    assert f.steps == 2 and f.seconds_per_step == 15.0  # one value per step, not one per member row


def test_candidates_with_one_warmup_setting_share_one_warmup_and_the_table_counts(tmp_path):
    warm = {
        "warmup.enabled": True,
        "warmup.examples": 2,
        "warmup.max_rounds": 1,
        "warmup.batch": 2,
        "warmup.measure_rounds": 1,
        "tasks.kinds": ["code_o"],
    }
    candidates = [
        Candidate("a", {}, "the preset"),
        Candidate("b", {"rl.rollouts": 2}, "other rollouts, the same warm-up"),
    ]
    assert warmup_key(load_config("tiny", warm)) == warmup_key(load_config("tiny", {**warm, "rl.rollouts": 2}))
    assert warmup_key(load_config("tiny", warm)) != warmup_key(load_config("tiny", {**warm, "warmup.solver": True}))
    rows = run_pilot("tiny", tmp_path / "pilot", steps=1, candidates=candidates, extra=warm, say=lambda m: None)
    a, b = (tmp_path / "pilot" / n for n in ("a", "b"))
    assert json.loads((b / "stages.json").read_text())["warmup"]["seconds"] == 0.0  # adopted, not rerun
    adapter = "adapter_model.safetensors"
    assert (a / "warmup" / adapter).read_bytes() == (b / "warmup" / adapter).read_bytes()
    assert [r.population.steps for r in rows] == [1, 1] and rows[1].population.valid_matches is not None
    md = write_pilot(rows, tmp_path / "table", "tiny", 1).read_text()
    assert md.count("| baseline |") == 4 and md.count("| population |") == 4  # the band table and the new-task table
    assert "## New tasks" in md and "- **b**: " in md and (tmp_path / "table" / "new_tasks.json").is_file()
    for r in rows:  # every share is printed with the counts it is made of
        f = r.population
        assert f"({f.in_band}/{f.played})" in md or f.played == 0
    saved = json.loads((tmp_path / "table" / "pilot.json").read_text())
    assert [c["candidate"] for c in saved["candidates"]] == ["a", "b"]
    # Resumed, the pilot still reports each candidate's recorded cost (it used to print 0 min)
    again = run_pilot("tiny", tmp_path / "pilot", steps=1, candidates=candidates, extra=warm, say=lambda m: None)
    assert [r.seconds for r in again] == [r.seconds for r in rows] and all(r.seconds > 0 for r in rows)
    # each cost is its recorded stages' seconds: a's includes the warm-up it ran, b's the 0 of the one it adopted
    # (not a > b: under load b's steps can outlast a's tiny warm-up)
    stages = [json.loads((d / "stages.json").read_text()) for d in (a, b)]
    recorded = [sum(s.get("seconds", 0.0) for s in st.values()) for st in stages]
    assert [r.seconds for r in rows] == pytest.approx(recorded)
    assert stages[0]["warmup"]["seconds"] > 0


def test_a_share_carries_its_wilson_interval():
    # Wilson's score interval by its formula (z = 1.96): 12 of 39
    n, d, z = 12, 39, 1.959963984540054
    p = n / d
    centre = (p + z * z / (2 * d)) / (1 + z * z / d)
    half = z / (1 + z * z / d) * (p * (1 - p) / d + z * z / (4 * d * d)) ** 0.5
    low, high = share_interval(n, d)
    assert abs(low - (centre - half)) < 1e-9 and abs(high - (centre + half)) < 1e-9
    assert share_interval(0, 10)[0] == 0.0 and share_interval(0, 10)[1] > 0.2  # no hits is not "surely none"
    f = RunFacts(played=40, in_band=2, at_zero=30, valid_matches=0, teacher_wins=0)
    assert _intervals(f)["win_interval"] is None and _intervals(f)["band_interval"][1] < 0.2


def test_reject_settings_share_the_warmup_and_a_declared_warmup_is_adopted(tmp_path):
    warm = {
        "warmup.enabled": True,
        "warmup.examples": 2,
        "warmup.max_rounds": 1,
        "warmup.batch": 2,
        "warmup.measure_rounds": 1,
        "tasks.kinds": ["code_o"],
    }
    base = warmup_key(load_config("tiny", warm))
    assert base == warmup_key(load_config("tiny", {**warm, "tasks.reject_repeats": True}))
    assert base == warmup_key(load_config("tiny", {**warm, "tasks.reject_copies": "reference"}))
    assert base != warmup_key(load_config("tiny", {**warm, "tasks.n_references": 1}))  # the prompts differ
    k1 = Candidate("k1", {"tasks.n_references": 1}, "one reference", warmup_from="a")
    with pytest.raises(UserInputError, match="run 'a' before it"):
        run_pilot("tiny", tmp_path / "early", steps=1, candidates=[k1], extra=warm, say=lambda m: None)
    rows = run_pilot(
        "tiny", tmp_path / "pilot", 1, [Candidate("a", {}, "the preset"), k1], extra=warm, say=lambda m: None
    )
    a, b = (tmp_path / "pilot" / n for n in ("a", "k1"))
    assert json.loads((b / "stages.json").read_text())["warmup"]["seconds"] == 0.0  # adopted, not rerun
    assert (a / "warmup" / "adapter_model.safetensors").read_bytes() == (
        b / "warmup" / "adapter_model.safetensors"
    ).read_bytes()
    assert RunDir(b / "population").load_config().tasks.n_references == 1 and rows[1].population.steps == 1


def test_pilot_never_writes_over_a_table_unless_told(tmp_path, monkeypatch, capsys):
    # issue 56: `pilot --table docs/results/cpu-pilot` replaced tracked results, and `pilot --only`
    # rewrote pilot.md with the named candidates alone.
    import studies.pilot as cli

    written = []
    monkeypatch.setattr(cli, "run_pilot", lambda preset, out, steps, chosen, overrides, say: [c.name for c in chosen])
    monkeypatch.setattr(cli, "write_pilot", lambda rows, table, preset, steps: written.append((rows, table)) or table)
    results = tmp_path / "results"
    results.mkdir()
    (results / "pilot.md").write_text("the committed table\n")
    assert cli.main(["--out", str(tmp_path / "p"), "--table", str(results)]) == 2
    assert "--replace-table" in capsys.readouterr().err and written == []
    assert cli.main(["--out", str(tmp_path / "p"), "--table", str(results), "--replace-table"]) == 0
    assert written[-1][1] == results
    name = cli.CANDIDATES[0].name
    assert cli.main(["--out", str(tmp_path / "p"), "--only", name]) == 0
    assert written[-1] == ([name], tmp_path / "p" / f"only-{name}")  # beside the full table, not over it
