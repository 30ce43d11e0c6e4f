"""The verifier: every rejection reason, right/wrong answers per kind, injections, containment of
hostile programs, determinism, batching, and agreement with AZR's released seed tasks."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from populora_nb.tasks import Task
from populora_nb.verify import (
    BENCHMARK_POLICY,
    INVALID_REASONS,
    TASK_POLICY,
    Invalid,
    Proposal,
    Verifier,
    outputs_equal,
    parse_arguments,
    parse_literal,
    values_equal,
)
from populora_nb.verify.static_policy import SandboxPolicy, compile_program

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "azr_seeds"
IDENTITY = "def f(a):\n    return a"
ROOT = os.geteuid() == 0
# Everything the static layer forbids is allowed here, and the in-child stubs are off: what still
# holds is the OS layer alone (chroot, uid, rlimits, network namespace).
OPEN_POLICY = replace(
    TASK_POLICY,
    allowed_modules=TASK_POLICY.allowed_modules | {"os", "sys", "socket", "shutil", "subprocess", "time"},
    banned_modules=frozenset(),
    banned_names=frozenset(),
    disable_dangerous=False,
    guard_imports=False,
)


def static_check(program: str, policy: SandboxPolicy = TASK_POLICY) -> Invalid | None:
    """The static policy's verdict on `program` before anything runs: None when it may go to the sandbox."""
    result = compile_program(program, policy)
    return result if isinstance(result, Invalid) else None


@pytest.fixture(scope="module")
def verifier():
    with Verifier(timeout_s=1.0, memory_mb=256, workers=2) as v:
        yield v


@pytest.fixture(scope="module")
def open_verifier():
    if not ROOT:
        pytest.skip("the OS layer (chroot, uid drop) needs root; only the static layer and stubs apply")
    with Verifier(timeout_s=1.0, memory_mb=256, workers=2, policy=OPEN_POLICY) as v:
        yield v


# ---------------------------------------------------------------- literals
def test_literals_parse_only_data():
    assert parse_literal("frozenset({1, 2})") == frozenset({1, 2})
    assert parse_literal("{'a': (1, 2.5, -3j, b'x', None, True, set())}") == {
        "a": (1, 2.5, -3j, b"x", None, True, set())
    }
    for text in ("'zz') or (True", "__import__('os').system('true')", "f(1)", "[x for x in y]", "...", "1 + 2"):
        with pytest.raises(ValueError):
            parse_literal(text)
    assert parse_arguments("[1, 2], 'a', k=3") == (([1, 2], "a"), {"k": 3})
    for text in ("'zz') or (True", "*[1]", "**{'a': 1}", "1); (2", "dict(a=1)"):
        with pytest.raises(ValueError):
            parse_arguments(text)


def test_values_equal_is_type_strict():
    assert values_equal([1, (2, "a")], [1, (2, "a")])
    assert not values_equal(1, 1.0) and not values_equal(1, True) and not values_equal([1], (1,))
    assert values_equal({"a": [1]}, {"a": [1]}) and not values_equal({"a": [1]}, {"a": [True]})


def test_outputs_equal_is_azrs_python_equality():
    """Issue #28: an answer passes when its value is == to the gold output's, as in AZR's executor."""
    assert outputs_equal(1, 1.0) and outputs_equal(1, True) and outputs_equal(1.0, True)
    assert outputs_equal([1, (2.0, True), {"a": 0}], [1.0, (2, 1), {"a": False}])
    assert outputs_equal(0.0, -0.0) and outputs_equal({1: "a"}, {True: "a"})
    assert not outputs_equal((1,), [1]) and not outputs_equal("1", 1) and not outputs_equal([1, 2], [2, 1])
    assert not outputs_equal(2, 2.0000001)


