"""The retention experiment (PopuLoRA): does a child made by an evolution operator recover
its trained parent's reward when it goes back into training, and how fast? The paper reports
recovery within 10–20 steps.

For each operator, `retention_curves` makes a child of the fittest trained student (the
next fittest is the second parent of crossovers) and hands it to a `train_and_score` made here,
which retrains it on a fixed task set with the loop's own stages and returns its reward before
training and after each step. Every operator sees the same task draws and the same generation
seeds, so the curves differ only through the child's weights; copy_parent (the parent itself,
trained on) and linear_0_5 (the mean ΔW of both parents) are the controls. A student child is scored
by its mean student reward (`student_train_and_score`), a teacher child by its mean teacher reward
against a fixed student (`teacher_train_and_score`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import torch
from tqdm.auto import tqdm

import populora_nb.solve_batches as solve_batches
import populora_nb.stages as stages
from populora_nb.buffers import TaskBuffer
from populora_nb.checkpoints import load_run
from populora_nb.config import ExperimentConfig
from populora_nb.evolution import fitness
from populora_nb.lowrank import LoRAFactors
from populora_nb.matchmaking import Rating
from populora_nb.model.base import Base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.operators import OPERATORS, arity
from populora_nb.policy import Sample
from populora_nb.rewards import teacher_reward
from populora_nb.stages import Attempt, SolveJob, rng_for
from populora_nb.state import RunState, initial_state
from populora_nb.tasks import Task
from populora_nb.verify import Verifier

TrainAndScore = Callable[[LoRAFactors, int], list[float]]
Role = Literal["student", "teacher"]


def retention_curves(
    parent: LoRAFactors,
    partner: LoRAFactors,
    *,
    train_and_score: Callable[[LoRAFactors, int], Sequence[float]],
    num_steps: int = 20,
    operators: Sequence[str] = tuple(OPERATORS),
    seed: int = 0,
) -> dict[str, list[float]]:
    """The retention experiment: for each operator, a child of the trained `parent` (with
    `partner` as second parent for crossovers, `parent` counted fitter), retrained by
    `train_and_score(child, num_steps)`, which returns the reward before training and after each
    step (num_steps + 1 values). Each operator's generator is seeded from (seed, name), so adding
    an operator changes no other curve. copy_parent and linear_0_5 in `operators` are the controls."""
    device = next(iter(parent.values())).A.device
    curves = {}
    for name in operators:
        generator = torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        child = OPERATORS[name](*(parent, partner)[: arity(name)], generator=generator)
        curves[name] = [float(x) for x in train_and_score(child, num_steps)]
    return curves


def retention_pool(buffers: Mapping[str, TaskBuffer], kinds: Sequence[str]) -> list[Task]:
    """The tasks a child is retrained on: every valid task the run's members wrote (each buffer's
    non-seed entries), or the seeds when the run wrote none (a fresh or very short run).
    code_o and code_i hold the same triplets, each posed as its own kind."""
    written = [t for k in kinds if k in buffers for t in buffers[k].tasks[buffers[k].n_seeds :]]
    if written:
        return written
    seeds = [t for k in kinds if k in buffers for t in buffers[k].tasks[: buffers[k].n_seeds]]
    if not seeds:
        raise ValueError(f"the buffers of {list(kinds)} hold no tasks to retrain on")
    return seeds


def draw_tasks(pool: Sequence[Task], n: int, seed: int, step: int) -> list[Task]:
    """Step `step`'s tasks: the same draw for every child, whatever it did at earlier steps."""
    return rng_for(seed, step, "retention_tasks").sample(list(pool), min(n, len(pool)))


def fittest(roster: Mapping[str, str], ratings: Mapping[str, Rating], role: str, k: float = 3.0) -> list[str]:
    """Members of `role` from fittest to weakest by TrueSkill μ − kσ (roster order breaks ties and
    orders unrated members, e.g. a fresh population's, after rated ones)."""
    members = [m for m, r in roster.items() if r == role]
    order = {m: i for i, m in enumerate(members)}
    return sorted(
        members,
        key=lambda m: (-fitness(ratings[m].mu, ratings[m].sigma, k) if m in ratings else float("inf"), order[m]),
    )


def _solve_config(config: ExperimentConfig, rollouts: int, seed: int) -> ExperimentConfig:
    # solve_batches.solve_jobs() reads k from config.rl.rollouts; stages.solve() seeds generation from config.run.seed.
    return dataclasses.replace(
        config, rl=dataclasses.replace(config.rl, rollouts=rollouts), run=dataclasses.replace(config.run, seed=seed)
    )


def _retrain(
    policy: LoRAPolicy, member: str, child: LoRAFactors, num_steps: int, samples_at: Callable[[int], list[Sample]]
) -> list[float]:
    """Install `child` in `member`'s slot (fresh AdamW, as a newborn gets in the loop; the slot's old
    weights are overwritten), then num_steps + 1 times score the mean reward of `samples_at(step)`,
    updating on the first num_steps of them: value t is the reward after t updates."""
    policy.set_factors(member, child)
    scores = []
    for step in range(num_steps + 1):
        samples = samples_at(step)
        scores.append(sum(s.reward for s in samples) / len(samples) if samples else float("nan"))
        if step < num_steps:
            stages.update(policy, samples, [member])
    return scores


