"""The series the seed protocol compares, read from one run directory (`studies.protocol` compares
them over seeds). What each series means: `studies.series`."""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.analysis.complexity import copy_series
from populora_nb.analysis.coverage import measured, valid_tasks
from populora_nb.analysis.difficulty_probe import probe_events
from populora_nb.analysis.figures import axes_or_new, finish
from populora_nb.analysis.frames import load_tasks, per_step, read_stream
from populora_nb.analysis.runs import RUNS
from populora_nb.analysis.seed_stats import t_interval
from populora_nb.records import RunDir
from studies.coverage_windows import coverage_window_units, expected_distinct
from studies.probe_floor import probe_silence
from studies.repeat_series import PlayedTask, pooled_windows, repeat_items, repeat_series
from studies.series import (
    BAND_KEY,
    COMPLEXITY_SERIES,
    COPY_KEY,
    COVERAGE_SERIES,
    HEADLINE,
    PROBE_RHO_KEY,
    PROBE_SERIES,
    REPEAT_SERIES,
    SPREAD_KEY,
)
from studies.windows import complexity_windows, fixed_windows


def stream_stamp(run_dir: str | Path, stream: str) -> tuple[int, int]:
    """(mtime_ns, size) of a run's stream file, (0, 0) when absent: a cache key that notices a rewrite."""
    try:
        stat = RunDir(Path(run_dir)).stream_file(stream).stat()
    except FileNotFoundError:
        return 0, 0
    return stat.st_mtime_ns, stat.st_size


def is_coverage(key: str) -> bool:
    """``key`` is a per-window coverage series, not a per-step one."""
    return key in COVERAGE_SERIES


# ----------------------------------------------------------------------------- one run's records
@dataclass(frozen=True)
class RunRecords:
    """What the protocol reads of one run directory: its metric rows and its tasks frame (None
    without ``tasks.jsonl``). Load it with ``run_records``, which caches it."""

    path: Path
    metrics: pd.DataFrame
    tasks: pd.DataFrame | None
    played: tuple[PlayedTask, ...] = ()
    """(step, ρ, repeat) of every played task: valid, fresh, attempted by its matched solver."""
    valid: tuple[tuple[int, bool], ...] = ()
    """(step, repeat) of every valid task."""

    def series(self, key: str) -> dict[int, float]:
        """step -> the value of per-step series ``key`` (empty when the run never logged it)."""
        if is_coverage(key):
            raise ValueError(f"{key} is measured per window of steps, not per step: see coverage_window_units")
        if key == SPREAD_KEY:
            return rating_spread_series(self.metrics)
        if key in COMPLEXITY_SERIES:
            return {} if self.tasks is None else complexity_series(self.tasks, key.split("/", 1)[1])
        if key == COPY_KEY:
            return {} if self.tasks is None else copy_rate_series(self.tasks)
        if key == BAND_KEY or key in REPEAT_SERIES:
            return repeat_series(key, self.played, self.valid)
        return per_step(self.metrics, key).to_dict()


def run_records(run_dir: str | Path) -> RunRecords:
    """``RunRecords`` of ``run_dir``. Parsing every program (radon) is the slow part, and a report
    reads each run for every series and figure, so the result is cached until a file changes."""
    path = Path(run_dir).resolve()
    return _load(path, stream_stamp(path, "metrics"), stream_stamp(path, "tasks"))


@functools.lru_cache(maxsize=64)
def _load(path: Path, metrics_stamp: tuple[int, int], tasks_stamp: tuple[int, int]) -> RunRecords:
    rows = read_stream(path, "metrics")
    if tasks_stamp[1] == 0:
        return RunRecords(path, rows, None)
    tasks = load_tasks(path)
    valid = valid_tasks(tasks)
    marks = list(zip(valid["step"].tolist(), valid["rho"].tolist(), [bool(r) for r in valid["repeat"]]))
    played = tuple(PlayedTask(step, rho, repeat) for step, rho, repeat in marks if not math.isnan(rho))
    return RunRecords(path, rows, tasks, played, tuple((step, repeat) for step, _, repeat in marks))


