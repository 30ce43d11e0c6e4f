"""Finding run directories: the one place the frames, the report, the complexity analysis and the
notebooks learn which runs a run, an experiment, a seed protocol or a sweep directory holds."""

from __future__ import annotations

from pathlib import Path

from populora_nb.config import AGENTS
from populora_nb.records import RunDir

RUNS: tuple[str, ...] = AGENTS
"""The runs an experiment directory holds (``EXP/baseline``, ``EXP/population``), baseline first:
the one place the analyses, studies and notebooks learn their names."""
RUN_STREAMS = ("metrics.jsonl", "tasks.jsonl")
"""A directory holding either of these records is a run directory."""
_SKIP_DIRS = {"checkpoints", "figures", "eval", "tune", "warmup"}


def find_run_dirs(path: str | Path, depth: int = 3) -> list[Path]:
    """Every run directory at or under ``path`` (a run, an experiment, ``seed<S>/`` experiments, a
    sweep's ``<point>/seed-<k>/`` experiments), sorted; ``depth`` levels down at most."""
    root = Path(path)
    if any(RunDir(root).has(stream.removesuffix(".jsonl")) for stream in RUN_STREAMS):  # or a committed .jsonl.gz
        return [root]
    if depth == 0 or not root.is_dir():
        return []
    found: list[Path] = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and child.name not in _SKIP_DIRS and not child.name.startswith("."):
            found += find_run_dirs(child, depth - 1)
    return found


def find_runs(*places: str | Path | None, missing_ok: bool = False) -> dict[str, Path]:
    """The run directories at the first of ``places`` that holds any, by name (`find_run_dirs` one
    level down: the place itself when it is a run directory, else ``EXP/baseline``, ``EXP/population``).
    ``None`` places are skipped, so a notebook can pass an optional ``out_dir`` before its fallbacks.
    With no run anywhere: an empty dict when ``missing_ok``, else FileNotFoundError."""
    tried = [Path(p) for p in places if p is not None]
    for root in tried:
        if runs := {d.name: d for d in find_run_dirs(root, depth=1)}:
            return runs
    if missing_ok:
        return {}
    where = ", ".join(str(p) for p in tried) or "nowhere (no place given)"
    raise FileNotFoundError(f"no run directory (a folder with {' or '.join(RUN_STREAMS)}) at or under {where}")


def experiment_runs(experiment: str | Path) -> dict[str, Path]:
    """The `RUNS` an experiment directory holds, by name, baseline first (its other folders, e.g.
    eval/, are not runs); empty when it holds none."""
    found = find_runs(experiment, missing_ok=True)
    return {name: found[name] for name in RUNS if name in found}
