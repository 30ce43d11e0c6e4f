r"""A run, an experiment, a seed protocol or a sweep as pandas DataFrames, for questions of one's own.

    frames = load_frames("runs/notebooks-smoke")          # an experiment: baseline/ and population/
    late = frames.tasks.query("run == 'population' and step >= 10 and valid")
    late.groupby("proposer")[["rho", "ast_depth"]].mean()

``load_frames(path)`` finds every run directory at or under ``path`` and returns one
`RunFrames`: six frames, each with the labels of where its rows came from (``run``: the run
directory's name; ``seed`` for a seed protocol's ``seed<S>/`` or a sweep's ``seed-<k>/``; ``point``
for a sweep's grid point), so a run, an experiment, a protocol and a sweep read the same way.

``tasks``     one row per tasks.jsonl record (`TASK_COLUMNS`): what was proposed, its verdict, the
              matched solver's ρ and rollouts, its copy class, whether it repeats a task met before
              (program and input, `populora_nb.copies`), and the complexity metrics of a written
              program and its coverage features (`populora_nb.analysis.complexity`, `.coverage`; missing
              where the proposer did not write one).
``metrics``   one row per metrics.jsonl record: ``step``, ``member``, ``role`` and the namespaced keys.
``matches``   one row per matches.jsonl record (population runs): teacher, student, kind, valid, ρ.
``lineage``   one row per lineage.jsonl record: each child evolution made, its parents and operator.
``probe``     one row per probe.jsonl record (`populora_nb.probe`): a proposer's answer to a fixed probe
              prompt, its verdict and the frozen solver's ρ (empty when the probe never ran).
``config``    one row per run: its config.yaml flattened to dotted keys (``rl.rollouts``).

This module is the analyses' one door to the records: ``read_stream`` (one stream of one run as a
frame), ``per_step`` (a metric per step) and ``load_tasks`` (one run's tasks frame, checked); every
analysis, plot and the seed protocol read through them (tests/test_frames.py fails on a second
reader). The tasks frame is a run's one form in memory: each program is parsed once, here, and the
complexity series, the collapse detector and coverage read its columns.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml

from populora_nb.analysis.complexity import WRITTEN_PROGRAM_KINDS, program_metrics
from populora_nb.analysis.coverage import io_signature
from populora_nb.analysis.runs import find_run_dirs
from populora_nb.copies import classify_rows, repeat_rows, start_fingerprints
from populora_nb.records import RunDir

LABELS = ("point", "seed", "run")
"""Where a row came from, as far as the layout says: a sweep's grid point, a seed, the run's name."""
COMPLEXITY_COLUMNS = ("parsed", "ast_depth", "cc_max", "cc_total", "sloc", "n_variables", "n_chars", "io_profile")
FEATURE_COLUMNS = ("shape", "ngrams", "signatures")
"""The coverage features (`populora_nb.analysis.coverage`) of a row, kept for counting at equal n."""
TASK_COLUMNS = (
    *"run task step proposer solver kind program inputs outputs message valid reason rho rollouts".split(),
    *("n_solved", "copy", "repeat", "written", "measured", *COMPLEXITY_COLUMNS, *FEATURE_COLUMNS, "completion"),
)
"""The documented columns of ``RunFrames.tasks`` (plus ``seed``/``point`` where the layout has them):

  task       the record's row number in its run's tasks.jsonl (0-based): a stable id within a run
  rho        the matched solver's solve rate ρ (tasks.jsonl ``solve_rate``); NaN when invalid or unsolved
  rollouts   attempts behind ρ (the match's ``rollouts``, else the run's ``rl.rollouts``)
  n_solved   attempts that passed: round(ρ × rollouts)
  copy       the program class: new / reference / earlier (``copies.classify_rows``: re-read with
             today's normalisation); None for an invalid task
  repeat     the same task as its student meets it, met before in the run (``copies.repeat_rows``);
             None for an invalid task
  written    a valid code_o/code_i task: the proposer wrote the program (complexity is measured)
  measured   written and new: what the complexity and coverage analysis counts
  shape, ngrams  a written program's normalised AST shape and node-type n-grams (missing where not
             written or, the shape, not parsed)
  signatures the I/O type signatures of a valid task's pairs (missing when invalid)
"""
_SEED = re.compile(r"^seed-?(\d+)$")


FRAMES = ("tasks", "metrics", "matches", "lineage", "config", "probe")
"""`RunFrames`' frames, in field order."""


@dataclass(frozen=True)
class RunFrames:
    """A run (or several) as tables; see the module docstring for what each frame holds."""

    tasks: pd.DataFrame
    metrics: pd.DataFrame
    matches: pd.DataFrame
    lineage: pd.DataFrame
    config: pd.DataFrame
    probe: pd.DataFrame

    @property
    def runs(self) -> list[str]:
        """The run names, in the order they were loaded."""
        return list(dict.fromkeys(self.config["run"])) if len(self.config) else []

    def select(self, **labels: Any) -> RunFrames:
        """The rows of every frame whose labels equal ``labels`` (e.g. ``select(run="population", seed=1)``)."""
        unknown = [k for k in labels if k not in LABELS]
        if unknown:
            raise ValueError(f"select() takes the labels {', '.join(LABELS)}, not {', '.join(unknown)}")

        def keep(df: pd.DataFrame) -> pd.DataFrame:
            mask = pd.Series(True, index=df.index)
            for key, value in labels.items():
                if key in df.columns:
                    mask &= df[key] == value
            return df[mask].reset_index(drop=True)

        return RunFrames(*(keep(getattr(self, name)) for name in FRAMES))


