"""What a proposer newly wrote: every valid proposal classed by its program, and flagged when it
repeats a task (docs/methodology.md, "New programs and repeats", gives the rules and why).

* **Program class** (``copy``): what the proposer *wrote* (code_o / code_i the program, code_f its
  input set) is ``"reference"`` (a program its prompt showed), ``"earlier"`` (a seed's, a warm-up
  example's or an earlier valid proposal's of the run) or ``"new"``.
* **Repeat**: the task as its student meets it (code_o program + input, code_i program + output,
  code_f program + shown pairs) was met before in the run.

Programs are compared after `normalise`: ``ast.unparse`` with every parameter and locally bound name
renamed ``$0``, ``$1``, ... in order of first binding, so formatting, comments and names do not make
a program new. AZR keeps repeats and pays them as new tasks (``tasks.reject_repeats = False``, the
default); ``tasks.reject_copies = "reference"`` and ``tasks.reject_repeats = True`` make a copy of a
shown reference or a repeat invalid instead.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from populora_nb.buffers import load_seed_triplets
from populora_nb.config import load_saved_config
from populora_nb.errors import UserInputError
from populora_nb.tasks import Task
from populora_nb.verify import Invalid

if TYPE_CHECKING:
    from populora_nb.stages import Proposed

CopyClass = Literal["new", "reference", "earlier"]
COPY_OF_REFERENCE = "copy_of_reference"
"""The Invalid reason of a shown reference's copy when ``tasks.reject_copies = "reference"``."""
REPEAT_OF_EARLIER_TASK = "repeat_of_earlier_task"
"""The Invalid reason of a repeat (module docstring) when ``tasks.reject_repeats`` is on."""
WARMUP_EXAMPLES = "examples.jsonl"
"""The file of a warm-up directory listing the proposals it fine-tuned on (`populora_nb.warmup` writes it)."""
KEY_MARK = ":"
"""Every fingerprint is ``space:digest``; a checkpoint's fingerprints without it were keyed before
names were normalised (`is_current_fingerprint`)."""


