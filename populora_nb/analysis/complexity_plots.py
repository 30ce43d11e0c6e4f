"""Figures for task complexity and coverage (PopuLoRA Fig. 4), from ``analysis.complexity`` and
``analysis.coverage`` over runs' tasks frames (``frames.load_tasks``; ``runs``: name -> frame).
Each draws on ``ax`` (a new figure when None) and returns the Figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.analysis.complexity import COMPLEXITY_FIELDS, StepSeries, copy_series, repeat_series, step_series
from populora_nb.analysis.coverage import (
    COVERAGE_KINDS,
    SAMPLE_UNITS,
    Rarefaction,
    compare_at_equal_n,
    proposers,
    valid_tasks,
)
from populora_nb.analysis.figures import axes_or_new, finish, line_band, say_empty, say_missing, whole_ticks

LABELS: Mapping[str, str] = {
    "ast_depth": "AST depth",
    "cc_max": "cyclomatic complexity (max)",
    "cc_total": "cyclomatic complexity (total)",
    "sloc": "lines of code (sloc)",
    "n_variables": "variable count",
    "n_chars": "program length (chars)",
    "solve_rate": "solve rate",
}
COVERAGE_LABELS: Mapping[str, str] = {
    "shapes": "distinct AST shapes",
    "ngrams": "distinct node-type n-grams",
    "signatures": "distinct I/O type signatures",
}


def plot_program_metric(
    runs: Mapping[str, pd.DataFrame], metric: str, window: int = 5, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """One line per run: rolling mean of ``metric`` over the last ``window`` steps, of the programs
    the proposers newly wrote (``complexity.step_series``); the band is the interquartile range of the
    programs pooled in that window."""
    name = LABELS.get(metric, metric)
    return _plot_bands(
        {run: step_series(tasks, metric, window=window) for run, tasks in runs.items()},
        dict(ylabel=name, title=title or f"{name} (rolling {window}-step mean, IQR band)"),
        "no valid proposer-written program"
        + (" solved" if metric == "solve_rate" else "")
        + f"\nin {', '.join(runs) or 'any run'}: nothing to plot",
        ax,
    )


def plot_copy_rate(
    runs: Mapping[str, pd.DataFrame], window: int = 5, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """One line per run: the share of valid proposals that copy a shown reference, a seed, a warm-up
    example or an earlier program (``complexity.copy_series``, pooled over ``window`` steps), with a
    ±1 binomial SE band: the curve to read beside complexity and coverage, which count new programs."""
    title = title or f"copies among valid proposals (rolling {window}-step share, ±1 SE)"
    return _plot_shares({n: copy_series(tasks, window=window) for n, tasks in runs.items()}, "copy rate", title, ax)


def plot_repeat_rate(
    runs: Mapping[str, pd.DataFrame], window: int = 5, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """One line per run, labelled with the role that proposed (teachers in a population, the agent in
    the baseline): the share of valid tasks that repeat a task met before, program and input
    (``complexity.repeat_series``), with a ±1 binomial SE band. A repeat's ρ measures memory."""
    title = title or f"repeated tasks among valid proposals (rolling {window}-step share, ±1 SE)"
    series = {f"{n} ({_proposing_role(tasks)})": repeat_series(tasks, window=window) for n, tasks in runs.items()}
    return _plot_shares(series, "repeat rate", title, ax)


def _proposing_role(tasks: pd.DataFrame) -> str:
    names = set(valid_tasks(tasks)["proposer"])
    return "agent" if names == {"agent"} else "teachers"


def _plot_shares(series: Mapping[str, StepSeries], ylabel: str, title: str, ax: Axes | None) -> Figure:
    why = f"no valid proposal in {', '.join(series) or 'any run'}: nothing to plot"
    return _plot_bands(series, dict(ylabel=ylabel, ylim=(-0.02, 1.02), title=title), why, ax)


def _plot_bands(series: Mapping[str, StepSeries], labels: dict, why_empty: str, ax: Axes | None) -> Figure:
    """One line with its band per non-empty series; ``labels``: ``ax.set``'s keywords."""
    fig, ax = axes_or_new(ax, steps=True)
    has = {n: s for n, s in series.items() if np.isfinite(np.asarray(s.mean, dtype=float)).any()}
    drawn = [line_band(ax, s.steps, s.mean, s.lo, s.hi, label=n) for n, s in has.items()]
    ax.set(xlabel="step", **labels)
    finish(ax, bool(drawn), why_empty, fontsize="small")
    if drawn:
        say_missing(ax, [n for n in series if n not in has], "nothing to plot")
    return fig