def test_answers_are_judged_with_azrs_equality(verifier):
    """code_o, code_i and code_f answers equal to the gold output under == pass (1, 1.0, True;
    nested lists); a tuple for a list, a string for an int, or nan do not."""
    code_o = verifier.validate("code_o", "def f(a):\n    return [a, [a * 2, a > 0]]", ["1"])
    assert code_o.outputs == ("[1, [2, True]]",)
    answers = ["[1, [2, True]]", "[1.0, [2.0, 1]]", "[True, [2, 1.0]]", "[1, (2, True)]", "['1', [2, True]]", "nan"]
    assert [v.status for v in verifier.judge_many([(code_o, a) for a in answers])] == [
        "pass",
        "pass",
        "pass",
        "wrong",
        "wrong",
        "answer_not_literal",
    ]
    code_i = verifier.validate("code_i", IDENTITY, ["1"])
    assert [v.passed for v in verifier.judge_many([(code_i, a) for a in ("1", "1.0", "True", "'1'", "[1]")])] == [
        True
    ] * 3 + [False] * 2
    code_f = verifier.validate("code_f", "def f(a):\n    return a * 2", ["1", "2", "3", "4"], "double it")
    floats = "def f(a):\n    return a * 2.0"
    nan = "def f(a):\n    return float('nan')"  # a run that returns nan never passes
    assert [v.status for v in verifier.judge_many([(code_f, floats), (code_f, nan)])] == ["pass", "output_not_literal"]


# ---------------------------------------------------------------- rejection reasons
STATIC_CASES = {
    "syntax": "def f(a)\n    return a",
    "no_f": "def g(a):\n    return a",
    "program_too_long": "def f(a):\n    return a\n" + "#" * 30_000,
    "banned_import": "import random\ndef f(a):\n    return random.random()",
    "banned_call": "def f(a):\n    return eval(a)",
    "banned_attribute": "def f(a):\n    return ().__class__.__bases__",
}


@pytest.mark.parametrize("reason", sorted(STATIC_CASES))
def test_static_rejections(reason):
    assert static_check(STATIC_CASES[reason]).reason == reason


@pytest.mark.parametrize(
    "program, reason",
    [
        ("import os\ndef f(a):\n    return 1", "banned_import"),
        ("import numpy\ndef f(a):\n    return 1", "banned_import"),
        ("from statistics import random\ndef f(a):\n    return 1", "banned_import"),
        ("import typing\ndef f(a):\n    return typing.sys.modules", "banned_attribute"),
        ("import statistics as s\ndef f(a):\n    return s.random.random()", "banned_attribute"),
        ("def f(a):\n    return (x for x in a).gi_frame.f_back", "banned_attribute"),
        ("def f(a):\n    return __builtins__", "banned_attribute"),
        ("def f(a):\n    return getattr(a, '__class__')", "banned_call"),
        ("def f(a, n):\n    return getattr(a, n)", "banned_call"),
        ("import operator\ndef f(a):\n    return operator.attrgetter('__class__')(a)", "banned_call"),
        ("def f(a):\n    g = getattr\n    return g(a, 'x')", "banned_call"),
        ("def f(a):\n    return open('/etc/passwd').read()", "banned_call"),
        ("def f(a):\n    e = exec\n    return 1", "banned_call"),
    ],
)
def test_policy_holes_are_closed(program, reason):
    assert static_check(program).reason == reason


def test_policy_accepts_real_task_code():
    program = (
        "from collections import defaultdict, Counter\nimport heapq, math, re\nfrom typing import List\n"
        "class Node:\n    def __init__(self, v):\n        self.v = v\n"
        "    def __lt__(self, o):\n        return self.v < o.v\n"
        "def f(xs: List[int]) -> int:\n    h = [Node(x) for x in xs]\n    heapq.heapify(h)\n"
        "    return getattr(h[0], 'v') + math.floor(2.5) + len(re.findall('a', 'aa'))"
    )
    assert static_check(program) is None
    assert static_check("def f(x):\n    return super().__init__()", BENCHMARK_POLICY) is None


RUNTIME_CASES = {  # reason -> (kind, program, inputs, message)
    "runtime_error": ("code_o", "def f(a):\n    return 1 // a", ("0",), ""),
    "timeout": ("code_o", "def f(a):\n    while True:\n        a += 1", ("0",), ""),
    "memory": ("code_o", "def f(a):\n    return [0] * (10 ** 10)", ("0",), ""),
    "output_not_literal": ("code_o", "def f(a):\n    return object()", ("0",), ""),
    "output_too_long": ("code_o", "def f(a):\n    return 'x' * 5000", ("0",), ""),
    "nondeterministic": (
        "code_o",
        "def f(a):\n    return list({'alpha', 'beta', 'gamma', 'delta', 'eps'})",
        ("0",),
        "",
    ),
    "input_not_literal": ("code_o", IDENTITY, ("dict(a=1)",), ""),
    "input_too_long": ("code_o", IDENTITY, ("'" + "x" * 3000 + "'",), ""),
    "too_few_inputs": ("code_f", IDENTITY, ("1",), "copy it"),
    "no_message": ("code_f", IDENTITY, ("1", "2"), ""),
    "duplicate_inputs": ("code_f", IDENTITY, ("1", "2", "1"), "copy it"),
}


