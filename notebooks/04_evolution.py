# %% [markdown]
# # 04 · Evolution in LoRA weight space
#
# **Goal:** see what each of PopuLoRA's evolution operators does to a member's LoRA weights, how
# replacement builds a lineage over a run, and whether a child recovers its trained parent's reward
# when it goes back into training. Every few update steps the weakest teachers and the
# weakest students (by TrueSkill μ − 3σ) are replaced by children of tournament-chosen parents:
# mutations perturb one parent (M1 SVD-structured, M2 layer-selective Gaussian, M3 component
# masking, M4 full Gaussian, optional M5 NEFTune-style), crossovers combine two (X1 DARE, X2 layer
# swap, X3 SVD subspace, X4 extrapolative), and two controls bracket them (copy_parent,
# linear_0_5). A child keeps its parents' rank r and shapes and re-enters training at once.
#
# All operators act on the factors (A, B) of ΔW = B·A and never form ΔW, so they take well under a
# second per child even at 7B shapes (`benchmarks/bench_evolution.py`).

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
out_dir = None  # set by `make run`: the experiment directory; figures are saved here as PNG
seed = 0
rank = 8  # r of the demonstration adapter
generations = 6  # evolution events in the synthetic lineage
retention_steps = None  # retraining steps per child; None: 2 in tiny, 3 in smoke, 20 (the paper's window) on GPU
retention_tasks = None  # tasks a child solves per step; None: 1 on CPU presets, a loop student's share on GPU
# operator names to retrain children of; None: all on tiny/GPU, the two controls + M1 + X1 on smoke (CPU budget)
retention_operators = None

# %%
import inspect
import random
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from populora_nb.analysis.figures import save_figure
from populora_nb.analysis.plots import plot_lineage, plot_retention
from populora_nb.analysis.runs import find_runs
from populora_nb.config import load_config
from populora_nb.evolution import MemberRating, ancestors
from populora_nb.lowrank import lora_rank, relative_change, singular_values
from populora_nb.operators import CONTROLS, OPERATORS, PAPER_IDS, arity, dare_identical_change, synthetic_factors
from populora_nb.records import RunDir
from studies.evolution_simulations import simulate_lineage
from studies.retention import run_retention

config = load_config(preset, {"run.seed": seed})
ec = config.evolution
print(
    f"preset {config.preset}: evolution every {ec.every} steps, {ec.replace_per_role} replaced per role, "
    f"fitness mu - {ec.fitness_k} sigma, tournament of {ec.tournament_size}, "
    f"grace {ec.grace} steps, child sigma x{ec.sigma_inflation}"
)
print("operator mix:", {PAPER_IDS[name]: weight for name, weight in ec.operators.items()})
figures = Path(out_dir) if out_dir else None

# %% [markdown]
# ## A small adapter to operate on
# Two trained-looking members with SmolLM2-135M's module shapes for two layers (hidden 576, 3 KV
# heads × 64, MLP 1536): A like peft's kaiming-uniform init, B Gaussian with column scales decaying
# by 0.9 per rank slot, so ΔW has a decaying spectrum, as trained LoRAs do. What to look for: r
# non-zero singular values per module, spread over about one decade.

# %%
module_shapes = {  # (d_in, d_out)
    f"model.layers.{i}.{name}": shape
    for i in range(2)
    for name, shape in {
        "self_attn.q_proj": (576, 576),
        "self_attn.k_proj": (576, 192),
        "self_attn.v_proj": (576, 192),
        "self_attn.o_proj": (576, 576),
        "mlp.gate_proj": (576, 1536),
        "mlp.up_proj": (576, 1536),
        "mlp.down_proj": (1536, 576),
    }.items()
}
generator = torch.Generator().manual_seed(seed)
parent_1 = synthetic_factors(module_shapes, rank, generator=generator)
parent_2 = synthetic_factors(module_shapes, rank, generator=generator)
shown = "model.layers.0.mlp.down_proj"
print(
    f"{len(parent_1)} modules, rank {lora_rank(parent_1)}; spectrum of {shown}:",
    [round(s, 4) for s in singular_values(parent_1)[shown].tolist()],
)

# %% [markdown]
# ## Every operator, one child each
# Singular values of ΔW for one module before (parents, grey) and after (child, red); the
# title gives ‖ΔW_child − ΔW_parent₁‖ / ‖ΔW_parent₁‖ over all modules. What to look for:
# M1 jitters every singular value; M3 empties round(ρr) of them; M2/M4/M5 add noise to the
# factors (M2 only to a quarter of the modules, so this module may not move); X1–X4 and linear_0_5
# mix both parents' spectra; copy_parent changes nothing. These two parents are unrelated, so
# their singular directions do not line up and linear_0_5 (the mean ΔW) shrinks: parents from one
# lineage share directions and average with far less loss.