def labels_of(run_dir: Path, root: Path) -> dict[str, Any]:
    """``run`` (the directory's name), ``seed`` from a ``seed<S>`` / ``seed-<k>`` folder on the way,
    and ``point`` from the folder above a seed's (a sweep's grid point)."""
    parts = run_dir.relative_to(root).parts if run_dir != root else ()
    labels: dict[str, Any] = {"run": run_dir.name}
    for i, part in enumerate(parts[:-1]):
        m = _SEED.match(part)
        if m:
            labels["seed"] = int(m.group(1))
            if i > 0:
                labels["point"] = parts[i - 1]
    return labels


def read_stream(run_dir: str | Path, stream: str) -> pd.DataFrame:
    """One record stream of a run (``metrics``, ``tasks``, ``matches``, ``lineage``, ``probe``) as a
    frame, one row per record as `RunDir.read` parses it (a torn last line dropped, ``.jsonl.gz`` read
    alike; no rows when the stream is absent). `load_frames` adds the task columns derived here."""
    return pd.DataFrame(RunDir(Path(run_dir)).read(stream))


def rows_of(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts with None where a value is missing (as a record holds it), for the
    displays the loop shares (`step_records.step_summary`, `dashboard.tasks_html`)."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


def per_step(
    metrics: pd.DataFrame, key: str, role: str | None = None, how: Literal["mean", "first"] = "mean"
) -> pd.Series:
    """step -> the mean of ``key`` over the members (of ``role``) that logged it at that step, or
    (``how="first"``) the value every member's row repeats (the step's seconds ``time/step_s``, the
    probe's ``time/probe_s``); steps in order, steps without a value absent."""
    if key not in metrics.columns or (role is not None and "role" not in metrics.columns):
        return pd.Series(dtype=float)
    rows = metrics if role is None else metrics[metrics["role"] == role]
    return rows[key].astype(float).groupby(rows["step"].astype(int)).agg(how).dropna()


_REQUIRED = ("step", "proposer", "kind", "program", "valid")


def load_tasks(run_dir: str | Path) -> pd.DataFrame:
    """One run's tasks frame (`TASK_COLUMNS`, labelled by ``run``, as ``load_frames(run_dir).tasks``)
    without its other streams; a missing or empty stream, or a row that is not a task record, raises
    an error naming the path."""
    rd = RunDir(Path(run_dir))
    path = rd.stream_file("tasks")  # tasks.jsonl, or a committed copy's .jsonl.gz
    if not path.is_file():
        raise FileNotFoundError(f"no task records at {path}: is {run_dir} a run directory?")
    tasks, problem = _parsed_tasks(rd.path, _stamps(rd))
    if problem is not None:
        raise ValueError(problem)
    return _labelled(tasks.copy(), {"run": rd.path.name}).reindex(columns=_ordered(tasks.columns, TASK_COLUMNS))


def _stamps(rd: RunDir) -> tuple[tuple[int, int], ...]:
    """(mtime_ns, size) of each file a tasks frame is read from, (0, 0) when absent: a key that notices a rewrite."""
    stamps = []
    for path in (rd.stream_file("tasks"), rd.stream_file("matches"), rd.path / "config.yaml"):
        stat = path.stat() if path.is_file() else None
        stamps.append((stat.st_mtime_ns, stat.st_size) if stat else (0, 0))
    return tuple(stamps)


@functools.lru_cache(maxsize=16)
def _parsed_tasks(run_dir: Path, stamps: tuple[tuple[int, int], ...]) -> tuple[pd.DataFrame, str | None]:
    """A run's tasks frame (unlabelled), or why its rows are not task records. Parsing every program is
    the slow part, and a report reads a run's tasks for its figures, its liveness and its tables, so
    the frame is kept while ``stamps`` hold (callers copy it)."""
    rd = RunDir(run_dir)
    path, rows = rd.stream_file("tasks"), rd.read("tasks")
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            return pd.DataFrame(), f"{path}: row {number} is not a JSON object"
        missing = [key for key in _REQUIRED if key not in row]
        if missing:
            return pd.DataFrame(), f"{path}: row {number}: task record lacks {missing}"
    if not rows:
        return pd.DataFrame(), f"{path} holds no complete task record (empty file)"
    return _run_tasks(run_dir, rows, rd.read("matches"), _config(run_dir).get("rl.rollouts")), None


def load_frames(path: str | Path) -> RunFrames:
    """Every run at or under ``path`` as one `RunFrames` (module docstring). A path that holds no run
    raises FileNotFoundError naming it."""
    root = Path(path)
    dirs = find_run_dirs(root)
    if not dirs:
        raise FileNotFoundError(f"no run directory (metrics.jsonl or tasks.jsonl) at or under {root}")
    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in FRAMES}
    for run_dir in dirs:
        labels = labels_of(run_dir, root)
        for name, frame in _run_frames(run_dir).items():
            parts[name].append(_labelled(frame, labels))
    frames = {name: pd.concat(dfs, ignore_index=True) for name, dfs in parts.items()}
    frames["tasks"] = frames["tasks"].reindex(columns=_ordered(frames["tasks"].columns, TASK_COLUMNS))
    return RunFrames(**frames)


