"""What one step records: a tasks.jsonl row per proposal, the namespaced metrics of each member
(validity, fresh vs buffer solve rates, invalid reasons, lengths), token counts for the compute
table, stage timings and peak memory. Read by `loop.run`; the analysis package reads the records.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Sequence

from populora_nb.buffers import task_to_json
from populora_nb.copies import copy_rate
from populora_nb.policy import TokenIds
from populora_nb.prompts import ParseFailure
from populora_nb.stages import Attempt, Proposed, StepOutcome
from populora_nb.tasks import Task
from populora_nb.verify.verifier import Invalid, Proposal


def task_rows(step: int, proposals: Sequence[Proposed]) -> list[dict]:
    """One tasks.jsonl row per proposal: the verdict (a valid task's triplet, or why it was
    rejected, with the program as written), the matched solver and rho, the raw completion."""
    rows = []
    for p in proposals:
        r = p.result
        row = {
            "step": step,
            "proposer": p.proposer,
            "kind": p.kind,
            "solver": p.solver,
            "solve_rate": p.rho,
            "copy": p.copy,  # new / reference / earlier for a valid task (populora_nb.copies)
            "repeat": p.repeat,  # the same task as its student meets it, met before (copies.is_repeat)
            "references_dropped": p.references_dropped,  # left out so the prompt fits its token budget
            "completion": p.completion[:4000],
        }  # what the teacher wrote, for reading failures
        if isinstance(r, Task):
            row.update(task_to_json(r), valid=True, reason=None)
            row.pop("meta", None)
        else:
            row.update(program="", inputs=[], outputs=[], message="", valid=False, reason=invalid_reason(r, ":"))
        if isinstance(r, Invalid) and isinstance(p.parsed, Proposal):
            row["program"] = p.parsed.program  # what the teacher wrote, for reading why it was rejected
        rows.append(row)
    return rows


def invalid_reason(result: Invalid | ParseFailure | None, sep: str) -> str:
    """Why a proposal is invalid: the verifier's reason, or ``parse``, ``sep`` and the parse failure
    (``not_validated``: it never reached the verifier)."""
    if isinstance(result, Invalid):
        return result.reason
    return f"parse{sep}{result.reason if result is not None else 'not_validated'}"


def member_metrics(member: str, role: str, outcome: StepOutcome, kinds: Sequence[str]) -> dict:
    """The namespaced metrics of one member for one step."""
    row: dict = {"member": member, "role": role}
    mine = [p for p in outcome.proposals if p.proposer == member]
    if mine:
        valid = [p for p in mine if isinstance(p.result, Task)]
        row["teacher/n_proposed"] = len(mine)
        row["teacher/references_dropped"] = sum(p.references_dropped for p in mine)
        row["teacher/valid_rate"] = len(valid) / len(mine)
        rhos = [p.rho for p in valid if p.rho is not None]
        row["teacher/rho_mean"] = sum(rhos) / len(rhos) if rhos else None
        # copies of a shown reference, a seed / warm-up example or an earlier program, among valid ones
        row["teacher/copy_rate"] = copy_rate([p.copy for p in valid])
        row["teacher/repeat_rate"] = sum(bool(p.repeat) for p in valid) / len(valid) if valid else None
        row["teacher/reference_copy_rate"] = sum(p.copy == "reference" for p in valid) / len(valid) if valid else None
        for p in mine:
            if not isinstance(p.result, Task):
                key = f"invalid/{invalid_reason(p.result, '_')}"
                row[key] = row.get(key, 0) + 1
        for kind in kinds:
            of_kind = [p for p in mine if p.kind == kind]
            if of_kind:
                row[f"valid_rate/{kind}"] = sum(isinstance(p.result, Task) for p in of_kind) / len(of_kind)
        row["lengths/propose_chars"] = sum(len(p.completion) for p in mine) / len(mine)
    attempts = [a for a in outcome.attempts if a.solver == member]
    if attempts:
        # Headline solve rates are over fresh tasks (the rho the teacher reward is about); buffer tasks
        # (top-ups, AZR's solver batch, seeds) are easier and older, recorded apart under buffer_*.
        row["student/n_attempts"] = len(attempts)
        row["student/malformed_rate"] = _rate(attempts, "malformed")
        for prefix, subset in (
            ("", [a for a in attempts if a.fresh]),
            ("buffer_", [a for a in attempts if not a.fresh]),
        ):
            if subset:
                row[f"student/{prefix}solve_rate"] = _rate(subset, "correct")
                row[f"student/n_{prefix or 'fresh_'}attempts"] = len(subset)
            for kind in kinds:
                tried = [a for a in subset if a.task.kind == kind]
                if tried:
                    row[f"{prefix}solve_rate/{kind}"] = _rate(tried, "correct")
        row["lengths/solve_chars"] = sum(len(a.completion) for a in attempts) / len(attempts)
    for s_role in ("propose", "solve"):
        rewards = [s.reward for s in outcome.samples if s.member == member and s.group[1] == s_role]
        if rewards:
            row[f"reward/{s_role}_mean"] = sum(rewards) / len(rewards)
    row.update(outcome.update_stats.get(member, {}))
    row.update({f"time/{k}": v for k, v in outcome.timings.items()})
    return row


def _rate(attempts: Sequence[Attempt], status: str) -> float:
    return sum(a.status == status for a in attempts) / len(attempts)


def token_counts(outcome: StepOutcome, tokenizer) -> dict[str, dict[str, float]]:
    """Per member, the step's compute in completion tokens: ``compute/generated_tokens`` (its
    proposals and every rollout it sampled, trained on or not) and ``compute/trained_tokens`` (the
    completions of its samples, when its update ran): the paper matches compute per adapter, and
    these counts let the report measure that instead of assuming it."""
    counts: dict[str, dict[str, float]] = {}

    def add(member: str, key: str, text: str, token_ids: TokenIds | None) -> None:
        # The sampled ids when the policy gave them (the stop token counts: it was generated and is
        # trained on), else the text's tokenisation.
        n = len(token_ids[1]) if token_ids is not None else len(tokenizer(text, add_special_tokens=False)["input_ids"])
        slot = counts.setdefault(member, {"compute/generated_tokens": 0.0, "compute/trained_tokens": 0.0})
        slot[key] += n

    for p in outcome.proposals:
        add(p.proposer, "compute/generated_tokens", p.completion, p.token_ids)
    for a in outcome.attempts:
        add(a.solver, "compute/generated_tokens", a.completion, a.token_ids)
    for s in outcome.samples:
        stats = outcome.update_stats.get(s.member)
        if stats is not None and stats.get("optim/skipped") != 1.0:  # an all-zero-advantage update is skipped
            add(s.member, "compute/trained_tokens", s.completion, s.token_ids)
    return counts


class Timer:
    def __init__(self, timings: dict[str, float], key: str):
        self.timings, self.key = timings, key

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.timings[self.key] = self.timings.get(self.key, 0.0) + time.perf_counter() - self.t0


def reset_peak_memory() -> None:
    """Start a new peak-memory window: Linux's VmHWM (via /proc/self/clear_refs) and CUDA's peak."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:  # not Linux: the lifetime peak
        f.write("5")  # "5" resets the peak RSS only
    torch = sys.modules.get("torch")  # never import torch here: the scripted tests run without a model
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gb() -> dict[str, float]:
    """Peak memory since `reset_peak_memory`: the process's resident set (the whole CPU footprint:
    base, adapters, optimizer, activations) and, when CUDA is in use, the GPU's allocated peak."""
    try:
        with open("/proc/self/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # lifetime peak, KiB on Linux
    usage = {"memory/peak_rss_gb": kib / 2**20}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        usage["memory/cuda_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return usage


def memory_mark(stage: str) -> dict[str, float | str]:
    """The peak reserved and the free memory now, in GB, named by ``stage``: on CUDA the trainer
    allocator's peak since `reset_peak_memory` and the card's free memory; on CPU the peak RSS and
    available RAM."""
    import psutil

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return {"stage": stage, "peak_reserved_gb": torch.cuda.max_memory_reserved() / 2**30, "free_gb": free / 2**30}
    peak = peak_memory_gb()["memory/peak_rss_gb"]
    return {"stage": stage, "peak_reserved_gb": peak, "free_gb": psutil.virtual_memory().available / 2**30}


# ---- the one line a step leaves behind -----------------------------------------------------------
def _mean(rows: Sequence[dict], key: str, role: str | None = None) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None and (role is None or r.get("role") == role)]
    return sum(vals) / len(vals) if vals else None


def _count(rows: Sequence[dict], rate: str, n: str) -> tuple[int, int]:
    """(successes, trials) pooled over members from a per-member rate and its trial count."""
    hits = trials = 0
    for r in rows:
        if r.get(rate) is not None and r.get(n):
            hits += round(r[rate] * r[n])
            trials += int(r[n])
    return hits, trials


def step_summary(step: int, rows: Sequence[dict], kinds: Sequence[str], total: int | None = None) -> str:
    """The one-line text a step leaves behind, in a notebook or a terminal. Counts come with every
    rate (1 valid proposal of 4 reads differently from 25 of 100)."""
    parts = [f"step {step}" + (f" ({step + 1}/{total} done)" if total else "")]
    valid, proposed = _count(rows, "teacher/valid_rate", "teacher/n_proposed")
    parts.append(f"valid {valid}/{proposed} proposals" if proposed else "valid -")
    solved, attempts = _count(rows, "student/solve_rate", "student/n_fresh_attempts")
    if attempts:
        parts.append(f"solve rate {solved / attempts:.2f} ({solved}/{attempts} fresh attempts)")
    else:
        parts.append("solve rate - (no valid task to solve)")
    for kind in kinds:
        v = _mean(rows, f"solve_rate/{kind}")
        parts.append(f"{kind} {v:.2f}" if v is not None else f"{kind} -")
    for role in ("teacher", "student"):
        mu = _mean(rows, "rating/mu", role)
        if mu is not None:
            parts.append(f"{role}s μ {mu:.1f}")
    return " · ".join(parts)
