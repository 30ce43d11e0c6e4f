"""Checking model-written programs: AZR's validity rules, the worker pool that runs them, and the sandbox.

Parent side: `verifier` (the `Verifier` the loop and the benchmarks call), `rules` (what makes a
proposal a task and an answer a pass, as pure functions of run results), `pool` (the zygote pool:
dispatching runs, replacing zygotes, reseeding), `zygote` (spawning one zygote, the `Isolation` it
reports) and `static_policy` (the AST screen and allow-lists). Shared by parent and sandbox, standard
library only: `literals` (parsing and writing values, never executing them) and `protocol` (the
reply lines). Inside the sandbox: `sandbox` (the zygote script, run as a script, never imported),
`lockdown` (its one-time stubs) and `isolation` (Linux namespaces, no root). `unsafe_azr` is AZR's
own unsandboxed executor, kept only to measure agreement with it.

Importing this package loads no third-party module (the zygotes start only on `Verifier.start`).
"""

from populora_nb.tasks import Proposal, Task
from populora_nb.verify.literals import outputs_equal, parse_arguments, parse_literal, values_equal
from populora_nb.verify.rules import RunResult, ScriptResult, Verdict
from populora_nb.verify.static_policy import (
    BENCHMARK_POLICY,
    INVALID_REASONS,
    TASK_POLICY,
    VERDICTS,
    Invalid,
    SandboxPolicy,
    static_check,
)
from populora_nb.verify.verifier import Verifier
from populora_nb.verify.zygote import Isolation, IsolationUnavailable, SandboxError

__all__ = [
    "BENCHMARK_POLICY",
    "INVALID_REASONS",
    "TASK_POLICY",
    "VERDICTS",
    "Invalid",
    "Isolation",
    "IsolationUnavailable",
    "Proposal",
    "RunResult",
    "SandboxError",
    "SandboxPolicy",
    "ScriptResult",
    "Task",
    "Verdict",
    "Verifier",
    "outputs_equal",
    "parse_arguments",
    "parse_literal",
    "static_check",
    "values_equal",
]
