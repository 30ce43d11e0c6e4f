"""run.report_to (populora_nb.tracking): TensorBoard event files and an offline W&B run hold the
logged values, the report's figures go along, and a missing backend is one line naming the install."""

import json
import struct
import sys

import pytest

from populora_nb.config import ConfigError, load_config
from populora_nb.errors import UserInputError
from populora_nb.loop import run
from populora_nb.tracking import log_report, open_tracker, step_metrics, trackers
from tests.scripted import ScriptedPolicy


def _tiny(report_to, steps=2):
    return load_config(
        "tiny", {"run.agent": "population", "evolution.enabled": False, "run.steps": steps, "run.report_to": report_to}
    )


def test_report_to_takes_trls_names_and_values():
    assert trackers("none") == () and trackers("wandb") == ("wandb",)
    assert trackers(["tensorboard", "wandb", "none"]) == ("tensorboard", "wandb")
    assert load_config("tiny", {"run.report_to": ["tensorboard", "wandb"]}).run.report_to == ("tensorboard", "wandb")
    with pytest.raises(ConfigError, match=r"run.report_to: unknown tracker 'tensorbord'"):
        load_config("tiny", {"run.report_to": "tensorbord"})


def test_step_metrics_are_namespaced_per_member_and_skip_missing_values():
    rows = [
        {
            "step": 3,
            "member": "T0",
            "role": "teacher",
            "teacher/valid_rate": 0.5,
            "teacher/rho_mean": None,
            "time/step_s": 2.0,
        },
        {"step": 3, "member": "S0", "role": "student", "student/solve_rate": 0.25, "time/step_s": 2.0},
    ]
    assert step_metrics(rows) == {"teacher/valid_rate/T0": 0.5, "student/solve_rate/S0": 0.25, "time/step_s": 2.0}


def test_tensorboard_event_files_of_a_tiny_run_read_back_with_the_logged_values(tmp_path, tokenizer):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rd = run(_tiny("tensorboard"), tmp_path / "r", policy=ScriptedPolicy(tokenizer), progress=False)
    events = EventAccumulator(str(rd.path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for row in rd.read("metrics"):
        for key in ("teacher/valid_rate", "student/solve_rate", "rating/mu"):
            if row.get(key) is not None:
                tag = f"{key}/{row['member']}"
                assert tag in tags, tag
                logged = {e.step: e.value for e in events.Scalars(tag)}
                assert logged[row["step"]] == pytest.approx(row[key], rel=1e-6)
    assert {e.step for e in events.Scalars("time/step_s")} == {0, 1}
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "report_to: tensorboard" in config and "rollouts: 4" in config


def _png(path, color):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), dpi=50)
    fig.add_subplot().bar([0, 1], [1, 2], color=color)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def test_the_reports_figures_go_to_tensorboard_as_images(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _png(tmp_path / "figures" / "solve_rates.png", "C0")
    _png(tmp_path / "figures" / "ratings.png", "C1")
    assert log_report("none", tmp_path, {}) == 0
    assert log_report("tensorboard", tmp_path, {"run": {"report_to": "tensorboard"}}) == 2
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["images"]) == {"figures/solve_rates", "figures/ratings"}
    image = events.Images("figures/ratings")[0]
    assert (image.width, image.height) == (100, 50) and image.encoded_image_string.startswith(b"\x89PNG")


def _wandb_records(path):
    """The records of a .wandb file: W&B's log format (a 7-byte header, then 32 KiB blocks of
    [crc32, length, type]-framed chunks, as LevelDB's log), each a wandb_internal Record."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunks, out = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            out.append(record)
            chunks = b""
    return out


def _wandb_log_tail(run_dir, lines=8):
    """The last lines of W&B's own log for this run (warnings such as a dropped step land there)."""
    logs = [run_dir / "logs" / name for name in ("debug-internal.log", "debug.log")]
    return " | ".join(
        ln for log in logs if log.exists() for ln in log.read_text(errors="replace").splitlines()[-lines:]
    )


@pytest.mark.slow  # W&B starts its service process (a few seconds)
def test_a_wandb_run_is_offline_by_default_and_writes_its_local_run_directory_with_the_metrics(
    tmp_path, tokenizer, monkeypatch
):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    rd = run(_tiny("wandb"), tmp_path / "r", policy=ScriptedPolicy(tokenizer), progress=False)
    (run_dir,) = (rd.path / "wandb").glob("offline-run-*")  # offline: nothing was sent anywhere
    (log,) = run_dir.glob("run-*.wandb")
    records = _wandb_records(log)
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            history[r.history.step.num] = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
    kinds = sorted({str(r.WhichOneof("record_type")) for r in records})
    # what W&B wrote, so that a failure names it: the steps it holds, its record kinds, its own log's tail
    seen = f"history steps {sorted(history)}, records {kinds}; W&B's log: {_wandb_log_tail(run_dir)}"
    for row in rd.read("metrics"):
        if row.get("teacher/valid_rate") is not None:
            assert row["step"] in history, f"no W&B history at step {row['step']}: {seen}"
            assert float(history[row["step"]][f"teacher/valid_rate/{row['member']}"]) == pytest.approx(
                row["teacher/valid_rate"]
            )
    (header,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]  # the run and its config
    config = {u.key: json.loads(u.value_json) for u in header.config.update}
    assert config["run"]["report_to"] == "wandb" and config["rl"]["rollouts"] == 4


@pytest.mark.parametrize("backend", ["tensorboard", "wandb"])
def test_a_missing_backend_is_one_line_naming_the_install(backend, tmp_path, tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, backend, None)  # `import backend` now raises ImportError
    with pytest.raises(UserInputError) as err:
        open_tracker(backend, tmp_path, {})
    message = str(err.value)
    assert "\n" not in message and 'pip install -e ".[track]"' in message and backend in message
    with pytest.raises(UserInputError, match="not installed"):  # the run fails before it does any work
        run(_tiny(backend), tmp_path / "r", policy=ScriptedPolicy(tokenizer), progress=False)
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