@pytest.mark.parametrize("reason", sorted(RUNTIME_CASES))
def test_runtime_rejections(verifier, reason):
    kind, program, inputs, message = RUNTIME_CASES[reason]
    result = verifier.validate(kind, program, inputs, message)
    assert isinstance(result, Invalid) and result.reason == reason, result


def test_every_reason_has_a_case():
    # crash: test_os_layer_contains; wrong_input_count: test_code_f_input_count_asked_for
    covered = set(STATIC_CASES) | set(RUNTIME_CASES) | {"crash", "wrong_input_count"}
    assert covered == set(INVALID_REASONS) - {"sandbox_error"}


@pytest.mark.parametrize(
    "program",
    [
        "def f(a):\n    return float('nan')",
        "def f(a):\n    return (x for x in a)",
        "def f(a):\n    class Int(int):\n        pass\n    return Int(3)",
        "def f(a):\n    x = []\n    x.append(x)\n    return x",
    ],
)
def test_outputs_must_be_exact_literals(verifier, program):
    assert verifier.validate("code_o", program, ["[1]"]).reason == "output_not_literal"


def test_hash_seed_dependence_is_caught(verifier):
    assert verifier.validate("code_o", "def f(a):\n    return hash(a)", ["'abc'"]).reason == "nondeterministic"
    task = verifier.validate("code_o", "def f(a):\n    return set(a.split())", ["'b a c d e'"])
    assert isinstance(task, Task)  # a set of strings is one value, whatever order repr shows
    assert parse_literal(task.outputs[0]) == {"a", "b", "c", "d", "e"}


@pytest.mark.parametrize(
    "program",
    [
        "def f(a, seen=[]):\n    seen.append(a)\n    return len(seen)",  # a mutable default keeps state
        "calls = 0\ndef f(a):\n    global calls\n    calls += 1\n    return a + calls",  # a global counter
        "def f(a):\n    f.n = getattr(f, 'n', 0) + 1\n    return f.n",  # state on the function object
    ],
)
def test_state_kept_between_calls_is_nondeterministic(verifier, program):
    """AZR calls f twice in one process: an answer that depends on how often f ran is not a task.
    Each of these gives the same output in two fresh processes, so only the double call catches it."""
    verdict = verifier.validate("code_o", program, ["1"])
    assert isinstance(verdict, Invalid) and verdict.reason == "nondeterministic", verdict
    assert "second call" in verdict.detail


def test_a_function_that_mutates_its_argument_is_still_deterministic(verifier):
    """The second call gets fresh arguments: mutating your own input is not state between calls."""
    task = verifier.validate("code_o", "def f(a):\n    a.append(1)\n    return a", ["[0]"])
    assert isinstance(task, Task) and task.outputs == ("[0, 1]",)


@pytest.mark.parametrize(
    "inputs",
    [
        ("1", "2", "3", "1"),  # the same text
        ("[1, 2]", "'a'", "[1,2]", "'b'"),  # the same value, written differently
        ("1, k=2", "3", "1, k= 2", "4"),  # keyword arguments compare as values too
    ],
)
def test_duplicated_code_f_inputs_are_rejected(verifier, inputs):
    verdict = verifier.validate("code_f", IDENTITY, inputs, message="copies")
    assert isinstance(verdict, Invalid) and verdict.reason == "duplicate_inputs", verdict


def test_distinct_code_f_inputs_of_equal_python_value_but_other_type_are_kept(verifier):
    """1, 1.0 and True are different inputs here (values_equal requires equal types)."""
    assert isinstance(verifier.validate("code_f", IDENTITY, ("1", "1.0", "True", "2"), message="copies"), Task)


def test_code_f_input_count_asked_for(verifier):
    """With the count the prompt asked for, a code_f task with another number of inputs is rejected."""
    proposals = [Proposal("code_f", IDENTITY, inputs, "copies") for inputs in (("1", "2", "3", "4"), ("1", "2"))]
    four, two = verifier.validate_many(proposals, code_f_inputs=4)
    assert isinstance(four, Task) and isinstance(two, Invalid) and two.reason == "wrong_input_count", two
    assert all(isinstance(t, Task) for t in verifier.validate_many(proposals))  # no count: any from the minimum


