"""Propose and solve prompts for the three task kinds, and parsers for what the model writes.

Every criterion of AZR's proposer and solver prompts (AZR §3.3, absolute_zero_reasoner/
data_construction/prompts.py) is stated in this package's own words (docs/methodology.md, "AZR's
proposer and solver criteria", maps each to its line). ``tasks.prompt_style``: ``azr`` (those
criteria) or ``short`` (two sentences: a 135M model loses the answer format under the full text).
``tasks.prompt_format``: ``r1`` (AZR's ``User: ... Assistant: <think>``, the answer in the last
``<answer>`` tag) or ``chat`` (the tokenizer's chat template). Parsers return a typed result or a
`ParseFailure` naming the reason; model text is never evaluated here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from populora_nb.errors import UserInputError
from populora_nb.tasks import Proposal, Task, TaskKind
from populora_nb.verify.static_policy import AZR_BANNED_MODULES

PromptFormat = Literal["chat", "r1"]
PromptStyle = Literal["azr", "short"]

R1_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively.\nUser: {prompt}\nAssistant: <think>"
)

_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*)\Z", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class ParseFailure:
    reason: str
    """no_answer_tag | no_python_block | no_input_block | no_output_block | no_message_block | empty"""


# ---- prompt text --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dialogue:
    """A question after worked examples. In the chat format each example is a (user, assistant)
    turn pair, which a small instruct model imitates far more reliably than examples inlined in one
    message; in the r1 format the examples are inlined before the question."""

    question: str
    shots: tuple[tuple[str, str], ...] = ()


PROPOSE_TRIPLET = (
    "Write a new Python puzzle: a ```python block defining a function f, then an ```input block with the "
    "arguments of one call as Python literals (e.g. [1, 2], 'a')."
)
"""The first line of a code_o / code_i proposer prompt, and the user turn of each reference shown
before it (the criteria follow only in the question, so K references do not repeat them K times)."""

SHORT_TRIPLET = PROPOSE_TRIPLET + " Use only the standard library; no randomness, time, files or printing."
"""The ``short`` style's whole code_o / code_i instruction; SmolLM2-135M writes valid tasks far more
often under it than under the full criteria (docs/methodology.md)."""

PROGRAM_RULES = (
    "- Name the entry function f; helper functions may be nested inside f, and classes defined before it.",
    "- f takes at least one argument and returns a value.",
    "- f is deterministic: the same arguments always give the same result.",
    "- Nothing random, no dates or clocks, no files, network or other input/output, no printing or "
    "logging, no state from outside the program.",
    "- It finishes within a few seconds.",
    "- Imports and class definitions come first, and the program ends with the return of f: anything "
    "after it is dropped.",
    # AZR rejects its list as substrings of the code; the verifier here rejects importing them (and
    # os, sys...), so the prompt states the rule that is applied.
    f"- Import only standard-library modules, and none of: {', '.join(sorted(AZR_BANNED_MODULES))}, os, sys.",
)
"""AZR's code requirements, shared by the code_o / code_i proposer and the code_f solver."""

_LITERALS = "several arguments are separated by commas, and strings go in quotes"

_PUZZLE = {
    # kind: (what the solver is shown and must do, what must be hard to deduce)
    "code_o": (
        "a solver will see f and your input and must deduce, without running it, what f returns",
        "the output from f and your input",
    ),
    "code_i": (
        "a solver will see f and what it returns for your input, and must find an input that gives that output",
        "an input that gives that output, from f and the output alone",
    ),
}

# A fixed worked example for code_f solvers (the buffers' seeds are single-input triplets).
CODE_F_EXAMPLE = Task(
    "code_f",
    "def f(a):\n    return a[::-1]",
    ("'abc'", "[1, 2]", "'xy'", "[3]"),
    ("'cba'", "[2, 1]", "'yx'", "[3]"),
    message="f reverses its argument",
)


def _triplet_answer(task: Task) -> str:
    return f"```python\n{task.program.strip()}\n```\n```input\n{task.inputs[0]}\n```"


def _propose_triplet(kind: TaskKind) -> str:
    task, hard = _PUZZLE[kind]
    rules = "\n".join(PROGRAM_RULES)
    return (
        f"{PROPOSE_TRIPLET}\n"
        f"It is a reasoning test: {task}. The puzzles shown earlier are references; yours must be new.\n\n"
        f"The program:\n{rules}\n"
        "- It needs long, multi-step reasoning: state tracked through several transformations of the data.\n\n"
        f"The input:\n- Exactly one call's arguments: {_LITERALS}.\n\n"
        "It is judged on:\n"
        "- Running: f runs without error on your input.\n"
        f"- Difficulty: deducing {hard} takes real work. Get it from algorithmic depth or intricate logic, e.g. "
        "a data structure (stack, queue, heap, tree, graph) or control flow such as recursion, dynamic "
        "programming, greedy choices, backtracking or divide and conquer.\n"
        "- Creativity: it differs clearly from the reference puzzles.\n\n"
        "Plan first: how your puzzle will be hard, and how it differs from the references. Then write the two blocks."
    )


