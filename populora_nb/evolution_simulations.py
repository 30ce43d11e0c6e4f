"""Evolution's replacement rules run on synthetic ratings, with no weights and no model: a lineage
for plots and tests (`simulate_lineage`), and the fairness study of a newborn's first judgement
(`newborn_fate`: among members of equal skill a child must be culled at the chance rate).

They call the very rules a run uses (`evolution.plan_replacement`, `evolution.inherit_rating`,
`matchmaking.update_ratings`); only the games are drawn here instead of played.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from populora_nb.evolution import PAPER_MIX, Lineage, MemberRating, OperatorMix, inherit_rating, plan_replacement
from populora_nb.matchmaking import Match, Rating, initial_ratings, make_trueskill, update_ratings


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
    """Replacement among members of equal skill under the real rules: each teacher plays `tasks_per_step`
    random matches a step (the same validity and solve probabilities for all), rated by `update_ratings`;
    every `every` steps `plan_replacement` replaces one member per role, the child inheriting as in
    `step.evolve`. Returns, per child, whether it was replaced at its first eligible event (among
    equals: the chance rate 1 / eligible)."""
    env = make_trueskill()
    grace = 2 * every if grace_steps is None else grace_steps
    roles = {f"{role[0].upper()}{i}": role for role in ("teacher", "student") for i in range(members_per_role)}
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
