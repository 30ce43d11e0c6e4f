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
#
# First one step by hand, stage by stage with a table after each, then the loop runs every step with
# the live dashboard. **Time:** in the `smoke` preset a population step took 74–79 s on 2 quiet CPU
# cores (difficulty probe included at steps 0 and 2), and this notebook 103 s with its step by hand,
# when `make run` executed it after the experiment had trained the run (docs/results/make-run). The
# `tiny` preset's step takes seconds.

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
from populora_nb.presets import PRESET_SHOWS

overrides = {"run.agent": "population", "run.seed": seed}
if steps is not None:
    overrides["run.steps"] = steps
config = load_config(preset, overrides)
print(PRESET_SHOWS.get(preset, f"preset {preset}"))
experiment = Path(out_dir) if out_dir else Path("..") / "runs" / f"notebooks-{preset}"
run_dir = experiment / "population"
print(
    f"preset {config.preset}: {config.model.name}, {config.population.n_teachers}T + {config.population.n_students}S, "
    f"rank {config.lora.rank}, {config.run.steps} steps, matchmaking {config.matchmaking.mode}, "
    f"evolution every {config.evolution.every} steps"
)
print(f"run directory: {run_dir.resolve()} (rerunning this notebook resumes it)")

# %% [markdown]
# ## One step by hand
# Before the loop runs, one population step stage by stage, each stage's product in a table. It is
# the loop's own step: each cell calls one stage of `populora_nb.stages`, in the order
# `step.population_step` calls them, on a scratch copy of the state a run starts from, with a model
# of its own: it writes nothing into the run directory, and the loop below starts from step 0 with a
# fresh copy of the same members. `make run` executes this section too, so its time counts in the
# notebook's.
#
# Under each stage, the package's own code that computed it (`source.show`): read from the installed
# package when the cell runs, not copied here, so a change to the package shows up in this notebook.
# Docstrings (`help(f)`) and argument checks are left out; the header names the module and lines.

# %%
import dataclasses

from populora_nb import evolution, matchmaking, rewards, rl, stages
from populora_nb.analysis import source, step_tables
from populora_nb.copies import mark_copies
from populora_nb.model.policy import LoRAPolicy
from populora_nb.solve_batches import assignments, solve_jobs, worked_examples
from populora_nb.state import initial_state, roster_for
from populora_nb.step import evolve
from populora_nb.verify import Verifier

verifier = Verifier.from_config(config.verifier)
verifier.start()
policy = LoRAPolicy.create(config, list(roster_for(config).items()))
state = initial_state(config, verifier)  # the state a run starts from; the run's own is made by `run`

# %% [markdown]
# ### 1 · Pairing: PFSP on TrueSkill
# Each teacher draws a student with weight f(p), p the rated probability that the teacher beats it
# (`matchmaking.mode`: "pfsp_hard" favours students the teacher tends to lose to); every student gets
# its share of teachers. At step 0 every rating is the prior, so every p is ½ and the draw is even.

# %%
ratings_before = dict(state.ratings)
partner, win_probabilities = stages.pair(state, config)
step_tables.plot_pairing(win_probabilities, partner)
plt.show()
step_tables.pairing_table(win_probabilities, partner)

# %%
source.show(matchmaking.pfsp_weights)

# %% [markdown]
# ### 2 · Teachers propose
# One mixed-adapter batch: each teacher writes its tasks of each kind, shown reference tasks from
# the buffer. One prompt in full, as the model sees it (chat template included), and what its
# teacher wrote:

# %%
proposed = stages.propose(policy, state.teachers, state.buffers, config, state.step, config.rl.teacher_proposals)
proposed = [dataclasses.replace(p, solver=partner[p.proposer]) for p in proposed]  # each task's student
first = proposed[0]
print(f"--- prompt of {first.proposer} ({first.kind}) ---\n{first.prompt}")
print(f"--- {first.proposer} wrote ---\n{first.completion}")

# %%
source.show(stages.propose)

# %% [markdown]
# ### 3 · The verifier's verdicts
# Every proposal is parsed, then run in the sandbox: banned imports, non-determinism, errors and
# unparseable outputs make it invalid (the reason is the verifier's); a valid task's copy class says
# whether it copied a reference shown in its prompt or an earlier program.

# %%
proposed = stages.validate(verifier, proposed, config.tasks.code_f_inputs)
proposed = mark_copies(proposed, state.seen, config.tasks.reject_copies, config.tasks.reject_repeats)
step_tables.proposals_table(proposed)

# %%
source.show(stages.validate)

# %% [markdown]
# ### 4 · Students solve
# Each matched student answers each valid task k times in one mixed batch (✓ passed, ✗ failed, ·
# unparseable); ρ is the passed share. Buffer tasks top each student up to its quota: they train it
# but play no match.

# %%
jobs = solve_jobs(
    assignments(partner, proposed, state.students),
    proposed,
    state.buffers,
    config,
    state.step,
    config.rl.student_tasks,
    config.rl.student_rollouts_trained,
)
attempts = stages.solve(policy, verifier, jobs, config, state.step, worked_examples(state.buffers))
proposed = stages.solve_rates(proposed, attempts)
step_tables.rollouts_table(attempts, proposed)

