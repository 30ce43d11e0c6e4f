"""AZR's single-agent self-play step, PopuLoRA's population step, and `run`, which drives either
one into a run directory with checkpoints and resume.

baseline_step:   agent proposes every kind → validate → k learnability rollouts per valid task set
                 rho (not trained on) → the agent solves a batch of buffer tasks, one response
                 each → AZR proposer reward + student reward → one TRR++ update of the agent
                 (AZR's recipe; ``run.baseline_solver="own_rollouts"`` trains on the k rollouts).
population_step: PFSP pairs each teacher with a student → teachers propose (one mixed batch) →
                 validate → matched students solve (one mixed batch) → PopuLoRA teacher reward
                 (-1 / 0 / 1-rho) + student reward → one update per member → TrueSkill updates →
                 every E steps, evolution replaces the weakest of each role.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm  # a text bar, not tqdm.auto's widget: see run()

from populora_nb.config import ExperimentConfig
from populora_nb.copies import mark_copies
from populora_nb.evolution import MemberRating, OperatorMix, apply_operator, inherit_rating, plan_replacement
from populora_nb.lowrank import relative_change
from populora_nb.matchmaking import (
    Match,
    Rating,
    contested,
    pfsp_pairs,
    round_robin_pairs,
    update_ratings,
)
from populora_nb.probe import probe_due, probe_metrics, probe_rows, run_probe
from populora_nb.records import RunDir
from populora_nb.rewards import azr_proposer_reward, teacher_reward
from populora_nb.stages import (
    Policy,
    StepOutcome,
    buffer_jobs,
    grow_buffers,
    learnability_jobs,
    propose,
    reward_samples,
    rng_for,
    seed_for,
    solve,
    solve_jobs,
    solve_rates,
    update,
    validate,
    worked_examples,
)
from populora_nb.state import (
    RunState,
    initial_state,
    resume_or_start,
    roster_for,
    seed_buffers,
    trueskill_env,
    write_checkpoint,
)
from populora_nb.step_records import (
    Timer,
    member_metrics,
    peak_memory_gb,
    reset_peak_memory,
    step_summary,
    task_rows,
    token_counts,
)
from populora_nb.tasks import Task
from populora_nb.tracking import open_tracker
from populora_nb.verify import Verifier

# ---- the two steps ------------------------------------------------------------------------------


def baseline_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """One step of AZR's single agent (module docstring); updates the agent and grows the buffers."""
    out, step = StepOutcome(), state.step
    with Timer(out.timings, "propose_s"):
        out.proposals = propose(policy, ["agent"], state.buffers, config, step)
    # AZR: the agent solves its own proposals
    out.proposals = [dataclasses.replace(p, solver="agent") for p in out.proposals]
    with Timer(out.timings, "validate_s"):
        out.proposals = validate(verifier, out.proposals, config.tasks.code_f_inputs)
        out.proposals = mark_copies(out.proposals, state.seen, config.tasks.reject_copies, config.tasks.reject_repeats)
    with Timer(out.timings, "solve_s"):
        if config.run.baseline_solver == "azr":
            # AZR: k learnability rollouts per valid proposal set rho (not trained on); the solver
            # learns from its own batch of buffer tasks, one response each.
            jobs = learnability_jobs("agent", out.proposals, config.rl.rollouts) + buffer_jobs(
                "agent", state.buffers, config, step
            )
        else:  # "own_rollouts": the solver trains on the rollouts that measured its own proposals
            jobs = solve_jobs({"agent": list(range(len(out.proposals)))}, out.proposals, state.buffers, config, step)
        out.attempts = solve(policy, verifier, jobs, config, step, worked_examples(state.buffers))
        out.proposals = solve_rates(out.proposals, out.attempts)
    out.samples = reward_samples(out.proposals, out.attempts, azr_proposer_reward, config.rl.advantage_scale)
    with Timer(out.timings, "update_s"):
        out.update_stats = update(policy, out.samples, ["agent"])
    with Timer(out.timings, "sync_s"):
        sync_engine(policy)
    grow_buffers(state.buffers, out.proposals)
    return out


def sync_engine(policy: Policy) -> None:
    """Hand the updated members to a rollout engine that samples apart from the trainer (vLLM,
    `LoRAPolicy.sync`) before the next step generates; a policy without one has nothing to do."""
    sync = getattr(policy, "sync", None)
    if sync is not None:
        sync()


