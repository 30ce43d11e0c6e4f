# %% [markdown]
# # 05 · Task complexity and coverage: collapse or arms race?
#
# **Goal:** measure every valid program a run's teachers proposed (AST depth, cyclomatic
# complexity, lines of code, variable count, I/O types) and how much of the problem space they
# covered, then compare the single-agent baseline with the population. The paper's picture
# (PopuLoRA Fig. 4): the baseline's programs shrink together while its solve rate nears 100%
# (collapse); the population's grow, its solve rates oscillate and its coverage keeps growing.
#
# Programs are only parsed (`ast`, radon), never executed.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
run_dir = None  # experiment dir with baseline/ and population/, or one run dir; None: out_dir or notebooks 02/03's runs, else a synthetic demo
out_dir = None  # when set, every figure is saved there as PNG
window = 5  # rolling-mean window, in steps

# %%
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

from populora_nb import complexity, complexity_plots

print(f"preset={preset!r} run_dir={run_dir!r} out_dir={out_dir!r} window={window}")


def save(fig, name):
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(out_dir) / f"05_{name}.png", dpi=110, bbox_inches="tight")


# %% [markdown]
# ## The runs
# With `run_dir` set, the notebook reads the run directories found there (`tasks.jsonl` in each).
# With `run_dir = None` there is no real run to read yet, so it writes a **synthetic demo
# experiment** with the test fixture generator (`tests/fake_runs.py`): random programs whose
# complexity is scripted to fall (baseline) or rise (population). Its figures show how the
# analysis reads, not a result; every title then says "SYNTHETIC".

# %%
if run_dir is None:
    # The experiment that `make run` (out_dir) or notebooks 02 and 03 wrote, when there is one.
    for candidate in ([Path(out_dir)] if out_dir else []) + [Path("..") / "runs" / f"notebooks-{preset}"]:
        if (candidate / "population" / "tasks.jsonl").exists() or (candidate / "baseline" / "tasks.jsonl").exists():
            run_dir = candidate
            break
synthetic = run_dir is None
if synthetic:
    repo = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "tests" / "fake_runs.py").is_file())
    sys.path.insert(0, str(repo / "tests"))
    from fake_runs import write_fake_experiment

    run_dir = write_fake_experiment(Path(tempfile.mkdtemp(prefix="populora_demo_")),
                                    n_steps=20 if preset == "tiny" else 40, seed=0)
    print(f"SYNTHETIC demo experiment written to {run_dir} (no model was run)")
tag = " (SYNTHETIC demo data)" if synthetic else ""
runs = complexity.find_runs(run_dir)
analyses = {name: complexity.analyse_run(path) for name, path in runs.items()}
for name, a in analyses.items():
    print(f"{name:>12}: {a.n_tasks} proposed tasks over {len(a.steps)} steps, {a.n_invalid} invalid, "
          f"{len(a.programs)} valid programs ({a.n_unparseable} did not parse), proposers {a.proposers}")

# %% [markdown]
# ## Complexity over steps
# What to look for: the baseline's four complexity curves falling together while its solve rate
# climbs towards 1; the population's rising. Lines are rolling means over `window` steps, bands
# the interquartile range of the programs in the window.

# %%
fig = complexity_plots.plot_metrics_grid(analyses, window=window,
                                         title=f"baseline vs population: complexity over steps{tag}")
save(fig, "complexity")
plt.show()

# %% [markdown]
# Program length in characters and the largest single-function complexity, for completeness.

# %%
fig = complexity_plots.plot_metrics_grid(analyses, metrics=("n_chars", "cc_max"), window=window,
                                         title=f"length and max cyclomatic complexity{tag}")
save(fig, "length")
plt.show()

# %% [markdown]
# ## Coverage of the problem space
# Our definition (the paper gives none): cumulative counts, over all programs proposed so far, of
# distinct **AST shapes** (the tree with the program's own names renamed in order of appearance
# and constants replaced by their type), distinct **node-type n-grams** (chains of up to 3 node
# types along parent-child paths) and distinct **I/O type signatures** like `(list[int]) -> int`.
# What to look for: the population's curves still climbing at the end; a collapsed baseline's
# flattening once it repeats itself.

# %%
curves = {name: complexity.coverage_curves(a)["all"] for name, a in analyses.items()}
fig = complexity_plots.plot_coverage_grid(curves, title=f"problem-space coverage{tag}")
save(fig, "coverage")
plt.show()

# %% [markdown]
# ## Collapse detector
# A run is flagged when its solve rate over the last 20% of steps averages at least 0.9 and at
# least 3 of the 4 complexity metrics fell by 10% or more (least-squares trend line, its last-step
# level against its first-step level, relative to the larger). The numbers behind each verdict
# are printed.

# %%
reports = {name: complexity.detect_collapse(a) for name, a in analyses.items()}
for name, report in reports.items():
    changes = ", ".join(f"{m} {c:+.0%}" for m, c in report.relative_change.items())
    print(f"{name:>12}: collapsed={report.collapsed}  ({report.reason})\n{'':>14}{changes}")

# %% [markdown]
# ## Per teacher
# What to look for: whether one teacher carries the complexity, or all of them climb; and which
# teachers still add new shapes late in the run.

# %%
for name, a in analyses.items():
    if len(a.proposers) < 2:
        continue
    fig, axes = plt.subplots(1, 5, figsize=(19, 3.4))
    for ax, metric in zip(axes, (*complexity.COMPLEXITY_FIELDS, "solve_rate")):
        complexity_plots.plot_per_proposer(a, metric, window=window, ax=ax,
                                           title=complexity_plots.LABELS[metric])
    fig.suptitle(f"{name}: per teacher (rolling {window}-step mean){tag}")
    fig.tight_layout()
    save(fig, f"{name}_per_teacher")
    plt.show()
    fig = complexity_plots.plot_coverage_grid(complexity.coverage_curves(a, by_proposer=True),
                                              title=f"{name}: coverage per teacher{tag}")
    save(fig, f"{name}_coverage_per_teacher")
    plt.show()

# %% [markdown]
# ## Verify it is real
# Every valid program of every run was measured, coverage never decreases, and the saved figures exist. On the
# synthetic demo the detector must flag the scripted collapse and not the scripted arms race.

# %%
# A short run of a small (or, in `tiny`, random) model may have no valid program at all: then its
# curves are empty, which is a result, not a failure. Every valid task must have been measured.
assert analyses and all(a.n_tasks > 0 for a in analyses.values()), "a run has no task records"
assert all(len(a.programs) == a.n_tasks - a.n_invalid for a in analyses.values())
if synthetic:
    assert all(a.programs for a in analyses.values()), "the synthetic demo writes valid programs"
for name, curve in curves.items():
    for kind in ("shapes", "ngrams", "signatures"):
        values = getattr(curve, kind)
        assert all(b >= a for a, b in zip(values, values[1:])), f"{name} {kind} coverage decreased"
if synthetic:
    assert reports["baseline"].collapsed and not reports["population"].collapsed
if out_dir is not None:
    saved = sorted(p.name for p in Path(out_dir).glob("05_*.png"))
    assert {"05_complexity.png", "05_coverage.png"} <= set(saved), saved
    print("saved:", saved)
print("ok")
