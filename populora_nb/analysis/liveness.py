"""Is the population's mechanism live? Counts read from a run's records before any curve is read
(DESIGN.md: "a mechanism is only read once it is live"; issue #27).

A population run measures an arms race only if its parts act: teachers win games (tasks with
0 < ρ < win_threshold, the only ones a teacher's rating rises on), tasks land in the learnable band
0 < ρ < 1 (the only ones whose rollouts carry a difficulty signal), and evolved children live long
enough to learn (they survive the evolution events after their birth). A run where any of these is
zero produced its curves by construction, whatever they show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from populora_nb.records import RunDir


@dataclass(frozen=True)
class Liveness:
    """What a population run's records say about its mechanism (counts, not rates, where small)."""

    valid_matches: int
    """Matches whose task the verifier accepted."""
    played: int
    """Valid matches the student attempted (rho recorded)."""
    contested: int
    """Played matches in the teacher's band, 0 < rho < win_threshold: the teacher won games on them."""
    learnable: int
    """Played matches with 0 < rho < 1 (the learnable band, whatever the threshold)."""
    children: int
    """Members born by evolution."""
    judged_next: int
    """Children that met an evolution event after their birth."""
    survived_next: int
    """...and were not replaced at the first of them."""

    @property
    def teacher_win_share(self) -> float:
        """Share of valid matches the teacher won games on (issue #31 aims at >= 10%)."""
        return self.contested / self.valid_matches if self.valid_matches else 0.0

    @property
    def band_share(self) -> float:
        """Share of played tasks with 0 < rho < 1 (issue #31 aims at >= 20%)."""
        return self.learnable / self.played if self.played else 0.0

    def summary(self) -> str:
        """One paragraph a notebook prints and the report quotes."""
        dead = [
            name
            for name, live in (
                ("no teacher ever won a game", self.contested > 0),
                ("no task landed in 0 < rho < 1", self.learnable > 0),
                ("no child survived the event after its birth", self.survived_next > 0 or not self.judged_next),
            )
            if not live
        ]
        return (
            f"{self.valid_matches} valid matches, {self.played} played: teachers won games on {self.contested} "
            f"({self.teacher_win_share:.0%} of valid), {self.learnable} in 0 < rho < 1 ({self.band_share:.0%} of "
            f"played); {self.children} children, {self.survived_next} of {self.judged_next} judged survived the "
            f"next evolution event. " + ("Not live: " + "; ".join(dead) + "." if dead else "Every part acted.")
        )


def liveness(run_dir: str | Path) -> Liveness:
    """Count, from ``matches.jsonl`` and ``lineage.jsonl``, whether the mechanism acted."""
    rd = RunDir(Path(run_dir))
    threshold = rd.load_config().matchmaking.win_threshold
    matches = rd.read("matches")
    played = [m for m in matches if m["valid"] and m["rho"] is not None]
    lineage = rd.read("lineage")
    events = sorted({r["birth_step"] for r in lineage})
    replaced_at: dict[int, set[str]] = {}
    for r in lineage:
        replaced_at.setdefault(r["birth_step"], set()).add(r["replaced"])
    judged = survived = 0
    for r in lineage:
        later = [e for e in events if e > r["birth_step"]]
        if later:
            judged += 1
            survived += r["child"] not in replaced_at[later[0]]
    return Liveness(
        valid_matches=sum(m["valid"] for m in matches),
        played=len(played),
        contested=sum(0 < m["rho"] < threshold for m in played),
        learnable=sum(0 < m["rho"] < 1 for m in played),
        children=len(lineage),
        judged_next=judged,
        survived_next=survived,
    )


def share_interval(n: int, d: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share n/d (scipy's ``binomtest``). It treats the d items as
    independent draws; a step's tasks share a proposer, so the true interval is wider: read it as the
    least uncertainty a count carries, enough to tell 2/40 from 10/40 and not 8/40 from 10/40."""
    from scipy.stats import binomtest

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


def task_band(run_dir: str | Path) -> tuple[int, int]:
    """(tasks with 0 < rho < 1, tasks played): valid fresh tasks the matched solver attempted, from
    ``tasks.jsonl``, so the baseline (which plays no matches) is counted the same way as a population."""
    tasks = RunDir(Path(run_dir)).read("tasks")
    played = [t["solve_rate"] for t in played_tasks(tasks)]
    return sum(0 < r < 1 for r in played), len(played)


def protocol_liveness(experiments: Sequence[str | Path]) -> tuple[list[str], list[dict]]:
    """The seed protocol's mechanism check: per seed, both runs' band shares, the population's teacher
    wins and its children's survival; markdown lines and the records behind them (seeds.json). Read
    before any of the report's curves: a seed whose population is not live measured nothing about it."""
    rows: list[str] = []
    records: list[dict[str, Any]] = []
    dead: list[str] = []
    unjudged: list[str] = []  # no child met an evolution event after its birth: survival not measured
    unrun: list[str] = []  # no population records (yet)
    for exp in experiments:
        exp = Path(exp)
        base, pop = exp / "baseline", exp / "population"
        b_band = task_band(base) if RunDir(base).has("tasks") else (0, 0)
        p_band = task_band(pop) if RunDir(pop).has("tasks") else (0, 0)
        live = liveness(pop) if RunDir(pop).has("matches") else None
        records.append(
            {
                "seed": exp.name,
                "baseline_band": list(b_band),
                "population_band": list(p_band),
                "population": None if live is None else asdict(live),
            }
        )
        if live is None:
            unrun.append(exp.name)
        elif not (live.contested and live.learnable and (live.survived_next or not live.judged_next)):
            dead.append(exp.name)
        elif not live.judged_next:
            unjudged.append(exp.name)
        wins = "—" if live is None else share_text(live.contested, live.valid_matches, "valid")
        kids = "—" if live is None else f"{live.survived_next} of {live.judged_next} ({live.children} born)"
        rows.append(f"| {exp.name} | {share_text(*b_band)} | {share_text(*p_band)} | {wins} | {kids} |")
    notes = []
    if dead:
        notes.append(f"Not live in {', '.join(dead)}: read those seeds' population curves as produced by construction.")
    if unjudged:
        notes.append(
            f"No child has met an evolution event after its birth in {', '.join(unjudged)}: survival not measured."
        )
    if unrun:
        notes.append(f"No population records in {', '.join(unrun)}.")
    verdict = " ".join(notes) or (
        "Every seed's population mechanism acted: teachers won games, tasks landed in the band and a child "
        "survived the event after its birth."
    )
    return [
        "## Is the mechanism live?",
        "",
        "Counted from each seed's records before any curve is read (`analysis.liveness`): valid fresh tasks "
        "the matched solver attempted with 0 < ρ < 1 (the only ones whose rollouts carry a difficulty signal), "
        "matches the teacher won games on (0 < ρ < win_threshold), and evolved children that survived the first "
        "evolution event after their birth. Brackets: 95% Wilson intervals, as if the items were independent "
        "(a step's tasks share a proposer, so the true ones are wider).",
        "",
        "| seed | baseline: 0 < ρ < 1 | population: 0 < ρ < 1 | teacher wins / valid matches "
        "| children surviving the next event |",
        "|---|---|---|---|---|",
        *rows,
        "",
        verdict,
    ], records
