"""The sandboxed side of `official.py`: official evalplus 0.3.1 judging completions inside OS isolation.

Run as a script, ``python -I -B official_sandbox.py CONFIG_JSON`` (-I: no PYTHONPATH, no user site,
not the script's folder on sys.path; the environment is the few variables `official.py` passes).
In this order, so that nothing a model wrote exists in the process before the walls stand:

  1. import evalplus (`evalplus.eval`, `evalplus.gen.util`, the data loaders) and read the local
     HumanEval+ / MBPP+ files (`HUMANEVAL_OVERRIDE_PATH` / `MBPP_OVERRIDE_PATH`), offline;
  2. enter new namespaces (`isolation.enter_namespaces`: this process continues as pid 1) and
     pivot into a root that holds only Python, site-packages and the system libraries, read-only
     (`official._read_only_paths`), plus fresh size-limited tmpfs on /tmp and /dev/shm (evalplus
     chdirs into a temp dir; multiprocessing.Value needs shared memory);
  3. rlimits, no_new_privs, every capability dropped (as root: an unprivileged uid of its own),
     the parent-death signal set again after the credential change;
  4. only then read the request (programs to check) from stdin, and answer on a pipe no candidate
     process can reach (closed in every forked child).

Standard library and evalplus only: the project's package is not imported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import json
import os
import resource
import select
import signal
import sys
import types

PR_SET_DUMPABLE = 4
NPROC = 64
"""Processes (threads count) the sandbox's uid may have: evalplus forks one per check; a fork bomb stops here."""


def _load_evalplus() -> tuple[types.ModuleType, object, dict]:
    """(evalplus.eval, trusted_exec, {dataset: {task_id: problem}}) from the override files in the env."""
    import evalplus

    if "evalplus.data" not in sys.modules:  # its __init__ imports `datasets` for EvalPerf only
        package = types.ModuleType("evalplus.data")
        package.__path__ = [os.path.join(os.path.dirname(evalplus.__file__), "data")]
        sys.modules["evalplus.data"] = package
    data = {}
    if os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
        data["humaneval"] = importlib.import_module("evalplus.data.humaneval").get_human_eval_plus()
    if os.environ.get("MBPP_OVERRIDE_PATH"):
        data["mbpp"] = importlib.import_module("evalplus.data.mbpp").get_mbpp_plus()
    official = importlib.import_module("evalplus.eval")
    trusted_exec = importlib.import_module("evalplus.gen.util").trusted_exec
    import multiprocessing.heap  # noqa: F401 - what untrusted_check's Value/Array use, loaded while / is whole
    import multiprocessing.sharedctypes  # noqa: F401
    import multiprocessing.synchronize  # noqa: F401

    import psutil

    memory = psutil.virtual_memory()  # evalplus reads it in every check; /proc is gone after the pivot
    psutil.virtual_memory = lambda: memory  # the same value it would read
    return official, trusted_exec, data


def _ground_truth(trusted_exec, problem: dict, not_none: bool) -> dict:
    """evalplus/evaluate.py `get_groundtruth` for one task (trusted: the dataset's own solution)."""
    code = problem["prompt"] + problem["canonical_solution"]
    oracle: dict = {}
    for key in ("base", "plus"):
        try:
            oracle[key], oracle[f"{key}_time"] = trusted_exec(
                code, problem[f"{key}_input"], problem["entry_point"], record_time=True, output_not_none=not_none
            )
        except MemoryError:  # Mbpp/255's reference on its plus inputs (evalplus itself stops there)
            n = len(problem[f"{key}_input"])
            oracle[key], oracle[f"{key}_time"] = [None] * n, [0.0] * n
    return oracle


def _check(official, dataset: str, problem: dict, solution: str, expected: dict) -> list:
    """evalplus/evaluate.py `check_correctness` as `evaluate` calls it (fast check, base and plus):
    [base passed, base and plus passed, status of the first set that did not pass or "pass"]. As
    pid 1 of a PID namespace, whatever a candidate left running is killed after each set."""
    status = {}
    for key in ("base", "plus"):
        if os.getpid() == 1:
            _kill_the_rest()
        status[key], _ = official.untrusted_check(
            dataset,
            solution,
            problem[f"{key}_input"],
            problem["entry_point"],
            expected=expected[key],
            atol=problem["atol"],
            ref_time=expected[f"{key}_time"],
            fast_check=True,
        )
    base, plus = status["base"] == official.PASS, status["plus"] == official.PASS
    why = "pass" if base and plus else f"base {status['base']}" if not base else f"plus {status['plus']}"
    return [base, base and plus, why]


