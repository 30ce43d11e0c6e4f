"""The seed protocol: baseline and population over several seeds, every headline series with its
uncertainty (PopuLoRA compares single-agent self-play with the population; a claim about the two is
only as good as its spread over seeds).

Input: experiment directories, one per seed, each holding ``baseline/`` and ``population/`` runs of
one config but ``run.seed``; the series and how each is read: `populora_nb.analysis.protocol_series`.

Per series and run, each seed gives a start value (mean over its first ``window`` logged steps) and
an end value (its last ``window``); coverage gives its rarefied count in those two windows. Over
seeds (`populora_nb.analysis.seed_stats`):
  start, end         mean with a 95% percentile-bootstrap interval, and the t-interval beside it;
  change             end − start paired by seed (each seed is its own control);
  population − base  the end values' difference, paired by seed when both runs exist for the same
                     seeds (they share the seed and the warm-up), else unpaired; bootstrap interval
                     and Welch's t-interval. "Separated": the bootstrap interval excludes 0; the
                     t verdict beside it (with 3 seeds the bootstrap under-covers, t is wide).
Also: the warm-up's gain (`warmup_gain`) and the seeds a paired test would need (`power`).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from populora_nb.analysis.power import power_json, power_lines, power_row
from populora_nb.analysis.protocol_series import (
    COLORS,
    HEADLINE,
    POPULATION_ONLY,
    RUNS,
    WITHIN_RUN_ONLY,
    Band,
    band,
    end_value,
    final_ranking,
    is_coverage,
    load_run,
    plot_step_band,
    run_dirs,
    run_series,
    seed_names,
    seed_values,
    start_value,
)
from populora_nb.analysis.seed_stats import Estimate, difference_estimate, excludes_zero, mean_estimate, welch_interval
from populora_nb.analysis.warmup_gain import plot_warmup_gain, warmup_gain, warmup_json, warmup_lines

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [  # the series side lives in protocol_series; its names stay importable from here
    "HEADLINE", "RUNS", "Band", "band", "end_value", "run_series", "start_value", "seed_values",
    "Estimate", "RunSummary", "Comparison", "compare", "comparison_table", "run_table", "comparison_json",
    "plot_seed_band", "plot_coverage", "write_seed_report",
]  # fmt: skip


@dataclass(frozen=True)
class RunSummary:
    """One run (baseline or population) of one series over the seeds that have it."""

    run: str
    seeds: tuple[str, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]
    start_est: Estimate
    end_est: Estimate
    change: Estimate
    """end − start, paired by seed."""


@dataclass(frozen=True)
class Comparison:
    """One series: both runs over seeds and the end difference population − baseline."""

    key: str
    baseline: tuple[float, ...]
    population: tuple[float, ...]
    """End values per seed (``runs[...].end``)."""
    difference: float
    low: float
    high: float
    """95% percentile-bootstrap interval of the difference (paired by seed when ``paired``)."""
    t_low: float
    t_high: float
    """Welch's 95% t-interval of the difference (ignores pairing)."""
    paired: bool
    runs: Mapping[str, RunSummary]
    n_units: int | None = None
    """Coverage only: the common number of programs every window is rarefied to."""

    @property
    def separated(self) -> bool:
        """The bootstrap interval excludes 0: the runs differ beyond what the seeds' spread explains."""
        return excludes_zero(self.low, self.high)

    @property
    def t_separated(self) -> bool:
        """Welch's interval excludes 0 as well."""
        return excludes_zero(self.t_low, self.t_high)


def _rng(seed: int, key: str, what: str) -> np.random.Generator:
    """One generator per (series, quantity): adding a series leaves every other interval unchanged."""
    return np.random.default_rng([seed, zlib.crc32(f"{key}|{what}".encode())])


def _summary(
    run: str, values: Mapping[str, tuple[float, float]], key: str, level: float, n_resamples: int, seed: int
) -> RunSummary:
    start, end = [s for s, _ in values.values()], [e for _, e in values.values()]
    return RunSummary(
        run=run,
        seeds=tuple(values),
        start=tuple(start),
        end=tuple(end),
        start_est=mean_estimate(start, level, n_resamples, rng=_rng(seed, key, run + "/start")),
        end_est=mean_estimate(end, level, n_resamples, rng=_rng(seed, key, run + "/end")),
        change=difference_estimate(start, end, True, level, n_resamples, rng=_rng(seed, key, run + "/change")),
    )


