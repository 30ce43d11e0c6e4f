import pytest

from populora_nb.prompts import (
    CODE_F_EXAMPLE,
    PROPOSE_TRIPLET,
    SHORT_TRIPLET,
    ParseFailure,
    Proposal,
    parse_answer,
    parse_proposal,
    propose_prompt,
    render,
    solve_prompt,
)
from populora_nb.tasks import Task
from populora_nb.verify.static_policy import AZR_BANNED_MODULES

IDENTITY = Task("code_o", "def f(a):\n    return a", ("'Hello world'",), ("'Hello world'",))
CODE_F = Task("code_f", "def f(x):\n    return x * 2", ("1", "2", "3", "4"), ("2", "4", "6", "8"), message="doubles")


def test_code_o_proposal_parses_program_and_input():
    text = "Sure!\n```python\ndef f(x):\n    return x + 1\n```\n```input\n41\n```\nDone."
    p = parse_proposal(text, "code_o", "chat")
    assert p == Proposal("code_o", "def f(x):\n    return x + 1", ("41",))


@pytest.mark.parametrize(
    "text, reason",
    [
        ("no code here", "no_python_block"),
        ("```python\ndef f(a): return a\n```", "no_input_block"),
        ("```python\n\n```\n```input\n1\n```", "no_python_block"),
    ],
)
def test_proposal_parse_failures_are_named(text, reason):
    assert parse_proposal(text, "code_i", "chat") == ParseFailure(reason)


def test_r1_format_reads_only_the_last_answer_tag():
    text = (
        "thinking ```python\ndef f(a): return 0\n```</think>"
        "<answer>```python\ndef f(a):\n    return 1\n```\n```input\n5\n```</answer>"
    )
    assert parse_proposal(text, "code_o", "r1").program == "def f(a):\n    return 1"
    assert parse_proposal("no tags", "code_o", "r1") == ParseFailure("no_answer_tag")


def test_code_f_proposal_needs_inputs_and_message():
    text = "```input\n1\n```\n```input\n[2, 3]\n```\n```message\nadds one\n```"
    p = parse_proposal(text, "code_f", "chat", program=CODE_F.program)
    assert p.inputs == ("1", "[2, 3]") and p.message == "adds one" and p.program == CODE_F.program
    assert parse_proposal("```input\n1\n```", "code_f", "chat", program="x") == ParseFailure("no_message_block")


def test_answers_take_the_last_block_of_the_right_kind():
    assert parse_answer("```output\n1\n```\nactually\n```output\n2\n```", "code_o", "chat") == "2"
    assert parse_answer("```input\n'a', 3\n```", "code_i", "chat") == "'a', 3"
    assert parse_answer("```python\ndef f(x): return 2*x\n```", "code_f", "chat") == "def f(x): return 2*x"
    assert parse_answer("the answer is 2", "code_o", "chat") == ParseFailure("no_output_block")
    assert parse_answer("<answer>2</answer>", "code_o", "r1") == "2"


def test_prompts_show_what_each_kind_needs():
    d = propose_prompt("code_o", [IDENTITY])
    assert d.shots[0][1] == "```python\ndef f(a):\n    return a\n```\n```input\n'Hello world'\n```"
    assert "output" in d.question
    p = solve_prompt(IDENTITY).question
    assert IDENTITY.inputs[0] in p and "```output" in p
    q = solve_prompt(Task("code_i", IDENTITY.program, IDENTITY.inputs, IDENTITY.outputs)).question
    assert "```output\n'Hello world'" in q and "```input" in q
    r = solve_prompt(CODE_F).question
    assert "f(1) == 2" in r and "f(2) == 4" in r and "f(3)" not in r  # hidden half stays hidden
    with pytest.raises(ValueError):
        propose_prompt("code_f", [])


def test_solve_prompt_carries_one_worked_example():
    ex = Task("code_o", "def f(a):\n    return a * 2", ("4",), ("8",))
    d = solve_prompt(IDENTITY, example=ex)
    assert d.shots == ((solve_prompt(ex).question, "```output\n8\n```"),)
    with pytest.raises(ValueError):
        solve_prompt(IDENTITY, example=CODE_F)


