"""EvalPlus scoring (evalplus/eval/__init__.py `untrusted_check`, `unsafe_execute`) in the project's
sandbox (PopuLoRA §4): expected outputs from the canonical solution run in the same sandbox, each
input set in one process (`Verifier.run_suites`) under evalplus' time limits, ``==`` else
``allclose`` with evalplus' sticky atol, and its special oracles. docs/benchmarks.md describes the
semantics and lists what is intentionally not the same as official evalplus.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from populora_nb.evaluation.loaders import Problem
from populora_nb.evaluation.output_shim import ENTRY, decode_output, shim
from populora_nb.evaluation.programs import defines_top_level, evalplus_program
from populora_nb.verify import RunResult, Verifier, parse_arguments

DEFAULT_MIN_TIME_LIMIT = 1.0
DEFAULT_GT_TIME_LIMIT_FACTOR = 4.0
TASK_TIMEOUT_CAP_S = 60.0
"""evalplus: EVALPLUS_TIMEOUT_PER_TASK, the wall limit for one program on one input set."""
GROUND_TRUTH_TIMEOUT_S = 300.0
MBPP_OUTPUT_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")
MBPP_OUTPUT_SET_EQ_TASKS = tuple(
    "similar_elements find_char_long common_in_nested_lists extract_singly larg_nnum intersection_array "
    "find_dissimilar Diff".split()
)


# ---------------------------------------------------------------- EvalPlus semantics (pure)
@dataclass(frozen=True)
class GroundTruth:
    """The canonical solution's outputs (shim reprs, None where it failed) and seconds, base then plus."""

    outputs: tuple[str | None, ...]
    seconds: tuple[float, ...]
    failures: tuple[str, ...] = ()
    """Status and detail of the inputs where the canonical solution itself failed."""

    @classmethod
    def from_json(cls, d: dict) -> GroundTruth:
        """Inverse of `dataclasses.asdict` (the JSON form cached under ``ground_truth/``); a cache
        without ``failures`` reads as none."""
        return cls(tuple(d["outputs"]), tuple(d["seconds"]), tuple(d.get("failures", ())))


def time_limits(gt: GroundTruth, gt_time_limit_factor: float = DEFAULT_GT_TIME_LIMIT_FACTOR) -> list[float]:
    """Per-input time limits: ``max(min_time_limit, gt_time_limit_factor * t_gt)`` (evalplus)."""
    return [max(DEFAULT_MIN_TIME_LIMIT, gt_time_limit_factor * t) for t in gt.seconds]


def is_floats(x: Any) -> bool:
    """A float, or a non-empty list/tuple of floats (evalplus: where the 1e-6 tolerance starts)."""
    if isinstance(x, float):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(i, float) for i in x)


def allclose(out: Any, exp: Any, atol: float, rtol: float = 1e-7) -> bool:
    """numpy.allclose on nested lists of numbers, without numpy (NaN never close)."""
    if isinstance(out, (list, tuple)) and isinstance(exp, (list, tuple)):
        return len(out) == len(exp) and all(allclose(o, e, atol, rtol) for o, e in zip(out, exp))
    if isinstance(out, (int, float, complex)) and isinstance(exp, (int, float, complex)):
        try:
            return abs(out - exp) <= atol + rtol * abs(exp)
        except OverflowError:
            return False
    return False


def _poly(xs: list, x: float) -> float:
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge: float, height: float) -> int:
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 2 * base_edge * slant)


def _digit_distance(a: int, b: int) -> int:
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def evalplus_match(problem: Problem, args_text: str, out: Any, exp: Any, atol: float) -> tuple[bool, float]:
    """Does `out` pass against `exp` for this input? Returns (passed, atol for the next input)."""
    exact = out == exp
    name = problem.entry_point
    if problem.benchmark == "mbppplus":
        if name == "are_equivalent":  # Mbpp/164: the reference is wrong, any answer counts
            exact = True
        elif name == "sum_div":
            exact = exact or out == 0
        elif name == "surface_Area":
            exact = exact or abs(out - _surface_area(*parse_arguments(args_text)[0])) <= atol
        elif name == "digit_distance_nums":
            exact = exact or out == _digit_distance(*parse_arguments(args_text)[0])
        elif name in MBPP_OUTPUT_SET_EQ_TASKS:
            exact = set(out) == set(exp)
    if problem.benchmark.startswith("humanevalplus") and name == "find_zero":
        (xs,) = parse_arguments(args_text)[0]  # find_zero(xs): one argument
        return abs(_poly(xs, out)) <= atol, atol
    if atol == 0 and is_floats(exp):
        atol = 1e-6  # evalplus enforces it from here on, for the rest of the inputs too
    if not exact and atol != 0:
        same_shape = type(out) is type(exp) and (not isinstance(exp, (list, tuple)) or len(out) == len(exp))
        return same_shape and allclose(out, exp, atol), atol
    return bool(exact), atol


def _maybe_floats(text: str) -> bool:
    """Could this output text be a float or a list/tuple of floats? (cheap: skips most parses)"""
    return text[:1] in "-0123456789.[('" and ("." in text or "e" in text or "inf" in text or "nonfinite" in text)