# %%
children = {}
for name in OPERATORS:
    parents = (parent_1, parent_2)[: arity(name)]
    children[name] = OPERATORS[name](*parents, generator=torch.Generator().manual_seed(seed))

fig, axes = plt.subplots(3, 4, figsize=(14, 9))
slots = range(1, rank + 1)
for ax, name in zip(axes.flat, OPERATORS):
    ax.plot(slots, singular_values(parent_1)[shown], "o-", color="0.55", label="parent 1")
    if arity(name) == 2:
        ax.plot(slots, singular_values(parent_2)[shown], "s--", color="0.75", label="parent 2")
    ax.plot(slots, singular_values(children[name])[shown], "x-", color="C3", label="child")
    ax.set_ylim(bottom=0)
    label = name if name in CONTROLS else f"{PAPER_IDS[name]} {name}"
    ax.set_title(f"{label}\nchange {relative_change(parent_1, children[name]):.3f}", fontsize=9)
    ax.set_xlabel("singular component")
axes.flat[0].legend(fontsize=8)
axes.flat[-1].axis("off")
fig.suptitle(f"spectra of ΔW for {shown} (rank {rank})")
fig.tight_layout()
if figures:
    save_figure(fig, figures / "04_operator_spectra.png", close=False)  # still shown below
plt.show()

# %% [markdown]
# ## Crossovers of identical and of near-identical parents
# A crossover of a member with itself should give that member back, and one of two near-identical
# members a near-identical child: otherwise it restarts rather than combines. Each crossover is
# run on (parent 1, parent 1) and on (parent 1, parent 1 nudged by a small M4), and the bars give
# the child's change against parent 1 (log scale; on these float32 factors `relative_change` reads
# anything below ~2e-4 as rounding, and exact copies as 0). What to look for: X2, X3, X4 and
# linear_0_5 give parent 1 back to that floor and move the nudged pair by at most about the
# parents' own distance (dotted). X1 DARE's random drop moves even a self-cross, by about
# `dare_identical_change(p)` (dashed).

# %%
nudged = OPERATORS["full_gaussian"](parent_1, generator=torch.Generator().manual_seed(seed + 1), epsilon=0.015)
apart = relative_change(parent_1, nudged)
second_parents = {"parent 2 = parent 1": parent_1, "parent 2 = parent 1 + small M4": nudged}
crossovers = [name for name in OPERATORS if arity(name) == 2]
moved_from = {pair: {} for pair in second_parents}  # pair -> crossover -> change against parent 1
for pair, second in second_parents.items():
    for name in crossovers:
        child = OPERATORS[name](parent_1, second, generator=torch.Generator().manual_seed(seed))
        moved_from[pair][name] = relative_change(parent_1, child)
self_moved, near_moved = moved_from.values()
dare_p = inspect.signature(OPERATORS["dare"]).parameters["p"].default
dare_expected = dare_identical_change(dare_p)

fig, ax = plt.subplots(figsize=(9, 3.5))
where = range(len(crossovers))
floor = 1e-8  # where a change of exactly 0 (a copy) is drawn on the log scale
for offset, (pair, changes) in zip((-0.2, 0.2), moved_from.items()):
    ax.bar([i + offset for i in where], [max(changes[n], floor) for n in crossovers], width=0.4, label=pair)
ax.axhline(apart, ls=":", color="0.3", label=f"parents' distance {apart:.3f}")
ax.axhline(dare_expected, ls="--", color="C3", label=f"DARE's expected change, p = {dare_p}: {dare_expected:.2f}")
ax.set_xticks(list(where), [name if name in CONTROLS else f"{PAPER_IDS[name]} {name}" for name in crossovers])
ax.set_yscale("log")
ax.set_ylim(floor / 2, 2)
ax.set_ylabel("change against parent 1")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
if figures:
    save_figure(fig, figures / "04_crossover_identity.png", close=False)
plt.show()
for name in crossovers:
    print(f"{name:>14}: identical parents {self_moved[name]:.1e}, parents {apart:.3f} apart {near_moved[name]:.4f}")

# %% [markdown]
# ## A lineage over a few generations
# `simulate_lineage` stands in for training and games (μ random-walks, σ shrinks 10% per step) and
# calls the same `plan_replacement` as the training loop, with this preset's evolution config (operator
# mix, tournament size, grace, fitness k, members replaced). What to
# look for: each event replaces the weakest teacher and student by children of the stronger ones.
# A child starts with its parents' mean μ and their larger σ (`evolution.sigma_inflation` = 1), and
# the config's grace lasts two evolution intervals: it trains through one whole interval and is first
# judged at the second event after its birth (founders are never in grace).