# %%
source.show(rewards.solve_rate, stages.solve_rates)

# %% [markdown]
# ### 5 · Rewards per role
# Teacher: −1 invalid, 0 when ρ = 0, else 1 − ρ. Student: +1 correct, −0.5 wrong, −1 malformed.

# %%
samples = stages.reward(
    proposed, attempts, rewards.teacher_reward, config.rl.advantage_scale, config.tasks.copies_earn_nothing
)
step_tables.rewards_table(samples)

# %%
source.show(rewards.teacher_reward, rewards.student_reward)

# %% [markdown]
# ### 6 · TRR++ advantages per group
# Rewards are centred within each (member, role, kind) group and scaled per role: a group whose
# rewards are all equal has nothing to learn from (advantages 0).

# %%
step_tables.advantages_table(samples)

# %%
source.show(rl.trr_plus_plus_advantages)

# %% [markdown]
# ### 7 · The update: one policy-gradient step per member
# Each member's own LoRA learns from its own samples only; the loss and the gradient norm (before
# clipping) per member. A member whose advantages are all 0 is skipped.

# %%
update_stats = stages.update(policy, samples, list(state.roster))
step_tables.update_table(update_stats, state.roster)

# %%
source.show(rl.policy_gradient_loss)

# %% [markdown]
# ### 8 · Ratings
# Each proposal is one TrueSkill match of k games; the rules column counts, per member, the matches
# each rule of `matchmaking.py` scored: a teacher's *contested* task (0 < ρ < threshold) gives it a
# win per failed rollout and a loss per solved one against its student; a task that *teaches
# nothing* (ρ = 0, or ρ ≥ threshold) k losses to a fixed reference; an *invalid task* 2k losses; a
# student wins each rollout it solved and loses each it failed, and plays no game on a task it never
# saw. So a student is never rated up for failing, and a teacher rises only on contested tasks.

# %%
matches, state.ratings = stages.rate(state.ratings, proposed, config)
threshold = config.matchmaking.win_threshold  # a teacher wins when 0 < ρ < threshold
step_tables.ratings_table(matches, ratings_before, state.ratings, state.roster, threshold)

# %%
source.show(matchmaking.teacher_games, matchmaking.student_games)

# %% [markdown]
# ### 9 · An evolution event
# The loop evolves every `evolution.every` steps; here one event runs now, on the scratch copy: the
# weakest teacher and student are replaced by children of tournament-chosen parents, made in LoRA
# weight space. The distance is ‖ΔW_child − ΔW_parent‖ / ‖ΔW_parent‖ from each parent: near 0 is a
# copy, above 1 a restart.

# %%
stages.grow(state.buffers, proposed, config.tasks.one_task_per_program)
births = evolve(policy, state, config)
step_tables.evolution_table(births)

# %%
source.show(evolution.fitness, evolution.tournament_select)

# %% [markdown]
# The scratch step is done: its model and sandbox are released before the loop loads its own.

# %%
verifier.close()
del state, policy

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
from populora_nb.analysis.complexity_plots import plot_repeat_rate
from populora_nb.analysis.frames import load_tasks

fig = plot_repeat_rate({name: load_tasks(path) for name, path in runs.items()}, window=3)
if out_dir:
    save_figure(fig, experiment / "03_repeat_rate.png", close=False)
plt.show()

# %% [markdown]
# ## The difficulty probe
# The matches' ρ above mixes how hard each teacher's tasks are with how good its student has become.
# The probe holds the solver and the prompts fixed: every `probe.every` steps the teachers answer the
# same prompts under the same seeds between them (as many as the baseline's agent answers alone), and
# the frozen starting adapter attempts each valid task `probe.rollouts` times. What to look for: the
# teachers' probe ρ falling means their tasks got harder for a reader that did not learn; the right
# panel says whether the probe can show that at all (tasks at ρ = 0 can only get easier). Step 0 is
# before any training.

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
# The evidence that the records are a real run of this config (tests/test_notebook_checks.py makes
# the same checks on a run and fails when one does not hold): both roles logged, one row per member
# at step 0, a rating on every row, one match per proposal, and children when evolution was due.

# %%
metrics = result.read("metrics")
matches = result.read("matches")
expected_matches = (
    config.run.steps * config.population.n_teachers * config.rl.teacher_proposals * len(config.tasks.kinds)
)
print(f"roles logged: {sorted({r['role'] for r in metrics})}")
print(f"rows at step 0: {len([r for r in metrics if r['step'] == 0])} (members: {config.n_members})")
print(f"rows with a rating: {sum('rating/mu' in r for r in metrics)} of {len(metrics)}")
print(f"matches: {len(matches)} (steps x teachers x proposals x kinds = {expected_matches})")
print(f"children: {len(births)} (evolution every {config.evolution.every} steps, {config.run.steps} steps)")