def test_render_formats(tiny_base):
    chat = render("hi", tiny_base.tokenizer, "chat")
    assert "hi" in chat and chat.rstrip().endswith("assistant")
    assert render("hi", tiny_base.tokenizer, "r1").endswith("User: hi\nAssistant: <think>")
    d = solve_prompt(IDENTITY, example=Task("code_o", "def f(a):\n    return 0", ("1",), ("0",)))
    chat = render(d, tiny_base.tokenizer, "chat")
    # the worked example is a real assistant turn before the question
    assert chat.index("```output\n0\n```") < chat.index("'Hello world'")
    assert chat.count("<|im_start|>assistant") == 2
    r1 = render(d, tiny_base.tokenizer, "r1")
    assert "<answer>```output\n0\n```</answer>" in r1 and r1.endswith("<think>")


def test_unclosed_last_fence_and_bare_fence_still_parse():
    cut = "```python\ndef f(x):\n    return x\n```\n```input\n[1, 2"
    assert parse_proposal(cut, "code_o", "chat").inputs == ("[1, 2",)
    assert parse_answer("```\n42\n```", "code_o", "chat") == "42"


# ---------------------------------------------------------------- AZR's criteria (issue #28)
# Each criterion of AZR's released prompts (absolute_zero_reasoner/data_construction/prompts.py) and
# a phrase the package's prompt of that kind must contain; docs/methodology.md has the same table.

PROGRAM = {  # AZR's "Code Requirements", shared by the code_o / code_i proposers and the code_f solver
    "entry function named f, helpers nested": ["Name the entry function f", "nested inside f"],
    "custom classes allowed, defined at the top": ["classes defined before it"],
    "at least one parameter, returns a value": ["at least one argument and returns a value"],
    "deterministic": ["f is deterministic"],
    "no randomness, date/time, I/O, printing/logging, external state": [
        "Nothing random",
        "no dates or clocks",
        "no files, network or other input/output",
        "no printing or logging",
        "no state from outside the program",
    ],
    "finishes within the time limit": ["finishes within a few seconds"],
    "imports and classes first; ends with f's return": [
        "Imports and class definitions come first",
        "ends with the return of f",
    ],
    "banned modules": sorted(AZR_BANNED_MODULES),
}
TRIPLET = {  # AZR's code_o / code_i "gen" prompts
    **PROGRAM,
    "a new task, references as examples": ["yours must be new"],
    "a reasoning test for a test subject": ["It is a reasoning test"],
    "long multi-step reasoning, state tracked through transformations": [
        "multi-step reasoning",
        "several transformations",
    ],
    "exactly one test input": ["Exactly one call's arguments"],
    "arguments separated by commas, strings quoted": ["separated by commas", "strings go in quotes"],
    "format: a python block defining f, an input block": ["```python block defining a function f", "```input block"],
    "executability": ["f runs without error on your input"],
    "difficulty through algorithms or logic, with examples": [
        "Difficulty: deducing",
        "stack, queue, heap, tree, graph",
        "recursion, dynamic programming, greedy choices, backtracking or divide and conquer",
    ],
    "creativity: different from the references": ["differs clearly from the reference puzzles"],
    "plan first (challenge, distinctness), then write": [
        "Plan first: how your puzzle will be hard",
        "differs from the references",
    ],
}
CRITERIA = {
    "propose code_o": {**TRIPLET, "the solver deduces the output": ["deduce, without running it, what f returns"]},
    "propose code_i": {**TRIPLET, "the solver finds an input": ["must find an input that gives that output"]},
    "propose code_f": {  # AZR's code_f input-generation prompt
        "N inputs, diverse outputs": ["Write 10 different inputs for f", "varied outputs"],
        "each input plugged into f": ["passed to it as f(<input>)"],
        "a subset with outputs is shown; the solver deduces f": ["a solver sees half of your inputs", "must deduce f"],
        "every input valid (executability)": ["All 10 are valid: f runs without error on each"],
        "arguments separated by commas, strings quoted": ["separated by commas", "strings go in quotes"],
        "each input in its own input block": ["each in its own ```input block"],
        "a message, in a message block": ["a ```message block"],
        "the message helps deduce f, in any form": ["helps the solver deduce f", "in any form", "coding question"],
        "the message must not contain the code": ["must not contain the code of f"],
        "coverage of the input space": ["Coverage:", "everything f does"],
        "creativity: inputs differ from each other": ["differ clearly from one another"],
        "challenging but not impossible": ["challenging for the solver, yet solvable"],
        "plan first (understand, cover, challenge), then write": ["Plan first: understand f", "cover it"],
    },
    "solve code_o": {
        "deduce the output of the input": ["What does f return for this input?"],
        "think step by step": ["step by step"],
        "answer in an output block": ["in an ```output block"],
        "strings quoted, several values as a tuple": ["strings in quotes", "as one tuple"],
    },
    "solve code_i": {
        "one possible input that gives the output": ["Find arguments for f that give this output", "one such input"],
        "think step by step": ["step by step"],
        "answer in an input block": ["in an ```input block"],
        "arguments separated by commas, strings quoted": ["separated by commas", "strings go in quotes"],
    },
    "solve code_f": {
        **PROGRAM,
        "deduce a general f that also gives the hidden outputs": ["Deduce the function f", "hidden inputs check"],
        "think step by step": ["step by step"],
        "answer in a python block, which is evaluated": ["in a ```python block, which is what gets checked"],
        "test against each pair, revise until it works": ["try it on each pair and revise it"],
        "the message is shown": ["Message: doubles"],
        "name the function f": ["Name the function f."],
    },
}