def _isolate(cfg: dict, libc, isolation: types.ModuleType) -> dict:
    """Steps 2 and 3; returns the facts (level "none": nothing was done unless opted in)."""
    facts: dict = {"level": "none"}
    alive = None  # the read end of a pipe whose write end the waiter outside the PID namespace keeps
    if cfg["namespaces"]:
        alive, alive_w = os.pipe()
        entered = isolation.enter_namespaces(libc, os.getuid(), os.getgid(), True)
        os.close(alive_w)
        if "error" in entered:
            os.close(alive)
            alive, facts["why_not"] = None, entered["error"]
        else:
            isolation.pivot_to_read_only_root(libc, cfg["mountpoint"], cfg["read_only"], cfg["tmpfs"])
            facts = dict(entered, level="namespaces", root="read-only: " + ", ".join(cfg["read_only"]))
    if facts["level"] == "none" and not cfg["allow_unsafe_no_isolation"]:
        return facts
    memory = cfg["memory_mb"] * 1024 * 1024
    for res, value in (
        (resource.RLIMIT_AS, (memory, memory)),  # >= evalplus's own 4 GiB per check, which it sets lower
        (resource.RLIMIT_NPROC, (NPROC, NPROC)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_FSIZE, (64 << 20, 64 << 20)),
        (resource.RLIMIT_NOFILE, (256, 256)),
    ):
        resource.setrlimit(res, value)
    uid = cfg["uid"] if os.geteuid() == 0 else None
    isolation.drop_privileges(libc, uid)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no candidate may ptrace pid 1 (or another candidate)
    facts |= {"no_new_privs": True, "uid": uid}
    if alive is not None:
        isolation.set_parent_death(libc, lambda: bool(select.select([alive], [], [], 0)[0]))
    else:
        isolation.set_parent_death(libc, lambda: os.getppid() != cfg["owner_pid"])
    return facts


def _kill_the_rest() -> None:
    """As pid 1 of the sandbox's PID namespace: kill every other process in it and reap them all
    (orphans come to pid 1; unreaped they would count against RLIMIT_NPROC)."""
    while True:  # again after each reap: a process forked while the first kill went round dies too
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> None:
    cfg = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    # by its path: -I keeps the project's package off sys.path
    spec = importlib.util.spec_from_file_location("populora_isolation", cfg["isolation_py"])
    assert spec is not None and spec.loader is not None
    isolation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(isolation)
    isolation.set_parent_death(libc, lambda: os.getppid() != cfg["owner_pid"])
    answer_fd = 1

    def answer(obj: dict) -> None:
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(answer_fd, data) :]

    try:
        official, trusted_exec, datasets = _load_evalplus()  # step 1: before any completion exists here
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        answer({"error": f"evalplus did not load: {type(e).__name__}: {e}", "kind": "evalplus"})
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        facts = _isolate(cfg, libc, isolation)
    except OSError as e:  # half-isolated: say why and judge nothing
        answer({"error": f"namespace setup failed: {e}", "kind": "isolation"})
        return
    if facts["level"] == "none" and not cfg["allow_unsafe_no_isolation"]:
        answer({"error": facts.get("why_not", "namespaces disabled"), "kind": "isolation"})
        return
    answer_fd = os.dup(1)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    request = b""
    while chunk := os.read(0, 1 << 20):  # step 4: the programs, now that the walls stand
        request += chunk
    os.dup2(devnull, 0)
    os.register_at_fork(after_in_child=lambda: os.close(answer_fd))  # no candidate reaches the answer pipe
    jobs = json.loads(request)
    expected: dict = {}
    for dataset, task_id in {(j["dataset"], j["task_id"]) for j in jobs}:
        problem = datasets[dataset][task_id]
        not_none = dataset == "mbpp" and problem["entry_point"] in official.MBPP_OUTPUT_NOT_NONE_TASKS
        expected[dataset, task_id] = _ground_truth(trusted_exec, problem, not_none)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # trusted_exec's handler: a candidate's SIGALRM must not reach it
    verdicts = []
    for j in jobs:
        problem = datasets[j["dataset"]][j["task_id"]]
        try:
            verdicts.append(
                _check(official, j["dataset"], problem, j["solution"], expected[j["dataset"], j["task_id"]])
            )
        except Exception as e:  # noqa: BLE001 - e.g. no fork left: this candidate's verdict, not the batch's
            verdicts.append([False, False, f"error {type(e).__name__}"])
    if os.getpid() == 1:
        _kill_the_rest()
    answer({"verdicts": verdicts, "isolation": facts})


if __name__ == "__main__":
    main()
