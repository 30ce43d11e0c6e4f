"""The inside of the verifier: a warmed zygote that forks one short-lived, confined process per
program run (PopuLoRA §3 verifier; AZR's executor, hardened).

Run as a script (``python -S sandbox.py CONFIG_JSON``) it imports only the standard library, so
nothing from the project or site-packages is reachable from inside. The parent (`verifier.py`)
imports it for the literal helpers and the reply decoder, so both sides agree on values.

Layers, outermost first; the zygote reports which ones this machine allows (hello line, `level`):
  zygote (once): user (unless root), mount, PID, network, IPC and UTS namespaces, its root an
      empty read-only tmpfs (`isolation.py`; level "namespaces"), or without them, as root, an
      empty network namespace (level "root-chroot"); modules preloaded, dangerous os/posix/shutil/
      io/builtins functions replaced by stubs and socket modules removed (it keeps private
      references for itself), imports by model code outside the policy refused, ``gc.freeze``;
  child (per run): own session, killed as a group; stdin/stdout/stderr on /dev/null, every other
      fd closed; rlimits (CPU, address space, file size 0, no new processes, no core); no_new_privs
      and no capabilities (namespaces) or chroot into a fresh empty directory and an unprivileged
      uid (root-chroot); the parent-death signal set again after that credential change.
Without root and without user namespaces there is no OS layer ("none"): the Verifier refuses to
run unless opted in. Everything a run needs is prepared in the zygote, so a fork copies it for
free: measured here, each page a child writes costs a copy-on-write fault of ~6 us, more than most
programs run. The OS layer is the boundary; the policy and the stubs only make escapes rarer and
statuses clearer (a program that reached ``os`` anyway can write its own result lines, never
another run's, and the parent parses and caps them as data).

Protocol: a request is a header line ``mode entry n size timeout_s memory_mb`` (mode: ``call``
— the module runs afresh before each input —, ``validate`` — call f twice per input —, ``suite`` —
the module runs once, then each input in turn under its own SIGALRM limit, stopping at the first
over it: evalplus' `unsafe_execute` — or ``script``) then `size` bytes of marshal data (code object,
arguments, stdin, and for ``suite`` the per-input limits: the parent compiled and parsed them, so
children skip that work); a reply is ``why signal exit_code size`` then the child's raw JSON lines.
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
import warnings
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

RUN_STATUSES = (
    "ok",
    "no_f",
    "runtime_error",
    "timeout",
    "memory",
    "output_not_literal",
    "output_too_long",
    "crash",
    "not_run",
    "nondeterministic",
)
"""Per-input statuses of a run; "ok" is the only success."""
MAX_LITERAL_DEPTH = 50
"""Deeper nesting is not a literal here (catches cycles; the parser itself stops near 200)."""
_ATOMS = (int, float, complex, str, bytes, bool, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset)


# ---------------------------------------------------------------- literals (parent and child)
def _node_value(node: ast.AST, depth: int = 0):
    import ast  # here, not at the top: the zygote never parses, and ast is 1.7 MB every fork copies

    if depth > MAX_LITERAL_DEPTH:
        raise ValueError("literal nested too deeply")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_node_value(e, depth + 1) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking is not a literal")
        return {_node_value(k, depth + 1): _node_value(v, depth + 1) for k, v in zip(node.keys, node.values)}
    # frozenset has no literal syntax; accept exactly the form repr() writes: frozenset({...}).
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "frozenset"
        and not node.keywords
        and len(node.args) <= 1
    ):
        if node.args and not isinstance(node.args[0], ast.Set):
            raise ValueError("frozenset(...) must wrap a set display")
        return frozenset(_node_value(node.args[0], depth + 1)) if node.args else frozenset()
    value = ast.literal_eval(node)  # constants, signed numbers, complex sums, set()
    if value is Ellipsis:
        raise ValueError("Ellipsis is not a supported literal")
    return value


def _parse(text: str) -> ast.AST:
    import ast

    with warnings.catch_warnings():  # "invalid escape sequence" in model text is not ours to print
        warnings.simplefilter("ignore")
        return ast.parse(text, mode="eval").body


def parse_literal(text: str):
    """Value of one literal (int, float, complex, str, bytes, bool, None, containers, frozenset).

    Raises ValueError for anything else. Only ``ast`` parsing and ``ast.literal_eval`` are used:
    nothing in `text` is executed.
    """
    try:
        return _node_value(_parse(text.strip()))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a literal ({type(e).__name__})") from None


def parse_arguments(text: str) -> tuple[tuple, dict]:
    """(args, kwargs) of an argument list written as literal text, e.g. ``"[1, 2], 'a', k=3"``.

    Parsed as the arguments of a call node, so ``'zz') or (True`` cannot close the list early.
    """
    import ast

    try:
        call = _parse(f"_({text})")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise ValueError(f"not an argument list ({type(e).__name__})") from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_"):
        raise ValueError("not a single argument list")
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError("*args / **kwargs are not literals")
    try:
        return tuple(_node_value(a) for a in call.args), {k.arg: _node_value(k.value) for k in call.keywords}
    except (ValueError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"argument is not a literal ({type(e).__name__})") from None


def values_equal(a, b) -> bool:
    """Equality of parsed literals that also requires equal types, recursively (1 != 1.0 != True).

    Set members and dict keys compare with ``==`` (hashing has already merged 1 and True there).
    Floats compare with ``==`` too, as evalplus and AZR do: ``0.0`` and ``-0.0`` are equal (an
    answer ``-0.0`` passes gold ``0.0``); nan never reaches here (it is not a literal).
    """
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return a == b


def _check_literal(v, depth: int) -> None:
    t = type(v)  # exact types: a subclass could override __eq__ or __repr__
    if t in _ATOMS:
        if t in (float, complex) and v - v != 0:
            raise TypeError("nan/inf have no literal form")
        return
    if t not in _CONTAINERS:
        raise TypeError(f"{t.__name__} is not a literal type")
    if depth > MAX_LITERAL_DEPTH:
        raise TypeError("nested too deeply (or cyclic)")
    for item in v.items() if t is dict else v:
        if t is dict:
            _check_literal(item[0], depth + 1)
            _check_literal(item[1], depth + 1)
        else:
            _check_literal(item, depth + 1)


def literal_repr(value, max_chars: int) -> tuple[str, str]:
    """(status, repr or reason) of a program result: exact literal types, finite, within the cap."""
    try:
        _check_literal(value, 0)
    except (TypeError, RecursionError) as e:
        return "output_not_literal", str(e)
    try:
        text = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits
        return "output_too_long", "int too large to print"
    if len(text) > max_chars:
        return "output_too_long", f"{len(text)} > {max_chars} characters"
    return "ok", text


def reply_cap(mode: str, n: int, max_output_chars: int, stdout_cap: int) -> int:
    """Most bytes a run's reply may hold: what `_harness` can write for `n` inputs (a JSON-escaped
    char is at most 12 bytes), plus stdout in script mode only. The zygote reads no more."""
    return max(1, n) * (12 * max_output_chars + 2048) + (12 * stdout_cap if mode == "script" else 0) + 4096


def decode_run(
    data: bytes,
    n: int,
    why: str,
    signal_number: int,
    exit_code: int,
    max_output_chars: int = 1 << 62,
    stdout_cap: int = 1 << 62,
) -> list[dict]:
    """Per-input results from a child's raw lines (untrusted) and how the process ended.

    The lines are data the program could have written itself (it runs in the same process as
    the harness): each is checked as such, and a longer output or stdout than the policy allows
    is "output_too_long" here whatever status the line claims.
    """
    results = []
    for line in data.split(b"\n")[: n + 1]:
        try:
            obj = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or obj.get("status") not in RUN_STATUSES:
            continue
        seconds = obj.get("seconds")
        r = {k: obj[k] if isinstance(obj.get(k), str) else "" for k in ("status", "output", "detail", "stdout")} | {
            "seconds": float(seconds) if type(seconds) in (int, float) else 0.0,
            "load": obj.get("load") is True,
        }
        if len(r["output"]) > max_output_chars or len(r["stdout"]) > stdout_cap:
            r.update(status="output_too_long", output="", stdout="", detail="reported output over the cap")
        results.append(r)
    if results and results[0]["load"]:  # the program failed before any input ran
        results = results[:1] * n
    results = results[:n]
    if len(results) < n:  # the run ended early: say why for the first missing input
        why = why or ("timeout" if signal_number == signal.SIGXCPU else "crash")
        detail = f"signal {signal_number}" if signal_number else f"exit code {exit_code}"
        results.append(
            {
                "status": why,
                "output": "",
                "detail": detail if why == "crash" else "",
                "stdout": "",
                "seconds": 0.0,
                "load": False,
            }
        )
        results += [dict(results[-1], status="not_run", detail="")] * (n - len(results))
    return results


# ---------------------------------------------------------------- the zygote's one-time lockdown
_OS_DISABLED = (
    "system",
    "popen",
    "fork",
    "forkpty",
    "kill",
    "killpg",
    "abort",
    "_exit",
    "remove",
    "unlink",
    "rmdir",
    "removedirs",
    "rename",
    "renames",
    "replace",
    "mkdir",
    "makedirs",
    "mkfifo",
    "mknod",
    "link",
    "symlink",
    "chmod",
    "lchmod",
    "fchmod",
    "chown",
    "lchown",
    "fchown",
    "truncate",
    "ftruncate",
    "utime",
    "chdir",
    "fchdir",
    "chroot",
    "open",
    "pipe",
    "putenv",
    "unsetenv",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "execv",
    "execve",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execvp",
    "execvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "posix_spawn",
    "posix_spawnp",
    "register_at_fork",
)
_DISABLED = {
    "os": _OS_DISABLED,
    "posix": _OS_DISABLED,
    "io": ("open", "open_code", "FileIO"),
    "_io": ("open", "open_code", "FileIO"),
    "builtins": ("open", "breakpoint", "help", "input"),
    "shutil": ("rmtree", "move", "copy", "copy2", "copyfile", "copytree", "chown", "make_archive", "unpack_archive"),
}
_CODECS = (
    "ascii",
    "latin_1",
    "utf_8_sig",
    "utf_16",
    "utf_16_le",
    "utf_16_be",
    "utf_32",
    "utf_32_le",
    "utf_32_be",
    "utf_7",
    "cp1252",
    "cp437",
    "mac_roman",
    "iso8859_15",
    "charmap",
    "idna",
    "punycode",
    "raw_unicode_escape",
    "unicode_escape",
    "hex_codec",
    "base64_codec",
    "rot_13",
)
_OS = SimpleNamespace(**vars(os))  # the zygote's own references, untouched by the stubs
_REAL_INPUT = builtins.input
_CURRENT = SimpleNamespace(
    globals={}, libc=None, isolation=None
)  # the running program's globals ({} matches no caller)


def _refuse(name: str):
    def refused(*args, **kwargs):  # must accept whatever the replaced function accepted
        raise PermissionError(f"{name} is disabled in the sandbox")

    return refused


def _disable_dangerous() -> None:
    for module_name, names in _DISABLED.items():
        module = sys.modules.get(module_name)
        for name in names if module is not None else ():
            if hasattr(module, name):
                setattr(module, name, _refuse(name))
    for name in ("socket", "_socket", "ssl", "_ssl"):  # None in sys.modules makes import fail
        sys.modules[name] = None


def _guard_imports(allowed: frozenset) -> None:
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if globals is not _CURRENT.globals:  # the standard library's own imports pass through
            return real_import(name, globals, locals, fromlist, level)
        if level != 0 or name not in allowed:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        module = real_import(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            value = getattr(module, item, None)
            if isinstance(value, ModuleType) and value.__name__ not in allowed:
                raise ImportError(f"import of {value.__name__!r} is not allowed in the sandbox")
        return module

    builtins.__import__ = guarded_import


class _Sink(io.RawIOBase):
    """Write-only stream keeping the first `cap` bytes; later writes only set `overflow`."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap, self.data, self.overflow = cap, bytearray(), False

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        room = self.cap - len(self.data)
        self.overflow = self.overflow or len(b) > room
        if room > 0:
            self.data += bytes(b[:room])
        return len(b)