# ----------------------------------------------------------------------------- per-step series
def complexity_series(tasks: pd.DataFrame, field: str) -> dict[int, float]:
    """step -> the mean ``field`` over that step's newly written programs (unparsed programs, NaN, left out)."""
    return per_step(measured(tasks), field).to_dict()  # NaN (an unparsed program) left out


def programs_per_step(rec: RunRecords) -> list[int]:
    """Newly written programs (`coverage.measured`) in each step the run wrote tasks in, a step of
    copies or invalid proposals counting 0: how many programs a point of a complexity curve averages."""
    if rec.tasks is None or rec.tasks.empty:
        return []
    counts = measured(rec.tasks).groupby("step").size()
    return [int(counts.get(step, 0)) for step in sorted(set(rec.tasks["step"].tolist()))]


def programs_note(experiments: Sequence[str | Path]) -> str:
    """Per run, the median (range) of `programs_per_step` over every seed and step: a complexity curve's
    point is a mean over that few programs, which its caption must say (at 135M it is 0-3)."""
    said = []
    for run in RUNS:
        counts = [c for d in run_dirs(experiments, run).values() for c in programs_per_step(run_records(d))]
        if counts:
            said.append(f"{run} median {np.median(counts):g} ({min(counts)}-{max(counts)})")
    return "new programs per seed and step: " + ("; ".join(said) if said else "none")


def copy_rate_series(tasks: pd.DataFrame) -> dict[int, float]:
    """step -> the share of that step's valid proposals that are copies (any class but "new")."""
    series = copy_series(tasks)
    return {int(st): float(m) for st, m in zip(series.steps, series.mean)}


def _mu_by_step(metrics: pd.DataFrame) -> dict[int, dict[str, float]]:
    rated = metrics.dropna(subset=["rating/mu"]) if "rating/mu" in metrics else metrics.iloc[:0]
    return {
        int(step): dict(zip(rows["member"].astype(str), rows["rating/mu"].astype(float)))
        for step, rows in rated.groupby("step")
    }


def rating_spread_series(metrics: pd.DataFrame) -> dict[int, float]:
    """step -> the within-role spread of TrueSkill μ: the standard deviation (ddof = 0) of μ over the
    members of one role rated that step, averaged over the roles with >= 2 rated members. Within a
    role, because teachers and students are opponents: the gap between the two roles' means says who
    wins the matches, not whether the members of a role stratify. Steps with no such role are left out."""
    roles = metrics["role"].fillna("") if "role" in metrics else pd.Series("", index=metrics.index)  # no role: ""
    role_of = dict(zip(metrics.get("member", roles).astype(str), roles.astype(str)))
    out: dict[int, float] = {}
    for step, mu in _mu_by_step(metrics).items():
        by_role: dict[str, list[float]] = {}
        for member, value in mu.items():
            by_role.setdefault(role_of.get(member, ""), []).append(value)
        spreads = [float(np.std(v)) for v in by_role.values() if len(v) >= 2]
        if spreads:
            out[step] = float(np.mean(spreads))
    return out


def final_ranking(metrics: pd.DataFrame) -> list[str]:
    """The members rated at the last rated step, highest μ first (empty for the baseline)."""
    by_step = _mu_by_step(metrics)
    if not by_step:
        return []
    last = by_step[max(by_step)]
    return sorted(last, key=lambda m: (-last[m], m))


def window_values(series: Mapping[int, float], window: int) -> tuple[float, float]:
    """(start, end): the mean over the first ``window`` logged steps and over the last ``window``
    (the two overlap in a run shorter than 2 windows); NaN for a series never logged."""
    if window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    steps = sorted(series)
    if not steps:
        return math.nan, math.nan
    return float(np.mean([series[s] for s in steps[:window]])), float(np.mean([series[s] for s in steps[-window:]]))


# ----------------------------------------------------------------------------- experiments: runs over seeds
COLORS: Mapping[str, str] = {"baseline": "tab:gray", "population": "tab:red"}


