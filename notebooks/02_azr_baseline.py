# %% [markdown]
# # 02 · The single-agent AZR baseline
#
# **Goal:** run Absolute Zero's self-play with one agent that both proposes tasks and solves them,
# and watch its learning signal: how often its proposals are valid, how often it solves them, and
# the rewards that drive it. This is the system PopuLoRA compares against; over long runs it
# collapses to easy tasks (notebook 05 measures that).
#
# One step, as AZR does it (`run.baseline_solver = "azr"`, the default): the agent proposes
# `rl.proposals_per_kind` tasks of each kind → the sandboxed verifier keeps the valid ones → the
# agent samples `rl.rollouts` answers to each, only to measure its solve rate s (these learnability
# rollouts are not trained on) → AZR's proposer reward (1 − s for 0 < s < 1, −0.5 at s ∈ {0, 1},
# −1 invalid) → the agent's solver answers its own batch of `rl.proposals_per_kind` buffer tasks
# per kind (recency-weighted: mostly the last steps' tasks), one response each, with the student
# reward (+1 / −0.5 / −1) → TRR++ advantages, centred per (role × kind) and scaled per role
# (`rl.advantage_scale = "role"`: with 3 proposals per kind a group whitened alone would turn a
# validity gap and a difficulty gap into the same ±1; `"group"` is AZR's exact TRR++) → one
# policy-gradient step on the agent's LoRA. `run.baseline_solver = "own_rollouts"` is the variant
# that trains the solver on the learnability rollouts instead, as a PopuLoRA student trains on its
# matched tasks.
#
# The headline solve rate is ρ of the fresh proposals; the solver's buffer batch is plotted apart.
#
# First one step by hand, stage by stage with a table after each, then the loop with the live
# dashboard. In the `smoke` preset an agent step took 51–67 s in a measured run on 2 shared CPU cores
# (load average 6–8); the step by hand costs one more.

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
from populora_nb.analysis.dashboard import Dashboard, verdict
from populora_nb.analysis.figures import save_figure
from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.presets import PRESET_SHOWS

overrides = {"run.agent": "baseline", "run.seed": seed}
if steps is not None:
    overrides["run.steps"] = steps
config = load_config(preset, overrides)
print(PRESET_SHOWS.get(preset, f"preset {preset}"))
experiment = Path(out_dir) if out_dir else Path("..") / "runs" / f"notebooks-{preset}"
run_dir = experiment / "baseline"
print(
    f"preset {config.preset}: {config.model.name}, {config.run.steps} steps, kinds {config.tasks.kinds}, "
    f"{config.rl.proposals_per_kind} proposals/kind, {config.rl.rollouts} rollouts, lr {config.lora.lr}"
)
print(f"run directory: {run_dir.resolve()} (rerunning this notebook resumes it)")

# %% [markdown]
# ## One step by hand
# Before the loop runs, one AZR step stage by stage, each stage's product in a table. It is the
# loop's own step: each cell calls one stage of `populora_nb.stages`, in the order
# `step.baseline_step` calls them, on a scratch copy of the state a run starts from, with a model of
# its own: it writes nothing into the run directory, and the loop below starts from step 0.
# `make run` executes this section too, so its time counts in the notebook's.
#
# Under each stage, the package's own code that computed it (`source.show`): read from the installed
# package when the cell runs, not copied here, so a change to the package shows up in this notebook.
# Docstrings (`help(f)`) and argument checks are left out; the header names the module and lines.

# %%
import dataclasses

from populora_nb import rewards, rl, stages
from populora_nb.analysis import source, step_tables
from populora_nb.copies import mark_copies
from populora_nb.model.policy import LoRAPolicy
from populora_nb.solve_batches import buffer_jobs, learnability_jobs, worked_examples
from populora_nb.state import initial_state, roster_for
from populora_nb.verify import Verifier

verifier = Verifier.from_config(config.verifier)
verifier.start()
policy = LoRAPolicy.create(config, list(roster_for(config).items()))
state = initial_state(config, verifier)  # the state a run starts from; the run's own is made by `run`

# %% [markdown]
# ### 1 · The agent proposes
# One batch: `rl.proposals_per_kind` tasks of each kind, each prompt showing reference tasks from the
# buffer (the seeds at step 0). One prompt in full, as the model sees it, and what the agent wrote:

# %%
proposed = stages.propose(policy, ["agent"], state.buffers, config, state.step)
proposed = [dataclasses.replace(p, solver="agent") for p in proposed]  # the agent solves its own tasks
first = proposed[0]
print(f"--- prompt ({first.kind}) ---\n{first.prompt}")
print(f"--- the agent wrote ---\n{first.completion}")

# %%
source.show(stages.propose)

# %% [markdown]
# ### 2 · The verifier's verdicts
# Parsed, then run in the sandbox; an invalid proposal carries the verifier's reason.

# %%
proposed = stages.validate(verifier, proposed, config.tasks.code_f_inputs)
proposed = mark_copies(proposed, state.seen, config.tasks.reject_copies, config.tasks.reject_repeats)
step_tables.proposals_table(proposed)

# %%
source.show(stages.validate)

# %% [markdown]
# ### 3 · The agent solves
# Two kinds of rows: k learnability rollouts of each valid proposal ("trained on" False), which only
# measure its solve rate s = ρ for the proposer reward, and the solver's own batch of buffer tasks,
# one response each, which it learns from (✓ passed, ✗ failed, · unparseable).

