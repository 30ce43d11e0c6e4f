"""Intervals for shares whose items are not independent draws: a block bootstrap over step blocks.

A run's tasks are clustered: one proposer writes a step's tasks, and most tasks repeat earlier ones
(`populora_nb.copies`), so neighbouring steps share their tasks. A Wilson interval treats every task
as an independent draw and is too narrow. The block bootstrap (Künsch 1989) resamples whole blocks
of ``block`` consecutive steps with replacement, keeping every task of a block together, and reads
the share of the pooled resample; the 2.5% and 97.5% percentiles of those shares are the interval.
The generator is seeded from the caller's seed and the quantity's name, so the same records always
give the same interval and adding a quantity leaves the others unchanged.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

BLOCK_STEPS = 5
"""Steps per bootstrap block: half an evolution interval at the cpu preset, and the report's window."""
N_RESAMPLES = 4000


def named_rng(seed: int, name: str) -> np.random.Generator:
    """A generator per (seed, quantity name): adding a quantity leaves every other interval unchanged."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def block_counts(items: Sequence[tuple[int, bool]], block: int = BLOCK_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """(hits, totals) per step block ``step // block``, over the blocks that hold an item."""
    if block < 1:
        raise ValueError(f"block must be >= 1 step, got {block}")
    _, blocks = np.unique([int(step) // block for step, _ in items], return_inverse=True)
    hits = np.bincount(blocks, weights=[bool(hit) for _, hit in items])
    return hits.astype(float), np.bincount(blocks).astype(float)


def block_bootstrap_share(
    items: Sequence[tuple[int, bool]],
    *,
    block: int = BLOCK_STEPS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    name: str = "",
    level: float = 0.95,
) -> tuple[float, float]:
    """The ``level`` percentile interval of the share of ``items`` (step, hit) under a bootstrap of
    whole step blocks (module docstring); (nan, nan) with no item. One block gives a zero-width
    interval: there is nothing to resample, and the report then says so through n."""
    hits, totals = block_counts(items, block)
    if not len(totals):
        return float("nan"), float("nan")
    draws = named_rng(seed, name).integers(0, len(totals), size=(n_resamples, len(totals)))  # (R, blocks)
    shares = hits[draws].sum(axis=1) / totals[draws].sum(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(shares, [tail, 100 - tail])
    return float(low), float(high)
