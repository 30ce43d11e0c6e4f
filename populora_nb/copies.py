"""What a proposer newly wrote: every valid proposal classed as a copy or as new.

The curriculum curves (complexity, coverage, valid rate) are read as what the teachers *write*, and
a small model copies (docs/methodology.md), so each valid proposal is classed, in proposal order, as

* ``"reference"``: its program is one of the reference programs its own prompt showed (code_o /
  code_i; a code_f prompt shows a program to write inputs for, and its inputs are never shown);
* ``"earlier"``: it repeats a seed task's, a warm-up example's, or an earlier valid proposal's of the
  same run (earlier steps, or earlier in the same step's proposal order);
* ``"new"``: neither.

A valid proposal is also a **repeat** when it is the same *task* (normalised program and input;
code_f: program and input set) as a seed, a warm-up example or an earlier valid proposal of the run.
A copied program with a new input is a new task; a repeat's solve rate measures memory, not
difficulty, so fresh-task ρ, the band share and teacher wins are also read over non-repeats
(`populora_nb.analysis.liveness`).

What is compared is what the proposer wrote (code_f: the inputs too), after ``ast.unparse``
normalisation, so formatting and comments do not make a copy new but a renamed variable does; a
program that does not parse is compared with whitespace collapsed. ``tasks.reject_copies =
"reference"`` makes a copy of a shown reference invalid, a departure from AZR no preset uses.

AZR keeps repeats: ``DatasetManager.add_input_batch`` / ``add_output_batch`` / ``add_problem_batch``
(absolute_zero_reasoner/trainer/ppo/azr_ray_trainer.py) ``extend`` the buffers with every valid
proposal without a duplicate check, and ``CodeIORewardManager._get_problem_generator_rewards_and_valid_programs``
(rewards/reward_managers.py) pays a repeat the same learnability reward 1 − acc as a new task; so does
``tasks.reject_repeats = False``, while ``True`` makes a repeat invalid (``repeat_of_earlier_task``).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
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


def normalise(program: str) -> str:
    """The program as ``ast.unparse`` writes it, or its whitespace-collapsed text if it does not parse."""
    try:
        return ast.unparse(ast.parse(program))
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(program.split())


def fingerprint(kind: str, program: str, inputs: Sequence[str] = ()) -> str:
    """A short digest of what a proposer of ``kind`` wrote: the normalised program, plus the inputs
    for code_f. Programs of code_o and code_i share one space (a code_o program copied into a code_i
    task is still a copy)."""
    written = normalise(program) + ("\0" + "\0".join(inputs) if kind == "code_f" else "")
    space = "f" if kind == "code_f" else "p"
    return space + hashlib.sha1(written.encode()).hexdigest()[:16]


def repeat_fingerprint(kind: str, program: str, inputs: Sequence[str]) -> str:
    """A short digest of a whole task: the normalised program and its inputs, whatever the kind
    (code_o and code_i share one space: a code_o task with the same program and input as a code_i
    one is the same triplet). Held in the run's ``seen`` set beside ``fingerprint``'s, prefixed "r"."""
    written = normalise(program) + "\0" + "\0".join(inputs)
    space = "rf" if kind == "code_f" else "rp"
    return space + hashlib.sha1(written.encode()).hexdigest()[:16]


def task_fingerprints(kind: str, program: str, inputs: Sequence[str]) -> set[str]:
    """Both fingerprints of one task: what the proposer wrote (copy classes) and the whole task (repeats)."""
    return {fingerprint(kind, program, inputs), repeat_fingerprint(kind, program, inputs)}


def known_fingerprints(tasks: Iterable[Task]) -> set[str]:
    """The fingerprints of tasks a run starts with (seeds, warm-up examples): both kinds."""
    return {fp for t in tasks for fp in task_fingerprints(t.kind, t.program, t.inputs)}


def warmup_fingerprints(directory: str | Path) -> set[str]:
    """The fingerprints of a warm-up directory's examples (`WARMUP_EXAMPLES`: the accepted
    proposals it fine-tuned on), so that writing one of them again is not counted as new."""
    path = Path(directory) / WARMUP_EXAMPLES
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {fp for r in rows for fp in task_fingerprints(r["kind"], r["program"], r.get("inputs", ()))}


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
    seen = {fp for s in load_seed_triplets(seeds_path) for fp in task_fingerprints("code_o", s["program"], s["inputs"])}
    if warmup and not Path(warmup).is_dir():  # records copied elsewhere: the experiment's own warm-up beside them
        warmup = str(Path(run_dir).parent / "warmup")
    return seen | (warmup_fingerprints(warmup) if warmup else set())


def classify(kind: str, program: str, inputs: Sequence[str], shown: Sequence[str], seen: set[str]) -> CopyClass:
    """The copy class of one valid proposal, given the programs its prompt showed and the run's fingerprints."""
    if kind != "code_f" and normalise(program) in {normalise(r) for r in shown}:
        return "reference"
    return "earlier" if fingerprint(kind, program, inputs) in seen else "new"


def is_repeat(kind: str, program: str, inputs: Sequence[str], seen: set[str]) -> bool:
    """The task (program and input) was met before in the run (module docstring)."""
    return repeat_fingerprint(kind, program, inputs) in seen


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
        repeat = is_repeat(p.kind, task.program, task.inputs, seen)
        seen.update(task_fingerprints(p.kind, task.program, task.inputs))
        verdict: Task | Invalid = task
        if reject == "reference" and cls == "reference":
            verdict = Invalid(COPY_OF_REFERENCE, "the program is one of the references its prompt showed")
        elif reject_repeats and repeat:
            verdict = Invalid(REPEAT_OF_EARLIER_TASK, "the same program and input as a task met before in the run")
        out.append(dataclasses.replace(p, result=verdict, copy=cls, repeat=repeat))
    return out


def copy_rate(classes: Sequence[str | None]) -> float | None:
    """Share of classed proposals that are copies (reference or earlier); None when none is classed."""
    classed = [c for c in classes if c is not None]
    return sum(c != "new" for c in classed) / len(classed) if classed else None


def repeat_rows(rows: Sequence[dict], start: Iterable[str] = ()) -> list[bool | None]:
    """Per tasks.jsonl row, whether the valid task repeats one met before, from the rows' order and
    ``start`` (the seeds' and warm-up examples' fingerprints); None for an invalid row."""
    seen = set(start)
    out: list[bool | None] = []
    for r in rows:
        if not r.get("valid"):
            out.append(None)
            continue
        fp = repeat_fingerprint(r["kind"], r["program"], r.get("inputs", ()))
        out.append(fp in seen)
        seen.add(fp)
    return out


def classify_rows(rows: Sequence[dict], start: Iterable[str] = ()) -> list[str | None]:
    """The copy class of each tasks.jsonl row: the recorded one, or for older records "copy" (reference
    or earlier: the references were not recorded) or "new", from the rows' order and ``start``."""
    seen = set(start)
    out: list[str | None] = []
    for r in rows:
        if not r.get("valid"):
            out.append(r.get("copy"))
            continue
        fp = fingerprint(r["kind"], r["program"], r.get("inputs", ()))
        out.append(r["copy"] if r.get("copy") else ("copy" if fp in seen else "new"))
        seen.add(fp)
    return out
