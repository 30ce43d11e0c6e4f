# %% [markdown]
# # 07 · A laptop run: baseline vs population over seeds, with intervals
#
# **Goal:** what a 2-core CPU can say about the paper's question (does a single self-play agent
# collapse to easy tasks while a population enters an arms race?) with SmolLM2-135M, and how sure
# it can be. Three pieces, all package code:
#
# 1. the **`cpu` preset**: smoke's settings made cheaper per sample (bf16 base, short completions),
#    run longer, on code_i tasks only: the task kind a pilot found in the learnable band 0 < ρ < 1
#    most often (`docs/results/cpu-pilot/`);
# 2. a **warm-up** (`populora_nb.warmup`): rejection-sampling fine-tuning on the model's own proposals
#    that the verifier accepted, shared by baseline and population, so that RL starts where it has
#    signal;
# 3. the **seed protocol** (`python -m studies.seed_protocol`, `studies.protocol`): the
#    same experiment at several seeds; for every headline series the start and end values, their
#    change and the population − baseline difference, each with a 95% t-interval over seeds (paired
#    t for changes and differences; the seeds' range beside it) and the minimum detectable difference.
#
# With the `tiny` preset (CI) this notebook runs a 2-seed, 2-step protocol to show the mechanics:
# random weights, so its numbers mean nothing. With any preset it then shows the measured laptop
# result committed in `docs/results/cpu-protocol/` (3 seeds × 40 steps at the `cpu` preset, under the
# probe it asks for), or a protocol directory you name (the same protocol under the first probe
# settings is `docs/results/cpu-protocol-first-probe/`; the first protocol, under the rules before
# issue #27, is `docs/results/cpu-protocol-before-27/`).

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
protocol_dir = None  # a finished `python -m studies.seed_protocol` directory to show; None: the committed result
out_dir = None  # when set, figures are saved there as PNG
demo_seeds = [0, 1]  # the tiny demo's seeds (tiny preset only)

# %%
from pathlib import Path

from IPython.display import Image, Markdown, display

from populora_nb.analysis.figures import save_figure
from populora_nb.config import AGENTS, describe, load_config
from studies import protocol
from studies.seed_protocol import run_protocol

print(f"preset={preset!r} protocol_dir={protocol_dir!r} out_dir={out_dir!r} demo_seeds={demo_seeds}")

# %% [markdown]
# ## The `cpu` preset
# What it changes, and why, is in `populora_nb/presets.py`; the measured cost per step is in
# `docs/performance.md`. The warm-up section below is the one new stage.

# %%
print(describe(load_config("cpu"), "model", "sampling", "rl", "run", "warmup"))

# %% [markdown]
# ## Running the protocol
# On a laptop, in a terminal (it takes hours; rerunning the same command resumes):
#
# ```bash
# python -m studies.seed_protocol --preset cpu --seeds 0 1 2 --out runs/cpu-protocol
# ```
#
# Each seed gets its own experiment directory (`seed0/`, ...): warm-up, baseline, population. The
# protocol then writes `seeds.md`, `seeds.json` and one figure per series. Here, with the `tiny`
# preset, the same function runs at toy size.

# %%
if preset == "tiny":
    demo = load_config(
        "tiny",
        {
            "run.steps": 2,
            "warmup.enabled": True,
            "warmup.max_rounds": 1,
            "warmup.batch": 3,
            "warmup.measure_rounds": 1,
        },
    )
    demo_dir = Path("..") / "runs" / "notebooks-tiny-protocol"  # beside, not inside, notebooks 02/03's experiment
    md = run_protocol(demo, demo_dir, demo_seeds, stages=("warmup", *AGENTS), window=1)
    print(f"tiny demo protocol (random weights: mechanics only) in {demo_dir}")
    if protocol_dir is None:
        shown = demo_dir
else:
    print("not the tiny preset: no demo run here (a real protocol takes hours; see the command above)")

# %% [markdown]
# ## The result
# The table below is the protocol's `seeds.md`: start and end of each series per run, and
# population − baseline at the end. Read the caveat in it: with 3 seeds a percentile bootstrap is
# the seeds' own range, so every verdict is the paired t-interval's, and a family of series is
# reported with Holm's correction. Its first section, "Is the mechanism live?", gives per seed and run
# each check with its state, read from its 95% interval (pass above the threshold, fail below,
# inconclusive across it, too few to judge with under 4 step blocks): the share of valid tasks whose
# **program is new** (names, formatting and comments normalised), over the whole run and over its last
# window; 0 < ρ < 1 among non-repeats (a **repeat** is the same task as its student meets it, met
# before) and among new programs; the share of rated games the teachers won and of matches they won
# most games of; and the children judged at their first evolution event outside grace against the
# equal-skill chance rate there. Read it before any curve. Every sentence of a rise, fall or
# difference follows its own interval and says whether Holm keeps it; an interval that includes 0
# allows every difference inside it, large ones of either sign included.
#
# What the committed `cpu` protocol says (docs/laptop-run.md has it all): both arms collapse onto a
# few trivial programs. 91–93% of the populations' valid tasks re-use a program met earlier (53–68
# distinct programs in ~590 valid tasks), 81–96% of the baselines' (12–30 in ~110), and the identity
# function is one of the two most posed programs in every run. The populations' new-programs check is
# inconclusive over every whole run and fails in two last windows (0.5 and 0.4 new programs a step);
# one baseline fails it too; the population's repeat rate rises (the one change Holm keeps). The
# mechanism is live in one seed of three (seed 1's band, teacher wins and majorities pass). No
# population − baseline difference is detectable, with intervals that allow large effects either
# way; the complexity windows hold too few new programs, and the probe, not floor-bound at step 0,
# holds under the 25 valid tasks a run needs, so it says nothing. So at 135M the instrument sees a
# collapse onto a few programs in both arms, and population vs AZR cannot be read.

# %%
committed = Path("..") / "docs" / "results" / "cpu-protocol"
if protocol_dir is not None:
    shown = Path(protocol_dir)
elif preset != "tiny":
    shown = committed
if (shown / "seeds.md").is_file():
    text = (shown / "seeds.md").read_text()
    display(Markdown(text.split("![")[0]))  # the tables; the figures follow below
else:
    print(f"no protocol report at {shown}: run the command above, or set protocol_dir")

# %% [markdown]
# ## The figures
# One per series: the mean over seeds with its 95% band, baseline (grey) and population (red) on one
# axis; coverage as start and end values per run; the warm-up as before and after per seed.

# %%
names = ["seeds_warmup.png"] + ["seeds_" + key.replace("/", "_") + ".png" for key in protocol.HEADLINE]
for png in (shown / name for name in names):
    if png.is_file():  # in the report's order: the warm-up, then each headline series
        display(Image(filename=str(png), width=520))

# %% [markdown]
# Drawn live from the runs (when the experiment directories are here), e.g. the teacher valid rate:

# %%
experiments = sorted(p for p in shown.glob("seed*") if (p / "baseline").is_dir())
if experiments:
    fig = protocol.plot_seed_band(experiments, "teacher/valid_rate", window=1 if preset == "tiny" else 5)
    if out_dir is not None:
        save_figure(fig, Path(out_dir) / "07_valid_rate_seeds.png", close=False)  # still shown below
else:
    print(f"{shown} holds the report only (the run directories are not committed)")
