"""Which tasks each solver answers in a step, and how many rollouts of each it learns from: the
solve stage's batches (`stages.solve` runs them).

PopuLoRA's students answer every valid task their teachers posed, k rollouts each, topped up from the
buffer to the same number of tasks per kind (per-adapter compute matching: every member gets as many
samples as any other); AZR's agent measures each of its valid proposals with k rollouts it does not
learn from (they set ρ for the proposer reward) and learns from its own batch of buffer tasks, one
response each.
"""

from __future__ import annotations

from populora_nb.buffers import TaskBuffer
from populora_nb.config import ExperimentConfig
from populora_nb.prompts import CODE_F_EXAMPLE
from populora_nb.stages import Proposed, SolveJob, rng_for
from populora_nb.tasks import Task


def assignments(partner: dict[str, str], proposals: list[Proposed], students: list[str]) -> dict[str, list[int]]:
    """student -> the indices of the proposals its matched teachers wrote this step, in proposal order."""
    return {s: [i for i, p in enumerate(proposals) if partner[p.proposer] == s] for s in students}


def solve_jobs(
    assignments: dict[str, list[int]],
    proposals: list[Proposed],
    buffers: dict[str, TaskBuffer],
    config: ExperimentConfig,
    step: int,
    quota: int,
    trained_rollouts: int | None = None,
) -> list[SolveJob]:
    """PopuLoRA's student batch: k rollouts of every valid task proposed to each solver, topped up from
    the buffers to ``quota`` tasks of each kind per solver (compute matching), ``trained_rollouts`` of
    each trained on (None: all k)."""
    rng = rng_for(config.run.seed, step, "topup")
    k, r = config.rl.rollouts, trained_rollouts
    jobs: list[SolveJob] = []
    for solver, indices in assignments.items():
        for kind in config.tasks.kinds:
            mine = [i for i in indices if isinstance(proposals[i].result, Task) and proposals[i].kind == kind]
            jobs += [SolveJob(solver, proposals[i].result, i, k, trained_rollouts=r) for i in mine]  # type: ignore[arg-type]
            missing = quota - len(mine)
            if missing > 0 and kind in buffers:
                jobs += [SolveJob(solver, t, None, k, trained_rollouts=r) for t in buffers[kind].sample(missing, rng)]
    return jobs


def learnability_jobs(solver: str, proposals: list[Proposed], rollouts: int) -> list[SolveJob]:
    """AZR's difficulty estimate: `rollouts` samples of every valid proposal, to compute rho for the
    proposer reward. Not trained on (AZR's solver learns from its own batch, `buffer_jobs`)."""
    return [
        SolveJob(solver, p.result, i, rollouts, train=False)
        for i, p in enumerate(proposals)
        if isinstance(p.result, Task)
    ]


def buffer_jobs(solver: str, buffers: dict[str, TaskBuffer], config: ExperimentConfig, step: int) -> list[SolveJob]:
    """AZR's solver batch: `proposals_per_kind` tasks of each kind from the buffer as it stood before
    this step's proposals (`TaskBuffer.sample_max_new`: the previous step's valid tasks first), one
    response each, trained on (AZR: n = 1 response per solver prompt, REINFORCE++ across the batch)."""
    rng = rng_for(config.run.seed, step, "solver_batch")
    return [
        SolveJob(solver, t, None, 1)
        for kind in config.tasks.kinds
        if kind in buffers
        for t in buffers[kind].sample_max_new(config.rl.proposals_per_kind, rng)
    ]


def worked_examples(buffers: dict[str, TaskBuffer]) -> dict[str, Task]:
    """One solved example per kind for the solver's prompt: the kind's first seed (fixed, so the
    prompt does not drift), or a built-in example for code_f, whose buffer has no seeds."""
    examples = {kind: b.tasks[0] for kind, b in buffers.items() if b.n_seeds}
    examples.setdefault("code_f", CODE_F_EXAMPLE)
    return examples
