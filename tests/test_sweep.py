"""Sweeps on a local Ray (2 CPUs): a tiny 2 seeds × 2 grid values sweep in which one trial's worker
dies mid-run; Tune retries it, the retry resumes its experiment directory, and its records equal an
uninterrupted run of the same config. The sweep report aggregates with the seed protocol."""

import json
import re
import shutil
import sys
import tempfile

import pytest

from studies.sweep_spec import CrashOnce, grid_points, make_spec, parse_grid, point_name

STAGES = ("baseline", "population", "analysis", "report")
STREAMS = ("metrics", "tasks", "matches")


def test_grid_points_name_every_combination_stably():
    grid = parse_grid(["population.n_teachers=[1,4]", "evolution.enabled=[true,false]"])
    points = grid_points(grid)
    assert list(points) == [
        f"population.n_teachers-{n}_evolution.enabled-{e}" for n in (1, 4) for e in ("true", "false")
    ]
    assert points["population.n_teachers-4_evolution.enabled-false"] == {
        "population.n_teachers": 4,
        "evolution.enabled": False,
    }
    assert point_name({}) == "default" and grid_points({}) == {"default": {}}


def test_make_spec_checks_every_config_and_takes_resources_from_the_preset(tmp_path):
    from populora_nb.errors import UserInputError

    assert make_spec(tmp_path, "tiny").resources == {"cpu": 1}
    assert make_spec(tmp_path, "smoke").resources == {"cpu": 2}
    assert make_spec(tmp_path, "gpu").resources == {"cpu": 2, "gpu": 1}
    with pytest.raises(UserInputError):
        make_spec(tmp_path, "tiny", {"population.n_teacher": [1, 2]})  # a typo fails before Ray starts
    with pytest.raises(UserInputError):
        make_spec(tmp_path, "tiny", seeds=(1, 1))


def test_importing_the_package_does_not_import_ray():
    import subprocess

    code = "import sys, populora_nb, studies.sweep, populora_nb.__main__; print('ray' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def _records(run_dir):
    from populora_nb.records import RunDir

    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]  # noqa: E731
    return {s: strip(RunDir(run_dir).read(s)) for s in STREAMS}


@pytest.mark.slow
def test_tiny_sweep_survives_a_killed_trial_and_reports(tmp_path):
    ray = pytest.importorskip("ray")
    import torch

    from populora_nb.experiment import run_experiment
    from studies.sweep import run_sweep

    victim = CrashOnce("population.n_teachers-1", 1)
    spec = make_spec(
        tmp_path / "sweep",
        "tiny",
        {"population.n_teachers": [1, 2]},
        seeds=(0, 1),
        overrides={"run.steps": 2, "evolution.enabled": False},  # 1 teacher: nothing to evolve
        stages=STAGES,
        crash_once=victim,
    )
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        report = run_sweep(spec, max_failures=2)
        trials = [spec.experiment_dir(p, s) / "stages.json" for p in spec.points for s in spec.seeds]
        done = [json.loads(t.read_text()) for t in trials]
        mtimes = [t.stat().st_mtime for t in trials]
        # Rerunning the same sweep restores Tune's state: nothing is redone.
        run_sweep(spec, max_failures=2)
        assert mtimes == [t.stat().st_mtime for t in trials]
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)

    assert all(set(STAGES) <= set(stages) for stages in done)
    killed = spec.experiment_dir(victim.point, victim.seed)
    assert (tmp_path / "sweep" / f".crashed-{victim.point}-seed-{victim.seed}").exists(), "the trial was never killed"
    log = (killed / "sweep.log").read_text()
    assert log.count("[experiment] baseline ...") == 2, (
        log
    )  # the first attempt died inside baseline; the retry resumed it

    # An uninterrupted run of the same config (one torch thread, as the trial had).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = run_experiment(
            spec.config(victim.point, victim.seed),
            tmp_path / "ref",
            stages=("baseline", "population"),
            say=lambda m: None,
        )
    finally:
        torch.set_num_threads(threads)
    for agent in ("baseline", "population"):
        assert _records(killed / agent) == _records(ref / agent), agent

    md = report.read_text()
    rows = re.findall(r"^\| (population\.n_teachers-[12]) \| 2 \|", md, re.M)
    assert rows == ["population.n_teachers-1", "population.n_teachers-2"]  # the cross-point table
    assert md.count("| series | seeds (baseline / population) |") == 2  # one seed-protocol table per point
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (report.parent / image).stat().st_size > 1000, image
