import gzip
import shutil

import pytest

from populora_nb.config import load_config
from populora_nb.records import CorruptRunError, RunDir, read_json


def test_rows_round_trip_and_torn_last_line_is_skipped(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    run.append("metrics", [{"step": 0, "member": "agent", "x": float("nan")}, {"step": 1, "member": "agent"}])
    with open(run.path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2, "mem')  # a kill mid-write
    rows = run.read("metrics")
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["x"] is None
    run.truncate_after(0)
    assert [r["step"] for r in run.read("metrics")] == [0]


def test_a_compressed_copy_of_a_stream_reads_the_same_and_refuses_appends(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    run.append("tasks", [{"step": 0, "valid": True, "solve_rate": 0.5}, {"step": 1, "valid": False}])
    before = run.read("tasks")
    plain = run.path / "tasks.jsonl"
    (run.path / "tasks.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert run.has("tasks") and run.read("tasks") == before and not run.has("matches")
    with pytest.raises(ValueError, match="compressed copy kept for reading"):
        run.append("tasks", [{"step": 2}])
    assert run.read("tasks") == before  # nothing appended beside the archive
    (run.path / "tasks.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(CorruptRunError, match="tasks.jsonl.gz does not read"):
        run.read("tasks")


def test_reopening_with_a_different_config_refuses(tmp_path):
    RunDir.create(tmp_path / "r", load_config("tiny"))
    RunDir.create(tmp_path / "r", load_config("tiny"))
    with pytest.raises(ValueError, match="rl.rollouts: 4 -> 5"):
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


def test_manifest_records_every_file_and_stream_and_names_what_changed(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    run.append("metrics", [{"step": 0, "member": "agent"}, {"step": 1, "member": "agent"}])
    tmp = run.begin_checkpoint(2)
    (tmp / "policy").mkdir()
    (tmp / "policy" / "w.bin").write_bytes(bytes(range(256)))
    (tmp / "state.json").write_text('{"step": 2}')
    path = run.commit_checkpoint(tmp, 2)
    manifest = run.verify_checkpoint(path)
    assert sorted(manifest["files"]) == ["policy/w.bin", "state.json"]
    assert manifest["records"]["metrics"]["rows"] == 2 and manifest["records"]["tasks"]["size"] == 0

    # Rows after the checkpoint and a torn line are cut back to the bytes the manifest recorded.
    committed = (run.path / "metrics.jsonl").read_bytes()
    run.append("metrics", [{"step": 2, "member": "agent"}])
    run.append("tasks", [{"step": 2}])
    with open(run.path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "mem')
    run.truncate_to(run.verify_checkpoint(path))
    assert (run.path / "metrics.jsonl").read_bytes() == committed and run.read("tasks") == []

    data = bytearray((path / "policy" / "w.bin").read_bytes())
    data[7] ^= 1
    (path / "policy" / "w.bin").write_bytes(bytes(data))
    with pytest.raises(CorruptRunError, match=r"step_000002/policy/w.bin is corrupt: 256 bytes"):
        run.verify_checkpoint(path)
    (path / "policy" / "w.bin").unlink()
    with pytest.raises(CorruptRunError, match="w.bin is missing"):
        run.verified_checkpoint()

    (run.path / "metrics.jsonl").write_bytes(committed[:-5])  # a committed row cut
    (path / "policy" / "w.bin").write_bytes(bytes(range(256)))
    with pytest.raises(CorruptRunError, match="metrics.jsonl lost rows of steps committed by checkpoint step_000002"):
        run.verify_checkpoint(path)
    run.verify_checkpoint(path, records=False)  # readers of a finished run check the files only


def test_latest_naming_a_missing_directory_is_corruption_not_no_checkpoint(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    run.commit_checkpoint(run.begin_checkpoint(1), 1)
    shutil.rmtree(run.checkpoint_dir(1))
    with pytest.raises(
        CorruptRunError,
        match=r"latest names 'step_000001', which is not a checkpoint directory "
        r"\(checkpoints present: none\)",
    ):
        run.latest_checkpoint()


def test_damaged_config_yaml_and_json_are_named_in_one_line(tmp_path):
    run = RunDir.create(tmp_path / "r", load_config("tiny"))
    text = (run.path / "config.yaml").read_text()
    (run.path / "config.yaml").write_text(text[: len(text) // 3] + "\n  [")
    with pytest.raises(CorruptRunError, match="config.yaml does not load") as err:
        RunDir.create(run.path, load_config("tiny"))
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)
    (run.path / "x.json").write_text('{"a": [1, 2')
    with pytest.raises(CorruptRunError, match="x.json does not load"):
        read_json(run.path / "x.json")
    (run.path / "metrics.jsonl").write_text('{"step": 0}\n{"st\n{"step": 1}\n')
    with pytest.raises(CorruptRunError, match="metrics.jsonl:2 is not valid JSON"):
        run.read("metrics")
