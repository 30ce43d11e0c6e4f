"""Figures for task complexity and coverage (PopuLoRA Fig. 4): matplotlib only, data from
``populora_nb.complexity``. Each function draws on ``ax`` (a new figure when None) and returns
the Figure; nothing is shown or saved here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.complexity import COMPLEXITY_FIELDS, CoverageCurve, RunAnalysis, step_series

LABELS: Mapping[str, str] = {
    "ast_depth": "AST depth", "cc_max": "cyclomatic complexity (max)",
    "cc_total": "cyclomatic complexity (total)", "sloc": "lines of code (sloc)",
    "n_variables": "variable count", "n_chars": "program length (chars)", "solve_rate": "solve rate",
}
COVERAGE_LABELS: Mapping[str, str] = {
    "shapes": "distinct AST shapes", "ngrams": "distinct node-type n-grams",
    "signatures": "distinct I/O type signatures",
}


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        return fig, ax
    return ax.figure, ax  # type: ignore[return-value]


def plot_metric(runs: Mapping[str, RunAnalysis], metric: str, window: int = 5,
                ax: Axes | None = None, title: str | None = None) -> Figure:
    """One line per run: rolling mean of ``metric`` over the last ``window`` steps; the band is
    the interquartile range of the programs pooled in that window."""
    fig, ax = _axes(ax)
    for name, analysis in runs.items():
        series = step_series(analysis.programs, metric, window=window)
        (line,) = ax.plot(series.steps, series.mean, label=name)
        ax.fill_between(series.steps, series.lo, series.hi, color=line.get_color(), alpha=0.2, lw=0)
    ax.set(xlabel="step", ylabel=LABELS.get(metric, metric),
           title=title or f"{LABELS.get(metric, metric)} (rolling {window}-step mean, IQR band)")
    ax.legend(fontsize="small")
    return fig


def plot_metrics_grid(runs: Mapping[str, RunAnalysis],
                      metrics: Sequence[str] = (*COMPLEXITY_FIELDS, "solve_rate"),
                      window: int = 5, title: str = "") -> Figure:
    """``plot_metric`` for each metric, side by side, sharing the step axis."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.4), sharex=True)
    for ax, metric in zip(axes if len(metrics) > 1 else [axes], metrics):
        plot_metric(runs, metric, window=window, ax=ax, title=LABELS.get(metric, metric))
    fig.suptitle(title or f"complexity over steps (rolling {window}-step mean, IQR band)")
    fig.tight_layout()
    return fig


def plot_coverage(curves: Mapping[str, CoverageCurve], kind: str = "shapes",
                  ax: Axes | None = None, title: str | None = None) -> Figure:
    """Cumulative distinct count (``kind``: shapes, ngrams or signatures), one line per curve."""
    if kind not in COVERAGE_LABELS:
        raise ValueError(f"kind must be one of {tuple(COVERAGE_LABELS)}, got {kind!r}")
    fig, ax = _axes(ax)
    for name, curve in curves.items():
        ax.step(curve.steps, getattr(curve, kind), where="post", label=name)
    ax.set(xlabel="step", ylabel=COVERAGE_LABELS[kind], title=title or f"coverage: {COVERAGE_LABELS[kind]}")
    ax.legend(fontsize="small")
    return fig


def plot_coverage_grid(curves: Mapping[str, CoverageCurve], title: str = "") -> Figure:
    """The three coverage measures side by side."""
    fig, axes = plt.subplots(1, len(COVERAGE_LABELS), figsize=(12, 3.4))
    for ax, kind in zip(axes, COVERAGE_LABELS):
        plot_coverage(curves, kind, ax=ax, title=COVERAGE_LABELS[kind])
    fig.suptitle(title or "problem-space coverage (cumulative)")
    fig.tight_layout()
    return fig


def plot_per_proposer(analysis: RunAnalysis, metric: str, window: int = 5,
                      ax: Axes | None = None, title: str | None = None) -> Figure:
    """``metric`` per proposer (teacher) within one run: rolling mean lines, no band."""
    fig, ax = _axes(ax)
    for name in analysis.proposers:
        series = step_series([p for p in analysis.programs if p.proposer == name], metric, window=window)
        ax.plot(series.steps, series.mean, label=name)
    ax.set(xlabel="step", ylabel=LABELS.get(metric, metric),
           title=title or f"{LABELS.get(metric, metric)} per teacher (rolling {window}-step mean)")
    ax.legend(fontsize="small", ncol=2)
    return fig