def _stdin_opener(data: bytes):
    """`open` for scripts: ``open(0)`` (a competitive-programming idiom) reads stdin, nothing else opens."""

    def open_stdin(file, mode="r", *args, **kwargs):
        if file != 0 or any(c in mode for c in "wax+"):
            raise PermissionError("open is disabled in the sandbox; only open(0) reads stdin")
        return io.BytesIO(data) if "b" in mode else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")

    return open_stdin


def _text(sink: _Sink) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8", errors="replace")


# ---------------------------------------------------------------- the child
_QUOTE = json.encoder.encode_basestring_ascii  # C; json.dumps costs ~80 page faults per child


def _json_line(obj: dict) -> bytes:
    """One result as a JSON line; values are str, float or bool (what `_harness` writes)."""
    fields = (
        f'"{k}": {_QUOTE(v) if type(v) is str else repr(v) if type(v) is float else "true" if v else "false"}'
        for k, v in obj.items()
    )
    return ("{" + ", ".join(fields) + "}\n").encode("ascii")


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
    limits = rest[0] if suite else None
    user_globals = {"__name__": "__main__" if script else "__sandbox__", "__builtins__": builtins}
    _CURRENT.globals, clock = user_globals, time.perf_counter
    if script:
        stdout = _Sink(cfg["stdout_cap"])
        sys.stdout = _text(stdout)
        data = stdin.encode("utf-8", "replace")
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        builtins.input, builtins.open = _REAL_INPUT, _stdin_opener(data)
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
        return write(
            {
                "status": status,
                "detail": detail,
                "stdout": stdout.data.decode("utf-8", "replace"),
                "seconds": clock() - start,
                "load": True,
            }
        )
    entry = user_globals.get(req["entry"])
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
        write(
            {
                "status": status,
                "output": text if status == "ok" else "",
                "detail": "" if status == "ok" else text,
                "seconds": seconds,
            }
        )
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
            data = _json_line(obj)
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
            _OS.setgroups([])
            _OS.setgid(uid)
            _OS.setuid(uid)
        finally:
            _OS._exit(0 if _OS.getuid() == uid else 1)
    return _OS.waitstatus_to_exitcode(_OS.waitpid(pid, 0)[1]) == 0