def _args(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    a = node.args
    extra = [x for x in (a.vararg, a.kwarg) if x is not None]
    return [x.arg for x in (*a.posonlyargs, *a.args, *extra[:1], *a.kwonlyargs, *extra[1:])]


def _body_bindings(node: ast.AST) -> Iterator[str]:
    """Names a function body binds, in the order a depth-first walk meets them, without entering
    nested functions (whose own names are bound in this scope); ``global``/``nonlocal`` names and
    imports are not local to it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            yield child.id
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child.name
            continue
        elif isinstance(child, ast.Lambda):
            continue
        elif isinstance(child, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and child.name:
            yield child.name
        yield from _body_bindings(child)


class _LocalNames(ast.NodeTransformer):
    """Renames each function's parameters and locally bound names ``$0``, ``$1``, ... in order of
    first binding (a ``$`` no source name can hold, so a renamed name never meets a kept one)."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, str]] = []
        self.count = 0

    def _lookup(self, name: str) -> str:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return name

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        skip = {n for c in ast.walk(node) if isinstance(c, (ast.Global, ast.Nonlocal)) for n in c.names}
        scope: dict[str, str] = {}
        for name in [*_args(node), *_body_bindings(node if not isinstance(node, ast.Lambda) else node.body)]:
            if name not in scope and name not in skip:
                scope[name] = f"${self.count}"
                self.count += 1
        self.scopes.append(scope)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> ast.AST:
        # Decorators and defaults are evaluated in the enclosing scope, the name is bound there.
        outer = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        if not isinstance(node, ast.Lambda):
            outer += node.decorator_list
            node.name = self._lookup(node.name) if self.scopes else node.name
        for expr in outer:
            self.visit(expr)
        self._enter(node)
        for arg in ast.walk(node.args):
            if isinstance(arg, ast.arg):
                arg.arg = self._lookup(arg.arg)
        if isinstance(node.body, list):
            node.body = [self.visit(s) for s in node.body]
        else:
            node.body = self.visit(node.body)  # a lambda's body is one expression
        self.scopes.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._lookup(node.id)
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            node.name = self._lookup(node.name)
        return self.generic_visit(node)


def normalise(program: str) -> str:
    """The program as ``ast.unparse`` writes it with local names renamed (module docstring), or its
    whitespace-collapsed text if it does not parse."""
    try:
        return ast.unparse(_LocalNames().visit(ast.parse(program)))
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(program.split())


def _key(space: str, *parts: str) -> str:
    return space + KEY_MARK + hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def fingerprint(kind: str, program: str, inputs: Sequence[str] = ()) -> str:
    """A short digest of what a proposer of ``kind`` wrote: the normalised program, plus the inputs
    for code_f. Programs of code_o and code_i share one space (a code_o program copied into a code_i
    task is still a copy)."""
    if kind == "code_f":
        return _key("written_f", normalise(program), *inputs)
    return _key("program", normalise(program))


def repeat_fingerprints(kind: str, program: str, inputs: Sequence[str], outputs: Sequence[str] | None) -> set[str]:
    """The digests of a task as its student meets it (module docstring): code_o (program, input),
    code_i (program, output), code_f (program, shown pairs). ``outputs=None`` (a warm-up example
    recorded without them) keys a code_i task by its input instead, which finds a later task with the
    same program and input (and so the same output); every code_i task carries that key too."""
    program = normalise(program)
    if kind == "code_f":
        shown = len(inputs) // 2  # `Task.n_shown`
        return {_key("task_f", program, *inputs[:shown], "\0", *(outputs or ())[:shown])}
    if kind == "code_o":
        return {_key("task_o", program, *inputs)}
    by_input = _key("task_i_input", program, *inputs)
    return {by_input} if outputs is None else {by_input, _key("task_i", program, *outputs)}


def is_current_fingerprint(key: str) -> bool:
    """Whether a stored fingerprint has today's form (`KEY_MARK`)."""
    return KEY_MARK in key


def task_fingerprints(kind: str, program: str, inputs: Sequence[str], outputs: Sequence[str] | None) -> set[str]:
    """Every fingerprint of one task met: what the proposer wrote (program class) and the task (repeats)."""
    return {fingerprint(kind, program, inputs)} | repeat_fingerprints(kind, program, inputs, outputs)


def seed_fingerprints(program: str, inputs: Sequence[str], outputs: Sequence[str] | None) -> set[str]:
    """A seed triplet can be met as a code_o or a code_i task: the fingerprints of both."""
    return task_fingerprints("code_o", program, inputs, outputs) | task_fingerprints("code_i", program, inputs, outputs)


def known_fingerprints(tasks: Iterable[Task]) -> set[str]:
    """The fingerprints of tasks a run starts with (seeds and buffer tasks), as code_o and code_i
    where they are triplets."""
    out: set[str] = set()
    for t in tasks:
        out |= task_fingerprints(t.kind, t.program, t.inputs, t.outputs)
        if t.kind != "code_f":
            out |= seed_fingerprints(t.program, t.inputs, t.outputs)
    return out


def warmup_fingerprints(directory: str | Path) -> set[str]:
    """The fingerprints of a warm-up directory's examples (`WARMUP_EXAMPLES`: the accepted
    proposals it fine-tuned on), so that writing one of them again is not counted as new."""
    path = Path(directory) / WARMUP_EXAMPLES
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        fp for r in rows for fp in task_fingerprints(r["kind"], r["program"], r.get("inputs", ()), r.get("outputs"))
    }


def start_fingerprints(run_dir: str | Path) -> set[str]:
    """What a recorded run had met before its first proposal: its seed tasks and, when it started
    from a warm-up, the warm-up's examples (``classify_rows`` and ``repeat_rows`` read records with
    it). A warm-up path that no longer exists (records copied from another machine) is looked for as
    ``warmup/`` beside the run, where an experiment directory keeps it."""
    try:
        config = load_saved_config(Path(run_dir) / "config.yaml")
        seeds_path, warmup = config.tasks.seeds_path, config.lora.warmup
    except (OSError, UserInputError):  # records without a config (a synthetic run): the packaged seeds
        seeds_path, warmup = None, None
    seen = {
        fp
        for s in load_seed_triplets(seeds_path)
        for fp in seed_fingerprints(s["program"], s["inputs"], s.get("outputs"))
    }
    if warmup and not Path(warmup).is_dir():  # records copied elsewhere: the experiment's own warm-up beside them
        warmup = str(Path(run_dir).parent / "warmup")
    return seen | (warmup_fingerprints(warmup) if warmup else set())


