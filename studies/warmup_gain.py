"""The warm-up's effect over seeds: the valid-task rate on the same held-out proposer prompts before
and after the rejection-sampling fine-tuning (`populora_nb.warmup`), one pair per seed.

Each seed's experiment ran its own warm-up (its own collection, fine-tuning and held-out prompts),
so the seeds are independent replicates of the whole stage. The gain after − before is paired by
seed (the same prompts and sampling seeds before and after): the paired t-interval over seeds is
the headline, the seeds' range (their percentile bootstrap at n <= 3) beside it (`seed_stats`). The
per-seed rates are binomial counts; the interval over seeds covers both that sampling noise and the
variation between warm-ups.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.analysis.figures import axes_or_new
from studies.seed_stats import Estimate, difference_estimate, mean_estimate, verdict


@dataclass(frozen=True)
class WarmupGain:
    seeds: tuple[str, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]
    proposals: tuple[int, ...]
    """Held-out proposals measured per seed (each of before and after)."""
    examples: tuple[int, ...]
    before_est: Estimate
    after_est: Estimate
    gain: Estimate


def warmup_gain(experiments: Sequence[str | Path], n_resamples: int = 10_000, seed: int = 0) -> WarmupGain | None:
    """The before/after valid rates over seeds; None when no experiment ran a warm-up."""
    paths = [(Path(e).name, Path(e) / "warmup" / "report.json") for e in experiments]
    reports = [(name, json.loads(p.read_text())) for name, p in paths if p.is_file()]
    if not reports:
        return None
    before = [float(r["before"]["rate"]) for _, r in reports]
    after = [float(r["after"]["rate"]) for _, r in reports]
    rng = np.random.default_rng([seed, 1])
    return WarmupGain(
        seeds=tuple(name for name, _ in reports),
        before=tuple(before),
        after=tuple(after),
        proposals=tuple(int(r["before"]["total"]) for _, r in reports),
        examples=tuple(int(r["examples"]) for _, r in reports),
        before_est=mean_estimate(before, n_resamples=n_resamples, rng=rng),
        after_est=mean_estimate(after, n_resamples=n_resamples, rng=rng),
        gain=difference_estimate(before, after, paired=True, n_resamples=n_resamples, rng=rng),
    )


def _cell(e: Estimate, sign: str = "") -> str:
    """``mean [95% t] (range: low, high)``."""
    if np.isnan(e.low):
        return f"{e.mean:{sign}.3f}"
    return f"{e.mean:{sign}.3f} [{e.t_low:{sign}.3f}, {e.t_high:{sign}.3f}] ({e.spread}: {e.low:.3f}, {e.high:.3f})"


def warmup_lines(g: WarmupGain) -> list[str]:
    """A markdown section: the per-seed rates, the mean gain with its intervals, and one sentence
    worded by the gain's paired t-interval."""
    rows = [
        f"| {name} | {n} | {b:.3f} | {a:.3f} | {a - b:+.3f} | {k} |"
        for name, n, b, a, k in zip(g.seeds, g.proposals, g.before, g.after, g.examples)
    ]
    return [
        "## The warm-up: valid-task rate before and after",
        "",
        "Each seed's warm-up fine-tuned on its own accepted proposals and measured the valid rate on the same "
        "held-out proposer prompts (same sampling seeds) before and after; the gain is paired by seed. Cells: "
        "mean [95% t; paired t for the gain] (range, or from 4 seeds bootstrap, of the seeds' values).",
        "",
        "| seed | held-out proposals | before | after | gain | examples |",
        "|---|---|---|---|---|---|",
        *rows,
        f"| **mean over {len(g.seeds)} seeds** | | {_cell(g.before_est)} | {_cell(g.after_est)} | "
        f"{_cell(g.gain, '+')} | |",
        "",
        "One seed: no interval, so no claim about the gain."
        if g.gain.n < 2
        else f"Every seed gained exactly {g.gain.mean:+.3f}: no spread, so no t-interval and no claim about the "
        f"gain (sign test p = {g.gain.p:.2g})."
        if np.isnan(g.gain.t_low)
        else f"The warm-up {verdict(g.gain, 'raised', 'lowered', 'left no detectable change in')} the held-out "
        f"valid rate: {g.gain.mean:+.3f}, paired t [{g.gain.t_low:+.3f}, {g.gain.t_high:+.3f}], p = {g.gain.p:.2g}.",
    ]


def warmup_json(g: WarmupGain) -> dict:
    """The per-seed rates and counts, then the intervals, for seeds.json."""
    per_seed = {k: list(getattr(g, k)) for k in ("seeds", "before", "after", "proposals", "examples")}
    return per_seed | {
        "before_interval": g.before_est.as_dict(),
        "after_interval": g.after_est.as_dict(),
        "gain": g.gain.as_dict(),
    }


def plot_start_end(
    ax: Axes,
    x: Sequence[float] | np.ndarray,
    pairs: Iterable[tuple[float, float]],
    first: Estimate,
    last: Estimate,
    color: str,
    alpha: float,
    lw: float | None = None,
    label: str | None = None,
) -> None:
    """Each seed's (first, last) values as a faint line, and the two means over seeds with 95% t bars
    (no bar from one seed)."""
    for a, b in pairs:
        ax.plot(x, [a, b], color=color, alpha=alpha, marker=".", lw=lw)
    means = np.array([first.mean, last.mean])
    bars = np.array([[first.t_low, last.t_low], [first.t_high, last.t_high]])
    ax.errorbar(x, means, yerr=np.nan_to_num(np.abs(bars - means)), color=color, marker="o", capsize=4, label=label)


def plot_warmup_gain(g: WarmupGain) -> Figure:
    """Each seed's valid rate before and after (lines), the means with 95% t bars."""
    fig, ax = axes_or_new(None, figsize=(4.5, 3.5))
    plot_start_end(ax, [0, 1], zip(g.before, g.after), g.before_est, g.after_est, "tab:blue", alpha=0.35)
    ax.set_xticks([0, 1], ["before warm-up", "after warm-up"])
    ax.set_xlim(-0.4, 1.4)
    ax.set(ylabel="valid-task rate (held-out prompts)", title=f"warm-up over {len(g.seeds)} seeds, 95% t")
    fig.tight_layout()
    return fig
