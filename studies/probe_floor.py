"""Reading the difficulty probe as recorded: is it floor-bound, and what is left of a difference at
equal task counts once the step-0 value is taken out?

* **Floor-bound.** The probe's frozen solver reads difficulty only where it sometimes solves a task.
  When more than ``FLOOR_SHARE`` of a run's valid probe tasks sit at ρ = 0, the probe cannot show
  tasks getting harder, and a mean over it is a count of the few tasks above 0: the run is flagged.
* **Too few tasks.** Below ``MIN_PROBE_TASKS`` valid probe tasks a run's probe ρ is a mean of a handful
  of tasks, most of them at 0.
* **A probe that says nothing.** A run floor-bound or below ``MIN_PROBE_TASKS`` (`probe_silence`) gives
  the seed protocol's probe ρ series no value: no verdict, no minimum detectable difference, and no
  place in the Holm families (`protocol_series.seed_values`); its seed's row here shows no difference.
* **Equal task counts.** A population answers the probe with every teacher, the baseline with one
  agent: a mean over a few tasks of a mostly-zero probe is 0 most of the time. At each event both
  runs are read at the smaller run's task count, drawing that many of the larger run's valid tasks
  without replacement (seeded, ``n_draws`` times).
* **Step 0.** At step 0 both runs' proposers are the same adapter (the shared warm-up), so a
  difference there is sampling, not training. The comparison is the difference of the two runs'
  changes from step 0 to the last event, (pop_last − pop_0) − (base_last − base_0), with the 95%
  range of that difference over the draws: how much of it is which few tasks were drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from populora_nb.analysis.clustered import named_rng
from populora_nb.analysis.difficulty_probe import FLOOR_SHARE, ProbeEvent, probe_events
from populora_nb.analysis.runs import RUNS
from populora_nb.analysis.seed_stats import md_table

MIN_PROBE_TASKS = 25
"""Fewest valid probe tasks over a run's events for its probe ρ to be read. At the floor-bound edge
(``FLOOR_SHARE``: 80% at ρ = 0) a run's mean probe ρ rests on the 1 task in 5 above 0: 25 tasks
leave 5 of them, the fewest a mean is read over elsewhere in the package (`windows.MIN_PROGRAMS`
new programs per window). The committed cpu protocol's baselines hold 15, 9 and 15."""


def floor_share(events: Sequence[ProbeEvent]) -> tuple[int, int]:
    """(valid probe tasks at ρ = 0, valid probe tasks with ρ measured) over a run's events."""
    rhos = [r for e in events for r in e.rhos]
    return sum(r == 0 for r in rhos), len(rhos)


def floor_bound(events: Sequence[ProbeEvent], threshold: float = FLOOR_SHARE) -> bool:
    """More than ``threshold`` of the valid probe tasks at ρ = 0 (no task: not flagged, nothing to read)."""
    zero, n = floor_share(events)
    return bool(n) and zero / n > threshold


def probe_silence(events: Sequence[ProbeEvent]) -> str | None:
    """Why a run's probe says nothing (floor-bound, fewer than ``MIN_PROBE_TASKS`` valid tasks, or
    both, in words), or None when its probe ρ can be read."""
    zero, n = floor_share(events)
    why = [f"{n} valid probe tasks, under {MIN_PROBE_TASKS}"] if n < MIN_PROBE_TASKS else []
    why += [f"floor-bound: {zero}/{n} at ρ = 0"] if floor_bound(events) else []
    return "; ".join(why) or None


@dataclass(frozen=True)
class EqualCount:
    """Both runs at the first and last shared probe event, read at equal task counts."""

    first: int
    last: int
    counts: tuple[int, int]
    """Tasks per run at (first, last): the smaller run's valid count at each."""
    baseline: tuple[float, float]
    population: tuple[float, float]
    """Mean probe ρ at (first, last), averaged over the draws."""
    adjusted: float
    """(pop_last − pop_first) − (base_last − base_first), averaged over the draws."""
    low: float
    high: float
    """95% range of the adjusted difference over the draws."""


