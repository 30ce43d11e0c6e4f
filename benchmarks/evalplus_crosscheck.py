"""Cross-check machinery: the project's EvalPlus scorer (`evalplus_scoring.score_evalplus`) against the official
evaluator, evalplus 0.3.1, on the same local data and the same candidate programs.

Used by tests/test_evalplus_crosscheck.py (the agreement it asserts) and benchmarks/bench_scoring.py
(the speed of both scorers); it lives here, beside the script, so nothing in benchmarks/ imports tests/.
The data is read from ``$POPULORA_DATA`` only (`make test` and `make bench` set it to
``../shared/benchmarks`` when that folder exists); `missing_data()` says what is missing.

Candidates are generated here from the data (reference solutions, mutants, base-only lookup tables,
float-tolerance variants, printing and looping programs) for a seeded subset of HumanEval+ and MBPP+
tasks. Both scorers judge each one; base and plus verdicts must agree on >= 99.5% of them and every
disagreement must be on the allow-list below, each entry a row of docs/benchmarks.md "Differences from
official evalplus" table.

Official side, offline: `evalplus.data` reads the local files through `HUMANEVAL_OVERRIDE_PATH` /
`MBPP_OVERRIDE_PATH`; expected outputs come from `evalplus.gen.util.trusted_exec` exactly as
`evalplus.evaluate.get_groundtruth` calls it, and each candidate runs through
`evalplus.eval.untrusted_check` as `evalplus.evaluate.check_correctness` calls it (base, then plus,
fast check). `evalplus.evaluate` itself is not imported: its module imports the code-generation
stack (`datasets`, `tree_sitter`, `openai`...), none of which the evaluation path uses. `make setup`
installs evalplus with `--no-deps` plus the three small modules its data loader needs.
"""

from __future__ import annotations

import ast
import importlib
import multiprocessing
import os
import random
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from populora_nb.evaluation import evalplus_scoring as bs
from populora_nb.evaluation.benchmarks import benchmark_verifier
from populora_nb.evaluation.loaders import load_benchmark

DATA = Path(os.environ.get("POPULORA_DATA") or "POPULORA_DATA-is-not-set")
"""The benchmark folder ($POPULORA_DATA); unset, a relative name that exists nowhere, so `missing_data` says so."""
FILES = {
    "humanevalplus": DATA / "humanevalplus" / "HumanEvalPlus.jsonl.gz",
    "mbppplus": DATA / "mbppplus" / "MbppPlus.jsonl",
}
OFFICIAL_DATASET = {"humanevalplus": "humaneval", "mbppplus": "mbpp"}
TASKS_PER_SET = 30
SEED = 21
MAX_INPUT_CHARS = 200_000
"""Tasks whose inputs are longer than this as text are left out of the draw (time, not semantics)."""
LOOPING_PER_SET = 3
MIN_AGREEMENT = 0.995
GT_TIME_LIMIT_FACTOR = 20.0
"""Per-input limits of max(1 s, factor x the ground truth's time), on both sides. Verdicts are compared
here, not speed: at evalplus' default factor of 4, a ground-truth time measured once flipped the
official plus verdict of HumanEval/100's reference when a parallel test worker kept the machine busy.
The looping candidates still stop at the 1 s floor (their tasks' ground truths take < 0.05 s)."""
ALWAYS = ("HumanEval/32", "HumanEval/100", "HumanEval/160", "Mbpp/93", "Mbpp/124", "Mbpp/252", "Mbpp/309")
"""Drawn every time: the tasks where the two scorers used to differ (issue 21: special oracle, huge
outputs, banned `eval`, sticky float tolerance, complex inputs with signed zeros)."""
IMPORTS = "import numpy as np\nimport collections, heapq, itertools, functools, re, math, bisect, string\n"

