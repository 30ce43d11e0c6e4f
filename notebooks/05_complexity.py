# %% [markdown]
# # 05 · Task complexity and coverage: collapse or arms race?
#
# **Goal:** measure the programs a run's proposers wrote (AST depth, cyclomatic complexity, lines
# of code, variable count, I/O types) and how much of the problem space they covered at equal
# sample sizes, then compare the single-agent baseline with the population. The paper's picture
# (PopuLoRA Fig. 4): the baseline's programs shrink together while its solve rate nears 100%
# (collapse); the population's grow, its solve rates oscillate and it covers more of the space.
#
# Only what a proposer **wrote** is measured: code_o and code_i programs. A code_f proposer is
# handed a buffer program (a seed or an older task) and writes only its inputs, so a code_f task
# adds its I/O type signatures and its solve rate, never its program. And only what it **newly**
# wrote: a valid proposal that copies a reference shown in its prompt, a seed, a warm-up example or
# an earlier program of the run (`populora_nb.copies`; programs compared after `ast.unparse`) is
# counted in the copy rate and left out of complexity and coverage, which would otherwise fall
# because copying rises. Programs are only parsed (`ast`, radon), never executed.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
# experiment dir with baseline/ and population/, or one run dir;
# None: out_dir or notebooks 02/03's runs, else a synthetic demo
run_dir = None
out_dir = None  # when set, every figure is saved there as PNG
window = 5  # rolling-mean window, in steps
seed = 0  # seeds the random orders of the coverage rarefaction
n_resamples = 200  # random orders averaged per rarefaction curve

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from populora_nb.analysis import complexity, complexity_plots, coverage
from populora_nb.analysis.figures import save_figure
from populora_nb.analysis.frames import load_tasks
from populora_nb.analysis.runs import find_runs
from populora_nb.presets import PRESET_SHOWS
from studies.synthetic import write_synthetic_experiment

if run_dir is None:  # the preset's runs: what they can show
    print(PRESET_SHOWS.get(preset, f"preset {preset}"))

print(
    f"preset={preset!r} run_dir={run_dir!r} out_dir={out_dir!r} window={window} seed={seed} n_resamples={n_resamples}"
)


def save(fig, name):
    if out_dir is not None:
        save_figure(fig, Path(out_dir) / f"05_{name}.png", close=False)  # still shown below


# %% [markdown]
# ## The runs
# With `run_dir` set, the notebook reads the run directories found there (`tasks.jsonl` in each).
# With `run_dir = None` it reads the experiment that `make run` (`out_dir`) or notebooks 02 and 03
# (`../runs/notebooks-{preset}`) wrote. Where there is none yet, or none of its proposals was valid
# (the `tiny` preset's random model), it writes a **synthetic demo
# experiment** (`studies.synthetic`): random programs whose complexity is scripted to
# fall (baseline) or rise (population). Its figures show how the analysis reads, not a result;
# every title then says "SYNTHETIC".

# %%
if run_dir is not None:
    runs = find_runs(run_dir)
else:  # only runs with task records can be measured
    found = find_runs(out_dir, Path("..") / "runs" / f"notebooks-{preset}", missing_ok=True)
    runs = {name: path for name, path in found.items() if (path / "tasks.jsonl").is_file()}
    if runs and not any(load_tasks(path)["valid"].astype(bool).any() for path in runs.values()):
        print(
            f"{', '.join(map(str, runs.values()))}: no valid proposal, nothing to measure: the synthetic demo instead"
        )
        runs = {}
synthetic = not runs
if synthetic:
    run_dir = write_synthetic_experiment(
        Path(tempfile.mkdtemp(prefix="populora_demo_")), n_steps=20 if preset == "tiny" else 40, seed=0
    )
    runs = find_runs(run_dir)
    print(f"SYNTHETIC demo experiment written to {run_dir} (no model was run)")
