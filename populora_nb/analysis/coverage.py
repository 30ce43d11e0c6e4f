"""Problem-space coverage of what a run's proposers wrote, compared at equal sample sizes
(PopuLoRA §5: the population "covers more of the problem space" than the single agent).

What counts as a distinct problem (our definition; the paper gives none), per proposal:
  shapes       the normalised AST shape of a written program (``ast_shape``): the tree with every
               name the program binds renamed by first occurrence (``v0``, ``v1`` ...) and every
               constant replaced by its type; free names (builtins, imported modules), attribute and
               keyword names, and operators kept. Two programs share a shape iff they differ only in
               their own names and constant values.
  ngrams       node-type n-grams of a written program: every chain of 1..``NGRAM_N`` node types
               along a parent-child path (e.g. ``('For', 'If', 'Return')``).
  signatures   per-pair I/O type signatures such as ``(list[int], str) -> int``.
  program_signatures  the same signatures, of the written programs only: one unit per program,
               as for ngrams, so the two are read at the same n.
Only what a proposer wrote counts (``populora_nb.analysis.complexity``'s docstring says why): shapes,
ngrams and program_signatures come from valid code_o/code_i programs; signatures from those and
from valid code_f tasks, whose inputs the proposer wrote for a buffer program.

Size. n-gram coverage grows with program size: a longer program holds more distinct chains, so a
run writing longer programs covers more n-grams at the same n even when it poses no other problems.
program_signatures does not: a program's I/O type signature is the same however long
its code, so two runs whose programs differ only in length score the same (a test). Its ceiling is
low (there are few types), which is why it sits beside the n-grams rather than replacing them. AZR
tracks the same axis in its buffers (`DatasetManager.count_element`: distinct input and output
types). `compare_at_common_n` reads several kinds at ONE n.

Why rarefaction. A raw cumulative count of distinct features grows with the number of proposals
alone: a population of 4 teachers proposes 4x what one agent does and would "cover more" even if
every teacher drew from the agent's own distribution. So coverage is a rarefaction curve: for each
sample size n, the distinct count among n of the run's valid proposals drawn at random without
replacement, averaged over ``n_resamples`` random orders (a seeded ``numpy.random.Generator``).
Two runs compare at the same n, the largest both reach (``compare_at_equal_n``); one teacher and
the single agent compare the same way. The band is the ``band`` percentiles (5th-95th by default)
of the count across the random orders: how much n randomly chosen proposals of this run vary. It
is not a confidence interval on the run itself (one run is one draw of training), and at n = all
of a run's proposals it has zero width.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

NGRAM_N = 3
"""Longest node-type chain counted as a coverage feature."""
COVERAGE_KINDS: tuple[str, ...] = ("shapes", "ngrams", "signatures")
"""The kinds the coverage figures draw (``complexity_plots.COVERAGE_LABELS`` names each)."""
SAMPLE_UNITS: Mapping[str, str] = {
    "shapes": "written programs (code_o/code_i)",
    "ngrams": "written programs (code_o/code_i)",
    "signatures": "valid proposals (code_f inputs included)",
    "program_signatures": "written programs (code_o/code_i)",
}
"""What one draw of a rarefaction curve is, per kind (every kind `coverage_units` knows): its x axis."""


# ----------------------------------------------------------------------------- features
def identifier(node: ast.AST) -> str | None:
    """The program-chosen identifier a node carries (variable, parameter, def/class/except name)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)):
        return node.name  # None for a bare ``except:``
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name  # ``case [x, *rest]`` captures; None for the wildcard ``_``
    return node.rest if isinstance(node, ast.MatchMapping) else None


