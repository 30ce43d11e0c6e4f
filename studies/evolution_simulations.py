"""Evolution's replacement rules run on synthetic ratings, with no weights and no model: a lineage
for notebook 04's plots and tests (`simulate_lineage`), and the fairness study of a newborn's first
judgement (`newborn_fate`, `inheritance_edge`: among members of equal skill a child must be culled at
the chance rate; `populora_nb.analysis.survival` states its result).

They call the very rules a run uses (`evolution.plan_replacement`, `evolution.inherit_rating`,
`matchmaking.update_ratings`) with the numbers a run uses, read from its config (tournament size,
grace, fitness k, ...): only the games are drawn here instead of played.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from populora_nb.analysis.seed_stats import t_interval
from populora_nb.config import EvolutionConfig, ExperimentConfig
from populora_nb.evolution import Lineage, MemberRating, OperatorMix, inherit_rating, plan_replacement
from populora_nb.matchmaking import Match, Rating, initial_ratings, make_trueskill, update_ratings


def plan_by_config(
    members: Sequence[MemberRating], ec: EvolutionConfig, *, step: int, rng: random.Random
) -> list[Lineage]:
    """`plan_replacement` with every rule taken from the run's evolution config (the one source)."""
    return plan_replacement(
        list(members),
        step=step,
        rng=rng,
        num_replaced=ec.replace_per_role,
        mix=OperatorMix(ec.operators),
        tournament_size=ec.tournament_size,
        k=ec.fitness_k,
        grace_steps=ec.grace,
    )


def simulate_lineage(
    members: Sequence[MemberRating],
    evolution: EvolutionConfig,
    *,
    generations: int,
    rng: random.Random,
    drift: float = 1.0,
    sigma_decay: float = 0.9,
) -> list[Lineage]:
    """A synthetic run for plots and tests under ``evolution``'s rules (interval, grace, tournament
    size, fitness k, members replaced, operator mix, σ inflation): between evolution events each μ
    takes a Gaussian step of size `drift` and σ shrinks by `sigma_decay` per update step, to a floor
    of 1 (standing in for training and games); children inherit ratings through `inherit_rating`.
    No weights."""
    ec = evolution
    population = {m.member_id: m for m in members}
    records: list[Lineage] = []
    for generation in range(1, generations + 1):
        step = generation * ec.every
        population = {
            i: replace(m, mu=m.mu + rng.gauss(0.0, drift), sigma=max(1.0, m.sigma * sigma_decay**ec.every))
            for i, m in population.items()
        }
        births = plan_by_config(list(population.values()), ec, step=step, rng=rng)
        for birth in births:
            parents = [(population[p].mu, population[p].sigma) for p in birth.parents]
            mu, sigma = inherit_rating(parents, sigma_inflation=ec.sigma_inflation)
            del population[birth.replaced]
            population[birth.child] = MemberRating(birth.child, birth.role, mu, sigma, born=step)
        records.extend(births)
    return records


@dataclass(frozen=True)
class NewbornFate:
    """One child at the first evolution event where it could be replaced."""

    child: str
    replaced: bool
    eligible: int
    """Members of its role that event could replace, itself included."""
    culled: int
    """Members of its role that event replaced: a peer's chance to survive it is 1 − culled / eligible."""

    @property
    def chance(self) -> float:
        """The survival probability of a member exchangeable with its peers at that event."""
        return 1.0 - self.culled / self.eligible


