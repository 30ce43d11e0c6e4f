"""An explorer of what the teachers wrote, for one run or two side by side, that leaves a record.

    ex = Explorer(load_frames("runs/notebooks-smoke"))   # an experiment: baseline | population
    ex.show()

Controls (ipywidgets): the tasks' step range, member (as proposer or solver), kind, ρ band,
validity (valid, invalid, or one rejection reason) and copy class; a task id to read in full; a
step slider for the solve-rate matrix and the ratings; a member whose lineage to trace. What they
select is drawn below them as plain outputs, replaced in place after each change (the dashboard's
reason, docs/notebooks.md: the controls need a running kernel, the last selection stays as HTML and
a PNG): the filter in words and per run a table of the matching tasks (the first `max_rows`); per
run the selection over steps, the solve rates and the ratings at the slider's step; one task and
one member's lineage in full. `filter_tasks` and `ancestry` are the same selections as functions.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
from IPython.display import HTML, display
from matplotlib.figure import Figure

from populora_nb.analysis.dashboard import in_notebook, verdict
from populora_nb.analysis.figures import finish, png_image, say_empty, whole_ticks
from populora_nb.analysis.frames import COMPLEXITY_COLUMNS, RunFrames
from populora_nb.analysis.plots import plot_solve_matrix

ALL = "all"
_CHOICES = ("member", "kind", "validity", "copy")
"""The dropdown filters, named as `filter_tasks`' arguments."""
_ANCESTRY = ("generation", "child", "parents", "operator", "birth_step")
TABLE_COLUMNS = ("task", "step", "proposer", "solver", "kind", "verdict", "rho", "attempts", "copy", "ast_depth")


def filter_tasks(
    tasks: pd.DataFrame,
    steps: tuple[int, int] | None = None,
    member: str = ALL,
    kind: str = ALL,
    rho: tuple[float, float] = (0.0, 1.0),
    validity: str = ALL,
    copy: str = ALL,
) -> pd.DataFrame:
    """The tasks that match: ``steps`` inclusive; ``member`` as proposer or solver; ``rho`` a closed
    band (a band narrower than [0, 1] leaves out tasks without ρ); ``validity`` "valid", "invalid" or
    one rejection reason ("invalid: syntax"); ``copy`` a copy class."""
    keep = pd.Series(True, index=tasks.index)
    if steps is not None:
        keep &= tasks["step"].between(*steps)
    if member != ALL:
        keep &= (tasks["proposer"] == member) | (tasks["solver"] == member)
    if kind != ALL:
        keep &= tasks["kind"] == kind
    if tuple(rho) != (0.0, 1.0):
        keep &= tasks["rho"].between(*rho)
    if validity in ("valid", "invalid"):
        keep &= tasks["valid"].astype(bool) == (validity == "valid")
    elif validity.startswith("invalid: "):
        keep &= tasks["reason"] == validity.removeprefix("invalid: ")
    if copy != ALL:
        keep &= tasks["copy"] == copy
    return tasks[keep]


def ancestry(lineage: pd.DataFrame, member: str) -> pd.DataFrame:
    """The births that made ``member``: its own, then its parents', back to the founders (who have
    none), one row each with the ``generation`` above ``member`` (0: its own birth)."""
    if lineage.empty or "child" not in lineage.columns:
        return pd.DataFrame(columns=_ANCESTRY)
    births = {row["child"]: row for row in lineage.to_dict("records")}
    out, todo, seen = [], [(member, 0)], set()
    while todo:
        name, generation = todo.pop(0)
        if name in seen or name not in births:
            continue
        seen.add(name)
        row = births[name]
        out.append({"generation": generation, **{k: row.get(k) for k in _ANCESTRY[1:]}})
        todo += [(p, generation + 1) for p in row.get("parents") or ()]
    return pd.DataFrame(out, columns=_ANCESTRY).astype({"birth_step": "Int64"})


