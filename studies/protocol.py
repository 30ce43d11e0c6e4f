"""The seed protocol: baseline and population over several seeds, every headline series with its
uncertainty (PopuLoRA compares single-agent self-play with the population; a claim about the two is
only as good as its spread over seeds).

Input: experiment directories, one per seed, each holding ``baseline/`` and ``population/`` runs of
one config but ``run.seed``; the series and their start and end windows: `protocol_series`. Over
seeds, each number gets a 95% t-interval (the headline and the only verdict) with the seeds' range
or bootstrap beside it (`seed_stats`):
  start, end         the mean over seeds (one-sample t);
  change             end − start, paired by seed (paired t: each seed is its own control);
  population − base  the end values' difference, paired by seed when both runs exist for the same
                     seeds (they share the seed and the warm-up): the paired t; else unpaired: Welch.
A rise, fall or difference is said only where its t-interval excludes 0 (`seed_stats.verdict`); the
series of a table are one family, with Holm-adjusted p-values. Also: the warm-up's gain
(`warmup_gain`) and the minimum detectable difference (`power`).

Long because the report is written from one `Comparison` type read three ways, tables, sentences
and figures, which share its labels and its Holm families.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populora_nb.analysis.clustered import named_rng
from populora_nb.analysis.figures import axes_or_new, finish, save_figure
from populora_nb.analysis.runs import RUNS
from populora_nb.analysis.seed_stats import fmt_interval, md_table
from studies.liveness_report import protocol_liveness
from studies.power import power_lines, power_row
from studies.probe_floor import probe_floor_lines
from studies.protocol_series import (
    COLORS,
    final_ranking,
    is_coverage,
    plot_step_band,
    run_dirs,
    run_records,
    seed_names,
    seed_values,
)
from studies.repeat_series import memory_sentence
from studies.seed_stats import (
    MISSING,
    Estimate,
    claim,
    difference_estimate,
    estimate_cell,
    fmt_p,
    holm,
    how_to_read,
    mean_estimate,
    scale_of,
    verdict,
)
from studies.series import (
    COMPLEXITY_SERIES,
    HEADLINE,
    POPULATION_ONLY,
    RHO_NON_REPEATS_KEY,
    RHO_REPEATS_KEY,
    WITHIN_RUN_ONLY,
)
from studies.warmup_gain import plot_start_end, plot_warmup_gain, warmup_gain, warmup_json, warmup_lines
from studies.windows import complexity_window_lines


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
    estimate: Estimate
    """population − baseline: paired t (Welch t when unpaired) with the seeds' spread beside it."""
    paired: bool
    runs: Mapping[str, RunSummary]
    n_units: int | None = None
    """Coverage only: the common number of programs every window is rarefied to."""

    baseline = property(lambda self: self.runs["baseline"].end, doc="end values per seed")
    population = property(lambda self: self.runs["population"].end)
    # The difference's numbers under the names `sweep.cross_table` reads.
    difference = property(lambda self: self.estimate.mean)
    low = property(lambda self: self.estimate.low, doc="the companion: the seeds' range at n <= 3, else bootstrap")
    high = property(lambda self: self.estimate.high)
    t_low = property(lambda self: self.estimate.t_low, doc="the headline: paired t (Welch when unpaired)")
    t_high = property(lambda self: self.estimate.t_high)
    separated = property(lambda self: self.estimate.separated, doc="the t-interval excludes 0")
    t_separated = separated  # the headline is t: one verdict under both names


