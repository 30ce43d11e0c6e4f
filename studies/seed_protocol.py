"""The seed protocol as one command: the same experiment at several seeds, then the comparison of
baseline and population over those seeds.

    python -m studies.seed_protocol --preset cpu --seeds 0 1 2 --out runs/cpu-protocol   # from the repo root


    OUT/seed<S>/      one experiment directory per seed (experiment.py), resumable stage by stage
    OUT/seeds.md      the table: start, end and population − baseline per headline series, 95% intervals
    OUT/seeds.json    every number behind it
    OUT/seeds_*.png   one figure per series, bands over seeds

Only ``run.seed`` differs between the seeds' experiments, so each seed's baseline and population
share that seed's warm-up (warmup.py) and its prompt draws; the analysis is
`studies.protocol`. Seeds run one after another: on a 2-core machine two at once only
share the cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from populora_nb.__main__ import _config, _Parser, _say, add_config_options
from populora_nb.__main__ import main as cli_main
from populora_nb.analysis.runs import RUNS
from populora_nb.config import ExperimentConfig
from populora_nb.errors import UserInputError
from populora_nb.experiment import run_experiment
from populora_nb.verify import Verifier
from studies.protocol import write_seed_report

DEFAULT_STAGES = ("warmup", *RUNS, "analysis", "report")
"""No benchmark evaluation by default: the protocol's series come from training records."""


def seed_dir(out: str | Path, seed: int) -> Path:
    return Path(out) / f"seed{seed}"


def run_protocol(
    config: ExperimentConfig,
    out: str | Path,
    seeds: Sequence[int],
    stages: Sequence[str] = DEFAULT_STAGES,
    window: int = 5,
    say: Callable[[str], None] = print,
) -> Path:
    """Run (or resume) the experiment at each seed, then write the protocol's report; returns seeds.md."""
    if len(set(seeds)) != len(seeds) or not seeds:
        raise UserInputError(f"--seeds must name distinct seeds, got {list(seeds)}")
    dirs = []
    for seed in seeds:
        cfg = dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed))
        say(f"[protocol] seed {seed} → {seed_dir(out, seed)}")
        dirs.append(run_experiment(cfg, seed_dir(out, seed), stages, say))
    path = write_seed_report(dirs, out, window=window)
    say(f"[protocol] {len(dirs)} seeds: {path}")
    return path


def cmd_protocol(args: argparse.Namespace) -> int:
    config = _config(args)
    _say(f"[protocol] sandbox isolation: {Verifier.probe(config.verifier)}")
    run_protocol(config, args.out, args.seeds, args.stages or DEFAULT_STAGES, args.window, say=_say)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m studies.seed_protocol", description=__doc__.split("\n\n")[0])
    p.set_defaults(func=cmd_protocol, command="protocol")
    add_config_options(p)
    p.add_argument("--out", type=Path, required=True, help="protocol directory (rerun the same command to resume)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--stages", nargs="*", default=None, help="default: " + " ".join(DEFAULT_STAGES) + " (no eval)")
    p.add_argument("--window", type=int, default=5, help="steps averaged for a run's start and end values")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m studies.seed_protocol``: one experiment per seed, then baseline vs population over the seeds."""
    return cli_main(argv, build_parser())


if __name__ == "__main__":
    sys.exit(main())