tag = " (SYNTHETIC demo data)" if synthetic else ""
tasks = {name: load_tasks(path) for name, path in runs.items()}  # one row per task, each program parsed once
for name, t in tasks.items():
    valid, new, programs = coverage.valid_tasks(t), coverage.new_tasks(t), coverage.measured(t)
    print(
        f"{name:>12}: {len(t)} proposed tasks over {t['step'].nunique()} steps, {len(t) - len(valid)} invalid, "
        f"{len(programs)} written programs ({(~programs['parsed'].astype(bool)).sum()} did not parse), "
        f"{len(new) - len(programs)} code_f input sets newly written, {len(valid) - len(new)} copies; "
        f"proposers {coverage.proposers(t)}"
    )

# %% [markdown]
# ## How much of it was copied
# What to look for: the share of valid proposals that repeat a shown reference, a seed, a warm-up
# example or an earlier program. A small model copies more as it learns what the verifier accepts;
# the curves below count only the rest, so read them beside this one (band: ±1 binomial SE).

# %%
fig = complexity_plots.plot_copy_rate(tasks, window=window, title=f"copy rate of valid proposals{tag}")
save(fig, "copy_rate")
plt.show()

# %% [markdown]
# ## How much of it was posed before
# What to look for: the share of valid tasks that repeat a task met before, program *and* input (a copied
# program with a new input is a new task; a repeat is not), per proposing role: the teachers of a
# population, the agent of the baseline. A repeat's solve rate measures memory, not difficulty.

# %%
fig = complexity_plots.plot_repeat_rate(tasks, window=window, title=f"repeat rate of valid tasks{tag}")
save(fig, "repeat_rate")
plt.show()

# %% [markdown]
# ## How hard the tasks are for a fixed reader
# A run's own ρ mixes the tasks' difficulty with the students' skill: a falling ρ can mean harder
# tasks or a weaker student. The difficulty probe (`populora_nb.probe`) holds the rest fixed: every
# few steps each run answers the same prompts under the same seeds, as many in both runs (split across
# the teachers), and one frozen solver (the starting adapter, never trained) attempts each valid task.
# What to look for: the baseline's probe ρ
# climbing (easier tasks: collapse) while the teachers' falls (harder tasks: the arms race); curves
# that do not move say the run's own ρ moved with its students. Bands: 95% t over an event's tasks.

# %%
from populora_nb.analysis.difficulty_probe import plot_probe, probe_table

fig = plot_probe(runs)
fig.suptitle(f"difficulty probe{tag}", y=1.02)
save(fig, "difficulty_probe")
plt.show()
for row in probe_table(runs):
    print(" | ".join(row))

# %% [markdown]
# ## Complexity over steps
# What to look for: the baseline's four complexity curves falling together while its solve rate
# climbs towards 1; the population's rising. Lines are rolling means over `window` steps, bands
# the interquartile range of the programs in the window.

# %%
fig = complexity_plots.plot_program_metrics(
    tasks, window=window, title=f"baseline vs population: complexity over steps{tag}"
)
save(fig, "complexity")
plt.show()

# %% [markdown]
# Program length in characters and the largest single-function complexity, for completeness.

# %%
fig = complexity_plots.plot_program_metrics(
    tasks, metrics=("n_chars", "cc_max"), window=window, title=f"length and max cyclomatic complexity{tag}"
)
save(fig, "length")
plt.show()

# %% [markdown]
# ## Coverage of the problem space, at equal sample sizes
# Our definition (the paper gives none): distinct **AST shapes** (the tree with the program's own
# names renamed in order of appearance and constants replaced by their type), distinct
# **node-type n-grams** (chains of up to 3 node types along parent-child paths) and distinct
# **I/O type signatures** like `(list[int]) -> int`.
#
# A raw cumulative count grows with volume alone, and 4 teachers propose 4x what one agent does.
# So each curve is a **rarefaction** curve: the distinct count among n proposals drawn at random
# from the run, averaged over `n_resamples` random orders; the band holds 90% of those orders
# (5th-95th percentile). What to look for: at the dotted line, the largest n both runs reach,
# is the population's value above the baseline's band, or inside it (no difference at equal n)?