def newborn_fate(
    config: ExperimentConfig,
    *,
    events: int,
    rng: random.Random,
    solve_probability: float = 0.5,
    valid_probability: float = 0.8,
) -> list[NewbornFate]:
    """Replacement among members of equal skill under the rules and numbers of ``config`` (members per
    role, tasks per step, rollouts, TrueSkill prior, band threshold, and evolution's interval, grace,
    tournament size, fitness k, members replaced and σ inflation): each teacher plays its step's tasks
    against a random student (the same validity and solve probabilities for all), rated by
    `update_ratings`; every ``evolution.every`` steps `plan_replacement` replaces the weakest, the
    child inheriting its parents' rating as in `step.evolve`. Returns, per child, whether it was
    replaced at its first eligible event (a peer's chance: `NewbornFate.chance`)."""
    ec, mm = config.evolution, config.matchmaking
    env = make_trueskill(mm.mu, mm.sigma, mm.beta, mm.tau, mm.draw_probability)
    tasks_per_step, rollouts = config.rl.teacher_proposals * len(config.tasks.kinds), config.rl.rollouts
    sizes = {"teacher": config.population.n_teachers, "student": config.population.n_students}
    roles = {f"{role[0].upper()}{i}": role for role, n in sizes.items() for i in range(n)}
    ratings = initial_ratings(list(roles), env)
    born: dict[str, int | None] = dict.fromkeys(roles)  # founders: None
    waiting: dict[str, str] = {}  # child -> role, not yet judged at an eligible event
    fates: list[NewbornFate] = []
    step = 0
    while len(fates) < events:
        for _ in range(ec.every):
            students = [m for m, r in roles.items() if r == "student"]
            matches = []
            for t in (m for m, r in roles.items() if r == "teacher"):
                s = rng.choice(students)
                for _ in range(tasks_per_step):
                    if rng.random() < valid_probability:
                        solved = sum(rng.random() < solve_probability for _ in range(rollouts))
                        matches.append(Match(t, s, True, solved / rollouts, rollouts))
                    else:
                        matches.append(Match(t, s, False, rollouts=rollouts))
            ratings = update_ratings(ratings, matches, env, mm.win_threshold)
            step += 1
        members = [MemberRating(m, roles[m], ratings[m].mu, ratings[m].sigma, born[m]) for m in roles]
        plan = plan_by_config(members, ec, step=step, rng=rng)
        replaced = {b.replaced for b in plan}
        for child, role in list(waiting.items()):
            if not next(m for m in members if m.member_id == child).in_grace(step, ec.grace):
                eligible = sum(1 for m in members if m.role == role and not m.in_grace(step, ec.grace))
                culled = sum(1 for b in plan if b.role == role)
                fates.append(NewbornFate(child, child in replaced, eligible, culled))
                del waiting[child]
        for birth in plan:
            parents = [(ratings[p].mu, ratings[p].sigma) for p in birth.parents]
            mu, sigma = inherit_rating(parents, sigma_inflation=ec.sigma_inflation, prior=(mm.mu, mm.sigma))
            del ratings[birth.replaced], roles[birth.replaced], born[birth.replaced]
            waiting.pop(birth.replaced, None)  # replaced before it was ever judged: only without grace
            ratings[birth.child] = Rating(mu, sigma)
            roles[birth.child], born[birth.child], waiting[birth.child] = birth.role, step, birth.role
    return fates[:events]


@dataclass(frozen=True)
class InheritanceEdge:
    """How much more often than a peer's chance a child of equal skill survives its first eligible
    event, having inherited its tournament-chosen parents' rating: one value per simulation seed."""

    per_seed: tuple[float, ...]
    """Each seed's survival rate of its children minus their mean chance 1 − R/E."""
    children: int
    """Children judged per seed."""

    @property
    def interval(self) -> tuple[float, float, float]:
        """(mean, low, high): the 95% t-interval over seeds."""
        return t_interval(self.per_seed)

    def text(self) -> str:
        mean, low, high = self.interval
        return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] ({len(self.per_seed)} seeds x {self.children} children)"


def inheritance_edge(config: ExperimentConfig, *, seeds: Sequence[int], events: int) -> InheritanceEdge:
    """`newborn_fate` under ``config``'s rules, once per seed: survival − chance of ``events`` children
    of equal skill (module docstring)."""
    edges = []
    for seed in seeds:
        fates = newborn_fate(config, events=events, rng=random.Random(seed))
        edges.append(float(np.mean([(not f.replaced) - f.chance for f in fates])))
    return InheritanceEdge(tuple(edges), events)