def literal_type(value: object, max_depth: int = 3) -> str:
    """Type of a literal value as a short string: ``list[int | str]``, ``dict[str, list[int]]``.
    Containers nested deeper than ``max_depth`` are named bare, so signatures stay bounded."""
    if value is None:
        return "None"
    if isinstance(value, (list, tuple, set, dict)) and value and max_depth > 0:
        if isinstance(value, dict):
            keys = " | ".join(sorted({literal_type(k, max_depth - 1) for k in value}))
            vals = " | ".join(sorted({literal_type(v, max_depth - 1) for v in value.values()}))
            return f"dict[{keys}, {vals}]"
        elems = " | ".join(sorted({literal_type(v, max_depth - 1) for v in value}))
        return f"tuple[{elems}, ...]" if isinstance(value, tuple) else f"{type(value).__name__}[{elems}]"
    return type(value).__name__


def io_signature(input_text: str, output_text: str) -> str:
    """``(list[int], str) -> int`` for one pair; ``?`` for a side that is not a Python literal.
    ``literal_eval`` only builds data: it never calls, imports or looks anything up."""
    try:
        args = ast.literal_eval("(" + input_text + ",)") if input_text.strip() else ()
        left = "(" + ", ".join(literal_type(a) for a in args) + ")" if isinstance(args, tuple) else "?"
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        left = "?"
    try:
        right = literal_type(ast.literal_eval(output_text))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        right = "?"
    return f"{left} -> {right}"


def ast_shape(tree: ast.AST) -> str:
    """A digest of the normalised tree (module docstring): equal iff same shape up to renaming."""
    binders = (n for n in ast.walk(tree) if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)))
    bound = {identifier(n) for n in binders} - {None}
    canon: dict[str, str] = {}
    out: list[str] = []
    stack: list[ast.AST | str] = [tree]
    while stack:  # iterative pre-order serialisation: deep programs must not hit the recursion limit
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        name = identifier(item)
        if name is not None and name in bound:
            name = canon.setdefault(name, f"v{len(canon)}")
        elif isinstance(item, ast.Constant):
            name = type(item.value).__name__
        elif isinstance(item, (ast.Attribute, ast.keyword, ast.alias)):
            name = getattr(item, "attr", None) or getattr(item, "arg", None) or getattr(item, "name", None)
        out.append(f"({type(item).__name__}:{name}")
        stack.append(")")
        stack.extend(reversed([c for c in ast.iter_child_nodes(item) if not isinstance(c, ast.expr_context)]))
    return hashlib.sha1(" ".join(out).encode()).hexdigest()[:16]


def ngram_features(tree: ast.AST, n: int = NGRAM_N) -> frozenset[tuple[str, ...]]:
    """Every chain of 1..n node types along a parent-child path (``Load``/``Store`` skipped)."""
    features: set[tuple[str, ...]] = set()
    stack: list[tuple[ast.AST, tuple[str, ...]]] = [(tree, ())]
    while stack:
        node, ancestors = stack.pop()
        path = (ancestors + (type(node).__name__,))[-n:]
        features.update(path[i:] for i in range(len(path)))
        stack.extend((c, path) for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context))
    return frozenset(features)


# ----------------------------------------------------------------------------- what a proposer wrote
def valid_tasks(tasks: pd.DataFrame, proposer: str | None = None) -> pd.DataFrame:
    """The valid rows of one run's tasks frame (`populora_nb.analysis.frames`), in record order;
    ``proposer`` keeps one teacher's."""
    keep = tasks["valid"].astype(bool)
    return tasks[keep if proposer is None else keep & (tasks["proposer"] == proposer)]


def new_tasks(tasks: pd.DataFrame, proposer: str | None = None) -> pd.DataFrame:
    """The valid rows whose copy class is "new" (`populora_nb.copies`): what the proposers newly wrote,
    programs and code_f input sets alike."""
    valid = valid_tasks(tasks, proposer)
    return valid[valid["copy"] == "new"]


def measured(tasks: pd.DataFrame, proposer: str | None = None) -> pd.DataFrame:
    """The ``measured`` rows: valid code_o/code_i programs the proposers newly wrote."""
    valid = valid_tasks(tasks, proposer)
    return valid[valid["measured"].astype(bool)]