def student_train_and_score(
    policy: LoRAPolicy,
    verifier: Verifier,
    config: ExperimentConfig,
    pool: Sequence[Task],
    *,
    member: str,
    tasks_per_step: int = 3,
    rollouts: int = 2,
    seed: int = 0,
    examples: Mapping[str, Task] | None = None,
) -> TrainAndScore:
    """`train_and_score(child, n)` for a student child in `member`'s slot (`_retrain`): each
    step solves `tasks_per_step` tasks drawn from `pool`, `rollouts` each; score: the mean student reward."""
    cfg = _solve_config(config, rollouts, seed)

    def samples_at(step: int) -> list[Sample]:
        jobs = [SolveJob(member, task, None, rollouts) for task in draw_tasks(pool, tasks_per_step, seed, step)]
        attempts: list[Attempt] = stages.solve(policy, verifier, jobs, cfg, step, dict(examples or {}))
        return stages.reward([], attempts, teacher_reward, config.rl.advantage_scale)

    return lambda child, num_steps: _retrain(policy, member, child, num_steps, samples_at)


def teacher_train_and_score(
    policy: LoRAPolicy,
    verifier: Verifier,
    config: ExperimentConfig,
    buffers: Mapping[str, TaskBuffer],
    *,
    member: str,
    student: str,
    rollouts: int = 2,
    seed: int = 0,
) -> TrainAndScore:
    """`train_and_score(child, n)` for a teacher child in `member`'s slot: each step it proposes
    `rl.teacher_proposals` tasks per kind (references from the fixed `buffers`), the never-updated
    `student` solves them; score: the mean PopuLoRA teacher reward."""
    cfg = _solve_config(config, rollouts, seed)
    fixed = dict(buffers)
    examples = solve_batches.worked_examples(fixed)
    n_inputs = config.tasks.code_f_inputs

    def samples_at(step: int) -> list[Sample]:
        proposals = stages.propose(policy, [member], fixed, cfg, step, config.rl.teacher_proposals)
        proposals = stages.validate(verifier, proposals, n_inputs)
        # No buffers for top-ups: only the child's own tasks are solved, and the student does not learn.
        jobs = solve_batches.solve_jobs({student: list(range(len(proposals)))}, proposals, {}, cfg, step, quota=0)
        attempts = stages.solve(policy, verifier, jobs, cfg, step, examples)
        proposals = stages.solve_rates(proposals, attempts)
        samples = stages.reward(proposals, attempts, teacher_reward, config.rl.advantage_scale)
        return [s for s in samples if s.member == member]

    return lambda child, num_steps: _retrain(policy, member, child, num_steps, samples_at)


def load_population(
    config: ExperimentConfig, run_dir: str | Path | None, verifier: Verifier, base: Base | None = None
) -> tuple[LoRAPolicy, RunState]:
    """The population and state of `run_dir`'s latest checkpoint, or a fresh one when `run_dir` is None."""
    if run_dir is None:
        state = initial_state(config, verifier)
        return LoRAPolicy.create(config, list(state.roster.items()), base=base), state
    loaded = load_run(run_dir, config, base=base)
    return loaded.policy, loaded.state


def run_retention(
    config: ExperimentConfig,
    run_dir: str | Path | None,
    member: str | None = None,
    *,
    n_steps: int = 20,
    operators: Sequence[str] = tuple(OPERATORS),
    seed: int = 0,
    role: Role = "student",
    tasks_per_step: int | None = None,
    rollouts: int | None = None,
    base: Base | None = None,
    verifier: Verifier | None = None,
    progress: bool = False,
) -> dict[str, list[float]]:
    """Retention curves of `operators` for the trained population in `run_dir` (its latest
    checkpoint; None: a fresh population). The parent is `member` or the fittest member of `role`
    by μ − kσ (k = evolution.fitness_k), the next fittest the second parent of crossovers; the AZR
    baseline uses its single agent as both. The child trains in the parent's slot under `config` (the
    run's own). Defaults: `tasks_per_step` = rl.student_tasks × kinds, `rollouts` = rl.rollouts.
    Returns operator name → n_steps + 1 scores."""
    with contextlib.ExitStack() as owned:  # a verifier this call started is closed however it ends
        if verifier is None:
            verifier = owned.enter_context(Verifier.from_config(config.verifier))
        policy, state = load_population(config, run_dir, verifier, base)
        ranked = fittest(state.roster, state.ratings, role, config.evolution.fitness_k) or list(state.roster)
        parent = member or ranked[0]
        partner = next((m for m in ranked if m != parent), parent)
        n_rollouts = rollouts or config.rl.rollouts
        if role == "student":
            pool = retention_pool(state.buffers, config.tasks.kinds)
            per_step = tasks_per_step or config.rl.student_tasks * len(config.tasks.kinds)
            train_and_score = student_train_and_score(
                policy,
                verifier,
                config,
                pool,
                member=parent,
                tasks_per_step=per_step,
                rollouts=n_rollouts,
                seed=seed,
                examples=solve_batches.worked_examples(state.buffers),
            )
        else:
            opponent = (fittest(state.roster, state.ratings, "student", config.evolution.fitness_k) or [parent])[0]
            train_and_score = teacher_train_and_score(
                policy, verifier, config, state.buffers, member=parent, student=opponent, rollouts=n_rollouts, seed=seed
            )
        if progress:
            train_and_score = _with_progress(train_and_score, len(operators))
        return retention_curves(
            policy.factors(parent),
            policy.factors(partner),
            train_and_score=train_and_score,
            num_steps=n_steps,
            operators=operators,
            seed=seed,
        )


def _with_progress(train_and_score: TrainAndScore, total: int) -> TrainAndScore:
    bar = tqdm(total=total, desc="retention")

    def wrapped(child: LoRAFactors, num_steps: int) -> list[float]:
        scores = train_and_score(child, num_steps)
        bar.update(1)
        if bar.n == total:
            bar.close()
        return scores

    return wrapped