def equal_count_difference(
    baseline: Sequence[ProbeEvent], population: Sequence[ProbeEvent], *, n_draws: int = 2000, seed: int = 0
) -> EqualCount | None:
    """The step-0-adjusted population − baseline probe difference at equal task counts (module
    docstring); None without two shared events each run answered validly."""
    b = {e.step: np.asarray(e.rhos) for e in baseline if e.rhos}
    p = {e.step: np.asarray(e.rhos) for e in population if e.rhos}
    shared = sorted(b.keys() & p.keys())
    if len(shared) < 2:
        return None
    first, last = shared[0], shared[-1]
    rng = named_rng(seed, "probe-equal-count")
    means, counts = {}, {step: min(len(b[step]), len(p[step])) for step in (first, last)}
    for name, run in (("baseline", b), ("population", p)):
        for step in (first, last):
            draws = np.stack([rng.choice(run[step], size=counts[step], replace=False) for _ in range(n_draws)])
            means[name, step] = draws.mean(axis=1)  # (n_draws,)
    adjusted = (means["population", last] - means["population", first]) - (
        means["baseline", last] - means["baseline", first]
    )
    low, high = np.percentile(adjusted, [2.5, 97.5])
    return EqualCount(
        first,
        last,
        (counts[first], counts[last]),
        (float(means["baseline", first].mean()), float(means["baseline", last].mean())),
        (float(means["population", first].mean()), float(means["population", last].mean())),
        float(adjusted.mean()),
        float(low),
        float(high),
    )