def _propose_inputs(program: str, n_inputs: int) -> str:
    # The first "Write " is followed by the count (tests/scripted.py reads it from there).
    return (
        "Here is a Python function f; each input you give is passed to it as f(<input>):\n"
        f"```python\n{program}\n```\n"
        f"Write {n_inputs} different inputs for f, each in its own ```input block holding the arguments as "
        "Python literals (e.g. [1, 2], 'a'), then a ```message block.\n"
        "It is a reasoning test: a solver sees half of your inputs with the outputs f returns for them, and "
        "your message, and must deduce f; the other half checks the solver's answer.\n\n"
        "The inputs:\n"
        f"- All {n_inputs} are valid: f runs without error on each.\n"
        f"- In each, {_LITERALS}.\n"
        "- Coverage: together they exercise everything f does (each branch, the edge cases), enough to "
        "deduce f from the pairs.\n"
        "- Creativity: they differ clearly from one another and give varied outputs.\n\n"
        "The message:\n"
        "- A hint that helps the solver deduce f, in any form: a plain description of what f does, or a "
        "coding question.\n"
        "- It must not contain the code of f.\n\n"
        "Together the inputs and the message make a task that is challenging for the solver, yet solvable.\n"
        "Plan first: understand f, then choose inputs that cover it and make the task hard. Then give the "
        f"{n_inputs} ```input blocks and the ```message block."
    )


def propose_prompt(
    kind: TaskKind, references: Sequence[Task], n_inputs: int = 10, style: PromptStyle = "azr"
) -> Dialogue:
    """The teacher's instruction. code_o / code_i: a new program + input, after the K references
    shown as earlier answers; code_f: ``n_inputs`` inputs and a message for the first reference's program.

    ``style`` (``tasks.prompt_style``): "azr" states every criterion of AZR's prompts; "short" keeps
    the code_o / code_i instruction to two sentences (module docstring); code_f keeps the criteria."""
    if style not in ("azr", "short"):
        raise ValueError(f"prompt style {style!r}: use 'azr' or 'short'")
    if kind == "code_f":
        if not references:
            raise ValueError("a code_f proposal needs one existing program to write inputs for")
        return Dialogue(_propose_inputs(references[0].program.strip(), n_inputs))
    if style == "short":
        goal = "predict its output" if kind == "code_o" else "find an input that gives its output"
        question = f"{SHORT_TRIPLET} A solver will have to {goal}. Make it different from your earlier puzzles."
    else:
        question = _propose_triplet(kind)
    shown = SHORT_TRIPLET if style == "short" else PROPOSE_TRIPLET
    return Dialogue(question, tuple((shown, _triplet_answer(t)) for t in references))


class PromptTooLongError(UserInputError):
    """Even the shortest prompt of a kind exceeds the prompt budget (``model.max_seq_len`` minus the
    completion's ``sampling.*_max_new_tokens``); the message names both settings."""


def _too_long(what: str, tokens: int, budget: int, new_tokens: str) -> PromptTooLongError:
    return PromptTooLongError(
        f"{what} is {tokens} tokens, over the prompt budget of {budget} (model.max_seq_len minus "
        f"sampling.{new_tokens}); raise model.max_seq_len or lower sampling.{new_tokens}"
    )


def bounded_propose_prompt(
    kind: TaskKind,
    references: Sequence[Task],
    count: Callable[[Dialogue], int],
    budget: int,
    n_inputs: int = 10,
    style: PromptStyle = "azr",
) -> tuple[Dialogue, tuple[Task, ...]]:
    """`propose_prompt` that fits in ``budget`` tokens (``count``: a prompt's length once rendered and
    tokenised), and the references it shows. A rollout engine rejects a whole batch over one prompt of
    its ``max_model_len`` (vLLM), so prompts fit by construction: code_o / code_i drop their longest
    reference until it fits (none is truncated); code_f takes the first candidate that fits. Raises
    `PromptTooLongError` when even no reference (code_f: no candidate) fits."""
    if kind == "code_f":
        lengths = []
        for ref in references:
            prompt = propose_prompt(kind, [ref], n_inputs, style)
            lengths.append(count(prompt))
            if lengths[-1] <= budget:
                return prompt, (ref,)
        what = f"every code_f proposer prompt tried ({len(lengths)})"
        raise _too_long(what, min(lengths, default=0), budget, "propose_max_new_tokens")
    kept = list(references)
    while True:
        prompt = propose_prompt(kind, kept, n_inputs, style)
        tokens = count(prompt)
        if tokens <= budget:
            return prompt, tuple(kept)
        if not kept:
            raise _too_long(f"a {kind} proposer prompt without references", tokens, budget, "propose_max_new_tokens")
        kept.remove(max(kept, key=lambda t: len(_triplet_answer(t))))


