"""Code extraction (pure): the program a model's completion holds, cut and sanitized as evalplus'
sanitizer does (definitions, imports and assignments kept; example calls and prints dropped).
"""

from __future__ import annotations

import ast
import re
import warnings

from populora_nb.evaluation.loaders import Problem
from populora_nb.prompts import fenced_blocks


def _parse(code: str) -> ast.Module | None:
    """The module's AST, or None if it does not parse (model code: warnings about it are noise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
"""What evalplus' sanitizer keeps: definitions and imports; example calls and prints go."""


def sanitize(code: str) -> str:
    """Top-level definitions, imports and assignments only (unparseable code is returned as is)."""
    tree = _parse(code)
    if tree is None:
        return code
    return ast.unparse(ast.Module(body=[n for n in tree.body if isinstance(n, _KEPT)], type_ignores=[]))


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
