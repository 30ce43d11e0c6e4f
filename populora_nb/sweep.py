"""Seeds × a grid of config overrides as Ray Tune trials: each trial is one resumable experiment
directory (`experiment.run_experiment`), so a reproduction (several seeds) and a study (population
sizes 1+1 / 4+4 / 8+8, matchmaking on/off, operator mixes, as in the paper's ablations) run with one
command on a laptop, a GPU node or a Ray cluster.

    SWEEP/<point>/seed-<k>/   an experiment directory (experiment.py); deterministic, so a retried
                              trial finds and resumes it
    SWEEP/<point>/seeds.md    the seed protocol (protocol.py) for that grid point, with band PNGs
    SWEEP/sweep_report.md     one table across grid points, then each point's seed table and bands
    SWEEP/sweep.json          the sweep's specification (grid, seeds, stages, resources)
    SWEEP/tune/               Ray Tune's own state (restored when the same sweep is rerun)

Fault tolerance is Tune's: a failed trial is retried up to ``max_failures`` times and resumes its
experiment directory from the latest verified checkpoint. Ray is an optional extra (``[sweep]``),
imported only inside the functions that run a sweep.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from populora_nb.analysis.protocol import HEADLINE, compare, comparison_table, write_seed_report
from populora_nb.analysis.protocol_series import run_series
from populora_nb.analysis.seed_stats import md_table
from populora_nb.config import load_config
from populora_nb.errors import UserInputError
from populora_nb.experiment import STAGES, done_stages, run_experiment
from populora_nb.presets import parse_override

# What one trial asks Ray for, per preset: on CPU, torch threads = the trial's CPUs (docs/design.md); on GPU,
# one GPU per trial (the population shares one base model on it), plus CPUs for the sandbox workers.
PRESET_RESOURCES: Mapping[str, Mapping[str, float]] = {
    "tiny": {"cpu": 1},
    "smoke": {"cpu": 2},
    "gpu": {"cpu": 2, "gpu": 1},
    "paper": {"cpu": 2, "gpu": 1},
}
PROGRESS_METRICS: Mapping[str, str] = {"valid": "teacher/valid_rate", "solve_rate": "student/solve_rate"}
"""What Tune's progress table shows per trial: the latest step's mean over members."""


@dataclass(frozen=True)
class CrashOnce:
    """Test hook: the trial of (point, seed) exits (``os._exit(1)``, like a killed worker) after the
    baseline's first logged step, once (a marker file keeps the retry alive)."""

    point: str
    seed: int


@dataclass(frozen=True)
class SweepSpec:
    """Everything a trial needs to build its config and find its experiment directory."""

    out: str
    """The sweep directory (absolute; on a cluster, a filesystem every node mounts)."""
    preset: str
    overrides: dict[str, Any]
    """Overrides shared by every trial (dotted keys)."""
    points: dict[str, dict[str, Any]]
    """Grid point name -> its overrides (dotted keys)."""
    seeds: tuple[int, ...]
    stages: tuple[str, ...]
    resources: dict[str, float]
    config_path: str | None = None
    crash_once: CrashOnce | None = None
    cwd: str = field(default_factory=os.getcwd)

    def experiment_dir(self, point: str, seed: int) -> Path:
        return Path(self.out) / point / f"seed-{seed}"

    def config(self, point: str, seed: int):
        return load_config(self.preset, {**self.overrides, **self.points[point], "run.seed": seed}, self.config_path)


