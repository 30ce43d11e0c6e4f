"""Replacement by evolution (PopuLoRA): "every few update steps, the weakest members of the teacher
sub-population and the student sub-population are replaced through LoRA weight-space evolution".

This module decides who is replaced, by which children of whom, and keeps the lineage; the weight-
space operators themselves live in `operators.py`. Everything here is pure and works on plain data
(member ids, roles, TrueSkill μ and σ) with an explicit `random.Random`, so the loop can call it and
tests can check it without a model.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

import torch

from populora_nb.config import PAPER_OPERATORS, MatchmakingConfig, check_operator_mix
from populora_nb.lowrank import LoRAFactors
from populora_nb.matchmaking import Rating
from populora_nb.operators import (
    OPERATORS,
    Operator,
    arity,
)

TRUESKILL_PRIOR = (MatchmakingConfig.mu, MatchmakingConfig.sigma)
"""The rating prior (μ, σ) of `MatchmakingConfig`, the one place it is defined."""


@dataclass(frozen=True)
class MemberRating:
    """What replacement needs to know about one member."""

    member_id: str
    role: str  # "teacher" or "student" (any label: replacement works within each role)
    mu: float
    sigma: float
    born: int | None = None
    """The step at which evolution made the member; None for a founding member (never in grace)."""

    def in_grace(self, step: int, grace_steps: int) -> bool:
        """A child younger than `grace_steps` at `step` is not replaced."""
        return self.born is not None and step - self.born < grace_steps


def fitness(mu: float, sigma: float, k: float = 3.0) -> float:
    """TrueSkill's conservative skill μ − kσ: with k = 3 the true skill exceeds it with ~99.9%
    probability, so a lucky newcomer with few games does not outrank a proven member."""
    return mu - k * sigma


@dataclass(frozen=True)
class OperatorMix:
    """Relative weights of the operators drawn for children (names from `operators.OPERATORS`)."""

    weights: Mapping[str, float]

    def __post_init__(self) -> None:
        check_operator_mix(self.weights)  # names and weights, as a config's are checked
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))

    def sample(self, rng: random.Random, max_parents: int = 2) -> str:
        """One operator name, restricted to those needing at most `max_parents` parents."""
        names = [n for n, w in self.weights.items() if w > 0 and arity(n) <= max_parents]
        if not names:
            raise ValueError(f"the mix has no operator with ≤ {max_parents} parents; add a mutation to it")
        return rng.choices(names, weights=[self.weights[n] for n in names])[0]


PAPER_MIX = OperatorMix(dict.fromkeys(PAPER_OPERATORS, 1.0))
"""The paper's default mix (`config.PAPER_OPERATORS`, equally likely)."""


def tournament_select(
    candidates: Sequence[MemberRating], rng: random.Random, size: int = 3, k: float = 3.0
) -> MemberRating:
    """The fittest of `size` candidates drawn uniformly without replacement (all if fewer)."""
    contenders = rng.sample(list(candidates), min(size, len(candidates)))
    return max(contenders, key=lambda m: (fitness(m.mu, m.sigma, k), m.member_id))


@dataclass(frozen=True)
class Lineage:
    """One child's birth record; the records of a run form its lineage tree."""

    child: str
    parents: tuple[str, ...]  # one for a mutation, two for a crossover (fitter first)
    operator: str
    step: int
    role: str
    replaced: str  # the member whose slot the child takes


def plan_replacement(
    members: Sequence[MemberRating],
    *,
    step: int,
    rng: random.Random,
    num_replaced: int = 1,
    mix: OperatorMix = PAPER_MIX,
    tournament_size: int = 3,
    k: float = 3.0,
    grace_steps: int = 0,
) -> list[Lineage]:
    """In each role, the `num_replaced` weakest members by μ − kσ are replaced by children of
    parents chosen by tournament among the rest of that role, with operators drawn from `mix`.

    Children younger than `grace_steps` are not replaced (founding members never are in grace, so
    the first event replaces as any other does). A child starts with an inflated σ
    (`inherit_rating`), so its μ − kσ is low until its own games shrink σ; judged at the very next
    event it is the weakest by construction. The
    config's default grace is two evolution intervals: a child trains and plays through one whole
    interval, and is first judged at the second event after its birth, when its σ has come down
    to its peers' (every rollout is a rating game, so a member plays tens of games per interval)
    and its μ reflects its own play. `newborn_fate` measures that a newborn of equal skill is then
    culled at the chance rate. Children are named "{role}-s{step}-{j}". Crossover parents come
    fitter first; a crossover is only drawn when the role has two possible parents.
    """
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError("member ids must be unique")
    records: list[Lineage] = []
    for role in dict.fromkeys(m.role for m in members):  # roles in first-seen order
        pool = sorted((m for m in members if m.role == role), key=lambda m: (fitness(m.mu, m.sigma, k), m.member_id))
        if num_replaced >= len(pool):
            raise ValueError(f"role {role!r} has {len(pool)} members; num_replaced={num_replaced} must be smaller")
        weakest = [m for m in pool if not m.in_grace(step, grace_steps)][:num_replaced]
        survivors = [m for m in pool if m not in weakest]
        for j, weak in enumerate(weakest):
            operator = mix.sample(rng, max_parents=min(2, len(survivors)))
            first = tournament_select(survivors, rng, tournament_size, k)
            parents = [first]
            if arity(operator) == 2:
                parents.append(tournament_select([m for m in survivors if m is not first], rng, tournament_size, k))
                parents.sort(key=lambda m: fitness(m.mu, m.sigma, k), reverse=True)
            child = f"{role}-s{step}-{j}"
            records.append(Lineage(child, tuple(p.member_id for p in parents), operator, step, role, weak.member_id))
    return records


