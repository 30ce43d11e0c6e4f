"""The solver warm-up: rejection-sampling fine-tuning on the model's own verified solutions, after
the proposer warm-up (`populora_nb.warmup`), so that students start able to solve some tasks: the
learning signal of both AZR and PopuLoRA is a task its solver *sometimes* solves (0 < rho < 1).
Only the verifier decides what is correct; nothing reads a benchmark. Which tasks train and which
measure, and why: docs/methodology.md, "The warm-up" (the solver warm-up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence, Set

from populora_nb.buffers import TaskBuffer
from populora_nb.config import ExperimentConfig
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.sft import Example, fine_tune
from populora_nb.policy import Policy
from populora_nb.solve_batches import worked_examples
from populora_nb.stages import Attempt, SolveJob, solve
from populora_nb.tasks import Task

SOLVE_COLLECT_STEP, SOLVE_MEASURE_STEP = 3_000_000, 4_000_000
"""Step ids the solver warm-up's sampling seeds derive from (`stages.seed_for`): apart from RL's
steps and from the proposer warm-up's (1e6, 2e6)."""


@dataclasses.dataclass(frozen=True)
class SolveRate:
    """Correct attempts out of all attempts (malformed answers count as wrong), over ``tasks`` tasks."""

    correct: int
    total: int
    tasks: int

    @property
    def rate(self) -> float:
        return self.correct / self.total if self.total else float("nan")


def distinct_tasks(tasks: Sequence[Task], exclude: Set[str] = frozenset()) -> list[Task]:
    """One task per (kind, program, inputs), in order, leaving out any whose program is in ``exclude``."""
    unique: dict[tuple[str, str, tuple[str, ...]], Task] = {}
    for t in tasks:
        if t.program not in exclude:
            unique.setdefault((t.kind, t.program, tuple(t.inputs)), t)
    return list(unique.values())


def seed_tasks(buffers: dict[str, TaskBuffer]) -> list[Task]:
    """The seeds of every kind's buffer (code_o and code_i hold the same programs, asked two ways)."""
    return [t for b in buffers.values() for t in b.tasks[: b.n_seeds]]


def attempt(
    config: ExperimentConfig,
    policy: Policy,
    verifier,
    tasks: Sequence[Task],
    step: int,
    member: str,
    examples: dict[str, Task],
) -> list[Attempt]:
    """``warmup.solver_samples`` attempts at every task by ``member``, each prompt showing its kind's
    worked example (``examples``, as `solve_batches.worked_examples` gives RL's), judged by the verifier.

    Generated in chunks of at most ``warmup.batch`` rows, as the native decoder's memory grows with the
    rows of one call; chunk i samples with seed step + i, so before/after draw the same numbers."""
    samples = config.warmup.solver_samples
    per_chunk = max(1, config.warmup.batch // samples)
    attempts: list[Attempt] = []
    for i in range(0, len(tasks), per_chunk):
        jobs = [SolveJob(member, t, None, samples) for t in tasks[i : i + per_chunk]]
        attempts += solve(policy, verifier, jobs, config, step + i // per_chunk, examples)
    return attempts


def solve_rate(attempts: Sequence[Attempt]) -> SolveRate:
    return SolveRate(
        sum(a.status == "correct" for a in attempts),
        len(attempts),
        len({(a.task.kind, a.task.program) for a in attempts}),
    )


def solved_examples(attempts: Sequence[Attempt], limit: int) -> list[Example]:
    """The correct attempts as fine-tuning examples, one per (task, answer text), at most ``limit``."""
    unique: dict[tuple[str, str, tuple[str, ...], str], Example] = {}
    for a in attempts:
        task = a.task
        if a.status == "correct":
            example = Example(task.kind, a.prompt, a.completion, a.token_ids, task.program, tuple(task.inputs), task)
            unique.setdefault((task.kind, task.program, tuple(task.inputs), a.completion.strip()), example)
    return list(unique.values())[:limit]


def run_solver_warmup(
    config: ExperimentConfig,
    policy: LoRAPolicy,
    verifier,
    proposal_examples: Sequence,
    collect_buffers: dict[str, TaskBuffer],
    measure_buffers: dict[str, TaskBuffer],
    held_out_accepted: Sequence[Task],
    member: str,
) -> tuple[dict, list]:
    """On ``member``'s adapter: attempt every training task (``proposal_examples``' tasks, the proposer
    warm-up's accepted proposals, and the collection half's seeds) ``warmup.solver_samples`` times,
    fine-tune on the distinct correct answers, and measure the solve rate before and after, same prompts
    and seeds, on held-out tasks (the measurement half's seeds and ``held_out_accepted``, none sharing a
    training task's program). Returns its report and the examples it fine-tuned on."""
    train = distinct_tasks([e.task for e in proposal_examples if e.task is not None] + seed_tasks(collect_buffers))
    held_out = distinct_tasks([*seed_tasks(measure_buffers), *held_out_accepted], exclude={t.program for t in train})
    shown = worked_examples(collect_buffers)  # the kind's first collection-half seed, as RL shows its first seed
    before = solve_rate(attempt(config, policy, verifier, held_out, SOLVE_MEASURE_STEP, member, shown))
    collected = attempt(config, policy, verifier, train, SOLVE_COLLECT_STEP, member, shown)
    examples = solved_examples(collected, config.warmup.solver_examples)
    losses = fine_tune(policy, examples, config, seed=config.run.seed + 1) if examples else []
    after = solve_rate(attempt(config, policy, verifier, held_out, SOLVE_MEASURE_STEP, member, shown))
    report = {
        "before": dataclasses.asdict(before) | {"rate": before.rate},
        "after": dataclasses.asdict(after) | {"rate": after.rate},
        "collected": dataclasses.asdict(solve_rate(collected)) | {"rate": solve_rate(collected).rate},
        "examples": len(examples),
        "train_tasks": len(train),
        "held_out_tasks": len(held_out),
        "kinds": {k: sum(e.kind == k for e in examples) for k in config.tasks.kinds},
        "sft_steps": len(losses),
        "nll_first": losses[0] if losses else None,
        "nll_last": losses[-1] if losses else None,
    }
    return report, examples
