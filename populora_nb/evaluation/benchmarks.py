"""Benchmark evaluation of population members, the baseline and the bare base (PopuLoRA §4, Table 1).

The paper's claim: the population mean beats the compute-matched single-agent baseline on the code
(HumanEval+, MBPP+, LiveCodeBench) and math (AIME 24/25, AMC 23, MATH-500, Minerva, GSM8K,
OlympiadBench) benchmarks, and even the weakest member beats it on aggregate. This module turns
models into that table's numbers: prompts -> completions (a callable per model, so the caller
batches members on the mixed-adapter path) -> scores (code in the sandbox, math with math-verify)
-> per-(model, benchmark) results saved as JSON (resumable).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from populora_nb.evaluation.evalplus_scoring import GroundTruth, evalplus_ground_truth, score_evalplus
from populora_nb.evaluation.lcb_scoring import score_lcb
from populora_nb.evaluation.loaders import BENCHMARK_FILES, Problem, benchmark_path, load_benchmark
from populora_nb.evaluation.math_answers import MathChecker, extract_math_answer
from populora_nb.evaluation.output_shim import SCORER_VERSION
from populora_nb.model.batch import left_pad
from populora_nb.prompts import render
from populora_nb.verify import BENCHMARK_POLICY, Verifier

Generate = Callable[[list[str]], list[str]]
"""Prompts -> completions, one per prompt, in order (greedy or sampled: the caller decides)."""
JointGenerate = Callable[[Mapping[str, list[str]]], Mapping[str, list[str]]]
"""{model: prompts} -> {model: completions}: every model in one call (one mixed-adapter batch)."""
EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
)
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def project_scorer(kind: str) -> str:
    """The `EvalResult.scorer` label of this project's own scorers, by problem kind."""
    semantics = {"evalplus": "evalplus semantics", "lcb": "LiveCodeBench semantics"}.get(kind)
    return f"project ({semantics}, v{SCORER_VERSION})" if semantics else f"project ({kind or 'unknown'})"


@dataclass(frozen=True)
class Score:
    """One completion's verdict."""

    passed: bool
    status: str
    """"pass", or why not: wrong, timeout, syntax, no_answer, not_equivalent, ... (first failure)."""
    base_passed: bool | None = None
    """EvalPlus only: the original tests alone (HumanEval / MBPP rather than the + versions)."""
    answer: str = ""
    """Math only: the extracted answer."""


@dataclass
class EvalResult:
    """One model on one benchmark: pass@k, per-problem verdicts and completions, how it was run."""

    model: str
    benchmark: str
    pass_at_k: dict[str, float]
    """``{"pass@1": 0.12, ...}`` over scored problems; empty when nothing could be scored."""
    n_problems: int
    n_samples: int
    problems: list[dict] = field(default_factory=list)
    """Per problem: id, passed / status / base_passed / completion (one entry per sample)."""
    settings: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    scorer: str = ""
    """Who made the numbers: `project_scorer(kind)` (the default) or "evalplus 0.3.1 official"."""
    source: str = ""
    """The data file the problems were read from ("" in results saved before it was recorded)."""

    def __post_init__(self) -> None:
        self.scorer = self.scorer or project_scorer(BENCHMARK_FILES.get(self.benchmark, ("",))[0])

    @property
    def score(self) -> float:
        """pass@1 (nan when nothing was scored, e.g. LiveCodeBench prompts without tests)."""
        return self.pass_at_k.get("pass@1", math.nan)


def benchmark_verifier(timeout_s: float = 60.0, memory_mb: int = 4096, workers: int = 2) -> Verifier:
    """A sandbox for benchmark code: the wider module policy, evalplus' 4 GB memory default."""
    return Verifier(timeout_s=timeout_s, memory_mb=memory_mb, workers=workers, policy=BENCHMARK_POLICY)


# ---------------------------------------------------------------- prompts
def instruction(problem: Problem, fmt: str) -> str:
    """What the model is asked, before any chat/r1 wrapping; "plain" EvalPlus is prompt completion."""
    if problem.kind == "evalplus":
        if fmt == "plain":
            return problem.question
        return f"{EVALPLUS_INSTRUCTION}\n```python\n{problem.question.strip()}\n```"
    if problem.kind == "lcb":
        return problem.question
    return f"{problem.question.strip()}\n{MATH_INSTRUCTION}"


def build_prompts(problems: Sequence[Problem], tokenizer_or_format: Any = "plain") -> list[str]:
    """Model inputs: "plain" (raw text; EvalPlus as code completion), "r1" (AZR's template), or a
    tokenizer, whose chat template wraps each instruction."""
    if isinstance(tokenizer_or_format, str):
        if tokenizer_or_format not in ("plain", "r1"):
            raise ValueError(f"format must be 'plain', 'r1' or a tokenizer, got {tokenizer_or_format!r}")
        fmt = tokenizer_or_format
        return [instruction(p, fmt) if fmt == "plain" else render(instruction(p, fmt), None, "r1") for p in problems]
    return [render(instruction(p, "chat"), tokenizer_or_format, "chat") for p in problems]