def compare(
    experiments: Sequence[str | Path],
    keys: Sequence[str] = tuple(HEADLINE),
    window: int = 5,
    *,
    level: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> list[Comparison]:
    """Baseline vs population over the seeds (one experiment directory each), per series. ``seed``
    seeds the bootstrap, so the same records always give the same report."""
    out = []
    for key in keys:
        values, n_units = seed_values(experiments, key, window)
        runs = {run: _summary(run, values[run], key, level, n_resamples, seed) for run in RUNS}
        base, pop = values["baseline"], values["population"]
        paired = bool(base) and base.keys() == pop.keys()  # same seeds: each pair shares seed and warm-up
        a, b = [base[s][1] for s in base], [pop[s][1] for s in (base if paired else pop)]
        if key in WITHIN_RUN_ONLY:  # two different definitions: no difference to report
            d, t_low, t_high = Estimate(*[math.nan] * 5), math.nan, math.nan
        else:
            d = difference_estimate(a, b, paired, level, n_resamples, rng=_rng(seed, key, "difference"))
            _, t_low, t_high = welch_interval(a, b, level)  # the companion assumes nothing about pairing
        out.append(Comparison(key, tuple(a), tuple(b), d.mean, d.low, d.high, t_low, t_high, paired, runs, n_units))
    return out


# ----------------------------------------------------------------------------- tables
def _num(x: float, signed: bool = False, scale: float | None = None) -> str:
    """``x`` with the decimals that suit ``scale`` (default: its own size): rates, rewards, μ, lengths."""
    if math.isnan(x):
        return "n/a"
    size = abs(x) if scale is None else scale
    digits = 0 if size >= 100 else 1 if size >= 10 else 3
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _interval(low: float, high: float, signed: bool = False, scale: float | None = None) -> str:
    scale = max(abs(low), abs(high)) if scale is None else scale
    return "" if math.isnan(low) else f"[{_num(low, signed, scale)}, {_num(high, signed, scale)}]"


def _estimate_cell(e: Estimate, signed: bool = False, t_inline: bool = True) -> str:
    """``mean [bootstrap low, high] (t: low, high)`` at one precision; the t part only when ``t_inline``."""
    if math.isnan(e.mean):
        return "n/a"
    scale = max(abs(v) for v in (e.mean, e.low, e.high) if not math.isnan(v))
    cell = f"{_num(e.mean, signed, scale)} {_interval(e.low, e.high, signed, scale)}".strip()
    if t_inline and not math.isnan(e.t_low):
        cell += f" (t: {_num(e.t_low, signed, scale)}, {_num(e.t_high, signed, scale)})"
    return cell


def series_label(c: Comparison) -> str:
    """The series' one-line meaning, with the common n for coverage."""
    label = HEADLINE.get(c.key, c.key)
    return label if c.n_units is None else f"{label}, n = {c.n_units}"


def _verdict(c: Comparison) -> str:
    if math.isnan(c.low):
        return "n/a"
    return f"{'yes' if c.separated else 'no'} (t: {'yes' if c.t_separated else 'no'})"


def comparison_table(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Rows for a report, one per series: end values of both runs, then population − baseline with
    its bootstrap and Welch intervals and whether they exclude 0 (``COLUMNS`` explains each)."""
    rows = [list(COLUMNS)]
    for c in comparisons:
        base = c.runs["baseline"].end_est
        diff = Estimate(c.difference, c.low, c.high, c.t_low, c.t_high)
        rows.append(
            [
                series_label(c),
                f"{len(c.baseline)} / {len(c.population)}",
                "n/a (no ratings)" if c.key in POPULATION_ONLY else _estimate_cell(base, t_inline=False),
                _estimate_cell(c.runs["population"].end_est, t_inline=False),
                f"n/a ({WITHIN_RUN_ONLY[c.key]})"
                if c.key in WITHIN_RUN_ONLY
                else _estimate_cell(diff, signed=True, t_inline=False),
                _interval(c.t_low, c.t_high, signed=True) or "n/a",
                ("paired" if c.paired else "unpaired") if not math.isnan(c.difference) else "n/a",
                _verdict(c),
            ]
        )
    return rows


COLUMNS: Mapping[str, str] = {
    "series": "what is measured (coverage: n = the common number of programs rarefied to)",
    "seeds (baseline / population)": "seeds with a value, per run",
    "baseline end": "mean over seeds of each seed's last-window value [95% bootstrap interval]",
    "population end": "the same for the population",
    "population − baseline [95% bootstrap]": "difference of end values, bootstrap over seeds",
    "t 95% (Welch)": "Welch's t-interval of the same difference (ignores pairing; conservative)",
    "pairing": "paired: both runs at the same seeds, resampled as pairs; unpaired: each side alone",
    "separated? (t)": "the bootstrap interval excludes 0; in parentheses, whether Welch's does too",
}
RUN_COLUMNS: Mapping[str, str] = {
    "series": "what is measured",
    "run": "baseline or population",
    "seeds": "seeds with a value",
    "start": "mean over seeds of the first-window value [95% bootstrap] (t: 95% t-interval)",
    "end": "the same over the last window",
    "change end − start": "per-seed end − start, paired by seed [95% bootstrap] (t: paired t)",
}


def run_table(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Rows per series and run: start, end and change over the seeds (``RUN_COLUMNS``)."""
    rows = [list(RUN_COLUMNS)]
    for c in comparisons:
        for run, s in c.runs.items():
            if not s.seeds:
                continue
            cells = [_estimate_cell(s.start_est), _estimate_cell(s.end_est), _estimate_cell(s.change, signed=True)]
            rows.append([series_label(c), run, str(len(s.seeds)), *cells])
    return rows


# ----------------------------------------------------------------------------- machine-readable
def _clean(x: Any) -> Any:
    """NaN -> None, numpy scalars -> Python: strict JSON."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else float(x)
    return x.item() if isinstance(x, np.generic) else x


def comparison_json(c: Comparison, experiments: Sequence[str | Path]) -> dict[str, Any]:
    """Every number of one series: per run and seed the start, end and per-step values, the
    intervals, the difference, and for the rating spread each seed's final ranking."""
    runs: dict[str, Any] = {}
    for run, s in c.runs.items():
        dirs = run_dirs(experiments, run)
        entry: dict[str, Any] = {
            "seeds": list(s.seeds),
            "start": dict(zip(s.seeds, s.start)),
            "end": dict(zip(s.seeds, s.end)),
            "start_interval": s.start_est.as_dict(),
            "end_interval": s.end_est.as_dict(),
            "change": s.change.as_dict(),
        }
        if not is_coverage(c.key):
            entry["per_step"] = {n: load_run(dirs[n]).series(c.key) for n in s.seeds}
        if c.key in POPULATION_ONLY:
            entry["final_ranking"] = {n: final_ranking(load_run(dirs[n]).metrics) for n in s.seeds}
        runs[run] = entry
    diff = Estimate(c.difference, c.low, c.high, c.t_low, c.t_high)
    return _clean(
        {
            "label": HEADLINE.get(c.key, c.key),
            "n_units": c.n_units,
            "runs": runs,
            "difference": {**diff.as_dict(), "paired": c.paired, "t_kind": "Welch"},
        }
    )


# ----------------------------------------------------------------------------- figures
def plot_seed_band(
    experiments: Sequence[str | Path],
    key: str,
    ax: Axes | None = None,
    *,
    window: int = 5,
    comparison: Comparison | None = None,
) -> Figure:
    """``key`` for baseline and population across seeds: a per-step series as its mean and 95%
    t band over steps (``protocol_series.plot_step_band``), coverage as its start and end values
    (``plot_coverage``). Returns the Figure."""
    if is_coverage(key):
        return plot_coverage(experiments, key, ax, window=window, comparison=comparison)
    return plot_step_band(experiments, key, ax, smooth=window)


def plot_coverage(
    experiments: Sequence[str | Path],
    key: str,
    ax: Axes | None = None,
    *,
    window: int = 5,
    comparison: Comparison | None = None,
) -> Figure:
    """Coverage ``key`` in the first and last ``window`` steps, per run: each seed's rarefied value
    (dots) and the mean over seeds with its 95% bootstrap interval (bars)."""
    from populora_nb.analysis.figures import axes_or_new, say_empty

    c = comparison or compare(experiments, (key,), window)[0]
    fig, ax = axes_or_new(ax)
    drawn = False
    for offset, run in zip((-0.08, 0.08), RUNS):
        s = c.runs[run]
        if not s.seeds:
            continue
        drawn = True
        x = np.array([0.0, 1.0]) + offset
        for start, end in zip(s.start, s.end):
            ax.plot(x, [start, end], color=COLORS[run], alpha=0.3, marker=".", lw=0.8)
        means = np.array([s.start_est.mean, s.end_est.mean])
        bars = np.array([[s.start_est.low, s.end_est.low], [s.start_est.high, s.end_est.high]])
        err = np.nan_to_num(np.abs(bars - means), nan=0.0)  # no bar from one seed
        ax.errorbar(
            x, means, yerr=err, color=COLORS[run], marker="o", capsize=4, label=f"{run} (n = {len(s.seeds)} seeds)"
        )
    ax.set_xticks([0, 1], [f"first {window} steps", f"last {window} steps"])
    ax.set_xlim(-0.5, 1.5)
    ax.set(ylabel="expected distinct features", title=f"{series_label(c)}\nmean over seeds, 95% bootstrap")
    if drawn:
        ax.legend(fontsize=8)
    else:
        say_empty(ax, f"{key}: fewer than 2 programs in some window" if c.n_units is not None else "no task records")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- the report
def _md_table(rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])] + [
        "| " + " | ".join(r) + " |" for r in rows[1:]
    ]


