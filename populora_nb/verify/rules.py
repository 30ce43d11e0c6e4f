"""AZR's validity rules and the verdicts on answers, as pure functions of run results (no processes):
what makes a proposal a task and what makes an answer pass (docs/verifier.md, "Rules"). The
`verifier` applies them to what the `pool` ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from populora_nb.tasks import Proposal, Task
from populora_nb.verify.literals import outputs_equal, parse_literal, values_equal
from populora_nb.verify.static_policy import Invalid, SandboxPolicy


@dataclass(frozen=True)
class RunResult:
    """One input's run: a status of protocol.RUN_STATUSES or a static reason; `output` is a repr if "ok"."""

    status: str
    output: str = ""
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class ScriptResult:
    """One whole-program run (`Verifier.run_script_many`): a status, and its stdout if it ran."""

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


# ---------------------------------------------------------------- validity (proposals)
def too_few_inputs(p: Proposal, policy: SandboxPolicy) -> Invalid | None:
    """code_f needs at least `policy.min_code_f_inputs` inputs: one shown and one hidden pair at least."""
    if p.kind == "code_f" and len(p.inputs) < policy.min_code_f_inputs:
        return Invalid("too_few_inputs", f"{len(p.inputs)} < {policy.min_code_f_inputs}")
    return None


def wrong_input_count(task: Task, expected: int) -> Invalid | None:
    """A code_f task must have exactly the inputs its prompt asked for (AZR: 10, half shown, half
    hidden): fewer would make the task easier than the one the proposer was asked for."""
    if task.kind == "code_f" and len(task.inputs) != expected:
        return Invalid("wrong_input_count", f"{len(task.inputs)} inputs, asked for {expected}")
    return None


def duplicate_inputs(calls: list) -> Invalid | None:
    """code_f inputs must differ as values: a hidden input equal to a shown one (``1`` and ``1``,
    or ``[1,2]`` and ``[1, 2]``) lets a solver pass with a lookup table of the shown pairs."""
    for j in range(1, len(calls)):
        for i in range(j):
            if values_equal(calls[i], calls[j]):
                return Invalid("duplicate_inputs", f"input {j + 1} repeats input {i + 1}")
    return None


def combine_runs(p: Proposal, run_a: list[dict], run_b: list[dict]) -> Task | Invalid:
    """The task the two hash-seed runs make: both must succeed on every input and agree as values."""
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


# ---------------------------------------------------------------- verdicts (answers)
def judge_output(gold: str, answer: str, policy: SandboxPolicy) -> Verdict:
    """A code_o answer: a literal whose value is ``==`` to the gold output's (never executed)."""
    if len(answer) > 2 * policy.max_output_chars:
        return Verdict(False, "answer_too_long")
    try:
        value = parse_literal(answer)
    except ValueError as e:
        return Verdict(False, "answer_not_literal", str(e))
    return Verdict(True, "pass") if outputs_equal(parse_literal(gold), value) else Verdict(False, "wrong")


def judge_runs(results: list[dict], gold: Sequence[str]) -> Verdict:
    """A code_i or code_f answer from its runs: every run ok and its value ``==`` to its gold output's."""
    for r, g in zip(results, gold):
        if r["status"] != "ok":
            return Verdict(False, r["status"], r["detail"])
        try:
            if not outputs_equal(parse_literal(g), parse_literal(r["output"])):
                return Verdict(False, "wrong")
        except ValueError:
            return Verdict(False, "output_not_literal")
    return Verdict(True, "pass")