# %%
founders = [
    MemberRating(f"{role}-{i}", role, mu=25.0, sigma=25.0 / 3.0) for role in ("teacher", "student") for i in range(4)
]
records = simulate_lineage(founders, ec, generations=generations, rng=random.Random(seed))
fig, ax = plt.subplots(figsize=(12, 4.5))
fig = plot_lineage(records, ax=ax, founders={m.member_id: m.role for m in founders})
fig.tight_layout()
if figures:
    save_figure(fig, figures / "04_lineage.png", close=False)
plt.show()
for record in records[-2:]:
    lineage = sorted(ancestors(record.child, records))
    print(f"{record.child} ← {record.operator}{record.parents}, ancestors: {lineage}")

# %% [markdown]
# ## Does a newborn get a fair chance?
# Replacement is only evolution if a child can outlive its first judgement. `newborn_fate` plays
# members of equal skill against each other with the real rating rule (every rollout a game), under
# this preset's own rules (tournament size, grace, fitness k, σ inflation, members, tasks, rollouts),
# and asks how often a child survives its first eligible event; a peer's chance is 1 − culled /
# eligible. A child inherits its tournament-chosen parents' rating, so it could start ahead of its
# peers: what to look for is the package's child σ near chance (the head start is gone when it is
# judged), and a doubled σ (the earlier default) well below it: its μ moves faster in its first games
# and lands in the bottom tail more often.

# %%
from studies.evolution_simulations import newborn_fate

for inflation in (ec.sigma_inflation, 2.0):
    simulated = load_config(preset, {"evolution.sigma_inflation": inflation})
    fates = newborn_fate(simulated, events=200, rng=random.Random(seed))
    survived = sum(not f.replaced for f in fates) / len(fates)
    chance = sum(f.chance for f in fates) / len(fates)
    print(
        f"child sigma x{inflation}: survived its first eligible event {survived:.2f} (n={len(fates)}), "
        f"a peer's chance {chance:.2f}"
    )

# %% [markdown]
# ## Retention: do children recover parent-level reward?
# The paper reports that children recover their parent's reward within 10–20 training steps. Here
# each operator makes one child of the fittest trained student (by μ − 3σ; crossovers take the next
# fittest as second parent), and the child goes back into training as a student: each step it
# solves tasks drawn from the run's valid tasks (the seeds if the run wrote none), gets the student
# reward (+1 / −0.5 / −1) and one TRR++ update. Every child sees the same task draws and sampling
# seeds, so the curves differ only through its weights. The population is the experiment's
# (`out_dir/population`, written by `make run`), else notebook 03's run under
# `../runs/notebooks-{preset}/population`, else a fresh one with small random B (a fresh peft-style
# population has B = 0 and every operator would then return the same child; with B this small the
# children still sample almost alike).

# %%
candidates = [Path(p) for p in (out_dir, Path("..") / "runs" / f"notebooks-{preset}") if p is not None]
populations = (find_runs(place, missing_ok=True).get("population") for place in candidates)
trained_run = next((p for p in populations if p is not None and RunDir(p).latest_checkpoint() is not None), None)
if trained_run is not None:
    retention_config = RunDir(trained_run).load_config()
    print(f"retraining children of the population in {trained_run} (step {RunDir(trained_run).latest_checkpoint()[0]})")
else:
    retention_config = load_config(preset, {"run.seed": seed, "lora.init": "random"})
    print(
        f"no trained population found in {[str(p) for p in candidates]}: a fresh {preset} population, seed tasks only"
    )
# CPU budget: measured, one smoke step with 2 tasks x 2 rollouts (solve + update) took 60-75 s on 2 busy cores.
n_retrain = retention_steps or {"tiny": 2, "smoke": 2}.get(preset, 20)
n_tasks = retention_tasks or (1 if preset in ("tiny", "smoke") else None)  # None: proposals_per_kind x kinds
# On a CPU with SmolLM2 each curve costs minutes: smoke keeps the controls and one mutation and crossover.
smoke_default = ("copy_parent", "linear_0_5", "svd_structured", "dare")
retained = tuple(retention_operators or (smoke_default if preset == "smoke" else OPERATORS))

# %% [markdown]
# ### How far each birth of the run moved its child
# The loop records, for every child, ‖ΔW_child − ΔW_parent‖ / ‖ΔW_parent‖ against its first parent
# (`relative_change` in `lineage.jsonl`). What to look for: mutations at their default strengths
# move ΔW by roughly 15–40% (the operators' defaults are chosen for that, see `operators.py`);
# crossovers move further, by about the distance between the two parents. An untrained parent
# (B = 0) has no ΔW to be relative to: its change is then the child's absolute ‖ΔW‖.

