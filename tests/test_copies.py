"""What a proposer newly wrote: copy classes of valid proposals (populora_nb.copies, issue #28)."""

import dataclasses
import json

import numpy as np

from populora_nb.config import load_config
from populora_nb.copies import (
    COPY_OF_REFERENCE,
    REPEAT_OF_EARLIER_TASK,
    classify,
    classify_rows,
    copy_rate,
    distinct_programs,
    fingerprint,
    mark_copies,
    normalise,
    repeat_rows,
    seed_fingerprints,
)
from populora_nb.loop import run
from populora_nb.prompts import ParseFailure
from populora_nb.stages import Proposed
from populora_nb.tasks import Task
from populora_nb.verify import Invalid, Proposal
from tests.scripted import ScriptedPolicy

DOUBLE = "def f(x):\n    return x * 2"


def test_normalising_ignores_formatting_comments_and_local_names():
    assert normalise("def f(x):  # doubles\n    return (x*2)") == normalise(DOUBLE)
    assert normalise("def f( x ):\n\n    return x *2\n") == normalise(DOUBLE)
    assert normalise("def f(y):\n    return y * 2") == normalise(DOUBLE)  # renamed: the same program
    assert normalise("def f(x):\n    return x * 3") != normalise(DOUBLE)  # another literal: another program
    assert normalise("def f(:  x") == "def f(: x"  # unparsable: whitespace collapsed
    # locals renamed in order of first binding, nested functions and comprehensions included
    a = "def f(a, b):\n    t = [i * a for i in range(b)]\n    def g(z):\n        return z + t[0]\n    return g(b)"
    b = "def f(p, q):\n    acc = [k * p for k in range(q)]\n    def h(w):\n        return w + acc[0]\n    return h(q)"
    assert normalise(a) == normalise(b)
    assert normalise("def f(a, b):\n    return a - b") != normalise("def f(a, b):\n    return b - a")  # order kept
    # kept: f, builtins, attributes, imported and global names
    assert normalise("def f(x):\n    return len(x)") != normalise("def f(x):\n    return sum(x)")
    assert normalise("def f(x):\n    return x.upper()") != normalise("def f(x):\n    return x.lower()")
    assert normalise("import math\ndef f(x):\n    return math.sqrt(x)") != normalise(
        "import cmath\ndef f(x):\n    return cmath.sqrt(x)"
    )
    assert normalise("K = 2\ndef f(x):\n    return x * K") != normalise("J = 2\ndef f(x):\n    return x * J")
    assert normalise("def f(x):\n    global K\n    K = x\n    return K").count("K") == 3
    assert normalise("def g(x):\n    return x * 2") != normalise(DOUBLE)  # the function's own name is kept


def test_classes_reference_earlier_and_new():
    seen = {fingerprint("code_o", "def f(a):\n    return a")}
    assert classify("code_o", DOUBLE + "  # mine", ["0"], [DOUBLE], seen) == "reference"
    assert classify("code_i", "def f(a):  return a", ["1"], [DOUBLE], seen) == "earlier"  # code_o and code_i share
    assert classify("code_o", "def f(a):\n    return -a", ["1"], [DOUBLE], seen) == "new"
    # code_f: the program was given; what it wrote is its inputs
    seen_f = {fingerprint("code_f", DOUBLE, ["1", "2"])}
    assert classify("code_f", DOUBLE, ["1", "2"], [], seen_f) == "earlier"
    assert classify("code_f", DOUBLE, ["1", "3"], [], seen_f) == "new"


def _proposed(program, refs=(), valid=True):
    task = Task("code_o", program, ("1",), ("2",))
    result = task if valid else Invalid("runtime_error")
    return Proposed("T0", "code_o", "prompt", "text", Proposal("code_o", program, ("1",)), result, references=refs)


def test_mark_copies_classes_in_proposal_order_and_can_reject_reference_copies():
    seen: set[str] = set()
    batch = [
        _proposed(DOUBLE, refs=(DOUBLE,)),
        _proposed("def f(x):\n    return x - 1"),
        _proposed("def f(x):\n    return x - 1"),
    ]
    batch.append(_proposed("def f(x): return 0", valid=False))
    batch.append(
        dataclasses.replace(batch[1], parsed=ParseFailure("no_python_block"), result=ParseFailure("no_python_block"))
    )
    marked = mark_copies(batch, seen)
    assert [p.copy for p in marked] == ["reference", "new", "earlier", None, None]
    assert len(seen) == 4 and marked[0].result == batch[0].result  # both fingerprints of 2 tasks
    rejected = mark_copies(batch, set(), reject="reference")
    assert isinstance(rejected[0].result, Invalid) and rejected[0].result.reason == COPY_OF_REFERENCE
    assert rejected[0].copy == "reference" and rejected[1].result == batch[1].result
    assert copy_rate([p.copy for p in marked]) == 2 / 3 and copy_rate([None]) is None


def _task(program, inputs=("1",), kind="code_o"):
    task = Task(kind, program, tuple(inputs), ("2",) * len(inputs))
    return Proposed("T0", kind, "prompt", "text", Proposal(kind, program, tuple(inputs)), task)


