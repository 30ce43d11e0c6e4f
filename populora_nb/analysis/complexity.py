"""Task complexity over what each proposer wrote, and the collapse detector (PopuLoRA §5, Fig. 4).

The paper's central picture: the single AZR agent's programs get shallower, simpler, shorter and
use fewer variables while its solve rate nears 100% (collapse); a population's keep growing while
its solve rates oscillate (arms race). Coverage of the problem space is in `populora_nb.analysis.coverage`.

What is measured: only what a proposer WROTE, as Fig. 4 tracks the programs the proposer writes:
  code_o, code_i   the program (and its I/O pair) is the proposer's: every metric below.
  code_f           the program is a buffer program handed to the proposer (``stages.propose``), who
                   wrote only the inputs and the message. Its program is NOT measured (it would pull
                   every run toward the buffer's mean, early on the seed); its I/O type signatures
                   feed signature coverage, and its solve rate the per-step solve rate.
And only what it NEWLY wrote: a proposal that copies a shown reference, a seed, a warm-up example or
an earlier program (its ``copy`` class, ``populora_nb.copies``) is counted in the copy rate
(``copy_series``) and left out of complexity and coverage, which would otherwise fall because
copying rises. Everything here reads a run's tasks frame (`populora_nb.analysis.frames`), whose
``written`` and ``measured`` columns say which rows these are and whose metric columns
``program_metrics`` fills once per written program.

Programs are untrusted text. They are only ever parsed (``ast.parse``, radon, ``ast.literal_eval``
for I/O literals), never executed. A program that does not parse gets NaN metrics and is counted.

Per-program metrics (``program_metrics``), each over one valid code_o/code_i task's program:
  ast_depth    edges on the longest path from the ``Module`` root to a leaf, not counting the tag
               nodes that only label their parent (``Load``/``Store``, ``Add``, ``And``, ``Eq`` ...).
               ``def f(a): return a`` has depth 3 (Module > FunctionDef > Return > Name).
  cc_max/total radon's McCabe complexity over every function, method and nested function; the
               largest and the sum. Radon does not fold a closure into its parent, so the sum does.
               A program with no ``def`` (``f = lambda ...``) gets its module-level complexity.
  sloc         radon's raw source lines of code (no blanks, comments or docstring-only lines).
  n_variables  distinct identifiers bound as variables: assignment/loop/``with``/comprehension
               targets (``Name`` in ``Store`` context), function parameters, ``except ... as``
               names and ``match`` captures; not function, class or import names.
  n_chars      program length in characters.
  io_profile   the type signature of each I/O pair, e.g. ``(list[int], str) -> int``; unique
               signatures joined with ``"; "``. A text that is not a literal types as ``?``.
Coverage features (``shape``, ``ngrams``, ``signatures``) and their counting at equal sample
sizes are defined in `populora_nb.analysis.coverage`.

A step's solve rate is the mean ρ of its valid new proposer tasks (all kinds).
Collapse detector (``detect_collapse``): a run collapses when its solve rate over the last
``tail_fraction`` of steps averages at least ``solve_rate_threshold`` (0.9: "approaches 1") *and*
at least ``min_falling`` of the four complexity metrics (ast_depth, cc_total, sloc, n_variables)
of its written programs fall by ``drop_threshold`` (10%) or more over the run. "Fall" is measured
on the per-step means: the least-squares line's level at the last step against its level at the
first, relative to the larger of the two (``_relative_change``, in [-1, 1]). 3 of 4 tolerates one
metric already at its floor (cc_total stays 1 once every program is a one-liner).
"""

from __future__ import annotations

import ast
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from radon.complexity import ComplexityVisitor
from radon.raw import analyze as radon_raw

from populora_nb.analysis.coverage import (
    ast_shape,
    identifier,
    io_signature,
    measured,
    new_tasks,
    ngram_features,
    valid_tasks,
)

COMPLEXITY_FIELDS: tuple[str, ...] = ("ast_depth", "cc_total", "sloc", "n_variables")
"""The four metrics the paper plots; the collapse detector trends these."""
_TAGS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


# ----------------------------------------------------------------------------- per-program metrics
def ast_depth(tree: ast.AST) -> int:
    """Longest root-to-leaf path in edges, tag nodes excluded (iterative: programs are untrusted)."""
    best, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        best = max(best, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if not isinstance(child, _TAGS))
    return best