def _format_name(tokenizer_or_format: Any) -> str:
    if isinstance(tokenizer_or_format, str):
        return tokenizer_or_format
    return "chat:" + str(getattr(tokenizer_or_format, "name_or_path", type(tokenizer_or_format).__name__))


# ---------------------------------------------------------------- scoring
def score_many(
    problems: Sequence[Problem],
    completions: Sequence[str],
    verifier: Verifier | None = None,
    math_checker: MathChecker | None = None,
    truths: Mapping[str, GroundTruth] | None = None,
) -> list[Score]:
    """Score each completion against its problem; code in `verifier`'s sandbox (EvalPlus needs the
    canonical outputs `truths`, keyed by problem id: computed here when missing)."""
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")

    def part(kind: str) -> tuple[list[int], list[Problem], list[str]]:  # positions, problems, completions
        idx = [i for i, p in enumerate(problems) if p.kind == kind]
        return idx, [problems[i] for i in idx], [completions[i] for i in idx]

    out: dict[int, Score] = {}
    idx, ps, cs = part("evalplus")
    if idx:
        code_verifier = _code_verifier(verifier)
        known = dict(truths or {})
        known |= _ground_truth_cached([p for p in ps if p.id not in known], code_verifier)
        for i, (base_ok, ok, status) in zip(idx, score_evalplus(ps, cs, [known[p.id] for p in ps], code_verifier)):
            out[i] = Score(ok, status, base_passed=base_ok)
    idx, ps, cs = part("lcb")
    if idx:
        for i, (ok, status) in zip(idx, score_lcb(ps, cs, _code_verifier(verifier))):
            out[i] = Score(ok, status)
    idx, ps, cs = part("math")
    if idx:
        answers = [extract_math_answer(c) for c in cs]
        with contextlib.ExitStack() as owned:  # a checker this call starts, it stops
            checker = math_checker or owned.enter_context(MathChecker())
            checked = iter([checker.check(p.answer, a) for p, a in zip(ps, answers) if a is not None])
        for i, a in zip(idx, answers):
            ok, status = next(checked) if a is not None else (False, "no_answer")
            out[i] = Score(ok, status, answer=a or "")
    return [out[i] for i in range(len(problems))]


def _code_verifier(verifier: Verifier | None) -> Verifier:
    """`verifier`, which code benchmarks cannot do without."""
    if verifier is None:
        raise ValueError("code benchmarks need a verifier: pass benchmark_verifier() (a context manager)")
    return verifier


# ---------------------------------------------------------------- evaluation
def _ground_truth_cached(
    problems: Sequence[Problem], verifier: Verifier, cache: Path | None = None
) -> dict[str, GroundTruth]:
    """Canonical outputs per problem id; cached under `cache` keyed by a hash of program + inputs."""

    def key(p: Problem) -> str:
        text = json.dumps(
            [p.question, p.canonical_solution, p.entry_point, p.base_inputs, p.plus_inputs, SCORER_VERSION]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    stored = json.loads(cache.read_text()) if cache is not None and cache.is_file() else {}
    truths = {
        p.id: GroundTruth.from_json(stored[p.id])
        for p in problems
        if p.id in stored and stored[p.id].get("key") == key(p)
    }
    missing = [p for p in problems if p.id not in truths]
    if missing:
        for p, gt in zip(missing, evalplus_ground_truth(missing, verifier)):
            truths[p.id] = gt
            stored[p.id] = dict(asdict(gt), key=key(p))
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(stored))
    return truths


def _result_path(out_dir: Path, model: str, benchmark: str) -> Path:
    return out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}__{benchmark}.json"


def _finish(
    model: str,
    benchmark: str,
    problems: Sequence[Problem],
    completions: list[str],
    scores: list[Score],
    settings: dict,
    seconds: dict,
) -> EvalResult:
    """The result of one greedy completion per problem (each per-problem entry a list of one sample)."""
    keys = ("passed", "status", "base_passed", "answer")
    rows = [
        {"id": p.id} | {k: [getattr(s, k)] for k in keys} | {"completion": [c]}
        for p, s, c in zip(problems, scores, completions)
    ]
    metrics = {"pass@1": sum(s.passed for s in scores) / len(scores)} if scores else {}
    if scores and problems[0].kind == "evalplus":
        metrics["base_pass@1"] = sum(bool(s.base_passed) for s in scores) / len(scores)
    return EvalResult(model, benchmark, metrics, len(problems), 1, rows, settings, seconds)


