"""The seed protocol's series that tell repeats from the rest (`populora_nb.copies`: a repeat is the
same task as its student meets it, met before in the run).

The series and what each means: `studies.series`.

A rise of the run's fresh-task ρ that ``rho/repeats`` carries while ``rho/non_repeats`` stays flat rode
on tasks met before, not on new tasks getting easier; the records do not say whether a student had
played a repeat, so it is not read as memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from populora_nb.analysis.frames import per_step
from studies.seed_stats import Estimate, verdict
from studies.series import (
    BAND_KEY,
    BAND_NON_REPEATS_KEY,
    REPEAT_KEY,
    REPEAT_SERIES,
    RHO_NON_REPEATS_KEY,
    RHO_REPEATS_KEY,
)


class PlayedTask(NamedTuple):
    """A played task (valid, fresh, attempted by the matched solver): its step, ρ and repeat flag."""

    step: int
    rho: float
    repeat: bool


def repeat_items(key: str, played: Sequence[PlayedTask], valid: Sequence[tuple[int, bool]]) -> list[tuple[int, float]]:
    """The (step, value) items series ``key`` of ``REPEAT_SERIES`` averages: one per valid task (repeat
    rate) or per played task of the right kind (band shares, ρ); ``BAND_KEY`` counts every played task."""
    if key == REPEAT_KEY:
        return [(s, float(r)) for s, r in valid]
    if key == BAND_KEY:
        return [(p.step, float(0 < p.rho < 1)) for p in played]
    if key == BAND_NON_REPEATS_KEY:
        return [(p.step, float(0 < p.rho < 1)) for p in played if not p.repeat]
    if key == RHO_NON_REPEATS_KEY:
        return [(p.step, p.rho) for p in played if not p.repeat]
    if key == RHO_REPEATS_KEY:
        return [(p.step, p.rho) for p in played if p.repeat]
    raise ValueError(f"{key} is not a repeat series; use one of {sorted(REPEAT_SERIES)}")


def repeat_series(key: str, played: Sequence[PlayedTask], valid: Sequence[tuple[int, bool]]) -> dict[int, float]:
    """step -> series ``key`` of ``REPEAT_SERIES`` from a run's played tasks and the (step, repeat) of
    its valid tasks."""
    return per_step(pd.DataFrame(repeat_items(key, played, valid), columns=["step", key]), key).to_dict()


def pooled_windows(items: Sequence[tuple[int, float]], spans: Sequence[tuple[int, int]]) -> tuple[float, ...]:
    """The mean over the items of each fixed step span (inclusive), NaN for a span with none: a series
    whose steps are sparse (repeats, non-repeats) read over the same steps in every run."""
    values = [[v for step, v in items if lo <= step <= hi] for lo, hi in spans]
    return tuple(float(np.mean(v)) if v else math.nan for v in values)


def memory_sentence(
    run: str, total: Estimate, non_repeats: Estimate, repeats: Estimate, holm: tuple[float, float], family: str
) -> str | None:
    """A sentence for a run whose fresh-task ρ rose from start to end while the ρ of its repeats rose and
    that of its non-repeats did not, each by its own t-interval **and** both rises kept by Holm's
    correction (``holm``: the Holm p of the total's and of the repeats' change, over ``family``). It says
    the rise rode on tasks met before, not that students remembered them: a repeat may be of a seed or
    a warm-up example no student had played. None when the intervals or Holm do not say so."""
    rose = [e.separated and e.mean > 0 for e in (total, repeats, non_repeats)]
    if not (rose[0] and rose[1]) or rose[2] or math.isnan(non_repeats.mean) or not all(p < 0.05 for p in holm):
        return None
    moved = verdict(non_repeats, "rose", "fell", "shows no detectable change")
    return (
        f"In the {run}, fresh-task ρ rose with the ρ of repeated tasks ({repeats.mean:+.3f}, {repeats.t_kind} "
        f"[{repeats.t_low:+.3f}, {repeats.t_high:+.3f}]; both kept by Holm over the {family}) while the ρ of "
        f"non-repeats {moved} ({non_repeats.mean:+.3f}, {non_repeats.t_kind} "
        f"[{non_repeats.t_low:+.3f}, {non_repeats.t_high:+.3f}]): the rise rode on tasks met before in the run, "
        "not on new tasks getting easier. Whether a student had played a repeat before is not recorded, so this "
        "is not a measure of memory."
    )
