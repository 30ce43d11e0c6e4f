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

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from populora_nb.__main__ import STAGES_HELP, _overrides, _Parser, _say, add_config_options
from populora_nb.__main__ import main as cli_main
from populora_nb.analysis.runs import RUNS
from populora_nb.analysis.seed_stats import md_table
from populora_nb.errors import UserInputError
from populora_nb.experiment import STAGES, done_stages, run_experiment
from studies.protocol import HEADLINE, compare, comparison_table, write_seed_report
from studies.protocol_series import run_series
from studies.sweep_spec import CrashOnce, SweepSpec, make_spec, parse_grid

PROGRESS_METRICS: Mapping[str, str] = {"valid": "teacher/valid_rate", "solve_rate": "student/solve_rate"}
"""What Tune's progress table shows per trial: the latest step's mean over members."""


# ---- one trial --------------------------------------------------------------------------------------
def _progress(experiment: Path, stage: str) -> dict[str, float]:
    """The training stage's last logged step and the progress metrics' means over members then."""
    run_dir = experiment / stage
    if stage not in RUNS or not (run_dir / "metrics.jsonl").exists():
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
    trained = [s for s in RUNS if s in spec.stages]
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


def cmd_sweep(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("ray") is None:
        raise UserInputError("sweep needs Ray: pip install -e '.[sweep]' (ray[tune]==2.60.0)")
    spec = make_spec(
        args.out,
        args.preset,
        parse_grid(args.grid),
        seeds=args.seeds,
        overrides=_overrides(args),
        stages=args.stages or STAGES,
        config_path=args.config,
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
    )
    run_sweep(
        spec,
        address=args.address,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        max_failures=args.max_failures,
        say=_say,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m studies.sweep", description=__doc__.split("\n\n")[0])
    p.set_defaults(func=cmd_sweep, command="sweep")
    add_config_options(p)
    p.add_argument("--out", type=Path, required=True, help="sweep directory (rerun the same command to resume)")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=[V1,V2]",
        help="one axis of the grid, e.g. --grid population.n_teachers=[1,4] (repeatable)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--stages", nargs="*", default=None, help=STAGES_HELP)
    p.add_argument("--address", help="an existing Ray cluster (auto, or ray://HEAD:10001); default: a local Ray")
    p.add_argument("--num-cpus", type=int, help="local Ray only: CPUs it may use (default: all)")
    p.add_argument("--num-gpus", type=int, help="local Ray only: GPUs it may use (default: all)")
    p.add_argument("--cpus-per-trial", type=float, help="default from the preset (tiny 1, smoke 2, gpu/paper 2)")
    p.add_argument("--gpus-per-trial", type=float, help="default from the preset (gpu/paper 1)")
    p.add_argument(
        "--max-failures", type=int, default=2, help="Tune retries of a failed trial (each resumes its experiment)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m studies.sweep``: seeds x a grid of overrides as Ray Tune trials, each an experiment."""
    return cli_main(argv, build_parser())


if __name__ == "__main__":
    sys.exit(main())