# ---------------------------------------------------------------- checking answers
def test_code_o_answers(verifier):
    task = verifier.validate("code_o", IDENTITY, ['"Hello world"'])
    assert task.outputs == ("'Hello world'",)
    assert [v.passed for v in verifier.judge_many([(task, '"Hello world"'), (task, "'Hello world'")])] == [True, True]
    verdicts = verifier.judge_many(
        [
            (task, "'hello world'"),
            (task, "'zz') or (True"),
            (task, "__import__('os').system('touch /tmp/populora_pwned')"),
            (task, "type('X', (), {'__eq__': lambda s, o: True})()"),
        ]
    )
    assert [v.status for v in verdicts] == ["wrong", "answer_not_literal", "answer_not_literal", "answer_not_literal"]
    assert not os.path.exists("/tmp/populora_pwned")


def test_code_i_answers(verifier):
    task = verifier.validate("code_i", "def f(a, b=0):\n    return a * 2 + b", ["3"])
    assert task.outputs == ("6",)
    answers = ["3", "2, b=2", "4", "'zz') or (True", "__import__('os').system('touch /tmp/populora_pwned')", "3.0"]
    # "3.0": f gives 6.0, which is == 6 (AZR's `gold == f(answer)`)
    assert [v.passed for v in verifier.judge_many([(task, a) for a in answers])] == [
        True,
        True,
        False,
        False,
        False,
        True,
    ]
    assert not os.path.exists("/tmp/populora_pwned")


def test_code_f_answers(verifier):
    program = "def f(xs):\n    return sorted(xs)[::-1]"
    task = verifier.validate("code_f", program, ["[3, 1, 2]", "[5]", "[2, 2, 1]", "[]"], "sort descending")
    assert task.n_shown == 2 and len(task.hidden_pairs) == 2
    right = "def f(xs):\n    return sorted(xs, reverse=True)"
    only_shown = "def f(xs):\n    return {(3, 1, 2): [3, 2, 1], (5,): [5]}[tuple(xs)]"
    always_equal = "class Any:\n    def __eq__(self, other):\n        return True\ndef f(xs):\n    return Any()"
    int_subclass = "class I(int):\n    def __eq__(self, o):\n        return True\ndef f(xs):\n    return I(0)"
    verdicts = verifier.judge_many(
        [
            (task, right),
            (task, only_shown),
            (task, always_equal),
            (task, int_subclass),
            (task, "import os\ndef f(xs):\n    return xs"),
        ]
    )
    assert [v.status for v in verdicts] == [
        "pass",
        "runtime_error",
        "output_not_literal",
        "output_not_literal",
        "banned_import",
    ]


def test_code_f_state_between_calls_never_becomes_gold(verifier):
    """Validation must not record outputs a solver's program cannot reproduce: a program that keeps
    state on itself or in a shared module answers the double call differently and is rejected,
    whichever process (shown or hidden inputs) it runs in."""
    stateful = "def f(x):\n    f.calls = getattr(f, 'calls', 0) + 1\n    return f.calls"
    assert verifier.validate("code_f", stateful, ["1", "2", "3", "4"], "count").reason == "nondeterministic"
    in_module = "import string\ndef f(x):\n    string.n = getattr(string, 'n', 0) + 1\n    return string.n"
    assert verifier.validate("code_f", in_module, ["1", "2", "3", "4"], "count").reason == "nondeterministic"
    task = verifier.validate("code_f", "def f(x):\n    return x % 3", ["1", "2", "3", "4"], "mod 3")
    assert task.outputs == ("1", "2", "0", "1") and verifier.check(task, "def f(x):\n    return x % 3")


