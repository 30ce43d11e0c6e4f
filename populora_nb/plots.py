"""Matplotlib figures from a run directory's records (metrics.jsonl, matches.jsonl, tasks.jsonl).

Every function takes run directories (or rows), an optional ``ax``, and returns the Figure, so a
notebook shows it inline and the report saves it as PNG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from populora_nb.matchmaking import Match, solve_rate_matrix
from populora_nb.records import RunDir

KIND_COLORS = {"code_o": "tab:blue", "code_i": "tab:orange", "code_f": "tab:green"}
ROLE_COLORS = {"teacher": "tab:red", "student": "tab:blue", "agent": "tab:gray"}


def _ax(ax, figsize=(6, 3.5)):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    return ax.figure, ax


def step_mean(rows: Sequence[dict], key: str, role: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the mean of ``key`` over the members (of ``role``) that logged it."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if (role is None or r.get("role") == role) and r.get(key) is not None:
            by_step.setdefault(r["step"], []).append(float(r[key]))
    steps = np.array(sorted(by_step))
    return steps, np.array([np.mean(by_step[s]) for s in steps])


def plot_solve_rates(runs: Mapping[str, str | Path], kinds: Sequence[str] = ("code_o", "code_i", "code_f"),
                     source: Literal["fresh", "buffer"] = "fresh", ax=None) -> Figure:
    """Solve rate per task kind over steps; one line style per run (e.g. baseline vs population).

    ``fresh`` (the headline): rho of the tasks proposed that step and solved by their matched
    student, the quantity the teacher reward and the collapse story are about. ``buffer``: the
    solvers' attempts at buffer tasks (PopuLoRA's top-ups, AZR's solver batch), older and easier
    tasks kept apart so they cannot lift the fresh curve.
    """
    fig, ax = _ax(ax, (7, 3.8))
    styles = ["-", "--", ":", "-."]
    prefix = "" if source == "fresh" else "buffer_"
    drawn = False
    for (label, path), style in zip(runs.items(), styles):
        rows = RunDir(Path(path)).read("metrics")
        for kind in kinds:
            steps, vals = step_mean(rows, f"{prefix}solve_rate/{kind}")
            if len(steps):
                drawn = True
                ax.plot(steps, vals, style, color=KIND_COLORS.get(kind), marker="o", ms=3, label=f"{label} · {kind}")
    title = "Solve rate ρ of fresh proposals" if source == "fresh" else "Solve rate on buffer tasks (top-ups, AZR solver batch)"
    ax.set(xlabel="step", ylabel="solve rate", ylim=(-0.03, 1.03), title=title)
    if drawn:
        ax.legend(fontsize=7, ncol=2)
    else:
        why = "no valid proposal was solved in any step" if source == "fresh" else "no buffer task was attempted"
        ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", color="0.4")
    fig.tight_layout()
    return fig


def plot_metric(runs: Mapping[str, str | Path], key: str, role: str | None = None, title: str | None = None, ax=None) -> Figure:
    fig, ax = _ax(ax)
    for label, path in runs.items():
        steps, vals = step_mean(RunDir(Path(path)).read("metrics"), key, role)
        if len(steps):
            ax.plot(steps, vals, marker="o", ms=3, label=label)
    ax.set(xlabel="step", ylabel=key, title=title or key)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_ratings(run_dir: str | Path, ax=None) -> Figure:
    """TrueSkill mu per member over steps with a ±sigma band, coloured by role."""
    fig, ax = _ax(ax, (7, 4))
    rows = RunDir(Path(run_dir)).read("metrics")
    members: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("rating/mu") is not None:
            members.setdefault(r["member"], []).append(r)
    last_step = max((r["step"] for rs in members.values() for r in rs), default=0)
    ends = []  # (mu, name, color) of the members alive at the last step, labelled at the right edge
    for m, rs in members.items():
        steps = np.array([r["step"] for r in rs])
        mu = np.array([r["rating/mu"] for r in rs])
        sd = np.array([r["rating/sigma"] for r in rs])
        color = ROLE_COLORS.get(rs[0]["role"], "k")
        ax.plot(steps, mu, color=color, lw=1.2)
        ax.fill_between(steps, mu - sd, mu + sd, color=color, alpha=0.08)
        if steps[-1] == last_step:
            ends.append((float(mu[-1]), m, color))
        else:  # replaced by evolution: mark where its line stops
            ax.plot(steps[-1], mu[-1], "x", color=color, ms=5)
    _label_ends(ax, ends, last_step)
    for role, color in ROLE_COLORS.items():
        if any(rs[0]["role"] == role for rs in members.values()):
            ax.plot([], [], color=color, label=role)
    if len(ends) < len(members):
        ax.plot([], [], "x", color="0.3", label="replaced by evolution")
    ax.set(xlabel="step", ylabel="TrueSkill μ (band: ±σ)", title="Ratings")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _label_ends(ax, ends: list[tuple[float, str, str]], x: float) -> None:
    """Names at the right of their lines' ends, pushed apart so that none overlap."""
    if not ends:
        return
    low, high = ax.get_ylim()
    gap = 0.045 * (high - low)
    placed: list[float] = []
    for y, name, color in sorted(ends):
        y_text = max(y, placed[-1] + gap) if placed else y
        placed.append(y_text)
        ax.annotate(name, (x, y), xytext=(x + 0.03 * max(x, 1), y_text), fontsize=7, color=color, va="center")


