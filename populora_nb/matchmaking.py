"""Matchmaking: TrueSkill ratings and prioritized fictitious self-play (PopuLoRA §3, issue 5).

Every member, teacher or student, holds one TrueSkill rating on a shared scale. A *match* is one
valid task: the student wins when its solve rate ρ reaches ``threshold``, otherwise the teacher
wins. PFSP (AlphaStar, Vinyals et al. 2019) then draws each teacher's next student with weight
f(p), p the rated probability that the teacher beats that student: f_var(p) = p(1 − p) favours
near-balanced matchups, f_hard(p) = (1 − p)^γ favours students the teacher tends to lose to.

The ``trueskill`` package does the Bayesian update; every function takes an explicit
``trueskill.TrueSkill`` environment (``make_trueskill``) and never touches the package's global
one. Ratings travel as a small frozen ``Rating`` so records and tests need no trueskill objects.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import trueskill

MemberId = Hashable
PFSPWeighting = Literal["var", "hard"]


@dataclass(frozen=True)
class Rating:
    """A member's TrueSkill belief: skill ~ N(mu, sigma²)."""

    mu: float
    sigma: float

    @property
    def conservative(self) -> float:
        """mu − 3 sigma: the usual leaderboard value, low until the rating has seen games."""
        return self.mu - 3.0 * self.sigma


@dataclass(frozen=True)
class Match:
    """One proposed task between a teacher and its matched student."""

    teacher: MemberId
    student: MemberId
    valid: bool
    """The verifier accepted the task; invalid tasks were never shown to the student."""
    rho: float | None = None
    """The student's solve rate on the task (None for an invalid task)."""

    def __post_init__(self) -> None:
        if self.valid and self.rho is None:
            raise ValueError("a valid Match needs rho, the student's solve rate")
        if self.rho is not None and not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must lie in [0, 1], got {self.rho!r}")


def make_trueskill(
    mu: float = 25.0,
    sigma: float = 25.0 / 3.0,
    beta: float = 25.0 / 6.0,
    tau: float = 25.0 / 300.0,
    draw_probability: float = 0.0,
) -> trueskill.TrueSkill:
    """A TrueSkill environment with the package's defaults, except no draws.

    A match outcome is binary (ρ ≥ threshold or not), so ``draw_probability`` is 0.
    """
    return trueskill.TrueSkill(
        mu=mu, sigma=sigma, beta=beta, tau=tau, draw_probability=draw_probability
    )


def initial_ratings(
    members: Sequence[MemberId], env: trueskill.TrueSkill
) -> dict[MemberId, Rating]:
    """Every member at the environment's prior (mu, sigma)."""
    return {m: Rating(float(env.mu), float(env.sigma)) for m in members}


def win_probability(a: Rating, b: Rating, env: trueskill.TrueSkill) -> float:
    """P(a beats b) = Φ((μa − μb) / sqrt(2β² + σa² + σb²)).

    Not part of the trueskill package (its author declined it, sublee/trueskill#1, #17); this is
    the two-player formula from its documentation, ignoring the draw margin (we allow no draws).
    Φ is computed with math.erfc: trueskill's built-in cdf is a 1e-8 approximation.
    """
    denom = math.sqrt(2.0 * env.beta**2 + a.sigma**2 + b.sigma**2)
    z = (a.mu - b.mu) / denom
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def match_winner(match: Match, threshold: float = 0.5) -> Literal["teacher", "student"]:
    """Student wins a valid match when ρ ≥ threshold; an invalid task is a teacher loss."""
    if not match.valid:
        return "student"
    assert match.rho is not None  # guaranteed by Match.__post_init__
    return "student" if match.rho >= threshold else "teacher"