# ---------------------------------------------------------------- containment
HOSTILE = {  # name -> (program, acceptable statuses)
    "fork_bomb": ("import os\ndef f(a):\n    while True:\n        os.fork()", {"runtime_error"}),
    "memory_bomb": ("def f(a):\n    x = []\n    while True:\n        x.append(' ' * 10 ** 7)", {"memory", "timeout"}),
    "infinite_loop": ("def f(a):\n    while True:\n        pass", {"timeout"}),
    "deep_recursion": (
        "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(a):\n    return f(a + 1)",
        {"timeout", "crash", "memory", "runtime_error"},
    ),
    "write_outside": ("def f(a):\n    open(a + '/new.txt', 'w').write('x')\n    return 1", {"runtime_error"}),
    "overwrite": ("def f(a):\n    open(a + '/keep.txt', 'w').write('pwned')\n    return 1", {"runtime_error"}),
    "delete": (
        "import os, shutil\ndef f(a):\n    os.remove(a + '/keep.txt')\n    shutil.rmtree(a)\n    return 1",
        {"runtime_error"},
    ),
    "write_here": (
        "def f(a):\n    with open('x.txt', 'w') as fh:\n        fh.write('x' * 100)\n    return 1",
        {"runtime_error"},
    ),  # file size limit 0 (the empty file goes with the run dir)
    "socket": (
        "import socket\ndef f(a):\n    s = socket.socket()\n    s.settimeout(0.5)\n"
        "    s.connect(('1.1.1.1', 80))\n    return 1",
        {"runtime_error"},
    ),
    "os_exit": ("import os\ndef f(a):\n    os._exit(0)", {"crash"}),
    "sys_exit": ("import sys\ndef f(a):\n    sys.exit(1)", {"runtime_error"}),
    "kill_parent": ("import os\ndef f(a):\n    os.kill(os.getppid(), 9)\n    return 1", {"runtime_error"}),
    "kill_everyone": (
        "import os\ndef f(a):\n    os.kill(-1, 9)\n    return 1",
        {"ok", "runtime_error"},
    ),  # ESRCH: nobody to kill in its PID namespace
    "stdout_flood": ("def f(a):\n    while True:\n        print('x' * 100000)", {"timeout"}),
    "subprocess": (
        "import subprocess\ndef f(a):\n    return subprocess.run(['touch', a + '/sp']).returncode",
        {"runtime_error"},
    ),
}


def _snapshot(path: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.iterdir())}


def _sandbox_processes(uid: int) -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\t{uid}\t" in next(line for line in status.read_text().splitlines() if line.startswith("Uid:")):
                pids.append(int(status.parent.name))
        except (OSError, StopIteration):
            pass
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_os_layer_contains(open_verifier, tmp_path, name):
    program, statuses = HOSTILE[name]
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    before = _snapshot(victim)
    result = open_verifier.run_many([(program, [repr(str(victim))])])[0][0]
    assert result.status in statuses, result
    assert _snapshot(victim) == before  # nothing outside the run's own directory changed
    assert open_verifier.run_many([(IDENTITY, ["7"])])[0][0].output == "7"  # the pool is alive and well
    assert open_verifier._base_dir is None or os.listdir(open_verifier._base_dir) == []  # no run directory left
    assert not any(_sandbox_processes(uid) for uid in open_verifier.isolation.uids)  # nothing survives the run


def test_static_layer_stops_the_same_programs(verifier):
    for name, (program, _) in HOSTILE.items():
        if name not in ("memory_bomb", "infinite_loop", "stdout_flood"):
            assert static_check(program).reason in ("banned_import", "banned_call"), name


def test_isolation_report(verifier):
    iso = verifier.isolation
    assert len(iso.hash_seeds) == 2 and iso.hash_seeds[0] != iso.hash_seeds[1]  # random: test_hash_seeds_are_random
    assert iso.level in ("namespaces", "root-chroot")  # "none" is refused: test_isolation.py
    if ROOT:
        assert iso.chroot and len(set(iso.uids)) == 2 and 0 not in iso.uids  # one uid per zygote
    whoami = "import os\ndef f(a):\n    return [os.getuid(), os.getcwd(), os.listdir('/')]"
    if ROOT:
        with Verifier(timeout_s=1.0, policy=OPEN_POLICY) as v:
            uid, cwd, listing = parse_literal(v.run_many([(whoami, ["0"])])[0][0].output)
            assert uid in v.isolation.uids and (cwd, listing) == ("/", [])


def test_sockets_blocked_without_network_namespace():
    stubbed = replace(OPEN_POLICY, disable_dangerous=True)  # the stubs stay on, the namespace is off
    with Verifier(timeout_s=1.0, policy=stubbed, network_namespace=False) as v:
        assert not v.isolation.network_namespace
        result = v.run_many([("import socket\ndef f(a):\n    return 1", ["0"])])[0][0]
        assert result.status == "runtime_error" and "ModuleNotFoundError" in result.detail
        assert v.run_many([("import os\ndef f(a):\n    os.system('true')", ["0"])])[0][0].detail.startswith(
            "PermissionError"
        )


