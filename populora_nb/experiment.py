"""The full experiment: the compute-matched AZR baseline and the PopuLoRA population from the same
config and seed, benchmark evaluation of the bare base, the baseline and every member, the
complexity and coverage analysis, and the report.

    EXP/warmup/        the shared warm-up adapter and its report (warmup.py; only with warmup.enabled)
    EXP/baseline/      a run directory (records.py)
    EXP/population/    a run directory
    EXP/eval/          one JSON per (model, benchmark), table.md, benchmarks.png
    EXP/figures/       every PNG the report shows
    EXP/report.md, EXP/report.html
    EXP/tensorboard/, EXP/wandb/   the report's figures, with run.report_to set (tracking.py)
    EXP/stages.json    which stages are complete

Each stage is resumable: training resumes from its latest checkpoint, evaluation skips the
(model, benchmark) pairs already scored, and a stage marked complete is skipped, so rerunning the
same command after a kill finishes the experiment without redoing finished work.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from populora_nb.analysis.report import make_figures, write_report
from populora_nb.buffers import load_seed_triplets
from populora_nb.config import AGENTS, ExperimentConfig, stage_config
from populora_nb.errors import UserInputError
from populora_nb.evaluation.loaders import data_dir_is_set, resolve_data_dir
from populora_nb.evaluation.runs import evaluate_experiment
from populora_nb.loop import run
from populora_nb.records import RunDir, write_atomic
from populora_nb.step_records import step_summary
from populora_nb.tracking import log_report, trackers
from populora_nb.warmup import run_warmup

STAGES = ("warmup", *AGENTS, "eval", "analysis", "report")
StageFunction = Callable[[ExperimentConfig, Path, Callable[[str], None]], object]


def check_inputs(config: ExperimentConfig, stages: Sequence[str] = STAGES) -> None:
    """Fail before anything is written on files the config names but its checks do not read: the seed
    tasks when a stage trains, a benchmark data root the user named when a stage evaluates."""
    if {"warmup", *AGENTS} & set(stages):
        load_seed_triplets(config.tasks.seeds_path)
    if "eval" in stages and data_dir_is_set(config.eval.data_dir):
        resolve_data_dir(config.eval.data_dir)


def done_stages(out: str | Path) -> dict:
    """The experiment's finished stages as its stages.json records them ({} before the first)."""
    p = Path(out) / "stages.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _mark(out: Path, stage: str, seconds: float, resumed: bool = False) -> None:
    """Record a finished stage. ``seconds`` is the wall time of the invocation that finished it (a
    resumed stage cost more: its ``time/step_s`` rows are the cost record that survives kills)."""
    done = done_stages(out)
    done[stage] = {"seconds": round(seconds, 1), "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    done[stage] |= {"resumed": True} if resumed else {}
    write_atomic(out / "stages.json", json.dumps(done, indent=1))


def run_experiment(
    config: ExperimentConfig, out: str | Path, stages: Sequence[str] = STAGES, say: Callable[[str], None] = print
) -> Path:
    """Run every stage not yet complete, in order; returns the experiment directory."""
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise UserInputError(f"unknown stages {unknown}; stages are {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]  # always in the experiment's order
    check_inputs(config, stages)
    trains = set(AGENTS) & set(stages)
    if config.warmup.enabled and trains and "warmup" not in stages and "warmup" not in done_stages(Path(out)):
        raise UserInputError(
            f"warmup.enabled: the warmup stage must run before {' and '.join(sorted(trains))} (add warmup to --stages)"
        )
    out = RunDir.create(out, config).path  # saves config.yaml, or checks it is this config (with a diff)
    for stage in stages:
        if stage in done_stages(out):
            say(f"[experiment] {stage}: already complete, skipped")
            continue
        t0 = time.time()
        resumed = (out / stage / "checkpoints").is_dir()
        say(f"[experiment] {stage} ...")
        STAGE_FUNCTIONS[stage](config, out, say)
        _mark(out, stage, time.time() - t0, resumed)
        say(f"[experiment] {stage} done in {time.time() - t0:.0f}s")
    return out


def adopt_warmup(out: str | Path, source: str | Path) -> None:
    """Give the experiment ``out`` the finished warm-up of the experiment ``source`` (a copy of its
    ``warmup/`` directory) and mark its warmup stage complete (the pilot's candidates share one this
    way); the caller checks that their warm-up settings agree."""
    out, source = Path(out), Path(source)
    if "warmup" in done_stages(out):
        return
    if "warmup" not in done_stages(source):
        raise UserInputError(f"{source} has no finished warm-up to share (its warmup stage is not complete)")
    shutil.rmtree(out / "warmup", ignore_errors=True)
    shutil.copytree(source / "warmup", out / "warmup")
    _mark(out, "warmup", 0.0)


def _train(agent: str) -> StageFunction:
    def stage(config: ExperimentConfig, out: Path, say: Callable[[str], None]) -> None:
        cfg = stage_config(config, agent)
        if config.warmup.enabled:  # run_experiment has checked that the warmup stage is complete
            cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, warmup=str((out / "warmup").resolve())))
        run(
            cfg,
            out / agent,
            progress=False,
            on_step=lambda step, rows: say(f"[{agent}] " + step_summary(step, rows, cfg.tasks.kinds)),
        )

    return stage


def _warmup(config: ExperimentConfig, out: Path, say: Callable[[str], None]) -> None:
    if not config.warmup.enabled:
        say("[warmup] warmup.enabled is false: every member starts from B = 0")
        return
    r = run_warmup(config, out / "warmup", say)
    s = r.get("solver")
    solved = f"; solve rate {s['before']['rate']:.3f} -> {s['after']['rate']:.3f} on held-out tasks" if s else ""
    say(
        f"[warmup] valid rate {r['before']['rate']:.3f} -> {r['after']['rate']:.3f} on held-out prompts, "
        f"{r['examples']} examples{solved}, {r['seconds']:.0f}s"
    )


def _analysis(config: ExperimentConfig, out: Path, say: Callable[[str], None]) -> None:
    paths = make_figures(out)
    say(f"[analysis] {len(paths)} figures in {out / 'figures'}")


def _report(config: ExperimentConfig, out: Path, say: Callable[[str], None]) -> None:
    md, html = write_report(out)
    say(f"[report] {md} and {html}")
    if trackers(config.run.report_to):  # the figures to TensorBoard / W&B too, in a run named "report"
        n = log_report(config.run.report_to, out, config.to_dict())
        say(f"[report] {n} figures to {', '.join(trackers(config.run.report_to))} under {out}")


STAGE_FUNCTIONS: dict[str, StageFunction] = {
    "warmup": _warmup,
    "baseline": _train("baseline"),
    "population": _train("population"),
    "eval": evaluate_experiment,
    "analysis": _analysis,
    "report": _report,
}