def bounded_solve_prompt(
    task: Task, example: Task | None, count: Callable[[Dialogue], int], budget: int
) -> Dialogue | None:
    """`solve_prompt` within ``budget`` tokens: with the worked example when it fits, else without;
    None when the question alone does not fit (the task then goes unsolved this step, as veRL, which
    AZR runs on, drops an overlong prompt)."""
    if example is not None:
        prompt = solve_prompt(task, example)
        if count(prompt) <= budget:
            return prompt
    prompt = solve_prompt(task)
    return prompt if count(prompt) <= budget else None


def _solve_question(task: Task) -> str:
    program = task.program.strip()
    think = "Think it through step by step, then give"
    if task.kind == "code_o":
        return (
            f"```python\n{program}\n```\n```input\n{task.inputs[0]}\n```\n"
            f"What does f return for this input? {think} the output as a Python literal in an ```output block "
            "(strings in quotes, several returned values as one tuple)."
        )
    if task.kind == "code_i":
        return (
            f"```python\n{program}\n```\n```output\n{task.outputs[0]}\n```\n"
            f"Find arguments for f that give this output. {think} one such input in an ```input block: the "
            f"arguments as Python literals, where {_LITERALS}."
        )
    shown = "\n".join(f"f({i}) == {o}" for i, o in task.shown_pairs)
    rules = "\n".join(PROGRAM_RULES)
    return (
        f"Message: {task.message.strip()}\nExamples:\n{shown}\n"
        "Deduce the function f that produced these input/output pairs: hidden inputs check that it gives "
        f"the original outputs too. {think} f in a ```python block, which is what gets checked; try it on "
        f"each pair and revise it until all of them hold.\nThe program:\n{rules}\nName the function f."
    )


def _solve_answer(task: Task) -> str:
    if task.kind == "code_o":
        return f"```output\n{task.outputs[0]}\n```"
    if task.kind == "code_i":
        return f"```input\n{task.inputs[0]}\n```"
    return f"```python\n{task.program.strip()}\n```"


def solve_prompt(task: Task, example: Task | None = None) -> Dialogue:
    """The student's question for one validated task (code_f shows only the first half of the
    pairs), after one solved ``example`` of the same kind (none: zero-shot)."""
    if example is not None and example.kind != task.kind:
        raise ValueError(f"the worked example must be a {task.kind} task, got {example.kind}")
    shots = ((_solve_question(example), _solve_answer(example)),) if example is not None else ()
    return Dialogue(_solve_question(task), shots)


def render(prompt: str | Dialogue, tokenizer, fmt: PromptFormat) -> str:
    """Wrap an instruction in the chosen format; the result is fed to the model as-is."""
    d = prompt if isinstance(prompt, Dialogue) else Dialogue(prompt)
    if fmt == "r1":
        examples = "".join(f"Example:\n{u}\n<answer>{a}</answer>\n\n" for u, a in d.shots)
        return R1_TEMPLATE.format(prompt=examples + d.question)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("prompt_format=chat needs a tokenizer with a chat template; use tasks.prompt_format=r1")
    messages = []
    for user, assistant in d.shots:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": d.question})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


# ---- parsing --------------------------------------------------------------------------------
def _answer_region(text: str, fmt: PromptFormat) -> str | ParseFailure:
    if fmt != "r1":
        return text
    found = _ANSWER.findall(text)
    return found[-1] if found else ParseFailure("no_answer_tag")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every ``` fence, in order. A last fence left open (the completion hit
    max_new_tokens) still counts: its body may be complete, and the verifier judges it anyway."""
    blocks = [(lang.lower(), body.rstrip("\n")) for lang, body in _FENCE.findall(text)]
    tail = _FENCE.sub("", text)
    opened = _OPEN_FENCE.search(tail)
    if opened:
        blocks.append((opened.group(1).lower(), opened.group(2).rstrip("\n")))
    return blocks


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
    blocks = fenced_blocks(region)
    found = [body.strip() for lang, body in blocks if lang in want and body.strip()]
    if found:
        return found[-1]
    untagged = [body.strip() for lang, body in blocks if lang == "" and body.strip()]
    if untagged and kind != "code_f":
        return untagged[-1]  # a bare ``` fence: the model answered, only without the tag
    if fmt == "r1" and region.strip() and kind != "code_f":
        return region.strip()  # AZR accepts a bare literal inside <answer>
    return ParseFailure(f"no_{want[0]}_block")
