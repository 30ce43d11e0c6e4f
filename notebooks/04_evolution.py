# %% [markdown]
# # 04 · Evolution in LoRA weight space
#
# **Goal:** see what each of PopuLoRA's evolution operators does to a member's LoRA weights, and
# how replacement builds a lineage over a run. Every few update steps the weakest teachers and the
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

# %%
import random
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from populora_nb.config import load_config
from populora_nb.evolution import MemberRating, OperatorMix, ancestors, plot_lineage, simulate_lineage
from populora_nb.operators import (
    CONTROLS, OPERATORS, PAPER_IDS, arity, lora_rank, relative_change, singular_values, synthetic_factors,
)

config = load_config(preset, {"run.seed": seed})
ec = config.evolution
print(f"preset {config.preset}: evolution every {ec.every} steps, {ec.replace_per_role} replaced per role, "
      f"fitness mu - {ec.fitness_k} sigma, tournament of {ec.tournament_size}, grace {ec.grace_steps} steps")
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
        "self_attn.q_proj": (576, 576), "self_attn.k_proj": (576, 192), "self_attn.v_proj": (576, 192),
        "self_attn.o_proj": (576, 576), "mlp.gate_proj": (576, 1536), "mlp.up_proj": (576, 1536),
        "mlp.down_proj": (1536, 576),
    }.items()
}
generator = torch.Generator().manual_seed(seed)
parent_1 = synthetic_factors(module_shapes, rank, generator=generator)
parent_2 = synthetic_factors(module_shapes, rank, generator=generator)
shown = "model.layers.0.mlp.down_proj"
print(f"{len(parent_1)} modules, rank {lora_rank(parent_1)}; spectrum of {shown}:",
      [round(s, 4) for s in singular_values(parent_1)[shown].tolist()])

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
    fig.savefig(figures / "04_operator_spectra.png", dpi=110)
plt.show()

# %% [markdown]
# ## A lineage over a few generations
# `simulate_lineage` stands in for training and games (μ random-walks, σ shrinks 10% per step) and
# calls the same `plan_replacement` as the training loop, with this preset's operator mix. What to
# look for: each event replaces the weakest teacher and student by children of the stronger ones.
# A child starts with its parents' σ doubled, so its μ − 3σ is low: without `grace_steps` it is
# usually the next one culled and one slot churns while the tree stays one generation deep. Here
# grace lasts two evolution intervals, so children live long enough to become parents.

# %%
founders = [MemberRating(f"{role}-{i}", role, mu=25.0, sigma=25.0 / 3.0)
            for role in ("teacher", "student") for i in range(4)]
records = simulate_lineage(founders, generations=generations, every=ec.every, rng=random.Random(seed),
                           num_replaced=ec.replace_per_role, mix=OperatorMix(ec.operators), grace_steps=2 * ec.every)
fig, ax = plt.subplots(figsize=(12, 4.5))
plot_lineage(records, ax=ax, founders={m.member_id: m.role for m in founders})
fig.tight_layout()
if figures:
    fig.savefig(figures / "04_lineage.png", dpi=110)
plt.show()
for record in records[-2:]:
    lineage = sorted(ancestors(record.child, records))
    print(f"{record.child} ← {record.operator}{record.parents}, ancestors: {lineage}")

# %% [markdown]
# ## Retention: do children recover parent-level reward?
# **TO BE FILLED (needs the training loop):** for each operator, a child of a trained member is
# retrained n steps and its reward per step is plotted next to copy_parent and linear_0_5. The
# paper reports recovery within 10–20 steps. The call will be
# `evolution.retention_curves(parent, partner, train_and_score=..., num_steps=20,
# operators=tuple(OPERATORS))`, where `train_and_score(child, n)` trains the child n steps against
# a fixed opponent and returns its reward before training and after each step.

# %% [markdown]
# ## Verify it is real
# Every child has its parent's rank and shapes and no NaN, copy_parent is the parent exactly, the
# operators that should move ΔW did, and the lineage only ever uses living members as parents.

# %%
for name, child in children.items():
    assert lora_rank(child) == rank, name
    for module, (A, B) in child.items():
        assert A.shape == parent_1[module].A.shape and B.shape == parent_1[module].B.shape, (name, module)
        assert torch.isfinite(A).all() and torch.isfinite(B).all(), (name, module)
assert all(torch.equal(children["copy_parent"][m].B, parent_1[m].B) for m in parent_1)
moved = {name: relative_change(parent_1, child) for name, child in children.items()}
assert all(change > 1e-3 for name, change in moved.items() if name != "copy_parent"), moved
assert (singular_values(children["component_masking"])[shown] == 0).sum() == round(0.25 * rank)
alive = {m.member_id for m in founders}
for step in sorted({r.step for r in records}):
    births = [r for r in records if r.step == step]
    assert all(set(r.parents) <= alive and r.replaced in alive for r in births)
    alive = (alive - {r.replaced for r in births}) | {r.child for r in births}
assert len(records) <= generations * 2 * ec.replace_per_role and len(records) > 0
if figures:
    assert (figures / "04_operator_spectra.png").stat().st_size > 0 and (figures / "04_lineage.png").stat().st_size > 0
print("verified:", len(children), "operators,", len(records), "births")