def pair(state: RunState, config: ExperimentConfig) -> dict[str, str]:
    """teacher -> student for this step: a PFSP-weighted matching on TrueSkill ratings, in which every
    student gets as many teachers as any other (within one), or the round-robin ablation."""
    mc = config.matchmaking
    if mc.mode == "round_robin":
        pairs = round_robin_pairs(state.teachers, state.students, state.step)
    else:
        env = trueskill_env(config)
        pairs = pfsp_pairs(
            state.teachers,
            state.students,
            state.ratings,
            env,
            rng_for(config.run.seed, state.step, "pfsp"),
            weighting="var" if mc.mode == "pfsp_var" else "hard",
            gamma=mc.gamma,
            floor=mc.floor,
        )
    return dict(pairs)


def population_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """One PopuLoRA step (module docstring); updates every member, the ratings and the buffers."""
    out, step = StepOutcome(), state.step
    partner = pair(state, config)
    with Timer(out.timings, "propose_s"):
        out.proposals = propose(policy, state.teachers, state.buffers, config, step, config.rl.teacher_proposals)
    # the matched student, set once: it is known before anything is solved
    out.proposals = [dataclasses.replace(p, solver=partner[p.proposer]) for p in out.proposals]
    with Timer(out.timings, "validate_s"):
        out.proposals = validate(verifier, out.proposals, config.tasks.code_f_inputs)
        out.proposals = mark_copies(out.proposals, state.seen, config.tasks.reject_copies, config.tasks.reject_repeats)
    assignments: dict[str, list[int]] = {s: [] for s in state.students}
    for i, p in enumerate(out.proposals):
        assignments[partner[p.proposer]].append(i)
    with Timer(out.timings, "solve_s"):
        jobs = solve_jobs(assignments, out.proposals, state.buffers, config, step)
        out.attempts = solve(policy, verifier, jobs, config, step, worked_examples(state.buffers))
        out.proposals = solve_rates(out.proposals, out.attempts)
    out.samples = reward_samples(out.proposals, out.attempts, teacher_reward, config.rl.advantage_scale)
    with Timer(out.timings, "update_s"):
        out.update_stats = update(policy, out.samples, list(state.roster))
    with Timer(out.timings, "sync_s"):
        sync_engine(policy)
    # rho is None unless the partner attempted the task (always so for an invalid one): Match.played.
    out.matches = step_matches(out, config)
    state.ratings = update_ratings(state.ratings, out.matches, trueskill_env(config), config.matchmaking.win_threshold)
    grow_buffers(state.buffers, out.proposals)
    return out


def step_matches(out: StepOutcome, config: ExperimentConfig) -> list[Match]:
    """The step's matches, one per proposal, in proposal order; rho is None unless the partner
    attempted the task (always so for an invalid one): Match.played."""
    k = config.rl.rollouts
    return [Match(p.proposer, p.solver or "", isinstance(p.result, Task), p.rho, k) for p in out.proposals]


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
        # How far the operator moved the child from its first parent, ‖ΔW_c − ΔW_p‖ / ‖ΔW_p‖: a
        # mutation that barely moves is a copy, one that moves by more than 100% is a restart.
        moved = relative_change(parents[0], child)
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
                "relative_change": moved,
            }
        )
    return rows


# ---- run --------------------------------------------------------------------------------------------


