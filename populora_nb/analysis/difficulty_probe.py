"""The fixed difficulty probe's records (``probe.jsonl``, `populora_nb.probe`) as series, a figure
and the report's table.

Probe ρ is one frozen solver's solve rate on the proposers' answers to the same fixed prompts: a
difficulty on one scale for both runs and every step, which a weaker student cannot lower. The
paper's arms race predicts the teachers' probe ρ to fall while the baseline's rises or stays (AZR's
collapse to easy tasks). Per event the teachers' tasks are pooled (evolution renames them); the 95%
t-intervals (first to last: Welch) are descriptive within one run. docs/methodology.md, "The
difficulty probe".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from populora_nb.analysis.figures import finish, line_band, whole_ticks
from populora_nb.analysis.frames import per_step, read_stream
from populora_nb.analysis.seed_stats import fmt_interval, t_interval, welch_interval

FLOOR_SHARE = 0.8
"""A run whose valid probe tasks sit at ρ = 0 more often than this is floor-bound (`studies.probe_floor`)."""


@dataclass(frozen=True)
class ProbeEvent:
    """One probe event of one run, its proposers pooled."""

    step: int
    asked: int
    valid: int
    rhos: tuple[float, ...]
    """The frozen solver's solve rate of each valid probe task."""

    @property
    def valid_rate(self) -> float:
        return self.valid / self.asked if self.asked else math.nan

    @property
    def rho(self) -> tuple[float, float, float]:
        """(mean, low, high) of the valid tasks' probe ρ; NaN bounds under 2 tasks, NaN mean under 1."""
        return t_interval(self.rhos) if self.rhos else (math.nan, math.nan, math.nan)

    @property
    def band_rate(self) -> float:
        """Share of valid probe tasks with 0 < ρ < 1: tasks the frozen solver sometimes solves."""
        return sum(0 < r < 1 for r in self.rhos) / len(self.rhos) if self.rhos else math.nan


def probe_events(run_dir: str | Path) -> list[ProbeEvent]:
    """The run's probe events in step order (empty when the probe never ran)."""
    probe = read_stream(run_dir, "probe")
    if probe.empty:
        return []
    valid = probe["valid"].astype(bool)
    played = probe["solve_rate"].where(valid).dropna().astype(float)  # valid and attempted (liveness.played_tasks)
    return [
        ProbeEvent(int(step), len(rows), int(valid[rows.index].sum()), tuple(played[played.index.isin(rows.index)]))
        for step, rows in probe.groupby("step")
    ]


def probe_cost(run_dir: str | Path) -> float | None:
    """The probe's seconds over the training steps' seconds, whole run: its cost per step as a
    fraction (the design aims at <= 0.10). None when the probe never ran."""
    metrics = read_stream(run_dir, "metrics")
    probe, steps = per_step(metrics, "time/probe_s", how="first"), per_step(metrics, "time/step_s", how="first")
    if probe.empty or steps.empty:
        return None
    return sum(probe) / sum(steps)


def plot_probe(runs: Mapping[str, str | Path]) -> Figure:
    """Left: each run's probe ρ per event with its 95% interval (lower = harder for the fixed
    solver). Middle: the valid rate of the answers to the fixed prompts. Right: the share of valid
    probe tasks in 0 < ρ < 1 (solid) and at ρ = 0 (dashed), with the floor-bound line: a probe whose
    tasks sit at ρ = 0 can show tasks getting easier, not harder (`studies.probe_floor`)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    drawn = False
    for name, path in runs.items():
        events = probe_events(path)
        if not events:
            continue
        drawn = True
        steps = [e.step for e in events]
        mean, low, high = zip(*(e.rho for e in events))
        colour = line_band(axes[0], steps, mean, low, high, marker="o", ms=4, label=name, alpha=0.15).get_color()
        axes[1].plot(steps, [e.valid_rate for e in events], marker="o", ms=4, label=name, color=colour)
        band = [e.band_rate for e in events]
        zero = [sum(r == 0 for r in e.rhos) / len(e.rhos) if e.rhos else math.nan for e in events]
        axes[2].plot(steps, band, marker="o", ms=4, label=f"{name}: 0 < ρ < 1", color=colour)
        axes[2].plot(steps, zero, marker="x", ms=4, ls="--", label=f"{name}: ρ = 0", color=colour)
    axes[0].set(xlabel="step", ylabel="probe ρ (frozen solver)", title="Difficulty probe: fixed prompts, one solver")
    axes[1].set(xlabel="step", ylabel="valid rate", title="Valid answers to the probe's prompts")
    floor = f"floor-bound above {FLOOR_SHARE:.0%} at ρ = 0"
    axes[2].axhline(FLOOR_SHARE, color="grey", lw=0.8, ls=":", label=floor)
    axes[2].set(xlabel="step", ylabel="share of valid probe tasks", title="Can the probe move both ways?")
    for ax in axes:
        whole_ticks(ax.xaxis)
        ax.set_ylim(-0.03, 1.03)
        finish(ax, drawn, "no probe event recorded (probe.every = 0)", fontsize=8)
    fig.tight_layout()
    return fig


def probe_table(runs: Mapping[str, str | Path]) -> list[list[str]]:
    """The report's probe table: per run, the events, valid answers, probe ρ at the first and last
    event with intervals, their difference (Welch, 95%) and the probe's cost per step."""
    rows = [["run", "events", "valid / asked", "probe ρ first", "probe ρ last", "last − first", "cost per step"]]
    for name, path in runs.items():
        events = probe_events(path)
        if not events:
            continue
        first, last = events[0], events[-1]
        cost = probe_cost(path)
        diff = welch_interval(first.rhos, last.rhos) if len(events) > 1 else (math.nan, math.nan, math.nan)
        counts = [
            f"{len(events)} (steps {first.step}–{last.step})",
            f"{sum(e.valid for e in events)}/{sum(e.asked for e in events)}",
        ]
        rho = [_cell(first.rho), _cell(last.rho), _cell(diff, signed=True)]
        rows.append([name, *counts, *rho, "n/a" if cost is None else f"{100 * cost:.1f}%"])
    return rows


def _cell(triple: tuple[float, float, float], signed: bool = False) -> str:
    mean, low, high = triple
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:+.2f}" if signed else f"{mean:.2f}"
    return text + (f" {fmt_interval(low, high, signed=signed)}" if not math.isnan(low) else "")
