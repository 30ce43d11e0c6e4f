"""Propose and solve prompts for the three task kinds, and parsers for what the model writes.

Follows Absolute Zero (AZR §3.3 and its released prompts): a code_o / code_i proposer writes a
```` ```python ```` block defining ``f`` and an ```` ```input ```` block, shown K reference tasks;
a code_f proposer gets one existing program and writes several ```` ```input ```` blocks plus a
```` ```message ```` hint. Solvers answer in ```` ```output ````, ```` ```input ```` or
```` ```python ```` blocks.

Two prompt formats: ``r1``, AZR's ``User: ... Assistant: <think>`` with the answer inside the last
``<answer>...</answer>``; and ``chat``, the tokenizer's chat template (a 135M instruct model only
follows its own template). Parsers return a typed result or a `ParseFailure` naming the reason;
model text is never evaluated here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

from populora_nb.tasks import Task, TaskKind

PromptFormat = Literal["chat", "r1"]

R1_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively.\nUser: {prompt}\nAssistant: <think>"
)

_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*?)```", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class Proposal:
    """What a teacher wrote: untrusted text, to be validated by the verifier."""

    kind: TaskKind
    program: str
    inputs: tuple[str, ...]
    message: str = ""


@dataclass(frozen=True)
class ParseFailure:
    reason: str
    """no_answer_tag | no_python_block | no_input_block | no_output_block | no_message_block | empty"""


# ---- prompt text --------------------------------------------------------------------------------


def _show_task(task: Task, with_output: bool) -> str:
    text = f"```python\n{task.program.strip()}\n```\n```input\n{task.inputs[0]}\n```"
    if with_output:
        text += f"\n```output\n{task.outputs[0]}\n```"
    return text


def propose_prompt(kind: TaskKind, references: Sequence[Task], n_inputs: int = 10) -> str:
    """The teacher's instruction. code_o / code_i: new program + input after K references;
    code_f: ``n_inputs`` inputs and a message for the first reference's program."""
    if kind == "code_f":
        if not references:
            raise ValueError("a code_f proposal needs one existing program to write inputs for")
        program = references[0].program.strip()
        return (
            "Here is a Python function f:\n"
            f"```python\n{program}\n```\n"
            f"Write {n_inputs} different inputs for f, each in its own ```input block holding the arguments "
            "as Python literals (e.g. [1, 2], 'a'). Pick inputs that reveal what f does. Then write a "
            "```message block with a short hint that helps someone rewrite f from its input/output pairs."
        )
    goal = "predict its output" if kind == "code_o" else "find an input that gives a shown output"
    refs = "\n\n".join(_show_task(t, with_output=True) for t in references)
    return (
        f"You write Python puzzles: a function f and an input, so that a solver must {goal}.\n"
        f"Examples:\n{refs}\n\n"
        "Write a new puzzle, different from the examples: a ```python block defining f, then an ```input "
        "block with the arguments as Python literals. Use only the standard library; no randomness, time, files or printing."
    )


def solve_prompt(task: Task) -> str:
    """The student's question for one validated task (code_f shows only the first half of the pairs)."""
    program = task.program.strip()
    if task.kind == "code_o":
        return (
            f"```python\n{program}\n```\n```input\n{task.inputs[0]}\n```\n"
            "What does f return for this input? Answer with the output as a Python literal in an ```output block."
        )
    if task.kind == "code_i":
        return (
            f"```python\n{program}\n```\n```output\n{task.outputs[0]}\n```\n"
            "Find arguments for f that give this output. Answer with them as Python literals in an ```input block."
        )
    shown = "\n".join(f"f({i}) == {o}" for i, o in task.shown_pairs)
    return (
        f"Message: {task.message.strip()}\nExamples:\n{shown}\n"
        "Write the function f that satisfies these examples, in a ```python block."
    )


def render(prompt: str, tokenizer, fmt: PromptFormat) -> str:
    """Wrap an instruction in the chosen format; the result is fed to the model as-is."""
    if fmt == "r1":
        return R1_TEMPLATE.format(prompt=prompt)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("prompt_format=chat needs a tokenizer with a chat template; use tasks.prompt_format=r1")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


# ---- parsing --------------------------------------------------------------------------------


def _answer_region(text: str, fmt: PromptFormat) -> str | ParseFailure:
    if fmt == "r1":
        found = _ANSWER.findall(text)
        if not found:
            return ParseFailure("no_answer_tag")
        return found[-1]
    return text


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every closed ``` fence, in order."""
    return [(lang.lower(), body.rstrip("\n")) for lang, body in _FENCE.findall(text)]


def parse_proposal(text: str, kind: TaskKind, fmt: PromptFormat, program: str = "") -> Proposal | ParseFailure:
    """A teacher's completion → Proposal. For code_f, ``program`` is the given reference program."""
    region = _answer_region(text, fmt)
    if isinstance(region, ParseFailure):
        return region
    blocks = fenced_blocks(region)
    inputs = tuple(body.strip() for lang, body in blocks if lang == "input" and body.strip())
    if kind == "code_f":
        messages = [body.strip() for lang, body in blocks if lang == "message" and body.strip()]
        if not inputs:
            return ParseFailure("no_input_block")
        if not messages:
            return ParseFailure("no_message_block")
        return Proposal(kind, program, inputs, messages[0])
    programs = [body for lang, body in blocks if lang in ("python", "py") and body.strip()]
    if not programs:
        return ParseFailure("no_python_block")
    if not inputs:
        return ParseFailure("no_input_block")
    return Proposal(kind, programs[0], inputs[:1])


def parse_answer(text: str, kind: TaskKind, fmt: PromptFormat) -> str | ParseFailure:
    """A student's completion → the answer text (a literal for code_o/code_i, a program for code_f).
    The last matching block wins: models often restate the question's blocks before answering."""
    region = _answer_region(text, fmt)
    if isinstance(region, ParseFailure):
        return region
    want = {"code_o": ("output",), "code_i": ("input",), "code_f": ("python", "py")}[kind]
    found = [body.strip() for lang, body in fenced_blocks(region) if lang in want and body.strip()]
    if found:
        return found[-1]
    if fmt == "r1" and region.strip() and kind != "code_f":
        return region.strip()  # AZR accepts a bare literal inside <answer>
    return ParseFailure(f"no_{want[0]}_block" if want[0] != "py" else "no_python_block")