def judge_evalplus(
    problem: Problem,
    inputs: Sequence[str],
    expected: Sequence[str | None],
    results: Sequence[RunResult],
    limits: Sequence[float],
) -> str:
    """ "pass", or the first failure over one input set (base or plus; atol restarts per set, as each
    set is its own `untrusted_check` in evalplus)."""
    atol = problem.atol
    for i, (r, exp_text) in enumerate(zip(results, expected)):
        if r.status != "ok":
            return r.status
        if r.seconds > limits[i]:
            return "timeout"
        if exp_text is None:
            return "reference_failed"
        try:
            if r.output == exp_text and "nan" not in r.output:  # same text: equal values, no parse needed
                ok = True
                if atol == 0 and _maybe_floats(exp_text) and is_floats(decode_output(exp_text)):
                    atol = 1e-6  # evalplus switches the tolerance on here too, for the inputs after
            else:
                ok, atol = evalplus_match(problem, inputs[i], decode_output(r.output), decode_output(exp_text), atol)
        except (ValueError, TypeError, OverflowError, ZeroDivisionError, RecursionError):
            ok = False
        if not ok:
            return "wrong"
    return "pass" if len(results) >= len(inputs) else "not_run"


# ---------------------------------------------------------------- EvalPlus through the sandbox
def evalplus_shim(p: Problem) -> str:
    """The output shim calling the problem's entry point (MBPP+'s not-None oracles: ``is not None``)."""
    if not p.entry_point.isidentifier():
        raise ValueError(f"{p.id}: entry point {p.entry_point!r} is not an identifier")
    return shim(p.entry_point, p.benchmark == "mbppplus" and p.entry_point in MBPP_OUTPUT_NOT_NONE_TASKS)


def task_wall_s(limits: Sequence[float]) -> float:
    """evalplus `untrusted_check`: the process may take ``min(60, sum of per-input limits) + 1`` s."""
    return min(TASK_TIMEOUT_CAP_S, sum(limits)) + 1.0


def run_shimmed(
    verifier: Verifier, items: Sequence[tuple[str, str, Sequence[str], Sequence[float]]], wall_s: float | None = None
) -> list[list[RunResult]]:
    """Per item (program, its shim, inputs, per-input limits): one sandbox process runs the module
    once, then the shim on each input in turn (`Verifier.run_suites`), the process under `wall_s`
    (default `task_wall_s` of its limits). What every code scorer runs (EvalPlus, LiveCodeBench)."""
    return verifier.run_suites(
        [(program + tail, inputs, limits, wall_s or task_wall_s(limits)) for program, tail, inputs, limits in items],
        entry_point=ENTRY,
    )


def evalplus_ground_truth(problems: Sequence[Problem], verifier: Verifier) -> list[GroundTruth]:
    """Run each canonical solution on its base + plus inputs (evalplus `get_groundtruth`: the
    module once, each input timed)."""
    limit, inputs = GROUND_TRUTH_TIMEOUT_S, [p.base_inputs + p.plus_inputs for p in problems]
    items = [
        (p.question + p.canonical_solution, evalplus_shim(p), x, [limit] * len(x)) for p, x in zip(problems, inputs)
    ]
    return [
        GroundTruth(
            tuple(r.output if r.status == "ok" else None for r in res),
            tuple(r.seconds for r in res),
            tuple(f"input {i}: {r.status} {r.detail[:120]}".strip() for i, r in enumerate(res) if r.status != "ok"),
        )
        for res in run_shimmed(verifier, items, wall_s=limit)
    ]


def score_evalplus(
    problems: Sequence[Problem],
    completions: Sequence[str],
    truths: Sequence[GroundTruth],
    verifier: Verifier,
    gt_time_limit_factor: float = DEFAULT_GT_TIME_LIMIT_FACTOR,
    programs: Sequence[str] | None = None,
) -> list[tuple[bool, bool, str]]:
    """(base passed, base+plus passed, status) per completion; `programs` skips code extraction.
    Each input set runs as evalplus' `untrusted_check` does: one process, the module once, each
    input under its own limit, the process under `task_wall_s`. Plus inputs run only after the
    base inputs pass (evalplus: base then plus, fast check), so a hung program costs about its own
    limit on one input."""
    if programs is None:
        programs = [evalplus_program(p, c) for p, c in zip(problems, completions)]
    limits = [time_limits(gt, gt_time_limit_factor) for gt in truths]
    nb = [len(p.base_inputs) for p in problems]
    base = [
        "no_entry_point" if defines_top_level(prog, p.entry_point) is False else ""
        for p, prog in zip(problems, programs)
    ]

    def run(idx: list[int], plus: bool) -> list[list[RunResult]]:
        items = []
        for i in idx:
            p, cut = problems[i], slice(nb[i], None) if plus else slice(None, nb[i])
            items.append((programs[i], evalplus_shim(p), p.plus_inputs if plus else p.base_inputs, limits[i][cut]))
        return run_shimmed(verifier, items)

    todo = [i for i, status in enumerate(base) if not status]
    for i, res in zip(todo, run(todo, plus=False)):
        base[i] = judge_evalplus(
            problems[i], problems[i].base_inputs, truths[i].outputs[: nb[i]], res, limits[i][: nb[i]]
        )
    out = [(status == "pass", status == "pass", status) for status in base]
    todo = [i for i, status in enumerate(base) if status == "pass" and problems[i].plus_inputs]
    for i, res in zip(todo, run(todo, plus=True)):
        p, n = problems[i], nb[i]
        status = judge_evalplus(p, p.plus_inputs, truths[i].outputs[n:], res, limits[i][n:])
        out[i] = (True, status == "pass", status)
    return out
