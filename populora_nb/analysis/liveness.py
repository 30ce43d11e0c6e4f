"""Is the population's mechanism live? Counts read from a run's records before any curve is read
(docs/design.md: "a mechanism is only read once it is live, and each check can fail"). Each part of
the mechanism has a check with a stated threshold (``CHECKS``), built so that a collapse fails it:
new programs (whole run and last window), band, teacher games and majority, and children
(`analysis.survival`). **Each share check reads its 95% interval, not its point estimate** (`judge`):
a block bootstrap over ``BLOCK_STEPS``-step blocks (`analysis.clustered`: a step's tasks share a
proposer) widened to at least the Wilson interval. docs/methodology.md, "Is the mechanism live?",
gives each check's reason, chance rate and states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from scipy.stats import binomtest

from populora_nb.analysis.clustered import BLOCK_STEPS, block_bootstrap_share, block_counts
from populora_nb.analysis.frames import load_frames, rows_of
from populora_nb.analysis.survival import MIN_JUDGED, Survival, judge_children
from populora_nb.copies import distinct_programs
from populora_nb.records import RunDir

LAST_WINDOW = 0.25
"""The last window: this share of the run's steps (rounded up), the end a collapse shows in."""
MIN_BLOCKS = 4
"""Fewest bootstrap blocks for a verdict: with fewer, resampling cannot say how blocks vary."""
PASS: Mapping[str, float] = MappingProxyType(
    {
        "new programs": 0.10,  # below it a run mostly re-poses what it wrote
        "new programs, last window": 0.10,
        "band": 0.10,  # half the pilot's aim of 20% for a preset
        "teacher games": 0.05,
        "teacher majority": 0.05,
    }
)
"""Each share check's threshold: the least share, which its interval must lie at or above."""
CHECKS: Mapping[str, str] = {
    "new programs": f"share of valid tasks with a new program >= {PASS['new programs']:.0%}, over the whole run",
    "new programs, last window": f"the same over the last {LAST_WINDOW:.0%} of steps",
    "band": f"share of played non-repeat tasks with 0 < ρ < 1 >= {PASS['band']:.0%}",
    "teacher games": f"share of games teachers won on played non-repeat tasks >= {PASS['teacher games']:.0%}",
    "teacher majority": "share of played non-repeat matches the teacher won most games of >= "
    f"{PASS['teacher majority']:.0%}",
    "children": f"children at their first eligible event not culled more than chance (one-sided p >= 0.05; "
    f"too few to judge below {MIN_JUDGED})",
}
"""Each liveness check and its threshold, as the report and docs/methodology.md state them; each share
check passes only when its 95% interval lies at or above the threshold (module docstring)."""
State = Literal["pass", "fail", "inconclusive", "too few to judge", "no data"]
Over = Literal["non-repeats", "new programs", "all"]


@dataclass(frozen=True)
class Check:
    """One share check: the count, its interval, the blocks behind it and the state they give."""

    share: float | None
    hits: int
    total: int
    low: float
    high: float
    blocks: int
    state: State

    def text(self, of: str = "valid") -> str:
        """``8% (47/590) [5%, 11%] (8 blocks): inconclusive``."""
        if not self.total:
            return f"n/a (0 {of}): no data"
        return (
            f"{self.hits / self.total:.0%} ({self.hits}/{self.total}) [{self.low:.0%}, {self.high:.0%}]: {self.state}"
        )


