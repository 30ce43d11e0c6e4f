"""Fixed step windows for the complexity of newly written programs, with their program counts.

A complexity series has a value only at steps where a proposer newly wrote a program (copies are left
out: `populora_nb.copies`), so the first and last ``window`` steps that had one need not line up
between seeds. Here every run's start is steps [first, first + window) and its end the last
``window`` steps of the run, the same steps for every run of the same length, and each window's
value is the mean over the programs written in it, reported with that count. Below ``MIN_PROGRAMS`` the window says
"too few new programs" instead of a number, and the seed is left out of that series' comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from populora_nb.analysis.coverage import measured
from populora_nb.analysis.seed_stats import md_table

MIN_PROGRAMS = 5
"""Fewest newly written programs for a window's complexity to be reported: the mean of fewer is
mostly which few programs happened to be new (a program's depth ranges 3–9 here)."""


@dataclass(frozen=True)
class Window:
    """One fixed step window of one run: its steps, the programs newly written there and their mean."""

    first: int
    last: int
    n: int
    value: float
    """Mean of the field over the window's programs; NaN when ``n`` < MIN_PROGRAMS."""

    def cell(self, digits: int = 2) -> str:
        if self.n < MIN_PROGRAMS:
            return f"too few new programs (n = {self.n}, steps {self.first}–{self.last})"
        return f"{self.value:.{digits}f} (n = {self.n}, steps {self.first}–{self.last})"


def fixed_windows(steps: Sequence[int], window: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((first, last) of the start window, (first, last) of the end window), inclusive, from the steps
    a run recorded: its first ``window`` steps and its last ``window`` steps."""
    if window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    if not steps:
        raise ValueError("a run with no recorded step has no window")
    lo, hi = min(steps), max(steps)
    return (lo, lo + window - 1), (hi - window + 1, hi)


def complexity_window(tasks: pd.DataFrame, field: str, span: tuple[int, int]) -> Window:
    """The mean ``field`` over the programs newly written in steps ``span`` (inclusive) of a run's tasks
    frame, with their count (programs that did not parse, NaN, left out of both)."""
    programs = measured(tasks)
    values = [float(v) for v in programs.loc[programs["step"].between(*span), field]]
    values = [v for v in values if not math.isnan(v)]
    value = float(np.mean(values)) if len(values) >= MIN_PROGRAMS else math.nan
    return Window(span[0], span[1], len(values), value)


def complexity_windows(tasks: pd.DataFrame, field: str, window: int) -> tuple[Window, Window]:
    """(start, end) windows of ``field`` for one run's tasks frame (module docstring)."""
    start, end = fixed_windows(sorted(set(tasks["step"].tolist())), window)
    return complexity_window(tasks, field, start), complexity_window(tasks, field, end)


def complexity_window_lines(
    runs: Mapping[str, Mapping[str, pd.DataFrame]], window: int, labels: Mapping[str, str]
) -> list[str]:
    """The report's complexity-windows table: per seed (``runs``: seed -> run -> tasks frame) and run,
    the two fixed windows with their new-program counts and each field's start → end, or "too few new
    programs" where a window holds fewer than ``MIN_PROGRAMS``. ``labels``: field -> column name."""
    rows = []
    for seed, by_run in runs.items():
        for run, tasks in by_run.items():
            if tasks.empty:
                continue
            pairs = {f: complexity_windows(tasks, f, window) for f in labels}
            start, end = next(iter(pairs.values()))
            cells = [f"{start.first}–{start.last}: {start.n}", f"{end.first}–{end.last}: {end.n}"]
            for s, e in pairs.values():
                few = s.n < MIN_PROGRAMS or e.n < MIN_PROGRAMS
                cells.append("too few new programs" if few else f"{s.value:.2f} → {e.value:.2f}")
            rows.append([seed, run, *cells])
    head = ["seed", "run", "start steps: new programs", "end steps: new programs", *labels.values()]
    return [
        "## Complexity in fixed step windows",
        "",
        f"Every run's start is its first {window} steps and its end its last {window}; a window's value is the mean "
        'over the programs newly written in it (copies left out), and a field reads "too few new programs" where '
        f"either window holds fewer than {MIN_PROGRAMS} (`studies.windows`). Such seeds are left out of the "
        "complexity rows of the tables below, which then compare fewer seeds or none.",
        "",
        *md_table([head, *rows]),
    ]
