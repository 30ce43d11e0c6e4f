# %% [markdown]
# # 03 · The PopuLoRA population: 4 teachers + 4 students
#
# **Goal:** run the heart of the paper. Teachers and students are LoRA adapters on the one frozen
# base. Each step, PFSP on TrueSkill draws a matching of teachers to students (every student gets
# its share of teachers); teachers propose in one mixed-adapter batch; the verifier keeps valid
# tasks; each matched student solves its tasks k times in one mixed batch. Teachers earn 1 − ρ for
# valid tasks their student fails (−1 invalid, 0 when ρ = 0), students +1 / −0.5 / −1. Every member
# gets its own TRR++ update, ratings move, and every E steps evolution replaces the weakest teacher
# and student with children made in LoRA weight space.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
out_dir = None  # set by `make run`: the experiment directory; figures are saved here as PNG
steps = None  # None: the preset's run.steps
seed = 0

# %%
from pathlib import Path

import matplotlib.pyplot as plt

from populora_nb.analysis import plots
from populora_nb.analysis.dashboard import Dashboard
from populora_nb.analysis.figures import save_figure
from populora_nb.analysis.plots import plot_lineage
from populora_nb.config import load_config
from populora_nb.evolution import Lineage
from populora_nb.loop import run

overrides = {"run.agent": "population", "run.seed": seed}
if steps is not None:
    overrides["run.steps"] = steps
config = load_config(preset, overrides)
experiment = Path(out_dir) if out_dir else Path("..") / "runs" / f"notebooks-{preset}"
run_dir = experiment / "population"
print(
    f"preset {config.preset}: {config.model.name}, {config.population.n_teachers}T + {config.population.n_students}S, "
    f"rank {config.lora.rank}, {config.run.steps} steps, matchmaking {config.matchmaking.mode}, "
    f"evolution every {config.evolution.every} steps"
)
print(f"run directory: {run_dir.resolve()} (rerunning this notebook resumes it)")

# %% [markdown]
# ## Train the population, with the live dashboard
# What to look for: solve rates per kind, teacher vs student TrueSkill μ ± σ, and the last tasks
# with their verdicts, updated after every step (steps count from 0; "k/N" is the steps done).
# The progress line says what is running meanwhile. The dashboard's last state stays in the
# notebook as a figure and a table; rerunning the cell on a finished run shows its saved records.

# %%
dash = Dashboard(run_dir, config.run.steps, config.tasks.kinds)
dash.show()
result = run(config, run_dir, on_step=dash.update)
dash.finish()

# %% [markdown]
# ## Baseline and population on one axis
# The baseline comes from notebook 02 (same experiment directory), when it has run.

# %%
runs = {"population": run_dir}
if (experiment / "baseline" / "metrics.jsonl").exists():
    runs = {"baseline": experiment / "baseline", **runs}
fig = plots.plot_solve_rates(runs, kinds=config.tasks.kinds)
if out_dir:
    save_figure(fig, experiment / "03_solve_rates.png", close=False)
plt.show()

# %% [markdown]
# ## Ratings, matchups and valid rates
# Each task is one TrueSkill match of k games, one per rollout, and each role is rated by its own
# reward (`matchmaking.py`): the student wins the rollouts it solved and loses the ones it failed; the
# teacher of a contested task (0 < ρ < `win_threshold`, by default every learnable one) wins the
# rollouts the student failed and loses the ones it solved; a task that teaches nothing (ρ = 0 or
# ρ = 1, reward 0) costs its teacher k games against a fixed prior-rated reference, an invalid one 2k,
# and the student, who never saw an invalid task, is not moved by it. So a student is never rated up
# for failing, and a teacher rises only on tasks its student sometimes solves.
#
# What to look for: whether teacher and student ratings separate or keep crossing (an arms race),
# which teacher–student pairs PFSP chose and how hard their tasks were (ρ; blank where a pair
# played no valid task), and each teacher's valid-proposal rate.