def cyclomatic_complexity(tree: ast.Module) -> tuple[int, int]:
    """(max, total) radon complexity over all functions, methods and closures of a parsed module."""
    visitor = ComplexityVisitor.from_ast(tree)
    functions, work, classes = [], list(visitor.functions), list(visitor.classes)
    while classes:  # radon's .blocks skips methods of nested classes and closures; walk them all
        cls = classes.pop()
        work.extend(cls.methods)
        classes.extend(cls.inner_classes)
    while work:
        fn = work.pop()
        functions.append(fn.complexity)
        work.extend(fn.closures)
    if not functions:
        return visitor.complexity, visitor.complexity
    return max(functions), sum(functions)


_BINDERS = (ast.arg, ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)


def variable_count(tree: ast.AST) -> int:
    """Distinct names bound as variables: stored ``Name``s, parameters, ``except ... as`` names
    and ``match`` captures."""
    stored = (n for n in ast.walk(tree) if isinstance(n, _BINDERS) or isinstance(getattr(n, "ctx", None), ast.Store))
    return len({identifier(n) for n in stored} - {None})


WRITTEN_PROGRAM_KINDS: tuple[str, ...] = ("code_o", "code_i")
"""Kinds whose program the proposer wrote. A code_f proposer is handed a buffer program."""


