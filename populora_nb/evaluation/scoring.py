"""Scoring benchmark answers (PopuLoRA §4): EvalPlus and LiveCodeBench code in the project's
sandbox, math answers with math-verify in a worker process.

The executor (`verifier.py`) knows nothing about benchmarks; their semantics live here:
  * EvalPlus (evalplus/eval/__init__.py `untrusted_check`, `unsafe_execute`): expected outputs
    come from the canonical solution run in the same sandbox; each input set (base, then plus if
    base passed) runs in one process that executes the module once (`Verifier.run_suites`), each
    input under ``max(min_time_limit, gt_time_limit_factor * t_gt)`` seconds (defaults 1.0 s and
    4, evalplus config.py) and the process under ``min(60, sum of limits) + 1`` s; equal if
    ``out == exp``, else within ``atol`` (``1e-6`` once an expected output is floats, sticky for
    the rest of the set, as evalplus' loop does) via an ``allclose`` of the same rtol; plus the
    special oracles (HumanEval/32 `find_zero` by root residual, MBPP set-equal / not-None / 164 /
    295 / 558 / 581).
  * Outputs cross the sandbox boundary as literals (DESIGN.md). A shim appended to each program
    turns results into plain literals first: builtin subclasses (Counter, namedtuple) and numpy
    scalars into their base types, non-finite floats into tagged strings, and an output whose
    text is over `DIGEST_OVER` characters (or an int too long to print) into a SHA-256 digest of
    a canonical text under which values equal by ``==`` agree (3 and 3.0, dict and set order), so
    huge outputs are compared as ``==`` would (without the float tolerance). The parent compares
    parsed values; no model object's ``__eq__`` runs.
  * LiveCodeBench (lcb_runner/evaluation/testing_util.py): stdin programs compared line by line
    after stripping, with a Decimal fallback; functional tests call ``Solution().<func>`` (the
    module once, each test in turn), a tuple result counts as a list; 6 s per test.
README's "Differences from official evalplus" lists what is intentionally not the same.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from populora_nb.evaluation.loaders import Problem, argument_text
from populora_nb.prompts import fenced_blocks
from populora_nb.verify.sandbox import parse_arguments, parse_literal
from populora_nb.verify.verifier import RunResult, Verifier

DEFAULT_MIN_TIME_LIMIT = 1.0
DEFAULT_GT_TIME_LIMIT_FACTOR = 4.0
TASK_TIMEOUT_CAP_S = 60.0
"""evalplus: EVALPLUS_TIMEOUT_PER_TASK, the wall limit for one program on one input set."""
GROUND_TRUTH_TIMEOUT_S = 300.0
LCB_TIMEOUT_S = 6.0
DIGEST_OVER = 100_000
SCORER_VERSION = 2
"""Bumped when the shim's output text changes (2: canonical digests), so cached ground truths are redone."""
ENTRY = "_bench_entry"
MBPP_OUTPUT_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")
MBPP_OUTPUT_SET_EQ_TASKS = (
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
)
_NONFINITE = "\x00nonfinite:"
_DIGEST = "\x00sha256:"

# Appended after the program, so these definitions replace any of the same name in it. It runs in
# the sandbox child; only the literal it returns reaches the parent.
_SHIM = """

import numbers as _bench_numbers


def _bench_plain(x):
    if x is None or type(x) is bool:
        return x
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        x = float(x)
        if x != x or x in (float("inf"), float("-inf")):
            return "{nonfinite}" + repr(x)
        return x
    for base in (complex, str, bytes):
        if isinstance(x, base):
            return base(x)
    if isinstance(x, dict):
        return {{_bench_plain(k): _bench_plain(v) for k, v in x.items()}}
    for base in (list, tuple, set, frozenset):
        if isinstance(x, base):
            return base(_bench_plain(v) for v in x)
    if isinstance(x, _bench_numbers.Integral):  # numpy scalars: equal to their Python value in evalplus
        return int(x)
    if isinstance(x, _bench_numbers.Real):
        return _bench_plain(float(x))
    if isinstance(x, _bench_numbers.Complex):
        return complex(x)
    if type(x).__name__ in ("bool", "bool_"):
        return bool(x)
    return x


def _bench_canon(x):
    t = type(x)
    if t is bool or t is int:
        return str(int(x)) if -(1 << 4096) < x < (1 << 4096) else hex(x)
    if t is float:
        return _bench_canon(int(x)) if x == int(x) else repr(x)
    if t is complex:
        return _bench_canon(x.real) if x.imag == 0 else "c(" + _bench_canon(x.real) + "," + _bench_canon(x.imag) + ")"
    if t is list:
        return "[" + ",".join(_bench_canon(v) for v in x) + "]"
    if t is tuple:
        return "(" + ",".join(_bench_canon(v) for v in x) + ")"
    if t is set or t is frozenset:
        return "{{" + ",".join(sorted(_bench_canon(v) for v in x)) + "}}"
    if t is dict:
        return "d{{" + ",".join(sorted(_bench_canon(k) + ":" + _bench_canon(v) for k, v in x.items())) + "}}"
    return repr(x)


def _bench_fit(x):
    import hashlib
    x = _bench_plain(x)
    try:
        unprintable = False
        if len(repr(x)) <= {digest_over} // 2:  # the canonical text is at most ~2x the repr
            return x
    except ValueError:  # an int over 4300 digits: no float equals it; its canonical text is hex
        unprintable = True
    try:
        text = _bench_canon(x)
    except (ValueError, OverflowError, RecursionError):
        return x
    if unprintable or len(text) > {digest_over}:
        return "{digest}" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    return x


def {entry}(*args):
    out = {call}(*args)
    {post}return _bench_fit(out)
"""