# ---- the grid ---------------------------------------------------------------------------------------
def _slug(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-") or "empty"


def point_name(overrides: Mapping[str, Any]) -> str:
    """A grid point's directory name: ``population.n_teachers-4_evolution.enabled-false``."""
    if not overrides:
        return "default"
    return "_".join(f"{k}-{_slug(v)}" for k, v in overrides.items())


def grid_points(grid: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """The Cartesian product of ``{dotted key: [values]}``, by name, in a stable order."""
    points = (dict(zip(grid, values)) for values in itertools.product(*grid.values()))
    return {point_name(p): p for p in points}


def parse_grid(texts: Sequence[str]) -> dict[str, list[Any]]:
    """``key=[v1,v2]`` (YAML; a single value is a one-value axis) -> ``{key: [v1, v2]}``."""
    grid: dict[str, list[Any]] = {}
    for text in texts:
        key, value = parse_override(text)
        if key in grid:
            raise UserInputError(f"--grid {key} is given twice; put all its values in one list, e.g. {key}=[1,4]")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise UserInputError(f"--grid {text}: no values; give a list, e.g. {key}=[1,4]")
        grid[key] = values
    return grid


def make_spec(
    out: str | Path,
    preset: str | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    overrides: Mapping[str, Any] | None = None,
    stages: Sequence[str] = STAGES,
    config_path: str | Path | None = None,
    cpus_per_trial: float | None = None,
    gpus_per_trial: float | None = None,
    crash_once: CrashOnce | None = None,
) -> SweepSpec:
    """Check every trial's config before anything runs (a typo fails here, in one line, not in
    Ray's worker logs) and fix the trials' resources from the preset unless given."""
    preset = preset or os.environ.get("POPULORA_PRESET") or "smoke"  # an unknown one fails in spec.config below
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise UserInputError(f"unknown stages {unknown}; stages are {', '.join(STAGES)}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserInputError(f"--seeds {list(seeds)}: give distinct seeds, e.g. --seeds 0 1 2")
    given = {"cpu": cpus_per_trial, "gpu": gpus_per_trial}
    resources = {**PRESET_RESOURCES.get(preset, {"cpu": 1}), **{k: v for k, v in given.items() if v is not None}}
    spec = SweepSpec(
        out=str(Path(out).absolute()),
        preset=preset,
        overrides=dict(overrides or {}),
        points=grid_points(grid or {}),
        seeds=tuple(seeds),
        stages=tuple(stages),
        resources={k: v for k, v in resources.items() if v},
        config_path=str(Path(config_path).absolute()) if config_path else None,
        crash_once=crash_once,
    )
    for point in spec.points:
        spec.config(point, spec.seeds[0])  # raises ConfigError naming the field
    return spec


# ---- one trial --------------------------------------------------------------------------------------
def _progress(experiment: Path, stage: str) -> dict[str, float]:
    """The training stage's last logged step and the progress metrics' means over members then."""
    run_dir = experiment / stage
    if stage not in ("baseline", "population") or not (run_dir / "metrics.jsonl").exists():
        return {"step": -1, **{name: math.nan for name in PROGRESS_METRICS}}
    series = {name: run_series(run_dir, key) for name, key in PROGRESS_METRICS.items()}
    step = max((s for v in series.values() for s in v), default=-1)
    return {"step": step, **{name: v.get(step, math.nan) for name, v in series.items()}}


def trial(params: Mapping[str, Any], spec: SweepSpec) -> None:
    """One Tune trial: run (or resume) the experiment of ``params["point"]`` and ``params["seed"]``,
    reporting each stage and training step to Tune; the stage log goes to ``<exp>/sweep.log``."""
    from ray import tune

    point, seed = params["point"], int(params["seed"])
    if Path(spec.cwd).is_dir():
        os.chdir(spec.cwd)  # Tune starts trials in their own directory; relative config paths mean the driver's
    cpus = int(spec.resources.get("cpu", 1))
    if cpus >= 1:
        import torch

        torch.set_num_threads(cpus)  # the trial uses what it asked Ray for, no more
    out = spec.experiment_dir(point, seed)
    out.mkdir(parents=True, exist_ok=True)
    config = spec.config(point, seed)
    crash = spec.crash_once if spec.crash_once == CrashOnce(point, seed) else None
    marker = Path(spec.out) / f".crashed-{point}-seed-{seed}"
    stages_done = 0
    stage = "start"

    with open(out / "sweep.log", "a") as log:

        def say(message: str) -> None:
            nonlocal stage, stages_done
            log.write(message + "\n")
            log.flush()
            m = re.match(r"\[experiment\] (\w+)(:| \.\.\.| done)", message)
            if m:
                stage = m.group(1)
                stages_done += m.group(2) != " ..."
            trained = re.match(r"\[(baseline|population)\] ", message)
            if trained and trained.group(1) == "baseline" and crash is not None and not marker.exists():
                marker.write_text(f"killed after: {message}\n")
                os._exit(1)  # like a killed worker: no cleanup, no exception for Tune to catch
            if m or trained:
                tune.report({"stage": stage, "stages_done": stages_done, **_progress(out, stage)})

        run_experiment(config, out, stages=spec.stages, say=say)
    tune.report({"stage": "done", "stages_done": len(spec.stages), **_progress(out, "population")})


# ---- the sweep --------------------------------------------------------------------------------------
def _reporter(spec: SweepSpec):
    """A compact table: trial state, grid point, seed, stage, step and the headline metric; in a
    notebook it redraws in place (Tune's JupyterNotebookReporter)."""
    from ray import tune
    from ray.widgets.util import in_notebook

    metrics = {"stage": "stage", "step": "step", "valid": "valid", "solve_rate": "solve ρ"}
    params = {"point": "point", "seed": "seed"}
    if in_notebook():
        return tune.JupyterNotebookReporter(
            overwrite=True,
            metric_columns=metrics,
            parameter_columns=params,
            max_column_length=60,
            max_report_frequency=5,
        )
    return tune.CLIReporter(
        metric_columns=metrics, parameter_columns=params, max_column_length=60, max_report_frequency=30
    )


def run_sweep(
    spec: SweepSpec,
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    max_failures: int = 2,
    ray_temp_dir: str | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Run every trial of ``spec`` not yet complete as a Ray Tune trial, then write the sweep
    report; returns its path. ``address``: an existing Ray cluster; without it a local Ray is started
    (``num_cpus``/``num_gpus`` cap it) and shut down after, unless one is already initialised."""
    import ray
    from ray import tune

    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(asdict(spec), indent=1, default=str))
    # Tune's newer console output ignores a custom reporter; the compact table needs the classic one.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    started = not ray.is_initialized()
    if started:
        # Trials' stdout stays in their sweep.log files and Ray's worker logs: the terminal shows the table.
        if address is None:
            ray.init(
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                include_dashboard=False,
                log_to_driver=False,
                _temp_dir=ray_temp_dir,
            )
        else:
            ray.init(address=address, log_to_driver=False)
    t0 = time.time()
    try:
        storage = out / "tune"
        trainable = tune.with_resources(tune.with_parameters(trial, spec=spec), dict(spec.resources))
        points, seeds = list(spec.points), list(spec.seeds)
        same = (storage / "spec.json").exists() and (storage / "spec.json").read_text() == _spec_key(spec)
        if same and tune.Tuner.can_restore(str(storage / "trials")):
            say(f"[sweep] resuming the Tune sweep in {storage / 'trials'}")
            tuner = tune.Tuner.restore(str(storage / "trials"), trainable, resume_errored=True)
        else:
            if (storage / "trials").exists():
                say(
                    "[sweep] the grid or seeds changed, or Tune saved no state: new Tune trials; "
                    "complete experiments are skipped"
                )
                shutil.rmtree(storage / "trials", ignore_errors=True)
            storage.mkdir(parents=True, exist_ok=True)
            (storage / "spec.json").write_text(_spec_key(spec))
            tuner = tune.Tuner(
                trainable,
                param_space={"point": tune.grid_search(points), "seed": tune.grid_search(seeds)},
                run_config=tune.RunConfig(
                    name="trials",
                    storage_path=str(storage),
                    verbose=1,
                    failure_config=tune.FailureConfig(max_failures=max_failures),
                    progress_reporter=_reporter(spec),
                ),
            )
        say(
            f"[sweep] {len(points)} grid points × {len(seeds)} seeds = {len(points) * len(seeds)} trials, "
            f"each {spec.resources} · {out}"
        )
        results = tuner.fit()
        failed = [results[i] for i in range(len(results)) if results[i].error is not None]
    finally:
        if started:
            ray.shutdown()
    report = write_sweep_report(spec)
    # Counted from the experiment directories, not Tune's results: an interrupted fit returns too.
    incomplete = [spec.experiment_dir(p, s) for p in points for s in seeds if not _complete(spec, p, s)]
    say(
        f"[sweep] {len(points) * len(seeds) - len(incomplete)} of {len(points) * len(seeds)} trials complete "
        f"({len(failed)} failed after {max_failures} retries) in {time.time() - t0:.0f}s: {report}"
    )
    if incomplete:
        raise UserInputError(
            f"{len(incomplete)} trials did not finish (e.g. {incomplete[0]}; its sweep.log and Tune's "
            f"error.txt under {out / 'tune'} say why); rerun the same command to resume"
        )
    return report


def _spec_key(spec: SweepSpec) -> str:
    d = {k: v for k, v in asdict(spec).items() if k not in ("cwd", "crash_once")}
    return json.dumps(d, sort_keys=True, default=str)


# ---- the report -------------------------------------------------------------------------------------
def _complete(spec: SweepSpec, point: str, seed: int) -> bool:
    return set(spec.stages) <= set(done_stages(spec.experiment_dir(point, seed)))


def complete_experiments(spec: SweepSpec, point: str) -> list[Path]:
    """The seeds' experiment directories of ``point`` whose training stages (of those asked) finished."""
    trained = [s for s in ("baseline", "population") if s in spec.stages]
    dirs = [spec.experiment_dir(point, seed) for seed in spec.seeds]
    return [d for d in dirs if set(trained) <= set(done_stages(d))]


def cross_table(spec: SweepSpec, window: int = 5) -> list[list[str]]:
    """One row per grid point: seeds, and per headline series population − baseline with the spread of
    its per-seed differences (`analysis.seed_stats`; ``*`` where its 95% t-interval excludes 0)."""
    rows = [["grid point", "seeds", *(f"Δ {label}" for label in HEADLINE.values())]]
    for point in spec.points:
        experiments = complete_experiments(spec, point)
        cells = []
        for c in compare(experiments, window=window) if experiments else []:
            if math.isnan(c.difference):
                cells.append("n/a")
            else:
                interval = "" if math.isnan(c.low) else f" [{c.low:+.3f}, {c.high:+.3f}]"
                cells.append(f"{c.difference:+.3f}{interval}{' *' if c.separated else ''}")
        rows.append([point, str(len(experiments)), *(cells or ["n/a"] * len(HEADLINE))])
    return rows


def write_sweep_report(spec: SweepSpec, window: int = 5) -> Path:
    """``SWEEP/sweep_report.md``: the cross-point table, then per point the seed protocol's table and
    band figures (written by `protocol.write_seed_report` into the point's directory)."""
    out = Path(spec.out)
    lines = [
        f"# Sweep: {len(spec.points)} grid points × {len(spec.seeds)} seeds (preset {spec.preset})",
        "",
        f"Stages {', '.join(spec.stages)}; shared overrides {spec.overrides or 'none'}. Each entry is "
        f"population − baseline of a run's mean over its last {window} logged steps, averaged over seeds, with "
        "the spread of its per-seed differences (their range up to 3 seeds, a 95% percentile bootstrap from 4; "
        "none from one seed); * marks a difference whose paired 95% t-interval excludes 0.",
        "",
        *md_table(cross_table(spec, window)),
    ]
    for point, overrides in spec.points.items():
        experiments = complete_experiments(spec, point)
        lines += [
            "",
            f"## {point}",
            "",
            f"Overrides: {overrides or 'none'}; {len(experiments)} of {len(spec.seeds)} seeds complete.",
            "",
        ]
        if not experiments:
            continue
        write_seed_report(experiments, out / point, window=window)
        lines += md_table(comparison_table(compare(experiments, window=window)))
        for key, label in HEADLINE.items():
            lines += ["", f"![{label}]({point}/seeds_{key.replace('/', '_')}.png)"]
    path = out / "sweep_report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
