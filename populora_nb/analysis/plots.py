"""Matplotlib figures from a run directory's records (metrics, matches, tasks, lineage): each takes
run directories (or rows) and an optional ``ax``, and returns the Figure (`analysis.figures`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.analysis.figures import axes_or_new, figure_of, finish, say_empty, say_missing
from populora_nb.analysis.frames import per_step, read_stream
from populora_nb.evolution import Lineage
from populora_nb.operators import CONTROLS, OPERATORS, PAPER_IDS, arity

KIND_COLORS = {"code_o": "tab:blue", "code_i": "tab:orange", "code_f": "tab:green"}
ROLE_COLORS = {"teacher": "tab:red", "student": "tab:blue", "agent": "tab:gray"}
LABELS = {
    "teacher/valid_rate": "valid-proposal rate",
    "student/solve_rate": "fresh-task solve rate ρ",
    "reward/propose_mean": "proposer reward",
    "lengths/propose_chars": "proposal length (chars)",
    "probe/rho": "probe ρ: frozen solver on fixed prompts",
    "probe/valid_rate": "valid rate on the probe's fixed prompts",
    "teacher/rho_mean": "mean ρ of valid proposals",
    "student/buffer_solve_rate": "solve rate on buffer tasks",
    "student/malformed_rate": "malformed-answer rate",
    "reward/solve_mean": "mean solver reward",
    "rating/mu": "TrueSkill μ",
    "time/step_s": "seconds per step",
}
"""Human names of logged keys (`metrics.jsonl`); what each means, and the series the seed protocol
derives from a run's records: `studies/series.py`."""


def label(key: str) -> str:
    """The human name of a metric key (the key itself when it has none)."""
    return LABELS.get(key, key)