def inherit_rating(
    parents: Sequence[tuple[float, float]],
    *,
    sigma_inflation: float = 1.0,
    prior: tuple[float, float] = TRUESKILL_PRIOR,
    from_prior: bool = False,
) -> tuple[float, float]:
    """A child's starting (μ, σ): its parents' mean μ with the larger parent σ times
    `sigma_inflation`, capped at the prior σ (never less known than a stranger); or the prior itself
    when `from_prior`. The default 1 keeps the parents' σ: an inflated σ makes the child's μ move
    faster in its first games, so among equals it lands in the bottom tail, and is culled, more
    often than chance (`newborn_fate`; the numbers are in `EvolutionConfig.sigma_inflation`)."""
    if from_prior:
        return prior
    mu = sum(m for m, _ in parents) / len(parents)
    return mu, min(max(s for _, s in parents) * sigma_inflation, prior[1])


def apply_operator(
    record: Lineage,
    parents: Sequence[LoRAFactors],
    *,
    generator: torch.Generator,
    registry: Mapping[str, Operator] = OPERATORS,
) -> LoRAFactors:
    """The child's factors for a planned birth; `parents` in the record's order. Operator hyper-
    parameters come from `registry` (e.g. a copy of OPERATORS with functools.partial entries)."""
    if len(parents) != arity(record.operator):
        raise ValueError(f"{record.operator} takes {arity(record.operator)} parents, got {len(parents)}")
    return registry[record.operator](*parents, generator=generator)


def simulate_lineage(
    members: Sequence[MemberRating],
    *,
    generations: int,
    every: int,
    rng: random.Random,
    num_replaced: int = 1,
    mix: OperatorMix = PAPER_MIX,
    drift: float = 1.0,
    sigma_decay: float = 0.9,
    grace_steps: int = 0,
) -> list[Lineage]:
    """A synthetic run for plots and tests: between evolution events each μ takes a Gaussian step
    of size `drift` and σ shrinks by `sigma_decay` per update step, to a floor of 1 (standing in
    for training and games); children inherit ratings through `inherit_rating`. No weights."""
    population = {m.member_id: m for m in members}
    records: list[Lineage] = []
    for generation in range(1, generations + 1):
        step = generation * every
        population = {
            i: replace(m, mu=m.mu + rng.gauss(0.0, drift), sigma=max(1.0, m.sigma * sigma_decay**every))
            for i, m in population.items()
        }
        births = plan_replacement(
            list(population.values()), step=step, rng=rng, num_replaced=num_replaced, mix=mix, grace_steps=grace_steps
        )
        for birth in births:
            mu, sigma = inherit_rating([(population[p].mu, population[p].sigma) for p in birth.parents])
            del population[birth.replaced]
            population[birth.child] = MemberRating(birth.child, birth.role, mu, sigma, born=step)
        records.extend(births)
    return records


@dataclass(frozen=True)
class NewbornFate:
    """One child at the first evolution event where it could be replaced."""

    child: str
    replaced: bool
    eligible: int  # members of its role that event could replace (the chance rate is num_replaced / eligible)


