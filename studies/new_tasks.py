"""What a run newly wrote, per step: the measure that tells a setting which makes a small proposer
write new tasks from one that only hides its copies.

A small proposer is paid for copying: a copy of a shown reference program (`populora_nb.copies`) is
valid far more often than a new program, and an invalid task costs −1. A setting that rejects
repeats or copies makes their rate 0 by construction, so the copy or repeat
rate cannot compare it with the control. What can is the count of **new valid tasks per step**:
valid proposals whose copy class is ``"new"`` (neither a shown reference's program nor an earlier
one) and that are not repeats (the same program and input as a task met before). Beside it, per run:

* the **valid rate before novelty rules** (valid proposals, and those a ``reject_copies`` /
  ``reject_repeats`` rule made invalid after classing them, over proposals): what the verifier passed,
  so a rejection setting does not lower it by construction (it did in the first new-task pilot);
* the **band share over new tasks**: new valid tasks the matched solver attempted with 0 < ρ < 1,
  the tasks whose rollouts carry a difficulty signal (AZR's learnability reward is 0 outside it);
* **teacher games won** (population): per step, the rating games teachers won on played non-repeat
  tasks (`analysis.liveness`: one game per failed rollout on a contested task), and their share;
* the **cost**: seconds per step.

Intervals respect clustering by step (a step's tasks share a proposer and its references): a
per-step mean, a share (ratio of per-step sums, over the steps that hold an item) and a ratio of two
runs' means each have a 95% percentile bootstrap that resamples whole steps (``scipy.stats.bootstrap``,
seeded). One seed and a few steps give wide intervals; they say how far a pilot can be read.

**The decision rule** (``better``): a candidate is better than the control if, in both runs, it
writes at least ``NEW_RATIO`` times the control's new valid tasks per step at no less than
``VALID_RATIO`` times the control's valid rate. It is applied to the point estimates; the table
prints the ratio's interval beside it, so a rule met only inside the noise reads as such.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from populora_nb.analysis.frames import load_frames, per_step, rows_of
from populora_nb.analysis.liveness import liveness
from populora_nb.analysis.runs import RUNS
from populora_nb.records import RunDir

NEW_RATIO = 2.0
"""Least multiple of the control's new valid tasks per step for a better candidate."""
VALID_RATIO = 0.5
"""Least fraction of the control's valid rate for a better candidate."""
N_RESAMPLES = 4000


@dataclass(frozen=True)
class RunSteps:
    """One run's per-step counts (arrays over its steps, in step order)."""

    steps: np.ndarray
    proposals: np.ndarray
    valid: np.ndarray
    new_valid: np.ndarray
    new_played: np.ndarray
    """New valid tasks the matched solver attempted (ρ recorded)."""
    new_in_band: np.ndarray
    games: np.ndarray | None
    """Rating games on played non-repeat tasks (population); None for the baseline."""
    games_won: np.ndarray | None
    seconds: np.ndarray
    """Seconds per step (NaN where not recorded)."""


def run_steps(run_dir: str | Path) -> RunSteps:
    """Count a run's records per step (module docstring)."""
    rd = RunDir(Path(run_dir))
    frames = load_frames(rd.path)
    # each task's program class re-read with today's normalisation (`copies.classify_rows`): "new"
    tasks = rows_of(frames.tasks)
    seconds = per_step(frames.metrics, "time/step_s", how="first")
    steps = sorted({int(t["step"]) for t in tasks} | set(seconds.index))
    index = {s: i for i, s in enumerate(steps)}
    counts = {k: np.zeros(len(steps)) for k in ("proposals", "valid", "new_valid", "new_played", "new_in_band")}
    for t in tasks:
        i = index[int(t["step"])]
        counts["proposals"][i] += 1
        # valid before any novelty rule: a task rejected as a copy or repeat was classed, so it was valid
        counts["valid"][i] += bool(t["valid"]) or t["copy"] is not None
        if t["valid"] and t["copy"] == "new":
            counts["new_valid"][i] += 1
            if t["rho"] is not None:
                counts["new_played"][i] += 1
                counts["new_in_band"][i] += 0 < t["rho"] < 1
    games = won = None
    if rd.has("matches"):
        games, won = np.zeros(len(steps)), np.zeros(len(steps))
        for p in liveness(rd.path).non_repeats:
            games[index[p.step]] += p.rollouts
            won[index[p.step]] += p.teacher_won
    return RunSteps(
        np.array(steps),
        **counts,
        games=games,
        games_won=won,
        seconds=np.array([seconds.get(s, math.nan) for s in steps]),
    )