# ---------------------------------------------------------------- pool behaviour and extra API
def test_batches_from_threads(verifier):
    proposals = [Proposal("code_o", f"def f(a):\n    return a + {i}", ("1",)) for i in range(20)]
    results: dict[int, list] = {}

    def work(k):
        results[k] = verifier.validate_many(proposals)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        assert [r.outputs[0] for r in results[k]] == [str(1 + i) for i in range(20)]


def test_dead_zygote_is_replaced(verifier):
    verifier._zygotes[0].proc.kill()
    verifier._zygotes[0].proc.wait()
    assert isinstance(verifier.validate("code_o", IDENTITY, ["5"]), Task)


def test_replies_that_arrive_together_are_each_read_at_once(monkeypatch):
    """A zygote answers two pipelined runs before the pool reads (the pool busy, as on a loaded
    machine): both replies are read as they come and no zygote is given up on. A buffered read took
    the second reply with the first; select() then never fired for it, and the pool waited out the
    zygote's deadline (2 x timeout + 30 s) and replaced it: 34 s stalls whenever the machine was busy."""
    with Verifier(timeout_s=1.0, memory_mb=256, workers=2) as v:
        receive, replace_zygote, replaced = v._receive, v._replace, []

        def late_receive(zi, job):
            time.sleep(0.3)  # the zygote's next pipelined reply reaches the pipe meanwhile
            return receive(zi, job)

        monkeypatch.setattr(v, "_receive", late_receive)
        monkeypatch.setattr(
            v, "_replace", lambda zi, lost, queues: replaced.append(zi) or replace_zygote(zi, lost, queues)
        )
        verdicts = v.validate_many([Proposal("code_o", f"def f(a):\n    return a + {i}", ("1",)) for i in range(8)])
    assert replaced == []
    assert [t.outputs[0] for t in verdicts] == [str(1 + i) for i in range(8)]


def test_failed_start_leaves_nothing(monkeypatch):
    import populora_nb.verify.pool as pool_module

    made = []
    real_mkdtemp = pool_module.tempfile.mkdtemp
    monkeypatch.setattr(pool_module.tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1])
    v = Verifier(memory_mb=64)  # below the zygote's own address space: start must refuse, and clean up
    with pytest.raises(ValueError, match="memory_mb"):
        v.start()
    assert made and not os.path.exists(made[0]) and v._zygotes == []


def test_benchmark_policy_entry_point_and_scripts():
    with Verifier(timeout_s=2.0, memory_mb=512, policy=BENCHMARK_POLICY) as v:
        program = (
            "from typing import List\nclass Box:\n    def __init__(self, x):\n        super().__init__()\n"
            "        self.x = x\ndef has_close_elements(xs: List[float], t: float) -> bool:\n"
            "    return any(abs(a - b) < t for i, a in enumerate(xs) for b in xs[i + 1:])"
        )
        (results,) = v.run_many(
            [(program, ["[1.0, 2.0, 3.9, 4.0], 0.3", "[1.0, 2.0], 0.5", "None, 1"])], entry_point="has_close_elements"
        )
        assert [r.status for r in results] == ["ok", "ok", "runtime_error"]
        assert [r.output for r in results[:2]] == ["True", "False"]
        script = (
            "import sys\nn = int(input())\nvals = list(map(int, sys.stdin.read().split()))\n"
            "print(sum(vals[:n]))\nsys.exit(0)"
        )
        fast_io = "data = open(0).read().split()\nprint(max(map(int, data)))\nexit()"
        out = v.run_script_many(
            [
                (script, "2\n5 7 9\n"),
                (fast_io, "3 8 1"),
                ("print(1/0)", ""),
                ("while True:\n    print('y' * 10000)", ""),
                ("open('/etc/passwd')", ""),
            ],
            1.0,
        )
        assert [(o.status, o.stdout) for o in out[:2]] == [("ok", "12\n"), ("ok", "8\n")]
        assert [o.status for o in out[2:]] == ["runtime_error", "timeout", "runtime_error"]


