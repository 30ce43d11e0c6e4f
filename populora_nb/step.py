"""AZR's step and PopuLoRA's population step, each a straight run of the stages in `stages` (one
function per stage, defined there once), and the evolution event the loop runs every E steps:

    population step:  pair → propose → validate → solve → reward → update → rate → grow
    AZR's step:              propose → validate → solve → reward → update        → grow
    every E steps:    evolve

AZR's single agent plays both roles: no pairing and no ratings; it solves its own proposals (k
learnability rollouts that only set ρ, plus one response to each of a batch of buffer tasks) and earns
AZR's proposer reward. PopuLoRA's teachers are matched by PFSP, earn −1 / 0 / 1 − ρ, and every match
moves the TrueSkill ratings by the rules in `matchmaking`. Notebooks 02 and 03 call the same stages
one per cell.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

import torch

import populora_nb.stages as stages
from populora_nb.config import ExperimentConfig
from populora_nb.copies import mark_copies
from populora_nb.evolution import MemberRating, OperatorMix, apply_operator, inherit_rating, plan_replacement
from populora_nb.lowrank import relative_change
from populora_nb.matchmaking import Rating
from populora_nb.policy import Policy
from populora_nb.rewards import azr_proposer_reward, teacher_reward
from populora_nb.solve_batches import assignments, buffer_jobs, learnability_jobs, solve_jobs, worked_examples
from populora_nb.stages import StepOutcome, rng_for, seed_for
from populora_nb.state import RunState
from populora_nb.step_records import Timer
from populora_nb.verify import Verifier


def population_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """One PopuLoRA step: updates the members, the ratings and the buffers; returns what it made."""
    c, n, out = config, state.step, StepOutcome()
    partner, _ = stages.pair(state, c)
    with Timer(out.timings, "propose_s"):
        proposed = stages.propose(policy, state.teachers, state.buffers, c, n, c.rl.teacher_proposals)
        proposed = [dataclasses.replace(p, solver=partner[p.proposer]) for p in proposed]
    with Timer(out.timings, "validate_s"):
        proposed = stages.validate(verifier, proposed, c.tasks.code_f_inputs)
        proposed = mark_copies(proposed, state.seen, c.tasks.reject_copies, c.tasks.reject_repeats)
    with Timer(out.timings, "solve_s"):
        mine = assignments(partner, proposed, state.students)
        jobs = solve_jobs(mine, proposed, state.buffers, c, n, c.rl.student_tasks, c.rl.student_rollouts_trained)
        out.attempts = stages.solve(policy, verifier, jobs, c, n, worked_examples(state.buffers))
        out.proposals = stages.solve_rates(proposed, out.attempts)
    out.samples = stages.reward(
        out.proposals, out.attempts, teacher_reward, c.rl.advantage_scale, c.tasks.copies_earn_nothing
    )
    with Timer(out.timings, "update_s"):
        out.update_stats = stages.update(policy, out.samples, list(state.roster))
    with Timer(out.timings, "sync_s"):  # a rollout engine apart from the trainer (vLLM) gets the updated members
        if hasattr(policy, "sync"):
            policy.sync()
    out.matches, state.ratings = stages.rate(state.ratings, out.proposals, c)
    stages.grow(state.buffers, out.proposals, c.tasks.one_task_per_program)
    return out


def baseline_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """One step of AZR's single agent (``agent``): updates it and the buffers; returns what it made."""
    c, n, out = config, state.step, StepOutcome()
    with Timer(out.timings, "propose_s"):
        proposed = stages.propose(policy, ["agent"], state.buffers, c, n)
        proposed = [dataclasses.replace(p, solver="agent") for p in proposed]
    with Timer(out.timings, "validate_s"):
        proposed = stages.validate(verifier, proposed, c.tasks.code_f_inputs)
        proposed = mark_copies(proposed, state.seen, c.tasks.reject_copies, c.tasks.reject_repeats)
    with Timer(out.timings, "solve_s"):
        if c.run.baseline_solver == "azr":
            # AZR: k learnability rollouts per valid proposal set rho (not trained on); the solver
            # learns from its own batch of buffer tasks, one response each.
            jobs = learnability_jobs("agent", proposed, c.rl.rollouts) + buffer_jobs("agent", state.buffers, c, n)
        else:  # "own_rollouts": the solver trains on the rollouts that measured its own proposals
            jobs = solve_jobs(
                {"agent": list(range(len(proposed)))}, proposed, state.buffers, c, n, c.rl.proposals_per_kind
            )
        out.attempts = stages.solve(policy, verifier, jobs, c, n, worked_examples(state.buffers))
        out.proposals = stages.solve_rates(proposed, out.attempts)
    out.samples = stages.reward(
        out.proposals, out.attempts, azr_proposer_reward, c.rl.advantage_scale, c.tasks.copies_earn_nothing
    )
    with Timer(out.timings, "update_s"):
        out.update_stats = stages.update(policy, out.samples, list(state.roster))
    with Timer(out.timings, "sync_s"):  # a rollout engine apart from the trainer (vLLM) gets the updated members
        if hasattr(policy, "sync"):
            policy.sync()
    stages.grow(state.buffers, out.proposals, c.tasks.one_task_per_program)
    return out


