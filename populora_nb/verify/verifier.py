"""The verifier: validate proposed tasks and check solvers' answers in a sandbox (PopuLoRA §3;
AZR's executor, hardened).

Every reward comes from here, and a population multiplies the proposers that will look for holes.
Two layers stand between a model's program and the machine:
  1. a static policy (`sandbox_policy.py`, checked on the AST in the parent): an allow-list of
     modules, AZR's banned modules, banned builtins, no dunder or reflective attribute access. A
     fast first filter with a clear reason, never the boundary (Python has too many routes);
  2. the sandbox (`sandbox.py`, `isolation.py`): a warmed zygote per hash seed, inside its own
     user, mount, PID, network and IPC namespaces with an empty read-only root, forks one child per
     run (no capabilities, rlimits, no new processes). No root needed; as root the same namespaces
     and an unprivileged uid per zygote. `Verifier.isolation` says what the zygotes achieved; with
     no OS-level isolation ("none": not root, no user namespaces) `start` refuses unless
     ``allow_unsafe_no_isolation=True``.
The parent never executes model text: inputs, answers and outputs are parsed with ``ast`` only,
and compared as values (`values_equal`), so ``'zz') or (True`` and objects with an always-true
``__eq__`` cannot pass. The result lines come from the child, where the program also runs: a
program that escapes the in-process layer can write its own lines, which is choosing its own
output, as ``return`` does; so every line is treated as data: capped by the zygote (it reads at
most the cap for the run's inputs) and again here, parsed as literals, one per input, for that
run only. Outputs are capped, never truncated.

Determinism: each validation runs in two processes with different ``PYTHONHASHSEED`` and the
outputs must agree as values, and inside each process f is called twice per input and must give
the same answer (AZR's check: it catches state kept between calls; the two processes catch hash
and set order). The two seeds are drawn at random per Verifier (``secrets``, never equal, never
0) and drawn again every `reseed_every` validated proposals (the zygotes restart), so a program
cannot be tuned to known seeds; a program whose output depends on hash() still passes when both
seeds happen to agree on it (for ``hash(a) % 2``, half the time), but not reliably.

Statuses are strings from `INVALID_REASONS` (for `validate`) and `VERDICTS` (for `judge`); the
single reason that is not the model's fault is "sandbox_error". `BENCHMARK_POLICY` runs benchmark
code and solutions to it (``run_many`` with any entry point, ``run_suites`` — the module once, then
every input under its own limit, evalplus' semantics —, ``run_script_many`` with stdin) under the
same isolation with a wider allow-list (numpy included: the zygote imports it from site-packages
before its root is emptied).
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import CodeType

from populora_nb.errors import UserInputError
from populora_nb.tasks import TASK_KINDS, Proposal, Task, TaskKind  # noqa: F401  (Proposal re-exported)
from populora_nb.verify.isolation import LEVELS, remove_tree, sweep_stale
from populora_nb.verify.sandbox import decode_run, parse_arguments, parse_literal, reply_cap, values_equal
from populora_nb.verify.static_policy import (  # noqa: F401  (re-exported: the verifier's public vocabulary)
    BENCHMARK_POLICY,
    INVALID_REASONS,
    TASK_POLICY,
    VERDICTS,
    Invalid,
    SandboxPolicy,
    compile_program,
    static_check,
)


@dataclass(frozen=True)
class RunResult:
    """One input's run: a status of sandbox.RUN_STATUSES or a static reason; `output` is a repr if "ok"."""

    status: str
    output: str = ""
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class ScriptResult:
    status: str
    stdout: str = ""
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """A checked answer: passed, and the status that says why (a key of VERDICTS)."""

    passed: bool
    status: str
    detail: str = ""


