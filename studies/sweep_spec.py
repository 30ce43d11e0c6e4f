"""What a sweep is, before anything runs: the grid of config overrides (one named point per
combination), the seeds, and each trial's resources, checked in one line per mistake (`make_spec`).
`studies.sweep` runs it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from populora_nb.config import load_config
from populora_nb.errors import UserInputError
from populora_nb.experiment import STAGES
from populora_nb.presets import parse_override

# What one trial asks Ray for, per preset: on CPU, torch threads = the trial's CPUs (docs/design.md); on GPU,
# one GPU per trial (the population shares one base model on it), plus CPUs for the sandbox workers.
PRESET_RESOURCES: Mapping[str, Mapping[str, float]] = {
    "tiny": {"cpu": 1},
    "smoke": {"cpu": 2},
    "gpu": {"cpu": 2, "gpu": 1},
    "paper": {"cpu": 2, "gpu": 1},
}


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
