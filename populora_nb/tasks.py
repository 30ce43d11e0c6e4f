"""Tasks: the verifiable Python problems that teachers propose and students solve (AZR §3).

Three kinds, after Absolute Zero's reasoning modes:
  code_o  deduction:  given program and input, predict the output;
  code_i  abduction:  given program and output, find an input;
  code_f  induction:  given a message and shown I/O pairs, write the program; hidden pairs judge it.

Inputs are argument lists written as Python literal text (``"[1, 2], 'a'"`` means ``f([1, 2], 'a')``);
outputs are the canonical ``repr`` of ``f(*args)`` as the sandbox returned it. Both are data:
they are only ever read back with ``ast.literal_eval``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TaskKind = Literal["code_o", "code_i", "code_f"]
TASK_KINDS: tuple[TaskKind, ...] = ("code_o", "code_i", "code_f")


@dataclass(frozen=True)
class Task:
    """A validated task: the program ran deterministically on every input in the sandbox."""

    kind: TaskKind
    program: str
    """Source defining ``f`` (helper functions and allowed imports may precede it)."""
    inputs: tuple[str, ...]
    """Argument lists as literal text, one per I/O pair."""
    outputs: tuple[str, ...]
    """Canonical repr of ``f(*args)`` for each input, as returned by the sandbox."""
    message: str = ""
    """code_f only: the proposer's hint to the solver."""
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    """Provenance (proposer id, step, ...); never shown to a model, not part of equality."""

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"Task.kind must be one of {TASK_KINDS}, got {self.kind!r}")
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ValueError("Task needs one output per input and at least one pair")

    @property
    def n_shown(self) -> int:
        """code_f shows the first half of the pairs to the solver and hides the rest (AZR)."""
        return len(self.inputs) // 2 if self.kind == "code_f" else len(self.inputs)

    @property
    def shown_pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.inputs[: self.n_shown], self.outputs[: self.n_shown]))

    @property
    def hidden_pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.inputs[self.n_shown :], self.outputs[self.n_shown :]))


@dataclass(frozen=True)
class Proposal:
    """What a teacher wrote, parsed but untrusted: the verifier turns it into a Task or an Invalid."""

    kind: TaskKind
    program: str
    inputs: tuple[str, ...]
    message: str = ""