def plot_solve_matrix(run_dir: str | Path, last_steps: int | None = None, ax=None) -> Figure:
    """Teacher × student mean solve rate over the (last) matches; blank where they never met."""
    fig, ax = _ax(ax, (5, 4))
    rows = RunDir(Path(run_dir)).read("matches")
    if last_steps is not None and rows:
        cutoff = max(r["step"] for r in rows) - last_steps
        rows = [r for r in rows if r["step"] > cutoff]
    matches = [Match(r["teacher"], r["student"], r["valid"], r["rho"]) for r in rows]
    mat = solve_rate_matrix(matches, sorted({m.teacher for m in matches}), sorted({m.student for m in matches}))
    im = ax.imshow(np.ma.masked_invalid(mat.rho), vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(mat.students)), mat.students, rotation=45, ha="right")  # children's ids are long
    ax.set_yticks(range(len(mat.teachers)), mat.teachers)
    for i in range(len(mat.teachers)):
        for j in range(len(mat.students)):
            if np.isfinite(mat.rho[i, j]):
                ax.text(j, i, f"{mat.rho[i, j]:.2f}", ha="center", va="center", fontsize=7, color="w")
    ax.set(xlabel="student", ylabel="teacher", title="Solve rate ρ (valid tasks)")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def plot_valid_rate_per_teacher(run_dir: str | Path, ax=None) -> Figure:
    fig, ax = _ax(ax)
    rows = [r for r in RunDir(Path(run_dir)).read("metrics") if r.get("teacher/valid_rate") is not None]
    for m in dict.fromkeys(r["member"] for r in rows):
        rs = [r for r in rows if r["member"] == m]
        ax.plot([r["step"] for r in rs], [r["teacher/valid_rate"] for r in rs], marker="o", ms=3, label=m)
    ax.set(xlabel="step", ylabel="valid proposals", ylim=(-0.03, 1.03), title="Valid-proposal rate per proposer")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_invalid_reasons(run_dir: str | Path, ax=None) -> Figure:
    """Why proposals were rejected, summed over the run."""
    fig, ax = _ax(ax)
    counts: dict[str, int] = {}
    for r in RunDir(Path(run_dir)).read("tasks"):
        if not r["valid"]:
            counts[r["reason"]] = counts.get(r["reason"], 0) + 1
    items = sorted(counts.items(), key=lambda kv: kv[1])
    ax.barh([k for k, _ in items], [v for _, v in items], color="tab:red")
    ax.set(xlabel="proposals", title="Rejected proposals by reason")
    fig.tight_layout()
    return fig


def plot_rewards(run_dir: str | Path, ax=None) -> Figure:
    fig, ax = _ax(ax)
    rows = RunDir(Path(run_dir)).read("metrics")
    for key, label in (("reward/propose_mean", "proposer"), ("reward/solve_mean", "solver")):
        steps, vals = step_mean(rows, key)
        if len(steps):
            ax.plot(steps, vals, marker="o", ms=3, label=label)
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xlabel="step", ylabel="mean reward", title="Rewards")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