def update_ratings(
    ratings: Mapping[MemberId, Rating],
    matches: Sequence[Match],
    env: trueskill.TrueSkill,
    threshold: float = 0.5,
    count_invalid: bool = True,
) -> dict[MemberId, Rating]:
    """New ratings after ``matches``; the input mapping is not modified.

    Matches are applied one at a time in the order given (TrueSkill updates are sequential, so
    order matters slightly; the loop passes them in proposal order: teacher by teacher, task by
    task). ``count_invalid=True`` scores an invalid task as a teacher loss, matching the −1
    teacher reward; ``False`` skips it, so only tasks the student really played move ratings.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is a solve rate and must lie in [0, 1], got {threshold}")
    current = {m: env.create_rating(mu=r.mu, sigma=r.sigma) for m, r in ratings.items()}
    for match in matches:
        for member in (match.teacher, match.student):
            if member not in current:
                raise KeyError(f"member {member!r} has no rating; start it with initial_ratings")
        if match.teacher == match.student:
            raise ValueError(f"member {match.teacher!r} cannot play itself")
        if not match.valid and not count_invalid:
            continue
        teacher, student = current[match.teacher], current[match.student]
        if match_winner(match, threshold) == "student":
            # Winner first. The module-level function with env= is the supported form;
            # the TrueSkill.rate_1vs1 method is deprecated since trueskill 0.4.
            student, teacher = trueskill.rate_1vs1(student, teacher, env=env)
        else:
            teacher, student = trueskill.rate_1vs1(teacher, student, env=env)
        current[match.teacher], current[match.student] = teacher, student
    return {m: Rating(float(r.mu), float(r.sigma)) for m, r in current.items()}


def pfsp_weights(
    teacher: Rating,
    students: Sequence[Rating],
    env: trueskill.TrueSkill,
    weighting: PFSPWeighting = "var",
    gamma: float = 2.0,
    floor: float = 0.1,
) -> list[float]:
    """Sampling probabilities of each student for this teacher (they sum to 1).

    weights = (1 − floor) · f(p) / Σ f(p) + floor / n, with p = P(teacher beats student) and
    f = p(1 − p) ("var") or (1 − p)^gamma ("hard"). The uniform floor keeps every student
    reachable, so a rating that is wrong can still be corrected by play; if every f(p) is 0 the
    f part falls back to uniform.
    """
    if not students:
        raise ValueError("pfsp_weights needs at least one student")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor is a probability mass and must lie in [0, 1], got {floor}")
    if gamma <= 0.0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    p = [win_probability(teacher, s, env) for s in students]
    if weighting == "var":
        f = [q * (1.0 - q) for q in p]
    elif weighting == "hard":
        f = [(1.0 - q) ** gamma for q in p]
    else:
        raise ValueError(f"weighting must be 'var' or 'hard', got {weighting!r}")
    n, total = len(students), sum(f)
    shaped = [x / total for x in f] if total > 0.0 else [1.0 / n] * n
    return [(1.0 - floor) * x + floor / n for x in shaped]


def pfsp_pairs(
    teachers: Sequence[MemberId],
    students: Sequence[MemberId],
    ratings: Mapping[MemberId, Rating],
    env: trueskill.TrueSkill,
    rng: random.Random,
    weighting: PFSPWeighting = "var",
    gamma: float = 2.0,
    floor: float = 0.1,
) -> list[tuple[MemberId, MemberId]]:
    """One (teacher, student) pair per teacher, in ``teachers`` order, students drawn by PFSP.

    Draws are independent: two teachers may get the same student. Tasks per teacher are the
    caller's business (one pair, several tasks).
    """
    pairs = []
    for t in teachers:
        w = pfsp_weights(ratings[t], [ratings[s] for s in students], env, weighting, gamma, floor)
        pairs.append((t, rng.choices(students, weights=w, k=1)[0]))
    return pairs


def round_robin_pairs(
    teachers: Sequence[MemberId], students: Sequence[MemberId], step: int
) -> list[tuple[MemberId, MemberId]]:
    """Teacher i plays student (i + step) mod n: over n consecutive steps every pair meets once
    (for as many teachers as students). The ablation without ratings."""
    if not students:
        raise ValueError("round_robin_pairs needs at least one student")
    n = len(students)
    return [(t, students[(i + step) % n]) for i, t in enumerate(teachers)]


class SolveRateMatrix(NamedTuple):
    """Mean solve rate of each teacher's tasks (rows) by each student (columns)."""

    teachers: list[MemberId]
    students: list[MemberId]
    rho: np.ndarray
    """(n_teachers, n_students) float64, NaN where the pair played no valid task."""


def solve_rate_matrix(
    matches: Sequence[Match],
    teachers: Sequence[MemberId] | None = None,
    students: Sequence[MemberId] | None = None,
) -> SolveRateMatrix:
    """Teacher × student mean ρ over valid matches, for the pairing heatmap.

    Row and column orders are ``teachers`` / ``students`` when given (members that never played
    keep a NaN row or column), else the order of first appearance in ``matches``.
    """
    by_pair: dict[tuple[MemberId, MemberId], list[float]] = defaultdict(list)
    seen_t: dict[MemberId, None] = {}
    seen_s: dict[MemberId, None] = {}
    for m in matches:
        seen_t.setdefault(m.teacher)
        seen_s.setdefault(m.student)
        if m.valid:
            assert m.rho is not None
            by_pair[(m.teacher, m.student)].append(m.rho)
    rows = list(teachers) if teachers is not None else list(seen_t)
    cols = list(students) if students is not None else list(seen_s)
    rho = np.full((len(rows), len(cols)), np.nan)
    row_of = {t: i for i, t in enumerate(rows)}
    col_of = {s: j for j, s in enumerate(cols)}
    for (t, s), values in by_pair.items():
        if t in row_of and s in col_of:
            rho[row_of[t], col_of[s]] = float(np.mean(values))
    return SolveRateMatrix(rows, cols, rho)
