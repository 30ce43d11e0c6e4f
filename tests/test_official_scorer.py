"""``python benchmarks/official.py``: official evalplus 0.3.1 judging completions inside OS isolation
(`benchmarks/official.py`, issue 21; it left the package in issue 57).

(a) In the sandbox it judges as it does outside (evalplus called directly here, only on the
dataset's references and their mutants: trusted programs), and as the project scorer does;
(b) a hostile candidate is contained and still gets its verdict; (c) the CLI refuses cleanly
without evalplus, and the scorer refuses without isolation unless opted in; the report names the
scorer of each number.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from scripted import DATA, NO_DATA

from populora_nb.evaluation.benchmarks import EvalResult, Score, _finish, project_scorer
from populora_nb.evaluation.loaders import load_benchmark
from populora_nb.evaluation.programs import evalplus_program
from populora_nb.evaluation.report import format_table, summary_table
from populora_nb.verify.isolation import CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER
from populora_nb.verify.zygote import IsolationUnavailable

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("official", ROOT / "benchmarks" / "official.py")
assert _SPEC is not None and _SPEC.loader is not None
official = sys.modules.get(_SPEC.name) or importlib.util.module_from_spec(_SPEC)
if _SPEC.name not in sys.modules:
    sys.modules[_SPEC.name] = official  # loaded once per process, like evalplus_crosscheck
    _SPEC.loader.exec_module(official)
main = official.main
SHARED = DATA
HAVE_DATA = (SHARED / "humanevalplus").is_dir() and (SHARED / "mbppplus").is_dir()
HAVE_EVALPLUS = all(importlib.util.find_spec(m) is not None for m in official.NEEDED_MODULES)
TASKS = {
    "humanevalplus": ["HumanEval/0", "HumanEval/2", "HumanEval/12", "HumanEval/35", "HumanEval/58"],
    "mbppplus": ["Mbpp/2", "Mbpp/3", "Mbpp/4", "Mbpp/6", "Mbpp/7"],
}


def _namespaces_refused() -> str:
    """Why the kernel refuses new user/mount/PID namespaces here ("" when it allows them)."""
    probe = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"ok = libc.unshare({CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID}) == 0\n"
        "print('' if ok else os.strerror(ctypes.get_errno()))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or ("" if out.returncode == 0 else out.stderr[-200:])


NEEDS_EVALPLUS = pytest.mark.skipif(not HAVE_EVALPLUS, reason="evalplus 0.3.1 is the optional [evalplus] extra")
NEEDS_DATA = pytest.mark.skipif(not HAVE_DATA, reason=f"{NO_DATA} (looked in {SHARED})")


@pytest.fixture(scope="module")
def namespaces():
    why = _namespaces_refused()
    if why:
        pytest.skip(f"the kernel forbids user/mount/PID namespaces here ({why}): nothing to isolate with")


def _crosscheck():
    """benchmarks/evalplus_crosscheck.py as a module: its offline official loader and mutants. Loaded once
    per process: a second load would replace the module whose functions test_evalplus_crosscheck's process
    pool pickles by name (both files can share an xdist worker)."""
    if "evalplus_crosscheck" in sys.modules:
        return sys.modules["evalplus_crosscheck"]
    spec = importlib.util.spec_from_file_location("evalplus_crosscheck", ROOT / "benchmarks" / "evalplus_crosscheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _broken(cc, reference: str, entry: str) -> str:
    """A mutant of the reference, or one that returns None when no mutation applies."""
    return (
        cc.mutant(reference, "swapped_comparison")
        or cc.mutant(reference, "off_by_one")
        or (f"{reference}\ndef {entry}(*args):\n    return None\n")
    )


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


# ---------------------------------------------------------------- (a) same verdicts
@pytest.mark.slow
@NEEDS_EVALPLUS
@NEEDS_DATA
def test_sandboxed_official_verdicts_equal_unsandboxed_and_project(namespaces):
    from populora_nb.evaluation import evalplus_scoring as bs
    from populora_nb.evaluation.benchmarks import benchmark_verifier

    cc = _crosscheck()
    theirs_official, trusted_exec, data = cc.official_modules()
    problems, completions = [], []
    for bench, ids in TASKS.items():
        by_id = {p.id: p for p in load_benchmark(bench, SHARED)}
        for task_id in ids:
            p = by_id[task_id]
            reference = p.question + p.canonical_solution
            for code in (reference, _broken(cc, reference, p.entry_point)):
                problems.append(p)
                completions.append(_fenced(code))
    programs = [evalplus_program(p, c) for p, c in zip(problems, completions)]

    started = time.perf_counter()
    sandboxed = official.score_official(problems, completions, SHARED, workers=2)
    sandbox_s = time.perf_counter() - started
    assert all(
        i["level"] == "namespaces" and i["pid_namespace"] and i["network_namespace"] for i in sandboxed.isolation
    )

    expected = {}
    direct = []  # evalplus called here, unsandboxed: only on the dataset's references and their mutants
    for p, program in zip(problems, programs):
        problem = data[p.benchmark][p.id]
        not_none = p.benchmark == "mbppplus" and p.entry_point in bs.MBPP_OUTPUT_NOT_NONE_TASKS
        if p.id not in expected:
            expected[p.id] = cc.official_ground_truth(trusted_exec, problem, not_none)
        dataset = official.OFFICIAL_DATASET[p.benchmark]
        direct.append(cc.official_check(theirs_official, dataset, problem, program, expected[p.id]))

    with benchmark_verifier(workers=2) as verifier:
        truths = dict(zip((p.id for p in problems), bs.evalplus_ground_truth(problems, verifier)))
        mine = bs.score_evalplus(problems, completions, [truths[p.id] for p in problems], verifier)

    assert len(problems) == 20
    assert [v[:2] for v in sandboxed.verdicts] == [tuple(d) for d in direct]
    assert [v[:2] for v in sandboxed.verdicts] == [m[:2] for m in mine]
    assert [v[1] for v in sandboxed.verdicts[::2]] == [True] * 10  # the references pass
    assert sum(v[1] for v in sandboxed.verdicts[1::2]) <= 2  # the mutants (mostly) fail
    print(f"\n20 candidates, official in the sandbox: {sandbox_s:.1f} s; verdicts {sandboxed.verdicts}")


# ---------------------------------------------------------------- (b) hostile candidates
HOSTILE = """
import io, posix, socket, signal, time

