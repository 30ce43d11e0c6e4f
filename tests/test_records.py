import pytest

from populora_nb.config import load_config
from populora_nb.records import RunDir


def test_rows_round_trip_and_torn_last_line_is_skipped(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    run.append("metrics", [{"step": 0, "member": "agent", "x": float("nan")}, {"step": 1, "member": "agent"}])
    with open(run.path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2, "mem')  # a kill mid-write
    rows = run.read("metrics")
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["x"] is None
    run.truncate_after(0)
    assert [r["step"] for r in run.read("metrics")] == [0]


def test_reopening_with_a_different_config_refuses(tmp_path):
    RunDir.create(tmp_path / "r", load_config("tiny"))
    RunDir.create(tmp_path / "r", load_config("tiny"))
    with pytest.raises(ValueError, match="rl.rollouts: 2 -> 5"):
        RunDir.create(tmp_path / "r", load_config("tiny", {"rl.rollouts": 5}))


def test_checkpoints_commit_atomically_and_keep_the_newest(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    assert run.latest_checkpoint() is None
    for step in (1, 2, 3):
        tmp = run.begin_checkpoint(step)
        (tmp / "state.txt").write_text(str(step))
        run.commit_checkpoint(tmp, step, keep=2)
    step, path = run.latest_checkpoint()
    assert step == 3 and (path / "state.txt").read_text() == "3"
    assert sorted(p.name for p in run.checkpoints.glob("step_*")) == ["step_000002", "step_000003"]
    run.begin_checkpoint(4)  # killed before commit: latest still points at step 3
    assert run.latest_checkpoint()[0] == 3
