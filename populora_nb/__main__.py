"""Headless entry point: ``python -m populora_nb <command> ...``; the commands are listed below.

The studies (seed protocol, pilot, sweep) run from the repository root: python -m studies.seed_protocol,
studies.pilot, studies.sweep (studies/README.md). First contact with a new GPU, once, before a long run:
python -m benchmarks.doctor_full --preset gpu (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from populora_nb.analysis.dashboard import Dashboard
from populora_nb.analysis.report import make_figures, write_report
from populora_nb.config import AGENTS, ExperimentConfig, load_config, load_dir_config
from populora_nb.doctor import run_doctor
from populora_nb.errors import UserInputError
from populora_nb.evaluation.runs import evaluate_experiment
from populora_nb.experiment import STAGES, check_inputs, run_experiment
from populora_nb.loop import grow_seeds
from populora_nb.loop import run as run_loop
from populora_nb.model.policy import LoRAPolicy
from populora_nb.presets import PRESETS, parse_override
from populora_nb.state import roster_for
from populora_nb.verify import Verifier


def _add_set(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=text)


def _overrides(args: argparse.Namespace) -> dict:
    return dict(parse_override(o) for o in args.overrides)


def _config(args: argparse.Namespace, extra: dict | None = None, directory: Path | None = None) -> ExperimentConfig:
    """The command's config. A ``directory`` (a run or experiment) that holds a ``config.yaml`` is
    read as it was made, and --preset / --config / --set change only the fields they name, in one
    line saying which; elsewhere, the preset ($POPULORA_PRESET, else smoke) with those changes."""
    overrides = {**_overrides(args), **(extra or {})}
    saved = directory / "config.yaml" if directory is not None else None
    if saved is None or not saved.is_file():
        return load_config(args.preset, overrides, args.config)
    config, changed = load_dir_config(saved, args.preset, overrides, args.config)
    diff = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
    _say(
        f"[{args.command}] config: {saved} (preset {config.preset})" + (f"; changed: {diff}" if diff else ", as saved")
    )
    return config


_say = functools.partial(print, flush=True)


def cmd_notebooks(args: argparse.Namespace) -> int:
    import papermill as pm
    from traitlets.config import Config

    # default: the source checkout's notebooks/ when populora_nb runs from one (an editable install), else
    # ./notebooks: a non-editable install carries the package, not the notebooks
    checkout = Path(__file__).resolve().parents[1] / "notebooks"
    src = args.notebooks or (checkout if checkout.is_dir() else Path.cwd() / "notebooks")
    books = sorted(src.glob("[0-9][0-9]_*.ipynb"))
    if not books:
        raise UserInputError(f"--notebooks {src} holds no numbered notebooks (NN_name.ipynb)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    preset = args.preset or "smoke"
    for nb in books:
        if args.only and not any(nb.name.startswith(o) for o in args.only):
            continue
        t0 = time.time()
        _say(f"[notebooks] {nb.name} (preset {preset}) ...")
        pm.execute_notebook(
            str(nb),
            str(out / nb.name),
            kernel_name="python3",
            language="python",
            cwd=str(src),
            progress_bar=False,
            parameters={"preset": preset, "out_dir": str(out.resolve())},
            # CurveZMQ keys for the kernel's sockets: else ipykernel 7 warns "running over TCP without encryption"
            config=Config({"KernelManager": {"transport_encryption": "auto"}}),
        )
        _say(f"[notebooks] {nb.name} done in {time.time() - t0:.0f}s")
    print(f"[notebooks] executed notebooks and figures in {out}")
    return 0


def cmd_seed(args: argparse.Namespace) -> int:
    config = _config(args, {"run.agent": "baseline"})
    check_inputs(config, ("baseline",))
    policy = LoRAPolicy.create(config, list(roster_for(config).items()))
    with Verifier.from_config(config.verifier) as verifier:
        tasks = grow_seeds(
            config,
            policy,
            verifier,
            args.target,
            args.max_rounds,
            on_round=lambda r, n: _say(f"[seed] round {r}: {n} tasks"),
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = ({"program": t.program, "inputs": list(t.inputs), "outputs": list(t.outputs)} for t in tasks)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"[seed] {len(tasks)} seed tasks in {args.out}; use them with --set tasks.seeds_path={args.out}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    extra = {"run.agent": args.agent, "run.steps": args.steps, "run.seed": args.seed}
    config = _config(args, {k: v for k, v in extra.items() if v is not None}, args.out)
    check_inputs(config, (config.run.agent,))
    out = args.out or Path(config.run.out_dir) / f"{config.run.agent}-{time.strftime('%Y%m%d-%H%M%S')}"
    _say(f"[run] {config.run.agent} · preset {config.preset} · {config.run.steps} steps → {out}")
    _say(f"[run] sandbox isolation: {Verifier.probe(config.verifier)}")
    dash = Dashboard(out, config.run.steps, config.tasks.kinds)
    t0 = time.time()
    run_loop(config, out, on_step=dash.update, progress=False)
    _say(f"[run] done in {time.time() - t0:.0f}s: {out}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    config = _config(args, directory=args.out)
    out = args.out or Path(config.run.out_dir) / f"experiment-{config.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    _say(f"[experiment] sandbox isolation: {Verifier.probe(config.verifier)}")
    t0 = time.time()
    run_experiment(config, out, stages=args.stages or STAGES, say=_say)
    _say(f"[experiment] finished in {time.time() - t0:.0f}s: {out / 'report.html'}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    config = _config(args, directory=args.experiment_dir)
    table = args.experiment_dir / "eval" / "table.md"
    evaluate_experiment(config, args.experiment_dir, say=_say, require_data=True)
    print(table.read_text() if table.exists() else "no table")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if (args.experiment_dir / "metrics.jsonl").exists():
        raise UserInputError(
            f"{args.experiment_dir} is a single run's directory; report takes an experiment directory (the --out "
            "of `experiment`, holding baseline/ and population/)"
        )
    make_figures(args.experiment_dir)
    md, html = write_report(args.experiment_dir)
    print(f"[report] {md}\n[report] {html}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    # SIGTERM (``timeout``, ``kill``) unwinds like Ctrl-C: the ``finally`` blocks then remove the
    # doctor's /tmp/populora-doctor-* folder and the engine's /dev/shm/populora-vllm-* directory.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    report = run_doctor(args.preset, _overrides(args), args.out, _say, args.config, args.weights)
    if report.preset:  # the table only once the config loaded
        _say(report.table())
    if not report.ok:
        print(f"populora_nb doctor: FAILED: {'; '.join(report.failures)}", file=sys.stderr)
    return 0 if report.ok else 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, like every other bad input (not the usage block)
        print(f"populora_nb: error: {message} (see: {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


STAGES_HELP = "a subset of: " + " ".join(STAGES)
PRESET_HELP = "default: the given run or experiment directory's config.yaml (a --preset changes only the fields it \
names), else $POPULORA_PRESET or smoke"


def add_config_options(p: argparse.ArgumentParser) -> None:
    """--preset, --config and --set, as every command that builds a config takes them (the studies too)."""
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help=PRESET_HELP)
    p.add_argument("--config", type=Path, default=None, help="YAML file of overrides")
    _add_set(p, "override one field, e.g. --set rl.rollouts=8 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m populora_nb", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, func: Callable[[argparse.Namespace], int], say: str, config: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=say)
        p.set_defaults(func=func)
        if config:
            add_config_options(p)
        return p

    p = command("run", cmd_run, "train the AZR baseline or the PopuLoRA population")
    p.add_argument("--agent", choices=AGENTS, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="run directory (resumes if it holds a checkpoint)")

    p = command("eval", cmd_eval, "evaluate base, baseline and every member of an experiment on the benchmarks")
    p.add_argument("experiment_dir", type=Path, help="a directory holding baseline/ and population/ runs")

    p = command("report", cmd_report, "write report.html and report.md for an experiment directory", config=False)
    p.add_argument("experiment_dir", type=Path, help="the --out of `experiment`, not a single run's directory")

    p = command("experiment", cmd_experiment, "baseline + population + evaluation + analysis + report (resumable)")
    p.add_argument("--out", type=Path, required=False, help="experiment directory (rerun to resume)")
    p.add_argument("--stages", nargs="*", default=None, help=STAGES_HELP)

    p = command("seed", cmd_seed, "grow a seed task buffer with the current model (AZR's seeding run)")
    p.add_argument("--target", type=int, default=64, help="stop once the buffer holds this many tasks (AZR: 256)")
    p.add_argument("--max-rounds", type=int, default=50)
    p.add_argument("--out", type=Path, required=True, help="JSONL of seed tasks to write")

    p = command("doctor", cmd_doctor, "check this machine: 2 + 2 steps, a table of times and memory")
    p.add_argument("--out", type=Path, default=None, help="folder for doctor.md and doctor.json")
    p.add_argument("--weights", choices=["pretrained", "random"], default="pretrained", help="random: no download")

    p = command("notebooks", cmd_notebooks, "execute the numbered notebooks with papermill", config=False)
    p.add_argument("--preset", choices=sorted(PRESETS), default=None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--notebooks", type=Path, default=None, help="folder of NN_*.ipynb (default: the checkout's)")
    p.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 00 02")
    return parser


# ---- errors at the edge -------------------------------------------------------------------------
# A bad input ends in one line and exit 2: these types blame the user's config, paths or files.
# Anything else is a bug and keeps its traceback; KeyboardInterrupt is never caught.
USER_ERRORS: tuple[type[BaseException], ...] = (UserInputError, FileNotFoundError, PermissionError)


def _check_out(out: Path, is_file: bool) -> None:
    """--out must be a directory this user can create or write into (seed: a file inside one)."""
    if is_file and out.is_dir():
        raise UserInputError(f"--out {out} is a directory; give the JSONL file to write")
    existing = (out.parent if is_file else out).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserInputError(f"--out {out}: {existing} is a file, not a directory; pick another --out")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserInputError(f"--out {out}: {existing} is not writable; pick another --out")


def _configs_in(out: Path) -> set[Path]:
    return {*out.glob("config.yaml"), *out.glob("*/config.yaml")} if out.is_dir() else set()


def _forget_failed_start(out: Path, existed: bool, configs_before: set[Path]) -> None:
    """Take back the config.yaml files a run that failed before its first step wrote (the whole --out if it made it)."""
    done = ("stages.json", "metrics.jsonl", "*/metrics.jsonl", "checkpoints/latest", "*/checkpoints/latest")
    progress = [p for pattern in done for p in out.glob(pattern)]
    if not out.is_dir() or any(p.is_file() and p.stat().st_size > 0 for p in progress):
        return
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for cfg in _configs_in(out) - configs_before:
        cfg.unlink(missing_ok=True)


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run one command; ``parser``: another command line (a study's, with ``func`` and ``command`` as
    defaults), whose bad input then ends in one line here too."""
    args = (parser or build_parser()).parse_args(argv)
    out = getattr(args, "out", None)
    try:
        if out is not None:
            _check_out(out, is_file=args.command == "seed")
        if out is None or args.command not in ("run", "experiment"):
            return args.func(args)
        existed, configs_before = out.exists(), _configs_in(out)
        try:
            return args.func(args)
        except Exception:
            _forget_failed_start(out, existed, configs_before)
            raise
    except USER_ERRORS as e:
        print(f"populora_nb: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