def plot_program_metrics(
    runs: Mapping[str, pd.DataFrame],
    metrics: Sequence[str] = (*COMPLEXITY_FIELDS, "solve_rate"),
    window: int = 5,
    title: str = "",
) -> Figure:
    """``plot_program_metric`` for each metric, side by side, sharing the step axis."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.4), sharex=True)
    for ax, metric in zip(axes if len(metrics) > 1 else [axes], metrics):
        plot_program_metric(runs, metric, window=window, ax=ax, title=LABELS.get(metric, metric))
    fig.suptitle(title or f"complexity of newly written programs over steps (rolling {window}-step mean, IQR band)")
    fig.tight_layout()
    return fig


def plot_rarefaction(
    curves: Mapping[str, Rarefaction],
    kind: str = "shapes",
    ax: Axes | None = None,
    title: str | None = None,
    styles: Mapping[str, str] | None = None,
) -> Figure:
    """Rarefaction curves of one coverage ``kind`` on one axes: mean distinct count against the
    number of units drawn, with the percentile band. A dotted line marks the largest n every curve
    reaches, and each legend entry gives its value and band there (``compare_at_equal_n``): the
    fair comparison, whatever each run's volume. ``styles`` maps a name to a line style."""
    if kind not in COVERAGE_LABELS:
        raise ValueError(f"kind must be one of {tuple(COVERAGE_LABELS)}, got {kind!r}")
    fig, ax = axes_or_new(ax)
    whole_ticks(ax.xaxis)  # a number of units drawn
    present = {name: c for name, c in curves.items() if c.size > 0}
    common = compare_at_equal_n(present) if present else None
    for name, curve in curves.items():
        if curve.size == 0:
            continue
        at = common.at[name]  # type: ignore[union-attr]
        label = f"{name} (N={curve.size}): {at.mean:.1f} [{at.lo:.0f}, {at.hi:.0f}] at n={at.n}"
        line_band(ax, curve.n, curve.mean, curve.lo, curve.hi, (styles or {}).get(name, "-"), label=label)
    if common is not None and len(present) > 1:
        ax.axvline(common.n, color="0.5", ls=":", lw=1)
    band = next(iter(present.values())).band if present else (5.0, 95.0)
    ax.set(
        xlabel=f"{SAMPLE_UNITS[kind]} drawn (n)",
        ylabel=COVERAGE_LABELS[kind],
        title=title or f"coverage: {COVERAGE_LABELS[kind]} (rarefied, {band[0]:g}-{band[1]:g}% band)",
    )
    if not present:
        say_empty(ax, f"no {SAMPLE_UNITS[kind]} in {', '.join(curves) or 'any run'}:\nnothing to count")
    else:
        ax.legend(fontsize="x-small")
        say_missing(ax, [n for n in curves if n not in present], f"no {SAMPLE_UNITS[kind]}")  # not silently missing
    return fig


def plot_rarefaction_grid(
    curves: Mapping[str, Mapping[str, Rarefaction]], title: str = "", styles: Mapping[str, str] | None = None
) -> Figure:
    """``plot_rarefaction`` for each kind in ``curves`` (kind -> name -> curve), side by side."""
    kinds = [k for k in COVERAGE_KINDS if k in curves]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 3.8), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        plot_rarefaction(curves[kind], kind, ax=ax, title=COVERAGE_LABELS[kind], styles=styles)
    some = next((c for per_kind in curves.values() for c in per_kind.values()), None)
    how = f"mean of {some.n_resamples} random orders, {some.band[0]:g}-{some.band[1]:g}% band" if some else ""
    fig.suptitle(title or f"problem-space coverage at equal sample sizes (rarefaction: {how})")
    fig.tight_layout()
    return fig


def plot_program_metric_per_proposer(
    tasks: pd.DataFrame, metric: str, window: int = 5, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """``metric`` per proposer (teacher) within one run (its tasks frame), over what each wrote:
    rolling mean lines, no band."""
    fig, ax = axes_or_new(ax, steps=True)
    series = {name: step_series(tasks, metric, window=window, proposer=name) for name in proposers(tasks)}
    drawn = [ax.plot(s.steps, s.mean, label=name) for name, s in series.items() if len(s.steps)]
    name = LABELS.get(metric, metric)
    ax.set(xlabel="step", ylabel=name, title=title or f"{name} per teacher (rolling {window}-step mean)")
    why = f"no teacher has a valid written program{' solved' if metric == 'solve_rate' else ''}:\nnothing to plot"
    finish(ax, bool(drawn), why, fontsize="small", ncol=2)
    return fig
