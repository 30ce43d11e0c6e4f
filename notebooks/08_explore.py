# %% [markdown]
# # 08 · Asking a run your own question: tables and the explorer
#
# **Goal:** answer one question of a run end to end, the way a researcher would: *late in the
# run, did the population's teachers still write new programs, how hard were those for each
# student, and what does one of them look like?* The records are JSONL files; `load_frames` turns
# a run, an experiment (baseline and population), a seed protocol or a sweep into pandas tables,
# and the explorer filters them with widgets while leaving its last selection in the notebook.
#
# The tables: `tasks` (one row per proposal: program, I/O, kind, proposer, solver, ρ and the
# attempts behind it, validity and reason, copy class, complexity of a written program), `metrics`
# (one row per member per step, namespaced keys), `matches`, `lineage`, and `config` (one row per
# run). Rows carry `run` (and `seed`, `point` for a protocol or a sweep).

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
# a run, an experiment, a seed protocol or a sweep directory;
# None: out_dir or notebooks 02/03's runs, else a synthetic demo
run_dir = None
out_dir = None  # when set, the figure is saved there as PNG
late_fraction = 0.5  # "late in the run": the last half of the steps
window = 5  # steps of matches behind the explorer's solve-rate matrix
explore_run = None  # "population" or "baseline": explore that run alone; None: both side by side

# %%
import tempfile
from pathlib import Path

from IPython.display import display

from populora_nb.analysis.explorer import Explorer, ancestry, filter_tasks
from populora_nb.analysis.figures import png_image, save_figure
from populora_nb.analysis.frames import load_frames
from populora_nb.analysis.runs import find_runs
from populora_nb.presets import PRESET_SHOWS
from studies.synthetic import write_synthetic_experiment

if run_dir is None:  # the preset's runs: what they can show
    print(PRESET_SHOWS.get(preset, f"preset {preset}"))

print(f"preset={preset!r} run_dir={run_dir!r} out_dir={out_dir!r} late_fraction={late_fraction} window={window}")

# %% [markdown]
# ## The runs, as tables
# With `run_dir` set, every run at or under it is read. Otherwise the experiment that `make run`
# (`out_dir`) or notebooks 02 and 03 (`../runs/notebooks-{preset}`) wrote; where there is none
# yet, a **synthetic demo** (`studies.synthetic`: made-up programs, solve rates,
# matches and ratings, nothing was run), and every title says so. In the `tiny` preset the
# random model writes nothing the verifier accepts, so its tables hold only rejected proposals.

# %%
if run_dir is None:
    found = find_runs(out_dir, Path("..") / "runs" / f"notebooks-{preset}", missing_ok=True)
    run_dir = next(iter(found.values())).parent if len(found) > 1 else next(iter(found.values()), None)
synthetic = run_dir is None
if synthetic:
    run_dir = write_synthetic_experiment(Path(tempfile.mkdtemp(prefix="populora_demo_")), n_steps=24, matches=True)
    print(f"SYNTHETIC demo experiment written to {run_dir} (no model was run)")
tag = " (SYNTHETIC demo data)" if synthetic else ""
frames = load_frames(run_dir)
print(f"{run_dir}: runs {frames.runs}")
for name in ("tasks", "metrics", "matches", "lineage", "config"):
    print(f"  {name:>8}: {len(getattr(frames, name))} rows × {len(getattr(frames, name).columns)} columns")
display(frames.config.filter(regex="^(run$|run\\.agent|run\\.steps|population\\.|rl\\.rollouts|preset)"))

# %% [markdown]
# What to look for: one row per proposal, with the verdict and ρ side by side. `written` marks a
# valid code_o/code_i task (the proposer wrote the program, so it has complexity); `measured` is
# written *and* new, what notebook 05's curves count.

# %%
columns = ["run", "task", "step", "proposer", "solver", "kind", "valid", "reason", "rho", "copy", "ast_depth"]
display(frames.tasks[columns].head(8))