def plot_solve_rates(
    runs: Mapping[str, str | Path],
    kinds: Sequence[str] = ("code_o", "code_i", "code_f"),
    source: Literal["fresh", "buffer"] = "fresh",
    valid_rate: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Solve rate per task kind over steps; one line style per run (e.g. baseline vs population).

    ``fresh`` (the headline): rho of the tasks proposed that step and solved by their matched
    student, the quantity the teacher reward and the collapse story are about. ``buffer``: the
    solvers' attempts at buffer tasks (PopuLoRA's top-ups, AZR's solver batch), older and easier
    tasks kept apart so they cannot lift the fresh curve. ``valid_rate`` adds each run's
    valid-proposal rate (black). A kind with no point is named in the panel ("no data for ..."), so a
    kind listed in a task table is never silently missing.
    """
    fig, ax = axes_or_new(ax, (7, 3.8), steps=True)
    prefix = "" if source == "fresh" else "buffer_"
    missing: list[str] = []  # (run, kind) series without a point
    for (name, path), style in zip(runs.items(), ["-", "--", ":", "-."]):
        metrics = read_stream(path, "metrics")
        run_label = "" if len(runs) == 1 else f"{name} · "
        for kind in kinds:
            series, color = per_step(metrics, f"{prefix}solve_rate/{kind}"), KIND_COLORS.get(kind)
            if not series.empty:
                ax.plot(series, style, color=color, marker="o", ms=3, label=f"{run_label}{kind}")
            else:
                missing.append(f"{run_label}{kind}")
        series = per_step(metrics, "teacher/valid_rate")
        if valid_rate and not series.empty:
            ax.plot(series, style, color="k", lw=1, marker="s", ms=3, label=f"{run_label}valid-proposal rate")
    title = "Solve rate ρ of fresh proposals"
    if source != "fresh":
        title = "Solve rate on buffer tasks (top-ups, AZR solver batch)"
    if valid_rate:
        title = "Solve rate ρ per kind, and valid-proposal rate"
    ax.set(xlabel="step", ylabel="rate" if valid_rate else "solve rate", ylim=(-0.03, 1.03), title=title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, ncol=2 if len(runs) > 1 else 1, loc="upper left")
    if len(missing) == len(runs) * len(kinds):  # not one solve-rate point
        say_empty(ax, "no valid proposal to solve yet" if source == "fresh" else "no buffer task was attempted")
    else:
        say_missing(ax, missing, "no valid task")
    fig.tight_layout()
    return fig


def plot_step_metric(
    runs: Mapping[str, str | Path], key: str, title: str | None = None, ax: Axes | None = None
) -> Figure:
    """One logged metric ``key`` over steps, one line per run: its mean per step over the members
    that logged it."""
    fig, ax = axes_or_new(ax, steps=True)
    series = {name: per_step(read_stream(path, "metrics"), key) for name, path in runs.items()}
    for name, s in series.items():
        if not s.empty:
            ax.plot(s, marker="o", ms=3, label=name)
    ax.set(xlabel="step", ylabel=label(key), title=title or label(key))
    if key.endswith("_rate"):
        ax.set_ylim(-0.03, 1.03)
    finish(ax, any(not s.empty for s in series.values()), f"no step logged {label(key)} yet", fontsize=8)
    fig.tight_layout()
    return fig


def plot_ratings(run_dir: str | Path, ax: Axes | None = None) -> Figure:
    """TrueSkill mu per member over steps with a ±sigma band, coloured by role."""
    fig, ax = axes_or_new(ax, (7, 4), steps=True)
    metrics = read_stream(run_dir, "metrics")
    rated = metrics.dropna(subset=["rating/mu"]) if "rating/mu" in metrics else metrics.iloc[:0]
    ax.set(xlabel="step", ylabel="TrueSkill μ (band: ±σ)", title="Ratings")
    if rated.empty:
        say_empty(ax, "no ratings: a single agent (the baseline) plays no matches")
        return fig
    members = dict(tuple(rated.groupby("member", sort=False)))
    last_step = rated["step"].max()
    ends = []  # (mu, name, color) of the members alive at the last step, labelled at the right edge
    for m, rs in members.items():
        steps, mu, sd = (rs[k].to_numpy(float) for k in ("step", "rating/mu", "rating/sigma"))
        color = ROLE_COLORS.get(rs["role"].iloc[0], "k")
        ax.plot(steps, mu, color=color, lw=1.2, marker="o" if len(steps) == 1 else None, ms=3)
        ax.fill_between(steps, mu - sd, mu + sd, color=color, alpha=0.08)
        if steps[-1] == last_step:
            ends.append((float(mu[-1]), m, color))
        else:  # replaced by evolution: mark where its line stops
            ax.plot(steps[-1], mu[-1], "x", color=color, ms=5)
    for role, color in ROLE_COLORS.items():
        if (rated["role"] == role).any():
            ax.plot([], [], color=color, label=role)
    if len(ends) < len(members):
        ax.plot([], [], "x", color="0.3", label="replaced by evolution")
    ax.legend(fontsize=8, loc="upper left")
    _label_ends(ax, ends, last_step)
    fig.tight_layout()
    return fig


def _label_ends(ax: Axes, ends: list[tuple[float, str, str]], x: float, fontsize: float = 8) -> None:
    """Names right of their lines' ends, at least one text line apart (computed in points from the
    axes' height, so they never overlap), the group kept inside the axes."""
    if not ends:
        return
    low, high = ax.get_ylim()
    height_pt = ax.get_position().height * figure_of(ax).get_figheight() * 72
    gap = 1.25 * fontsize / height_pt * (high - low)
    ys: list[float] = []
    for y, _, _ in sorted(ends):
        ys.append(max(y, ys[-1] + gap) if ys else y)
    overflow = ys[-1] - (high - gap / 2)
    if overflow > 0:  # pushed above the top: slide the group down, then keep it above the bottom
        ys = [max(y - overflow, low + gap / 2 + i * gap) for i, y in enumerate(ys)]
    left, right = ax.get_xlim()
    ax.set_xlim(left, max(right, x + 0.18 * max(x - left, 1)))  # room for the names
    for (y, name, color), y_text in zip(sorted(ends), ys):
        text_at = (x + 0.03 * max(x - left, 1), y_text)
        ax.annotate(name, (x, y), xytext=text_at, fontsize=fontsize, color=color, va="center", annotation_clip=False)


def plot_solve_matrix(run_dir: str | Path | pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Teacher × student mean solve rate over the run's matches (or a frame of them: the explorer's
    window of steps); blank where they never met."""
    fig, ax = axes_or_new(ax, (5, 4), steps=True)
    matches = run_dir if isinstance(run_dir, pd.DataFrame) else read_stream(run_dir, "matches")
    ax.set(xlabel="student", ylabel="teacher", title="Solve rate ρ of valid tasks, per pair")
    if matches.empty:
        ax.set(xticks=[], yticks=[])
        say_empty(ax, "no matches: a single agent (the baseline) has no teacher–student pairs")
        return fig
    teachers, students = sorted(set(matches["teacher"].astype(str))), sorted(set(matches["student"].astype(str)))
    played = matches[matches["valid"].astype(bool) & matches["rho"].notna()]  # the student attempted it
    pairs = played.astype({"rho": float}).groupby(["teacher", "student"])["rho"]
    rho = pairs.mean().unstack().reindex(index=teachers, columns=students).to_numpy(float)
    counts = pairs.size()
    im = ax.imshow(np.ma.masked_invalid(rho), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(students)), students, rotation=45, ha="right")  # children's ids are long
    ax.set_yticks(range(len(teachers)), teachers)
    for i, t in enumerate(teachers):
        for j, s in enumerate(students):
            if np.isfinite(r := rho[i, j]):  # ρ and how many tasks it averages
                color = "w" if r < 0.6 else "k"
                ax.text(j, i, f"{r:.2f}\nn={counts[(t, s)]}", ha="center", va="center", fontsize=7, color=color)
    if counts.empty:
        valid = int(matches["valid"].astype(bool).sum())
        say_empty(
            ax,
            f"no valid task was played in {len(matches)} matches ({valid} valid)"
            if valid
            else f"none of {len(matches)} proposals was valid:\nno task to solve, so no ρ",
        )
    fig.colorbar(im, ax=ax, fraction=0.046, label="ρ")
    fig.tight_layout()
    return fig


def plot_valid_rate_per_teacher(run_dir: str | Path, ax: Axes | None = None) -> Figure:
    """Each proposer's valid-proposal rate (share of its proposals that passed validation) over steps."""
    fig, ax = axes_or_new(ax, steps=True)
    metrics, key = read_stream(run_dir, "metrics"), "teacher/valid_rate"
    rows = metrics.dropna(subset=[key]) if key in metrics else metrics.iloc[:0]
    for m, rs in rows.groupby("member", sort=False):
        ax.plot(rs["step"], rs[key], marker="o", ms=3, label=m)
    title = "Valid-proposal rate per proposer"
    ax.set(xlabel="step", ylabel=label(key), ylim=(-0.03, 1.03), title=title)
    finish(ax, not rows.empty, "no proposals logged yet", fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_invalid_reasons(run_dir: str | Path, ax: Axes | None = None) -> Figure:
    """Why proposals were rejected, summed over the run."""
    fig, ax = axes_or_new(ax, steps=True)
    tasks = read_stream(run_dir, "tasks")
    counts = Counter(tasks["reason"][~tasks["valid"].astype(bool)]) if len(tasks) else Counter()
    items = sorted(counts.items(), key=lambda kv: kv[1])
    ax.barh([k for k, _ in items], [v for _, v in items], color="tab:red")
    ax.set(xlabel="proposals", title=f"Rejected proposals by reason ({sum(counts.values())} of {len(tasks)})")
    if not items:
        say_empty(ax, f"every one of {len(tasks)} proposals was valid" if tasks else "no proposals logged yet")
    fig.tight_layout()
    return fig


def plot_rewards(run_dir: str | Path, ax: Axes | None = None) -> Figure:
    """Mean proposer reward and mean solver reward per step (a baseline's substitute for ratings)."""
    fig, ax = axes_or_new(ax, steps=True)
    metrics = read_stream(run_dir, "metrics")
    series = {
        name: per_step(metrics, f"reward/{key}_mean") for key, name in (("propose", "proposer"), ("solve", "solver"))
    }
    for name, s in series.items():
        if not s.empty:
            ax.plot(s, marker="o", ms=3, label=name)
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xlabel="step", ylabel="mean reward", title="Rewards")
    finish(ax, any(not s.empty for s in series.values()), "no reward logged yet", fontsize=8)
    fig.tight_layout()
    return fig


def plot_lineage(
    lineage_records: Sequence[Lineage],
    ax: Axes | None = None,
    *,
    founders: Mapping[str, str] | None = None,
    end_step: int | None = None,
) -> Figure:
    """Lineage tree over time: one lane per population slot (a child takes the slot of the member
    it replaces), a line per member's lifetime, an arrow from each parent to each child coloured
    by operator (dashed for a crossover's second parent). Successive occupants of a slot alternate
    between dark and light. `founders` (id → role) adds initial members the records never mention.
    `end_step`: the run's number of steps, where the lifetimes of the last members end (a lifetime
    [b, d) covers steps b … d − 1); without it they end one evolution interval after the last birth."""
    fig, ax = axes_or_new(ax, (10, 4), steps=True)
    births = sorted(lineage_records, key=lambda r: r.step)
    children = {r.child for r in births}
    role_of = dict(founders or {}) | {i: r.role for r in births for i in (r.replaced, r.child, *r.parents)}
    initial = sorted((i for i in role_of if i not in children), key=lambda i: (role_of[i], i))
    lane = {member: y for y, member in enumerate(initial)}
    born = dict.fromkeys(initial, 0)
    died: dict[str, int] = {}
    for r in births:
        lane[r.child], born[r.child], died[r.replaced] = lane[r.replaced], r.step, r.step
    steps = sorted({r.step for r in births}) or [1]
    gap = min((b - a for a, b in zip(steps, steps[1:])), default=steps[0])
    end = end_step if end_step is not None else steps[-1] + gap
    roles = sorted(set(role_of.values()))
    role_color = {role: plt.get_cmap("Set2")(i) for i, role in enumerate(roles)}
    occupant: dict[str, int] = {}  # successive occupants of a lane alternate in shade, so each lifetime is visible
    for member in sorted(lane, key=lambda m: born[m]):
        occupant[member] = sum(1 for other in occupant if lane[other] == lane[member])
        span, alpha = [born[member], died.get(member, end)], 0.35 if occupant[member] % 2 else 0.75
        ax.plot(span, [lane[member]] * 2, color=role_color[role_of[member]], lw=4, alpha=alpha, solid_capstyle="butt")
    operators = sorted({r.operator for r in births}, key=list(OPERATORS).index)
    op_color = {op: plt.get_cmap("tab10")(i % 10) for i, op in enumerate(operators)}
    for r in births:
        for n, parent in enumerate(r.parents):
            arrow = dict(arrowstyle="->", color=op_color[r.operator], ls="--" if n else "-", lw=1.2)
            ax.annotate("", xy=(r.step, lane[r.child]), xytext=(r.step - 0.45 * gap, lane[parent]), arrowprops=arrow)
        ax.plot(r.step, lane[r.child], "o", color=op_color[r.operator], ms=5)
        # the child's name where its lifetime starts: a lane holds its founder, then the children that replaced it
        ax.annotate(r.child, (r.step, lane[r.child]), xytext=(3, 5), textcoords="offset points", fontsize=6)
    for op in operators:
        ax.plot([], [], color=op_color[op], label=_operator_label(op))
    for role in roles:
        ax.plot([], [], color=role_color[role], lw=4, alpha=0.75, label=f"{role} lifetimes")
    ax.set_yticks(range(len(initial)), [f"{f} ({role_of[f]})" for f in initial])
    ax.set(
        xlim=(0, end),
        xlabel="step",
        ylabel="founder's lane",
        title="lineage: children replace the weakest of their role",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="operator (paper id)", title_fontsize=7)
    return fig


def _operator_label(op: str) -> str:
    """An operator as the legend names it: the paper's id (M: mutation, X: crossover), its name and
    how many parents it takes; a control is its own name."""
    if op in CONTROLS:
        return f"{op} (control)"
    what = "mutation, 1 parent" if arity(op) == 1 else "crossover, 2 parents"
    return f"{PAPER_IDS.get(op, op)} {op} ({what})"


def plot_retention(curves: Mapping[str, Sequence[float]], ax: Axes | None = None) -> Figure:
    """Mean student reward per retraining step, one line per operator; the controls (copy_parent, linear_0_5)
    dashed and the parent's own level (copy_parent's step 0) as a dotted line."""
    fig, ax = axes_or_new(ax, figsize=(8, 4.5), steps=True)
    for i, (name, scores) in enumerate(curves.items()):
        control = name in CONTROLS
        label = name if control or name not in PAPER_IDS else f"{PAPER_IDS[name]} {name}"
        color = "black" if name == "copy_parent" else f"C{i % 10}"
        style: dict[str, Any] = dict(ms=3, lw=2.2 if control else 1.3, color=color)
        ax.plot(range(len(scores)), scores, "--" if control else "-o", **style, label=label)
    if "copy_parent" in curves and curves["copy_parent"]:
        ax.axhline(curves["copy_parent"][0], color="0.6", ls=":", lw=1, label="parent (step 0)")
    ax.set(xlabel="retraining step", ylabel="mean student reward", title="retention: children retrained from birth")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