def write_seed_report(
    experiments: Sequence[str | Path], out_dir: str | Path, window: int = 5, *, seed: int = 0, n_resamples: int = 10_000
) -> Path:
    """``out_dir/seeds.md`` (the tables, what each column means, the 3-seed caveat),
    ``out_dir/seeds.json`` (every number) and one figure per series (``out_dir/seeds_<series>.png``);
    returns the markdown path."""
    from populora_nb.analysis.figures import save_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comparisons = compare(experiments, window=window, n_resamples=n_resamples, seed=seed)
    lines = [
        f"# Seed protocol: {len(experiments)} seeds",
        "",
        f"n = {len(experiments)} seeds (experiment directories: {', '.join(seed_names(experiments))}). Start: a "
        f"run's mean over its first {window} logged steps; end: over its last {window}. Coverage is the expected "
        "number of distinct AST n-grams among n written programs of that window, one n for every run, seed and "
        "window, so writing more programs does not count as covering more. Intervals are 95%: percentile "
        f"bootstrap over seeds ({n_resamples} resamples, seed {seed}) as the headline, Student t beside it.",
        "",
        "**Caveat.** With 3 seeds the percentile bootstrap has only 10 distinct resamples and can never be "
        "wider than the seeds' own range: it under-covers (about 75% rather than 95% for normal data). The "
        "t-interval is the conservative companion; a difference is solid when both exclude 0.",
        "",
        "## Population − baseline at the end",
        "",
        *_md_table(comparison_table(comparisons)),
        "",
        *[f"- **{name}**: {meaning}" for name, meaning in COLUMNS.items()],
        "",
        "## Start, end and change per run",
        "",
        *_md_table(run_table(comparisons)),
        "",
        *[f"- **{name}**: {meaning}" for name, meaning in RUN_COLUMNS.items()],
    ]
    comparable = [c for c in comparisons if c.paired and c.baseline and c.key not in WITHIN_RUN_ONLY]
    power = [power_row(series_label(c), c.baseline, c.population) for c in comparable]
    lines += ["", *power_lines(power)]
    gain = warmup_gain(experiments, n_resamples=n_resamples, seed=seed)
    if gain is not None:
        save_figure(plot_warmup_gain(gain), out / "seeds_warmup.png")
        lines += ["", *warmup_lines(gain), "", "![warm-up](seeds_warmup.png)"]
    for c in comparisons:
        name = "seeds_" + c.key.replace("/", "_") + ".png"
        save_figure(plot_seed_band(experiments, c.key, window=window, comparison=c), out / name)
        lines += ["", f"![{HEADLINE.get(c.key, c.key)}]({name})"]
    record = {
        "experiments": [str(e) for e in experiments],
        "seeds": seed_names(experiments),
        "n_seeds": len(experiments),
        "window": window,
        "level": 0.95,
        "n_resamples": n_resamples,
        "bootstrap_seed": seed,
        "series": {c.key: comparison_json(c, experiments) for c in comparisons},
        "warmup": None if gain is None else warmup_json(gain),
        "power": power_json(power),
    }
    (out / "seeds.json").write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
    path = out / "seeds.md"
    path.write_text("\n".join(lines) + "\n")
    return path
