"""The inside of the verifier: a warmed zygote that forks one short-lived, confined process per
program run (PopuLoRA §3 verifier; AZR's executor, hardened). Isolation levels: docs/verifier.md.

Run as a script (``python -S sandbox.py CONFIG_JSON``, by `zygote.spawn_zygote`) it imports only
the standard library and its sibling modules by plain name (its folder is ``sys.path[0]``):
`literals`, `protocol`, `lockdown` and `isolation`. Nothing from site-packages or the rest of the
project is reachable from inside, and the parent never imports this file.

Layers, outermost first; the zygote reports which ones this machine allows (hello line, `level`):
  zygote (once): the namespaces and empty read-only root of `isolation` (level "namespaces"), or
      without them, as root, an empty network namespace (level "root-chroot"); modules preloaded,
      then `lockdown` (stubs, import guard; it keeps private references for itself), ``gc.freeze``;
  child (per run): own session, killed as a group; stdin/stdout/stderr on /dev/null, every other
      fd closed; rlimits (CPU, address space, file size 0, no new processes, no core); no_new_privs
      and no capabilities (namespaces) or chroot into a fresh empty directory and an unprivileged
      uid (root-chroot); the parent-death signal set again after that credential change.
The OS layer is the boundary; the policy and the stubs only make escapes rarer and statuses clearer
(a program that reached ``os`` anyway can write its own result lines, never another run's, and the
parent parses and caps them as data). Everything a run needs is prepared in the zygote: each page a
child writes costs a copy-on-write fault, which takes longer than most programs run.

Protocol: a request is a header line ``mode entry n size timeout_s memory_mb`` then `size` bytes
of marshal data (code object, arguments, stdin, and for ``suite`` the per-input limits); a reply
is ``why signal exit_code size`` then the child's JSON lines. Modes: ``call`` (the module afresh
before each input), ``validate`` (f called twice per input), ``suite`` (the module once, then each
input under its own SIGALRM limit, stopping at the first over it: evalplus' `unsafe_execute`) and
``script`` (the program as __main__ on stdin).
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import marshal
import os
import resource
import select
import signal
import sys
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same modules, as the package names them (the script imports them by plain name)
    from populora_nb.verify.literals import literal_repr
    from populora_nb.verify.lockdown import (
        CODECS,
        Sink,
        disable_dangerous,
        guard_imports,
        skip_reseed_after_fork,
        stdin_opener,
        text_stream,
    )
    from populora_nb.verify.protocol import json_line, reply_cap
else:
    from literals import literal_repr
    from lockdown import (
        CODECS,
        Sink,
        disable_dangerous,
        guard_imports,
        skip_reseed_after_fork,
        stdin_opener,
        text_stream,
    )
    from protocol import json_line, reply_cap

_OS = SimpleNamespace(**vars(os))  # the zygote's own references, untouched by the stubs
_REAL_INPUT = builtins.input
# the running program's globals ({} matches no caller), and the zygote's libc and isolation module
_CURRENT = SimpleNamespace(globals={}, libc=None, isolation=None)


# ---------------------------------------------------------------- the child
def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    except BaseException:  # a model-defined __str__ may raise anything
        return type(exc).__name__


class _OverLimit(BaseException):
    """Raised by SIGALRM when one call of a "suite" run passes its own limit (evalplus `time_limit`)."""


def _alarm(signum, frame):
    raise _OverLimit()


def _harness(req: dict, cfg: dict, write) -> None:
    """Run the program; report each input (or the load failure) through `write`."""
    script, suite = req["mode"] == "script", req["mode"] == "suite"
    code, calls, stdin, *rest = marshal.loads(req["payload"])
    limits: list[float] = rest[0] if suite else []
    user_globals: dict[str, Any] = {"__name__": "__main__" if script else "__sandbox__", "__builtins__": builtins}
    _CURRENT.globals, clock = user_globals, time.perf_counter
    if script:
        stdout = Sink(cfg["stdout_cap"])
        sys.stdout = text_stream(stdout)
        data = stdin.encode("utf-8", "replace")
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        builtins.input, builtins.open = _REAL_INPUT, stdin_opener(data)
    start = clock()
    try:
        exec(code, user_globals)
        status, detail = "ok", ""
    except SystemExit as e:
        status, detail = ("ok", "") if script and e.code in (None, 0) else ("runtime_error", _describe(e))
    except BaseException as e:  # every failure of model code becomes a status
        status, detail = "memory" if isinstance(e, MemoryError) else "runtime_error", _describe(e)
    if script:
        try:
            sys.stdout.flush()
        except BaseException:  # the program may have closed or replaced sys.stdout
            pass
        if status == "ok" and stdout.overflow:
            status, detail = "output_too_long", f"stdout over {cfg['stdout_cap']} bytes"
        text = stdout.data.decode("utf-8", "replace")
        return write(dict(status=status, detail=detail, stdout=text, seconds=clock() - start, load=True))
    entry: Any = user_globals.get(req["entry"])
    if status == "ok" and not callable(entry):
        status, detail = "no_f", f"{req['entry']} is not defined"
    if status != "ok":
        return write({"status": status, "detail": "while loading: " + detail, "load": True})
    # "validate" calls f twice on each input in this one process, as AZR's executor does: a function
    # that keeps state between calls (a default list, a global counter) gives its solver an answer
    # that depends on how often f ran. The second call gets fresh arguments (f may mutate its own).
    again = marshal.loads(req["payload"])[1] if req["mode"] == "validate" else None
    if suite:  # the module ran once; each call gets its own limit, as in evalplus' unsafe_execute
        signal.signal(signal.SIGALRM, _alarm)
    for k, (args, kwargs) in enumerate(calls):
        start = clock()
        try:
            if suite:
                signal.setitimer(signal.ITIMER_REAL, limits[k])
            elif k > 0:  # each pair is independent: state left on f or in globals must not leak
                user_globals = {"__name__": "__sandbox__", "__builtins__": builtins}
                _CURRENT.globals = user_globals
                exec(code, user_globals)
                entry = user_globals[req["entry"]]
            status, text = literal_repr(entry(*args, **kwargs), cfg["max_output_chars"])
            if again is not None and status == "ok":
                args2, kwargs2 = again[k]
                status2, text2 = literal_repr(entry(*args2, **kwargs2), cfg["max_output_chars"])
                if (status2, text2) != (status, text):
                    status, text = "nondeterministic", f"second call in one process: {text2[:80]} != {text[:80]}"
        except _OverLimit:
            status, text = "timeout", ""
        except BaseException as e:
            status, text = "memory" if isinstance(e, MemoryError) else "runtime_error", _describe(e)
        seconds = clock() - start
        if suite:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if seconds > limits[k]:  # also when the program caught the alarm and went on
                status, text = "timeout", f"{seconds:.2f} s > {limits[k]:.2f} s"
        ok = status == "ok"
        write(dict(status=status, output=text if ok else "", detail="" if ok else text, seconds=seconds))
        if suite and status == "timeout":  # evalplus stops there; the rest count as not run
            return


def _run_child(req: dict, cfg: dict, run_dir: str, w: int, devnull: int) -> None:
    try:
        _OS.setsid()
        for fd in (0, 1, 2):
            _OS.dup2(devnull, fd)
        _OS.dup2(w, 3)
        _OS.closerange(4, 1 << 16)
        limit_s, memory = int(req["timeout_s"]) + 1, int(req["memory_mb"]) << 20
        for res, value in (
            (resource.RLIMIT_CPU, (limit_s, limit_s + 1)),
            (resource.RLIMIT_AS, (memory, memory)),
            (resource.RLIMIT_FSIZE, (0, 0)),
            (resource.RLIMIT_NPROC, (0, 0)),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(res, value)
        if cfg["level"] == "namespaces":  # the root is already empty and read-only; drop what is left
            _CURRENT.isolation.drop_privileges(_CURRENT.libc, cfg["uid"])
        elif cfg["uid"] is not None:  # root without namespaces: jail the filesystem to run_dir
            _OS.chdir(run_dir)
            _OS.chroot(run_dir)
            _OS.chdir("/")
            _CURRENT.isolation.drop_privileges(_CURRENT.libc, cfg["uid"])
        else:
            _OS.chdir(run_dir)
        if _CURRENT.libc is not None:  # the credential change cleared it: set it again, then check
            zygote = cfg["zygote_pid"]
            _CURRENT.isolation.set_parent_death(_CURRENT.libc, lambda: _OS.getppid() != zygote)

        def write(obj: dict) -> None:
            data = json_line(obj)
            while data:
                data = data[_OS.write(3, data) :]

        _harness(req, cfg, write)
    finally:
        _OS._exit(0)


# ---------------------------------------------------------------- the zygote
def _execute(req: dict, cfg: dict, run_dir: str, devnull: int) -> tuple[str, int, int, bytes]:
    jailed = cfg["level"] != "namespaces"  # with namespaces there is nothing to create or remove
    if jailed:
        _OS.mkdir(run_dir, 0o700)
    if jailed and cfg["uid"] is not None:
        _OS.chown(run_dir, cfg["uid"], cfg["uid"])
    r, w = _OS.pipe()
    pid = _OS.fork()
    if pid == 0:
        _run_child(req, cfg, run_dir, w, devnull)
    _OS.close(w)
    cap = reply_cap(req["mode"], req["n"], cfg["max_output_chars"], cfg["stdout_cap"])
    poller, buf, why = select.poll(), bytearray(), ""  # (re-used objects save no page faults here)
    poller.register(r, select.POLLIN)
    deadline = time.monotonic() + float(req["timeout_s"])
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            why = "timeout"
            break
        if poller.poll(left * 1000):
            chunk = _OS.read(r, min(1 << 16, cap + 1 - len(buf)))  # never more than the cap
            if not chunk:
                break
            buf += chunk
            if len(buf) > cap:
                why, buf = "output_too_long", buf[:cap]
                break
    _OS.close(r)
    # Kill the group before reaping: a zombie leader still holds the group id, so the id cannot
    # have been reused by an unrelated process. NPROC=0 means the group is the child alone.
    for kill in (_OS.killpg, _OS.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    status = _OS.waitpid(pid, 0)[1]
    if jailed:
        try:
            _CURRENT.isolation.remove_tree(run_dir)  # iterative: a program may nest thousands deep
        except OSError:  # the Verifier removes the whole base directory at close
            pass
    signal_number = _OS.WTERMSIG(status) if _OS.WIFSIGNALED(status) else 0
    exit_code = _OS.WEXITSTATUS(status) if _OS.WIFEXITED(status) else 0
    return why, signal_number, exit_code, bytes(buf)


def _probe_uid(uid: int) -> bool:
    """Can a child really become `uid`? (Not in some user namespaces.)"""
    pid = _OS.fork()
    if pid == 0:
        try:
            _CURRENT.isolation.drop_privileges(_CURRENT.libc, uid)  # as a run's child will
        finally:
            _OS._exit(0 if _OS.getuid() == uid else 1)
    return _OS.waitstatus_to_exitcode(_OS.waitpid(pid, 0)[1]) == 0


def _warm(cfg: dict) -> None:
    """Run the child's own code paths here first, so children find them already specialised."""
    sample = [[1, 2.5, "a", b"b", None, True, (3, 4j), {5: {6}}, frozenset({7})]] * 4
    for _ in range(64):
        status, text = literal_repr(sample, cfg["max_output_chars"])
        json_line({"status": status, "output": text, "detail": "", "seconds": 0.5, "load": False})
        marshal.loads(marshal.dumps(((sample,), {})))
        _describe(ValueError("x"))