def tasks_table(tasks: pd.DataFrame, max_rows: int = 20) -> str:
    """An HTML table of tasks (`TABLE_COLUMNS` and the program's first line), the first ``max_rows``."""
    if tasks.empty:
        return "<p><i>no task matches</i></p>"
    rows = []
    for r in tasks.head(max_rows).to_dict("records"):
        attempts = "" if pd.isna(r["n_solved"]) else f"{r['n_solved']}/{r['rollouts']}"
        cells = r | {"verdict": verdict(r), "attempts": attempts}
        cells |= {c: "" if pd.isna(r[c]) else f"{r[c]:{f}}" for c, f in (("rho", ".2f"), ("ast_depth", ".0f"))}
        cells["rho"] = cells["rho"] or "–"  # no ρ: marked as the step tables mark it (step_tables.NO_RHO)
        first = " ".join(str(r["program"] or "(nothing parsable)").split())[:60]  # the program on one line
        tds = "".join(f"<td>{html.escape(_text(cells[c]))}</td>" for c in TABLE_COLUMNS)
        code = f"<td style='text-align:left;white-space:nowrap'><code>{html.escape(first)}</code></td>"
        rows.append(f"<tr>{tds}{code}</tr>")
    head = "".join(f"<th>{c}</th>" for c in (*TABLE_COLUMNS, "program"))
    more = f"<p><i>… and {len(tasks) - max_rows} more</i></p>" if len(tasks) > max_rows else ""
    return f"<table class='populora-explorer'><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def task_html(task: dict[str, Any]) -> str:
    """One task in full: program, every I/O pair, message, complexity, and its solve attempts."""
    pairs = "".join(
        f"<tr><td><code>{html.escape(str(i))}</code></td><td><code>{html.escape(str(o))}</code></td></tr>"
        for i, o in zip(task["inputs"], list(task["outputs"]) + [""] * len(task["inputs"]))
    )
    if pd.isna(task["rho"]):
        attempts = "not attempted" if task["valid"] else "not attempted (invalid)"
    elif pd.isna(task["n_solved"]):  # a record without its rollout count
        attempts = f"{task['solver']} solved ρ = {task['rho']:.2f} of its attempts (how many: not recorded)"
    else:
        attempts = f"{task['solver']} solved {task['n_solved']} of {task['rollouts']} attempts (ρ = {task['rho']:.2f})"
    metrics = ", ".join(f"{c} {_text(task.get(c))}" for c in COMPLEXITY_COLUMNS if _text(task.get(c)))
    return (
        f"<h4>{html.escape(str(task['run']))} · task {task['task']} · step {task['step']} · "
        f"{html.escape(str(task['proposer']))} · {task['kind']} · {html.escape(verdict(task))} · copy "
        f"{html.escape(_text(task['copy']) or '-')}</h4>"
        f"<pre>{html.escape(str(task['program'] or '(nothing parsable)'))}</pre>"
        f"<table><tr><th>input</th><th>output</th></tr>{pairs}</table>"
        + (f"<p>message: {html.escape(str(task['message']))}</p>" if _text(task.get("message")) else "")
        + f"<p>solve attempts: {html.escape(attempts)}<br>complexity: "
        + html.escape(metrics or "not measured (the proposer wrote no program)")
        + "</p>"
    )


class Controls(widgets.VBox):
    """The explorer's controls. Its text form says what it is: that is what an exported notebook
    (nbconvert) shows in its place, instead of a ``VBox(children=...)`` repr."""

    def __repr__(self) -> str:
        return "explorer controls: live with a running kernel; the record below is their last selection"


