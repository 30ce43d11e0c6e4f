"""Finding run directories: the one place the report, the complexity analysis and the notebooks
learn which runs an experiment directory holds."""

from __future__ import annotations

from pathlib import Path

from populora_nb.records import RunDir

RUN_STREAMS = ("metrics.jsonl", "tasks.jsonl")
"""A directory holding either of these records is a run directory."""


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a run's records (``metrics.jsonl`` or ``tasks.jsonl``, or their
    compressed copies in committed results: `RunDir.has`)."""
    run = RunDir(Path(path))
    return any(run.has(stream.removesuffix(".jsonl")) for stream in RUN_STREAMS)


def find_runs(*places: str | Path | None, missing_ok: bool = False) -> dict[str, Path]:
    """The run directories at the first of ``places`` that holds any, by name: the place itself
    when it is a run directory (named after its folder), else its immediate subdirectories that
    are (``EXP/baseline``, ``EXP/population``), sorted by name. ``None`` places are skipped, so a
    notebook can pass an optional ``out_dir`` before its fallbacks. With no run anywhere: an empty
    dict when ``missing_ok``, else FileNotFoundError."""
    tried = [Path(p) for p in places if p is not None]
    for root in tried:
        if is_run_dir(root):
            return {root.name: root}
        if root.is_dir():
            runs = {child.name: child for child in sorted(root.iterdir()) if child.is_dir() and is_run_dir(child)}
            if runs:
                return runs
    if missing_ok:
        return {}
    where = ", ".join(str(p) for p in tried) or "nowhere (no place given)"
    raise FileNotFoundError(f"no run directory (a folder with {' or '.join(RUN_STREAMS)}) at or under {where}")