@dataclass(frozen=True)
class Band:
    """A series across seeds: per step, the mean and its 95% t-interval (NaN where < 2 seeds)."""

    key: str
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_seeds: np.ndarray


def run_series(run_dir: str | Path, key: str) -> dict[int, float]:
    """step -> the value of per-step series ``key`` (``protocol_series.RunRecords.series``)."""
    return run_records(run_dir).series(key)


def start_value(run_dir: str | Path, key: str, window: int = 5) -> float:
    """A run's mean of ``key`` over its first ``window`` logged steps (NaN if it never logged it)."""
    return window_values(run_series(run_dir, key), window)[0]


def end_value(run_dir: str | Path, key: str, window: int = 5) -> float:
    """A run's mean of ``key`` over its last ``window`` logged steps (NaN if it never logged it)."""
    return window_values(run_series(run_dir, key), window)[1]


def rolling(series: Mapping[int, float], window: int) -> dict[int, float]:
    """Each logged step's value replaced by the mean over the last ``window`` logged steps (trailing)."""
    steps = sorted(series)
    return {s: float(np.mean([series[t] for t in steps[max(0, i - window + 1) : i + 1]])) for i, s in enumerate(steps)}


def band(run_dirs: Sequence[str | Path], key: str, smooth: int = 1) -> Band:
    """``key`` across seeds (one run directory per seed): per step mean and 95% t-interval, each
    seed's series first smoothed by a trailing ``smooth``-step rolling mean (1: raw)."""
    per_seed = [rolling(run_series(d, key), smooth) for d in run_dirs]
    steps = sorted({s for series in per_seed for s in series})
    rows = [t_interval([series[s] for series in per_seed if s in series]) for s in steps]
    n = [sum(s in series for series in per_seed) for s in steps]
    arr = np.asarray(rows, dtype=float).reshape(len(steps), 3)
    return Band(key, np.asarray(steps), arr[:, 0], arr[:, 1], arr[:, 2], np.asarray(n))


SeedValues = dict[str, dict[str, tuple[float, float]]]
"""run -> seed name -> (start, end)."""


def seed_names(experiments: Sequence[str | Path]) -> list[str]:
    """A name per experiment: its directory name, or its whole path when names repeat."""
    names = [Path(e).name for e in experiments]
    return names if len(set(names)) == len(names) else [str(e) for e in experiments]


def run_dirs(experiments: Sequence[str | Path], run: str) -> dict[str, Path]:
    """seed name -> the experiment's ``run`` directory, for the experiments that have one."""
    return {n: Path(e) / run for n, e in zip(seed_names(experiments), experiments) if (Path(e) / run).is_dir()}


def seed_values(experiments: Sequence[str | Path], key: str, window: int = 5) -> tuple[SeedValues, int | None]:
    """Each run's (start, end) per seed, seeds without the series left out, and for probe ρ the runs
    whose probe says nothing (floor-bound or too few tasks, `probe_floor.probe_silence`); for coverage
    also the common n (None for a per-step series)."""
    if is_coverage(key):
        return _coverage_values(experiments, key, window)
    values: SeedValues = {run: {} for run in RUNS}
    for run, name, rec in _each_run(experiments):
        if key == PROBE_RHO_KEY and probe_silence(probe_events(rec.path)):
            continue  # floor-bound or too few tasks: its probe ρ says nothing (`probe_floor.probe_silence`)
        start, end = start_end(rec, key, window)
        if not (math.isnan(start) or math.isnan(end)):
            values[run][name] = (start, end)
    return values, None


def _each_run(experiments: Sequence[str | Path]) -> Iterator[tuple[str, str, RunRecords]]:
    """(run, seed name, its records) of every run directory the experiments hold, baseline first."""
    for run in RUNS:
        for name, d in run_dirs(experiments, run).items():
            yield run, name, run_records(d)