def proposers(tasks: pd.DataFrame) -> tuple[str, ...]:
    """Every proposer with a newly written program or code_f input set, sorted."""
    return tuple(sorted(set(new_tasks(tasks)["proposer"])))


# ----------------------------------------------------------------------------- rarefaction
def coverage_units(tasks: pd.DataFrame, kind: str, proposer: str | None = None) -> list[frozenset[Hashable]]:
    """One feature set per sampling unit of ``kind`` (``SAMPLE_UNITS``) of one run's tasks frame: a
    measured program's shape, n-grams or I/O signatures, or a new valid proposal's I/O signatures
    (the programs first, then the code_f inputs); ``proposer`` keeps one teacher's units only."""
    if kind not in SAMPLE_UNITS:
        raise ValueError(f"kind must be one of {tuple(SAMPLE_UNITS)}, got {kind!r}")
    programs = measured(tasks, proposer)
    if kind == "shapes":  # an unparsed program has no shape but is still a draw
        return [frozenset() if pd.isna(shape) else frozenset((shape,)) for shape in programs["shape"]]
    if kind == "ngrams":
        return [frozenset(n) for n in programs["ngrams"]]
    if kind == "program_signatures":  # one signature per I/O pair: code_o/code_i have one pair
        return [frozenset(s) for s in programs["signatures"]]
    new = new_tasks(tasks, proposer)
    inputs = new[~new["written"].astype(bool)]
    return [frozenset(s) for s in (*programs["signatures"], *inputs["signatures"])]


@dataclass(frozen=True)
class CoverageAt:
    """A rarefaction curve read at one sample size: mean distinct count and its band."""

    n: int
    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Rarefaction:
    """Distinct features against the number of units drawn: index n covers draws of n units."""

    n: np.ndarray  # (N+1,) sample sizes 0..N
    mean: np.ndarray  # (N+1,) mean distinct count over the random orders
    lo: np.ndarray  # (N+1,) band[0] percentile over the random orders
    hi: np.ndarray  # (N+1,) band[1] percentile
    band: tuple[float, float]
    n_resamples: int

    @property
    def size(self) -> int:
        """N: every unit the run has of this kind."""
        return len(self.n) - 1

    def at(self, n: int) -> CoverageAt:
        """The mean distinct count and its band among ``n`` units drawn."""
        if not 0 <= n <= self.size:
            raise ValueError(f"n must be in [0, {self.size}] (this run's units), got {n}")
        return CoverageAt(n, float(self.mean[n]), float(self.lo[n]), float(self.hi[n]))


def rarefy(
    units: Sequence[frozenset[Hashable]],
    rng: np.random.Generator,
    n_resamples: int = 200,
    band: tuple[float, float] = (5.0, 95.0),
) -> Rarefaction:
    """The rarefaction curve of ``units`` (module docstring). Each random order counts, for every n,
    the features first seen among its first n units; the curve is their mean and ``band``
    percentiles. Every order's count is non-decreasing in n, so the mean and percentiles are too."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    size = len(units)
    vocab: dict[Hashable, int] = {}
    pairs = [(u, vocab.setdefault(f, len(vocab))) for u, features in enumerate(units) for f in features]
    counts = np.zeros((n_resamples, size + 1), dtype=np.int64)  # (R, N+1)
    if pairs:
        unit, feature = np.array(pairs, dtype=np.int64).T  # (P,), (P,): unit u holds feature f
        order = np.argsort(feature, kind="stable")
        unit, feature = unit[order], feature[order]
        starts = np.flatnonzero(np.r_[True, feature[1:] != feature[:-1]])  # (F,) first pair of each feature
        batch = max(1, 4_000_000 // len(pairs))  # bound the (R, P) position matrix to ~32 MB
        for r0 in range(0, n_resamples, batch):
            rows = min(batch, n_resamples - r0)
            # position[r, u]: when unit u is drawn in order r (a uniformly random permutation)
            position = rng.permuted(np.broadcast_to(np.arange(size), (rows, size)), axis=1)
            first = np.minimum.reduceat(position[:, unit], starts, axis=1)  # (rows, F) first draw of each feature
            seen = np.bincount((first + size * np.arange(rows)[:, None]).ravel(), minlength=rows * size)
            counts[r0 : r0 + rows, 1:] = seen.reshape(rows, size).cumsum(axis=1)
    lo, hi = np.percentile(counts, band, axis=0)
    return Rarefaction(
        n=np.arange(size + 1), mean=counts.mean(axis=0), lo=lo, hi=hi, band=band, n_resamples=n_resamples
    )


def rarefaction_curves(
    runs: Mapping[str, pd.DataFrame], kind: str, rng: np.random.Generator, n_resamples: int = 200
) -> dict[str, Rarefaction]:
    """One rarefaction curve of ``kind`` per run's tasks frame, e.g. ``{"baseline": ..., "population": ...}``."""
    return {name: rarefy(coverage_units(tasks, kind), rng, n_resamples) for name, tasks in runs.items()}