def _dialogue(case: str):
    role, kind = case.split()
    if role == "propose":
        return propose_prompt(kind, [IDENTITY])  # type: ignore[arg-type]
    return solve_prompt(CODE_F if kind == "code_f" else Task(kind, IDENTITY.program, IDENTITY.inputs, IDENTITY.outputs))


@pytest.mark.parametrize("fmt", ["chat", "r1"])
@pytest.mark.parametrize("case", sorted(CRITERIA))
def test_every_azr_criterion_is_in_the_rendered_prompt_of_its_kind(case, fmt, tiny_base):
    rendered = render(_dialogue(case), tiny_base.tokenizer, fmt)
    missing = {c: p for c, phrases in CRITERIA[case].items() for p in phrases if p not in rendered}
    assert not missing, f"{case} ({fmt}) lacks: {missing}"


def test_criteria_are_stated_once_not_in_every_reference():
    d = propose_prompt("code_i", [IDENTITY, IDENTITY])
    assert [u for u, _ in d.shots] == [PROPOSE_TRIPLET, PROPOSE_TRIPLET] and "Plan first" not in PROPOSE_TRIPLET
    assert d.question.startswith(PROPOSE_TRIPLET)


def test_the_short_style_is_the_measured_two_sentences():
    """tasks.prompt_style = "short" (smoke, cpu): the code_o / code_i proposer prompt SmolLM2-135M was
    measured on; code_f and the solvers keep AZR's criteria (docs/methodology.md)."""
    d = propose_prompt("code_o", [IDENTITY], style="short")
    assert d.question.startswith(SHORT_TRIPLET) and "Plan first" not in d.question
    assert [u for u, _ in d.shots] == [SHORT_TRIPLET] and d.shots[0][1] == propose_prompt("code_o", [IDENTITY]).shots[
        0
    ][1]
    assert propose_prompt("code_f", [IDENTITY], style="short") == propose_prompt("code_f", [IDENTITY])
    with pytest.raises(ValueError, match="azr"):
        propose_prompt("code_o", [IDENTITY], style="long")  # type: ignore[arg-type]


def test_prompts_keep_the_markers_other_code_reads():
    """tests/scripted.py, test_compute and test_liveness tell prompts apart by these substrings."""
    for style in ("azr", "short"):
        for kind in ("code_o", "code_i"):
            assert "Write a new Python puzzle" in propose_prompt(kind, [IDENTITY], style=style).question  # type: ignore[arg-type]
    f = propose_prompt("code_f", [IDENTITY], n_inputs=7).question
    assert "different inputs for f" in f and f.split("Write ")[1].split()[0] == "7"  # the first "Write " gives n
    task_o = Task("code_o", "def f(x):\n    return x", ("12",), ("12",))
    solve_o = solve_prompt(task_o, example=Task("code_o", "def f(x):\n    return 1", ("5",), ("1",))).question
    assert "What does f return" in solve_o and solve_o.split("```input\n")[-1].split("\n")[0] == "12"
    solves = [
        solve_o,
        solve_prompt(Task("code_i", task_o.program, task_o.inputs, task_o.outputs)).question,
        solve_prompt(CODE_F_EXAMPLE).question,
    ]
    assert "Find arguments for f" in solves[1] and "What does f return" not in solves[1]
    assert not any("Write " in s for s in solves)  # proposer prompts are the ones with "Write "