def shim(call: str, not_none: bool = False) -> str:
    """The shim calling `call` (``f`` or ``Solution().f``); `not_none` maps non-bools to ``is not None``."""
    post = "out = out if type(out) is bool else out is not None\n    " if not_none else ""
    return _SHIM.format(
        nonfinite=_NONFINITE.encode("unicode_escape").decode(),
        digest=_DIGEST.encode("unicode_escape").decode(),
        digest_over=DIGEST_OVER,
        entry=ENTRY,
        call=call,
        post=post,
    )


def decode_output(text: str) -> Any:
    """A shim output repr -> value (tagged non-finite floats restored); ValueError if not a literal."""
    return _restore(parse_literal(text))


def _restore(x: Any) -> Any:
    if type(x) is str and x.startswith(_NONFINITE):
        return float(x[len(_NONFINITE) :])
    if type(x) in (list, tuple):
        return type(x)(_restore(v) for v in x)
    if type(x) is dict:
        return {k: _restore(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------- code extraction (pure)
def _parse(code: str) -> ast.Module | None:
    """The module's AST, or None if it does not parse (model code: warnings about it are noise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None


def _keep(node: ast.stmt) -> bool:
    """evalplus' sanitizer keeps definitions and imports; example calls and prints go."""
    return isinstance(
        node,
        (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign),
    )


def sanitize(code: str) -> str:
    """Top-level definitions, imports and assignments only (unparseable code is returned as is)."""
    tree = _parse(code)
    return code if tree is None else ast.unparse([n for n in tree.body if _keep(n)])


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def extract_code(completion: str, entry_point: str = "") -> str | None:
    """The program a completion holds: the last fenced python block defining `entry_point` (else the
    last python block; a fence left open at the end of the text counts), or the bare text when it
    defines `entry_point` itself; None when neither."""
    blocks = [body for lang, body in fenced_blocks(completion) if lang in ("python", "py", "python3", "")]
    if completion.count("```") % 2 == 1:  # cut at max_new_tokens inside a block: keep what was written
        tail = completion.rsplit("```", 1)[1]
        lang, _, body = tail.partition("\n")
        if lang.strip().lower() in ("python", "py", "python3", ""):
            blocks.append(body)
    if entry_point:
        defining = [b for b in blocks if _defines(b, entry_point)]
        if defining:
            return defining[-1]
    if blocks:
        return blocks[-1]
    if entry_point and _defines(completion, entry_point):
        return completion
    return None


def parseable_prefix(code: str, keep: int = 0) -> str:
    """The longest prefix ending before a top-level line that parses (a base model's completion runs
    on past the function and is cut mid-statement), never shorter than `keep` characters; `code`
    itself if none does."""
    cuts = [m.start() for m in re.finditer(r"\n(?=\S)", code) if m.start() >= keep]
    return next((code[:end] for end in [len(code)] + cuts[::-1] if _parse(code[:end]) is not None), code)


def evalplus_program(problem: Problem, completion: str) -> str:
    """Code to test: the prompt (imports, helpers) then the model's code, its unfinished last
    statement cut; a completion with no code block and no definition of the entry point continues
    the prompt (base-model style)."""
    code = extract_code(completion, problem.entry_point)
    if code is not None:
        return problem.question + "\n\n" + sanitize(parseable_prefix(code)) + "\n"
    program = problem.question + completion
    return sanitize(parseable_prefix(program, keep=len(problem.question) + 1)) + "\n"


def defines_top_level(program: str, name: str) -> bool | None:
    """Does the module bind `name` at top level (def, class or assignment)? None if it does not parse."""
    tree = _parse(program)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


# ---------------------------------------------------------------- EvalPlus semantics (pure)
@dataclass(frozen=True)
class GroundTruth:
    """The canonical solution's outputs (shim reprs, None where it failed) and seconds, base then plus."""

    outputs: tuple[str | None, ...]
    seconds: tuple[float, ...]
    failures: tuple[str, ...] = ()
    """Status and detail of the inputs where the canonical solution itself failed."""

    def to_json(self) -> dict:
        return {"outputs": list(self.outputs), "seconds": list(self.seconds), "failures": list(self.failures)}

    @classmethod
    def from_json(cls, d: dict) -> GroundTruth:
        return cls(tuple(d["outputs"]), tuple(d["seconds"]), tuple(d.get("failures", ())))


def time_limits(
    gt: GroundTruth,
    min_time_limit: float = DEFAULT_MIN_TIME_LIMIT,
    gt_time_limit_factor: float = DEFAULT_GT_TIME_LIMIT_FACTOR,
) -> list[float]:
    return [max(min_time_limit, gt_time_limit_factor * t) for t in gt.seconds]


def is_floats(x: Any) -> bool:
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
        return abs(_poly(*parse_arguments(args_text)[0], out)) <= atol, atol
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
def _program_items(
    problems: Sequence[Problem], programs: Sequence[str], plus: bool | None
) -> list[tuple[str, tuple[str, ...]]]:
    """(program + shim, inputs): base inputs (plus=False), plus inputs (True) or both (None)."""
    items = []
    for p, program in zip(problems, programs):
        if not p.entry_point.isidentifier():
            raise ValueError(f"{p.id}: entry point {p.entry_point!r} is not an identifier")
        call_shim = shim(
            p.entry_point, not_none=p.benchmark == "mbppplus" and p.entry_point in MBPP_OUTPUT_NOT_NONE_TASKS
        )
        inputs = {False: p.base_inputs, True: p.plus_inputs, None: p.base_inputs + p.plus_inputs}[plus]
        items.append((program + call_shim, inputs))
    return items


def task_wall_s(limits: Sequence[float], task_timeout_cap_s: float = TASK_TIMEOUT_CAP_S) -> float:
    """evalplus `untrusted_check`: the process may take ``min(60, sum of per-input limits) + 1`` s."""
    return min(task_timeout_cap_s, sum(limits)) + 1.0


def evalplus_ground_truth(
    problems: Sequence[Problem], verifier: Verifier, timeout_s: float = GROUND_TRUTH_TIMEOUT_S
) -> list[GroundTruth]:
    """Run each canonical solution on its base + plus inputs (evalplus `get_groundtruth`: the
    module once, each input timed)."""
    items = _program_items(problems, [p.question + p.canonical_solution for p in problems], plus=None)
    runs = verifier.run_suites(
        [(prog, inputs, [timeout_s] * len(inputs), timeout_s) for prog, inputs in items], entry_point=ENTRY
    )
    out = []
    for res in runs:
        failures = tuple(
            f"input {i}: {r.status} {r.detail[:120]}".strip() for i, r in enumerate(res) if r.status != "ok"
        )
        out.append(
            GroundTruth(
                tuple(r.output if r.status == "ok" else None for r in res), tuple(r.seconds for r in res), failures
            )
        )
    return out


def score_evalplus(
    problems: Sequence[Problem],
    completions: Sequence[str],
    truths: Sequence[GroundTruth],
    verifier: Verifier,
    min_time_limit: float = DEFAULT_MIN_TIME_LIMIT,
    gt_time_limit_factor: float = DEFAULT_GT_TIME_LIMIT_FACTOR,
    task_timeout_cap_s: float = TASK_TIMEOUT_CAP_S,
    programs: Sequence[str] | None = None,
) -> list[tuple[bool, bool, str]]:
    """(base passed, base+plus passed, status) per completion; `programs` skips code extraction.
    Each input set runs as evalplus' `untrusted_check` does: one process, the module once, each
    input under its own limit, the process under `task_wall_s`. Plus inputs run only after the
    base inputs pass (evalplus: base then plus, fast check), so a hung program costs about its own
    limit on one input."""
    programs = (
        list(programs) if programs is not None else [evalplus_program(p, c) for p, c in zip(problems, completions)]
    )
    limits = [time_limits(gt, min_time_limit, gt_time_limit_factor) for gt in truths]
    nb = [len(p.base_inputs) for p in problems]
    base = [
        "no_entry_point" if defines_top_level(prog, p.entry_point) is False else ""
        for p, prog in zip(problems, programs)
    ]

    def run(idx: list[int], plus: bool) -> list[list[RunResult]]:
        cut = [slice(nb[i], None) if plus else slice(None, nb[i]) for i in idx]
        items = _program_items([problems[i] for i in idx], [programs[i] for i in idx], plus=plus)
        return verifier.run_suites(
            [
                (prog, inputs, limits[i][c], task_wall_s(limits[i][c], task_timeout_cap_s))
                for i, c, (prog, inputs) in zip(idx, cut, items)
            ],
            entry_point=ENTRY,
        )

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


# ---------------------------------------------------------------- LiveCodeBench
LCB_PREAMBLE = (
    "".join(
        f"from {m} import *\n"
        for m in (
            "string",
            "re",
            "datetime",
            "collections",
            "heapq",
            "bisect",
            "copy",
            "math",
            "random",
            "statistics",
            "itertools",
            "functools",
            "operator",
            "json",
            "typing",
        )
    )
    + "".join(
        f"import {m}\n"
        for m in (
            "string",
            "re",
            "datetime",
            "collections",
            "heapq",
            "bisect",
            "copy",
            "math",
            "random",
            "statistics",
            "itertools",
            "functools",
            "operator",
            "json",
            "sys",
        )
    )
    + "sys.setrecursionlimit(50000)\n"
)
"""lcb_runner's import_string without io/sys/builtins star imports (they would shadow input/open)."""


def lcb_lines_match(prediction: str, expected: str) -> bool:
    """testing_util.grade_stdio: stripped lines equal, or equal as Decimals element-wise."""
    got = [line.strip() for line in prediction.strip().split("\n")]
    want = [line.strip() for line in expected.strip().split("\n")]
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if g == w:
            continue
        try:
            if [Decimal(x) for x in g.split()] != [Decimal(x) for x in w.split()]:
                return False
        except (InvalidOperation, ValueError):
            return False
    return True


def lcb_functional_args(test_input: str) -> str:
    """One JSON value per line -> an argument list as literal text."""
    return argument_text([json.loads(line) for line in test_input.split("\n")])


def score_lcb(
    problems: Sequence[Problem], completions: Sequence[str], verifier: Verifier, timeout_s: float = LCB_TIMEOUT_S
) -> list[tuple[bool, str]]:
    """(passed every test, status) per completion; problems without tests raise."""
    results: list[tuple[bool, str] | None] = [None] * len(problems)
    scripts, script_owner, calls, call_owner = [], [], [], []
    for i, (p, c) in enumerate(zip(problems, completions)):
        if not p.tests:
            raise ValueError(f"{p.id} has no tests (prompt-only LiveCodeBench record); filter with has_tests")
        code = extract_code(c, "")
        if code is None:
            results[i] = (False, "no_code")
        elif p.tests[0].testtype == "stdin":
            for t in p.tests:
                scripts.append((LCB_PREAMBLE + code, t.input))
                script_owner.append((i, t.output))
        else:
            code = sanitize(code)
            call = (
                f"Solution().{p.entry_point}"
                if re.search(r"^class\s+Solution\b", code, re.MULTILINE)
                else p.entry_point
            )
            try:
                args = tuple(lcb_functional_args(t.input) for t in p.tests)
            except (ValueError, json.JSONDecodeError):
                raise ValueError(f"{p.id}: functional test input is not JSON lines") from None
            calls.append((LCB_PREAMBLE + code + shim(call), args))
            call_owner.append(i)
    verdicts: dict[int, list[str]] = {}
    for (i, expected), r in zip(script_owner, verifier.run_script_many(scripts, timeout_s=timeout_s)):
        ok = r.status == "ok" and r.seconds <= timeout_s and lcb_lines_match(r.stdout, expected)
        verdicts.setdefault(i, []).append("pass" if ok else (r.status if r.status != "ok" else "wrong"))
    suites = [(prog, args, [timeout_s] * len(args), task_wall_s([timeout_s] * len(args))) for prog, args in calls]
    for i, res in zip(call_owner, verifier.run_suites(suites, entry_point=ENTRY)):
        verdicts[i] = [_lcb_functional_verdict(r, t.output, timeout_s) for r, t in zip(res, problems[i].tests)]
    for i, v in verdicts.items():
        bad = next((s for s in v if s != "pass"), None)
        results[i] = (bad is None, bad or "pass")
    return results  # type: ignore[return-value]


def _lcb_functional_verdict(r: RunResult, expected: str, timeout_s: float) -> str:
    if r.status != "ok":
        return r.status
    if r.seconds > timeout_s:
        return "timeout"
    try:
        got, want = decode_output(r.output), json.loads(expected)
    except (ValueError, json.JSONDecodeError):
        return "wrong"
    if isinstance(got, tuple):  # "don't penalize model if it produces tuples instead of lists"
        got = list(got)
    return "pass" if got == want else "wrong"
