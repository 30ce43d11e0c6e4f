"""A live dashboard for a run in a notebook, that leaves a static record behind; plain text elsewhere.

    dash = Dashboard(run_dir, total_steps=config.run.steps, kinds=config.tasks.kinds)
    dash.show()
    result = run(config, run_dir, on_step=dash.update)
    dash.finish()

It shows a summary of the last step, the solve rates with the valid-proposal rate, TrueSkill μ ± σ
(the baseline: its rewards) and the last five proposed tasks with their verdicts. Each part is an
ordinary output (HTML, PNG) shown with a ``display_id`` and replaced in place after every step, not
a widget, whose state lives in the kernel: a saved, exported or reopened notebook keeps the last
state (docs/notebooks.md). Steps are counted from 0; "k/N" counts the steps done.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from IPython import get_ipython
from IPython.display import HTML, display
from matplotlib.figure import Figure

from populora_nb.analysis import plots
from populora_nb.analysis.figures import png_image
from populora_nb.analysis.frames import read_stream, rows_of
from populora_nb.step_records import step_summary


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (the dashboard then draws, else it prints lines)."""
    return type(get_ipython()).__name__ == "ZMQInteractiveShell"  # None outside IPython: "NoneType"


def verdict(row: dict) -> str:
    """A task's verdict, worded the same in the dashboard, the explorer and the notebooks; a tasks.jsonl
    row's with its solve rate (a frames row has none: it shows ρ in its own column)."""
    if not row["valid"]:
        return f"rejected: {row['reason']}"
    if "solve_rate" not in row:
        return "valid"
    return "valid, not attempted" if row["solve_rate"] is None else f"valid, solve rate {row['solve_rate']:.2f}"


def tasks_html(rows: Sequence[dict]) -> str:
    """An HTML table of task records: step, proposer, kind, program (first 300 chars) and verdict."""
    cells = []
    for r in rows:
        program = html.escape((r["program"] or "(nothing parsable)")[:300])
        cells.append(
            f"<tr><td>{r['step']}</td><td>{html.escape(str(r['proposer']))}</td><td>{r['kind']}</td>"
            f"<td style='text-align:left'><pre style='margin:0'>{program}</pre></td>"
            f"<td>{html.escape(verdict(r))}</td></tr>"
        )
    if not cells:
        return "<p><i>no task proposed yet</i></p>"
    head = "<tr><th>step</th><th>by</th><th>kind</th><th>program</th><th>verdict</th></tr>"
    return f"<table>{head}{''.join(cells)}</table>"


class Dashboard:
    """A run's live view (module docstring), read from its records; in a terminal, one ``step_summary``
    line per step."""

    def __init__(self, run_dir: str | Path, total_steps: int, kinds: Sequence[str] = ("code_o", "code_i", "code_f")):
        self.path = Path(run_dir)
        self.total, self.kinds = total_steps, tuple(kinds)
        self.notebook = in_notebook()
        self._handles: dict = {}
        self._updated = False  # did a step finish while we watched (else: saved records only)

    @property
    def history(self) -> pd.DataFrame:
        """The metrics of the run so far (the records are the truth: a resume cuts them back)."""
        return read_stream(self.path, "metrics")

    def status(self) -> str:
        """Where the run stands, in words: steps done of the total, and what is running."""
        history = self.history
        done = history["step"].nunique() if len(history) else 0  # steps with logged metrics
        if done >= self.total:
            return f"run complete ({done}/{self.total})" + ("" if self._updated else ", showing saved records")
        if done:
            return f"{done}/{self.total} steps done; step {done} running (the figure updates after each step)"
        return (
            f"0/{self.total} steps done: loading the model, then step 0 proposes, validates, solves and "
            f"trains; the figure appears when it ends"
        )

    def figure(self) -> Figure:
        """Solve rate per kind with the valid rate, and TrueSkill μ ± σ (population) or the rewards
        (baseline: it has no ratings). The step axis spans the whole run."""
        fig = Figure(figsize=(10, 3.4), dpi=96)
        a, b = fig.subplots(1, 2)
        plots.plot_solve_rates({"run": self.path}, kinds=self.kinds, valid_rate=True, ax=a)
        if self.history.get("rating/mu", pd.Series()).notna().any():
            plots.plot_ratings(self.path, ax=b)
        else:
            plots.plot_rewards(self.path, ax=b)
        for ax in (a, b):
            ax.set_xlim(-0.4, max(self.total - 1, 1) + 0.6)
        fig.tight_layout()
        return fig

    def show(self) -> None:
        """Display the dashboard; a finished run's saved records appear at once."""
        if not self.notebook:
            print(self.status(), flush=True)
            return
        self._handles = {name: display(HTML(""), display_id=True) for name in ("head", "figure", "tasks")}
        self._render()

    def update(self, step: int, rows: list[dict]) -> None:
        """`run(..., on_step=dash.update)` calls this after every step."""
        self._updated = True
        if not self.notebook:
            print(step_summary(step, rows, self.kinds, self.total), flush=True)
            return
        self._render()

    def finish(self) -> None:
        """After `run(...)`: the final figure, table and summary stay as ordinary outputs."""
        if self.notebook and self._handles:
            self._render()
        else:
            self.show()  # a terminal: the status line; a notebook not yet shown: the whole view

    def _render(self) -> None:
        history = self.history
        head = f"<b>{html.escape(self.status())}</b>"
        if len(history):
            last = int(history["step"].max())
            line = step_summary(last, rows_of(history[history["step"] == last]), self.kinds, self.total)
            head += f"<br><code>{html.escape(line)}</code>"
        self._handles["head"].update(HTML(head))
        if len(history):
            self._handles["figure"].update(png_image(self.figure()))
        self._handles["tasks"].update(HTML(tasks_html(rows_of(read_stream(self.path, "tasks").tail(5)))))
