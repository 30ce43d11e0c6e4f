"""Matchmaking: TrueSkill ratings and prioritized fictitious self-play (PopuLoRA §3); the rules and
why they rank each role by its own reward: docs/methodology.md, "Ratings follow each role's own reward".

Every member holds one TrueSkill rating. A *match* (one task, k rollouts by the matched student) is
scored as k **games per role** (`teacher_games`, `student_games`), each moving one member against an
opponent held fixed:

* the student plays the teacher as it stood before the match: a win per solved rollout, a loss per failed one;
* the teacher of a *contested* task (0 < ρ < ``threshold``) plays the student as it stood before: a win
  per failed rollout, a loss per solved one (zero-sum, so P(teacher beats student) ≈ 1 − ρ);
* the teacher of a task that teaches nothing (ρ = 0, or ρ ≥ ``threshold``) loses k games to a fixed
  *reference opponent* at the prior, of an invalid task 2k; a task never attempted plays no game.

Teachers then rank invalid < unsolvable = trivial < contested (lower ρ better), students fails all <
solves some < solves all. PFSP (AlphaStar, Vinyals et al. 2019) samples each step's pairing with weight
f(p), p = P(teacher beats student): f_var = p(1 − p) (near-balanced) or f_hard = (1 − p)^γ, as a
*matching* (every student gets as many teachers as any other, ±1). The ``trueskill`` package does the
update, always in an explicit ``trueskill.TrueSkill`` environment (`make_trueskill`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from populora_nb.config import MatchmakingConfig

if TYPE_CHECKING:
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
    """One proposed task between a teacher and its matched student, with its k rollouts."""

    teacher: MemberId
    student: MemberId
    valid: bool
    """The verifier accepted the task; invalid tasks are never shown to the student."""
    rho: float | None = None
    """The student's solve rate on the task; None when it never attempted it (always for an invalid task)."""
    rollouts: int | None = None
    """k: the student's rollouts at the task (rho is a multiple of 1/k); None only in old records."""

    def __post_init__(self) -> None:
        if not self.valid and self.rho is not None:
            raise ValueError("an invalid task is never shown to the student: its rho must be None")
        if self.rho is not None and not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must lie in [0, 1], got {self.rho!r}")
        if self.rollouts is not None:
            if self.rollouts < 1:
                raise ValueError(f"rollouts must be >= 1, got {self.rollouts}")
            if self.rho is not None and abs(self.rho * self.rollouts - round(self.rho * self.rollouts)) > 1e-9:
                raise ValueError(f"rho={self.rho!r} is not a whole number of {self.rollouts} rollouts")

    @property
    def played(self) -> bool:
        """The student attempted the task: only then may the match move the student's rating."""
        return self.valid and self.rho is not None

    @property
    def k(self) -> int:
        """The rollouts, which rating a match needs."""
        if self.rollouts is None:
            raise ValueError(
                f"match {self.teacher}-{self.student} has no rollouts: pass Match(..., rollouts=k) to rate it"
            )
        return self.rollouts

    @property
    def solved(self) -> int:
        """Rollouts the student solved (0 when it did not play)."""
        return round(self.rho * self.k) if self.rho is not None else 0


def make_trueskill(
    mu: float = MatchmakingConfig.mu,
    sigma: float = MatchmakingConfig.sigma,
    beta: float = MatchmakingConfig.beta,
    tau: float = MatchmakingConfig.tau,
    draw_probability: float = MatchmakingConfig.draw_probability,
) -> trueskill.TrueSkill:
    """A TrueSkill environment at `MatchmakingConfig`'s prior: trueskill's own, except no draws (every
    game has a winner; a draw would pull a member towards its opponent whatever its reward)."""
    import trueskill  # where used: stages and the model import this module on machines without it

    return trueskill.TrueSkill(mu=mu, sigma=sigma, beta=beta, tau=tau, draw_probability=draw_probability)


def initial_ratings(members: Sequence[MemberId], env: trueskill.TrueSkill) -> dict[MemberId, Rating]:
    """Every member at the environment's prior (mu, sigma)."""
    return {m: Rating(float(env.mu), float(env.sigma)) for m in members}


def win_probability(a: Rating, b: Rating, env: trueskill.TrueSkill) -> float:
    """P(a beats b) = Φ((μa − μb) / sqrt(2β² + σa² + σb²)).

    The two-player formula from trueskill's documentation (the package has no such function),
    without a draw margin; Φ via math.erfc (trueskill's cdf is a 1e-8 approximation).
    """
    denom = math.sqrt(2.0 * env.beta**2 + a.sigma**2 + b.sigma**2)
    z = (a.mu - b.mu) / denom
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def contested(match: Match, threshold: float = 1.0) -> bool:
    """A played task in the teacher's band, 0 < ρ < threshold: the only tasks a teacher wins games on."""
    return match.played and 0 < match.solved and (match.rho or 0.0) < threshold