def newborn_fate(
    *,
    events: int,
    every: int,
    rng: random.Random,
    members_per_role: int = 4,
    rollouts: int = 4,
    tasks_per_step: int = 4,
    solve_probability: float = 0.5,
    valid_probability: float = 0.8,
    grace_steps: int | None = None,
    sigma_inflation: float = 1.0,
    k: float = 3.0,
) -> list[NewbornFate]:
    """Replacement among members of equal skill, with the real rating rule: every step each teacher
    plays `tasks_per_step` matches against a randomly matched student (valid with
    `valid_probability`, each of `rollouts` rollouts solved with `solve_probability`, the same for
    everyone), rated by `matchmaking.update_ratings`; every `every` steps `plan_replacement` (grace
    `grace_steps`, default 2 × every) replaces one member per role and the child inherits its
    parents' rating as `loop.evolve` does. Returns, for each child, whether it was replaced at its
    first eligible event. Among equals that should happen at the chance rate 1 / eligible."""
    from populora_nb.matchmaking import Match, initial_ratings, make_trueskill, update_ratings

    env = make_trueskill()
    grace = 2 * every if grace_steps is None else grace_steps
    roles = {f"T{i}": "teacher" for i in range(members_per_role)} | {
        f"S{i}": "student" for i in range(members_per_role)
    }
    ratings = initial_ratings(list(roles), env)
    born: dict[str, int | None] = dict.fromkeys(roles)  # founders: None
    waiting: dict[str, str] = {}  # child -> role, not yet judged at an eligible event
    fates: list[NewbornFate] = []
    step = 0
    while len(fates) < events:
        for _ in range(every):
            teachers = [m for m, r in roles.items() if r == "teacher"]
            students = [m for m, r in roles.items() if r == "student"]
            rng.shuffle(students)
            matches = []
            for t, s in zip(teachers, students):
                for _ in range(tasks_per_step):
                    if rng.random() < valid_probability:
                        solved = sum(rng.random() < solve_probability for _ in range(rollouts))
                        matches.append(Match(t, s, True, solved / rollouts, rollouts))
                    else:
                        matches.append(Match(t, s, False, rollouts=rollouts))
            ratings = update_ratings(ratings, matches, env)
            step += 1
        members = [MemberRating(m, roles[m], ratings[m].mu, ratings[m].sigma, born[m]) for m in roles]
        plan = plan_replacement(members, step=step, rng=rng, grace_steps=grace, k=k)
        replaced = {b.replaced for b in plan}
        for child, role in list(waiting.items()):
            if not next(m for m in members if m.member_id == child).in_grace(step, grace):
                eligible = sum(1 for m in members if m.role == role and not m.in_grace(step, grace))
                fates.append(NewbornFate(child, child in replaced, eligible))
                del waiting[child]
        for birth in plan:
            parents = [(ratings[p].mu, ratings[p].sigma) for p in birth.parents]
            mu, sigma = inherit_rating(parents, sigma_inflation=sigma_inflation, prior=(env.mu, env.sigma))
            del ratings[birth.replaced], roles[birth.replaced], born[birth.replaced]
            waiting.pop(birth.replaced, None)  # replaced before it was ever judged: cannot happen with grace
            ratings[birth.child] = Rating(mu, sigma)
            roles[birth.child], born[birth.child], waiting[birth.child] = birth.role, step, birth.role
    return fates[:events]


def lineage_parents(records: Sequence[Lineage]) -> dict[str, tuple[str, ...]]:
    """The lineage tree as child → parents."""
    return {r.child: r.parents for r in records}


def ancestors(member_id: str, records: Sequence[Lineage]) -> set[str]:
    """Every member that `member_id` descends from."""
    tree = lineage_parents(records)
    found: set[str] = set()
    stack = list(tree.get(member_id, ()))
    while stack:
        parent = stack.pop()
        if parent not in found:
            found.add(parent)
            stack.extend(tree.get(parent, ()))
    return found


def retention_curves(
    parent: LoRAFactors,
    partner: LoRAFactors,
    *,
    train_and_score: Callable[[LoRAFactors, int], Sequence[float]],
    num_steps: int = 20,
    operators: Sequence[str] = tuple(OPERATORS),
    seed: int = 0,
    registry: Mapping[str, Operator] = OPERATORS,
) -> dict[str, list[float]]:
    """The retention experiment: for each operator, a child of the trained `parent` (with
    `partner` as second parent for crossovers, `parent` counted fitter), retrained by
    `train_and_score(child, num_steps)`, which returns the reward before training and after each
    step (num_steps + 1 values). Each operator's generator is seeded from (seed, name), so adding
    an operator changes no other curve. copy_parent and linear_0_5 in `operators` are the controls."""
    device = next(iter(parent.values())).A.device
    curves = {}
    for name in operators:
        generator = torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        child = registry[name](*(parent, partner)[: arity(name)], generator=generator)
        curves[name] = [float(x) for x in train_and_score(child, num_steps)]
    return curves
