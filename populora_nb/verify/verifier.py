"""The verifier: validate proposed tasks and check solvers' answers in a sandbox (PopuLoRA §3;
AZR's executor, hardened; docs/verifier.md has the rules and the isolation levels).

Every reward comes from here, and a population multiplies the proposers that will look for holes.
Two layers stand between a model's program and the machine: the static policy (`static_policy`, a
fast first filter with a clear reason, never the boundary) and the sandbox (`sandbox`, `isolation`,
run by `pool`); with no OS-level isolation `start` refuses unless ``allow_unsafe_no_isolation=True``.
The parent never executes model text: inputs, answers and outputs are parsed with ``ast`` only and
compared as values (`literals`), so ``'zz') or (True`` and objects with an always-true ``__eq__``
cannot pass. The child's result lines are data: capped, parsed as literals, one per input, for
that run only (`protocol`). Outputs are capped, never truncated. Determinism: two processes with
different secret ``PYTHONHASHSEED`` (redrawn every `reseed_every` validated proposals) must agree
as values, and f called twice per input in each must answer the same.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any

from populora_nb.tasks import TASK_KINDS, Proposal, Task, TaskKind
from populora_nb.verify.literals import parse_arguments
from populora_nb.verify.pool import ZygotePool, _Job
from populora_nb.verify.rules import (
    RunResult,
    ScriptResult,
    Verdict,
    combine_runs,
    duplicate_inputs,
    judge_output,
    judge_runs,
    too_few_inputs,
    wrong_input_count,
)
from populora_nb.verify.static_policy import Invalid, compile_program
from populora_nb.verify.zygote import Isolation


def _parse_input(max_chars: int, text: str) -> tuple | Invalid:
    """The argument list an input text writes, or why it is not one."""
    if len(text) > max_chars:
        return Invalid("input_too_long", f"{len(text)} > {max_chars}")
    try:
        return parse_arguments(text)
    except ValueError as e:
        return Invalid("input_not_literal", str(e))


class Verifier(ZygotePool):
    """Validates tasks and checks answers on a pool of warmed zygotes (one per worker, two seeds).

    Use as a context manager (or call `close`). The settings are `pool.ZygotePool`'s; `policy` is
    what model code may do (`static_policy.SandboxPolicy`).
    """

    def __init__(self, *args: Any, **settings: Any) -> None:
        super().__init__(*args, **settings)
        self._code_cache: dict[tuple[str, str | None], CodeType | Invalid] = {}
        # Memoised (LRU, bounded: MBPP+ alone has 165k plus inputs): benchmark scoring parses the same
        # plus inputs for every candidate. The parent only marshals these values, so sharing them is safe.
        parse = functools.partial(_parse_input, self.policy.max_input_chars)
        self._arguments: Callable[[str], tuple | Invalid] = functools.lru_cache(maxsize=100_000)(parse)

    @classmethod
    def from_config(cls, vc) -> Verifier:
        """A (not yet started) verifier with a `config.VerifierConfig`'s limits."""
        return cls(
            timeout_s=vc.timeout_s,
            memory_mb=vc.memory_mb,
            workers=vc.n_workers,
            allow_unsafe_no_isolation=vc.allow_unsafe_no_isolation,
        )

    @classmethod
    def probe(cls, vc) -> Isolation:
        """The isolation a verifier with these settings gets here (starts and stops one); raises
        SandboxError where it would refuse to run model code."""
        with cls.from_config(dataclasses.replace(vc, workers=1)) as v:
            assert v.isolation is not None  # set by start()
            return v.isolation

    # ------------------------------------------------------------ preparing work (parent only)
    def _compiled(self, program: str, entry_point: str | None = "f") -> CodeType | Invalid:
        key = (program, entry_point)
        with self._lock:  # the cache, and catch_warnings, are not thread-safe on their own
            if key not in self._code_cache:
                if len(self._code_cache) > 4096:  # bounded: a population proposes many one-off programs
                    self._code_cache.clear()
                self._code_cache[key] = compile_program(program, self.policy, entry_point)
            return self._code_cache[key]

    def _prepare(self, p: Proposal) -> tuple[CodeType, list] | Invalid:
        """The compiled program and parsed inputs of a proposal, or why it is invalid before running."""
        if p.kind not in TASK_KINDS:
            raise ValueError(f"kind must be one of {TASK_KINDS}, got {p.kind!r}")
        if p.kind != "code_f" and len(p.inputs) != 1:
            raise ValueError(f"{p.kind} takes exactly one input, got {len(p.inputs)}")
        if p.kind == "code_f" and not p.message.strip():
            return Invalid("no_message")
        code, parsed = self._parsed(p.program, p.inputs)
        bad = too_few_inputs(p, self.policy) or next((x for x in parsed if isinstance(x, Invalid)), None)
        return bad or duplicate_inputs(parsed) or (code, parsed)

    # ------------------------------------------------------------ public API
    def validate(self, kind: TaskKind, program: str, inputs: Sequence[str], message: str = "") -> Task | Invalid:
        """A `Task` when `program` runs deterministically on every input within the limits."""
        return self.validate_many([Proposal(kind, program, tuple(inputs), message)])[0]

    def validate_many(self, proposals: Sequence[Proposal], code_f_inputs: int | None = None) -> list[Task | Invalid]:
        """validate() for a batch; every run of every proposal shares the worker pool.

        `code_f_inputs`: the number of inputs the proposer's prompt asked for; a code_f task with
        another number is "wrong_input_count" (None: any number from `policy.min_code_f_inputs`).

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
            verdict = combine_runs(
                proposals[i], *([r for job in jobs for r in job.results] for jobs in (jobs_a, jobs_b))
            )
            if isinstance(verdict, Task) and code_f_inputs is not None:
                verdict = wrong_input_count(verdict, code_f_inputs) or verdict
            out[i] = verdict
        self._validated_since_seeding += len(runs)
        if not self._fixed_seeds and self._validated_since_seeding >= self.reseed_every:
            self.reseed()
        return out

    def check(self, task: Task, answer_text: str) -> bool:
        """Did the solver's extracted answer solve `task`? An output literal (code_o), an
        argument-list literal (code_i), or a program passing every hidden pair (code_f)."""
        return self.judge_many([(task, answer_text)])[0].passed

    def _parsed(self, program: str, inputs: Sequence[str], entry_point: str | None = "f") -> tuple[Any, list]:
        """The compiled program and each input's argument list, or why not (an Invalid program is
        every input's reason)."""
        code = self._compiled(program, entry_point)
        return code, [code] * len(inputs) if isinstance(code, Invalid) else [self._arguments(t) for t in inputs]

    def judge_many(self, items: Sequence[tuple[Task, str]]) -> list[Verdict]:
        """`check` for a batch of (task, answer), with the status that says why an answer failed (a
        key of VERDICTS); every run shares the worker pool."""
        out: list = []
        jobs: dict[int, tuple[_Job, list[str]]] = {}
        for i, (task, answer) in enumerate(items):
            if task.kind == "code_o":
                out.append(judge_output(task.outputs[0], answer, self.policy))
                continue
            if task.kind == "code_i":
                code, gold, calls = self._compiled(task.program), [task.outputs[0]], [self._arguments(answer)]
            else:
                code, calls = self._parsed(answer, [x for x, _ in task.hidden_pairs])
                gold = [o for _, o in task.hidden_pairs]
            bad = next((x for x in [code, *calls] if isinstance(x, Invalid)), None)
            if bad is not None and task.kind == "code_i" and bad is calls[0]:
                bad = Invalid("answer_too_long" if bad.reason == "input_too_long" else "answer_not_literal", bad.detail)
            out.append(Verdict(False, bad.reason, bad.detail) if bad else None)
            if bad is None:
                assert isinstance(code, CodeType)  # an Invalid program would be `bad`
                jobs[i] = (self._job(code, calls, None, None), gold)
        self._run_jobs([job for job, _ in jobs.values()])
        for i, (job, gold) in jobs.items():
            out[i] = judge_runs(job.results, gold)
        return out

    def run_many(
        self, items: Sequence[tuple[str, Sequence[str]]], timeout_s: float | None = None, entry_point: str = "f"
    ) -> list[list[RunResult]]:
        """Per (program, inputs): `entry_point` called on each input in one confined process, the
        module afresh before each; one result per input. Every run shares the worker pool."""
        out: list[list] = []
        jobs: list[tuple[list, list[int], _Job]] = []
        for program, inputs in items:
            code, parsed = self._parsed(program, inputs, entry_point)
            out.append([RunResult(x.reason, detail=x.detail) if isinstance(x, Invalid) else None for x in parsed])
            todo = [k for k, x in enumerate(out[-1]) if x is None]
            if todo:
                jobs.append((out[-1], todo, self._job(code, [parsed[k] for k in todo], None, timeout_s, entry_point)))
        self._run_jobs([job for _, _, job in jobs])
        for row, todo, job in jobs:
            for k, r in zip(todo, job.results):
                row[k] = RunResult(r["status"], r["output"], r["detail"], r["seconds"])
        return out

    def run_suites(
        self, items: Sequence[tuple[str, Sequence[str], Sequence[float], float]], entry_point: str = "f"
    ) -> list[list[RunResult]]:
        """Per item (program, inputs, per-input limits, wall limit): the module runs once, then
        `entry_point` on each input in turn, each call under its own limit (a call over it is
        "timeout" and ends the run: later inputs are "not_run"/"crash"), the process under the wall
        limit. State kept between calls carries over, as in evalplus' `unsafe_execute`."""
        out: list[list[RunResult]] = []
        jobs: list[tuple[int, _Job]] = []
        for program, inputs, limits, wall_s in items:
            if len(limits) != len(inputs) or min(limits, default=1.0) <= 0 or wall_s <= 0:
                raise ValueError("run_suites needs one positive limit per input and a positive wall limit")
            code, parsed = self._parsed(program, inputs, entry_point)
            bad = next((x for x in [code, *parsed] if isinstance(x, Invalid)), None)
            out.append([RunResult(bad.reason, detail=bad.detail)] * len(inputs) if bad else [])
            if bad is None:
                limits = [float(t) for t in limits]
                jobs.append((len(out) - 1, self._job(code, parsed, None, wall_s, entry_point, "suite", limits=limits)))
        self._run_jobs([job for _, job in jobs])
        for row, job in jobs:
            results = job.results[: len(items[row][1])]
            out[row] = [RunResult(r["status"], r["output"], r["detail"], r["seconds"]) for r in results]
        return out

    def run_script_many(self, items: Sequence[tuple[str, str]], timeout_s: float | None = None) -> list[ScriptResult]:
        """Run each whole program as __main__ reading its stdin; its stdout comes back (LiveCodeBench).
        Every run shares the worker pool."""
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
