"""The seed protocol as one command: the same experiment at several seeds, then the comparison of
baseline and population over those seeds (``python -m populora_nb protocol``).

    OUT/seed<S>/      one experiment directory per seed (experiment.py), resumable stage by stage
    OUT/seeds.md      the table: start, end and population − baseline per headline series, 95% intervals
    OUT/seeds.json    every number behind it
    OUT/seeds_*.png   one figure per series, bands over seeds

Only ``run.seed`` differs between the seeds' experiments, so each seed's baseline and population
share that seed's warm-up (warmup.py) and its prompt draws; the analysis is
`populora_nb.analysis.protocol`. Seeds run one after another: on a 2-core machine two at once only
share the cores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from populora_nb.analysis.protocol import write_seed_report
from populora_nb.config import ExperimentConfig
from populora_nb.errors import UserInputError
from populora_nb.experiment import run_experiment

DEFAULT_STAGES = ("warmup", "baseline", "population", "analysis", "report")
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