def block_steps(span: int) -> int:
    """Steps per bootstrap block over ``span`` steps: ``BLOCK_STEPS``, fewer where the span would hold
    fewer than ``MIN_BLOCKS`` blocks (at least 1)."""
    return max(1, min(BLOCK_STEPS, span // MIN_BLOCKS))


def judge(items: Sequence[tuple[int, bool]], threshold: float, *, block: int, seed: int = 0, name: str = "") -> Check:
    """The state of a share check over ``items`` (step, hit), read from its interval (module docstring)."""
    n, d = sum(bool(h) for _, h in items), len(items)
    if not d:
        return Check(None, 0, 0, math.nan, math.nan, 0, "no data")
    low, high = block_bootstrap_share(items, block=block, seed=seed, name=name)
    wilson_low, wilson_high = share_interval(n, d)
    low, high = min(low, wilson_low), max(high, wilson_high)
    blocks = len(block_counts(items, block)[1])
    state: State
    if blocks < MIN_BLOCKS or high - low <= 0:
        state = "too few to judge"
    elif low >= threshold:
        state = "pass"
    elif high < threshold:
        state = "fail"
    else:
        state = "inconclusive"
    return Check(n / d, n, d, low, high, blocks, state)


@dataclass(frozen=True)
class Valid:
    """One valid task: its step, whether it repeats a task met before, whether its program is new."""

    step: int
    repeat: bool
    new_program: bool


@dataclass(frozen=True)
class Played:
    """One played task: its step, ρ, its classes (`Valid`) and the teacher's games."""

    step: int
    rho: float
    repeat: bool
    new_program: bool = False
    rollouts: int = 0
    teacher_won: int = 0
    """Games the teacher won under the rating rule (0 for the baseline, which plays no matches)."""


@dataclass(frozen=True)
class Liveness:
    """What one run's records say about its mechanism (population: all checks; baseline: tasks only)."""

    valid: tuple[Valid, ...]
    played: tuple[Played, ...]
    steps: int
    """Steps the run recorded (1 + its last step): the last window is the last ``LAST_WINDOW`` of them."""
    distinct_programs: int = 0
    """Different programs (names normalised) among its valid tasks, copies of seeds included."""
    survival: Survival | None = None
    """None for a run without evolution (the baseline)."""
    valid_matches: int = 0
    """Matches whose task the verifier accepted (population)."""
    contested: int = 0
    """Played matches with 0 < ρ < win_threshold, repeats included: the tasks the teacher won games on."""
    seed: int = 0
    """Seeds the bootstrap intervals (with each quantity's name): the same records give the same states."""
    name: str = ""

    @property
    def window_start(self) -> int:
        """The first step of the last window."""
        return self.steps - max(1, math.ceil(self.steps * LAST_WINDOW))

    @property
    def non_repeats(self) -> list[Played]:
        """Played tasks that are not repeats."""
        return [p for p in self.played if not p.repeat]

    def _over(self, over: Over) -> list[Played]:
        if over == "all":
            return list(self.played)
        return self.non_repeats if over == "non-repeats" else [p for p in self.played if p.new_program]

    def new_program_items(self, last_window: bool = False) -> list[tuple[int, bool]]:
        """(step, new program) of every valid task, of the last window only when asked."""
        start = self.window_start if last_window else 0
        return [(v.step, v.new_program) for v in self.valid if v.step >= start]

    def band_items(self, over: Over = "non-repeats") -> list[tuple[int, bool]]:
        return [(p.step, 0 < p.rho < 1) for p in self._over(over)]

    def game_items(self, over: Over = "non-repeats") -> list[tuple[int, bool]]:
        """One (step, won) per game the teacher played on a played task of the class."""
        return [(p.step, i < p.teacher_won) for p in self._over(over) for i in range(p.rollouts)]

    def majority_items(self, over: Over = "non-repeats") -> list[tuple[int, bool]]:
        return [(p.step, p.teacher_won > p.rollouts / 2) for p in self._over(over) if p.rollouts]

    def mean_rho(self, over: Over = "non-repeats") -> float | None:
        rhos = [p.rho for p in self._over(over)]
        return sum(rhos) / len(rhos) if rhos else None

    def new_programs_per_step(self, last_window: bool = False) -> float:
        """New programs written per recorded step (of the last window when asked)."""
        span = self.steps - (self.window_start if last_window else 0)
        return sum(h for _, h in self.new_program_items(last_window)) / span if span > 0 else 0.0

    @cached_property
    def judged(self) -> dict[str, Check]:
        """Each share check (``CHECKS``) with its interval and state; games and majority with evolution
        (computed once: each interval is a bootstrap)."""
        whole, window = block_steps(self.steps), block_steps(self.steps - self.window_start)
        items = {
            "new programs": (self.new_program_items(), whole),
            "new programs, last window": (self.new_program_items(True), window),
            "band": (self.band_items(), whole),
        }
        if self.survival is not None:
            items |= {"teacher games": (self.game_items(), whole), "teacher majority": (self.majority_items(), whole)}
        return {
            k: judge(i, PASS[k], block=b, seed=self.seed, name=f"{self.name}/check/{k}") for k, (i, b) in items.items()
        }

    def checks(self) -> dict[str, str]:
        """check -> its state; children only with evolution."""
        out: dict[str, str] = {k: c.state for k, c in self.judged.items()}
        if self.survival is not None:
            out["children"] = self.survival.verdict
        return out

    def not_passed(self) -> dict[str, list[str]]:
        """state -> the checks in it, for every state but pass (empty when every check passed)."""
        out: dict[str, list[str]] = {}
        for k, v in self.checks().items():
            if v != "pass":
                out.setdefault(v, []).append(k)
        return out

    def verdict(self) -> str:
        """ "Every check passed." only when it did; else each state other than pass with its checks."""
        rest = self.not_passed()
        if not rest:
            return "Every check passed."
        order = ("fail", "no data", "inconclusive", "too few to judge")
        return " ".join(f"{s.capitalize()}: {', '.join(rest[s])}." for s in order if s in rest)

    def summary(self) -> str:
        """One paragraph a notebook prints and the report quotes."""
        judged, n_repeats = self.judged, sum(v.repeat for v in self.valid)
        new, window = judged["new programs"], judged["new programs, last window"]
        last = self.steps - 1
        span = f"step {last}" if self.window_start == last else f"steps {self.window_start}–{last}"
        text = (
            f"{len(self.valid)} valid tasks, {self.distinct_programs} distinct programs, {n_repeats} repeats. "
            f"New programs: {new.text()} ({self.new_programs_per_step():.2f} per step); in the last window ({span}) "
            f"{window.text()} ({self.new_programs_per_step(True):.2f} per "
            f"step). 0 < ρ < 1 among played non-repeats: {judged['band'].text('played')}; among played new "
            f"programs: {_pct(self.band_items('new programs'))}"
        )
        if self.survival is not None:
            text += (
                f". Teacher games won on non-repeats: {judged['teacher games'].text('games')} (on new programs "
                f"{_pct(self.game_items('new programs'))}); matches the teacher won most games of: "
                f"{judged['teacher majority'].text('matches')}. Children at their first eligible event: "
                + self.survival.text()
            )
        return text + ". " + self.verdict()

    def record(self) -> dict[str, Any]:
        """The counts, intervals and states behind the report (seeds.json)."""
        out: dict[str, Any] = {
            "steps": self.steps,
            "window_start": self.window_start,
            "valid": len(self.valid),
            "distinct_programs": self.distinct_programs,
            "new_programs_per_step": self.new_programs_per_step(),
            "new_programs_per_step_last_window": self.new_programs_per_step(True),
            "repeats": [sum(v.repeat for v in self.valid), len(self.valid)],
            **{
                k.replace(" ", "_").replace(",", ""): [c.hits, c.total, c.low, c.high, c.state]
                for k, c in self.judged.items()
            },
            "band_new_programs": _count(self.band_items("new programs")),
            "band_all": _count(self.band_items("all")),
            "mean_rho": {o: self.mean_rho(o) for o in ("non-repeats", "new programs", "all")},
            "checks": self.checks(),
        }
        if self.survival is not None:
            out |= {
                "teacher_games_new_programs": _count(self.game_items("new programs")),
                "valid_matches": self.valid_matches,
                "contested_any_rho": self.contested,
                "children": self.survival.as_dict(),
            }
        return out


def _count(items: Sequence[tuple[int, bool]]) -> list[int]:
    return [sum(h for _, h in items), len(items)]


def _pct(items: Sequence[tuple[int, bool]]) -> str:
    hits, total = _count(items)
    return f"{hits / total:.0%} ({hits}/{total})" if total else "n/a"


def liveness(run_dir: str | Path, *, seed: int = 0, name: str = "") -> Liveness:
    """Count, from ``tasks.jsonl`` (and for a population ``matches.jsonl``, one row per proposal in the
    same order, and ``lineage.jsonl``), whether the mechanism acted."""
    rd, frames = RunDir(Path(run_dir)), load_frames(run_dir)
    tasks = rows_of(frames.tasks)  # with each task's copy class and repeat flag (None: an invalid task)
    steps = 1 + max((int(t["step"]) for t in tasks), default=-1)
    flags = [(int(t["step"]), bool(t["repeat"]), t["copy"] == "new") for t in tasks]
    valid = tuple(Valid(*f) for f, t in zip(flags, tasks) if t["repeat"] is not None)
    distinct = distinct_programs(tasks)
    if not rd.has("matches"):
        played = tuple(
            Played(s, float(t["rho"]), rep, new)
            for t, (s, rep, new) in zip(tasks, flags)
            if t["repeat"] is not None and t["rho"] is not None
        )
        return Liveness(valid, played, steps, distinct, seed=seed, name=name)
    config = rd.load_config()  # a population's: its threshold, rollouts, grace and founders
    matches = rows_of(frames.matches)
    if len(matches) != len(tasks):
        raise ValueError(f"{run_dir}: {len(matches)} matches for {len(tasks)} task records (one per proposal)")
    threshold, k = config.matchmaking.win_threshold, config.rl.rollouts
    out = []
    for m, (_, rep, new) in zip(matches, flags):
        if m["valid"] and m["rho"] is not None:
            rollouts = int(m.get("rollouts") or k)
            solved = round(float(m["rho"]) * rollouts)
            won = rollouts - solved if 0 < solved and m["rho"] < threshold else 0  # matchmaking.teacher_games
            out.append(Played(int(m["step"]), float(m["rho"]), rep, new, rollouts, won))
    founders = {"teacher": config.population.n_teachers, "student": config.population.n_students}
    survival = judge_children(rows_of(frames.lineage), founders, config.evolution.grace)
    n_valid, contested = sum(bool(m["valid"]) for m in matches), sum(0 < p.rho < threshold for p in out)
    return Liveness(valid, tuple(out), steps, distinct, survival, n_valid, contested, seed=seed, name=name)


def share_interval(n: int, d: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share n/d (scipy's ``binomtest``). It treats the d items as
    independent draws: read it as the least uncertainty a count carries; where items cluster by step
    the report uses the block bootstrap (`analysis.clustered`)."""
    ci = binomtest(n, d).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def played_tasks(tasks: Sequence[dict]) -> list[dict]:
    """Task records whose ρ was measured: valid fresh proposals the matched solver attempted. Invalid
    proposals and buffer draws carry no ρ; every band share, ρ histogram and probe reads this one rule."""
    return [t for t in tasks if t.get("valid") and t.get("solve_rate") is not None]
