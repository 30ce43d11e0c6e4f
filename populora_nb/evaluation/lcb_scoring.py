"""LiveCodeBench scoring (lcb_runner/evaluation/testing_util.py) in the project's sandbox.

stdin programs are compared line by line after stripping, with a Decimal fallback; functional tests
call ``Solution().<func>`` (the module once, each test in turn), a tuple result counts as a list;
6 s per test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from populora_nb.evaluation.evalplus_scoring import run_shimmed
from populora_nb.evaluation.loaders import Problem
from populora_nb.evaluation.output_shim import decode_output, shim
from populora_nb.evaluation.programs import extract_code, sanitize
from populora_nb.verify import RunResult, Verifier
from populora_nb.verify.literals import argument_text

LCB_TIMEOUT_S = 6.0


LCB_MODULES = tuple(
    "string re datetime collections heapq bisect copy math random statistics itertools functools operator json".split()
)
"""Modules lcb_runner imports before a solution runs: star-imported (with typing) and by name (with sys)."""
LCB_PREAMBLE = (
    "".join(f"from {m} import *\n" for m in (*LCB_MODULES, "typing"))
    + "".join(f"import {m}\n" for m in (*LCB_MODULES, "sys"))
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


def score_lcb(problems: Sequence[Problem], completions: Sequence[str], verifier: Verifier) -> list[tuple[bool, str]]:
    """(passed every test, status) per completion, each test under `LCB_TIMEOUT_S`; problems without tests raise."""
    timeout_s = LCB_TIMEOUT_S
    verdicts: list[list[str]] = [[] for _ in problems]  # per problem, per test: "pass" or why not
    scripts, script_owner, calls, call_owner = [], [], [], []
    for i, (p, c) in enumerate(zip(problems, completions)):
        if not p.tests:
            raise ValueError(f"{p.id} has no tests (prompt-only LiveCodeBench record); filter with has_tests")
        code = extract_code(c, "")
        if code is None:
            verdicts[i] = ["no_code"]
        elif p.tests[0].testtype == "stdin":
            for t in p.tests:
                scripts.append((LCB_PREAMBLE + code, t.input))
                script_owner.append((i, t.output))
        else:
            code = sanitize(code)
            has_solution_class = re.search(r"^class\s+Solution\b", code, re.MULTILINE)
            call = f"Solution().{p.entry_point}" if has_solution_class else p.entry_point
            try:
                # one JSON value per line -> an argument list as literal text
                args = tuple(argument_text([json.loads(line) for line in t.input.split("\n")]) for t in p.tests)
            except (ValueError, json.JSONDecodeError):
                raise ValueError(f"{p.id}: functional test input is not JSON lines") from None
            calls.append((LCB_PREAMBLE + code, shim(call), args, [timeout_s] * len(args)))
            call_owner.append(i)
    for (i, expected), r in zip(script_owner, verifier.run_script_many(scripts, timeout_s=timeout_s)):
        ok = r.status == "ok" and r.seconds <= timeout_s and lcb_lines_match(r.stdout, expected)
        verdicts[i].append("pass" if ok else (r.status if r.status != "ok" else "wrong"))
    for i, res in zip(call_owner, run_shimmed(verifier, calls)):
        verdicts[i] = [_lcb_functional_verdict(r, t.output, timeout_s) for r, t in zip(res, problems[i].tests)]
    first_failures = [next((s for s in v if s != "pass"), "pass") for v in verdicts]
    return [(status == "pass", status) for status in first_failures]


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
