"""Is the population's mechanism live? Counts read from a run's records before any curve is read
(DESIGN.md: "a mechanism is only read once it is live"; issue #27).

A population run measures an arms race only if its parts act: teachers win games (tasks with
0 < ρ < win_threshold, the only ones a teacher's rating rises on), tasks land in the learnable band
0 < ρ < 1 (the only ones whose rollouts carry a difficulty signal), and evolved children live long
enough to learn (they survive the evolution events after their birth). A run where any of these is
zero produced its curves by construction, whatever they show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
