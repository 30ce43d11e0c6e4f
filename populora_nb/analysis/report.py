"""The experiment report: every figure as a PNG under EXP/figures, and report.md + report.html
that show them with the tables (benchmarks, collapse verdicts, run summary).

Both documents are written from one list of sections, so they always say the same thing.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from populora_nb.analysis import complexity_plots, plots
from populora_nb.analysis.complexity import detect_collapse
from populora_nb.analysis.compute import compute_table
from populora_nb.analysis.coverage import COVERAGE_KINDS, proposers, rarefaction_curves
from populora_nb.analysis.difficulty_probe import plot_probe, probe_events, probe_table
from populora_nb.analysis.figures import save_figure
from populora_nb.analysis.frames import load_tasks, per_step, read_stream
from populora_nb.analysis.liveness import CHECKS, liveness
from populora_nb.analysis.runs import experiment_runs
from populora_nb.analysis.seed_stats import md_table
from populora_nb.config import ExperimentConfig
from populora_nb.evaluation.humaneval import benchmark_label
from populora_nb.evaluation.report import scorer_family
from populora_nb.evolution import Lineage
from populora_nb.probe import probe_due
from populora_nb.records import RunDir


@dataclass
class Section:
    """One part of the report: the same title, text, figures and table in report.md and report.html."""

    title: str
    text: str = ""
    images: list[str] = field(default_factory=list)
    """Paths relative to the experiment directory."""
    table: list[list[str]] = field(default_factory=list)
    """First row is the header."""


def make_figures(out: str | Path) -> list[Path]:
    """Render every figure the report shows into ``out/figures``."""
    out = Path(out)
    runs = experiment_runs(out)
    if not runs:
        raise FileNotFoundError(f"{out} holds no baseline/ or population/ run to analyse")
    kinds = RunDir(next(iter(runs.values()))).load_config().tasks.kinds
    paths: list[Path] = []
    save = lambda fig, name: paths.append(save_figure(fig, out / "figures" / name))  # noqa: E731
    save(plots.plot_solve_rates(runs, kinds=kinds), "solve_rates.png")
    save(plots.plot_solve_rates(runs, kinds=kinds, source="buffer"), "buffer_solve_rates.png")
    save(plots.plot_step_metric(runs, "teacher/valid_rate", title="Valid-proposal rate"), "valid_rate.png")
    if "baseline" in runs:
        save(plots.plot_rewards(runs["baseline"]), "baseline_rewards.png")
    if "population" in runs:
        pop = runs["population"]
        save(plots.plot_ratings(pop), "ratings.png")
        save(plots.plot_solve_matrix(pop), "solve_matrix.png")
        save(plots.plot_valid_rate_per_teacher(pop), "valid_rate_per_teacher.png")
        save(plots.plot_invalid_reasons(pop), "invalid_reasons.png")
        lineage = read_stream(pop, "lineage")
        births = [
            Lineage(r.child, tuple(r.parents), r.operator, r.birth_step, r.role, r.replaced)
            for r in lineage.itertuples()
        ]
        if births:
            save(plots.plot_lineage(births), "lineage.png")
    if any(probe_events(path) for path in runs.values()):
        save(plot_probe(runs), "difficulty_probe.png")
    tasks = {name: load_tasks(path) for name, path in runs.items()}
    window = max(1, min(5, max(t["step"].nunique() for t in tasks.values()) // 4))
    save(complexity_plots.plot_copy_rate(tasks, window=window), "copy_rate.png")
    save(complexity_plots.plot_program_metrics(tasks, window=window), "complexity.png")
    # Coverage at equal sample sizes (rarefaction), never raw cumulative counts: the population
    # proposes several times the baseline's volume. A fixed seed keeps the report reproducible.
    rng = np.random.default_rng(0)
    curves = {kind: rarefaction_curves(tasks, kind, rng) for kind in COVERAGE_KINDS}
    save(complexity_plots.plot_rarefaction_grid(curves), "coverage.png")
    if "population" in tasks and proposers(tasks["population"]):
        per_teacher = complexity_plots.plot_program_metric_per_proposer(tasks["population"], "ast_depth", window)
        save(per_teacher, "complexity_per_teacher.png")
    return paths


def run_length_note(config: ExperimentConfig) -> str:
    """What a population run of this length can and cannot show, from its config alone: the counts
    above need only a few matches, but a child is judged only at an evolution event outside its
    grace, and a trend (an arms race, a collapse, a change in probe difficulty) needs many steps."""
    steps, ec = config.run.steps, config.evolution
    births = [s + 1 for s in range(steps) if ec.enabled and (s + 1) % ec.every == 0 and s + 1 < steps]
    judged = [b for b in births if any(e >= b + ec.grace for e in births)]
    probes = sum(probe_due(s, config) for s in range(steps))
    can = (
        f"In {steps} steps this run can show that the loop acts: teachers winning games, tasks in the band, "
        f"{len(births)} evolution event{'s' if len(births) != 1 else ''} replacing members, "
        f"{probes} probe event{'s' if probes != 1 else ''}."
    )
    if judged:
        cannot = "It can judge children born at steps " + ", ".join(map(str, judged)) + "."
    else:
        cannot = (
            f"It cannot judge any child (one is first judged {ec.grace} steps after its birth, at an event "
            f"outside its grace), so 'children survived' reads 0 of 0 here, not a failure."
        )
    short = (
        " Nor can a run this short show a trend: an arms race or a collapse, a change of the probe's difficulty, "
        "or a population − baseline difference needs the `cpu` preset's 40 steps over seeds (docs/laptop-run.md)."
    )
    return can + " " + cannot + (short if steps < 20 else "")


def sections(out: Path) -> list[Section]:
    """The report's sections, in order: each a title, its text, its figures and its table."""
    runs = experiment_runs(out)
    fig = lambda name: [f"figures/{name}"] if (out / "figures" / name).exists() else []  # noqa: E731
    secs = [
        Section(
            "Runs",
            "What was trained, from `config.yaml`. Mean solve rate: ρ of fresh proposals "
            "(tasks proposed that step, solved by their matched student), not buffer tasks.",
            table=_run_table(out, runs),
        )
    ]
    if "population" in runs:
        live = liveness(runs["population"])
        secs.append(
            Section(
                "Is the mechanism live?",
                "Read before any curve (docs/design.md), each check against its threshold (`analysis.liveness`: "
                + "; ".join(f"{k}: {v}" for k, v in CHECKS.items())
                + "). Each share check reads its 95% interval: pass at or above the threshold, fail below, "
                "inconclusive across it, too few to judge with fewer than 4 step blocks. A new program is one the "
                "run had not met (names normalised); a repeat is the same task as its student meets it, met before, "
                "so the band and the teacher's games count non-repeats; a child is judged at its first event "
                "outside grace. "
                + "**Population**: "
                + live.summary()
                + (f" **Baseline**: {liveness(runs['baseline']).summary()}" if "baseline" in runs else "")
                + " "
                + run_length_note(RunDir(runs["population"]).load_config()),
            )
        )
    secs += [
        Section(
            "Compute",
            "Measured, in completion tokens (`compute/generated_tokens`: proposals and every rollout, "
            "including AZR's learnability rollouts that are not trained on; `compute/trained_tokens`: the "
            "samples of updates that ran). The paper's baseline is per-adapter compute-matched: read literally, "
            "each population member trains on about what the single agent trains on (a per-adapter trained "
            "ratio within ±15%, column 'trained within'), so the population's total is about n times the "
            "baseline's. Generated tokens cannot match as well: the agent's learnability rollouts are never "
            "trained on, a student's rollouts always are (analysis/compute.py).",
            table=compute_table(runs),
        ),
        _probe_section(runs, fig("difficulty_probe.png")),
        Section(
            "Solve rates per task kind",
            "Baseline (single AZR agent) and population on one axis. Top: ρ of fresh proposals (the headline). "
            "Then: attempts at buffer tasks (PopuLoRA's top-ups, AZR's solver batch), kept apart.",
            fig("solve_rates.png") + fig("buffer_solve_rates.png") + fig("valid_rate.png"),
        ),
    ]
    if "baseline" in runs:
        secs += [
            Section("Baseline rewards", "AZR proposer reward and solver reward per step.", fig("baseline_rewards.png"))
        ]
    if "population" in runs:
        matrix = fig("solve_matrix.png") + fig("valid_rate_per_teacher.png") + fig("invalid_reasons.png")
        lineage = "No evolution event in this run (shorter than evolution.every steps)."
        if fig("lineage.png"):
            lineage = "Children of evolution and their parents."
        secs += [
            Section(
                "TrueSkill trajectories", "μ per member, ±σ bands; red teachers, blue students.", fig("ratings.png")
            ),
            Section("Teacher × student solve-rate matrix", "Mean ρ over the matches PFSP chose.", matrix),
            Section("Lineage", lineage, fig("lineage.png")),
        ]
    secs += [
        Section(
            "Complexity and coverage",
            "First the copy rate: the share of valid proposals that repeat a reference shown in their "
            "prompt, a seed, a warm-up example or an earlier program (populora_nb/copies.py). Then, over the "
            "rest (what the proposers newly wrote), AST depth, cyclomatic complexity, lines of code, variables "
            "(code_o/code_i; a code_f program is a buffer program, only its inputs count), and distinct AST "
            "shapes, node n-grams and I/O type signatures against the number of proposals drawn (rarefaction, "
            "compared at equal n; definitions: populora_nb/analysis/complexity.py, coverage.py).",
            fig("copy_rate.png") + fig("complexity.png") + fig("coverage.png") + fig("complexity_per_teacher.png"),
            table=_collapse_table(runs),
        ),
        _benchmark_section(out),
    ]
    return secs