def classify(kind: str, program: str, inputs: Sequence[str], shown: Sequence[str], seen: set[str]) -> CopyClass:
    """The program class of one valid proposal, given the programs its prompt showed and the run's fingerprints."""
    if kind != "code_f" and normalise(program) in {normalise(r) for r in shown}:
        return "reference"
    return "earlier" if fingerprint(kind, program, inputs) in seen else "new"


def is_repeat(kind: str, program: str, inputs: Sequence[str], outputs: Sequence[str], seen: set[str]) -> bool:
    """The task as its student meets it was met before in the run (module docstring)."""
    return bool(repeat_fingerprints(kind, program, inputs, outputs) & seen)


def mark_copies(
    proposals: Sequence[Proposed], seen: set[str], reject: str = "none", reject_repeats: bool = False
) -> list[Proposed]:
    """The proposals with ``copy`` and ``repeat`` set on every valid one, in order; ``seen`` (the run's
    state) gains each valid task's fingerprints. With ``reject="reference"`` a copy of a shown reference
    becomes ``Invalid("copy_of_reference")``, with ``reject_repeats`` a repeat becomes
    ``Invalid("repeat_of_earlier_task")`` (class and repeat flag are still recorded)."""
    out = []
    for p in proposals:
        task = p.result
        if not isinstance(task, Task):
            out.append(p)
            continue
        cls = classify(p.kind, task.program, task.inputs, p.references, seen)
        repeat = is_repeat(p.kind, task.program, task.inputs, task.outputs, seen)
        seen.update(task_fingerprints(p.kind, task.program, task.inputs, task.outputs))
        verdict: Task | Invalid = task
        if reject == "reference" and cls == "reference":
            verdict = Invalid(COPY_OF_REFERENCE, "the program is one of the references its prompt showed")
        elif reject_repeats and repeat:
            verdict = Invalid(REPEAT_OF_EARLIER_TASK, "the same task as one met before in the run")
        out.append(dataclasses.replace(p, result=verdict, copy=cls, repeat=repeat))
    return out


def copy_rate(classes: Sequence[str | None]) -> float | None:
    """Share of classed proposals whose program is not new (reference or earlier); None when none is classed."""
    classed = [c for c in classes if c is not None]
    return sum(c != "new" for c in classed) / len(classed) if classed else None


def _met(row: dict) -> bool:
    """A row whose task the run met: valid, or rejected by a novelty rule after it was classed."""
    return bool(row.get("valid")) or row.get("copy") is not None


def repeat_rows(rows: Sequence[dict], start: Iterable[str] = ()) -> list[bool | None]:
    """Per tasks.jsonl row, whether the valid task repeats one met before, from the rows' order and
    ``start`` (the seeds' and warm-up examples' fingerprints); None for an invalid row."""
    seen = set(start)
    out: list[bool | None] = []
    for r in rows:
        keys = repeat_fingerprints(r["kind"], r["program"], r.get("inputs", ()), r.get("outputs", ()))
        out.append(bool(keys & seen) if r.get("valid") else None)
        if _met(r):
            seen |= keys
    return out


def classify_rows(rows: Sequence[dict], start: Iterable[str] = ()) -> list[str | None]:
    """The program class of each tasks.jsonl row, re-read with today's normalisation from the rows'
    order and ``start``: a recorded ``"reference"`` stays (the shown references were not recorded),
    every other valid row is ``"earlier"`` when its program was met before, else ``"new"``. Records
    written before names were normalised said "new" of a renamed copy; this reads them as it is now."""
    seen = set(start)
    out: list[str | None] = []
    for r in rows:
        fp = fingerprint(r["kind"], r["program"], r.get("inputs", ()))
        if not r.get("valid"):
            out.append(r.get("copy"))
        else:
            out.append("reference" if r.get("copy") == "reference" else ("earlier" if fp in seen else "new"))
        if _met(r):
            seen.add(fp)
    return out


def distinct_programs(rows: Sequence[dict]) -> int:
    """How many different programs (normalised, `fingerprint`) the valid rows hold, copies of seeds included."""
    return len({fingerprint(r["kind"], r["program"], r.get("inputs", ())) for r in rows if r.get("valid")})