def run(
    config: ExperimentConfig,
    run_dir: str | Path,
    policy: Policy | None = None,
    verifier: Verifier | None = None,
    on_step: Callable[[int, list[dict]], None] | None = None,
    progress: bool = True,
) -> RunDir:
    """Run ``config.run.steps`` steps into ``run_dir``, resuming from its latest checkpoint."""
    rd = RunDir.create(run_dir, config)
    # run.report_to's trackers (none by default): a missing backend fails here, in one line, before any work
    tracker = open_tracker(config.run.report_to, rd.path, config.to_dict())
    own_verifier = verifier is None
    if verifier is None:
        verifier = Verifier.from_config(config.verifier)
        try:
            verifier.start()
        except BaseException:
            tracker.close()
            raise
    # One progress line from the first second: loading, then the running step (0-based, as in the
    # records) and the count of steps done. A text bar, not a widget: in a notebook its last line
    # is still there after the kernel stops, and in an exported or reopened one. On stdout: JupyterLab
    # paints stderr as a pink error box under the cell, which a newcomer reads as a failure.
    agent = config.run.agent
    bar = tqdm(
        total=config.run.steps, desc=f"{agent}: loading the model", unit="step", disable=not progress, file=sys.stdout
    )
    own_policy = policy is None
    try:
        if policy is None:
            from populora_nb.model.policy import LoRAPolicy  # model code stays out of this module's imports

            policy = LoRAPolicy.create(config, list(roster_for(config).items()))
        bar.set_description_str(f"{agent}: resuming or seeding the buffers")
        state = resume_or_start(rd, policy, verifier, config)
        bar.update(state.step)
        evolving = config.run.agent == "population" and config.evolution.enabled
        step_fn = baseline_step if config.run.agent == "baseline" else population_step
        probe_refs: dict | None = None  # the probe's fixed references, built at its first event
        for step in range(state.step, config.run.steps):
            bar.set_description_str(f"{agent} · step {step} running")
            state.step = step
            probed: dict[str, dict] = {}
            if probe_due(step, config):  # before the step trains: the members as the last step left them
                bar.set_description_str(f"{agent} · step {step} difficulty probe")
                probe_refs = probe_refs or seed_buffers(config, verifier)
                probed = difficulty_probe(policy, verifier, state, config, probe_refs, rd)
                bar.set_description_str(f"{agent} · step {step} running")
            reset_peak_memory()
            started = time.perf_counter()
            out = step_fn(policy, verifier, state, config)
            cost = {"time/step_s": time.perf_counter() - started, **peak_memory_gb()}
            tokens = token_counts(out, policy.tokenizer)
            rows = [
                {
                    "step": step,
                    **member_metrics(m, r, out, config.tasks.kinds),
                    **cost,
                    **tokens.get(m, {}),
                    **probed.get(m, {}),
                    **(
                        {"rating/mu": state.ratings[m].mu, "rating/sigma": state.ratings[m].sigma}
                        if m in state.ratings
                        else {}
                    ),
                }
                for m, r in state.roster.items()
            ]
            rd.append("tasks", task_rows(step, out.proposals))
            rd.append("metrics", rows)
            if config.run.agent == "population":
                threshold = config.matchmaking.win_threshold
                rd.append(
                    "matches",
                    [
                        {
                            "step": step,
                            "teacher": m.teacher,
                            "student": m.student,
                            "kind": p.kind,
                            "valid": m.valid,
                            "rho": m.rho,
                            "rollouts": m.rollouts,
                            # the teacher won games on it (0 < rho < win_threshold): the mechanism is live
                            "contested": contested(m, threshold),
                        }
                        for p, m in zip(out.proposals, out.matches)
                    ],
                )
            # No evolution after the last step: its children would never train or play.
            if evolving and (step + 1) % config.evolution.every == 0 and step + 1 < config.run.steps:
                rd.append("lineage", evolve(policy, state, config))
            state.step = step + 1
            every = config.run.checkpoint_every
            if (every and state.step % every == 0) or state.step == config.run.steps:
                write_checkpoint(rd, policy, state)
            tracker.log_step(step, rows)
            if on_step is not None:
                on_step(step, rows)
            bar.set_postfix_str(step_summary(step, rows, config.tasks.kinds), refresh=False)
            bar.update(1)
        bar.set_description_str(f"{agent}: run complete" if bar.n == bar.total else f"{agent}: stopped")
        return rd
    finally:
        bar.close()
        tracker.close()
        if own_verifier:
            verifier.close()
        close = getattr(policy, "close", None)
        if own_policy and close is not None:  # a rollout engine this run started (its own process)
            close()


def difficulty_probe(
    policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig, references: dict, rd: RunDir
) -> dict[str, dict]:
    """One event of the fixed difficulty probe (`populora_nb.probe`): its rows go to probe.jsonl and
    each proposer's probe metrics (with the event's seconds, ``time/probe_s``) to its metrics row."""
    proposers = ["agent"] if config.run.agent == "baseline" else state.teachers
    started = time.perf_counter()
    probe = run_probe(policy, verifier, proposers, references, config)
    seconds = time.perf_counter() - started
    rd.append("probe", probe_rows(state.step, probe, config))
    return {m: {**probe_metrics(probe, m), "time/probe_s": seconds} for m in proposers}


def grow_seeds(
    config: ExperimentConfig,
    policy: Policy,
    verifier: Verifier,
    target: int,
    max_rounds: int = 50,
    on_round: Callable[[int, int], None] | None = None,
) -> list[Task]:
    """AZR's seeding run: the untrained model proposes code_o triplets (references from the growing
    buffer) until `target` distinct valid ones exist; no training. Returns the buffer's tasks."""
    state = initial_state(config, verifier)
    buffer = state.buffers["code_o"] if "code_o" in state.buffers else state.buffers[config.tasks.kinds[0]]
    seen = {(t.program, t.inputs) for t in buffer.tasks}
    for round_ in range(max_rounds):
        if len(buffer) >= target:
            break
        state.step = round_
        proposals = propose(policy, ["agent"], state.buffers, config, round_)
        proposals = validate(verifier, proposals, config.tasks.code_f_inputs)
        for p in proposals:
            if (
                isinstance(p.result, Task)
                and p.kind in ("code_o", "code_i")
                and (p.result.program, p.result.inputs) not in seen
            ):
                seen.add((p.result.program, p.result.inputs))
                buffer.add(Task(buffer.kind, p.result.program, p.result.inputs, p.result.outputs))
        if on_round is not None:
            on_round(round_, len(buffer))
    return buffer.tasks
