"""One sandbox zygote's life seen from the parent: spawn it (`sandbox.py` as a script), read its
hello line, and shut it down; and what isolation the zygotes reported (`Isolation`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import secrets
import selectors
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import IO, cast

from populora_nb.errors import UserInputError
from populora_nb.verify.isolation import LEVELS, remove_tree

SANDBOX_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox.py")


class SandboxError(RuntimeError):
    """The verifier's own machinery failed (a zygote would not start), or it refuses to run model
    code without OS-level isolation."""


class IsolationUnavailable(SandboxError, UserInputError):
    """No OS-level isolation here and no explicit opt-in: a fact about the machine the user can act
    on (run where user namespaces work, or opt in), so the CLI prints it as one line."""


@dataclass(frozen=True)
class Isolation:
    """What the sandbox enforces on this machine, as the zygotes reported it (not assumed). `level`
    is the weakest of the zygotes' levels (`isolation.LEVELS`, described in docs/verifier.md)."""

    network_namespace: bool
    chroot: bool
    """Children see an empty root: pivot_root into a read-only tmpfs, or chroot (root-chroot)."""
    uids: tuple[int, ...]
    """The unprivileged uid of each zygote's children (empty when not running as root)."""
    hash_seeds: tuple[int, ...]
    level: str = "none"
    user_namespace: bool = False
    pid_namespace: bool = False
    why_not: str = ""
    """Why namespaces were not used (the kernel's answer), when they were not."""

    def __str__(self) -> str:
        if self.level == "namespaces":
            on = {"user": self.user_namespace, "mount": True, "pid": self.pid_namespace}
            kinds = ", ".join(k for k, v in (on | {"network": self.network_namespace}).items() if v)
            who = "unprivileged uid" if self.uids else "no capabilities"
            return f"namespaces ({kinds}; empty read-only root; children: {who}, no new processes)"
        if self.level == "root-chroot":
            return (
                f"root-chroot (chroot, unprivileged uid, network namespace: {self.network_namespace}; {self.why_not})"
            )
        return f"none (static policy and rlimits only; {self.why_not or 'disabled'})"


def isolation_of(hellos: list[dict], hash_seeds: tuple[int, ...]) -> Isolation:
    """What the zygotes achieved together: the weakest level, and a layer only where every zygote has it."""
    level = max((h["level"] for h in hellos), key=LEVELS.index)  # the weakest zygote
    return Isolation(
        all(h["netns"] for h in hellos),
        all(h["chroot"] for h in hellos),
        tuple(h["uid"] for h in hellos if h["uid"] is not None),
        hash_seeds,
        level,
        all(h.get("user_namespace", False) for h in hellos),
        all(h.get("pid_namespace", False) for h in hellos),
        next((h["namespaces_error"] for h in hellos if h["namespaces_error"]), ""),
    )


def random_hash_seeds() -> tuple[int, int]:
    """Two different PYTHONHASHSEEDs in 1..2**32-1 (0 would turn hash randomisation off)."""
    first, second = secrets.SystemRandom().sample(range(1, 2**32), 2)
    return first, second


@dataclass
class Zygote:
    """A running zygote: its process, which of the two hash seeds it has (0 or 1), its hello line,
    its stdin (`requests`) and its stdout (`replies`, where its hello line and replies come from)."""

    proc: subprocess.Popen
    seed_class: int
    hello: dict
    requests: IO[bytes]
    replies: IO[bytes]
    """Unbuffered, so a read takes no byte past the reply it reads (a buffered reader would also
    swallow the next pipelined reply, which select() on the pipe then never signals)."""


def read_exactly(stream: IO[bytes], size: int) -> bytes:
    """``size`` bytes from an unbuffered pipe (one read may return fewer); fewer only at EOF."""
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def spawn_zygote(cfg: dict, hash_seed: int, seed_class: int, memory_mb: int) -> Zygote:
    """Start one zygote with `cfg` and wait for its hello; raise SandboxError (ValueError for too
    little memory) when it cannot serve, killing it first."""
    # -S: no site-packages inside; an env of our own: nothing of the parent's environment leaks.
    # A session of its own: Ctrl-C in a notebook interrupts the caller, not the zygotes.
    # One BLAS/OpenMP thread: children may not start threads (RLIMIT_NPROC 0), and numpy (an
    # allowed benchmark module) would otherwise start a pool in the zygote that forks cannot keep.
    env = {"PYTHONHASHSEED": str(hash_seed), "PYTHONIOENCODING": "utf-8"}
    env |= dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    proc = spawn_sandbox([sys.executable, "-S", "-B", SANDBOX_SCRIPT, json.dumps(cfg)], env)
    stdout = cast(IO[bytes], cast(io.BufferedReader, proc.stdout).raw)
    zygote = Zygote(proc, seed_class, {}, cast(IO[bytes], proc.stdin), stdout)
    with selectors.DefaultSelector() as sel:
        sel.register(zygote.replies, selectors.EVENT_READ)
        line = zygote.replies.readline() if sel.select(timeout=60) else b""
    hello = json.loads(line) if line else None
    if not hello or "error" in hello or hello["missing"] or memory_mb < hello["vm_mb"] + 64:
        proc.kill()
        proc.wait()
        if hello and "error" in hello:
            raise SandboxError(f"sandbox zygote: {hello['error']}; Verifier(namespaces=False) skips that layer")
        if hello and hello["missing"]:
            raise SandboxError(f"policy modules missing in the sandbox: {hello['missing']}")
        if hello:
            raise ValueError(
                f"memory_mb={memory_mb} leaves no room above the zygote's "
                f"{hello['vm_mb']} MB address space; use at least {hello['vm_mb'] + 128}"
            )
        raise SandboxError(f"sandbox zygote did not start: {sys.executable} -S {SANDBOX_SCRIPT}")
    zygote.hello = hello
    return zygote


def spawn_sandbox(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """A sandbox process (a zygote, or official evalplus' sandbox): only ``env`` as its environment,
    requests on its stdin, replies on its stdout, stderr discarded, cwd ``/``, a session of its own."""
    pipe = subprocess.PIPE
    return subprocess.Popen(
        argv, env=env, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True
    )


def module_paths(modules: frozenset) -> list[str]:
    """sys.path entries of allowed modules outside the standard library (numpy for benchmarks): the
    zygote runs with -S and imports them once from there, before its root is emptied."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    paths = []
    for top in sorted({m.split(".")[0] for m in modules} - set(sys.builtin_module_names)):
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            continue
        origin = os.path.realpath(spec.origin)
        if origin.startswith(stdlib + os.sep) and "site-packages" not in origin:
            continue
        entry = os.path.dirname(os.path.dirname(origin)) if spec.submodule_search_locations else os.path.dirname(origin)
        if entry not in paths:
            paths.append(entry)
    return paths


def shutdown(zygotes: list[Zygote], base_dir: str | None) -> None:
    """Stop `zygotes` (EOF, then a kill after 5 s; at once for one already killed) and remove `base_dir`;
    the list is left empty."""
    for z in zygotes:
        with contextlib.suppress(OSError):  # a dead zygote's pipe may fail to flush on close
            z.requests.close()  # EOF: the zygote leaves its loop
    for z in zygotes:
        try:
            z.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            z.proc.kill()
            z.proc.wait()
        z.replies.close()
    zygotes.clear()
    if base_dir is not None:
        with contextlib.suppress(OSError):
            remove_tree(base_dir)  # iterative: what a program built may be thousands of levels deep
