"""The benchmark table and bar chart (PopuLoRA Table 1): base, baseline, and the population's mean,
best and worst member per benchmark, from the results `benchmarks.evaluate` saves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from matplotlib.figure import Figure

from populora_nb.analysis.figures import axes_or_new, save_figure, say_empty
from populora_nb.evaluation.benchmarks import EvalResult
from populora_nb.evaluation.humaneval import NAME as HUMANEVAL
from populora_nb.evaluation.humaneval import benchmark_label


@dataclass(frozen=True)
class TableRow:
    """One benchmark scored by one scorer on one data file: pass@1 per column (nan: not scored)."""

    benchmark: str
    base: float
    baseline: float
    population_mean: float
    best: float
    worst: float
    scorer: str = ""
    """Who made this row's numbers (`EvalResult.scorer`): one scorer per row, never two."""
    source: str = ""
    """Where the row's problems came from (`EvalResult.source`); an average row: the rows it averages."""


def scorer_family(scorer: str) -> str:
    """Who made a number: "official" (evalplus' own evaluator) or "project" (this package's scorers),
    which an average row never mixes ("mixed": an average an older version made over both)."""
    families = {"official" if "official" in part else "project" for part in scorer.split(" + ")}
    return families.pop() if len(families) == 1 else "mixed"


def _stats(xs: Sequence[float]) -> tuple[float, float, float]:
    """(mean, max, min); all nan when the list is empty or any entry is nan (a member not scored)."""
    if not xs or any(math.isnan(x) for x in xs):
        return math.nan, math.nan, math.nan
    return sum(xs) / len(xs), max(xs), min(xs)


def summary_table(results: Sequence[EvalResult], members: Sequence[str] | None = None) -> list[TableRow]:
    """Rows (benchmark, base, baseline, population mean, best, worst member) in pass@1, one per
    benchmark and scorer (results of one benchmark made by two scorers are two rows), naming the data
    file(s) read. Then an "average" row per scorer family over the benchmarks every present
    model was scored on (best / worst: the best and worst member averages, the paper's aggregate),
    leaving out HumanEval's base tests, another measure of HumanEval+'s problems: a base-tests row is
    never averaged with a plus row, nor the project's scorer with official evalplus. `members`
    defaults to every model but "base" and "baseline"; an empty list leaves the population columns nan."""
    base, baseline = "base", "baseline"
    by = {(r.model, r.benchmark, r.scorer): r.score for r in results}
    sources: dict[tuple[str, str], dict[str, None]] = {}  # (benchmark, scorer) -> its data files (an ordered set)
    for r in results:
        sources.setdefault((r.benchmark, r.scorer), {}).update({r.source: None} if r.source else {})
    members = list(members) if members is not None else sorted({r.model for r in results} - {base, baseline})
    present = [m for m in (base, baseline, *members) if any(k[0] == m for k in by)]
    keys = list(sources)

    def row(name: str, values: dict[str, float], scorer: str, source: str) -> TableRow:
        stats = _stats([values.get(m, math.nan) for m in members])
        return TableRow(name, values.get(base, math.nan), values.get(baseline, math.nan), *stats, scorer, source)

    rows = [row(b, {m: by.get((m, b, s), math.nan) for m in present}, s, " + ".join(sources[b, s])) for b, s in keys]
    for family in dict.fromkeys(scorer_family(k[1]) for k in keys):
        scored = [
            k
            for k in keys
            if scorer_family(k[1]) == family
            and k[0] != HUMANEVAL
            and present
            and all(not math.isnan(by.get((m, *k), math.nan)) for m in present)
        ]
        if not scored or len({k[0] for k in scored}) < len(scored):  # a benchmark twice: no one average
            continue
        avg = {m: sum(by.get((m, *k), math.nan) for k in scored) / len(scored) for m in (base, baseline, *members)}
        scorers = " + ".join(dict.fromkeys(k[1] for k in scored))
        rows.append(row("average", avg, scorers, "mean of " + ", ".join(k[0] for k in scored)))
    return rows


def format_table(rows: Sequence[TableRow]) -> str:
    """A Markdown table in percent (n/a where a model has no score), each row naming its scorer and data."""

    def pct(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{100 * x:.1f}"

    lines = [
        "| benchmark | base | baseline | population mean | best | worst | scorer | data |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    lines += [
        f"| {benchmark_label(r.benchmark)} | {pct(r.base)} | {pct(r.baseline)} | {pct(r.population_mean)} | "
        f"{pct(r.best)} | {pct(r.worst)} | {r.scorer} | {r.source or 'not recorded'} |"
        for r in rows
    ]
    return "\n".join(lines)


def plot_benchmarks(table: Sequence[TableRow]) -> Figure:
    """Grouped bars (base, baseline, population mean with a best-worst range) per benchmark."""
    fig, ax = axes_or_new(None, (max(6.0, 1.3 * len(table)), 3.6))
    x = list(range(len(table)))
    w = 0.26
    nan0 = lambda v: 0.0 if math.isnan(v) else 100 * v  # noqa: E731 - a bar of height 0 for "n/a"
    ax.bar([i - w for i in x], [nan0(r.base) for r in table], w, label="base", color="#b0b0b0")
    ax.bar(x, [nan0(r.baseline) for r in table], w, label="baseline (AZR)", color="#4c72b0")
    means = [nan0(r.population_mean) for r in table]
    lo = [max(0.0, m - nan0(r.worst)) for m, r in zip(means, table)]
    hi = [max(0.0, nan0(r.best) - m) for m, r in zip(means, table)]
    ax.bar(
        [i + w for i in x], means, w, yerr=[lo, hi], capsize=3, label="population mean (best-worst)", color="#dd8452"
    )
    names = [
        benchmark_label(r.benchmark) + (" (official)" if scorer_family(r.scorer) == "official" else "") for r in table
    ]
    ax.set_xticks(x, names, rotation=30, ha="right")
    top = max([0.0] + [nan0(getattr(r, k)) for r in table for k in ("base", "baseline", "best")])
    ax.set_ylim(0, min(100.0, max(5.0, 1.15 * top)))  # pass@1 is never negative; 5% keeps small bars visible
    if top == 0:
        say_empty(ax, "every model scored 0 on these problems")
    ax.set(ylabel="pass@1 (%)", title="pass@1 by benchmark")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_report(
    results: Sequence[EvalResult], out_dir: str | Path, members: Sequence[str] | None = None
) -> dict[str, Path]:
    """Save the summary as ``table.md``, ``table.json`` and ``benchmarks.png`` in `out_dir` (for
    ``python -m populora_nb eval`` and notebook 06); returns the paths by kind."""
    rows = summary_table(results, members)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "table.md", "json": out / "table.json", "figure": out / "benchmarks.png"}
    paths["markdown"].write_text(format_table(rows) + "\n")
    paths["json"].write_text(
        json.dumps(
            [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(r).items()} for r in rows],
            indent=1,
        )
    )
    save_figure(plot_benchmarks(rows), paths["figure"])
    return paths
