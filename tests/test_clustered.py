"""Intervals for clustered shares: the block bootstrap over step blocks (populora_nb.analysis.clustered)."""

import math

from populora_nb.analysis.clustered import block_bootstrap_share, block_counts
from populora_nb.analysis.liveness import share_interval


def _clustered(n_steps=40, per_step=15):
    """Whole steps of hits or misses (a proposer repeating one task a step): 25% of steps are hits."""
    return [(s, s % 4 == 0) for s in range(n_steps) for _ in range(per_step)]


def test_shares_of_clustered_steps_get_wider_intervals_than_independent_draws():
    items = _clustered()
    low, high = block_bootstrap_share(items, block=1)
    w_low, w_high = share_interval(sum(h for _, h in items), len(items))
    assert low < 0.25 < high and (high - low) > 2 * (w_high - w_low)  # Wilson treats 600 tasks as 600 draws


def test_items_within_a_step_that_are_independent_get_about_the_wilson_width():
    items = [(s, (s * 7 + i) % 4 == 0) for s in range(40) for i in range(15)]  # every step 25% hits
    low, high = block_bootstrap_share(items, block=5)
    w_low, w_high = share_interval(sum(h for _, h in items), len(items))
    assert high - low < w_high - w_low  # no between-block spread: nothing widens it


def test_the_interval_is_seeded_per_quantity_and_counts_are_per_block():
    items = [(s, (s * s) % 7 < i % 4) for s in range(40) for i in range(s % 5 + 1)]  # uneven blocks
    first = block_bootstrap_share(items, block=1, seed=3, name="a", n_resamples=500)
    assert first == block_bootstrap_share(items, block=1, seed=3, name="a", n_resamples=500)
    assert first != block_bootstrap_share(items, block=1, seed=3, name="b", n_resamples=500)
    hits, totals = block_counts([(0, True), (4, False), (5, True), (12, True)], block=5)
    assert hits.tolist() == [1, 1, 1] and totals.tolist() == [2, 1, 1]
    assert all(math.isnan(x) for x in block_bootstrap_share([]))