def _attack():
    held = 0
    try:
        with io.open(__CANARY__, "w") as fh:
            fh.write("overwritten")
    except OSError:
        held += 1
    try:
        posix.mkdir(__DIR__ + "/made-by-candidate")
    except OSError:
        held += 1
    try:
        s = socket.create_connection(("127.0.0.1", __PORT__), timeout=2)
        s.sendall(b"hello from the sandbox")
    except OSError:
        held += 1
    for fd in range(3, 64):  # a forged, unterminated answer on every descriptor it may have
        try:
            posix.write(fd, b'{"verdicts": [[true, true, "pass"]]')
        except OSError:
            pass
    if posix.fork() == 0:  # a process left behind, in a session of its own
        posix.setsid()
        time.sleep(600)
    for pid in (__PID__, posix.getppid(), -1):
        try:
            posix.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return held

_HELD = _attack()
"""


@pytest.mark.slow
@NEEDS_EVALPLUS
@NEEDS_DATA
@pytest.mark.parametrize("as_user", [False, True], ids=["as-is", "user-namespace"])
def test_hostile_candidate_is_contained_and_still_judged(namespaces, tmp_path, as_user):
    if as_user and (os.geteuid() != 0 or shutil.which("unshare") is None):
        pytest.skip("the user-namespace path is exercised as root with unshare(1) (elsewhere it is the default)")
    own = tmp_path / "owned"
    own.mkdir(mode=0o777)
    os.chmod(own, 0o777)  # writable by anyone: only the mount namespace stands in the way
    canary = own / "canary.txt"
    canary.write_text("keep")
    os.chmod(canary, 0o666)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    p = next(x for x in load_benchmark("humanevalplus", SHARED) if x.id == "HumanEval/0")
    hostile = (
        HOSTILE.replace("__CANARY__", repr(str(canary)))
        .replace("__DIR__", repr(str(own)))
        .replace("__PORT__", str(port))
        .replace("__PID__", str(os.getpid()))
    )
    reference = p.question + p.canonical_solution
    fails = hostile + f"\ndef {p.entry_point}(*args):\n    return None\n"
    contained = (
        reference.replace(f"def {p.entry_point}(", "def _ref(")
        + hostile
        + (f"\ndef {p.entry_point}(*args):\n    return _ref(*args) if _HELD == 3 else None\n")
    )
    if as_user:  # this test as an ordinary uid (1000) of a user namespace: the sandbox makes its own inside
        script = (
            "import json, sys\nfrom populora_nb.evaluation.loaders import load_benchmark\n"
            f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\nfrom official import score_official\n"
            f"p = next(x for x in load_benchmark('humanevalplus', {str(SHARED)!r}) if x.id == 'HumanEval/0')\n"
            "progs = json.loads(sys.argv[1])\n"
            f"r = score_official([p, p], ['', ''], {str(SHARED)!r}, programs=progs, workers=1)\n"
            "print(json.dumps([r.verdicts, r.isolation]))"
        )
        out = subprocess.run(
            [
                "unshare",
                "-U",
                "--map-user=1000",
                "--map-group=1000",
                sys.executable,
                "-c",
                script,
                json.dumps([fails, contained]),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        verdicts, isolation = json.loads(out.stdout.strip().splitlines()[-1])
        assert isolation[0]["user_namespace"] is True
    else:
        scored = official.score_official([p, p], ["", ""], SHARED, programs=[fails, contained], workers=1)
        verdicts, isolation = [list(v) for v in scored.verdicts], scored.isolation
    try:
        conn, _ = listener.accept()
        conn.close()
        connected = True
    except BlockingIOError:
        connected = False
    finally:
        listener.close()
    assert not connected, "a candidate reached the host's loopback"
    assert canary.read_text() == "keep" and sorted(os.listdir(own)) == ["canary.txt"]
    assert verdicts[0] == [False, False, "base fail"]  # judged, not lost: returns None
    assert verdicts[1] == [True, True, "pass"]  # every attempt failed from the inside (_HELD == 3)
    assert isolation[0]["level"] == "namespaces" and isolation[0]["no_new_privs"]
    if isolation[0]["uid"] is not None:  # as root the sandbox ran as a uid of its own: nothing of it is left
        assert not [s for s in Path("/proc").glob("[0-9]*/status") if _uid_of(s) == isolation[0]["uid"]]


def _uid_of(status: Path) -> int | None:
    try:
        return int(next(x for x in status.read_text().splitlines() if x.startswith("Uid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return None


# ---------------------------------------------------------------- (c) refusals and the report
def test_cli_refuses_cleanly_without_evalplus(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "evalplus" else real(name, *a))
    assert main(["--preset", "tiny", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install evalplus==0.3.1 --no-deps" in err
    assert not (tmp_path / "eval").exists()  # refused before anything was written or loaded


@NEEDS_EVALPLUS
@NEEDS_DATA
def test_without_namespaces_it_refuses_unless_opted_in():
    p = load_benchmark("humanevalplus", SHARED, limit=1)[0]
    with pytest.raises(IsolationUnavailable, match="verifier.allow_unsafe_no_isolation=true"):
        official.score_official([p], [_fenced(p.question + p.canonical_solution)], SHARED, namespaces=False)


def test_report_names_the_scorer_of_each_number():
    rows = summary_table(
        [
            EvalResult("base", "humanevalplus", {"pass@1": 0.5}, 2, 1, scorer=official.OFFICIAL_SCORER),
            EvalResult("base", "gsm8k", {"pass@1": 0.25}, 4, 1),
        ],
        members=[],
    )
    table = format_table(rows)
    assert "| humanevalplus | 50.0 | n/a | n/a | n/a | n/a | evalplus 0.3.1 official |" in table
    assert f"| gsm8k | 25.0 | n/a | n/a | n/a | n/a | {project_scorer('math')} |" in table
    # one average per scorer: never the official evalplus number averaged with the project's
    assert [(r.scorer, r.source) for r in rows[2:]] == [
        ("evalplus 0.3.1 official", "mean of humanevalplus"),
        (project_scorer("math"), "mean of gsm8k"),
    ]
    old = EvalResult(**{k: v for k, v in asdict(EvalResult("m", "mbppplus", {}, 0, 1)).items() if k != "scorer"})
    assert old.scorer == project_scorer("evalplus") and "evalplus semantics" in old.scorer


@pytest.mark.slow
@NEEDS_EVALPLUS
@NEEDS_DATA
def test_cli_rescores_saved_completions_into_eval_evalplus(namespaces, tmp_path, capsys):
    problems = load_benchmark("humanevalplus", SHARED, limit=3)
    completions = [_fenced(p.question + p.canonical_solution) for p in problems]
    completions[2] = _fenced(f"def {problems[2].entry_point}(*args):\n    return None")
    scores = [Score(True, "pass", True), Score(True, "pass", True), Score(False, "wrong", False)]
    saved = _finish("base", "humanevalplus", problems, completions, scores, {"limit": 3}, {})
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "base__humanevalplus.json").write_text(json.dumps(asdict(saved)))
    assert main(["--preset", "tiny", "--set", f"eval.data_dir={SHARED}", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rescored = json.loads((tmp_path / "eval" / "evalplus" / "base__humanevalplus.json").read_text())
    assert rescored["scorer"] == official.OFFICIAL_SCORER and abs(rescored["pass_at_k"]["pass@1"] - 2 / 3) < 1e-9
    assert rescored["settings"]["isolation"][0]["level"] == "namespaces"
    assert "evalplus 0.3.1 official" in (tmp_path / "eval" / "evalplus" / "table.md").read_text()
    assert "| humanevalplus | 66.7 |" in out


def test_experiment_report_names_the_scorer_of_every_benchmark_row(tmp_path):
    """The experiment report shows the project table, then only the officially scored rows of an
    `benchmarks/official.py` re-score (its other rows repeat the project's)."""
    import json

    from populora_nb.analysis.report import _benchmark_section

    row = {"base": 0.1, "baseline": 0.2, "population_mean": 0.3, "best": 0.4, "worst": 0.2}
    (tmp_path / "eval" / "evalplus").mkdir(parents=True)
    project = [
        {"benchmark": "humanevalplus", **row, "scorer": "project (evalplus semantics, v2)"},
        {"benchmark": "gsm8k", **row, "scorer": "project (math)"},
    ]
    official = [
        {"benchmark": "humanevalplus", **row, "scorer": "evalplus 0.3.1 official"},
        {"benchmark": "gsm8k", **row, "scorer": "project (math)"},
        {"benchmark": "average", **row, "scorer": "project (math) + evalplus 0.3.1 official"},
    ]
    (tmp_path / "eval" / "table.json").write_text(json.dumps(project))
    (tmp_path / "eval" / "evalplus" / "table.json").write_text(json.dumps(official))
    section = _benchmark_section(tmp_path)
    assert section.table[0][-2:] == ["scorer", "data"]
    assert [(r[0], r[-2]) for r in section.table[1:]] == [
        ("humanevalplus", "project (evalplus semantics, v2)"),
        ("gsm8k", "project (math)"),
        ("humanevalplus", "evalplus 0.3.1 official"),
    ]