@dataclass(frozen=True)
class Isolation:
    """What the sandbox enforces on this machine, as the zygotes reported it (not assumed).

    `level` is the weakest of the zygotes' levels (`isolation.LEVELS`): "namespaces" (user or root:
    mount/PID/network/IPC namespaces, an empty read-only root, children without capabilities),
    "root-chroot" (root without namespaces: chroot into an empty directory, unprivileged uid) or
    "none" (the static policy, the stubs and the rlimits only: refused unless opted in).
    """

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
            kinds = ", ".join(
                k
                for k, on in (
                    ("user", self.user_namespace),
                    ("mount", True),
                    ("pid", self.pid_namespace),
                    ("network", self.network_namespace),
                )
                if on
            )
            who = "unprivileged uid" if self.uids else "no capabilities"
            return f"namespaces ({kinds}; empty read-only root; children: {who}, no new processes)"
        if self.level == "root-chroot":
            return (
                f"root-chroot (chroot, unprivileged uid, network namespace: {self.network_namespace}; {self.why_not})"
            )
        return f"none (static policy and rlimits only; {self.why_not or 'disabled'})"


# ---------------------------------------------------------------- the zygote pool (parent)
SANDBOX_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox.py")


PIPELINE_BYTES = 16_384
"""A request queued behind a running one must be this small: the 64 KiB pipe then never fills, so
parent and zygote can never both block writing to each other."""


class SandboxError(RuntimeError):
    """The verifier's own machinery failed (a zygote would not start), or it refuses to run model
    code without OS-level isolation."""


class IsolationUnavailable(SandboxError, UserInputError):
    """No OS-level isolation here and no explicit opt-in: a fact about the machine the user can act
    on (run where user namespaces work, or opt in), so the CLI prints it as one line."""


STALE_PREFIX = "populora-sandbox-"
"""Run directories (root-chroot and none levels) live in ``{tmp}/{STALE_PREFIX}{owner pid}-*``."""


def _random_hash_seeds() -> tuple[int, int]:
    """Two different PYTHONHASHSEEDs in 1..2**32-1 (0 would turn hash randomisation off)."""
    first = secrets.randbelow(2**32 - 1) + 1
    second = first
    while second == first:
        second = secrets.randbelow(2**32 - 1) + 1
    return first, second


@dataclass
class _Zygote:
    proc: subprocess.Popen
    seed_class: int
    hello: dict


@dataclass
class _Job:
    """One run: a compiled program on marshalled arguments, for hash-seed class 0, 1 or either."""

    seed_class: int | None
    request: bytes
    timeout_s: float
    n: int
    mode: str = "call"
    results: list[dict] | None = None
    retried: bool = False