ALLOWED = {
    "HumanEval/160": "its reference calls `eval`, banned by the sandbox's static policy (docs/benchmarks.md)",
    "HumanEval/32": (
        "`find_zero`: the project checks the root residual; evalplus 0.3.1's check fails even the reference"
    ),
}
"""Tasks where a disagreement is expected, with the docs/benchmarks.md row that explains it."""


def missing_data() -> str:
    """Why the cross-check cannot run here ("" when it can): $POPULORA_DATA unset, or a file missing."""
    if not os.environ.get("POPULORA_DATA"):
        return (
            "set POPULORA_DATA to the benchmark folder (make test / make bench set it when ../shared/benchmarks exists)"
        )
    absent = [str(f) for f in FILES.values() if not f.is_file()]
    return f"no HumanEval+ / MBPP+ file at {', '.join(absent)} ($POPULORA_DATA)" if absent else ""


# ---------------------------------------------------------------- official evalplus, offline
def official_modules():
    """(evalplus.eval, trusted_exec, {benchmark: {task_id: problem}}) read from the local files
    (ImportError without evalplus)."""
    os.environ["HUMANEVAL_OVERRIDE_PATH"] = str(FILES["humanevalplus"])
    os.environ["MBPP_OVERRIDE_PATH"] = str(FILES["mbppplus"])
    if "evalplus.data" not in sys.modules:
        # evalplus/data/__init__.py imports `datasets` for EvalPerf only; register the package without
        # running it so its humaneval/mbpp loaders import on their own.
        import evalplus

        package = types.ModuleType("evalplus.data")
        package.__path__ = [str(Path(evalplus.__file__).parent / "data")]
        sys.modules["evalplus.data"] = package
    humaneval = importlib.import_module("evalplus.data.humaneval")
    mbpp = importlib.import_module("evalplus.data.mbpp")
    assert humaneval.HUMANEVAL_OVERRIDE_PATH == str(FILES["humanevalplus"]), (
        "evalplus.data was imported before the override"
    )
    from evalplus import eval as official
    from evalplus.gen.util import trusted_exec

    return official, trusted_exec, {"humanevalplus": humaneval.get_human_eval_plus(), "mbppplus": mbpp.get_mbpp_plus()}


def official_ground_truth(trusted_exec, problem: dict, not_none: bool) -> dict:
    """evalplus/evaluate.py `get_groundtruth` for one task."""
    code = problem["prompt"] + problem["canonical_solution"]
    oracle = {}
    for key in ("base", "plus"):
        try:
            oracle[key], oracle[f"{key}_time"] = trusted_exec(
                code, problem[f"{key}_input"], problem["entry_point"], record_time=True, output_not_none=not_none
            )
        except MemoryError:  # Mbpp/255's reference on its plus inputs; evalplus itself would stop here
            oracle[key], oracle[f"{key}_time"] = (
                [None] * len(problem[f"{key}_input"]),
                [0.0] * len(problem[f"{key}_input"]),
            )
    return oracle


def official_check(official, dataset: str, problem: dict, solution: str, expected: dict) -> tuple[bool, bool]:
    """evalplus/evaluate.py `check_correctness` (fast check, base and plus): (base passed, plus passed)."""
    verdict = {}
    for key in ("base", "plus"):
        status, _ = official.untrusted_check(
            dataset,
            solution,
            problem[f"{key}_input"],
            problem["entry_point"],
            expected=expected[key],
            atol=problem["atol"],
            ref_time=expected[f"{key}_time"],
            fast_check=True,
            gt_time_limit_factor=GT_TIME_LIMIT_FACTOR,
        )
        verdict[key] = status == official.PASS
    return verdict["base"], verdict["base"] and verdict["plus"]


def _official_job(job: tuple) -> tuple:
    """One unit of work in a pool process, forked after `score_both` set `_OFFICIAL`."""
    kind, args = job
    official, trusted_exec, _ = _OFFICIAL
    if kind == "truth":
        return official_ground_truth(trusted_exec, *args)
    return official_check(official, *args)


_OFFICIAL: tuple = ()