# %% [markdown]
# ## The question, in pandas
# Late in the run (the last `late_fraction` of its steps), per proposer: how many proposals, how
# many valid, how many of the valid ones new, their mean ρ and mean AST depth. A teacher that only
# copies, or whose tasks every student solves (ρ = 1), has stopped pushing its students.

# %%
last_step = int(frames.tasks["step"].max()) if len(frames.tasks) else 0
late_from = int(round(last_step * (1 - late_fraction)))
late = filter_tasks(frames.tasks, steps=(late_from, last_step))
summary = late.groupby(["run", "proposer"]).agg(
    proposed=("task", "size"),
    valid=("valid", "sum"),
    new=("measured", "sum"),
    mean_rho=("rho", "mean"),
    mean_depth=("ast_depth", "mean"),
)
print(f"steps {late_from}–{last_step}{tag}")
display(summary)

# %% [markdown]
# How hard were the late valid tasks for each student? Mean ρ per (teacher, student) pair and the
# number of tasks behind it: a pair near 0 is a teacher beating its student, near 1 one that
# teaches nothing. Blank where the pair never met, or a baseline (its one agent solves its own).

# %%
valid_late = filter_tasks(late, validity="valid")
if len(valid_late):
    display(valid_late.pivot_table(index=["run", "proposer"], columns="solver", values="rho", aggfunc=["mean", "size"]))
else:
    print(f"no valid task in steps {late_from}–{last_step}: nothing was solved, so there is no ρ to compare")

# %% [markdown]
# ## The same question in the explorer
# What to look for: the controls (steps, member, kind, ρ band, validity or rejection reason, copy
# class) filter the table of tasks, the chosen task is shown in full (program, every I/O pair,
# complexity, how many attempts solved it), the step slider moves the solve-rate matrix and the
# ratings, and the lineage picker traces a child back to its founders. It starts on the question's
# selection (late, valid). The results are ordinary outputs: once the kernel stops the controls
# are gone, but the last selection (its table, figure and task) stays in the saved notebook.

# %%
ex = Explorer(frames if explore_run is None else frames.select(run=explore_run), window=window)
ex.steps.value = (late_from, last_step)
ex.validity.value = "valid"
ex.show()

# %% [markdown]
# A member's lineage as a table (the explorer's lineage picker shows the same): each birth that
# made it, back to founders who were born to no one.

# %%
children = list(frames.lineage["child"]) if "child" in frames.lineage.columns else []
if children:
    print(f"lineage of {children[-1]}{tag}")
    display(ancestry(frames.lineage, children[-1]))
else:
    print("no child was born in these runs (evolution did not act, or a baseline)")

# %% [markdown]
# The explorer's figure of its current selection, saved with the run when `out_dir` is set. It is
# drawn as a PNG (`png_image`): the explorer makes its figures without pyplot, so that moving a
# slider does not pile figures up, and such a figure has no inline display of its own.

# %%
fig = ex.figure()
fig.suptitle(f"explorer: {ex.describe()}{tag}", y=1.02)
if out_dir is not None:
    save_figure(fig, Path(out_dir) / "08_explore.png", close=False)
display(png_image(fig))

# %% [markdown]
# ## Verify it is real
# Every table row is a record on disk: the tasks table has exactly one row per line of each run's
# `tasks.jsonl`, in order, and its programs are the recorded ones (tests/test_explorer.py asserts it).

# %%
import json

from populora_nb.analysis.frames import find_run_dirs, labels_of

for path in find_run_dirs(run_dir):
    lines = [json.loads(line) for line in (path / "tasks.jsonl").read_text().splitlines() if line.strip()]
    mine = frames.select(**labels_of(path, Path(run_dir))).tasks
    same = mine["program"].tolist() == [r["program"] for r in lines]
    print(f"{path.name}: {len(mine)} task rows, {len(lines)} records in {path / 'tasks.jsonl'}; same programs {same}")