# %%
fig = plt.figure(figsize=(11, 8))
grid = fig.add_gridspec(2, 2)
plots.plot_ratings(run_dir, ax=fig.add_subplot(grid[0, :]))
plots.plot_solve_matrix(run_dir, ax=fig.add_subplot(grid[1, 0]))
plots.plot_valid_rate_per_teacher(run_dir, ax=fig.add_subplot(grid[1, 1]))
fig.tight_layout()
if out_dir:
    save_figure(fig, experiment / "03_population.png", close=False)
plt.show()

# %% [markdown]
# ## Is the mechanism live?
# Before reading any curve, each check against its stated threshold (`analysis.liveness`): are most
# valid tasks new rather than repeats of a task met before (same program and input)? Do new tasks land
# in 0 < ρ < 1? Do teachers win the games the rating rule scores on them, and most games of some
# matches? Do children survive their first evolution event outside grace as often as chance would
# keep them? A failed check means the curves above were made by the settings, not by an arms race;
# "too few to judge" means the run is too short for that part to be read.

# %%
from populora_nb.analysis.liveness import liveness

print(liveness(run_dir).summary())

# %% [markdown]
# ## Repeated tasks, per proposing role
# What to look for: the share of valid tasks that repeat one met before (program and input), for the
# teachers here and the agent of notebook 02's baseline when it has run. A repeat's ρ measures
# memory, not difficulty: a rising repeat rate lifts ρ without any task getting easier (band: ±1 SE).

# %%
from populora_nb.analysis.complexity import analyse_run
from populora_nb.analysis.complexity_plots import plot_repeat_rate

fig = plot_repeat_rate({name: analyse_run(path) for name, path in runs.items()}, window=3)
if out_dir:
    save_figure(fig, experiment / "03_repeat_rate.png", close=False)
plt.show()

# %% [markdown]
# ## The difficulty probe
# The matches' ρ above mixes how hard each teacher's tasks are with how good its student has become.
# The probe holds the solver and the prompts fixed: every `probe.every` steps each teacher answers the
# same prompts under the same seeds, and the frozen starting adapter attempts each valid task
# `probe.rollouts` times. What to look for: the teachers' probe ρ falling means their tasks got harder
# for a reader that did not learn. Step 0 is before any training.

# %%
from populora_nb.analysis.difficulty_probe import plot_probe, probe_table

fig = plot_probe({"population": run_dir})
if out_dir:
    save_figure(fig, experiment / "03_difficulty_probe.png", close=False)
plt.show()
for row in probe_table({"population": run_dir}):
    print(" | ".join(row))

# %% [markdown]
# ## Lineage
# Each evolution event replaces the weakest teacher and student; the tree shows who descends from whom.

# %%
births = [
    Lineage(r["child"], tuple(r["parents"]), r["operator"], r["birth_step"], r["role"], r["replaced"])
    for r in result.read("lineage")
]
if births:
    fig = plot_lineage(births, end_step=config.run.steps)
    if out_dir:
        save_figure(fig, experiment / "03_lineage.png", close=False)
    plt.show()
else:
    print("no evolution event yet (runs shorter than evolution.every steps)")

# %% [markdown]
# ## Verify it is real

# %%
metrics = result.read("metrics")
roles = {r["role"] for r in metrics}
assert roles == {"teacher", "student"}, roles
assert len([r for r in metrics if r["step"] == 0]) == config.n_members
assert all("rating/mu" in r for r in metrics)
assert len(
    result.read("matches")
) == config.run.steps * config.population.n_teachers * config.rl.teacher_proposals * len(config.tasks.kinds)
if config.evolution.enabled and config.run.steps > config.evolution.every:
    assert births, "evolution should have replaced members"
print(f"{len(metrics)} member-steps, {len(result.read('matches'))} matches, {len(births)} children")
