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
(``RunAnalysis.copy_series``) and left out of complexity and coverage, which would otherwise fall
because copying rises (``analyse_tasks(..., written="all")`` measures every one).

Programs are untrusted text. They are only ever parsed (``ast.parse``, radon, ``ast.literal_eval``
for I/O literals), never executed. A program that does not parse gets NaN metrics and is counted.

Per-program metrics (``ProgramMetrics``), each over one valid code_o/code_i task's program:
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

A step's solve rate is the mean ``solve_rate`` of its valid proposer tasks (all kinds).
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
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from radon.complexity import ComplexityVisitor
from radon.raw import analyze as radon_raw

from populora_nb.analysis.coverage import ast_shape, identifier, io_signature, ngram_features

COMPLEXITY_FIELDS: tuple[str, ...] = ("ast_depth", "cc_total", "sloc", "n_variables")
"""The four metrics the paper plots; the collapse detector trends these."""
_TAGS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


@dataclass(frozen=True)
class TaskRecord:
    """One line of a run's ``tasks.jsonl``: a proposed task, valid or not."""

    step: int
    proposer: str
    kind: str
    program: str
    valid: bool
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    """Empty when the task is invalid."""
    message: str = ""
    reason: str | None = None
    solver: str | None = None
    solve_rate: float | None = None
    """Fraction of the matched solver's rollouts that passed; None when invalid or unsolved."""
    copy: str | None = None
    """A valid task's copy class (`populora_nb.copies`): "new", "reference", "earlier", or "copy" for
    runs recorded before the loop classed them (reference and earlier not told apart); None if invalid."""
    repeat: bool | None = None
    """A valid task with the same program and input as a task met before (`copies.repeat_rows`)."""


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


@dataclass(frozen=True)
class CopyMark:
    """One valid task's copy class (`populora_nb.copies`), for the copy-rate series."""

    step: int
    proposer: str
    kind: str
    copy: str
    repeat: bool = False
    """The same program and input as a task met before (`populora_nb.copies`)."""


@dataclass(frozen=True)
class ProgramMetrics:
    """Metrics of one written program: a valid code_o/code_i task's (NaN and ``shape=None`` when it
    did not parse)."""

    step: int
    proposer: str
    kind: str
    solve_rate: float
    parsed: bool
    ast_depth: float
    cc_max: float
    cc_total: float
    sloc: float
    n_variables: float
    n_chars: float
    io_profile: str
    shape: str | None
    ngrams: frozenset[tuple[str, ...]] = field(repr=False)
    signatures: frozenset[str] = field(repr=False)


