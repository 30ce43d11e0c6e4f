"""The zygote pool the `Verifier` runs on: start the sandbox zygotes (two hash seeds), report the
isolation they achieved, send them runs and collect the replies, replace a zygote that dies or
hangs, draw new hash seeds. It knows requests and replies, not tasks (`rules`, `verifier`).
"""

from __future__ import annotations

import marshal
import os
import selectors
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, replace
from types import CodeType
from typing import TypeVar

from populora_nb.verify.isolation import remove_tree, sweep_stale
from populora_nb.verify.protocol import decode_run, reply_cap
from populora_nb.verify.static_policy import TASK_POLICY, SandboxPolicy
from populora_nb.verify.zygote import (
    Isolation,
    IsolationUnavailable,
    Zygote,
    isolation_of,
    module_paths,
    random_hash_seeds,
    read_exactly,
    shutdown,
    spawn_zygote,
)

PIPELINE_BYTES = 16_384
"""A request queued behind a running one must be this small: the 64 KiB pipe then never fills, so
parent and zygote can never both block writing to each other."""


UID_BASE = 100_000
"""As root, children run as UID_BASE + f(parent pid, zygote): a uid of their own."""
STALE_PREFIX = "populora-sandbox-"
"""Run directories (root-chroot and none levels) live in ``{tmp}/{STALE_PREFIX}{owner pid}-*``."""


@dataclass
class _Job:
    """One run: a compiled program on marshalled arguments, for hash-seed class 0, 1 or either."""

    seed_class: int | None
    request: bytes
    timeout_s: float
    n: int
    mode: str = "call"
    results: list[dict] = field(default_factory=list)
    """Per-input replies, filled by `ZygotePool._run_jobs`."""
    retried: bool = False


_Pool = TypeVar("_Pool", bound="ZygotePool")


class ZygotePool:
    """Warmed sandbox zygotes (one per worker, two hash seeds) and the runs sent to them.

    Use as a context manager (or call `close`). Thread-safe: concurrent batches are serialised and
    each batch uses every worker. `workers` is how many runs go at once (one per core on an idle
    machine, twice that hides scheduling latency on a busy one). `hash_seeds`: None draws two
    random different seeds, and new ones every `reseed_every` validated proposals (the zygotes
    restart); fixed seeds are never changed. `namespaces=False` skips the namespace layer (as on a
    kernel without user namespaces); without root that leaves no OS-level isolation, and `start`
    refuses unless `allow_unsafe_no_isolation` is True.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        workers: int = 2,
        policy: SandboxPolicy = TASK_POLICY,
        hash_seeds: tuple[int, int] | None = None,
        network_namespace: bool = True,
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
        self.network_namespace, self.namespaces, self.reseed_every = network_namespace, namespaces, reseed_every
        self.allow_unsafe_no_isolation = allow_unsafe_no_isolation
        self._fixed_seeds = hash_seeds is not None
        self.hash_seeds: tuple[int, int] = (hash_seeds[0], hash_seeds[1]) if hash_seeds else random_hash_seeds()
        self._validated_since_seeding = 0
        self.isolation: Isolation | None = None
        self._lock = threading.RLock()
        self._zygotes: list[Zygote] = []
        self._base_dir: str | None = None
        self._finalizer: weakref.finalize | None = None

    def __enter__(self: _Pool) -> _Pool:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start the zygotes (a no-op when running); raise IsolationUnavailable where none would be
        isolated and the caller has not opted in."""
        with self._lock:
            if self._zygotes:
                return
            sweep_stale(tempfile.gettempdir(), STALE_PREFIX)  # left by owners killed with -9
            self._base_dir = tempfile.mkdtemp(prefix=f"{STALE_PREFIX}{os.getpid()}-")
            os.chmod(self._base_dir, 0o711)  # the unprivileged child must reach its own run dir
            # Also on garbage collection or a failed start: no zygote or temp dir outlives us.
            self._finalizer = weakref.finalize(self, shutdown, self._zygotes, self._base_dir)
            try:  # two hash seeds need two zygotes even for one worker; `workers` caps concurrency
                self._zygotes.extend(self._spawn(i) for i in range(max(2, self.workers + self.workers % 2)))
            except BaseException:
                self.close()
                raise
            self.isolation = isolation_of([z.hello for z in self._zygotes], self.hash_seeds)
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

    def _spawn(self, index: int) -> Zygote:
        cfg = {
            "allowed_modules": sorted(self.policy.allowed_modules),
            "disable_dangerous": self.policy.disable_dangerous,
            "guard_imports": self.policy.guard_imports,
            "max_output_chars": self.policy.max_output_chars,
            "stdout_cap": self.policy.max_stdout_chars,
            "paths": module_paths(self.policy.allowed_modules),
            "netns": self.network_namespace,
            "base_dir": self._base_dir,
            "namespaces": self.namespaces,
            "owner_pid": os.getpid(),
            # as root, one uid per zygote and parent process: no child can signal another run's child
            "uid": UID_BASE + (os.getpid() * 64 + index) % 1_000_000_000,
        }
        return spawn_zygote(cfg, self.hash_seeds[index % 2], index % 2, self.memory_mb)

    def close(self) -> None:
        """Stop every zygote and remove the run directories; `start` may be called again."""
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()  # runs shutdown once
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
                    sel.unregister(self._zygotes[zi].replies)
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
                        z.requests.write(held[-1].request)
                        z.requests.flush()
                    except OSError:
                        lose(zi)
                        continue
                    if zi not in deadlines:
                        sel.register(z.replies, selectors.EVENT_READ, zi)
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
        stream, caps = self._zygotes[zi].replies, (self.policy.max_output_chars, self.policy.max_stdout_chars)
        try:
            why, signal_number, exit_code, size = stream.readline(256).split()
            cap = reply_cap(job.mode, job.n, *caps)
            if not 0 <= int(size) <= cap:  # the zygote enforces the cap: anything else is not a zygote reply
                return False
            data = read_exactly(stream, int(size))
            if len(data) != int(size):  # EOF inside the reply: the zygote died
                return False
        except ValueError:  # EOF or garbage: the zygote died
            return False
        job.results = decode_run(data, job.n, why.decode().strip("-"), int(signal_number), int(exit_code), *caps)
        return True

    def _replace(self, zi: int, lost: list[_Job], queues: dict) -> None:
        """Replace a dead or stuck zygote; retry each job it held once, then report sandbox_error."""
        self._zygotes[zi].proc.kill()
        shutdown([self._zygotes[zi]], None)
        self._zygotes[zi] = self._spawn(zi)
        for job in reversed(lost):
            if job.retried:
                failed = dict(status="sandbox_error", output="", detail="zygote failed twice", stdout="", seconds=0.0)
                job.results = [failed] * job.n
            else:
                job.retried = True
                queues[job.seed_class].appendleft(job)

    def reseed(self) -> None:
        """New random hash seeds: a program tuned to one pair of seeds meets another soon."""
        with self._lock:
            old = list(self._zygotes)
            self.hash_seeds, self._validated_since_seeding = random_hash_seeds(), 0
            self._zygotes[:] = [self._spawn(i) for i in range(len(old))]
            shutdown(old, None)
            if self.isolation is not None:
                self.isolation = replace(self.isolation, hash_seeds=self.hash_seeds)