class _KeepRandomState:
    def seed(self, a=None, version=2, _original=None):
        __class__  # noqa: B018 -- gives this code the one free variable random.Random.seed has
        if a is not None:  # explicit seeding still works; the after-fork reseed does nothing
            _original(self, a, version)


def _skip_reseed_after_fork() -> None:
    """`random` reseeds from urandom in every forked child (~35 page faults per run); children
    here start from the zygote's state instead, which also makes their runs reproducible."""
    random = sys.modules.get("random")
    if random is not None:
        seed = random.Random.seed
        original = type(seed)(seed.__code__, seed.__globals__, "seed", seed.__defaults__, seed.__closure__)
        seed.__code__, seed.__defaults__ = _KeepRandomState.seed.__code__, (None, 2, original)


def _warm(cfg: dict) -> None:
    """Run the child's own code paths here first, so children find them already specialised."""
    sample = [[1, 2.5, "a", b"b", None, True, (3, 4j), {5: {6}}, frozenset({7})]] * 4
    for _ in range(64):
        status, text = literal_repr(sample, cfg["max_output_chars"])
        _json_line({"status": status, "output": text, "detail": "", "seconds": 0.5, "load": False})
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
    for codec in _CODECS:  # codecs load lazily, which the empty root forbids; all ~120 would cost 3.5 MB
        __import__(f"encodings.{codec}")
    missing, path = [], list(sys.path)
    sys.path[:0] = cfg.get("paths", [])  # site-packages of allowed non-stdlib modules, for this import only
    for name in cfg["preload"]:
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
    sys.stdout = sys.stderr = _text(_Sink(0))
    builtins.exit = builtins.quit = sys.exit  # `site` is not loaded (-S); scripts still call exit()
    if cfg["guard_imports"]:
        _guard_imports(frozenset(cfg["allowed_modules"]))
    if cfg["disable_dangerous"]:
        _disable_dangerous()
    _skip_reseed_after_fork()
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