def _summary(
    run: str, values: Mapping[str, tuple[float, float]], key: str, level: float, n_resamples: int, seed: int
) -> RunSummary:
    start, end = [s for s, _ in values.values()], [e for _, e in values.values()]
    return RunSummary(
        run=run,
        seeds=tuple(values),
        start=tuple(start),
        end=tuple(end),
        start_est=mean_estimate(start, level, n_resamples, rng=named_rng(seed, f"{key}|{run}/start")),
        end_est=mean_estimate(end, level, n_resamples, rng=named_rng(seed, f"{key}|{run}/end")),
        change=difference_estimate(start, end, True, level, n_resamples, rng=named_rng(seed, f"{key}|{run}/change")),
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
        base, pop = runs["baseline"], runs["population"]
        paired = bool(base.seeds) and base.seeds == pop.seeds  # each pair shares its seed and warm-up
        d = MISSING  # WITHIN_RUN_ONLY: two different definitions, no difference to report
        if key not in WITHIN_RUN_ONLY:
            d = difference_estimate(
                base.end, pop.end, paired, level, n_resamples, rng=named_rng(seed, f"{key}|difference")
            )
        out.append(Comparison(key, d, paired, runs, n_units))
    return out


def difference_holm(comparisons: Sequence[Comparison]) -> dict[str, float]:
    """Holm-adjusted p of each population − baseline difference, the table's series as one family."""
    return dict(zip((c.key for c in comparisons), holm([c.estimate.p for c in comparisons])))


def change_holm(comparisons: Sequence[Comparison]) -> dict[tuple[str, str], float]:
    """Holm-adjusted p of each end − start change, every (series, run) of the table as one family."""
    p = {(c.key, run): c.runs[run].change.p for c in comparisons for run in RUNS if c.runs[run].seeds}
    return dict(zip(p, holm(list(p.values()))))


# ----------------------------------------------------------------------------- tables
def series_label(c: Comparison) -> str:
    """The series' one-line meaning, with the common n for coverage."""
    label = HEADLINE.get(c.key, c.key)
    return label if c.n_units is None else f"{label}, n = {c.n_units}"


def estimated(e: Estimate) -> bool:
    """Two or more seeds gave a value: a sentence is owed, a t-interval or (seeds that tie) none."""
    return e.n >= 2 and not math.isnan(e.mean)


def difference_verdict(c: Comparison, holm_p: float) -> str:
    """ "population higher/lower" only where the t-interval excludes 0 (and says when Holm's
    family-wise correction does not keep it), else "no detectable difference"."""
    if not estimated(c.estimate):
        return "n/a"
    words = verdict(c.estimate, "population higher", "population lower", "no detectable difference")
    return words + (" (not after Holm)" if c.separated and not holm_p < 0.05 else "")


def comparison_table(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Rows for a report, one per series: end values of both runs, then population − baseline with
    its t-interval, the seeds' spread, p, Holm's p over the table and the verdict (``COLUMNS``)."""
    adjusted = difference_holm(comparisons)
    rows = [list(COLUMNS)]
    for c in comparisons:
        e = c.estimate
        rows.append(
            [
                series_label(c),
                f"{len(c.baseline)} / {len(c.population)}",
                "n/a (no ratings)"
                if c.key in POPULATION_ONLY
                else estimate_cell(c.runs["baseline"].end_est, spread=False),
                estimate_cell(c.runs["population"].end_est, spread=False),
                f"n/a ({WITHIN_RUN_ONLY[c.key]})" if c.key in WITHIN_RUN_ONLY else estimate_cell(e, True, False),
                "n/a" if math.isnan(e.low) else f"{e.spread} {fmt_interval(e.low, e.high, True, scale_of(e))}",
                "n/a" if math.isnan(e.mean) else e.t_kind + ("" if c.paired else " (unpaired)"),
                fmt_p(e.p),
                fmt_p(adjusted[c.key]),
                difference_verdict(c, adjusted[c.key]),
            ]
        )
    return rows


COLUMNS: Mapping[str, str] = {
    "series": "what is measured (coverage: n = the common number of programs rarefied to)",
    "seeds (baseline / population)": "seeds with a value, per run",
    "baseline end [95% t]": "mean over seeds of each seed's last-window value [95% t-interval]",
    "population end [95% t]": "the same for the population",
    "population − baseline [95% t]": "difference of end values [95% t-interval: paired t when both runs have "
    "the same seeds, the t-interval of the per-seed differences]",
    "spread of the per-seed differences": "range: the smallest and largest per-seed difference (at n <= 3 this "
    "is exactly the 95% percentile bootstrap, so it is named for what it is: excluding 0 only means the seeds "
    "share a sign); bootstrap: the 95% percentile bootstrap over seeds, pairs resampled together (n >= 4)",
    "test": "paired t (both runs at the same seeds); Welch t (unpaired) when they are not",
    "p": "two-sided p of that t-test against no difference",
    "Holm p": "p adjusted by Holm's step-down Bonferroni over the series of this table (family-wise error 0.05)",
    "verdict": "population higher / lower only where the t-interval excludes 0, else no detectable difference; "
    "(not after Holm) where the Holm p is not below 0.05",
}
RUN_COLUMNS: Mapping[str, str] = {
    "series": "what is measured",
    "run": "baseline or population",
    "seeds": "seeds with a value",
    "start": "mean over seeds of the first-window value [95% t-interval] (range or bootstrap of the seeds' values)",
    "end": "the same over the last window",
    "change end − start": "per-seed end − start [95% paired t] (range or bootstrap of the per-seed changes)",
}


def run_table(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Rows per series and run: start, end and change over the seeds (``RUN_COLUMNS``)."""
    rows = [list(RUN_COLUMNS)]
    for c in comparisons:
        for run, s in c.runs.items():
            if not s.seeds:
                continue
            cells = [estimate_cell(s.start_est), estimate_cell(s.end_est), estimate_cell(s.change, signed=True)]
            rows.append([series_label(c), run, str(len(s.seeds)), *cells])
    return rows


def finding_lines(comparisons: Sequence[Comparison]) -> list[str]:
    """Per series, what the seeds show about population − baseline and each run's change."""
    diff_p, change_p = difference_holm(comparisons), change_holm(comparisons)
    families = f"{sum(not math.isnan(p) for p in diff_p.values())} differences", f"{len(change_p)} changes"
    lines = []
    for c in comparisons:
        said = []
        if estimated(c.estimate):
            up, down = "population ends higher than baseline", "population ends lower than baseline"
            none = "no detectable difference between population and baseline at the end"
            said.append(claim(c.estimate, up, down, none, diff_p[c.key], families[0]))
        for run in RUNS:
            e, none = c.runs[run].change, "shows no detectable change from start to end"
            if estimated(e):
                said_run = claim(
                    e, "rose from start to end", "fell from start to end", none, change_p[(c.key, run)], families[1]
                )
                said.append(f"{run} {said_run}")
        if said:
            lines.append(f"- **{series_label(c)}**: " + "; ".join(said) + ".")
    return lines + memory_lines(comparisons)


def memory_lines(comparisons: Sequence[Comparison]) -> list[str]:
    """Where a run's fresh-task ρ rose, whether its repeats carried the rise (`repeat_series.memory_sentence`)."""
    by_key = {c.key: c for c in comparisons}
    keys = ("student/solve_rate", RHO_NON_REPEATS_KEY, RHO_REPEATS_KEY)
    if not all(k in by_key for k in keys):
        return []
    change_p = change_holm(comparisons)
    family = f"{len(change_p)} changes"
    said = [
        memory_sentence(
            run,
            by_key[keys[0]].runs[run].change,
            by_key[keys[1]].runs[run].change,
            by_key[keys[2]].runs[run].change,
            holm=(change_p.get((keys[0], run), math.nan), change_p.get((keys[2], run), math.nan)),
            family=family,
        )
        for run in RUNS
    ]
    return ["", *[s for s in said if s]] if any(said) else []


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


def comparison_json(
    c: Comparison,
    experiments: Sequence[str | Path],
    holm_p: float = math.nan,
    change_p: Mapping[tuple[str, str], float] | None = None,
) -> dict[str, Any]:
    """Every number of one series: per run and seed the start, end and per-step values, the
    intervals, the difference, and for the rating spread each seed's final ranking; with the
    Holm-adjusted p of the difference and of each run's change where the report's families give them.
    NaN stays NaN (``_clean`` makes it strict JSON)."""
    runs: dict[str, Any] = {}
    for run, s in c.runs.items():
        dirs = run_dirs(experiments, run)
        entry: dict[str, Any] = {
            "seeds": list(s.seeds),
            "start": dict(zip(s.seeds, s.start)),
            "end": dict(zip(s.seeds, s.end)),
            "start_interval": s.start_est.as_dict(),
            "end_interval": s.end_est.as_dict(),
            "change": {**s.change.as_dict(), "holm_p": (change_p or {}).get((c.key, run), math.nan)},
        }
        if not is_coverage(c.key):
            entry["per_step"] = {n: run_records(dirs[n]).series(c.key) for n in s.seeds}
        if c.key in POPULATION_ONLY:
            entry["final_ranking"] = {n: final_ranking(run_records(dirs[n]).metrics) for n in s.seeds}
        runs[run] = entry
    difference = {**c.estimate.as_dict(), "paired": c.paired, "holm_p": holm_p}
    return {"label": HEADLINE.get(c.key, c.key), "n_units": c.n_units, "runs": runs, "difference": difference}


# ----------------------------------------------------------------------------- figures
def plot_seed_band(
    experiments: Sequence[str | Path],
    key: str,
    ax: Axes | None = None,
    *,
    window: int = 5,
    comparison: Comparison | None = None,
) -> Figure:
    """``key`` for baseline and population across seeds. A per-step series: its mean and 95% t band
    over steps (``protocol_series.plot_step_band``). Coverage: per run, each seed's rarefied value in
    the first and last ``window`` steps (dots) and the mean over seeds with its 95% t-interval (bars)."""
    if not is_coverage(key):
        return plot_step_band(experiments, key, ax, smooth=window)
    c = comparison or compare(experiments, (key,), window)[0]
    fig, ax = axes_or_new(ax)
    for offset, run in zip((-0.08, 0.08), RUNS):
        s = c.runs[run]
        if s.seeds:
            x, label = np.array([0.0, 1.0]) + offset, f"{run} (n = {len(s.seeds)} seeds)"
            plot_start_end(ax, x, zip(s.start, s.end), s.start_est, s.end_est, COLORS[run], 0.3, 0.8, label)
    ax.set_xticks([0, 1], [f"first {window} steps", f"last {window} steps"])
    ax.set_xlim(-0.5, 1.5)
    ax.set(ylabel="expected distinct features", title=f"{series_label(c)}\nmean over seeds, 95% t")
    why = f"{key}: fewer than 2 programs in some window" if c.n_units is not None else "no task records"
    finish(ax, any(c.runs[run].seeds for run in RUNS), why, fontsize=8)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- the report
def write_seed_report(
    experiments: Sequence[str | Path], out_dir: str | Path, window: int = 5, *, seed: int = 0, n_resamples: int = 10_000
) -> Path:
    """``out_dir/seeds.md`` (the findings, the tables, what each column means, how to read n seeds),
    ``out_dir/seeds.json`` (every number) and one figure per series (``out_dir/seeds_<series>.png``);
    returns the markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comparisons = compare(experiments, window=window, n_resamples=n_resamples, seed=seed)
    diff_p, change_p = difference_holm(comparisons), change_holm(comparisons)
    n_differences = sum(not math.isnan(p) for p in diff_p.values())
    families = [
        (n_differences, "population − baseline differences", "in the table's Holm p column"),
        (len(change_p), "start-to-end changes", "in the sentence of each change its t-interval separates"),
    ]
    live_lines, live_records = protocol_liveness(experiments, seed=seed)
    probe_lines, probe_records = probe_floor_lines(experiments, seed=seed)
    analyses = {
        name: {
            run: t
            for run, d in ((r, Path(e) / r) for r in RUNS)
            if d.is_dir() and (t := run_records(d).tasks) is not None
        }
        for name, e in zip(seed_names(experiments), experiments)
    }
    labels = {k.split("/", 1)[1]: HEADLINE[k].removesuffix(" of newly written programs") for k in COMPLEXITY_SERIES}
    lines = [
        f"# Seed protocol: {len(experiments)} seeds",
        "",
        f"n = {len(experiments)} seeds (experiment directories: {', '.join(seed_names(experiments))}). Start: a "
        f"run's mean over its first {window} logged steps; end: over its last {window}; the complexity, repeat and "
        f"non-repeat series pool their items over fixed step windows instead (the run's first and last {window} "
        "steps, the same steps in every run: their steps are sparse). Coverage is the expected "
        "number of distinct AST n-grams among n written programs of that window, one n for every run, seed and "
        "window, so writing more programs does not count as covering more. Intervals are 95%: Student t over "
        "seeds is the headline (paired t for differences at the same seeds); beside it, the seeds' range up to 3 "
        f"seeds, the percentile bootstrap from 4 (pairs resampled together; {n_resamples} resamples, seed {seed}).",
        "",
        how_to_read(len(experiments), families),
        "",
        *live_lines,
        "",
        "## What the seeds show",
        "",
        "Each sentence follows its own t-interval: a rise, fall or difference only where it excludes 0.",
        "",
        *finding_lines(comparisons),
        "",
        "## Population − baseline at the end",
        "",
        *md_table(comparison_table(comparisons)),
        "",
        *[f"- **{name}**: {meaning}" for name, meaning in COLUMNS.items()],
        "",
        "## Start, end and change per run",
        "",
        *md_table(run_table(comparisons)),
        "",
        *[f"- **{name}**: {meaning}" for name, meaning in RUN_COLUMNS.items()],
        "",
        *complexity_window_lines(analyses, window, labels),
        "",
        *probe_lines,
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
        "headline": "t (paired t for paired differences); p two-sided; holm_p over each table's family",
        "series": {c.key: comparison_json(c, experiments, diff_p[c.key], change_p) for c in comparisons},
        "warmup": None if gain is None else warmup_json(gain),
        "power": power,
        "liveness": live_records,
        "probe_floor": probe_records,
    }
    (out / "seeds.json").write_text(json.dumps(_clean(record), indent=1, allow_nan=False) + "\n")
    path = out / "seeds.md"
    path.write_text("\n".join(lines) + "\n")
    return path