def program_metrics(program: str, inputs: Sequence[str] = (), outputs: Sequence[str] = ()) -> dict[str, Any]:
    """Every per-program metric and coverage feature of one written program and its I/O pairs, as the
    tasks frame's columns (`frames.COMPLEXITY_COLUMNS`, ``shape``, ``ngrams``, ``signatures``): NaN and
    ``shape=None`` for a program that did not parse; never raises on a bad program."""
    signatures = [io_signature(i, o) for i, o in zip(inputs, outputs)]
    values: tuple[float, ...]
    try:
        tree = ast.parse(program)
        values = (ast_depth(tree), *cyclomatic_complexity(tree), radon_raw(program).sloc, variable_count(tree))
        shape, ngrams = ast_shape(tree), ngram_features(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # too deep counts as unparsed
        values, shape, ngrams = (math.nan,) * 5, None, frozenset()
    return {
        "parsed": shape is not None,
        **dict(zip(("ast_depth", "cc_max", "cc_total", "sloc", "n_variables"), map(float, values))),
        "n_chars": float(len(program)),
        "io_profile": "; ".join(dict.fromkeys(signatures)),
        "shape": shape,
        "ngrams": ngrams,
        "signatures": frozenset(signatures),
    }


# ----------------------------------------------------------------------------- series over a run's tasks frame
def step_series(tasks: pd.DataFrame, metric: str, window: int = 1, proposer: str | None = None) -> StepSeries:
    """Rolling summary of ``metric`` (a column, e.g. ``"sloc"``, or ``"solve_rate"``: ρ) over one run's
    tasks frame: ``solve_rate`` over every valid new proposal (code_f included: its inputs and
    difficulty are the proposer's), any other metric over the ``measured`` programs (written and new).
    At each step with data, pool the values of the last ``window`` steps (by step number) and give
    their mean and interquartile band (NaNs left out). ``proposer`` narrows it to one teacher."""
    if window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    if metric == "solve_rate":  # the written programs first, then the code_f inputs (a fixed pooling order)
        rows, column = new_tasks(tasks, proposer).sort_values("written", ascending=False, kind="stable"), "rho"
    else:
        rows, column = measured(tasks, proposer), metric
    items = zip(rows["step"].tolist(), rows[column].astype(float).tolist())
    return _rolling(items, window, lambda pooled: (pooled.mean(), *np.percentile(pooled, (25.0, 75.0))))


def copy_series(tasks: pd.DataFrame, window: int = 1, proposer: str | None = None) -> StepSeries:
    """The copy rate over steps: per step, the share of valid tasks (pooled over ``window`` steps) whose
    class (`populora_nb.copies`) is not "new"; the band is that share's binomial ±1 SE."""
    valid = valid_tasks(tasks, proposer)
    return _share_series(valid["step"].tolist(), (valid["copy"] != "new").tolist(), window)


def repeat_series(tasks: pd.DataFrame, window: int = 1, proposer: str | None = None) -> StepSeries:
    """The repeat rate over steps: per step, the share of valid tasks (pooled over ``window`` steps)
    with the same program and input as a task met before; band: binomial ±1 SE."""
    valid = valid_tasks(tasks, proposer)
    return _share_series(valid["step"].tolist(), [bool(r) for r in valid["repeat"]], window)


def _share_series(steps: Sequence[int], flags: Sequence[bool], window: int) -> StepSeries:
    """Per step, the share of ``flags`` set (pooled over ``window`` steps) with a ±1 SE band."""

    def share(pooled: np.ndarray) -> tuple[float, float, float]:
        rate = float(pooled.mean())
        se = math.sqrt(rate * (1 - rate) / len(pooled))
        return rate, max(0.0, rate - se), min(1.0, rate + se)

    return _rolling(zip(steps, map(float, flags)), window, share)


def _rolling(items: Iterable[tuple[int, float]], window: int, summary: Callable[[np.ndarray], tuple]) -> StepSeries:
    """At each step with values, ``summary`` (mean, lo, hi) of the (step, value) ``items`` of the last
    ``window`` steps; NaN values (unparsed, unsolved) are left out."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for step, value in items:
        if not math.isnan(value):
            by_step[step].append(value)
    steps = np.array(sorted(by_step), dtype=np.int64)
    pooled = [np.array([v for t in range(s - window + 1, s + 1) for v in by_step.get(int(t), ())]) for s in steps]
    table = np.array([(*summary(p), len(p)) for p in pooled], dtype=np.float64).reshape(-1, 4)
    return StepSeries(steps=steps, mean=table[:, 0], lo=table[:, 1], hi=table[:, 2], count=table[:, 3])


@dataclass(frozen=True)
class StepSeries:
    """A metric over steps: per step the mean, and a lower/upper band, of the pooled programs."""

    steps: np.ndarray  # (S,)
    mean: np.ndarray  # (S,)
    lo: np.ndarray  # (S,)
    hi: np.ndarray  # (S,)
    count: np.ndarray  # (S,) programs pooled at each step


# ----------------------------------------------------------------------------- collapse detector
@dataclass(frozen=True)
class CollapseReport:
    """The collapse detector's verdict on one run and the numbers behind it."""

    collapsed: bool
    solve_rate_end: float
    """Mean per-step solve rate over the last ``tail_fraction`` of steps (NaN without data)."""
    relative_change: Mapping[str, float]
    """Per metric: fitted change of its per-step mean from first to last step (``_relative_change``)."""
    n_falling: int
    reason: str


def _relative_change(series: StepSeries) -> float:
    """Least-squares line through the per-step means, from first to last step: (end - start) over
    the larger of the two, levels clipped at 0 (the metrics are non-negative). In [-1, 1];
    -0.5 means the trend halved, +0.5 that it doubled."""
    if len(series.steps) < 2:
        return 0.0
    x = series.steps.astype(np.float64)
    slope, intercept = np.polyfit(x, series.mean, deg=1)
    start, end = (max(0.0, float(slope * x[i] + intercept)) for i in (0, -1))
    return (end - start) / max(start, end) if max(start, end) > 0 else 0.0


def detect_collapse(
    tasks: pd.DataFrame,
    solve_rate_threshold: float = 0.9,
    drop_threshold: float = 0.10,
    min_falling: int = 3,
    tail_fraction: float = 0.2,
    min_steps: int = 5,
    metrics: tuple[str, ...] = COMPLEXITY_FIELDS,
) -> CollapseReport:
    """Flag a run (its tasks frame) whose solve rate approaches 1 while the complexity of the programs
    its proposers wrote falls (module docstring)."""
    solve = step_series(tasks, "solve_rate")
    changes = {m: _relative_change(step_series(tasks, m)) for m in metrics}
    n_falling = sum(change <= -drop_threshold for change in changes.values())
    if len(solve.steps) < min_steps:
        why = f"too few steps with solved tasks ({len(solve.steps)} < {min_steps})"
        return CollapseReport(False, math.nan, changes, n_falling, why)
    tail = max(1, math.ceil(tail_fraction * len(solve.steps)))
    solve_end = float(solve.mean[-tail:].mean())
    high = solve_end >= solve_rate_threshold
    falling = n_falling >= min_falling
    reason = (
        f"solve rate over the last {tail} steps {solve_end:.2f} "
        f"{'>=' if high else '<'} {solve_rate_threshold}; {n_falling}/{len(metrics)} "
        f"complexity metrics fell by >= {drop_threshold:.0%} (need {min_falling})"
    )
    return CollapseReport(high and falling, solve_end, changes, n_falling, reason)