# %%
jobs = learnability_jobs("agent", proposed, config.rl.rollouts)  # k rollouts of each valid task: ρ only
jobs += buffer_jobs("agent", state.buffers, config, state.step)  # the batch it learns from
attempts = stages.solve(policy, verifier, jobs, config, state.step, worked_examples(state.buffers))
proposed = stages.solve_rates(proposed, attempts)
step_tables.rollouts_table(attempts, proposed)

# %%
source.show(rewards.solve_rate, stages.solve_rates)

# %% [markdown]
# ### 4 · Rewards per role
# Proposer (AZR): 1 − s for 0 < s < 1, −0.5 at s ∈ {0, 1}, −1 invalid. Solver: +1 / −0.5 / −1.

# %%
samples = stages.reward(
    proposed, attempts, rewards.azr_proposer_reward, config.rl.advantage_scale, config.tasks.copies_earn_nothing
)
step_tables.rewards_table(samples)

# %%
source.show(rewards.azr_proposer_reward, rewards.student_reward)

# %% [markdown]
# ### 5 · TRR++ advantages per group
# Centred within each (role, kind) group and scaled per role (`rl.advantage_scale`).

# %%
step_tables.advantages_table(samples)

# %%
source.show(rl.trr_plus_plus_advantages)

# %% [markdown]
# ### 6 · The update
# One policy-gradient step on the agent's LoRA: its loss and gradient norm (before clipping).

# %%
update_stats = stages.update(policy, samples, list(state.roster))
stages.grow(state.buffers, proposed, config.tasks.one_task_per_program)
step_tables.update_table(update_stats, state.roster)

# %%
source.show(rl.policy_gradient_loss)

# %% [markdown]
# The scratch step is done: its model and sandbox are released before the loop loads its own.

# %%
verifier.close()
del state, policy

# %% [markdown]
# ## Train, with a live dashboard
# What to look for: the valid-proposal rate and the solve rate per kind, step by step. A small
# model starts with few valid proposals; its solver batch comes from the buffer (seeds at first),
# so the solver learns even in a step whose proposals are all invalid. Steps count from 0 ("k/N"
# is the steps done); the dashboard's last state stays in the notebook as a figure and a table,
# and rerunning the cell on a finished run shows its saved records.

# %%
dash = Dashboard(run_dir, config.run.steps, config.tasks.kinds)
dash.show()
result = run(config, run_dir, on_step=dash.update)
dash.finish()

# %% [markdown]
# ## Curves
# What to look for: does the valid rate or the solve rate rise above step 0? Rewards follow them.

# %%
fig, axes = plt.subplots(2, 2, figsize=(12, 7))
plots.plot_step_metric({"baseline": run_dir}, "teacher/valid_rate", ax=axes[0, 0])
plots.plot_solve_rates({"baseline": run_dir}, kinds=config.tasks.kinds, ax=axes[0, 1])
plots.plot_rewards(run_dir, ax=axes[1, 0])
plots.plot_solve_rates({"baseline": run_dir}, kinds=config.tasks.kinds, source="buffer", ax=axes[1, 1])
fig.tight_layout()
if out_dir:
    save_figure(fig, experiment / "02_baseline.png", close=False)
plt.show()

# %% [markdown]
# ## What "compute-matched" means here
# The paper's baseline is "per-adapter compute-matched". Read literally, each population member
# trains on about what this single agent trains on (its proposals plus its solver batch), so the
# population as a whole spends about n times as much. A teacher trains only on proposals and a student
# only on rollouts, so the presets give teachers more proposals per kind than the agent
# (`rl.teacher_proposals_per_kind`) and students a task quota (`rl.student_tasks_per_kind`), chosen so
# that at the lengths the cpu protocol measured each member trains on 0.99-1.04x the agent's tokens.
# The loop measures it in completion tokens (generated: proposals and every rollout, learnability
# rollouts included; trained: what the updates learned from); the table says whether each role's
# trained tokens lie within ±15%. Generated tokens cannot also match: this agent's learnability
# rollouts are never trained on, while every student rollout is. When the population run of this
# experiment exists (notebook 03, `make run`), its rows and the ratios appear too.

# %%
from populora_nb.analysis.compute import compute_table
from populora_nb.analysis.runs import experiment_runs

for row in compute_table(experiment_runs(experiment)):
    print(" | ".join(row))

# %% [markdown]
# ## What the agent proposed
# The last few proposals with the verifier's verdict and, for valid ones, the solve rate.

# %%
for row in result.read("tasks")[-6:]:
    print(f"--- step {row['step']} {row['kind']} ({verdict(row)})\n{row['program'][:400] or '(nothing parsable)'}")
    if row["valid"]:
        print(f"input: {row['inputs'][0]}  ->  output: {row['outputs'][0]}")

# %% [markdown]
# ## Verify it is real
# The evidence that the records are a real run of this config (tests/test_notebook_checks.py makes
# the same checks on a run and fails when one does not hold): one metrics row per step, all of the
# agent, one task row per proposal, and a checkpoint at the last step.

# %%
metrics = result.read("metrics")
latest = result.latest_checkpoint()
expected_tasks = config.run.steps * config.rl.proposals_per_kind * len(config.tasks.kinds)
print(f"steps logged: {sorted({r['step'] for r in metrics})} of {config.run.steps}")
print(f"members logged: {sorted({r['member'] for r in metrics})}")
print(f"task rows: {len(result.read('tasks'))} (steps x proposals x kinds = {expected_tasks})")
print(f"latest checkpoint: step {latest[0] if latest else None}, {latest[1] if latest else 'none'}")
