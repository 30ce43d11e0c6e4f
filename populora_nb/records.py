"""The run directory: everything a run writes, and how a killed run resumes.

    RUN/config.yaml        the resolved ExperimentConfig
    RUN/metrics.jsonl      one row per member per step, namespaced keys (teacher/valid_rate, ...)
    RUN/tasks.jsonl        one row per proposed task: validation verdict, solver, solve rate
    RUN/matches.jsonl      population runs: one row per (teacher, student, task) match
    RUN/lineage.jsonl      population runs: one row per child made by evolution
    RUN/checkpoints/step_N/  adapters, optimizer states, ratings, buffers (written atomically)
    RUN/checkpoints/latest   the name of the newest complete checkpoint

Rows are appended as a step finishes. A run killed mid-step leaves rows for steps after its last
checkpoint (and maybe a torn last line); `RunDir.truncate_after(step)` drops them so the resumed run
rewrites them exactly. Every random choice in a step is seeded from (run seed, step, purpose), so a
resumed run needs no saved RNG state to repeat an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from populora_nb.config import ExperimentConfig, load_config, save_config

STREAMS = ("metrics", "tasks", "matches", "lineage")


@dataclass
class RunDir:
    path: Path

    @classmethod
    def create(cls, path: str | Path, config: ExperimentConfig) -> "RunDir":
        """Open a run directory for ``config``; an existing one must hold the same config."""
        run = cls(Path(path))
        run.path.mkdir(parents=True, exist_ok=True)
        cfg_path = run.path / "config.yaml"
        if cfg_path.exists():
            old = run.load_config()
            if old.to_dict() != config.to_dict():
                raise ValueError(
                    f"{run.path} already holds a run with a different config; pick another --out "
                    f"or delete it (diff: {_diff(old.to_dict(), config.to_dict())})"
                )
        else:
            save_config(config, cfg_path)
        return run

    def load_config(self) -> ExperimentConfig:
        import yaml

        data = yaml.safe_load((self.path / "config.yaml").read_text())
        return load_config(data.pop("preset"), data)

    # ---- row streams ------------------------------------------------------------------------

    def append(self, stream: str, rows: Iterable[dict[str, Any]]) -> None:
        if stream not in STREAMS:
            raise ValueError(f"unknown record stream {stream!r}; one of {STREAMS}")
        lines = "".join(json.dumps(_jsonable(r), sort_keys=True) + "\n" for r in rows)
        if not lines:
            return
        with open(self.path / f"{stream}.jsonl", "a") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def read(self, stream: str) -> list[dict[str, Any]]:
        """All complete rows of a stream (a torn last line from a kill is skipped)."""
        p = self.path / f"{stream}.jsonl"
        if not p.exists():
            return []
        rows = []
        lines = p.read_text().split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i >= len(lines) - 2:  # only the last line may be torn
                    break
                raise ValueError(f"{p}:{i + 1} is not valid JSON") from None
        return rows

    def truncate_after(self, step: int) -> None:
        """Drop every row of a step later than ``step`` (and any torn line)."""
        for stream in STREAMS:
            p = self.path / f"{stream}.jsonl"
            if not p.exists():
                continue
            keep = [r for r in self.read(stream) if r.get("step", -1) <= step]
            tmp = p.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
            os.replace(tmp, p)

    def last_logged_step(self) -> int:
        rows = self.read("metrics")
        return max((r["step"] for r in rows), default=-1)

    # ---- checkpoints --------------------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:06d}"

    def begin_checkpoint(self, step: int) -> Path:
        """A scratch directory to write a checkpoint into; `commit_checkpoint` makes it visible."""
        tmp = self.checkpoints / f".tmp_step_{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def commit_checkpoint(self, tmp: Path, step: int, keep: int = 2) -> Path:
        final = self.checkpoint_dir(step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        latest = self.checkpoints / "latest"
        (self.checkpoints / "latest.tmp").write_text(final.name)
        os.replace(self.checkpoints / "latest.tmp", latest)
        # Old checkpoints only cost disk; keep a couple for inspection.
        done = sorted(p for p in self.checkpoints.glob("step_*") if p.is_dir())
        for old in done[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        latest = self.checkpoints / "latest"
        if not latest.exists():
            return None
        path = self.checkpoints / latest.read_text().strip()
        if not path.is_dir():
            return None
        return int(path.name.split("_")[1]), path


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; absent values read back as null
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def _diff(a: dict, b: dict, prefix: str = "") -> str:
    out = []
    for k in sorted(set(a) | set(b)):
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            d = _diff(a[k], b[k], f"{prefix}{k}.")
            if d:
                out.append(d)
        elif a.get(k) != b.get(k):
            out.append(f"{prefix}{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return ", ".join(out)
