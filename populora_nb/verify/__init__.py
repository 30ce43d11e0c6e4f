"""Checking model-written programs: AZR's validity rules, the worker pool that runs them, and the sandbox.

Parent side: `verifier` (the `Verifier` the loop and the benchmarks call), `rules`, `pool`, `zygote`
and `static_policy`. Shared by parent and sandbox, standard library only: `literals` and `protocol`.
Inside the sandbox: `sandbox` (run as a script, never imported), `lockdown` and `isolation`.
`unsafe_azr` is AZR's own unsandboxed executor, kept only to measure agreement with it.

Importing this package loads no third-party module (the zygotes start only on `Verifier.start`).
"""

from populora_nb.tasks import Proposal, Task
from populora_nb.verify.literals import outputs_equal, parse_arguments, parse_literal, values_equal
from populora_nb.verify.rules import RunResult
from populora_nb.verify.static_policy import BENCHMARK_POLICY, INVALID_REASONS, TASK_POLICY, Invalid
from populora_nb.verify.verifier import Verifier
from populora_nb.verify.zygote import SandboxError

__all__ = [
    "BENCHMARK_POLICY",
    "INVALID_REASONS",
    "TASK_POLICY",
    "Invalid",
    "Proposal",
    "RunResult",
    "SandboxError",
    "Task",
    "Verifier",
    "outputs_equal",
    "parse_arguments",
    "parse_literal",
    "values_equal",
]