@pytest.mark.parametrize("fmt", ["chat", "r1"])
def test_answers_in_the_prompted_format_parse(fmt):
    wrap = (lambda t: f"<think>plan</think><answer>{t}</answer>") if fmt == "r1" else (lambda t: f"Plan: a loop.\n{t}")
    triplet = "```python\ndef f(x):\n    return x + 1\n```\n```input\n41\n```"
    assert parse_proposal(wrap(triplet), "code_o", fmt) == Proposal("code_o", "def f(x):\n    return x + 1", ("41",))
    inputs = "".join(f"```input\n{n}\n```\n" for n in range(10)) + "```message\nadds one\n```"
    p = parse_proposal(wrap(inputs), "code_f", fmt, program=CODE_F.program)
    assert len(p.inputs) == 10 and p.message == "adds one"
    assert parse_answer(wrap("step 1...\n```output\n42\n```"), "code_o", fmt) == "42"
    assert parse_answer(wrap("```input\n'a', 3\n```"), "code_i", fmt) == "'a', 3"
    assert parse_answer(wrap("```python\ndef f(x):\n    return x\n```"), "code_f", fmt) == "def f(x):\n    return x"


def test_the_configured_style_reaches_the_proposer(tiny_base):
    from populora_nb.buffers import TaskBuffer
    from populora_nb.config import load_config
    from populora_nb.stages import propose

    class Recorder:
        tokenizer = tiny_base.tokenizer
        prompts: list[str] = []

        def generate(self, member_ids, prompts, max_new_tokens, seed):
            self.prompts += prompts
            return ["no answer"] * len(prompts)

    buffer = TaskBuffer("code_o", 8)
    buffer.add(IDENTITY, seed=True)
    policy = Recorder()
    for style in ("azr", "short"):
        cfg = load_config("tiny", {"tasks.kinds": ["code_o"], "tasks.prompt_style": style})
        propose(policy, ["agent"], {"code_o": buffer}, cfg, step=0, per_kind=1)  # type: ignore[arg-type]
    azr, short = policy.prompts
    assert "Plan first" in azr and "Plan first" not in short and SHORT_TRIPLET in short


# ---- prompts fit their token budget by construction (issue #29) ---------------------------------


def _long_task(i: int, lines: int) -> Task:
    body = "\n".join(f"    a = a + {j}" for j in range(lines))
    return Task("code_o", f"def f(a):\n{body}\n    return a + {i}", ("1",), ("2",))


def test_a_proposer_prompt_over_its_budget_drops_its_longest_references(tokenizer):
    from populora_nb.prompts import PromptTooLongError, bounded_propose_prompt
    from populora_nb.stages import token_counter

    count = token_counter(tokenizer, "r1")
    refs = [_long_task(0, 5), _long_task(1, 400), _long_task(2, 5), _long_task(3, 300)]  # two of ~3k chars
    full = count(propose_prompt("code_o", refs))
    prompt, shown = bounded_propose_prompt("code_o", refs, count, full)
    assert shown == tuple(refs)  # it fits: nothing dropped
    small = count(propose_prompt("code_o", [refs[0], refs[2]]))
    prompt, shown = bounded_propose_prompt("code_o", refs, count, small)
    assert shown == (refs[0], refs[2]) and count(prompt) <= small  # the two long ones went, order kept
    with pytest.raises(PromptTooLongError, match="raise model.max_seq_len or lower sampling.propose_max_new_tokens"):
        bounded_propose_prompt("code_o", refs, count, 20)
    # code_f shows one program: the first candidate that fits
    long_f = count(propose_prompt("code_f", [refs[1]]))
    _, shown = bounded_propose_prompt("code_f", [refs[1], refs[0]], count, long_f - 1)
    assert shown == (refs[0],)


def test_a_solve_prompt_drops_its_worked_example_before_the_task(tokenizer):
    from populora_nb.prompts import bounded_solve_prompt
    from populora_nb.stages import token_counter

    count = token_counter(tokenizer, "chat")
    task, example = _long_task(0, 5), _long_task(1, 300)
    assert bounded_solve_prompt(task, example, count, 10_000) == solve_prompt(task, example)
    bare = count(solve_prompt(task))
    assert bounded_solve_prompt(task, example, count, bare) == solve_prompt(task)
    assert bounded_solve_prompt(task, example, count, bare - 1) is None  # unsolved this step, no engine error


def test_no_completion_room_is_refused_at_load():
    from populora_nb.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="sampling.propose_max_new_tokens=2048 leaves no room"):
        load_config("tiny", {"sampling.propose_max_new_tokens": 2048})
