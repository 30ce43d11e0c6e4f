"""The sandbox's OS layer (isolation.py) as an ordinary user and as root: hostile programs that
have walked around the static policy, checked from the host; the result channel's caps; cleanup
no program can break; random hash seeds; the refusal to run without isolation (issue 18)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from populora_nb.tasks import Task
from populora_nb.verify import TASK_POLICY, Proposal, SandboxError, Verifier, parse_literal, values_equal
from populora_nb.verify.isolation import remove_tree

ROOT = os.geteuid() == 0
NOBODY = 65534
PACKAGE = Path(__file__).resolve().parents[1] / "populora_nb"
# The static layer and the in-child stubs switched off: only the OS layer stands.
OPEN_POLICY = replace(
    TASK_POLICY,
    allowed_modules=TASK_POLICY.allowed_modules | {"os", "sys", "socket", "signal", "time"},
    banned_modules=frozenset(),
    banned_names=frozenset(),
    banned_attributes=frozenset(),
    disable_dangerous=False,
    guard_imports=False,
)
# The route of the adversarial round: the sandbox's own untouched `os`, reached from `typing`.
REACH_OS = "import typing\ndef _os():\n    return getattr(getattr(typing, 'sys').modules['__main__'], '_OS')\n"


# ---------------------------------------------------------------- in-process (this user)
def test_isolation_is_reported_by_the_zygotes_and_matches_what_a_program_sees():
    with Verifier(timeout_s=1.0, memory_mb=256, workers=1, policy=OPEN_POLICY) as v:
        iso = v.isolation
        assert iso.level in ("namespaces", "root-chroot") and str(iso).startswith(iso.level)
        probe = REACH_OS + (
            "def f(a):\n    o = _os()\n    try:\n        o.mkdir('/x')\n        wrote = True\n"
            "    except OSError:\n        wrote = False\n    return [o.getpid(), o.listdir('/'), wrote]"
        )
        result = v.run_many([(probe, ["0"])])[0][0]
        pid, listing, wrote = parse_literal(result.output or repr(result))
        assert listing == [] and not wrote
        if iso.level == "namespaces":
            assert iso.pid_namespace and pid < 10 and iso.user_namespace == (not ROOT)
            assert v._base_dir is None  # nothing of the sandbox on the host filesystem


def test_without_namespaces_root_falls_back_and_anyone_else_is_refused(ordinary_user):
    if not ROOT:
        with pytest.raises(SandboxError, match="allow_unsafe_no_isolation"):
            Verifier(namespaces=False).start()
        return
    with Verifier(timeout_s=1.0, memory_mb=256, workers=1, namespaces=False) as v:
        assert v.isolation.level == "root-chroot"
    out = _run_as_ordinary_user(REFUSAL_SCRIPT, [], ordinary_user)
    assert out["refused"].startswith("no OS-level isolation") and "allow_unsafe_no_isolation=true" in out["refused"]
    assert out["unsafe_level"] == "none" and out["default_level"] == "namespaces"


def test_forged_result_lines_are_capped_and_checked_as_data():
    """A program that reaches the result pipe writes what it likes, and that is all it gets: the
    zygote reads at most the cap for its inputs, the parent parses the rest as literals."""
    flood = REACH_OS + (
        'def f(a):\n    o = _os()\n    line = b\'{"status": "ok", "output": "\' + b\'1\' * 10_000_000 + b\'"}\\n\'\n'
        "    o.write(3, line)\n    o._exit(0)"
    )
    not_literal = (
        REACH_OS + 'def f(a):\n    _os().write(3, b\'{"status": "ok", "output": "object()"}\\n\')\n    _os()._exit(0)'
    )
    many = REACH_OS + 'def f(a):\n    _os().write(3, b\'{"status": "ok", "output": "1"}\\n\' * 100)\n    _os()._exit(0)'
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Verifier(timeout_s=2.0, memory_mb=256, workers=1, policy=OPEN_POLICY) as v:
        results = v.validate_many(
            [
                Proposal("code_o", flood, ("0",)),
                Proposal("code_o", not_literal, ("0",)),
                Proposal("code_f", many, ("1", "2"), "m"),
            ]
        )
        assert [r.reason for r in results[:2]] == ["output_too_long", "output_not_literal"], results
        assert isinstance(results[2], Task) and results[2].outputs == ("1", "1")  # one line per input, no more
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: never 10 MB parsed


def test_nested_directories_never_break_close(tmp_path):
    """1,500 nested mkdir/chdir: with namespaces nothing can be created; without them (root-chroot
    or the unsafe level) the run directory is removed without recursion, and close() never raises."""
    bomb = REACH_OS + (
        "def f(a):\n    o = _os()\n    for _ in range(1500):\n        o.mkdir('d' * 200)\n"
        "        o.chdir('d' * 200)\n    return 1"
    )
    for namespaces in (True, False):
        with Verifier(
            timeout_s=5.0,
            memory_mb=256,
            workers=1,
            policy=OPEN_POLICY,
            namespaces=namespaces,
            allow_unsafe_no_isolation=True,
        ) as v:
            result = v.run_many([(bomb, ["0"])])[0][0]
            base = v._base_dir
            assert result.status == ("runtime_error" if v.isolation.level == "namespaces" else "ok"), result
        assert base is None or not os.path.exists(base)
    deep = tmp_path / "deep"
    os.makedirs(deep)
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(3000):  # deeper than the recursion limit and PATH_MAX, built with dir fds
        os.mkdir("d" * 100, dir_fd=fd)
        fd2 = os.open("d" * 100, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = fd2
    os.close(fd)
    remove_tree(str(deep))
    assert not deep.exists()


def test_hash_seeds_are_random_distinct_and_renewed():
    a, b = Verifier(), Verifier()
    assert a.hash_seeds[0] != a.hash_seeds[1] and a.hash_seeds != b.hash_seeds
    assert all(1 <= s < 2**32 for s in a.hash_seeds + b.hash_seeds)
    with pytest.raises(ValueError, match="different"):
        Verifier(hash_seeds=(3, 3))
    # A program tuned to the old fixed seeds 1 and 2: constant there, hash-dependent everywhere else.
    h = [
        int(
            subprocess.run(
                [sys.executable, "-S", "-c", "print(hash('abc'))"],
                env={"PYTHONHASHSEED": str(s)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for s in (1, 2)
    ]
    tuned = f"def f(a):\n    h = hash(a)\n    return 0 if h in ({h[0]}, {h[1]}) else h"
    with Verifier(timeout_s=1.0, memory_mb=256, workers=1, reseed_every=2) as v:
        first = v.hash_seeds
        for _ in range(3):
            assert v.validate("code_o", tuned, ["'abc'"]).reason == "nondeterministic"
        assert v.hash_seeds != first and v.isolation.hash_seeds == v.hash_seeds  # renewed after 2 validations
    with Verifier(timeout_s=1.0, memory_mb=256, workers=1, hash_seeds=(1, 2)) as fixed:
        assert isinstance(fixed.validate("code_o", tuned, ["'abc'"]), Task)  # why fixed seeds were a hole


def test_negative_zero_equals_zero_as_documented():
    """Decided with evalplus and AZR (==): 0.0 and -0.0 are the same answer, and so is 0 (issue #28:
    answers are judged with AZR's ==); as inputs or repeated runs 0 and 0.0 differ (values_equal)."""
    assert values_equal(0.0, -0.0) and values_equal([0.0, 1j], [-0.0, 1j]) and not values_equal(0, 0.0)
    assert "-0.0" in values_equal.__doc__
    with Verifier(timeout_s=1.0, memory_mb=256, workers=1) as v:
        task = v.validate("code_o", "def f(a):\n    return a * 0.0", ["1.0"])
        assert task.outputs == ("0.0",) and v.check(task, "-0.0") and v.check(task, "0") and not v.check(task, "'0'")


# ---------------------------------------------------------------- as an ordinary user, checked from the host
HOSTILE_SCRIPT = """
import json, os, sys
from dataclasses import replace
from populora_nb.verify import TASK_POLICY, Verifier
from populora_nb.verify.static_policy import compile_program
canary, port = sys.argv[1], int(sys.argv[2])
open_policy = replace(TASK_POLICY, allowed_modules=TASK_POLICY.allowed_modules | {"os", "sys", "socket", "signal"},
                      banned_modules=frozenset(), banned_names=frozenset(), banned_attributes=frozenset(),
                      disable_dangerous=False, guard_imports=False)
reach = __REACH__
programs = {
    "read_files": reach + "def f(p):\\n    o = _os()\\n"
    "    return [o.read(o.open(x, 0), 100).decode() for x in ('/etc/passwd', p)]",
    "overwrite": reach + "def f(p):\\n    o = _os()\\n"
    "    o.write(o.open(p, o.O_WRONLY | o.O_TRUNC), b'pwned')\\n    return 1",
    "delete": reach + "def f(p):\\n    o = _os()\\n    o.unlink(p)\\n    return 1",
    "create": reach + "def f(p):\\n    o = _os()\\n"
    "    o.close(o.open(p + '.new', o.O_CREAT | o.O_WRONLY))\\n    return 1",
    "connect": reach + "import socket\\ndef f(p):\\n    s = socket.socket()\\n    s.settimeout(1)\\n"
    "    s.connect(('127.0.0.1', %(port)d))\\n    return 1",
    "kill_owner": reach + "def f(p):\\n    _os().kill(%(owner)d, 9)\\n    return 1",
    "kill_everyone": reach + "def f(p):\\n    _os().kill(-1, 9)\\n    return 1",
}
report = {}
with Verifier(timeout_s=2.0, memory_mb=256, workers=1, policy=open_policy) as v:
    report["level"] = v.isolation.level
    for name, program in programs.items():
        program = program % {"port": port, "owner": os.getpid()}
        (results,) = v.run_many([(program, [repr(canary)])])
        report[name] = [r.status + ": " + (r.output or r.detail)[:120] for r in results]
    report["task_policy"] = compile_program(programs["kill_everyone"]).reason  # the fast filter still says why
    report["alive"] = v.run_many([("def f(a):\\n    return a", ["7"])])[0][0].output
print(json.dumps(report))
""".replace("__REACH__", repr(REACH_OS))
REFUSAL_SCRIPT = """
import json
from populora_nb.verify import SandboxError, Verifier
out = {}
try:
    Verifier(namespaces=False).start()
except SandboxError as e:
    out["refused"] = str(e)
with Verifier(namespaces=False, allow_unsafe_no_isolation=True, workers=1) as v:
    out["unsafe_level"] = v.isolation.level
with Verifier(workers=1) as v:
    out["default_level"] = v.isolation.level
print(json.dumps(out))
"""
OWNER_SCRIPT = """
import sys
from dataclasses import replace
from populora_nb.verify import TASK_POLICY, Verifier
policy = replace(TASK_POLICY, allowed_modules=TASK_POLICY.allowed_modules | {"sys"}, banned_modules=frozenset(),
                 banned_attributes=frozenset())  # the static filter lets the route through
v = Verifier(timeout_s=60.0, memory_mb=256, workers=1, allow_unsafe_no_isolation=True, namespaces=sys.argv[1] == "1",
             policy=policy)
v.start()
print("ready", flush=True)
print(v.run_many([(__REACH__ + "def f(a):\\n    _os().kill(_os().getpid(), 19)\\n    return 1", ["0"])])[0])
""".replace("__REACH__", repr(REACH_OS))


@pytest.fixture(scope="module")
def ordinary_user(tmp_path_factory):
    """(argv prefix, env, home): how to run Python as uid 65534 with a copy of the package it can
    read (the checkout and its venv may sit under a directory nobody can traverse, as /root)."""
    if not ROOT:
        # Already an ordinary user: run as ourselves (a generator fixture must yield, not return).
        yield [sys.executable], {"PYTHONPATH": str(PACKAGE.parent)}, tmp_path_factory.mktemp("user")
        return
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run as an ordinary user")
    top = Path(tempfile.mkdtemp(prefix="populora-isolation-test-"))
    os.chmod(top, 0o755)  # only this temporary copy is opened to others, never the checkout
    shutil.copytree(PACKAGE, top / "populora_nb", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [top, *top.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    home = top / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    env = {"PYTHONPATH": str(top), "PATH": "/usr/bin:/bin"}
    candidates = [
        sys.executable,
        os.path.realpath(sys.executable),
        sys._base_executable,
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ]
    for python in dict.fromkeys(candidates):  # the first interpreter uid 65534 can run
        start = "from populora_nb.verify import Verifier; Verifier(workers=1, allow_unsafe_no_isolation=True).start()"
        probe = subprocess.run(prefix + [python, "-c", start], env=env, cwd=home, capture_output=True, timeout=60)
        if probe.returncode == 0:
            yield prefix + [python], env, home
            shutil.rmtree(top, ignore_errors=True)
            return
    shutil.rmtree(top, ignore_errors=True)
    pytest.skip("no Python interpreter that uid 65534 can run")


def _run_as_ordinary_user(script: str, args: list, user=None) -> dict:
    prefix, env, home = user
    out = subprocess.run(prefix + ["-c", script, *args], env=env, cwd=home, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _marker(env: dict) -> str:
    return str(Path(env["PYTHONPATH"]) / "populora_nb" / "verify" / "sandbox.py")


def _sandbox_processes(marker: str) -> list[int]:
    """Processes whose command line names this test's copy of sandbox.py (zygotes and their runs)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            pass
    return pids


def _sandbox_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("populora-sandbox-*")}


def test_hostile_programs_as_an_ordinary_user(ordinary_user):
    user = ordinary_user
    prefix, env, home = user
    canary = home / "canary.txt"
    canary.write_text("keep")
    if ROOT:
        os.chown(canary, NOBODY, NOBODY)
    bystander = subprocess.Popen(prefix[:-1] + ["sleep", "120"]) if ROOT else subprocess.Popen(["sleep", "120"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    dirs = _sandbox_dirs()
    try:
        report = _run_as_ordinary_user(HOSTILE_SCRIPT, [str(canary), str(listener.getsockname()[1])], user)
        assert report["level"] == "namespaces", report
        for name in ("read_files", "overwrite", "delete", "create"):  # the host's files are not even visible
            assert report[name][0].startswith("runtime_error: FileNotFoundError"), (name, report[name])
        assert report["connect"][0].startswith("runtime_error: OSError"), report["connect"]  # no network
        assert report["kill_owner"][0].startswith("runtime_error: ProcessLookupError"), report["kill_owner"]
        assert report["kill_everyone"][0] in ("ok: 1", "runtime_error: ProcessLookupError: [Errno 3] No such process")
        assert report["task_policy"] == "banned_attribute" and report["alive"] == "7"
        assert canary.read_text() == "keep" and sorted(p.name for p in home.iterdir()) == ["canary.txt"]
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert bystander.poll() is None  # kill(-1, 9) reached nobody outside its PID namespace
        assert not _sandbox_processes(_marker(env))
        assert _sandbox_dirs() <= dirs
    finally:
        listener.close()
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "unsafe_none"])
def test_kill_9_of_the_owner_leaves_no_process_and_no_directory(ordinary_user, namespaces):
    user = ordinary_user
    """A run blocked in signal.pause(); the owner dies by SIGKILL: every sandbox process follows it
    (PID namespace, or the parent-death signal set again after the uid switch), and a directory
    left behind is swept by the next Verifier of that user."""
    prefix, env, home = user
    marker = _marker(env)
    owner = subprocess.Popen(
        prefix + ["-c", OWNER_SCRIPT, "1" if namespaces else "0"],
        env=env,
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the run is blocked in pause() by now
        assert len(_sandbox_processes(marker)) >= 2
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while _sandbox_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _sandbox_processes(marker)
        if not namespaces:  # the unsafe level's run directory outlived its owner: the next start sweeps it
            _run_as_ordinary_user(REFUSAL_SCRIPT, [], user)
        stale = [
            p
            for p in Path(tempfile.gettempdir()).glob("populora-sandbox-*")
            if p.stat().st_uid == (NOBODY if ROOT else os.geteuid()) and not _pid_alive(p.name.split("-")[2])
        ]
        assert stale == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