def serve(cfg: dict) -> None:
    """Zygote main loop: isolate, lock down and warm up once, then fork one confined child per request."""
    import ctypes

    import isolation  # this script's folder is sys.path[0]; standard library only

    libc = ctypes.CDLL(None)  # per-run calls without use_errno: a third of the page faults per call
    setup_libc = ctypes.CDLL(None, use_errno=True)
    owner = cfg["owner_pid"]
    isolation.set_parent_death(libc, lambda: _OS.getppid() != owner)  # die with the parent Verifier
    _CURRENT.libc, _CURRENT.isolation = libc, isolation
    root, facts = _OS.geteuid() == 0, {}
    if cfg["namespaces"]:
        facts = isolation.enter_namespaces(setup_libc, _OS.getuid(), _OS.getgid(), cfg["netns"])
    namespaces = "error" not in facts and bool(facts)
    netns = facts.get("network_namespace", False)
    if not namespaces and root and cfg["netns"]:
        netns = setup_libc.unshare(isolation.CLONE_NEWNET) == 0
    for codec in CODECS:
        __import__(f"encodings.{codec}")
    missing, path = [], list(sys.path)
    sys.path[:0] = cfg.get("paths", [])  # site-packages of allowed non-stdlib modules, for this import only
    for name in cfg["allowed_modules"]:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    sys.path[:] = path
    uid = next((u for u in (cfg["uid"], 65534) if _probe_uid(u)), None) if root else None
    level = "namespaces" if namespaces else "root-chroot" if uid is not None else "none"
    cfg = dict(cfg, uid=uid, level=level, zygote_pid=_OS.getpid())
    devnull = _OS.open(os.devnull, os.O_RDWR)
    vm_kb = next((int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmSize:")), 0)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    hello = {
        "level": level,
        "netns": netns,
        "uid": uid,
        "chroot": level != "none",
        "missing": missing,
        "vm_mb": vm_kb // 1024,
        "namespaces_error": facts.get("error", ""),
    } | (facts if namespaces else {})
    if namespaces:
        try:
            isolation.pivot_to_empty_root(
                setup_libc, next(d for d in ("/tmp", cfg["base_dir"]) if d and _OS.path.isdir(d))
            )
        except (OSError, StopIteration) as e:  # half-isolated: say why and serve nothing
            replies.write((json.dumps({"error": f"namespace setup failed: {e}"}) + "\n").encode())
            replies.flush()
            return
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")  # what model code sees
    sys.stdout = sys.stderr = text_stream(Sink(0))
    # `site` is not loaded (-S), so exit/quit are missing; scripts still call exit()
    builtins.exit = builtins.quit = sys.exit  # type: ignore[assignment]  # a function where site puts a Quitter
    if cfg["guard_imports"]:
        guard_imports(frozenset(cfg["allowed_modules"]), _CURRENT)
    if cfg["disable_dangerous"]:
        disable_dangerous()
    skip_reseed_after_fork()
    _warm(cfg)
    gc.freeze()  # the warmed heap stays out of the children's collections: fewer copied pages
    replies.write((json.dumps(hello) + "\n").encode())
    replies.flush()
    for n, line in enumerate(requests):  # plain text headers: json costs page faults here too
        mode, entry, count, size, timeout_s, memory_mb = line.split()
        req = {
            "mode": mode.decode(),
            "entry": entry.decode(),
            "n": int(count),
            "timeout_s": float(timeout_s),
            "memory_mb": int(memory_mb),
            "payload": requests.read(int(size)),
        }
        why, signal_number, exit_code, data = _execute(req, cfg, f"{cfg['base_dir']}/{_OS.getpid()}-{n}", devnull)
        replies.write(f"{why or '-'} {signal_number} {exit_code} {len(data)}\n".encode() + data)
        replies.flush()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