# ---------------------------------------------------------------- candidates
class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_FunctionDef(self, node):
        if node.name == self.old:
            node.name = self.new
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == self.old:
            node.id = self.new
        return node


def renamed(code: str, old: str, new: str) -> str:
    return ast.unparse(_Rename(old, new).visit(ast.parse(code)))


_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def mutant(code: str, how: str) -> str | None:
    """The first comparison swapped (< for <=, == for !=) or the first int constant plus one, in source order."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if how == "swapped_comparison" and isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAP:
            node.ops[0] = _SWAP[type(node.ops[0])]()
            return ast.unparse(tree)
        if how == "off_by_one" and isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return ast.unparse(tree)
    return None


def _walk(x):
    yield x
    if isinstance(x, (list, tuple, set, frozenset)):
        for v in x:
            yield from _walk(v)
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _walk(k)
            yield from _walk(v)


NUDGE = """
def _nudge(x, by):
    if type(x) is float:
        return x + by * (1 + abs(x))
    if type(x) in (list, tuple):
        return type(x)(_nudge(v, by) for v in x)
    return x
"""


def candidates(problem: dict, expected: dict, imports: bool) -> list[tuple[str, str]]:
    """(kind, program) for one official problem dict; `imports`: add the reference behind numpy and
    common stdlib imports."""
    entry = problem["entry_point"]
    reference = problem["prompt"] + problem["canonical_solution"]
    ref = renamed(reference, entry, "_ref")

    def wrap(body: str, extra: str = "") -> str:
        return f"{ref}\n{extra}\ndef {entry}(*args):\n{body}\n"

    out = [
        ("reference", reference),
        ("wrong_none", wrap("    return None")),
        ("stateful", wrap("    _CALLS.append(1)\n    return None if len(_CALLS) == 3 else _ref(*args)", "_CALLS = []")),
    ]
    if imports:
        out.append(("imports", IMPORTS + reference))
    for how in ("swapped_comparison", "off_by_one"):
        code = mutant(reference, how)
        if code is not None:
            out.append((how, code))
    out.append(
        (
            "prints",
            "print('module level')\n"
            + wrap("    print('called with', len(args), 'arguments')\n    return _ref(*args)"),
        )
    )
    base = problem["base_input"]
    if not any(isinstance(v, (set, frozenset)) for inp in base for v in _walk(inp)):  # set repr order varies
        keys = {repr(tuple(inp)) for inp in base}
        out.append(("base_lookup", wrap("    assert repr(args) in _BASE\n    return _ref(*args)", f"_BASE = {keys!r}")))
    values = [v for o in expected["base"] for v in _walk(o)]
    if any(type(v) is float for v in values):
        out.append(("float_close", wrap("    return _nudge(_ref(*args), 1e-9)", NUDGE)))
        out.append(("float_far", wrap("    return _nudge(_ref(*args), 1e-3)", NUDGE)))
    elif expected["base"] and all(type(o) is int and abs(o) < 2**53 for o in expected["base"]):
        out.append(
            ("ints_as_floats", wrap("    out = _ref(*args)\n    return float(out) if type(out) is int else out"))
        )
    return out


def looping(problem: dict) -> tuple[str, str]:
    """Loops forever on the first base input, is the reference elsewhere."""
    ref = renamed(problem["prompt"] + problem["canonical_solution"], problem["entry_point"], "_ref")
    key = repr(tuple(problem["base_input"][0]))
    return (
        "loops",
        f"{ref}\ndef {problem['entry_point']}(*args):\n    while repr(args) == {key!r}:\n"
        f"        pass\n    return _ref(*args)\n",
    )


# ---------------------------------------------------------------- both scorers
def draw(problems: list, rng: random.Random, n: int) -> list:
    small = [p for p in problems if sum(map(len, p.base_inputs + p.plus_inputs)) <= MAX_INPUT_CHARS]
    order = {p.id: i for i, p in enumerate(problems)}
    fixed = [p for p in problems if p.id in ALWAYS][:n]
    drawn = rng.sample([p for p in small if p.id not in ALWAYS], n - len(fixed))
    return sorted(fixed + drawn, key=lambda p: order[p.id])


@dataclass
class CrossCheck:
    rows: list
    """(benchmark, project Problem, kind, program) per candidate."""
    mine: list
    """The project's (base passed, plus passed, status) per candidate."""
    theirs: list
    """Official evalplus's (base passed, plus passed) per candidate."""
    seconds: dict
    """Wall seconds: project/ground_truth, project/score, evalplus/ground_truth, evalplus/score."""


