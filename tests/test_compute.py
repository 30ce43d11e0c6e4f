"""Compute matching: token counts summed per run, per adapter, and the population/baseline ratios."""

import json

from populora_nb.analysis.compute import compute_table, run_compute


def _write(path, rows):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(members, steps, generated, trained):
    return [
        {"step": s, "member": m, "compute/generated_tokens": generated, "compute/trained_tokens": trained}
        for s in range(steps)
        for m in members
    ]


def test_per_adapter_matching_reads_as_ratio_one_and_total_as_n_members(tmp_path):
    _write(tmp_path / "baseline", _rows(["agent"], 3, 100.0, 40.0))
    # 8 members each spending what the agent spends: per adapter 1.0, in total 8x.
    _write(tmp_path / "population", _rows([f"T{i}" for i in range(4)] + [f"S{i}" for i in range(4)], 3, 100.0, 40.0))
    table = compute_table({"baseline": tmp_path / "baseline", "population": tmp_path / "population"})
    assert table[1] == ["baseline", "1", "3", "300", "120", "300", "120", "reference", "reference"]
    assert table[2] == ["population", "8", "3", "2400", "960", "300", "120", "1.00 / 1.00", "8.00 / 8.00"]


def test_evolution_renames_do_not_count_as_more_adapters():
    rows = _rows(["T0", "S0"], 2, 10.0, 5.0) + [
        {"step": 2, "member": m, "compute/generated_tokens": 10.0, "compute/trained_tokens": 5.0}
        for m in ("T0-child", "S0")
    ]
    c = run_compute("population", rows)
    assert c.adapters == 2 and c.steps == 3 and c.generated == 60.0 and c.generated_per_adapter == 30.0


def test_runs_recorded_before_token_counts_say_so(tmp_path):
    _write(tmp_path / "baseline", [{"step": 0, "member": "agent"}])
    assert run_compute("baseline", [{"step": 0, "member": "agent"}]) is None
    assert compute_table({"baseline": tmp_path / "baseline"})[1][3] == "not recorded"


def test_a_baseline_that_trained_on_nothing_has_no_training_ratio(tmp_path):
    _write(tmp_path / "baseline", _rows(["agent"], 2, 50.0, 0.0))
    _write(tmp_path / "population", _rows(["T0", "S0"], 2, 50.0, 10.0))
    row = compute_table({"baseline": tmp_path / "baseline", "population": tmp_path / "population"})[2]
    assert row[-2:] == ["1.00 / n/a", "2.00 / n/a"]
