"""Matchmaking: TrueSkill ratings and prioritized fictitious self-play (PopuLoRA §3, issue 5).

Every member, teacher or student, holds one TrueSkill rating on a shared scale. A *match* is one
proposed task. Its outcome follows the teacher reward (``rewards.teacher_reward``: −1 invalid,
0 when ρ = 0, else 1 − ρ), so that a rating ranks members the way training rewards them:

* valid, 0 < ρ < ``threshold``: the teacher wins. The task is learnable (some rollout solved it)
  and mostly failed: the only case the teacher reward pays more than 1 − threshold for.
* valid, ρ = 0 or ρ ≥ ``threshold``: the student wins. ρ = 0 earns the teacher 0 (an unsolvable
  task teaches nothing), ρ ≥ threshold earns it at most 1 − threshold.
* invalid: the teacher loses (its −1 reward) to a fixed *reference opponent* at the prior rating,
  never updated. The student never saw the task, so its rating does not move.
* valid but never attempted (ρ is None): no outcome at all. ``reward_samples`` gives such a task
  no reward, and a rating outcome would invent one; the student did not play either.

PFSP (AlphaStar, Vinyals et al. 2019) then samples each step's pairing with weight f(p), p the
rated probability that the teacher beats that student: f_var(p) = p(1 − p) favours near-balanced
matchups, f_hard(p) = (1 − p)^γ favours students the teacher tends to lose to. The draw is a
*matching*: every student gets as many teachers as any other (±1), so no student sits out a step
while another plays two teachers.

The ``trueskill`` package does the Bayesian update; every function takes an explicit
``trueskill.TrueSkill`` environment (``make_trueskill``) and never touches the package's global
one. Ratings travel as a small frozen ``Rating`` so records and tests need no trueskill objects.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import trueskill

MemberId = str
PFSPWeighting = Literal["var", "hard"]


@dataclass(frozen=True)
class Rating:
    """A member's TrueSkill belief: skill ~ N(mu, sigma²)."""

    mu: float
    sigma: float


@dataclass(frozen=True)
class Match:
    """One proposed task between a teacher and its matched student."""

    teacher: MemberId
    student: MemberId
    valid: bool
    """The verifier accepted the task; invalid tasks are never shown to the student."""
    rho: float | None = None
    """The student's solve rate on the task; None when the student never attempted it (always so
    for an invalid task)."""

    def __post_init__(self) -> None:
        if not self.valid and self.rho is not None:
            raise ValueError("an invalid task is never shown to the student: its rho must be None")
        if self.rho is not None and not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must lie in [0, 1], got {self.rho!r}")

    @property
    def played(self) -> bool:
        """The student attempted the task: only then may the match move the student's rating."""
        return self.valid and self.rho is not None


def make_trueskill(
    mu: float = 25.0,
    sigma: float = 25.0 / 3.0,
    beta: float = 25.0 / 6.0,
    tau: float = 25.0 / 300.0,
    draw_probability: float = 0.0,
) -> trueskill.TrueSkill:
    """A TrueSkill environment with the package's defaults, except no draws.

    A match outcome is a win or a loss (``match_winner``), so ``draw_probability`` is 0.
    """
    return trueskill.TrueSkill(mu=mu, sigma=sigma, beta=beta, tau=tau, draw_probability=draw_probability)


def initial_ratings(members: Sequence[MemberId], env: trueskill.TrueSkill) -> dict[MemberId, Rating]:
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


Winner = Literal["teacher", "student", "reference"]


def reference_rating(env: trueskill.TrueSkill) -> Rating:
    """The fixed opponent an invalid task is lost to: the prior (mu, sigma), never updated."""
    return Rating(float(env.mu), float(env.sigma))


def match_winner(match: Match, threshold: float = 0.5) -> Winner | None:
    """Who wins ``match`` (see the module docstring): "teacher" when 0 < ρ < threshold, "student"
    when ρ = 0 or ρ ≥ threshold, "reference" for an invalid task, None for a valid task the
    student never attempted (it earns no reward, so it has no outcome)."""
    if not match.valid:
        return "reference"
    if match.rho is None:
        return None
    return "teacher" if 0.0 < match.rho < threshold else "student"