def score_both(
    tasks_per_set: int = TASKS_PER_SET, seed: int = SEED, workers: int = 2, programs_with_imports_every: int = 3
) -> CrossCheck:
    """Draw tasks, make the candidates, score them with official evalplus (a pool of `workers`
    processes, as `evalplus.evaluate --parallel`) and with the project (a sandbox of `workers`)."""
    global _OFFICIAL
    _OFFICIAL = official_modules()
    official_problems = _OFFICIAL[2]
    rng = random.Random(seed)
    ours = {name: draw(load_benchmark(name, DATA), rng, tasks_per_set) for name in FILES}
    chosen = [(name, p) for name in FILES for p in ours[name]]
    seconds = {}

    # fork: the workers inherit `_OFFICIAL` (evalplus's data) instead of loading it again
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        started = time.perf_counter()
        truth_jobs = [
            (
                "truth",
                (official_problems[name][p.id], name == "mbppplus" and p.entry_point in bs.MBPP_OUTPUT_NOT_NONE_TASKS),
            )
            for name, p in chosen
        ]
        expected = dict(zip((p.id for _, p in chosen), pool.map(_official_job, truth_jobs)))
        seconds["evalplus/ground_truth"] = time.perf_counter() - started
        rows = []
        for name in FILES:
            loops_left = LOOPING_PER_SET
            for j, p in enumerate(ours[name]):
                problem = official_problems[name][p.id]
                imports = j % programs_with_imports_every == 0
                rows += [(name, p, kind, program) for kind, program in candidates(problem, expected[p.id], imports)]
                if loops_left and expected[p.id]["base_time"] and max(expected[p.id]["base_time"]) < 0.05:
                    rows.append((name, p, *looping(problem)))
                    loops_left -= 1
        started = time.perf_counter()
        check_jobs = [
            ("check", (OFFICIAL_DATASET[name], official_problems[name][p.id], program, expected[p.id]))
            for name, p, _, program in rows
        ]
        theirs = list(pool.map(_official_job, check_jobs, chunksize=4))
        seconds["evalplus/score"] = time.perf_counter() - started

    with benchmark_verifier(workers=workers) as verifier:
        started = time.perf_counter()
        problems = [p for _, p in chosen]
        truths = dict(zip((p.id for p in problems), bs.evalplus_ground_truth(problems, verifier)))
        seconds["project/ground_truth"] = time.perf_counter() - started
        started = time.perf_counter()
        mine = bs.score_evalplus(
            [p for _, p, _, _ in rows],
            [""] * len(rows),
            [truths[p.id] for _, p, _, _ in rows],
            verifier,
            gt_time_limit_factor=GT_TIME_LIMIT_FACTOR,
            programs=[program for _, _, _, program in rows],
        )
        seconds["project/score"] = time.perf_counter() - started
    # An official verdict that differs is checked once more, alone: a per-input time limit hit while a
    # parallel test worker kept the machine busy (HumanEval/100's plus inputs) is not a semantic difference,
    # and a real one repeats (the verdicts are deterministic).
    for i, (name, p, _, program) in enumerate(rows):
        if tuple(mine[i][:2]) != tuple(theirs[i]):
            job = (OFFICIAL_DATASET[name], official_problems[name][p.id], program, expected[p.id])
            theirs[i] = _official_job(("check", job))
    return CrossCheck(rows, mine, theirs, seconds)
