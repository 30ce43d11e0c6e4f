"""Replacement by evolution (PopuLoRA): "every few update steps, the weakest members of the teacher
sub-population and the student sub-population are replaced through LoRA weight-space evolution".

This module decides who is replaced, by which children of whom, and keeps the lineage; the weight-
space operators themselves live in `operators.py`. Everything here is pure and works on plain data
(member ids, roles, TrueSkill μ and σ) with an explicit `random.Random`, so the loop can call it and
tests can check it without a model.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch

from populora_nb.config import PAPER_OPERATORS, EvolutionConfig, MatchmakingConfig, check_operator_mix
from populora_nb.lowrank import LoRAFactors
from populora_nb.operators import OPERATORS, arity


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


def tournament_select(candidates: Sequence[MemberRating], rng: random.Random, size: int, k: float) -> MemberRating:
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
    num_replaced: int = EvolutionConfig.replace_per_role,
    mix: OperatorMix = PAPER_MIX,
    tournament_size: int,
    k: float = EvolutionConfig.fitness_k,
    grace_steps: int,
) -> list[Lineage]:
    """In each role, the `num_replaced` weakest members by μ − kσ are replaced by children of
    parents chosen by tournament among the rest of that role, with operators drawn from `mix`.

    Children younger than `grace_steps` are not replaced (founders never are in grace); it and
    `tournament_size` have no default, so a simulation judges the run's rules (docs/methodology.md,
    "Evolution gives a newborn a fair chance": why grace is two intervals). Children are named
    "{role}-s{step}-{j}"; crossover parents come fitter first, drawn only when a role has two.
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
    prior: tuple[float, float] = (MatchmakingConfig.mu, MatchmakingConfig.sigma),
) -> tuple[float, float]:
    """A child's starting (μ, σ): its parents' mean μ with the larger parent σ times
    `sigma_inflation`, capped at the prior σ (never less known than a stranger). The default 1 keeps
    the parents' σ: an inflated σ makes the child's μ move faster in its first games, so among equals
    it is culled more often than chance (`newborn_fate`)."""
    mu = sum(m for m, _ in parents) / len(parents)
    return mu, min(max(s for _, s in parents) * sigma_inflation, prior[1])


def apply_operator(record: Lineage, parents: Sequence[LoRAFactors], *, generator: torch.Generator) -> LoRAFactors:
    """The child's factors for a planned birth (`operators.OPERATORS`); `parents` in the record's order."""
    if len(parents) != arity(record.operator):
        raise ValueError(f"{record.operator} takes {arity(record.operator)} parents, got {len(parents)}")
    return OPERATORS[record.operator](*parents, generator=generator)


def ancestors(member_id: str, records: Sequence[Lineage]) -> set[str]:
    """Every member that `member_id` descends from."""
    tree = {r.child: r.parents for r in records}  # the lineage tree as child -> parents
    found: set[str] = set()
    stack = list(tree.get(member_id, ()))
    while stack:
        parent = stack.pop()
        if parent not in found:
            found.add(parent)
            stack.extend(tree.get(parent, ()))
    return found
