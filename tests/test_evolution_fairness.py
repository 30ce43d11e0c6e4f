"""Evolution gives a newborn a fair chance (issues #27, #51): among members of equal skill, rated by the
real rating rule under the config's own replacement rules, a child is replaced at its first eligible
event no more often than chance, and the chance the report states is an equal-skill child's."""

import math
import random

import pytest

from populora_nb.analysis.survival import ChildJudgement, Survival
from populora_nb.config import load_config
from populora_nb.evolution import MemberRating
from studies import evolution_simulations
from studies.evolution_simulations import inheritance_edge, newborn_fate, simulate_lineage


def _culled_rate_and_bound(fates) -> tuple[float, float]:
    """The newborns' replacement rate, and the one-sided 99% binomial upper bound of the chance rate."""
    n = len(fates)
    rate = sum(f.replaced for f in fates) / n
    chance = sum(f.culled / f.eligible for f in fates) / n
    return rate, chance + 2.326 * math.sqrt(chance * (1 - chance) / n)


def test_a_newborn_of_equal_skill_is_culled_no_more_often_than_chance():
    config = load_config("smoke", {"evolution.every": 5})
    fates = newborn_fate(config, events=400, rng=random.Random(0))
    assert len(fates) == 400 and all(f.eligible == 3 and f.culled == 1 for f in fates)  # last child in grace
    rate, bound = _culled_rate_and_bound(fates)
    assert rate <= bound, (rate, bound)


def test_an_inflated_sigma_culls_newborns_above_chance():
    """The test above can fail: a child whose sigma is doubled (the earlier default) moves faster
    in its first games and lands in the bottom tail more often."""
    config = load_config("smoke", {"evolution.every": 5, "evolution.sigma_inflation": 2.0})
    rate, bound = _culled_rate_and_bound(newborn_fate(config, events=400, rng=random.Random(0)))
    assert rate > bound, (rate, bound)


def test_grace_is_two_evolution_intervals_by_default():
    ec = load_config("smoke").evolution
    assert ec.grace == 2 * ec.every and ec.sigma_inflation == 1.0
    assert load_config("smoke", {"evolution.grace_steps": 3}).evolution.grace == 3


def test_the_simulations_replace_by_the_configs_tournament_size_grace_and_fitness(monkeypatch):
    """Issue #51: the simulations called plan_replacement with its own default tournament of 3 (runs:
    the config's 2) and simulate_lineage with grace 0 (runs: 2 x every). Every call now carries the
    config's values, whatever they are."""
    calls = []
    real = evolution_simulations.plan_replacement

    def spy(members, **kwargs):
        calls.append(kwargs)
        return real(members, **kwargs)

    monkeypatch.setattr(evolution_simulations, "plan_replacement", spy)
    config = load_config("smoke", {"evolution.every": 3, "evolution.tournament_size": 1, "evolution.fitness_k": 2.0})
    newborn_fate(config, events=4, rng=random.Random(0))
    founders = [MemberRating(f"{r}-{i}", r, 25.0, 25 / 3) for r in ("teacher", "student") for i in range(4)]
    simulate_lineage(founders, config.evolution, generations=3, rng=random.Random(0))
    assert calls and all(
        (c["tournament_size"], c["grace_steps"], c["k"], c["num_replaced"]) == (1, 6, 2.0, 1) for c in calls
    )


@pytest.mark.slow
def test_the_chance_the_report_states_is_what_an_equal_skill_child_meets_at_the_cpu_rules():
    """The simulated case behind `survival`'s claim: at the cpu preset's rules (tournament of 2, grace
    2 x 10 steps) children of equal skill, each inheriting its tournament-chosen parents' rating, are
    judged by the report's own `Survival`: its "equal-skill chance" is their expected survivors, their
    survival lies within a two-sided 99% binomial bound of it, and the check passes."""
    config = load_config("cpu")
    assert (config.evolution.tournament_size, config.evolution.grace) == (2, 20)
    fates = newborn_fate(config, events=150, rng=random.Random(0))
    judged = tuple(ChildJudgement(f.child, "teacher", 0, 20, f.eligible, f.culled, not f.replaced) for f in fates)
    survival = Survival(born=len(fates), judged=judged)
    chance = survival.expected / survival.n
    assert chance == pytest.approx(2 / 3)  # 3 eligible (the next child in grace), 1 culled
    assert abs(survival.survived / survival.n - chance) <= 2.576 * math.sqrt(chance * (1 - chance) / survival.n)
    assert f"(equal-skill chance {survival.expected:.1f};" in survival.text() and survival.verdict == "pass"
    edge = inheritance_edge(config, seeds=range(2), events=40)
    assert len(edge.per_seed) == 2 and edge.text().endswith("(2 seeds x 40 children)")