def mean_interval(values: np.ndarray, name: str = "") -> tuple[float, float, float]:
    """(mean, low, high): the per-step mean and its 95% percentile bootstrap interval over steps (NaN
    bounds under 2 steps; a zero-width interval when every step gave the same value)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) > 1 and np.all(x == x[0]):
        return mean, mean, mean
    low, high = _bootstrap((x,), lambda a, axis=-1: a.mean(axis=axis), paired=False, name=name)
    return mean, low, high


def _bootstrap(
    data: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], paired: bool, name: str
) -> tuple[float, float]:
    """A 95% percentile bootstrap interval resampling whole steps, seeded by ``name``."""
    if any(len(d) < 2 for d in data):
        return math.nan, math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            data,
            statistic,
            paired=paired,
            vectorized=True,
            n_resamples=N_RESAMPLES,
            method="percentile",
            random_state=np.random.default_rng(zlib.crc32(name.encode())),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def step_share(hits: np.ndarray, totals: np.ndarray, name: str = "") -> tuple[float, float, float]:
    """(share, low, high): sum(hits) / sum(totals) with its step-resampling bootstrap interval."""
    if not totals.sum():
        return math.nan, math.nan, math.nan
    keep = totals > 0  # a step with no item adds nothing to either sum: it is not a cluster of this share
    hits, totals = hits[keep], totals[keep]
    low, high = _bootstrap(
        (hits, totals), lambda h, t, axis=-1: h.sum(axis=axis) / t.sum(axis=axis), paired=True, name=name
    )
    return float(hits.sum() / totals.sum()), low, high


def mean_ratio(x: np.ndarray, y: np.ndarray, name: str = "") -> tuple[float, float, float]:
    """(ratio, low, high): mean(x) / mean(y) of two runs' per-step values (inf when y's mean is 0),
    each run's steps resampled on their own (a resample with a zero denominator reads as inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.divide(x.mean(), y.mean()))
    low, high = _bootstrap((x, y), _ratio_of_means, paired=False, name=name)
    return ratio, low, high


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(a) / mean(b) along ``axis``; a resample whose denominator is 0 reads as inf (0/0 too: the
    ratio is unbounded there, so the interval's upper end says so rather than dropping the resample)."""
    num, den = a.mean(axis=axis), b.mean(axis=axis)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)


def better(candidate: RunSteps, control: RunSteps) -> bool:
    """The decision rule for one run (module docstring), on the point estimates."""
    new_c, new_0 = candidate.new_valid.mean(), control.new_valid.mean()
    rate_c = candidate.valid.sum() / candidate.proposals.sum() if candidate.proposals.sum() else 0.0
    rate_0 = control.valid.sum() / control.proposals.sum() if control.proposals.sum() else 0.0
    return bool(new_c >= NEW_RATIO * new_0 and new_c > 0 and rate_c >= VALID_RATIO * rate_0)


def interval_text(triple: tuple[float, float, float], digits: str = ".2f") -> str:
    mean, low, high = triple
    if math.isnan(mean):
        return "n/a"
    return f"{mean:{digits}}" + ("" if math.isnan(low) else f" [{low:{digits}}, {high:{digits}}]")