def _probe_section(runs: dict[str, Path], images: list[str]) -> Section:
    """The difficulty probe (`populora_nb.probe`): ρ of a run's own matches mixes the tasks' difficulty
    with the students' skill; the probe holds the solver and the prompts fixed."""
    table = probe_table(runs)
    if len(table) == 1:
        return Section(
            "Difficulty probe",
            "Not run (probe.every = 0): the runs' ρ cannot be split into task difficulty and student skill.",
        )
    return Section(
        "Difficulty probe",
        "Every few steps each run answers the same fixed proposer prompts under the same seeds, as many in "
        "both runs (split across the teachers, pooled; the agent answers all), and one frozen solver (the "
        "starting adapter, never trained) attempts each valid task `probe.rollouts` times. Its solve rate, "
        "probe ρ, is difficulty on one scale for both runs: lower is harder, and a weaker student cannot move"
        " it. Step 0 is before any training (the same adapter in both runs). Intervals: 95% t over an event's"
        " tasks; last − first: Welch; descriptive within one run (the seed protocol compares seeds). Cost per"
        " step: the probe's seconds over the training steps' seconds.",
        images,
        table,
    )


def _run_table(out: Path, runs: dict[str, Path]) -> list[list[str]]:
    header = ["run", "model", "members", "steps logged", "valid proposals", "mean solve rate"]
    rows = [header + ["s/step", "peak memory (GB)", "time (s)"]]
    stages = json.loads((out / "stages.json").read_text()) if (out / "stages.json").exists() else {}
    for name, path in runs.items():
        rd = RunDir(path)
        cfg = rd.load_config()
        metrics, tasks = read_stream(path, "metrics"), read_stream(path, "tasks")
        solve = metrics["student/solve_rate"].dropna() if "student/solve_rate" in metrics else []
        members = "1 agent" if name == "baseline" else f"{cfg.population.n_teachers}T + {cfg.population.n_students}S"
        valid = int(tasks["valid"].astype(bool).sum()) if len(tasks) else 0
        counts = [str(metrics["step"].nunique() if len(metrics) else 0), f"{valid}/{len(tasks)}"]
        mean = f"{sum(solve) / len(solve):.3f}" if len(solve) else "n/a"
        seconds = str(stages.get(name, {}).get("seconds", "n/a"))
        rows.append([name, cfg.model.name, members, *counts, mean, *_cost(metrics), seconds])
    return rows