def per_proposer_curves(
    tasks: pd.DataFrame, kind: str, rng: np.random.Generator, n_resamples: int = 200
) -> dict[str, Rarefaction]:
    """One rarefaction curve of ``kind`` per proposer (teacher) of one run, over its own proposals."""
    return {n: rarefy(coverage_units(tasks, kind, proposer=n), rng, n_resamples) for n in proposers(tasks)}


@dataclass(frozen=True)
class CoverageComparison:
    """Runs read at the largest sample size they all reach (the smallest run's unit count)."""

    n: int
    at: Mapping[str, CoverageAt]

    @property
    def leader(self) -> str | None:
        """The run whose band lies wholly above every other's, or None when bands overlap."""
        above = (n for n, v in self.at.items() if all(v.lo > w.hi for o, w in self.at.items() if o != n))
        return next(above, None)

    def summary(self) -> str:
        """One line: each run's distinct count and band at the common n, and who covers more."""
        values = "; ".join(f"{name} {v.mean:.1f} [{v.lo:.0f}, {v.hi:.0f}]" for name, v in self.at.items())
        verdict = f"{self.leader} covers more" if self.leader else "bands overlap: no difference at this n"
        return f"at n = {self.n}: {values}; {verdict}"


def compare_at_equal_n(curves: Mapping[str, Rarefaction], n: int | None = None) -> CoverageComparison:
    """Read every curve at n = the smallest run's size, the largest n they all reach (or at a given
    ``n`` no larger). There the smallest run's value is exact (all its units; a zero-width band) and
    the others' bands say how much n of their units vary: a difference outside them is not the
    larger run's extra volume."""
    if not curves:
        raise ValueError("no curves to compare")
    largest = min(c.size for c in curves.values())
    n = largest if n is None else n
    if not 0 <= n <= largest:
        raise ValueError(f"n must be in [0, {largest}] (the smallest run's units), got {n}")
    return CoverageComparison(n=n, at={name: c.at(n) for name, c in curves.items()})


def compare_at_common_n(
    runs: Mapping[str, pd.DataFrame], kinds: Sequence[str], rng: np.random.Generator, n_resamples: int = 200
) -> dict[str, CoverageComparison]:
    """Each kind's runs compared at ONE n shared by every kind: the smallest unit count over the
    runs and kinds. Kinds with the same units (ngrams and program_signatures: written programs)
    reach the same n anyway, so the size-insensitive measure is read where the n-grams are."""
    curves = {kind: rarefaction_curves(runs, kind, rng, n_resamples) for kind in kinds}
    n = min((c.size for per_run in curves.values() for c in per_run.values()), default=0)
    return {kind: compare_at_equal_n(per_run, n) for kind, per_run in curves.items()}
