"""The run directory: everything a run writes, and how a killed run resumes.

    RUN/config.yaml        the resolved ExperimentConfig
    RUN/metrics.jsonl      one row per member per step, namespaced keys (teacher/valid_rate, ...)
    RUN/tasks.jsonl        one row per proposed task: validation verdict, solver, solve rate
    RUN/matches.jsonl      population runs: one row per (teacher, student, task) match
    RUN/lineage.jsonl      population runs: one row per child made by evolution
    RUN/checkpoints/step_N/  adapters, optimizer states, ratings, buffers (written atomically)
    RUN/checkpoints/step_N/manifest.json  sha256 and size of every file in it, and of each record stream
    RUN/checkpoints/latest   the name of the newest complete checkpoint

A finished run kept for reading may hold a stream as ``STREAM.jsonl.gz``; it reads the same.

Rows are appended as a step finishes. Resuming cuts each stream back to the bytes the checkpoint's
manifest recorded, and refuses a damaged checkpoint with a one-line `CorruptRunError` naming the
file (docs/running.md, "Resume"). Every random choice in a step is seeded from (run seed, step,
purpose), so a resumed run needs no saved RNG state.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populora_nb.config import ExperimentConfig, load_saved_config, save_config
from populora_nb.errors import CorruptRunError, UserInputError, one_line

STREAMS = ("metrics", "tasks", "matches", "lineage", "probe")
MANIFEST = "manifest.json"
RESUME_FIX = "rerun the same command to resume from the newest checkpoint that verifies, or restore the file"


@dataclass
class RunDir:
    path: Path

    @classmethod
    def create(cls, path: str | Path, config: ExperimentConfig) -> RunDir:
        """Open a run directory for ``config``; an existing one must hold the same config."""
        run = cls(Path(path))
        try:
            run.path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError, PermissionError) as e:
            raise UserInputError(f"cannot create the run directory {run.path}: {e.strerror}") from None
        cfg_path = run.path / "config.yaml"
        if cfg_path.exists():
            old = run.load_config()
            if old.to_dict() != config.to_dict():
                raise UserInputError(
                    f"{run.path} already holds a run with a different config; pick another --out "
                    f"or delete it (diff: {_diff(old.to_dict(), config.to_dict())})"
                )
        else:
            save_config(config, cfg_path)
        return run

    def load_config(self) -> ExperimentConfig:
        path = self.path / "config.yaml"
        try:
            return load_saved_config(path)
        except (OSError, ValueError) as e:
            raise CorruptRunError(f"{path} does not load ({one_line(e)})") from None

    # ---- row streams ------------------------------------------------------------------------
    def stream_file(self, stream: str) -> Path:
        """The file holding ``stream``: ``STREAM.jsonl``, or its compressed copy when only that exists."""
        plain = self.path / f"{stream}.jsonl"
        packed = self.path / f"{stream}.jsonl.gz"
        return packed if packed.exists() and not plain.exists() else plain

    def has(self, stream: str) -> bool:
        return self.stream_file(stream).exists()

    def append(self, stream: str, rows: Iterable[dict[str, Any]]) -> None:
        if stream not in STREAMS:
            raise ValueError(f"unknown record stream {stream!r}; one of {STREAMS}")
        if self.stream_file(stream).suffix == ".gz":
            # Rows appended beside a compressed archive would hide it from every reader.
            raise UserInputError(
                f"{self.path / stream}.jsonl.gz is a compressed copy kept for reading; run in another --out"
            )
        lines = "".join(json.dumps(_jsonable(r), sort_keys=True) + "\n" for r in rows)
        if not lines:
            return
        with open(self.path / f"{stream}.jsonl", "a") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def read(self, stream: str) -> list[dict[str, Any]]:
        """All complete rows of a stream (a torn last line from a kill is skipped)."""
        p = self.stream_file(stream)
        if not p.exists():
            return []
        rows = []
        try:
            text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise CorruptRunError(f"{p} does not read ({one_line(e)})") from None
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i >= len(lines) - 2:  # only the last line may be torn
                    break
                raise CorruptRunError(
                    f"{p}:{i + 1} is not valid JSON (only a last line torn by a kill is expected)"
                ) from None
        return rows

    def truncate_after(self, step: int) -> None:
        """Drop every row of a step later than ``step`` (and any torn line)."""
        for stream in STREAMS:
            p = self.path / f"{stream}.jsonl"
            if not p.exists():
                continue
            keep = [r for r in self.read(stream) if r.get("step", -1) <= step]
            write_atomic(p, "".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))

    def truncate_to(self, manifest: dict) -> None:
        """Cut every stream back to the bytes a checkpoint's manifest recorded (call after
        `verify_checkpoint`): later rows, a torn last line, and rows after the checkpoint's step go."""
        for stream in STREAMS:
            p = self.path / f"{stream}.jsonl"
            size = manifest["records"].get(stream, {"size": 0})["size"]
            if p.exists() and p.stat().st_size != size:
                with open(p, "rb") as fh:
                    write_atomic(p, fh.read(size))

    def last_logged_step(self) -> int:
        return max((r["step"] for r in self.read("metrics")), default=-1)

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
        # The manifest goes last: a checkpoint directory without a matching one is not committed state.
        files = {p.relative_to(tmp).as_posix(): _hash_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        streams = {s: _hash_file(self.path / f"{s}.jsonl") for s in STREAMS}
        write_json(tmp / MANIFEST, {"step": step, "files": files, "records": streams})
        final = self.checkpoint_dir(step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        write_atomic(self.checkpoints / "latest", final.name)
        # Old checkpoints only cost disk; keep a couple to fall back on when the newest is damaged.
        for _, old in self.committed_checkpoints()[keep:]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def committed_checkpoints(self) -> list[tuple[int, Path]]:
        """Every renamed-into-place checkpoint directory, newest first (scratch `.tmp_*` ones excluded)."""
        found = [(int(p.name[5:]), p) for p in self.checkpoints.glob("step_*") if p.is_dir() and p.name[5:].isdigit()]
        return sorted(found, reverse=True)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The checkpoint `latest` names; None before the first commit. A `latest` naming a missing
        directory is corruption (raised), never "no checkpoint": that would restart the run from 0."""
        latest = self.checkpoints / "latest"
        if not latest.exists():
            return None
        name = latest.read_text().strip()
        path = self.checkpoints / name
        if not name.startswith("step_") or not name[5:].isdigit() or not path.is_dir():
            others = ", ".join(f"step {s}" for s, _ in self.committed_checkpoints()) or "none"
            raise CorruptRunError(
                f"{latest} names {name!r}, which is not a checkpoint directory (checkpoints present: {others})",
                RESUME_FIX,
            )
        return int(name[5:]), path

    def verified_checkpoint(self) -> tuple[int, Path] | None:
        """`latest_checkpoint` with its files (not the record streams) checked against its manifest."""
        latest = self.latest_checkpoint()
        if latest is not None:
            self.verify_checkpoint(latest[1], records=False)
        return latest

    def verify_checkpoint(self, path: Path, records: bool = True) -> dict:
        """The manifest of checkpoint ``path`` once every file it lists, and (``records``) every
        record stream's committed prefix, matches it; else a one-line `CorruptRunError` naming the file."""
        if not (path / MANIFEST).is_file():
            raise CorruptRunError(
                f"{path / MANIFEST} is missing: the checkpoint is damaged or was not written by this version",
                RESUME_FIX,
            )
        manifest = read_json(path / MANIFEST)
        if not isinstance(manifest, dict) or not {"files", "records"} <= set(manifest):
            raise CorruptRunError(f"{path / MANIFEST} lacks its files/records lists", RESUME_FIX)
        for rel, want in manifest["files"].items():
            f = path / rel
            if not f.is_file():
                raise CorruptRunError(f"{f} is missing (listed in {path.name}/{MANIFEST})", RESUME_FIX)
            got = _hash_file(f)
            if got != want:
                raise CorruptRunError(
                    f"{f} is corrupt: {got['size']} bytes, sha256 {got['sha256'][:12]}; its "
                    f"manifest says {want['size']} bytes, sha256 {want['sha256'][:12]}",
                    RESUME_FIX,
                )
        if records:
            for stream, want in manifest["records"].items():
                p = self.path / f"{stream}.jsonl"
                got = _hash_file(p, want["size"])
                if got != want:
                    # Rows of committed steps cannot be regenerated without re-running those steps.
                    raise CorruptRunError(
                        f"{p} lost rows of steps committed by checkpoint {path.name}: it recorded {want['rows']} "
                        f"rows in {want['size']} bytes, the file's first {got['size']} bytes hold {got['rows']} "
                        f"rows{' with other content' if got['size'] == want['size'] else ''}"
                    )
        return manifest


def _hash_file(path: Path, limit: int | None = None) -> dict:
    """sha256, size and line count of a file's first ``limit`` bytes (all of it by default; none if absent)."""
    h, size, rows = hashlib.sha256(), 0, 0
    with open(path, "rb") if path.exists() else io.BytesIO() as fh:
        while limit is None or size < limit:
            chunk = fh.read(1 << 20 if limit is None else min(1 << 20, limit - size))
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
            rows += chunk.count(b"\n")
    return {"sha256": h.hexdigest(), "size": size, "rows": rows}


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` through a temporary file renamed into place: a kill leaves the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(_jsonable(data), sort_keys=True))


def read_json(path: Path) -> Any:
    """A JSON file; a missing, truncated or damaged one raises a one-line `CorruptRunError` naming it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptRunError(f"{path} does not load ({one_line(e)})", RESUME_FIX) from None


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