def test_a_repeat_is_the_same_program_and_input_and_can_be_rejected():
    """A copied program with a new input is a new task; the same program (reformatted) with the same
    input is a repeat, whichever class its program has; a seed's or warm-up example's task counts too."""
    seed = seed_fingerprints("def f(a):\n    return a", ["'Hello world'"], ["'Hello world'"])
    batch = [
        _task(DOUBLE),
        _task(DOUBLE + "  # again", ["1"]),  # same task reformatted: a repeat (class earlier)
        _task(DOUBLE, ["5"]),  # same program, new input: a copy, not a repeat
        _task("def f(a):  return a", ["'Hello world'"], kind="code_i"),  # the seed's triplet, as code_i
        dataclasses.replace(_task(DOUBLE, ["5"]), references=(DOUBLE,)),  # a shown reference's task again
    ]
    marked = mark_copies(batch, set(seed))
    assert [p.repeat for p in marked] == [False, True, False, True, True]
    assert [p.copy for p in marked] == ["new", "earlier", "earlier", "earlier", "reference"]
    rejected = mark_copies(batch, set(seed), reject_repeats=True)
    assert [isinstance(p.result, Invalid) for p in rejected] == [False, True, False, True, True]
    assert rejected[1].result.reason == REPEAT_OF_EARLIER_TASK and rejected[1].repeat
    # code_f: the program was handed to it; the same input set again is a repeat, a new one is not
    f = [_task(DOUBLE, ["1", "2"], "code_f"), _task(DOUBLE, ["2", "1"], "code_f"), _task(DOUBLE, ["1", "2"], "code_f")]
    assert [p.repeat for p in mark_copies(f, set())] == [False, False, True]


def test_a_repeat_is_the_task_as_its_student_meets_it():
    """code_o: program and input; code_i: program and output (a new input with the same output is the
    same task to a student who is shown the output); code_f: program and shown pairs. A code_i task is
    not a repeat of a code_o task of the same program and input: its student meets another question."""
    ident = "def f(a):\n    return a % 3"
    rows = [
        {"valid": True, "kind": "code_i", "program": ident, "inputs": ["4"], "outputs": ["1"]},
        {"valid": False, "kind": "code_i", "program": ident, "inputs": [], "outputs": []},
        {"valid": True, "kind": "code_i", "program": "def f(b):\n    return b % 3", "inputs": ["7"], "outputs": ["1"]},
        {"valid": True, "kind": "code_i", "program": ident, "inputs": ["5"], "outputs": ["2"]},
        {"valid": True, "kind": "code_o", "program": ident, "inputs": ["5"], "outputs": ["2"]},
        {"valid": True, "kind": "code_o", "program": ident, "inputs": ["8"], "outputs": ["2"]},
        {"valid": True, "kind": "code_o", "program": ident, "inputs": ["8"], "outputs": ["2"]},
    ]
    assert repeat_rows(rows) == [False, None, True, False, False, False, True]
    # a seed triplet is met as code_o or as code_i
    start = seed_fingerprints(ident, ["10"], ["1"])
    assert repeat_rows(rows, start) == [True, None, True, False, False, False, True]
    f = [  # code_f: the shown half of the pairs; the hidden half does not change what the solver meets
        {"valid": True, "kind": "code_f", "program": ident, "inputs": ["1", "2"], "outputs": ["1", "2"]},
        {"valid": True, "kind": "code_f", "program": ident, "inputs": ["1", "5"], "outputs": ["1", "2"]},
        {"valid": True, "kind": "code_f", "program": ident, "inputs": ["4", "5"], "outputs": ["1", "2"]},
    ]
    assert repeat_rows(f) == [False, True, False]


def test_records_are_classed_by_program_with_names_normalised():
    """Re-reading records: a recorded "reference" stays; every other valid row is classed again with
    today's normalisation, so a renamed copy the run recorded as "new" reads as "earlier"."""
    rows = [
        {"valid": True, "kind": "code_o", "program": DOUBLE, "inputs": ["1"], "copy": "new"},
        {"valid": False, "kind": "code_o", "program": "x", "inputs": []},
        {"valid": True, "kind": "code_i", "program": "def f(y):\n    return y * 2", "inputs": ["3"], "copy": "new"},
        {"valid": True, "kind": "code_o", "program": "def f(a):\n    return a", "inputs": ["1"]},
        {"valid": True, "kind": "code_o", "program": "def f(b):\n    return b", "inputs": ["1"], "copy": "reference"},
        {"valid": True, "kind": "code_o", "program": "def f(b):\n    return b + 1", "inputs": ["1"], "copy": "new"},
    ]
    seed = seed_fingerprints("def f(a):\n    return a", ["'x'"], ["'x'"])
    assert classify_rows(rows, seed) == ["new", None, "earlier", "earlier", "reference", "new"]
    assert distinct_programs(rows) == 3