def _cost(metrics: pd.DataFrame) -> tuple[str, str]:
    """Mean seconds per step and the largest per-step peak memory (the GPU's when it ran on one, else
    the process's resident set)."""
    seconds = per_step(metrics, "time/step_s", how="first")
    gpu, none = "memory/cuda_peak_gb" in metrics, pd.Series(np.nan, index=metrics.index)
    peaks = metrics.get("memory/cuda_peak_gb", none).fillna(metrics.get("memory/peak_rss_gb", none)).dropna()
    return (
        f"{sum(seconds) / len(seconds):.1f}" if len(seconds) else "n/a",
        f"{max(peaks):.2f}{' (GPU)' if gpu else ' (RSS)'}" if len(peaks) else "n/a",
    )


def _collapse_table(runs: dict[str, Path]) -> list[list[str]]:
    rows = [["run", "collapse?", "solve rate (end)", "metrics falling", "why"]]
    for name, path in runs.items():
        r = detect_collapse(load_tasks(path))  # load_tasks keeps the frame make_figures parsed
        end = "n/a" if math.isnan(r.solve_rate_end) else f"{r.solve_rate_end:.2f}"
        rows.append([name, "yes" if r.collapsed else "no", end, str(r.n_falling), r.reason])
    return rows


def _benchmark_section(out: Path) -> Section:
    """The benchmark table; each row names the scorer that made its numbers. When the official
    evalplus re-score exists (`benchmarks/official.py`, under eval/evalplus/), its rows follow."""
    eval_dir = out / "eval"
    table_json = eval_dir / "table.json"
    note = (eval_dir / "NOTE.txt").read_text().strip() if (eval_dir / "NOTE.txt").exists() else ""
    if not table_json.exists():
        return Section("Benchmarks", f"Not evaluated. {note}".strip())
    rows = json.loads(table_json.read_text())
    official = eval_dir / "evalplus" / "table.json"
    if official.exists():  # only its officially scored rows (their average too): the rest repeat eval/table.json
        # (not an average an older version made over both scorers)
        rows += [r for r in json.loads(official.read_text()) if scorer_family(r.get("scorer") or "") == "official"]
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}"  # noqa: E731
    table = [["benchmark", "base", "baseline", "population mean", "best", "worst", "scorer", "data"]]
    for r in rows:
        cells = [pct(r[k]) for k in ("base", "baseline", "population_mean", "best", "worst")]
        scorer = r.get("scorer") or "project (written before scorers were recorded)"
        table.append([benchmark_label(r["benchmark"]), *cells, scorer, r.get("source") or "not recorded"])
    text = "pass@1 (%), greedy" + (f"; {note}" if note else "") + "."
    if official.exists():
        text += " Rows scored by official evalplus 0.3.1 (run in the sandbox) say so in the scorer column."
    return Section("Benchmarks", text, ["eval/benchmarks.png"] if (eval_dir / "benchmarks.png").exists() else [], table)