def run_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """The step of the agent ``config.run.agent`` names."""
    step = population_step if config.run.agent == "population" else baseline_step
    return step(policy, verifier, state, config)


def evolve(policy: Policy, state: RunState, config: ExperimentConfig) -> list[dict]:
    """Replace the weakest `replace_per_role` teachers and students by children of tournament-chosen
    parents (evolution.plan_replacement), made in LoRA weight space; returns the lineage rows."""
    ec, step = config.evolution, state.step
    members = [
        MemberRating(m, role, state.ratings[m].mu, state.ratings[m].sigma, state.born.get(m))
        for m, role in state.roster.items()
    ]
    births = plan_replacement(
        members,
        step=step + 1,
        rng=rng_for(config.run.seed, step, "evolve"),
        num_replaced=ec.replace_per_role,
        mix=OperatorMix(ec.operators),
        tournament_size=ec.tournament_size,
        k=ec.fitness_k,
        grace_steps=ec.grace,
    )
    rows = []
    for birth in births:
        parents = [policy.factors(p) for p in birth.parents]
        device = next(iter(parents[0].values())).A.device  # operators draw on the factors' device
        gen = torch.Generator(device=device).manual_seed(seed_for(config.run.seed, step, f"operator:{birth.child}"))
        child = apply_operator(birth, parents, generator=gen)
        # How far the operator moved the child from each parent, ‖ΔW_c − ΔW_p‖ / ‖ΔW_p‖: a mutation
        # that barely moves is a copy, one that moves by more than 100% is a restart.
        moved = [relative_change(p, child) for p in parents]
        policy.replace(
            birth.replaced,
            birth.child,
            child,
            birth.parents,
            birth.operator,
            step + 1,
            inherit_optimizer_from=birth.parents[0] if ec.inherit_optimizer else None,
        )
        mu, sigma = inherit_rating(
            [(state.ratings[p].mu, state.ratings[p].sigma) for p in birth.parents],
            sigma_inflation=ec.sigma_inflation,
            prior=(config.matchmaking.mu, config.matchmaking.sigma),
        )
        state.roster = {(birth.child if m == birth.replaced else m): r for m, r in state.roster.items()}
        del state.ratings[birth.replaced]
        state.ratings[birth.child] = Rating(mu, sigma)
        state.born[birth.child] = step + 1
        # "step" is the loop step after which the birth happened (records are truncated by it on resume).
        rows.append(
            {
                **asdict(birth),
                "birth_step": birth.step,
                "step": step,
                "mu": mu,
                "sigma": sigma,
                "relative_change": moved[0],  # from the first (fitter) parent
                "parent_changes": moved,  # from each parent, in the order of "parents"
            }
        )
    return rows
