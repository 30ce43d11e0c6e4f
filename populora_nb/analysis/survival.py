"""Do evolved children get a fair chance? Each child judged at its first *eligible* evolution event.

A child younger than the grace period (``evolution.grace``, default two intervals) cannot be
replaced (`populora_nb.evolution.plan_replacement`), so "it survived the next event" is true by
construction for every event inside grace: a check that cannot fail. A child is therefore judged at
the first event at least ``grace`` steps after its birth, and compared with the chance rate there:
with ``E`` members of its role eligible (founders, and children past grace) and ``R`` of them
replaced, a member no better and no worse than its peers survives with probability 1 − R/E
(docs/design.md: "culled at the chance rate among equals"). Over the judged children, the number that
survived is compared with that chance: the one-sided Poisson-binomial p of so few survivors (each
child its own chance rate). The check fails when p < ``ALPHA`` (children culled more often than
chance would), and below ``MIN_JUDGED`` children it says "too few to judge" instead of a verdict.
Children whose first eligible event lies after the last recorded event are not judged.

**Is a peer's chance an equal child's?** A child starts with its tournament-winning parents' rating,
so it could survive more often than 1 − R/E without being better. Simulated among members of equal
skill under the ``cpu`` preset's rules it does not (by at most 1 percentage point: docs/methodology.md,
`studies.evolution_simulations.inheritance_edge`), so the report states 1 − R/E as the "equal-skill chance".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MIN_JUDGED = 4
"""Fewest judged children for a verdict: at 3 eligible members and 1 replaced (chance 2/3), 0 of 4
surviving has p = 0.012, while 0 of 3 has p = 0.037 and 1 of 3 p = 0.26: below 4 no outcome but
total loss could fail, so no verdict is given."""
ALPHA = 0.05
"""The check fails when so few survivors would happen by chance less often than this."""


@dataclass(frozen=True)
class ChildJudgement:
    """One child at its first eligible event."""

    child: str
    role: str
    born: int
    event: int
    eligible: int
    """Members of its role outside grace at that event (itself included)."""
    replaced: int
    """Members of its role replaced at that event."""
    survived: bool

    @property
    def chance(self) -> float:
        """The probability that a member like its peers survives the event: 1 − replaced / eligible."""
        return 1.0 - self.replaced / self.eligible


@dataclass(frozen=True)
class Survival:
    """Children judged at their first eligible event, against the chance rate there."""

    born: int
    """Children evolution made."""
    judged: tuple[ChildJudgement, ...]

    @property
    def n(self) -> int:
        return len(self.judged)

    @property
    def survived(self) -> int:
        return sum(j.survived for j in self.judged)

    @property
    def expected(self) -> float:
        """Survivors expected by chance: the sum of the children's chance rates."""
        return float(sum(j.chance for j in self.judged))

    @property
    def p_low(self) -> float:
        """One-sided p of this few survivors (or fewer) by chance (Poisson binomial); nan when none judged."""
        return poisson_binomial_cdf([j.chance for j in self.judged], self.survived) if self.judged else float("nan")

    @property
    def verdict(self) -> str:
        """ "pass", "fail" (culled more often than chance, p < ALPHA) or "too few to judge"."""
        if self.n < MIN_JUDGED:
            return "too few to judge"
        return "fail" if self.p_low < ALPHA else "pass"

    def text(self) -> str:
        """``4 of 6 (equal-skill chance 4.0; p = 0.68)``: survivors, judged children, and the survivors
        expected of children no better than their peers, inherited rating included (module docstring)."""
        if not self.judged:
            return f"0 judged ({self.born} born): too few to judge"
        return (
            f"{self.survived} of {self.n} (equal-skill chance {self.expected:.1f}; p = {self.p_low:.2g}; "
            f"{self.born} born): {self.verdict}"
        )

    def as_dict(self) -> dict[str, Any]:
        numbers = {k: getattr(self, k) for k in ("born", "n", "survived", "expected", "p_low", "verdict")}
        return {**numbers, "judged": [{**asdict(j), "chance": j.chance} for j in self.judged]}


def poisson_binomial_cdf(probabilities: Sequence[float], k: int) -> float:
    """P(X <= k) for X the number of successes of independent trials with these probabilities."""
    dist = np.zeros(len(probabilities) + 1)
    dist[0] = 1.0
    for p in probabilities:
        dist[1:] = dist[1:] * (1 - p) + dist[:-1] * p
        dist[0] *= 1 - p
    return float(min(1.0, dist[: k + 1].sum()))


def judge_children(lineage: Sequence[Mapping[str, Any]], founders: Mapping[str, int], grace: int) -> Survival:
    """Each child of ``lineage`` (rows with child, replaced, role, birth_step) judged at its first
    event at least ``grace`` steps after its birth (module docstring). ``founders``: role -> members
    the run started with (founders are never in grace)."""
    events = sorted({int(r["birth_step"]) for r in lineage})
    born_at = {str(r["child"]): int(r["birth_step"]) for r in lineage}
    role_of = {str(r["child"]): str(r["role"]) for r in lineage}
    first_eligible = {c: next((e for e in events if e > b and e - b >= grace), None) for c, b in born_at.items()}
    # role -> member -> birth step (None: a founder, tracked by slot: its id is not needed)
    alive: dict[str, dict[str, int | None]] = {r: {f"founder{i}": None for i in range(n)} for r, n in founders.items()}
    judged: list[ChildJudgement] = []
    for event in events:
        here = [r for r in lineage if int(r["birth_step"]) == event]
        for role, members in alive.items():
            out = {str(r["replaced"]) for r in here if str(r["role"]) == role}
            eligible = [m for m, b in members.items() if b is None or event - b >= grace]
            for child in (m for m in eligible if first_eligible.get(m) == event):
                survived = child not in out
                judged.append(ChildJudgement(child, role, born_at[child], event, len(eligible), len(out), survived))
        for r in here:
            members = alive.setdefault(str(r["role"]), {})
            replaced = str(r["replaced"])
            gone = replaced if replaced in members else next((m for m in members if m.startswith("founder")), None)
            members.pop(gone or "", None)
            members[str(r["child"])] = event
    return Survival(born=len(role_of), judged=tuple(judged))
