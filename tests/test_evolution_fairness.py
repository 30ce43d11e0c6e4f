"""Evolution gives a newborn a fair chance (issue #27): among members of equal skill, rated by the
real rating rule, a child is replaced at its first eligible event no more often than chance."""

import math
import random

from populora_nb.config import load_config
from populora_nb.evolution_simulations import newborn_fate


def _culled_rate_and_bound(fates) -> tuple[float, float]:
    """The newborns' replacement rate, and the one-sided 99% binomial upper bound of the chance rate."""
    n = len(fates)
    rate = sum(f.replaced for f in fates) / n
    chance = sum(1 / f.eligible for f in fates) / n  # one replaced per role among the eligible
    return rate, chance + 2.326 * math.sqrt(chance * (1 - chance) / n)


def test_a_newborn_of_equal_skill_is_culled_no_more_often_than_chance():
    ec = load_config("smoke").evolution
    fates = newborn_fate(events=400, every=5, rng=random.Random(0), sigma_inflation=ec.sigma_inflation)
    assert len(fates) == 400 and all(f.eligible == 3 for f in fates)  # 4 per role, last event's child in grace
    rate, bound = _culled_rate_and_bound(fates)
    assert rate <= bound, (rate, bound)


def test_an_inflated_sigma_culls_newborns_above_chance():
    """The test above can fail: a child whose sigma is doubled (the earlier default) moves faster
    in its first games and lands in the bottom tail more often."""
    fates = newborn_fate(events=400, every=5, rng=random.Random(0), sigma_inflation=2.0)
    rate, bound = _culled_rate_and_bound(fates)
    assert rate > bound, (rate, bound)


def test_grace_is_two_evolution_intervals_by_default():
    ec = load_config("smoke").evolution
    assert ec.grace == 2 * ec.every and ec.sigma_inflation == 1.0
    assert load_config("smoke", {"evolution.grace_steps": 3}).evolution.grace == 3