def new_task_table(experiments: Mapping[str, str | Path]) -> tuple[list[str], dict]:
    """The pilot's new-task table (markdown lines) and its numbers: per candidate (the first is the
    control) and run, the measures of the module docstring with intervals, the ratio to the control,
    and the decision rule's verdict."""
    names = list(experiments)
    if not names:
        return [], {}
    counts = {
        n: {r: run_steps(Path(p) / r) for r in RUNS if RunDir(Path(p) / r).has("tasks")} for n, p in experiments.items()
    }
    control = counts[names[0]]
    lines = [
        "| candidate | run | steps | new valid tasks / step | × control | valid rate before novelty rules "
        "| band share over new tasks "
        "| teacher games won / step; share of games | s/step |",
        "|---|---|---:|---|---|---|---|---|---:|",
    ]
    record: dict = {"control": names[0], "rule": {"new_ratio": NEW_RATIO, "valid_ratio": VALID_RATIO}, "rows": []}
    verdicts = []
    for name in names:
        for run in RUNS:
            if run not in counts[name] or run not in control:
                lines.append(f"| {name if run == 'baseline' else ''} | {run} | not run | | | | | | |")
                continue
            c = counts[name][run]
            new = mean_interval(c.new_valid, f"{name}/{run}/new")
            ratio = mean_ratio(c.new_valid, control[run].new_valid, f"{name}/{run}/ratio")
            valid = step_share(c.valid, c.proposals, f"{name}/{run}/valid")
            band = step_share(c.new_in_band, c.new_played, f"{name}/{run}/band")
            won = None
            if c.games is not None and c.games_won is not None:
                won = (
                    mean_interval(c.games_won, f"{name}/{run}/won"),
                    step_share(c.games_won, c.games, f"{name}/{run}/games"),
                )
            cost = mean_interval(c.seconds, f"{name}/{run}/cost")
            won_cell = "—" if won is None else f"{interval_text(won[0], '.1f')}; {interval_text(won[1], '.0%')}"
            band_cell = f"{interval_text(band, '.0%')} ({int(c.new_in_band.sum())}/{int(c.new_played.sum())})"
            lines.append(
                f"| {name if run == 'baseline' else ''} | {run} | {len(c.steps)} | {interval_text(new)} "
                f"({int(c.new_valid.sum())}) | {'control' if name == names[0] else interval_text(ratio)} | "
                f"{interval_text(valid, '.0%')} ({int(c.valid.sum())}/{int(c.proposals.sum())}) | {band_cell} | "
                f"{won_cell} | {interval_text(cost, '.1f')} |"
            )
            row = {"candidate": name, "run": run, "steps": len(c.steps), "new_valid_per_step": new}
            row |= {"ratio_to_control": ratio, "valid_rate": valid, "band_share_new": band}
            row |= dict(zip(("teacher_games_won_per_step", "teacher_games_share"), won or (None, None)))
            row |= {"seconds_per_step": cost, "new_valid": int(c.new_valid.sum()), "valid": int(c.valid.sum())}
            record["rows"].append(row | {"proposals": int(c.proposals.sum())})
        if name != names[0]:
            ok = {
                run: better(counts[name][run], control[run]) for run in RUNS if run in counts[name] and run in control
            }
            said = "meets the rule in both runs" if all(ok.values()) else "does not meet the rule"
            if len(ok) < len(RUNS):
                said = f"cannot be judged: the rule needs both runs, {', '.join(ok) or 'none'} made"
            per_run = ", ".join(f"{run}: {'yes' if v else 'no'}" for run, v in ok.items())
            verdicts.append(f"- **{name}**: {said} ({per_run})")
            record.setdefault("better", {})[name] = ok
    lines += [
        "",
        f"Decision rule: a candidate is better if, in both runs, it writes ≥ {NEW_RATIO:g}× the control's "
        f"({names[0]}) new valid tasks per step at ≥ {VALID_RATIO:g}× its valid rate (point estimates; "
        "the × control column's interval says whether the data are far from the line).",
        "",
        *verdicts,
    ]
    return lines, record
