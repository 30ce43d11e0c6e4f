import pytest

from populora_nb.prompts import (
    ParseFailure,
    Proposal,
    parse_answer,
    parse_proposal,
    propose_prompt,
    render,
    solve_prompt,
)
from populora_nb.tasks import Task

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