class Verifier:
    """Validates tasks and checks answers on a pool of warmed zygotes (one per worker, two seeds).

    Use as a context manager (or call `close`). Thread-safe: concurrent batches are serialised and
    each batch uses every worker. `workers` is how many runs go at once; one per core is enough on
    an idle machine, twice that hides scheduling latency on a busy one (measured: 2 -> 4 workers
    doubled throughput on 2 cores shared with other jobs). `uid_base`: as root, children run as
    uid_base + f(parent pid, zygote), a uid of their own, so no run can signal another's process.
    `hash_seeds`: None draws two random different seeds, and new ones every `reseed_every`
    validated proposals (the zygotes restart); fixed seeds are never changed. `namespaces=False`
    skips the namespace layer (as on a kernel without user namespaces); without root that leaves
    no OS-level isolation, and `start` refuses unless `allow_unsafe_no_isolation` is True.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        workers: int = 2,
        policy: SandboxPolicy = TASK_POLICY,
        hash_seeds: tuple[int, int] | None = None,
        network_namespace: bool = True,
        uid_base: int = 100_000,
        namespaces: bool = True,
        allow_unsafe_no_isolation: bool = False,
        reseed_every: int = 2000,
    ):
        if timeout_s <= 0 or memory_mb < 64:
            raise ValueError("Verifier needs timeout_s > 0 and memory_mb >= 64")
        if not 1 <= workers <= 64:
            raise ValueError("Verifier workers must be in 1..64 (one confined child per worker)")
        if reseed_every < 1:
            raise ValueError("reseed_every must be >= 1 (validated proposals between new hash seeds)")
        if hash_seeds is not None and (
            len(hash_seeds) != 2 or hash_seeds[0] == hash_seeds[1] or min(hash_seeds) < 1 or max(hash_seeds) >= 2**32
        ):
            raise ValueError(
                "hash_seeds must be two different ints in 1..2**32-1 (0 turns hash randomisation off), "
                "or None for random ones"
            )
        self.timeout_s, self.memory_mb, self.workers, self.policy = timeout_s, memory_mb, workers, policy
        self.network_namespace, self.uid_base, self.namespaces = network_namespace, uid_base, namespaces
        self.allow_unsafe_no_isolation, self.reseed_every = allow_unsafe_no_isolation, reseed_every
        self._fixed_seeds = hash_seeds is not None
        self.hash_seeds: tuple[int, int] = tuple(hash_seeds) if hash_seeds else _random_hash_seeds()
        self._validated_since_seeding = 0
        self.isolation: Isolation | None = None
        self._lock = threading.RLock()
        self._zygotes: list[_Zygote] = []
        self._base_dir: str | None = None
        self._finalizer: weakref.finalize | None = None
        self._code_cache: dict[tuple[str, str | None], CodeType | Invalid] = {}
        self._args_cache: OrderedDict[str, tuple | Invalid] = OrderedDict()

    @classmethod
    def from_config(cls, vc) -> Verifier:
        """A (not yet started) verifier with a `config.VerifierConfig`'s limits."""
        return cls(
            timeout_s=vc.timeout_s,
            memory_mb=vc.memory_mb,
            workers=vc.workers,
            allow_unsafe_no_isolation=vc.allow_unsafe_no_isolation,
        )

    @classmethod
    def probe(cls, vc) -> Isolation:
        """The isolation a verifier with these settings gets here (starts and stops one); raises
        SandboxError where it would refuse to run model code."""
        with cls(
            timeout_s=vc.timeout_s,
            memory_mb=vc.memory_mb,
            workers=1,
            allow_unsafe_no_isolation=vc.allow_unsafe_no_isolation,
        ) as v:
            return v.isolation

    def __enter__(self) -> Verifier:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        with self._lock:
            if self._zygotes:
                return
            sweep_stale(tempfile.gettempdir(), STALE_PREFIX)  # left by owners killed with -9
            self._base_dir = tempfile.mkdtemp(prefix=f"{STALE_PREFIX}{os.getpid()}-")
            os.chmod(self._base_dir, 0o711)  # the unprivileged child must reach its own run dir
            # Also on garbage collection or a failed start: no zygote or temp dir outlives us.
            self._finalizer = weakref.finalize(self, _shutdown, self._zygotes, self._base_dir)
            try:  # two hash seeds need two zygotes even for one worker; `workers` caps concurrency
                self._zygotes.extend(self._spawn(i) for i in range(max(2, self.workers + self.workers % 2)))
            except BaseException:
                self.close()
                raise
            self.isolation = self._isolation()
            if self.isolation.level == "none" and not self.allow_unsafe_no_isolation:
                self.close()
                raise IsolationUnavailable(
                    f"no OS-level isolation for model-written code here (not root, and namespaces: "
                    f"{self.isolation.why_not or 'disabled'}); refusing to run it. To run it anyway, with the static "
                    f"policy as the only barrier, set verifier.allow_unsafe_no_isolation=true "
                    f"(Verifier(allow_unsafe_no_isolation=True))."
                )
            if self.isolation.level == "namespaces":  # runs create nothing on the host: no directory to leak
                remove_tree(self._base_dir)
                self._base_dir = None

    def _isolation(self) -> Isolation:
        hellos = [z.hello for z in self._zygotes]
        level = max((h["level"] for h in hellos), key=LEVELS.index)  # the weakest zygote
        return Isolation(
            all(h["netns"] for h in hellos),
            all(h["chroot"] for h in hellos),
            tuple(h["uid"] for h in hellos if h["uid"] is not None),
            self.hash_seeds,
            level,
            all(h.get("user_namespace", False) for h in hellos),
            all(h.get("pid_namespace", False) for h in hellos),
            next((h["namespaces_error"] for h in hellos if h["namespaces_error"]), ""),
        )

    def _spawn(self, index: int) -> _Zygote:
        cfg = {
            "preload": sorted(self.policy.allowed_modules),
            "allowed_modules": sorted(self.policy.allowed_modules),
            "disable_dangerous": self.policy.disable_dangerous,
            "guard_imports": self.policy.guard_imports,
            "max_output_chars": self.policy.max_output_chars,
            "stdout_cap": self.policy.max_stdout_chars,
            "paths": _module_paths(self.policy.allowed_modules),
            "netns": self.network_namespace,
            "base_dir": self._base_dir,
            "namespaces": self.namespaces,
            "owner_pid": os.getpid(),
            # one uid per zygote and parent process: no child can signal another run's child
            "uid": self.uid_base + (os.getpid() * 64 + index) % 1_000_000_000,
        }
        # -S: no site-packages inside; a two-variable env: nothing of the parent's environment leaks.
        # A session of its own: Ctrl-C in a notebook interrupts the caller, not the zygotes.
        # One BLAS/OpenMP thread: children may not start threads (RLIMIT_NPROC 0), and numpy (an
        # allowed benchmark module) would otherwise start a pool in the zygote that forks cannot keep.
        env = {
            "PYTHONHASHSEED": str(self.hash_seeds[index % 2]),
            "PYTHONIOENCODING": "utf-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-S", "-B", SANDBOX_SCRIPT, json.dumps(cfg)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            line = proc.stdout.readline() if sel.select(timeout=60) else b""
        hello = json.loads(line) if line else None
        if not hello or "error" in hello or hello["missing"] or self.memory_mb < hello["vm_mb"] + 64:
            proc.kill()
            proc.wait()
            if hello and "error" in hello:
                raise SandboxError(f"sandbox zygote: {hello['error']}; Verifier(namespaces=False) skips that layer")
            if hello and hello["missing"]:
                raise SandboxError(f"policy modules missing in the sandbox: {hello['missing']}")
            if hello:
                raise ValueError(
                    f"memory_mb={self.memory_mb} leaves no room above the zygote's "
                    f"{hello['vm_mb']} MB address space; use at least {hello['vm_mb'] + 128}"
                )
            raise SandboxError(f"sandbox zygote did not start: {sys.executable} -S {SANDBOX_SCRIPT}")
        return _Zygote(proc, index % 2, hello)

    def close(self) -> None:
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()  # runs _shutdown once
                self._finalizer, self._base_dir = None, None

    def _job(
        self,
        code: CodeType,
        calls: list,
        seed_class: int | None,
        timeout_s: float | None,
        entry_point: str = "f",
        mode: str = "call",
        stdin: str = "",
        limits: list | None = None,
    ) -> _Job:
        if not entry_point.isidentifier():
            raise ValueError(f"entry_point must be an identifier, got {entry_point!r}")
        payload = marshal.dumps((code, calls, stdin) if limits is None else (code, calls, stdin, limits))
        timeout_s = float(timeout_s or self.timeout_s)
        header = f"{mode} {entry_point} {len(calls)} {len(payload)} {timeout_s!r} {self.memory_mb}\n"
        return _Job(seed_class, header.encode() + payload, timeout_s, max(1, len(calls)), mode)

    def _run_jobs(self, jobs: list[_Job]) -> None:
        """Fill every job's results, keeping up to `workers` zygotes busy (select on their pipes).

        A busy zygote also gets its next (small) request queued in its stdin, so it forks the next
        run without waiting for this process to read the last reply and answer.
        """
        self.start()
        with self._lock, selectors.DefaultSelector() as sel:
            queues = {c: deque(j for j in jobs if j.seed_class == c) for c in (0, 1, None)}
            inflight: dict[int, deque[_Job]] = {zi: deque() for zi in range(len(self._zygotes))}
            deadlines: dict[int, float] = {}  # zygote -> when its current run must have answered

            def lose(zi: int) -> None:  # the zygote died or hangs: replace it, retry what it held
                if zi in deadlines:
                    sel.unregister(self._zygotes[zi].proc.stdout)
                    del deadlines[zi]
                self._replace(zi, list(inflight[zi]), queues)
                inflight[zi].clear()

            while any(queues.values()) or any(inflight.values()):
                for zi, z in enumerate(self._zygotes):
                    queue, held = queues[z.seed_class] or queues[None], inflight[zi]
                    working = sum(1 for q in inflight.values() if q)
                    if (
                        not queue
                        or len(held) >= 2
                        or (not held and working >= self.workers)
                        or (held and len(queue[0].request) > PIPELINE_BYTES)
                    ):
                        continue
                    held.append(queue.popleft())
                    try:
                        z.proc.stdin.write(held[-1].request)
                        z.proc.stdin.flush()
                    except OSError:
                        lose(zi)
                        continue
                    if zi not in deadlines:
                        sel.register(z.proc.stdout, selectors.EVENT_READ, zi)
                        deadlines[zi] = time.monotonic() + 2 * held[0].timeout_s + 30
                wait = min(deadlines.values()) - time.monotonic() if deadlines else 0.0
                for key, _ in sel.select(timeout=max(0.0, wait)):
                    zi = key.data
                    if not self._receive(zi, inflight[zi][0]):
                        lose(zi)
                        continue
                    inflight[zi].popleft()
                    if inflight[zi]:
                        deadlines[zi] = time.monotonic() + 2 * inflight[zi][0].timeout_s + 30
                    else:
                        sel.unregister(key.fileobj)
                        del deadlines[zi]
                for zi in [zi for zi, d in deadlines.items() if time.monotonic() > d]:
                    lose(zi)  # a zygote that stops answering is replaced, never awaited

    def _receive(self, zi: int, job: _Job) -> bool:
        stream = self._zygotes[zi].proc.stdout
        try:
            why, signal_number, exit_code, size = stream.readline(256).split()
            cap = reply_cap(job.mode, job.n, self.policy.max_output_chars, self.policy.max_stdout_chars)
            if not 0 <= int(size) <= cap:  # the zygote enforces the cap: anything else is not a zygote reply
                return False
            data = stream.read(int(size))
        except ValueError:  # EOF or garbage: the zygote died
            return False
        job.results = decode_run(
            data,
            job.n,
            why.decode().strip("-"),
            int(signal_number),
            int(exit_code),
            self.policy.max_output_chars,
            self.policy.max_stdout_chars,
        )
        return True

    def _replace(self, zi: int, lost: list[_Job], queues: dict) -> None:
        """Replace a dead or stuck zygote; retry each job it held once, then report sandbox_error."""
        old = self._zygotes[zi].proc
        old.kill()
        old.wait()
        for pipe in (old.stdin, old.stdout):
            try:
                pipe.close()
            except OSError:  # a broken pipe may fail to flush on close
                pass
        self._zygotes[zi] = self._spawn(zi)
        for job in reversed(lost):
            if job.retried:
                job.results = [
                    {
                        "status": "sandbox_error",
                        "output": "",
                        "detail": "zygote failed twice",
                        "stdout": "",
                        "seconds": 0.0,
                    }
                ] * job.n
            else:
                job.retried = True
                queues[job.seed_class].appendleft(job)

    # ------------------------------------------------------------ preparing work (parent only)
    def _compiled(self, program: str, entry_point: str | None = "f") -> CodeType | Invalid:
        key = (program, entry_point)
        with self._lock:  # the cache, and catch_warnings, are not thread-safe on their own
            if key not in self._code_cache:
                if len(self._code_cache) > 4096:  # bounded: a population proposes many one-off programs
                    self._code_cache.clear()
                self._code_cache[key] = compile_program(program, self.policy, entry_point)
            return self._code_cache[key]

    def _arguments(self, text: str) -> tuple | Invalid:
        """The parsed argument list of an input text, memoised: benchmark scoring parses the same
        plus inputs for every candidate (measured: 8.4 of 22.8 s of scoring). The parent only
        marshals these values and never changes them, so sharing them is safe."""
        with self._lock:
            hit = self._args_cache.get(text)
            if hit is not None:
                self._args_cache.move_to_end(text)
                return hit
        if len(text) > self.policy.max_input_chars:
            parsed: tuple | Invalid = Invalid("input_too_long", f"{len(text)} > {self.policy.max_input_chars}")
        else:
            try:
                parsed = parse_arguments(text)
            except ValueError as e:
                parsed = Invalid("input_not_literal", str(e))
        with self._lock:
            self._args_cache[text] = parsed
            if len(self._args_cache) > 100_000:  # bounded (LRU): MBPP+ alone has 165k plus inputs
                self._args_cache.popitem(last=False)
        return parsed

    def _prepare(self, p: Proposal) -> tuple[CodeType, list] | Invalid:
        if p.kind not in TASK_KINDS:
            raise ValueError(f"kind must be one of {TASK_KINDS}, got {p.kind!r}")
        if p.kind != "code_f" and len(p.inputs) != 1:
            raise ValueError(f"{p.kind} takes exactly one input, got {len(p.inputs)}")
        if p.kind == "code_f" and not p.message.strip():
            return Invalid("no_message")
        if p.kind == "code_f" and len(p.inputs) < self.policy.min_code_f_inputs:
            return Invalid("too_few_inputs", f"{len(p.inputs)} < {self.policy.min_code_f_inputs}")
        code = self._compiled(p.program)
        calls = [] if isinstance(code, Invalid) else [self._arguments(t) for t in p.inputs]
        bad = next((x for x in [code, *calls] if isinstance(x, Invalid)), None)
        return bad or _duplicate(calls) or (code, calls)

    # ------------------------------------------------------------ public API
    def validate(self, kind: TaskKind, program: str, inputs: Sequence[str], message: str = "") -> Task | Invalid:
        """A `Task` when `program` runs deterministically on every input within the limits."""
        return self.validate_many([Proposal(kind, program, tuple(inputs), message)])[0]

    def validate_many(self, proposals: Sequence[Proposal]) -> list[Task | Invalid]:
        """validate() for a batch; every run of every proposal shares the worker pool.

        code_f runs its shown and its hidden inputs in separate processes, the hidden ones exactly
        as `check` will run a solver's program: state a program keeps between calls (in a module,
        a decimal context...) cannot make the gold hidden outputs unreachable.
        """
        out: list = [self._prepare(p) for p in proposals]
        runs: dict[int, list[list[_Job]]] = {}  # proposal -> per hash seed, its jobs in input order
        for i, prepared in enumerate(out):
            if isinstance(prepared, Invalid):
                continue
            code, calls = prepared
            cut = len(calls) // 2 if proposals[i].kind == "code_f" else len(calls)
            parts = [part for part in (calls[:cut], calls[cut:]) if part]
            runs[i] = [[self._job(code, part, seed, None, mode="validate") for part in parts] for seed in (0, 1)]
        self._run_jobs([job for seeds in runs.values() for jobs in seeds for job in jobs])
        for i, (jobs_a, jobs_b) in runs.items():
            out[i] = _combine(proposals[i], *([r for job in jobs for r in job.results] for jobs in (jobs_a, jobs_b)))
        self._validated_since_seeding += len(runs)
        if not self._fixed_seeds and self._validated_since_seeding >= self.reseed_every:
            self._reseed()
        return out

    def _reseed(self) -> None:
        """New random hash seeds: a program tuned to one pair of seeds meets another soon."""
        with self._lock:
            old = list(self._zygotes)
            self.hash_seeds, self._validated_since_seeding = _random_hash_seeds(), 0
            self._zygotes[:] = [self._spawn(i) for i in range(len(old))]
            _shutdown(old, None)
            self.isolation = replace(self.isolation, hash_seeds=self.hash_seeds)

    def check(self, task: Task, answer_text: str) -> bool:
        """Did the solver's extracted answer solve `task`? An output literal (code_o), an
        argument-list literal (code_i), or a program passing every hidden pair (code_f)."""
        return self.judge_many([(task, answer_text)])[0].passed

    def check_many(self, items: Sequence[tuple[Task, str]]) -> list[bool]:
        return [v.passed for v in self.judge_many(items)]

    def judge_many(self, items: Sequence[tuple[Task, str]]) -> list[Verdict]:
        """check_many with the status that says why an answer failed (a key of VERDICTS)."""
        out: list = []
        jobs: dict[int, tuple[_Job, list[str]]] = {}
        for i, (task, answer) in enumerate(items):
            if task.kind == "code_o":
                out.append(_judge_output(task.outputs[0], answer, self.policy))
                continue
            if task.kind == "code_i":
                code, gold, calls = self._compiled(task.program), [task.outputs[0]], [self._arguments(answer)]
            else:
                code, gold = self._compiled(answer), [o for _, o in task.hidden_pairs]
                calls = [self._arguments(x) for x, _ in task.hidden_pairs]
            bad = next((x for x in [code, *calls] if isinstance(x, Invalid)), None)
            if bad is not None and task.kind == "code_i" and bad is calls[0]:
                bad = Invalid("answer_too_long" if bad.reason == "input_too_long" else "answer_not_literal", bad.detail)
            out.append(Verdict(False, bad.reason, bad.detail) if bad else None)
            if bad is None:
                jobs[i] = (self._job(code, calls, None, None), gold)
        self._run_jobs([job for job, _ in jobs.values()])
        for i, (job, gold) in jobs.items():
            out[i] = _judge_runs(job.results, gold)
        return out

    def run(
        self, program: str, inputs: Sequence[str], timeout_s: float | None = None, entry_point: str = "f"
    ) -> list[RunResult]:
        """Call `entry_point` on each input, all in one confined process; one result per input."""
        return self.run_many([(program, tuple(inputs))], timeout_s, entry_point)[0]

    def run_many(
        self, items: Sequence[tuple[str, Sequence[str]]], timeout_s: float | None = None, entry_point: str = "f"
    ) -> list[list[RunResult]]:
        out, jobs = [], []
        for program, inputs in items:
            code = self._compiled(program, entry_point)
            parsed = [code if isinstance(code, Invalid) else self._arguments(t) for t in inputs]
            out.append([RunResult(x.reason, detail=x.detail) if isinstance(x, Invalid) else None for x in parsed])
            todo = [k for k, x in enumerate(parsed) if not isinstance(x, Invalid)]
            if todo:
                jobs.append(
                    (len(out) - 1, todo, self._job(code, [parsed[k] for k in todo], None, timeout_s, entry_point))
                )
        self._run_jobs([job for _, _, job in jobs])
        for row, todo, job in jobs:
            for k, r in zip(todo, job.results):
                out[row][k] = RunResult(r["status"], r["output"], r["detail"], r["seconds"])
        return out

    def run_suites(
        self, items: Sequence[tuple[str, Sequence[str], Sequence[float], float]], entry_point: str = "f"
    ) -> list[list[RunResult]]:
        """Per item (program, inputs, per-input limits, wall limit): the module runs once, then
        `entry_point` on each input in turn, each call under its own limit (a call over it is
        "timeout" and ends the run: later inputs are "not_run"/"crash"), the process under the wall
        limit. State kept between calls carries over, as in evalplus' `unsafe_execute`."""
        out, jobs = [], []
        for program, inputs, limits, wall_s in items:
            if len(limits) != len(inputs) or min(limits, default=1.0) <= 0 or wall_s <= 0:
                raise ValueError("run_suites needs one positive limit per input and a positive wall limit")
            code = self._compiled(program, entry_point)
            parsed = [code if isinstance(code, Invalid) else self._arguments(t) for t in inputs]
            bad = next((x for x in parsed if isinstance(x, Invalid)), None)
            out.append([RunResult(bad.reason, detail=bad.detail)] * len(inputs) if bad else None)
            if bad is None:
                jobs.append(
                    (
                        len(out) - 1,
                        self._job(
                            code, parsed, None, wall_s, entry_point, mode="suite", limits=[float(t) for t in limits]
                        ),
                    )
                )
        self._run_jobs([job for _, job in jobs])
        for row, job in jobs:
            out[row] = [RunResult(r["status"], r["output"], r["detail"], r["seconds"]) for r in job.results][
                : len(items[row][1])
            ]
        return out

    def run_script(self, source: str, stdin: str = "", timeout_s: float | None = None) -> ScriptResult:
        """Run a whole program as __main__ reading `stdin`; its stdout comes back (LiveCodeBench)."""
        return self.run_script_many([(source, stdin)], timeout_s)[0]

    def run_script_many(self, items: Sequence[tuple[str, str]], timeout_s: float | None = None) -> list[ScriptResult]:
        out: list = []
        jobs: dict[int, _Job] = {}
        for i, (source, stdin) in enumerate(items):
            code = self._compiled(source, None)
            out.append(ScriptResult(code.reason, detail=code.detail) if isinstance(code, Invalid) else None)
            if not isinstance(code, Invalid):
                jobs[i] = self._job(code, [], None, timeout_s, mode="script", stdin=stdin)
        self._run_jobs(list(jobs.values()))
        for i, job in jobs.items():
            r = job.results[0]
            out[i] = ScriptResult(r["status"], r["stdout"], r["detail"], r["seconds"])
        return out


def _module_paths(modules: frozenset) -> list[str]:
    """sys.path entries of allowed modules outside the standard library (numpy for benchmarks): the
    zygote runs with -S and imports them once from there, before its root is emptied."""
    import importlib.util
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    paths = []
    for top in sorted({m.split(".")[0] for m in modules}):
        spec = importlib.util.find_spec(top) if top not in sys.builtin_module_names else None
        origin = (
            os.path.realpath(spec.origin)
            if spec is not None and spec.origin not in (None, "built-in", "frozen")
            else ""
        )
        if not origin or origin.startswith(stdlib + os.sep) and "site-packages" not in origin:
            continue
        entry = os.path.dirname(os.path.dirname(origin)) if spec.submodule_search_locations else os.path.dirname(origin)
        if entry not in paths:
            paths.append(entry)
    return paths


def _shutdown(zygotes: list[_Zygote], base_dir: str | None) -> None:
    for z in zygotes:
        z.proc.stdin.close()  # EOF: the zygote leaves its loop
    for z in zygotes:
        try:
            z.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            z.proc.kill()
            z.proc.wait()
        z.proc.stdout.close()
    zygotes.clear()
    try:
        if base_dir is not None:
            remove_tree(base_dir)  # iterative: what a program built may be thousands of levels deep
    except OSError:
        pass


# ---------------------------------------------------------------- judging (pure)
def _duplicate(calls: list) -> Invalid | None:
    """code_f inputs must differ as values: a hidden input equal to a shown one (``1`` and ``1``,
    or ``[1,2]`` and ``[1, 2]``) lets a solver pass with a lookup table of the shown pairs."""
    for j in range(1, len(calls)):
        for i in range(j):
            if values_equal(calls[i], calls[j]):
                return Invalid("duplicate_inputs", f"input {j + 1} repeats input {i + 1}")
    return None


def _combine(p: Proposal, run_a: list[dict], run_b: list[dict]) -> Task | Invalid:
    """Both hash-seed runs must succeed on every input and agree as values."""
    for run, other, which in ((run_a, run_b, "first"), (run_b, run_a, "second")):
        bad = next((r for r in run if r["status"] != "ok"), None)
        if bad is not None:  # an exception in one seed only is hash-order dependence
            flaky = bad["status"] == "runtime_error" and all(r["status"] == "ok" for r in other)
            detail = bad["detail"] or ("wall-clock or CPU limit" if bad["status"] == "timeout" else "")
            return Invalid(
                "nondeterministic" if flaky else bad["status"], f"{which} run" + (f": {detail}" if detail else "")
            )
    for a, b in zip(run_a, run_b):
        try:  # the child is untrusted: its outputs must really be literals
            value = parse_literal(a["output"])
            same = a["output"] == b["output"] or values_equal(value, parse_literal(b["output"]))
        except ValueError:
            return Invalid("output_not_literal", a["output"][:100])
        if not same:
            return Invalid("nondeterministic", f"{a['output'][:80]} != {b['output'][:80]}")
    seconds = max(sum(r["seconds"] for r in run_a), sum(r["seconds"] for r in run_b))
    return Task(
        p.kind, p.program, tuple(p.inputs), tuple(r["output"] for r in run_a), p.message, meta={"seconds": seconds}
    )


def _judge_output(gold: str, answer: str, policy: SandboxPolicy) -> Verdict:
    if len(answer) > 2 * policy.max_output_chars:
        return Verdict(False, "answer_too_long")
    try:
        value = parse_literal(answer)
    except ValueError as e:
        return Verdict(False, "answer_not_literal", str(e))
    return Verdict(True, "pass") if values_equal(value, parse_literal(gold)) else Verdict(False, "wrong")


def _judge_runs(results: list[dict], gold: Sequence[str]) -> Verdict:
    for r, g in zip(results, gold):
        if r["status"] != "ok":
            return Verdict(False, r["status"], r["detail"])
        try:
            if not values_equal(parse_literal(r["output"]), parse_literal(g)):
                return Verdict(False, "wrong")
        except ValueError:
            return Verdict(False, "output_not_literal")
    return Verdict(True, "pass")