def update_ratings(
    ratings: Mapping[MemberId, Rating],
    matches: Sequence[Match],
    env: trueskill.TrueSkill,
    threshold: float = 0.5,
) -> dict[MemberId, Rating]:
    """New ratings after ``matches``; the input mapping is not modified.

    Matches are applied one at a time in the order given (TrueSkill updates are sequential, so
    order matters slightly; the loop passes them in proposal order: teacher by teacher, task by
    task). A match the student did not play leaves the student's rating exactly as it was.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is a solve rate and must lie in [0, 1], got {threshold}")
    current = {m: env.create_rating(mu=r.mu, sigma=r.sigma) for m, r in ratings.items()}
    reference = env.create_rating(mu=env.mu, sigma=env.sigma)  # reference_rating(env), never updated
    moved: set[MemberId] = set()
    for match in matches:
        t, s = match.teacher, match.student
        for member in (t, s):
            if member not in current:
                raise KeyError(f"member {member!r} has no rating; start it with initial_ratings")
        if t == s:
            raise ValueError(f"member {t!r} cannot play itself")
        winner = match_winner(match, threshold)
        # Winner first. The module-level function with env= is the supported form;
        # the TrueSkill.rate_1vs1 method is deprecated since trueskill 0.4.
        if winner == "reference":
            # A reference opponent rather than trueskill's partial-play weights (rate(...,
            # weights=[(1,), (0,)])): trueskill clamps a weight of 0 to 1e-4, which scales the
            # student's performance to ~0 (a teacher at the prior then drops from 25 to ~2.7 after
            # one loss), and its tau still inflates the student's sigma. The prior is the
            # reference, not the partner's rating, so an invalid task costs the same whoever the
            # partner was.
            _, current[t] = trueskill.rate_1vs1(reference, current[t], env=env)
            moved.add(t)
        elif winner == "student":
            current[s], current[t] = trueskill.rate_1vs1(current[s], current[t], env=env)
            moved.update((t, s))
        elif winner == "teacher":
            current[t], current[s] = trueskill.rate_1vs1(current[t], current[s], env=env)
            moved.update((t, s))
    # A rating that no match moved is returned as given: trueskill stores a Gaussian as
    # (pi, tau) = (1/sigma², mu/sigma²), and that round trip alone can change mu in the last bit.
    return {m: Rating(float(current[m].mu), float(current[m].sigma)) if m in moved else r for m, r in ratings.items()}


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
    """One (teacher, student) pair per teacher, in ``teachers`` order: a PFSP-weighted matching.

    Independent draws per teacher collide: at equal ratings with 4 teachers and 4 students, 91%
    of steps leave some student without a teacher (1 − 4!/4⁴), so it neither trains on fresh
    tasks nor gets rated. Instead each student has a capacity: with n_T ≥ n_S teachers, ⌊n_T/n_S⌋
    each and n_T mod n_S one more (which ones is part of the draw); with fewer teachers than
    students, one each, so every teacher gets a distinct student. Teachers draw in a random order
    (so no teacher always picks first) from the students with capacity left, with their
    ``pfsp_weights`` renormalised over those students. Over many steps, pairs that PFSP weights
    more are still drawn more; where teachers all prefer the same student ("hard", one strong
    student), it takes only its share and the rest go to their next choices. Tasks per teacher
    are the caller's business (one pair, several tasks).
    """
    if not students:
        raise ValueError("pfsp_pairs needs at least one student")
    base, extra = divmod(len(teachers), len(students))
    load = dict.fromkeys(students, 0)
    order = list(teachers)
    rng.shuffle(order)
    partner: dict[MemberId, MemberId] = {}
    for t in order:
        # A student may take one more teacher while below base, or reach base + 1 while spare
        # slots remain; capacity then sums to exactly n_T, so no teacher is ever left out.
        is_open = [load[s] < base or (load[s] == base and extra > 0) for s in students]
        w = pfsp_weights(ratings[t], [ratings[s] for s in students], env, weighting, gamma, floor)
        open_w = [wi if o else 0.0 for wi, o in zip(w, is_open)]
        if sum(open_w) <= 0.0:  # floor = 0 and every open student has f(p) = 0: none is preferred
            open_w = [float(o) for o in is_open]
        s = rng.choices(students, weights=open_w, k=1)[0]
        if load[s] == base:
            extra -= 1
        load[s] += 1
        partner[t] = s
    return [(t, partner[t]) for t in teachers]


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
    """(n_teachers, n_students) float64, NaN where the pair played no match."""


def solve_rate_matrix(
    matches: Sequence[Match],
    teachers: Sequence[MemberId] | None = None,
    students: Sequence[MemberId] | None = None,
) -> SolveRateMatrix:
    """Teacher × student mean ρ over played matches (valid and attempted), for the pairing heatmap.

    Row and column orders are ``teachers`` / ``students`` when given (members that never played
    keep a NaN row or column), else the order of first appearance in ``matches``.
    """
    by_pair: dict[tuple[MemberId, MemberId], list[float]] = defaultdict(list)
    seen_t: dict[MemberId, None] = {}
    seen_s: dict[MemberId, None] = {}
    for m in matches:
        seen_t.setdefault(m.teacher)
        seen_s.setdefault(m.student)
        if m.played:
            assert m.rho is not None  # played implies it
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