class Explorer:
    """One run or two side by side (module docstring); ``frames`` from `load_frames`."""

    def __init__(self, frames: RunFrames, window: int = 5, max_rows: int = 8) -> None:
        if len(frames.runs) > 2 or ("seed" in frames.tasks.columns and frames.tasks["seed"].nunique() > 1):
            raise ValueError(
                f"the explorer shows one run or two side by side; these frames hold {len(frames.config)} runs: "
                f"pick them with frames.select(seed=..., run=...)"
            )
        w = widgets

        self.frames, self.window, self.max_rows = frames, window, max_rows
        self._quiet: bool = False  # set while _refilter resets the task list: one render per change
        tasks = frames.tasks
        last = int(
            max(tasks["step"].max() if len(tasks) else 0, frames.metrics["step"].max() if len(frames.metrics) else 0)
        )
        members = sorted(set(tasks["proposer"].dropna()) | set(tasks["solver"].dropna()))
        reasons = sorted(str(r) for r in tasks.loc[~tasks["valid"].astype(bool), "reason"].dropna().unique())
        copies = sorted(str(c) for c in tasks["copy"].dropna().unique())
        style = {"description_width": "70px"}
        self.steps = w.IntRangeSlider(value=(0, last), min=0, max=last, description="steps", style=style)
        self.member = w.Dropdown(options=[ALL, *members], description="member", style=style)
        self.kind = w.Dropdown(options=[ALL, *sorted(tasks["kind"].dropna().unique())], description="kind", style=style)
        self.rho = w.FloatRangeSlider(value=(0.0, 1.0), min=0, max=1, step=0.05, description="ρ band", style=style)
        self.validity = w.Dropdown(
            options=[ALL, "valid", "invalid", *(f"invalid: {r}" for r in reasons)], description="validity", style=style
        )
        self.copy = w.Dropdown(options=[ALL, *copies], description="copy", style=style)
        self.task = w.Dropdown(options=[], description="task", style=style)
        self.step = w.IntSlider(value=last, min=0, max=last, description="at step", style=style)
        lineage_members = sorted(set(frames.lineage["child"])) if "child" in frames.lineage.columns else []
        self.lineage = w.Dropdown(options=["-", *lineage_members], description="lineage", style=style)
        filters = [self.steps, self.member, self.kind, self.rho, self.validity, self.copy]
        for control in filters:
            control.observe(self._refilter, names="value")
        for control in (self.task, self.step, self.lineage):
            control.observe(lambda _: None if self._quiet else self._render(), names="value")
        rows = [filters[:3], filters[3:], [self.task, self.step, self.lineage]]
        self.controls = Controls([w.HBox(row) for row in rows])
        self._handles: dict[str, Any] = {}
        self._refilter()

    def selection(self) -> pd.DataFrame:
        """The tasks the filters select, every run."""
        choices = {name: getattr(self, name).value for name in _CHOICES}
        return filter_tasks(self.frames.tasks, steps=tuple(self.steps.value), rho=tuple(self.rho.value), **choices)

    def describe(self) -> str:
        """The filter in words (what the record says it shows)."""
        choices = {name: getattr(self, name).value for name in _CHOICES}
        parts = [f"steps {self.steps.value[0]}–{self.steps.value[1]}"]
        parts += [f"{name} {value}" for name, value in choices.items() if value != ALL]
        if tuple(self.rho.value) != (0.0, 1.0):
            parts.append(f"ρ in [{self.rho.value[0]:.2f}, {self.rho.value[1]:.2f}]")
        return ", ".join(parts)

    def head_html(self) -> str:
        sel = self.selection()
        columns = []
        for run in self.frames.runs:
            mine, total = sel[sel["run"] == run], int((self.frames.tasks["run"] == run).sum())
            count = f"<p><b>{html.escape(run)}</b>: {len(mine)} of {total} tasks match</p>"
            columns.append(count + tasks_table(mine, self.max_rows))
        # one run under the other: two tables of ten columns side by side overflow a notebook's width
        return f"<p><b>Explorer</b> · {html.escape(self.describe())} · at step {self.step.value}</p>" + "".join(columns)

    def detail_html(self) -> str:
        parts = []
        sel = self.selection()
        if self.task.value is not None and len(sel):
            run, number = self.task.value
            row = sel[(sel["run"] == run) & (sel["task"] == number)]
            if len(row):
                parts.append(task_html(row.iloc[0].to_dict()))
        if self.lineage.value != "-":
            births = ancestry(self.frames.lineage, self.lineage.value)
            table = births.to_html(index=False, escape=True) if len(births) else "<p><i>a founder</i></p>"
            parts.append(f"<h4>lineage of {html.escape(self.lineage.value)}</h4>{table}")
        return "".join(parts) or "<p><i>pick a task or a member above to read it in full</i></p>"

    def figure(self) -> Figure:
        """Per run: the selection per step (valid and invalid), then the solve-rate matrix and the ratings
        over the `window` steps up to the slider's step."""
        runs, sel, at = self.frames.runs or ["-"], self.selection(), self.step.value
        fig = Figure(figsize=(12, 3.2 * len(runs)), dpi=90)
        axes = np.atleast_2d(fig.subplots(len(runs), 3, squeeze=False))
        for (a, b, c), run in zip(axes, runs):
            mine = sel[sel["run"] == run]
            counts = mine.groupby(["step", "valid"]).size().unstack(fill_value=0) if len(mine) else pd.DataFrame()
            bottom = 0
            for valid, color, label in ((True, "C2", "valid"), (False, "0.7", "invalid")):
                if valid in counts.columns:
                    a.bar(counts.index, counts[valid], bottom=bottom, color=color, label=label)
                    bottom = bottom + counts[valid]
            a.axvline(at, color="k", lw=0.8, ls=":")
            a.set_xlim(self.steps.value[0] - 0.6, self.steps.value[1] + 0.6)
            a.set(title=f"{run}: selected tasks per step", xlabel="step", ylabel="tasks")
            for axis in (a.xaxis, a.yaxis):
                whole_ticks(axis)
            finish(a, bool(len(mine)), "no task matches the filter", fontsize=8)
            self._matrix(b, run, at)
            self._ratings(c, run, at)
        fig.tight_layout()
        return fig

    def _matrix(self, ax: Any, run: str, at: int) -> None:
        m, start = self.frames.matches, max(at - self.window + 1, 0)
        plot_solve_matrix(m[(m["run"] == run) & m["step"].between(start, at)] if len(m) else m, ax=ax)
        ax.set_title(f"ρ per pair, steps {start}–{at}")

    def _ratings(self, ax: Any, run: str, at: int) -> None:
        m = self.frames.metrics
        ax.set(title=f"TrueSkill μ ± σ at step {at}", ylabel="μ")
        rows = m[(m["run"] == run) & (m["step"] == at)] if "rating/mu" in m.columns else m.iloc[0:0]
        rows = rows[rows["rating/mu"].notna()] if len(rows) else rows
        if not len(rows):
            say_empty(ax, "no ratings at this step\n(a baseline has none)")
            ax.set(xticks=[], yticks=[])
            return
        colors = ["C0" if role == "teacher" else "C1" for role in rows["role"]]
        ax.bar(range(len(rows)), rows["rating/mu"], yerr=rows["rating/sigma"], color=colors, capsize=2)
        ax.set_xticks(range(len(rows)), rows["member"], rotation=45, ha="right", fontsize=7)

    def show(self) -> None:
        """The controls, then the record (table, figure, detail) that follows them."""
        if not in_notebook():  # a script or a test: the record as text, no controls
            print(self.describe())
            return
        display(self.controls)
        self._handles = {name: display(HTML(""), display_id=True) for name in ("head", "figure", "detail")}
        self._render()

    def _refilter(self, _: Any = None) -> None:
        """New filter values: the task list follows the selection (keeping the chosen task if it still matches)."""
        sel = self.selection()
        # a dropdown of thousands is unusable: the first 500 matches; narrow the filter for the rest
        options = [
            (f"{r} #{t} (step {s}, {p})", (r, t))
            for r, t, s, p in sel[["run", "task", "step", "proposer"]].head(500).itertuples(index=False)
        ]
        values = [v for _, v in options]
        self._quiet = True  # one render for the whole change, not one per option set
        self.task.options = options
        self.task.value = self.task.value if self.task.value in values else (values[0] if values else None)
        self._quiet = False
        self._render()

    def _render(self) -> None:
        if not self._handles:
            return
        self._handles["head"].update(HTML(self.head_html()))
        self._handles["figure"].update(png_image(self.figure()))
        self._handles["detail"].update(HTML(self.detail_html()))