def start_end(rec: RunRecords, key: str, window: int) -> tuple[float, float]:
    """One run's (start, end) of per-step series ``key`` (NaN where it has none). Complexity: fixed step
    windows (`studies.windows`), NaN where a window holds fewer than ``windows.MIN_PROGRAMS`` new
    programs; repeats (sparse steps): pooled over the same fixed step windows in every run; the
    probe: its first and last event; any other: the mean over the first and the last ``window``
    logged steps."""
    if key in COMPLEXITY_SERIES or key in REPEAT_SERIES:
        if rec.tasks is None or rec.tasks.empty:
            return math.nan, math.nan
        if key in REPEAT_SERIES:
            spans = fixed_windows(sorted(set(rec.tasks["step"].tolist())), window)
            start, end = pooled_windows(repeat_items(key, rec.played, rec.valid), spans)
            return start, end
        first, last = complexity_windows(rec.tasks, key.split("/", 1)[1], window)
        return first.value, last.value
    return window_values(rec.series(key), 1 if key in PROBE_SERIES else window)


def _coverage_values(experiments: Sequence[str | Path], key: str, window: int) -> tuple[SeedValues, int | None]:
    """Rarefied coverage at ONE n for every run, seed and window: the smallest window's unit count.
    Runs without task records are left out; n < 2 leaves every value out (nothing to compare)."""
    units = {
        (run, name): coverage_window_units(rec.tasks, key, window)
        for run, name, rec in _each_run(experiments)
        if rec.tasks is not None
    }
    values: SeedValues = {run: {} for run in RUNS}
    if not units:
        return values, None
    n = min(len(u) for pair in units.values() for u in pair)
    if n >= 2:
        for (run, name), (start, end) in units.items():
            values[run][name] = (expected_distinct(start, n), expected_distinct(end, n))
    return values, n


RATES: frozenset[str] = frozenset(
    {"teacher/valid_rate", "student/solve_rate", BAND_KEY, COPY_KEY, *PROBE_SERIES, *REPEAT_SERIES}
)
"""Series bounded to [0, 1]: their bands are clipped there (a t-interval from 3 seeds can leave the range)."""


def plot_step_band(experiments: Sequence[str | Path], key: str, ax: Axes | None = None, smooth: int = 1) -> Figure:
    """Per-step series ``key`` for baseline and population across seeds: the mean line and its 95%
    t-interval band (no band where fewer than 2 seeds logged a step), each seed smoothed by a
    trailing ``smooth``-step rolling mean first (a step of 4 proposals moves a rate by 0.25). A
    complexity series' title also says how many new programs a seed's step holds (`programs_note`).
    Returns the Figure."""
    fig, ax = axes_or_new(ax, steps=True)
    drawn = False
    for run in RUNS:
        b = band(list(run_dirs(experiments, run).values()), key, smooth)
        if not len(b.steps):
            continue
        drawn = True
        label = f"{run} (n = {int(b.n_seeds.max())} seeds)"
        ax.plot(b.steps, b.mean, color=COLORS[run], marker="o", ms=3, label=label)
        # Every series but the rewards is >= 0 (counts, lengths, a spread); the rates are <= 1 too.
        lo, hi = (0.0 if not key.startswith("reward/") else None), (1.0 if key in RATES else None)
        low, high = (b.low, b.high) if lo is None and hi is None else (np.clip(b.low, lo, hi), np.clip(b.high, lo, hi))
        ax.fill_between(b.steps, low, high, color=COLORS[run], alpha=0.2, lw=0)
    name = HEADLINE.get(key, key)
    smoothed = f", {smooth}-step rolling mean" if smooth > 1 else ""
    ax.set(xlabel="step", ylabel=textwrap.fill(name, 28), xlim=(0, None))
    thin = f"\n{programs_note(experiments)}" if key in COMPLEXITY_SERIES else ""
    ax.set_title(f"{name}\nmean over seeds{smoothed}, 95% t band{thin}", fontsize=10 if not thin else 9)
    finish(ax, drawn, f"no run logged {key}", fontsize=8)
    fig.tight_layout()
    return fig
