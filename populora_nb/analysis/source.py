"""The package's own code, shown in a notebook beside what it computed: a by-hand stage of notebooks
02 and 03 is followed by the lines of `populora_nb` that compute it, read from the installed source
when the cell runs (never copied into the notebook), so a reader who changes the package sees the
change there.

    source.show(rewards.teacher_reward, rewards.student_reward)

Each function is shown under its module and line numbers, without its docstring (``help(f)`` reads
it) and without its argument checks (``if ...: raise ...``), which guard the computation but are
not it; a comment marks where lines were left out.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.display import Markdown


@dataclass(frozen=True)
class Excerpt:
    """One function's source as `show` prints it."""

    name: str
    """Its dotted name, ``populora_nb.rewards.teacher_reward``."""
    path: str
    """Its file, relative to the directory that holds the package (``populora_nb/rewards.py``)."""
    first: int
    last: int
    """Its lines in that file, 1-based and inclusive."""
    code: str
    """The lines shown (dedented; docstring and opening argument checks left out)."""


def _is_check(node: ast.stmt) -> bool:
    """``if <condition>: raise ...`` with no else, or a loop of them: an argument check."""
    if isinstance(node, ast.If):
        return not node.orelse and all(isinstance(n, ast.Raise) for n in node.body)
    return isinstance(node, ast.For) and not node.orelse and all(_is_check(n) for n in node.body)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def excerpt(func: Callable[..., Any]) -> Excerpt:
    """``func``'s source without its docstring and argument checks (module docstring)."""
    func = inspect.unwrap(func)
    lines, first = inspect.getsourcelines(func)
    text = textwrap.dedent("".join(lines))
    node = ast.parse(text).body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise TypeError(f"source.show shows functions and methods, got {func!r}")
    kept = text.splitlines()
    # each run of left-out statements becomes one comment line; from the last run up, so the
    # line numbers of the runs above stay valid
    runs: list[list[ast.stmt]] = []
    for i, stmt in enumerate(node.body[:-1]):  # the last statement is never left out: something must remain
        if (i == 0 and _is_docstring(stmt)) or _is_check(stmt):
            if runs and runs[-1][-1] is node.body[i - 1]:
                runs[-1].append(stmt)
            else:
                runs.append([stmt])
    for run in reversed(runs):
        doc, checks = _is_docstring(run[0]), any(_is_check(n) for n in run)
        what = " and ".join(w for w, present in (("docstring", doc), ("argument checks", checks)) if present)
        start, end = run[0].lineno - 1, run[-1].end_lineno or run[-1].lineno
        kept[start:end] = [f"{' ' * run[0].col_offset}# ... {what} left out ..."]
    module = inspect.getmodule(func)
    name = module.__name__ if module else func.__module__
    file = Path(inspect.getsourcefile(func) or "?")
    # the folder that holds the top-level package: populora_nb/rewards.py, not an absolute path
    root = Path(module.__file__).parents[name.count(".")] if module and module.__file__ else file.parent
    path = file.relative_to(root).as_posix() if file.is_relative_to(root) else file.name
    return Excerpt(f"{name}.{func.__qualname__}", path, first, first + len(lines) - 1, "\n".join(kept))


def show(*funcs: Callable[..., Any]) -> Markdown:
    """The source of each of ``funcs`` (module docstring), as one Markdown output: a notebook cell
    that ends with ``source.show(...)`` displays it; ``print(source.show(...).data)`` in a terminal."""
    if not funcs:
        raise ValueError("source.show needs at least one function")
    parts = []
    for func in funcs:
        e = excerpt(func)
        parts.append(f"`{e.name}` · `{e.path}`, lines {e.first}–{e.last}\n\n```python\n{e.code}\n```")
    return Markdown("\n\n".join(parts))