def probe_floor_lines(experiments: Sequence[str | Path], *, seed: int = 0) -> tuple[list[str], list[dict[str, Any]]]:
    """The report's section on the probe as recorded: per seed, each run's share of valid probe tasks
    at ρ = 0 (floor-bound above ``FLOOR_SHARE``), its tasks per event, and the step-0-adjusted
    difference at equal counts; markdown lines and the records behind them."""
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    flagged: list[str] = []
    silent: list[str] = []
    pooled = {run: [0, 0] for run in RUNS}
    start = {run: [0, 0, 0] for run in RUNS}  # step 0: in 0 < ρ < 1, at ρ = 0, valid
    for exp in map(Path, experiments):
        events = {run: probe_events(exp / run) if (exp / run).is_dir() else [] for run in RUNS}
        if not any(events.values()):
            continue
        cells: list[str] = [exp.name]
        record: dict[str, Any] = {"seed": exp.name}
        for run, evs in events.items():
            zero, n = floor_share(evs)
            pooled[run] = [pooled[run][0] + zero, pooled[run][1] + n]
            bound = floor_bound(evs)
            flagged += [f"{exp.name} {run}"] if bound else []
            per_event = n / len(evs) if evs else math.nan
            share = f"{zero / n:.0%} ({zero}/{n})" if n else "n/a"
            cells.append(f"{share}{' floor-bound' if bound else ''}, {per_event:.1f} per event")
            why = probe_silence(evs)
            silent += [f"{exp.name} {run} ({why})"] if why else []
            record[run] = {"at_zero": zero, "valid": n, "events": len(evs), "floor_bound": bound, "says_nothing": why}
            record[run]["step0"] = band_at_step0(evs)
            start[run] = [a + b for a, b in zip(start[run], record[run]["step0"])]
        cells.append(" / ".join(_band_cell(record[run]["step0"]) for run in RUNS))
        eq = equal_count_difference(events["baseline"], events["population"], seed=seed)
        mute = [run for run in events if record[run]["says_nothing"]]
        if eq is None:
            cells += ["n/a"] * 3
        else:
            cells += [
                f"{eq.baseline[0]:.3f} / {eq.population[0]:.3f} (n = {eq.counts[0]})",
                f"{eq.baseline[1]:.3f} / {eq.population[1]:.3f} (n = {eq.counts[1]})",
                ("none: both probes say nothing" if len(mute) == 2 else f"none: the {mute[0]} probe says nothing")
                if mute
                else f"{eq.adjusted:+.3f} [{eq.low:+.3f}, {eq.high:+.3f}]",
            ]
            record["equal_count"] = None if mute else eq.__dict__
        rows.append(cells)
        records.append(record)
    if not rows:
        return [], []
    head = "seed | baseline: at ρ = 0, tasks | population: at ρ = 0, tasks | step 0: 0 < ρ < 1, b / p"
    head += " | first event ρ, b / p | last event ρ, b / p"
    head += " | (p_last − p_first) − (b_last − b_first) [95% of draws]"
    verdict = (
        f"Floor-bound (more than {FLOOR_SHARE:.0%} of valid probe tasks at ρ = 0): {', '.join(flagged)}. A floor-bound "
        "probe cannot show tasks getting harder; its means count the few tasks above 0, not difficulty."
        if flagged
        else f"No run is floor-bound (at most {FLOOR_SHARE:.0%} of valid probe tasks at ρ = 0)."
    )
    verdict += (
        f" A run's probe says nothing when it is floor-bound or holds fewer than {MIN_PROBE_TASKS} valid probe tasks "
        f"(at the floor-bound edge its mean rests on the 1 task in 5 above 0: {MIN_PROBE_TASKS} tasks leave 5): "
        f"{', '.join(silent)}. Those runs give the probe ρ series no value in the tables above, so a series left "
        "with fewer than 2 seeds gets no verdict, no minimum detectable difference and no place in the Holm "
        "families, and their seeds show no difference here."
        if silent
        else f" Every run holds at least {MIN_PROBE_TASKS} valid probe tasks and none is floor-bound: the probe ρ "
        "series is read in full."
    )
    return [
        "## The difficulty probe as recorded",
        "",
        "Per seed and run: the share of valid probe tasks the frozen solver never solved (ρ = 0) and the valid "
        "tasks per probe event; the share of step 0's valid probe tasks in 0 < ρ < 1 (the shared warm-up "
        "adapter, before any RL: where the probe starts); then both runs at the first and last probe event "
        "read at equal task counts (the smaller run's count per event, the larger run's tasks drawn without "
        "replacement, 2000 seeded draws), "
        "baseline / population, and the difference of their changes from the first event (step 0: the same "
        "adapter in both runs) to the last, with the 95% range over the draws (`studies.probe_floor`).",
        "",
        *md_table([head.split(" | "), *rows]),
        "",
        "Over the seeds, valid probe tasks at ρ = 0: "
        + ", ".join(f"{run} {z / n:.0%} ({z}/{n})" for run, (z, n) in pooled.items() if n)
        + ". "
        + _start_sentence(start)
        + " "
        + verdict,
    ], records


def band_at_step0(events: Sequence[ProbeEvent]) -> tuple[int, int, int]:
    """(valid probe tasks in 0 < ρ < 1, at ρ = 0, valid) at step 0, where both runs answer with the shared
    warm-up adapter: whether the probe starts with room to show tasks getting harder (zeros without an event)."""
    rhos = next((e.rhos for e in events if e.step == 0), ())
    return sum(0 < r < 1 for r in rhos), sum(r == 0 for r in rhos), len(rhos)


def _band_cell(counts: tuple[int, int, int]) -> str:
    band, _, n = counts
    return f"{band}/{n}" if n else "n/a"


def _start_sentence(start: dict[str, list[int]]) -> str:
    """Step 0 pooled over the seeds, per run: the band share and whether it is floor-bound there."""
    parts = []
    for run, (band, zero, n) in start.items():
        if n:
            bound = "floor-bound" if zero / n > FLOOR_SHARE else "not floor-bound"
            parts.append(f"{run} {band}/{n} in 0 < ρ < 1 and {zero}/{n} at ρ = 0 ({bound} there)")
    return f"At step 0, over the seeds: {'; '.join(parts)}." if parts else "No probe event at step 0."