def evaluate(
    models: Mapping[str, Generate] | Sequence[str],
    benchmarks: Sequence[str],
    tokenizer_or_format: Any = "plain",
    data_dir: str | Path | None = None,
    limit: int | None = None,
    out_dir: str | Path | None = None,
    verifier: Verifier | None = None,
    math_checker: MathChecker | None = None,
    generate_joint: JointGenerate | None = None,
    extra_settings: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EvalResult]:
    """Every model on every benchmark. `models` maps names to `Generate` callables, or is a list of
    names when `generate_joint` produces all models' completions in one call per benchmark; one
    completion per prompt (pass@1). With `out_dir`, results are saved as ``<model>__<benchmark>.json``
    as soon as each is scored, and pairs already there with the same settings (limit, prompt format,
    problem ids, `extra_settings` such as max_new_tokens) are loaded instead of recomputed, so an
    interrupted evaluation resumes."""
    names = list(models)
    if generate_joint is None and not isinstance(models, Mapping):
        raise ValueError("pass models as {name: generate} or give generate_joint")
    generators: Mapping[str, Generate] = models if isinstance(models, Mapping) else {}
    out = Path(out_dir) if out_dir is not None else None
    say = progress or (lambda _: None)
    results: list[EvalResult] = []
    with contextlib.ExitStack() as owned:  # what this call starts, it stops
        if verifier is None and any(BENCHMARK_FILES[b][0] != "math" for b in benchmarks):
            verifier = benchmark_verifier()
            owned.callback(verifier.close)
        if math_checker is None and any(BENCHMARK_FILES[b][0] == "math" for b in benchmarks):
            math_checker = owned.enter_context(MathChecker())
        for bench in benchmarks:
            problems = [p for p in load_benchmark(bench, data_dir, limit) if p.has_tests]
            source = str(benchmark_path(bench, data_dir))
            settings = {
                "limit": limit,
                "n_samples": 1,
                "format": _format_name(tokenizer_or_format),
                "problems": [p.id for p in problems],
                **dict(extra_settings or {}),
            }
            done: dict[str, EvalResult] = {}
            for name in names:
                path = _result_path(out, name, bench) if out else None
                saved = json.loads(path.read_text()) if path is not None and path.is_file() else None
                if path is not None and saved is not None and saved.get("settings") == settings:
                    done[name] = EvalResult(**saved)
                    say(f"[eval] {name} / {bench}: loaded {path.name}")
                    continue
                if saved is not None:  # never replaced without a word
                    say(f"[eval] {name} / {bench}: replacing {path}, {_differences(saved.get('settings'), settings)}")
                if not problems:  # nothing scorable (LiveCodeBench prompts without tests)
                    done[name] = EvalResult(name, bench, {}, 0, 1, [], settings, {}, source=source)
            todo = [n for n in names if n not in done]
            prompts = build_prompts(problems, tokenizer_or_format) if todo else []
            truths = None
            if todo and problems[0].kind == "evalplus":
                cache = out / "ground_truth" / f"{bench}.json" if out else None
                truths = _ground_truth_cached(problems, _code_verifier(verifier), cache)
            t0 = time.time()
            joint = dict(generate_joint({n: prompts for n in todo})) if todo and generate_joint is not None else {}
            joint_s = time.time() - t0
            for name in todo:
                t0 = time.time()
                completions = list(joint[name] if generate_joint is not None else generators[name](prompts))
                gen_s = joint_s if generate_joint is not None else time.time() - t0
                if len(completions) != len(prompts):
                    raise ValueError(f"{name}: {len(completions)} completions for {len(prompts)} prompts")
                t1 = time.time()
                scores = score_many(problems, completions, verifier, math_checker, truths)
                seconds = {"generate": gen_s, "score": time.time() - t1}
                done[name] = _finish(name, bench, problems, completions, scores, settings, seconds)
                done[name].source = source
                if out is not None:
                    out.mkdir(parents=True, exist_ok=True)
                    _result_path(out, name, bench).write_text(json.dumps(asdict(done[name]), indent=1))
            for name in names:
                say(f"[eval] {name} / {bench}: pass@1 {done[name].score:.3f} on {done[name].n_problems} problems")
                results.append(done[name])
    return results


def _differences(saved: Any, now: Mapping[str, Any]) -> str:
    """Why a saved result is not this evaluation's: the settings that differ, saved -> now."""
    if not isinstance(saved, dict):
        return "which records no settings"
    keys = [k for k in dict.fromkeys([*saved, *now]) if saved.get(k) != now.get(k)]
    shown = ", ".join(f"{k} changed" if k == "problems" else f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in keys)
    return f"saved with other settings ({shown})"


def load_results(out_dir: str | Path) -> list[EvalResult]:
    """Every ``<model>__<benchmark>.json`` saved by `evaluate` under `out_dir`."""
    return [EvalResult(**json.loads(p.read_text())) for p in sorted(Path(out_dir).glob("*__*.json"))]


def hf_generate(model: Any, tokenizer: Any, max_new_tokens: int = 256, batch_size: int = 8) -> Generate:
    """A greedy `Generate` over a plain transformers model (the bare base); population members go
    through the mixed-adapter path instead (`model.adapters.Population.generate`)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device

    def generate(prompts: list[str]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(prompts), batch_size):
            ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts[start : start + batch_size]]
            input_ids, mask = left_pad(ids, pad, device)  # (B, T)
            with torch.no_grad():
                seqs = model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                )
            out += tokenizer.batch_decode(seqs[:, input_ids.shape[1] :], skip_special_tokens=True)
        return out

    return generate