def program_metrics(task: TaskRecord) -> ProgramMetrics:
    """All per-program metrics of one task record; never raises on a bad program."""
    signatures = [io_signature(i, o) for i, o in zip(task.inputs, task.outputs)]
    values: tuple[float, ...]
    try:
        tree = ast.parse(task.program)
        values = (ast_depth(tree), *cyclomatic_complexity(tree), radon_raw(task.program).sloc, variable_count(tree))
        shape, ngrams = ast_shape(tree), ngram_features(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # too deep counts as unparsed
        values, shape, ngrams = (math.nan,) * 5, None, frozenset()
    depth, cc_max, cc_total, sloc, n_variables = map(float, values)
    return ProgramMetrics(
        step=task.step,
        proposer=task.proposer,
        kind=task.kind,
        solve_rate=math.nan if task.solve_rate is None else task.solve_rate,
        parsed=shape is not None,
        ast_depth=depth,
        cc_max=cc_max,
        cc_total=cc_total,
        sloc=sloc,
        n_variables=n_variables,
        n_chars=float(len(task.program)),
        io_profile="; ".join(dict.fromkeys(signatures)),
        shape=shape,
        ngrams=ngrams,
        signatures=frozenset(signatures),
    )


WRITTEN_PROGRAM_KINDS: tuple[str, ...] = ("code_o", "code_i")
"""Kinds whose program the proposer wrote. A code_f proposer is handed a buffer program."""


@dataclass(frozen=True)
class InputMetrics:
    """What a valid code_f proposal adds: the type signatures of the I/O pairs its inputs make with
    the buffer program it was given, and its solve rate. Its program is not the proposer's."""

    step: int
    proposer: str
    solve_rate: float
    signatures: frozenset[str] = field(repr=False)


def input_metrics(task: TaskRecord) -> InputMetrics:
    """A code_f task's `InputMetrics`."""
    return InputMetrics(
        step=task.step,
        proposer=task.proposer,
        solve_rate=math.nan if task.solve_rate is None else task.solve_rate,
        signatures=frozenset(io_signature(i, o) for i, o in zip(task.inputs, task.outputs)),
    )


@dataclass(frozen=True)
class RunAnalysis:
    """What a run's proposers wrote (module docstring), plus the counts of what was left out."""

    programs: tuple[ProgramMetrics, ...]
    """Valid code_o/code_i tasks: the programs the proposers wrote."""
    inputs: tuple[InputMetrics, ...]
    """Valid code_f tasks: inputs written for a buffer program."""
    steps: tuple[int, ...]
    """Every step with a task record, valid or not, sorted."""
    n_tasks: int
    n_invalid: int
    n_unparseable: int
    """Written programs the host Python could not parse (metrics NaN)."""
    classes: tuple[CopyMark, ...] = ()
    """Every valid task's copy class, in record order (``programs`` / ``inputs`` may hold the new ones only)."""

    @property
    def n_copies(self) -> int:
        """Valid tasks that copied a shown reference, a seed, a warm-up example or an earlier program."""
        return sum(c.copy != "new" for c in self.classes)

    def copy_series(self, window: int = 1, proposer: str | None = None) -> StepSeries:
        """The copy rate over steps: per step, the share of valid tasks (pooled over ``window``
        steps) whose class is not "new"; the band is that share's binomial ±1 SE."""
        return _share_series([(c, c.copy != "new") for c in self.classes if proposer in (None, c.proposer)], window)

    def repeat_series(self, window: int = 1, proposer: str | None = None) -> StepSeries:
        """The repeat rate over steps: per step, the share of valid tasks (pooled over ``window`` steps)
        with the same program and input as a task met before; band: binomial ±1 SE."""
        return _share_series([(c, c.repeat) for c in self.classes if proposer in (None, c.proposer)], window)

    @property
    def proposers(self) -> tuple[str, ...]:
        """Every proposer with a written program or a code_f input set, sorted."""
        return tuple(sorted({p.proposer for p in self.programs} | {i.proposer for i in self.inputs}))

    def series(self, metric: str, window: int = 1, proposer: str | None = None) -> StepSeries:
        """``step_series`` of ``metric`` over the right tasks: ``solve_rate`` over every valid
        proposer task (code_f included: its inputs and difficulty are the proposer's), any other
        metric over the written programs only. ``proposer`` narrows it to one teacher."""
        items: tuple[ProgramMetrics | InputMetrics, ...] = (*self.programs, *self.inputs)
        items = items if metric == "solve_rate" else self.programs
        return step_series([t for t in items if proposer in (None, t.proposer)], metric, window=window)


def analyse_tasks(tasks: Sequence[TaskRecord], written: Literal["new", "all"] = "new") -> RunAnalysis:
    """Split the valid tasks into written programs and code_f inputs (every valid task is one). With
    ``written="new"`` (the default) copies are counted in ``classes`` (the copy rate) but left out of
    ``programs`` and ``inputs`` (module docstring). A task recorded without a class counts as new."""
    valid = [t for t in tasks if t.valid]
    mine = [t for t in valid if written == "all" or t.copy in (None, "new")]
    programs = tuple(program_metrics(t) for t in mine if t.kind in WRITTEN_PROGRAM_KINDS)
    return RunAnalysis(
        programs=programs,
        inputs=tuple(input_metrics(t) for t in mine if t.kind not in WRITTEN_PROGRAM_KINDS),
        steps=tuple(sorted({t.step for t in tasks})),
        n_tasks=len(tasks),
        n_invalid=sum(not t.valid for t in tasks),
        n_unparseable=sum(not p.parsed for p in programs),
        classes=tuple(CopyMark(t.step, t.proposer, t.kind, t.copy or "new", bool(t.repeat)) for t in valid),
    )


def _share_series(marks: Sequence[tuple[CopyMark, bool]], window: int) -> StepSeries:
    """Per step, the share of ``marks`` flagged (pooled over ``window`` steps) with a ±1 SE band."""

    def share(pooled: np.ndarray) -> tuple[float, float, float]:
        rate = float(pooled.mean())
        se = math.sqrt(rate * (1 - rate) / len(pooled))
        return rate, max(0.0, rate - se), min(1.0, rate + se)

    return _rolling(((c.step, float(flag)) for c, flag in marks), window, share)


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


def step_series(programs: Iterable[ProgramMetrics | InputMetrics], metric: str, window: int = 1) -> StepSeries:
    """Rolling summary of ``metric`` (a field, e.g. ``"sloc"``, ``"solve_rate"``) of the items
    given (``RunAnalysis.series`` picks them): at each step with data, pool the items of the last
    ``window`` steps (by step number) and give their mean and interquartile band (NaNs left out)."""
    if window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    items = ((p.step, float(getattr(p, metric))) for p in programs)
    return _rolling(items, window, lambda pooled: (pooled.mean(), *np.percentile(pooled, (25.0, 75.0))))


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
    analysis: RunAnalysis,
    solve_rate_threshold: float = 0.9,
    drop_threshold: float = 0.10,
    min_falling: int = 3,
    tail_fraction: float = 0.2,
    min_steps: int = 5,
    metrics: tuple[str, ...] = COMPLEXITY_FIELDS,
) -> CollapseReport:
    """Flag a run whose solve rate approaches 1 while the complexity of the programs its proposers
    wrote falls (module docstring)."""
    solve = analysis.series("solve_rate")
    changes = {m: _relative_change(analysis.series(m)) for m in metrics}
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