# ---------------------------------------------------------------- AZR's seed corpus
STRICTER_RULES = {
    "input_not_literal",
    "output_not_literal",
    "banned_import",
    "banned_call",
    "nondeterministic",
    "output_too_long",
    "input_too_long",
}


@pytest.mark.slow
def test_agreement_with_azr_seed_tasks(capsys):
    """>= 95% of AZR's accepted seed tasks validate with AZR's outputs; the rest break a stricter rule.

    Left out: outputs AZR truncated (400 chars + "...") and AZR's error marker "" (an empty
    string is not the repr of anything: AZR recorded a failed run as accepted), and code_f sets
    with repeated inputs (rejected here on purpose: a repeated hidden input lets a lookup table pass).
    """
    if not SEEDS.is_dir():
        pytest.skip(f"{SEEDS} is absent (AZR seed tasks beside the checkout)")
    totals = {"agree": 0, "counted": 0}
    # Pinned seeds keep the corpus numbers reproducible: a few seed programs depend on hash order
    # (max over a set with ties) and agree with AZR's record only for some seed pairs.
    with (
        Verifier(workers=4, hash_seeds=(1, 2)) as verifier,
        capsys.disabled(),
    ):  # default limits: some programs run ~1 s
        print("\nfile                               agree/counted  rate   rejections")
        for path in sorted(SEEDS.glob("*.jsonl")):
            records = [json.loads(line) for line in path.read_text().splitlines()]
            golds = [r.get("outputs") or [r["output"]] for r in records]
            proposals = [
                Proposal("code_f", r["snippet"], tuple(r["inputs"]), r["message"] or "-")
                if "inputs" in r
                else Proposal("code_o", r["snippet"], (r["input"],))
                for r in records
            ]
            agree, counted, rejections, mismatches = 0, 0, {}, 0
            for result, gold in zip(verifier.validate_many(proposals), golds):
                if any(o == "" or (len(o) == 403 and o[200:203] == "...") for o in gold):
                    continue
                if isinstance(result, Invalid) and result.reason == "duplicate_inputs":
                    # Our deliberate rule, not a disagreement: AZR kept 84 code_f sets with repeated inputs.
                    totals["repeated"] = totals.get("repeated", 0) + 1
                    continue
                counted += 1
                if isinstance(result, Invalid):
                    rejections[result.reason] = rejections.get(result.reason, 0) + 1
                elif all(values_equal(parse_literal(a), parse_literal(g)) for a, g in zip(result.outputs, gold)):
                    agree += 1
                else:
                    mismatches += 1
            print(f"{path.name:36s} {agree:4d}/{counted:<4d}  {agree / counted:.3f}  {rejections}")
            assert set(rejections) <= STRICTER_RULES and mismatches == 0, (path.name, rejections, mismatches)
            totals["agree"] += agree
            totals["counted"] += counted
        rate = totals["agree"] / totals["counted"]
        print(
            f"{'all':36s} {totals['agree']:4d}/{totals['counted']:<4d}  {rate:.3f}  "
            f"(+{totals.get('repeated', 0)} code_f sets with repeated inputs, rejected by design)"
        )
    assert rate >= 0.95


@pytest.mark.slow
def test_proposers_own_answers_always_pass(verifier):
    """The gold answer of every validated task passes check: its output, its input, its program."""
    if not SEEDS.is_dir():
        pytest.skip(f"{SEEDS} is absent (AZR seed tasks beside the checkout)")
    records = [
        json.loads(line)
        for name in ("7b_code_f_seed_io.jsonl", "7b_seed_io.jsonl")
        for line in (SEEDS / name).read_text().splitlines()[:40]
    ]
    proposals = []
    for r in records:
        if "inputs" in r:
            proposals.append(Proposal("code_f", r["snippet"], tuple(r["inputs"]), r["message"] or "-"))
        else:
            proposals += [Proposal(kind, r["snippet"], (r["input"],)) for kind in ("code_o", "code_i")]
    tasks = [t for t in verifier.validate_many(proposals) if isinstance(t, Task)]
    golds = {"code_o": lambda t: t.outputs[0], "code_i": lambda t: t.inputs[0], "code_f": lambda t: t.program}
    assert len(tasks) > 90 and {t.kind for t in tasks} == {"code_o", "code_i", "code_f"}
    assert all(v.passed for v in verifier.judge_many([(t, golds[t.kind](t)) for t in tasks]))