# %%
births = RunDir(trained_run).read("lineage") if trained_run is not None else []
for row in births:
    moved = row.get("relative_change")
    label = row["operator"] if row["operator"] in CONTROLS else f"{PAPER_IDS[row['operator']]} {row['operator']}"
    print(
        f"step {row['birth_step']:>3}  {row['child']:>8} ← {label:<28} parents {row['parents']}  "
        f"moved {'n/a (recorded before this was logged)' if moved is None else f'{moved:.3f}'}"
    )
if not births:
    print("no evolution event in the trained run (or no trained run): nothing to show")

# %% [markdown]
# What to look for: copy_parent (black, dashed) starts at the parent's own reward (dotted line) and
# keeps training; a child that retains what its parent learnt starts near that line, one that lost
# it starts lower and should climb back. linear_0_5 (dashed) is the naive crossover to beat. On the
# tiny random model every answer is malformed (−1) and the curves are flat: only the plumbing runs.
# In smoke the population trains three steps at lr 1e-4, which barely moves its adapters (after
# a five-step `make run`, the median ‖ΔW‖/‖W‖ over modules was 1.6e-4): every child then samples what its parent
# samples and the curves coincide. Each score is also a mean over a couple of rollouts. Read smoke
# as the plumbing of the experiment; the recovery curves of the paper need the GPU presets.

# %%
t0 = time.perf_counter()
curves = run_retention(
    retention_config,
    trained_run,
    n_steps=n_retrain,
    operators=retained,
    seed=seed,
    tasks_per_step=n_tasks,
    progress=True,
)
per_operator_s = (time.perf_counter() - t0) / len(curves)
print(f"{len(curves)} operators x {n_retrain} steps: {per_operator_s:.1f} s per operator")
fig, ax = plt.subplots(figsize=(10, 4.5))
plot_retention(curves, ax=ax)
fig.tight_layout()
if figures:
    save_figure(fig, figures / "04_retention.png", close=False)
plt.show()
for name, scores in curves.items():
    print(f"{name:>26}: " + " ".join(f"{s:+.2f}" for s in scores))

# %% [markdown]
# ## Verify it is real
# Every child has its parent's rank and shapes and no NaN, copy_parent is the parent exactly, the
# operators that should move ΔW did, every crossover but DARE gives identical parents back and
# near-identical ones a near-identical child (DARE moves them by its stated expectation), the
# lineage only ever uses living members as parents, and every operator's retrained child has a
# reward before training and after each step. Printed here; tests/test_evolution.py and
# tests/test_retention.py assert them.

# %%
moved = {name: relative_change(parent_1, child) for name, child in children.items()}
for name, child in children.items():
    shapes = all(A.shape == parent_1[m].A.shape and B.shape == parent_1[m].B.shape for m, (A, B) in child.items())
    finite = all(bool(torch.isfinite(A).all() and torch.isfinite(B).all()) for A, B in child.values())
    print(
        f"{name:>26}: rank {lora_rank(child)} (parent {rank}), shapes kept {shapes}, finite {finite}, "
        f"moved {moved[name]:.3g}"
    )
exact = all(torch.equal(children["copy_parent"][m].B, parent_1[m].B) for m in parent_1)
print(f"copy_parent is the parent exactly: {exact}")
print("identical parents give back (moved):", {n: f"{self_moved[n]:.1e}" for n in crossovers})
print(f"near-identical parents (apart {apart:.3g}) give (moved):", {n: f"{near_moved[n]:.3g}" for n in crossovers})
print(f"DARE on identical parents moved {self_moved['dare']:.3g}, expected {dare_expected:.3g}")
masking_rho = inspect.signature(OPERATORS["component_masking"]).parameters["rho"].default
zeroed = int((singular_values(children["component_masking"])[shown] == 0).sum())
print(f"component_masking zeroed {zeroed} of {rank} singular values (rho {masking_rho}: {round(masking_rho * rank)})")
alive, dead_parents = {m.member_id for m in founders}, 0
for step in sorted({r.step for r in records}):
    births = [r for r in records if r.step == step]
    dead_parents += sum(not (set(r.parents) <= alive and r.replaced in alive) for r in births)
    alive = (alive - {r.replaced for r in births}) | {r.child for r in births}
print(f"{len(records)} births (at most {generations * 2 * ec.replace_per_role}), {dead_parents} from a dead member")
print(
    f"retention curves: {len(curves)} of {len(retained)}, each {sorted({len(c) for c in curves.values()})} points "
    f"(n_retrain + 1 = {n_retrain + 1}), rewards in [{min(min(c) for c in curves.values()):+.2f}, "
    f"{max(max(c) for c in curves.values()):+.2f}]"
)
if figures:
    print(
        "figures:",
        {
            png: (figures / png).stat().st_size
            for png in ("04_operator_spectra.png", "04_crossover_identity.png", "04_lineage.png", "04_retention.png")
        },
    )