def _inline_code(text: str) -> str:
    """Markdown's `code` spans as <code> in the HTML twin (the text is already escaped)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def write_report(out: str | Path) -> tuple[Path, Path]:
    """report.md and report.html for an experiment directory (figures must exist: make_figures)."""
    out = Path(out)
    secs = sections(out)
    md = [f"# PopuLoRA experiment report\n\n`{out}`\n"]
    body = [f"<h1>PopuLoRA experiment report</h1><p><code>{html.escape(str(out))}</code></p>"]
    for s in secs:
        md.append(f"## {s.title}\n\n{s.text}\n")
        body.append(f"<h2>{html.escape(s.title)}</h2><p>{_inline_code(html.escape(s.text))}</p>")
        if s.table:
            md.append("\n".join(md_table([[c.replace("|", "\\|") for c in r] for r in s.table])) + "\n")
            head = "".join(f"<th>{html.escape(c)}</th>" for c in s.table[0])
            cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in s.table[1:])
            body.append(f"<table><tr>{head}</tr>{cells}</table>")
        for img in s.images:
            md.append(f"![{s.title}]({img})\n")
            body.append(f'<img src="{html.escape(img)}" alt="{html.escape(s.title)}">')
    md_path, html_path = out / "report.md", out / "report.html"
    md_path.write_text("\n".join(md))
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:auto}img{max-width:100%;display:block;margin:8px 0}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}"
    )
    html_path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>PopuLoRA report</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )
    return md_path, html_path