# %%
rng = np.random.default_rng(seed)
curves = {
    kind: coverage.rarefaction_curves(tasks, kind, rng, n_resamples=n_resamples) for kind in coverage.COVERAGE_KINDS
}
fig = complexity_plots.plot_rarefaction_grid(curves, title=f"problem-space coverage at equal n{tag}")
save(fig, "coverage")
plt.show()
for kind, per_run in curves.items():
    if all(c.size > 0 for c in per_run.values()):
        print(f"{kind:>10} {coverage.compare_at_equal_n(per_run).summary()}")
    else:
        print(f"{kind:>10}: a run has no {coverage.SAMPLE_UNITS[kind]}: nothing to compare")

# %% [markdown]
# ## Collapse detector
# A run is flagged when its solve rate over the last 20% of steps averages at least 0.9 and at
# least 3 of the 4 complexity metrics fell by 10% or more (least-squares trend line, its last-step
# level against its first-step level, relative to the larger). The numbers behind each verdict
# are printed.

# %%
reports = {name: complexity.detect_collapse(t) for name, t in tasks.items()}
for name, report in reports.items():
    changes = ", ".join(f"{m} {c:+.0%}" for m, c in report.relative_change.items())
    print(f"{name:>12}: collapsed={report.collapsed}  ({report.reason})\n{'':>14}{changes}")

# %% [markdown]
# ## Per teacher
# What to look for: whether one teacher carries the complexity, or all of them climb; and whether
# each teacher alone covers as much as the single agent (dashed) at the same number of proposals.

# %%
for name, t in tasks.items():
    if len(coverage.proposers(t)) < 2:
        continue
    fig, axes = plt.subplots(1, 5, figsize=(19, 3.4))
    for ax, metric in zip(axes, (*complexity.COMPLEXITY_FIELDS, "solve_rate")):
        complexity_plots.plot_program_metric_per_proposer(
            t, metric, window=window, ax=ax, title=complexity_plots.LABELS[metric]
        )
    fig.suptitle(f"{name}: per teacher (rolling {window}-step mean){tag}")
    fig.tight_layout()
    save(fig, f"{name}_per_teacher")
    plt.show()
    per_teacher = {
        kind: coverage.per_proposer_curves(t, kind, rng, n_resamples=n_resamples) for kind in coverage.COVERAGE_KINDS
    }
    others = {other: u for other, u in tasks.items() if other != name and len(coverage.proposers(u)) == 1}
    for kind in per_teacher:  # the single agent, dashed, for reference at equal n
        per_teacher[kind] |= coverage.rarefaction_curves(others, kind, rng, n_resamples=n_resamples)
    fig = complexity_plots.plot_rarefaction_grid(
        per_teacher, styles={other: "--" for other in others}, title=f"{name}: coverage per teacher at equal n{tag}"
    )
    save(fig, f"{name}_coverage_per_teacher")
    plt.show()

# %% [markdown]
# ## Verify it is real
# Every valid task of every run was sorted into a newly written program, a code_f input set or a
# copy; rarefaction curves never decrease and end at the run's raw distinct count; the saved figures
# exist. On the synthetic demo the detector must flag the scripted collapse and not the scripted
# arms race.

# %%
# A short run of a small (or, in `tiny`, random) model may have no valid program at all: then its
# curves are empty, which is a result, not a failure. Every valid task must have been measured.
# Printed here; tests/test_complexity.py asserts them.
for name, t in tasks.items():
    valid, programs = coverage.valid_tasks(t), coverage.measured(t)
    sorted_ = len(programs) + (~coverage.new_tasks(t)["written"]).sum() + (valid["copy"] != "new").sum()
    print(
        f"{name}: {len(t)} task rows; {sorted_} sorted of {len(valid)} valid; kinds of programs "
        f"{sorted(set(programs['kind']))}"
    )
for kind, per_run in curves.items():
    for name, curve in per_run.items():
        raw = len(set().union(*coverage.coverage_units(tasks[name], kind)))
        rising = bool(all(np.diff(curve.mean) >= 0) and all(np.diff(curve.lo) >= 0))
        print(f"{name} {kind}: coverage never decreases {rising}; ends at {curve.mean[-1]:g}, raw distinct {raw}")
if synthetic:
    print(f"collapse flagged: baseline {reports['baseline'].collapsed}, population {reports['population'].collapsed}")
if out_dir is not None:
    print("saved:", sorted(p.name for p in Path(out_dir).glob("05_*.png")))
