"""Is the population's mechanism live? Counts read from a run's records before any curve is read
(DESIGN.md: "a mechanism is only read once it is live, and each check can fail").

A population run measures an arms race only if its parts act, and each part has a check with a
stated pass threshold (``CHECKS``), so that a run can fail it:

* **new tasks**: the share of valid tasks that are not repeats (`populora_nb.copies`: the same
  program and input as a task met before) is at least ``NEW_PASS``. A repeat's ρ measures memory,
  so the two checks below count non-repeats only.
* **band**: the share of played non-repeat tasks (valid, fresh, attempted by the matched solver)
  with 0 < ρ < 1, the only ones whose rollouts carry a difficulty signal, is at least ``BAND_PASS``.
* **teacher games**: the rating rule scores a match as k games for the teacher
  (`matchmaking.teacher_games`): on a contested task (0 < ρ < win_threshold) it wins one per failed
  rollout, otherwise it wins none. The share of those games the teachers won on played non-repeat
  tasks is at least ``GAMES_PASS``, and the share of matches where the teacher won most of its games
  (more than k/2: ρ < ½ on a contested task) is at least ``MAJORITY_PASS``. Games, not matches in
  the band: a task with ρ = 3/4 is in the band, but its teacher won 1 game of 4.
* **children**: each child judged at its first event outside grace against the chance rate there
  (`populora_nb.analysis.survival`), "too few to judge" below ``survival.MIN_JUDGED`` children.

Shares carry 95% intervals from a block bootstrap over 5-step blocks (`analysis.clustered`): a
step's tasks share a proposer and repeat each other, so they are not independent draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scipy.stats import binomtest

from populora_nb.analysis.clustered import block_bootstrap_share
from populora_nb.analysis.frames import records
from populora_nb.analysis.survival import MIN_JUDGED, Survival, judge_children
from populora_nb.copies import repeat_rows, start_fingerprints
from populora_nb.records import RunDir

NEW_PASS = 0.10
"""Least share of valid tasks that are not repeats (a run below it mostly replays its past)."""
BAND_PASS = 0.10
"""Least share of played non-repeat tasks with 0 < ρ < 1 (half the pilot's aim of 20% for a preset)."""
GAMES_PASS = 0.05
"""Least share of the games on played non-repeat tasks that the teachers won."""
MAJORITY_PASS = 0.05
"""Least share of played non-repeat matches in which the teacher won more than half of its games."""
PASS: Mapping[str, float] = MappingProxyType(
    {"new tasks": NEW_PASS, "band": BAND_PASS, "teacher games": GAMES_PASS, "teacher majority": MAJORITY_PASS}
)
"""Each share check's pass threshold."""
CHECKS: Mapping[str, str] = {
    "new tasks": f"share of valid tasks that are not repeats >= {NEW_PASS:.0%}",
    "band": f"share of played non-repeat tasks with 0 < ρ < 1 >= {BAND_PASS:.0%}",
    "teacher games": f"share of games teachers won on played non-repeat tasks >= {GAMES_PASS:.0%}",
    "teacher majority": f"share of played non-repeat matches the teacher won most games of >= {MAJORITY_PASS:.0%}",
    "children": f"children at their first eligible event not culled more than chance (one-sided p >= 0.05; "
    f"too few to judge below {MIN_JUDGED})",
}
"""Each liveness check and its pass threshold, as the report and docs/methodology.md state them."""


@dataclass(frozen=True)
class Played:
    """One played task: its step, ρ, whether it repeats a task met before, and the teacher's games."""

    step: int
    rho: float
    repeat: bool
    rollouts: int = 0
    teacher_won: int = 0
    """Games the teacher won under the rating rule (0 for the baseline, which plays no matches)."""


@dataclass(frozen=True)
class Liveness:
    """What one run's records say about its mechanism (population: all checks; baseline: tasks only)."""

    valid: tuple[tuple[int, bool], ...]
    """(step, repeat) of every valid task."""
    played: tuple[Played, ...]
    survival: Survival | None = None
    """None for a run without evolution (the baseline)."""
    valid_matches: int = 0
    """Matches whose task the verifier accepted (population)."""
    contested: int = 0
    """Played matches with 0 < ρ < win_threshold, repeats included: the tasks the teacher won games on."""

    @property
    def non_repeats(self) -> list[Played]:
        """Played tasks that are not repeats."""
        return [p for p in self.played if not p.repeat]

    def repeat_items(self, last_steps: int | None = None) -> list[tuple[int, bool]]:
        """(step, repeat) of valid tasks, of the last ``last_steps`` steps with a valid task when given."""
        if last_steps is None or not self.valid:
            return list(self.valid)
        steps = sorted({s for s, _ in self.valid})[-last_steps:]
        return [v for v in self.valid if v[0] >= steps[0]]

    def band_items(self, non_repeats_only: bool = True) -> list[tuple[int, bool]]:
        return [(p.step, 0 < p.rho < 1) for p in (self.non_repeats if non_repeats_only else self.played)]

    def game_items(self) -> list[tuple[int, bool]]:
        """One (step, won) per game the teacher played on a played non-repeat task."""
        return [(p.step, i < p.teacher_won) for p in self.non_repeats for i in range(p.rollouts)]

    def majority_items(self) -> list[tuple[int, bool]]:
        return [(p.step, p.teacher_won > p.rollouts / 2) for p in self.non_repeats if p.rollouts]

    def shares(self) -> dict[str, float | None]:
        """Each check's share (None where nothing was counted)."""
        items = [[(s, not r) for s, r in self.valid], self.band_items(), self.game_items(), self.majority_items()]
        return {k: sum(h for _, h in i) / len(i) if i else None for k, i in zip(PASS, items)}

    def checks(self) -> dict[str, str]:
        """check -> "pass", "fail" or "too few to judge" (``CHECKS``); children only with evolution."""
        out = {k: "no data" if v is None else ("pass" if v >= PASS[k] else "fail") for k, v in self.shares().items()}
        if self.survival is None:
            return {k: out[k] for k in ("new tasks", "band")}
        return {**out, "children": self.survival.verdict}

    def failed(self) -> list[str]:
        return [k for k, v in self.checks().items() if v in ("fail", "no data")]

    def summary(self) -> str:
        """One paragraph a notebook prints and the report quotes."""
        s, n_repeats = self.shares(), sum(r for _, r in self.valid)
        rate = n_repeats / len(self.valid) if self.valid else None
        text = (
            f"{len(self.valid)} valid tasks, {n_repeats} repeats ({_pct(rate)}); "
            f"{len(self.played)} played, {len(self.non_repeats)} not repeats: {_pct(s['band'])} in 0 < rho < 1"
        )
        if self.survival is not None:
            text += (
                f"; teachers won {_pct(s['teacher games'])} of their games and most games in "
                f"{_pct(s['teacher majority'])} of matches; children at their first eligible event: "
                + self.survival.text()
            )
        failed = self.failed()
        return text + ". " + ("Failed: " + ", ".join(failed) + "." if failed else "Every check passed.")

    def record(self, *, seed: int = 0, name: str = "") -> dict[str, Any]:
        """The counts and block-bootstrap intervals behind the report (seeds.json)."""

        def entry(items: Sequence[tuple[int, bool]], what: str) -> list[Any]:
            low, high = block_bootstrap_share(items, seed=seed, name=f"{name}/{what}")
            return [sum(h for _, h in items), len(items), low, high]

        out: dict[str, Any] = {
            "repeats": entry(self.repeat_items(), "repeats"),
            "repeats_last5": entry(self.repeat_items(5), "repeats_last5"),
            "band_non_repeats": entry(self.band_items(), "band_non_repeats"),
            "band_all": entry(self.band_items(False), "band_all"),
            "checks": self.checks(),
        }
        if self.survival is not None:
            out |= {
                "teacher_games": entry(self.game_items(), "teacher_games"),
                "teacher_majority": entry(self.majority_items(), "teacher_majority"),
                "valid_matches": self.valid_matches,
                "contested_any_rho": self.contested,
                "children": self.survival.as_dict(),
            }
        return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def liveness(run_dir: str | Path) -> Liveness:
    """Count, from ``tasks.jsonl`` (and for a population ``matches.jsonl``, one row per proposal in the
    same order, and ``lineage.jsonl``), whether the mechanism acted."""
    rd = RunDir(Path(run_dir))
    tasks = records(run_dir, "tasks")
    repeats = repeat_rows(tasks, start_fingerprints(run_dir))
    valid = tuple((int(t["step"]), bool(r)) for t, r in zip(tasks, repeats) if r is not None)
    if not rd.has("matches"):
        played = tuple(
            Played(int(t["step"]), float(t["solve_rate"]), bool(r))
            for t, r in zip(tasks, repeats)
            if r is not None and t.get("solve_rate") is not None
        )
        return Liveness(valid, played)
    config = rd.load_config()  # a population's: its threshold, rollouts, grace and founders
    matches = records(run_dir, "matches")
    if len(matches) != len(tasks):
        raise ValueError(f"{run_dir}: {len(matches)} matches for {len(tasks)} task records (one per proposal)")
    threshold, k = config.matchmaking.win_threshold, config.rl.rollouts
    out = []
    for m, r in zip(matches, repeats):
        if m["valid"] and m["rho"] is not None:
            rollouts = int(m.get("rollouts") or k)
            solved = round(float(m["rho"]) * rollouts)
            won = rollouts - solved if 0 < solved and m["rho"] < threshold else 0  # matchmaking.teacher_games
            out.append(Played(int(m["step"]), float(m["rho"]), bool(r), rollouts, won))
    founders = {"teacher": config.population.n_teachers, "student": config.population.n_students}
    survival = judge_children(records(run_dir, "lineage"), founders, config.evolution.grace)
    n_valid, contested = sum(bool(m["valid"]) for m in matches), sum(0 < p.rho < threshold for p in out)
    return Liveness(valid, tuple(out), survival, valid_matches=n_valid, contested=contested)


def share_interval(n: int, d: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share n/d (scipy's ``binomtest``). It treats the d items as
    independent draws: read it as the least uncertainty a count carries; where items cluster by step
    the report uses the block bootstrap (`analysis.clustered`)."""
    ci = binomtest(n, d).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def share_text(n: int, d: int, of: str = "played") -> str:
    """``12% (14/112) [8%, 20%]``: a share, its counts and its 95% Wilson interval."""
    if not d:
        return f"n/a (0 {of})"
    low, high = share_interval(n, d)
    return f"{n / d:.0%} ({n}/{d}) [{low:.0%}, {high:.0%}]"


def played_tasks(tasks: Sequence[dict]) -> list[dict]:
    """Task records whose ρ was measured: valid fresh proposals the matched solver attempted. Invalid
    proposals and buffer draws carry no ρ; every band share, ρ histogram and probe reads this one rule."""
    return [t for t in tasks if t.get("valid") and t.get("solve_rate") is not None]