class Game(NamedTuple):
    """One game a member plays in a match: won or lost, against its partner or the reference."""

    won: bool
    against: Literal["partner", "reference"]


def teacher_games(match: Match, threshold: float = 1.0) -> list[Game]:
    """The teacher's games in ``match`` by the module docstring's rules (`game_rule` names each case).
    Outcomes are spread evenly through the games (TrueSkill's sequential updates depend slightly on order)."""
    if not match.valid:
        return [Game(False, "reference")] * (2 * match.k)
    if not match.played:
        return []
    if not contested(match, threshold):
        return [Game(False, "reference")] * match.k
    return [Game(not solved, "partner") for solved in _spread(match.solved, match.k)]


def student_games(match: Match) -> list[Game]:
    """The student's games in ``match`` by the module docstring's rules (`game_rule` names each case)."""
    if not match.played:
        return []
    return [Game(solved, "partner") for solved in _spread(match.solved, match.k)]


def game_rule(match: Match, role: Literal["teacher", "student"], threshold: float = 1.0) -> str:
    """In words, the rule by which ``match`` moves ``role``'s rating: which branch of
    `teacher_games` or `student_games` made its games (module docstring), as "name: its games"."""
    if role == "teacher":
        if not match.valid:
            return "invalid task: 2k losses to the reference"
        if not match.played:
            return "not attempted: no game"
        if not contested(match, threshold):
            return "teaches nothing: ρ = 0 or ρ ≥ threshold, k losses to the reference"
        return "contested: 0 < ρ < threshold, a win per failed rollout, a loss per solved one"
    if role != "student":
        raise ValueError(f"role must be 'teacher' or 'student', got {role!r}")
    if not match.played:
        return "not played: an invalid task or one not attempted, no game"
    return "played: a win per solved rollout, a loss per failed one, against the teacher"


def _spread(j: int, k: int) -> list[bool]:
    """k flags, j of them True, spread evenly (j = 2, k = 4: F T F T)."""
    return [(i + 1) * j // k > i * j // k for i in range(k)]


def update_ratings(
    ratings: Mapping[MemberId, Rating], matches: Sequence[Match], env: trueskill.TrueSkill, threshold: float = 1.0
) -> dict[MemberId, Rating]:
    """New ratings after ``matches``; the input mapping is not modified.

    Matches and their games are applied one at a time in the order given (TrueSkill is sequential).
    A member no game moved is returned exactly as given.
    """
    import trueskill  # where used (see make_trueskill)

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold is a solve rate and must lie in (0, 1], got {threshold}")
    current = {m: env.create_rating(mu=r.mu, sigma=r.sigma) for m, r in ratings.items()}
    reference = env.create_rating(mu=env.mu, sigma=env.sigma)  # the prior, never updated
    moved: set[MemberId] = set()
    for match in matches:
        t, s = match.teacher, match.student
        for member in (t, s):
            if member not in current:
                raise KeyError(f"member {member!r} has no rating; start it with initial_ratings")
        if t == s:
            raise ValueError(f"member {t!r} cannot play itself")
        before = {t: current[s], s: current[t]}  # each side plays the other as it stood before the match
        for member, games in ((t, teacher_games(match, threshold)), (s, student_games(match))):
            for game in games:
                opponent = before[member] if game.against == "partner" else reference
                # One rate_1vs1 (winner first), keeping only the member's side: the opponent does not move
                # (trueskill's weights=(1, 0) would clamp the 0 to 1e-4 and still inflate its sigma).
                if game.won:
                    current[member] = trueskill.rate_1vs1(current[member], opponent, env=env)[0]
                else:
                    current[member] = trueskill.rate_1vs1(opponent, current[member], env=env)[1]
            if games:
                moved.add(member)
    # Unmoved ratings as given: trueskill's (pi, tau) round trip alone can change mu in the last bit.
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
    f = p(1 − p) ("var") or (1 − p)^gamma ("hard"). The floor keeps every student reachable so a
    wrong rating can be corrected by play; if every f(p) is 0 the f part is uniform.
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

    Independent draws would leave students without a teacher (at 4 x 4, 1 − 4!/4⁴ of steps), so each
    student has a capacity: ⌊n_T/n_S⌋ teachers and n_T mod n_S of them one more (drawn); with fewer
    teachers than students, one each. Teachers draw in a random order from the students with
    capacity left, their ``pfsp_weights`` renormalised over those, so PFSP's preferred pairs are
    still drawn more.
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
    """The ablation without ratings: teacher i plays student (i + step) mod n, so every pair meets in n steps."""
    if not students:
        raise ValueError("round_robin_pairs needs at least one student")
    n = len(students)
    return [(t, students[(i + step) % n]) for i, t in enumerate(teachers)]
