"""A live dashboard for a run in a notebook (ipywidgets), with a plain-text fallback elsewhere.

    dash = Dashboard(run_dir, total_steps=config.run.steps)
    dash.show()
    run(config, run_dir, on_step=dash.update)

It shows step progress, solve rate per kind, TrueSkill μ ± σ of teachers and students, valid rate,
and the last few proposed tasks with their verdicts.
"""

from __future__ import annotations

import html
import sys
from pathlib import Path
from typing import Sequence, TextIO

import matplotlib.pyplot as plt

from populora_nb.records import RunDir


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def _mean(rows: Sequence[dict], key: str, role: str | None = None) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None and (role is None or r.get("role") == role)]
    return sum(vals) / len(vals) if vals else None


def step_summary(step: int, rows: Sequence[dict], kinds: Sequence[str]) -> str:
    """The one-line text a step leaves behind, in a notebook or a terminal."""
    parts = [f"step {step:4d}"]
    for key, name in (("teacher/valid_rate", "valid"), ("student/solve_rate", "solve")):
        v = _mean(rows, key)
        parts.append(f"{name} {v:.2f}" if v is not None else f"{name} -")
    for kind in kinds:
        v = _mean(rows, f"solve_rate/{kind}")
        if v is not None:
            parts.append(f"{kind} {v:.2f}")
    for role in ("teacher", "student"):
        mu = _mean(rows, "rating/mu", role)
        if mu is not None:
            parts.append(f"{role[0].upper()}μ {mu:.1f}")
    return "  ".join(parts)


class Dashboard:
    def __init__(self, run_dir: str | Path, total_steps: int, kinds: Sequence[str] = ("code_o", "code_i", "code_f"),
                 n_tasks: int = 5, stream: TextIO | None = None):
        self.run = RunDir(Path(run_dir))
        self.total, self.kinds, self.n_tasks = total_steps, tuple(kinds), n_tasks
        self.history: list[dict] = []
        self.stream = stream or sys.stdout
        self.widget = None
        if in_notebook():
            import ipywidgets as w

            self.bar = w.IntProgress(value=0, min=0, max=total_steps, description="step")
            self.text = w.HTML()
            self.plot = w.Output()
            self.tasks = w.HTML()
            self.widget = w.VBox([self.bar, self.text, self.plot, self.tasks])

    def show(self) -> None:
        if self.widget is not None:
            from IPython.display import display

            display(self.widget)

    def update(self, step: int, rows: list[dict]) -> None:
        """`run(..., on_step=dash.update)` calls this after every step."""
        self.history.extend(rows)
        line = step_summary(step, rows, self.kinds)
        if self.widget is None:
            print(line, file=self.stream, flush=True)
            return
        self.bar.value = step + 1
        self.text.value = f"<pre>{html.escape(line)}</pre>"
        self.tasks.value = self._tasks_html()
        self.plot.clear_output(wait=True)
        with self.plot:
            fig = self.figure()
            plt.show()
            plt.close(fig)

    def figure(self):
        from populora_nb.plots import step_mean

        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3))
        for kind in self.kinds:
            s, v = step_mean(self.history, f"solve_rate/{kind}")
            if len(s):
                a.plot(s, v, marker="o", ms=3, label=kind)
        s, v = step_mean(self.history, "teacher/valid_rate")
        if len(s):
            a.plot(s, v, "k--", label="valid rate")
        a.set(ylim=(-0.03, 1.03), xlabel="step", title="solve rate per kind")
        a.legend(fontsize=7)
        for role, color in (("teacher", "tab:red"), ("student", "tab:blue")):
            members = dict.fromkeys(r["member"] for r in self.history if r.get("role") == role and "rating/mu" in r)
            for m in members:
                rs = [r for r in self.history if r["member"] == m]
                steps = [r["step"] for r in rs]
                mu = [r["rating/mu"] for r in rs]
                sd = [r["rating/sigma"] for r in rs]
                b.plot(steps, mu, color=color, lw=1)
                b.fill_between(steps, [x - y for x, y in zip(mu, sd)], [x + y for x, y in zip(mu, sd)], color=color, alpha=0.08)
        b.set(xlabel="step", title="TrueSkill μ ± σ (red: teachers, blue: students)")
        fig.tight_layout()
        return fig

    def _tasks_html(self) -> str:
        rows = self.run.read("tasks")[-self.n_tasks:]
        cells = []
        for r in rows:
            verdict = f"valid, ρ={r['solve_rate']:.2f}" if r["valid"] and r["solve_rate"] is not None else (
                "valid" if r["valid"] else f"invalid: {r['reason']}")
            program = html.escape((r["program"] or "")[:300])
            cells.append(f"<tr><td>{r['step']}</td><td>{r['proposer']}</td><td>{r['kind']}</td>"
                         f"<td><pre style='margin:0'>{program}</pre></td><td>{html.escape(verdict)}</td></tr>")
        return ("<table><tr><th>step</th><th>by</th><th>kind</th><th>program</th><th>verdict</th></tr>"
                + "".join(cells) + "</table>")