def test_one_program_with_fresh_inputs_is_no_repeat_but_one_new_program():
    """The collapse the liveness checks missed: a proposer re-posing one program with a fresh argument
    every time writes no repeat, and one new program."""
    rows = [
        {
            "valid": True,
            "kind": "code_i",
            "program": f"def f({v}):\n    return {v} * {v}",
            "inputs": [str(i)],
            "outputs": [str(i * i)],
        }
        for i, v in zip(range(20), "nmxyznmxyznmxyznmxyz")
    ]
    assert not any(repeat_rows(rows))
    assert classify_rows(rows).count("new") == 1 and distinct_programs(rows) == 1


def test_the_loop_records_each_valid_proposals_class(tmp_path, tokenizer):
    # The scripted teachers write one program (x * 3) with different inputs: new once, then copies
    # (of a reference once it is in the buffer and shown, else of an earlier proposal).
    cfg = load_config("tiny", {"run.steps": 2, "evolution.enabled": False, "tasks.kinds": ["code_o", "code_i"]})
    rows = run(cfg, tmp_path / "r", policy=ScriptedPolicy(tokenizer), progress=False).read("tasks")
    classes = [r["copy"] for r in rows if r["valid"]]
    assert classes[0] == "new" and set(classes[1:]) == {"earlier", "reference"}
    assert all(r["copy"] is None for r in rows if not r["valid"])
    assert all(isinstance(r["repeat"], bool) for r in rows if r["valid"]) and any(r["repeat"] for r in rows)
    strict = dataclasses.replace(cfg, tasks=dataclasses.replace(cfg.tasks, reject_repeats=True))
    kept = run(strict, tmp_path / "strict", policy=ScriptedPolicy(tokenizer), progress=False).read("tasks")
    assert not any(r["repeat"] for r in kept if r["valid"])
    assert any(r["reason"] == REPEAT_OF_EARLIER_TASK for r in kept)
    metrics = run(cfg, tmp_path / "r", policy=ScriptedPolicy(tokenizer), progress=False).read("metrics")
    assert all(0.0 <= r["teacher/copy_rate"] <= 1.0 for r in metrics if r.get("teacher/copy_rate") is not None)


def test_copying_that_rises_does_not_make_new_programs_look_simpler(tmp_path):
    """A synthetic run: new programs of one fixed complexity every step, and a rising share of copies
    of the identity seed (depth 3). Measured over new programs, complexity stays flat while the copy
    rate rises; measured over every valid program (the earlier rule), it falls: the bias."""
    from populora_nb.analysis import complexity as cx
    from populora_nb.analysis.coverage import measured, valid_tasks
    from populora_nb.analysis.frames import load_tasks

    rows, fresh = [], 0
    for step in range(10):
        for i in range(10):
            copied = i < step  # 0 copies at step 0, 9 of 10 at step 9
            new_one = f"def f(x):\n    if x > {fresh}:\n        return x - {fresh}\n    return x"
            program = "def f(a):\n    return a" if copied else new_one
            fresh += not copied
            rows.append(
                {
                    "step": step,
                    "proposer": "agent",
                    "kind": "code_o",
                    "program": program,
                    "valid": True,
                    "inputs": ["1"],
                    "outputs": ["1"],
                    "solve_rate": 0.5,
                }
            )
    path = tmp_path / "run"
    path.mkdir()
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    new = load_tasks(path)
    every = new.assign(measured=new["written"])  # the earlier rule: every valid program measured
    depth = cx.step_series(new, "ast_depth")
    assert np.allclose(depth.mean, depth.mean[0])  # flat
    copies = cx.copy_series(new)
    assert copies.mean[0] == 0.0 and copies.mean[-1] == 0.9 and np.all(np.diff(copies.mean) > 0)
    every_depth = cx.step_series(every, "ast_depth").mean
    assert every_depth[-1] < every_depth[0] - 1.0  # what copying did before
    assert (valid_tasks(new)["copy"] != "new").sum() == 45 and len(measured(new)) == 55


def test_copied_records_find_their_warm_up_beside_them(tmp_path):
    """A run copied from another machine names a warm-up path that no longer exists: its examples are
    read from ``warmup/`` beside the run (an experiment directory's layout), so writing one again is a
    repeat there too."""
    from populora_nb.config import save_config
    from populora_nb.copies import start_fingerprints, warmup_fingerprints
    from populora_nb.warmup import EXAMPLES

    exp = tmp_path / "seed0"
    (exp / "warmup").mkdir(parents=True)
    example = {"kind": "code_i", "program": "def f(x):\n    return x * 7", "inputs": ["3"]}
    (exp / "warmup" / EXAMPLES).write_text(json.dumps(example) + "\n")
    (exp / "population").mkdir()
    cfg = load_config("tiny")
    cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, warmup="/elsewhere/seed0/warmup"))
    save_config(cfg, exp / "population" / "config.yaml")
    start = start_fingerprints(exp / "population")
    assert warmup_fingerprints(exp / "warmup") <= start
    assert fingerprint("code_i", example["program"]) in start
    row = {**example, "valid": True, "outputs": ["21"]}  # the example was recorded without its output
    assert repeat_rows([row], start) == [True] and repeat_rows([row]) == [False]