def _labelled(df: pd.DataFrame, labels: dict[str, Any]) -> pd.DataFrame:
    """``df`` with the label columns first (point, seed, run: those the layout gave)."""
    df = df.drop(columns=[key for key in labels if key in df.columns])
    for key in reversed(LABELS):
        if key in labels:
            df.insert(0, key, labels[key])
    return df


def _ordered(columns: pd.Index, first: tuple[str, ...]) -> list[str]:
    """The labels a layout gave, then every documented column (added empty if absent), then the rest."""
    labels = [c for c in ("point", "seed") if c in columns]
    return labels + list(first) + [c for c in columns if c not in first and c not in labels]


def _run_frames(run_dir: Path) -> dict[str, pd.DataFrame]:
    config, rd = _config(run_dir), RunDir(run_dir)
    matches = rd.read("matches")
    tasks, problem = _parsed_tasks(run_dir, _stamps(rd))
    if problem is not None:  # no task rows, or rows load_tasks refuses: read as they are
        tasks = _run_tasks(run_dir, rd.read("tasks"), matches, config.get("rl.rollouts"))
    return {
        "tasks": tasks.copy(),
        "metrics": read_stream(run_dir, "metrics"),
        "matches": pd.DataFrame(matches),
        "lineage": read_stream(run_dir, "lineage"),
        "config": pd.DataFrame([config]),
        "probe": read_stream(run_dir, "probe"),
    }


def _config(run_dir: Path) -> dict[str, Any]:
    """config.yaml flattened to dotted keys; empty when the run has none (a synthetic stub is read as is)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return pd.json_normalize(data, sep=".").to_dict("records")[0] if isinstance(data, dict) else {}


def _run_tasks(run_dir: Path, rows: list[dict], matches: list[dict], rollouts: int | None) -> pd.DataFrame:
    """`task_frame` with the rows' copy classes and repeat flags read from the run's start (its seeds
    and warm-up, `copies.start_fingerprints`)."""
    start = start_fingerprints(run_dir)
    return task_frame(rows, classify_rows(rows, start), repeat_rows(rows, start), matches, rollouts)


def task_frame(
    rows: list[dict],
    copies: Sequence[str | None],
    repeats: Sequence[bool | None],
    matches: Sequence[dict] = (),
    rollouts: int | None = None,
) -> pd.DataFrame:
    """The tasks frame of one run from its records: each row's fields, ρ and its attempts, its copy
    class and repeat flag (``copies``, ``repeats``: one per row, `populora_nb.copies`), and the
    metrics and coverage features of a written program. A population step records its matches in the
    order of its task rows (`loop.run`), so the i-th task of a step is the i-th match of that step."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for m in matches:
        by_step[m["step"]].append(m)
    seen_in_step: Counter[int] = Counter()
    out = []
    for number, (row, copy, repeat) in enumerate(zip(rows, copies, repeats)):
        step = int(row["step"])
        i, step_matches = seen_in_step[step], by_step.get(step, [])
        seen_in_step[step] += 1
        match = step_matches[i] if i < len(step_matches) else {}
        rho = row.get("solve_rate")
        k = match.get("rollouts") or rollouts
        valid = bool(row.get("valid"))
        written = valid and row.get("kind") in WRITTEN_PROGRAM_KINDS
        inputs, outputs = list(row.get("inputs") or []), list(row.get("outputs") or [])
        record = {
            **row,
            "task": number,
            "step": step,
            "rho": float("nan") if rho is None else float(rho),
            "rollouts": k,
            "n_solved": round(rho * k) if rho is not None and k else None,
            "copy": copy,
            "repeat": repeat,
            "written": written,
            "measured": written and copy == "new",
            "inputs": inputs,
            "outputs": outputs,
            **dict.fromkeys((*COMPLEXITY_COLUMNS, *FEATURE_COLUMNS)),
        }
        record.pop("solve_rate", None)
        if written:  # parsed here, once: every analysis reads these columns
            record.update(program_metrics(str(row.get("program") or ""), inputs, outputs))
        elif valid:  # a code_f proposal: only its inputs are the proposer's
            record["signatures"] = frozenset(io_signature(i, o) for i, o in zip(inputs, outputs))
        out.append(record)
    df = pd.DataFrame(out, columns=None if out else [c for c in TASK_COLUMNS if c != "run"])
    return df.astype({"rollouts": "Int64", "n_solved": "Int64"})  # whole counts with missing values, not floats
