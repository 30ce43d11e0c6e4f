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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import trueskill
from tqdm import tqdm  # a text bar, not tqdm.auto's widget: see run()

from populora_nb.buffers import TaskBuffer, load_seed_triplets, make_buffers
from populora_nb.config import ExperimentConfig
from populora_nb.errors import DataFileError, PathNotFoundError
from populora_nb.evolution import MemberRating, OperatorMix, apply_operator, inherit_rating, plan_replacement
from populora_nb.matchmaking import (
    Match,
    Rating,
    initial_ratings,
    make_trueskill,
    pfsp_pairs,
    round_robin_pairs,
    update_ratings,
)
from populora_nb.operators import relative_change
from populora_nb.records import MANIFEST, CorruptRunError, RunDir, read_json, write_json
from populora_nb.rewards import azr_proposer_reward, teacher_reward
from populora_nb.stages import (
    Policy,
    StepOutcome,
    Timer,
    buffer_jobs,
    grow_buffers,
    learnability_jobs,
    member_metrics,
    peak_memory_gb,
    propose,
    reset_peak_memory,
    reward_samples,
    rng_for,
    seed_for,
    solve,
    solve_jobs,
    solve_rates,
    task_rows,
    token_counts,
    update,
    validate,
    worked_examples,
)
from populora_nb.tasks import Task
from populora_nb.verify.verifier import Proposal, Verifier

if TYPE_CHECKING:
    from populora_nb.model.policy import LoRAPolicy


@dataclass
class RunState:
    """Everything a run carries from one step to the next besides the adapters: the step, who plays
    which role, the task buffers, TrueSkill ratings and evolution births. Checkpointed as JSON."""

    step: int
    roster: dict[str, str]
    """member id -> role (agent | teacher | student), in a stable order."""
    buffers: dict[str, TaskBuffer]
    ratings: dict[str, Rating] = field(default_factory=dict)
    born: dict[str, int] = field(default_factory=dict)
    """Step at which each evolved child entered (initial members: absent, i.e. step 0)."""

    @property
    def teachers(self) -> list[str]:
        return [m for m, r in self.roster.items() if r == "teacher"]

    @property
    def students(self) -> list[str]:
        return [m for m, r in self.roster.items() if r == "student"]

    def to_json(self) -> dict:
        return {
            # A list of pairs: the roster's order is the order of rows and updates, and JSON keys get sorted.
            "step": self.step,
            "roster": list(self.roster.items()),
            "born": self.born,
            "buffers": {k: b.to_json() for k, b in self.buffers.items()},
            "ratings": {m: [r.mu, r.sigma] for m, r in self.ratings.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> RunState:
        return cls(
            step=d["step"],
            roster=dict(d["roster"]),
            born=d["born"],
            buffers={k: TaskBuffer.from_json(b) for k, b in d["buffers"].items()},
            ratings={m: Rating(mu, sigma) for m, (mu, sigma) in d["ratings"].items()},
        )


def trueskill_env(config: ExperimentConfig) -> trueskill.TrueSkill:
    """The run's TrueSkill environment, from its matchmaking config (the one place it is built)."""
    mc = config.matchmaking
    return make_trueskill(mc.mu, mc.sigma, mc.beta, mc.tau, mc.draw_probability)


@dataclass
class LoadedRun:
    """A run directory read back: its config, its latest verified checkpoint's state, and a policy
    holding that checkpoint's members (`policy.members` are the loop's member ids)."""

    run_dir: Path
    config: ExperimentConfig
    step: int
    state: RunState
    policy: LoRAPolicy


def load_checkpoint(path: Path, policy: Policy) -> RunState:
    """One checkpoint directory: its `RunState`, and its members' adapters loaded into `policy`."""
    state = RunState.from_json(read_json(path / "state.json"))
    policy.load(path / "policy")
    return state


def load_run(run_dir: str | Path, config: ExperimentConfig | None = None, base: Any = None) -> LoadedRun:
    """The one way to read a trained run (evaluation, retention, notebooks): the newest checkpoint
    whose files match its manifest. A damaged checkpoint raises `CorruptRunError` naming the file; a
    run without one raises `PathNotFoundError`. `config` defaults to the run's own config.yaml;
    `base` shares an already loaded base model."""
    from populora_nb.model.policy import LoRAPolicy  # model code is imported only when a model is needed

    rd = RunDir(Path(run_dir))
    config = config if config is not None else rd.load_config()
    latest = rd.verified_checkpoint()
    if latest is None:
        raise PathNotFoundError(
            f"{run_dir} has no checkpoint: train it first (python -m populora_nb run --out {run_dir})"
        )
    step, path = latest
    policy = LoRAPolicy.create(config, list(roster_for(config).items()), base=base)
    state = load_checkpoint(path, policy)
    return LoadedRun(Path(run_dir), config, step, state, policy)


def roster_for(config: ExperimentConfig) -> dict[str, str]:
    if config.run.agent == "baseline":
        return {"agent": "agent"}
    pc = config.population
    return {**{f"T{i}": "teacher" for i in range(pc.n_teachers)}, **{f"S{i}": "student" for i in range(pc.n_students)}}


def initial_state(config: ExperimentConfig, verifier: Verifier) -> RunState:
    """Seed buffers hold the seed triplets, re-validated in the sandbox (seeds are data, not trusted)."""
    buffers = make_buffers(config.tasks.kinds, config.tasks.buffer_cap)
    seeds = load_seed_triplets(config.tasks.seeds_path)
    verdicts = verifier.validate_many([Proposal("code_o", s["program"], tuple(s["inputs"][:1])) for s in seeds])
    good = [v for v in verdicts if isinstance(v, Task)]
    if not good:
        raise DataFileError(
            f"none of the {len(seeds)} seed tasks in {config.tasks.seeds_path or 'the packaged seeds'} "
            f"passed the verifier; the first verdicts: {verdicts[:3]}"
        )
    for kind in ("code_o", "code_i"):
        if kind in buffers:
            for t in good:
                buffers[kind].add(Task(kind, t.program, t.inputs, t.outputs, meta={"proposer": "seed"}), seed=True)
    roster = roster_for(config)
    ratings = initial_ratings(list(roster), trueskill_env(config)) if config.run.agent == "population" else {}
    return RunState(step=0, roster=roster, buffers=buffers, ratings=ratings)


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
    out.samples = reward_samples(out.proposals, out.attempts, proposer_reward=azr_proposer_reward)
    with Timer(out.timings, "update_s"):
        out.update_stats = update(policy, out.samples, ["agent"])
    grow_buffers(state.buffers, out.proposals)
    return out


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
        out.proposals = propose(policy, state.teachers, state.buffers, config, step)
    # the matched student, set once: it is known before anything is solved
    out.proposals = [dataclasses.replace(p, solver=partner[p.proposer]) for p in out.proposals]
    with Timer(out.timings, "validate_s"):
        out.proposals = validate(verifier, out.proposals, config.tasks.code_f_inputs)
    assignments: dict[str, list[int]] = {s: [] for s in state.students}
    for i, p in enumerate(out.proposals):
        assignments[partner[p.proposer]].append(i)
    with Timer(out.timings, "solve_s"):
        jobs = solve_jobs(assignments, out.proposals, state.buffers, config, step)
        out.attempts = solve(policy, verifier, jobs, config, step, worked_examples(state.buffers))
        out.proposals = solve_rates(out.proposals, out.attempts)
    out.samples = reward_samples(out.proposals, out.attempts, proposer_reward=teacher_reward)
    with Timer(out.timings, "update_s"):
        out.update_stats = update(policy, out.samples, list(state.roster))
    # rho is None unless the partner attempted the task (always so for an invalid one): Match.played.
    matches = [Match(p.proposer, partner[p.proposer], isinstance(p.result, Task), p.rho) for p in out.proposals]
    state.ratings = update_ratings(state.ratings, matches, trueskill_env(config), config.matchmaking.win_threshold)
    grow_buffers(state.buffers, out.proposals)
    return out


def evolve(policy: Policy, state: RunState, config: ExperimentConfig) -> list[dict]:
    """Replace the weakest `replace_per_role` teachers and students by children of tournament-chosen
    parents (evolution.plan_replacement), made in LoRA weight space; returns the lineage rows."""
    ec, step = config.evolution, state.step
    members = [
        MemberRating(m, role, state.ratings[m].mu, state.ratings[m].sigma, state.born.get(m, 0))
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
    own_verifier = verifier is None
    if verifier is None:
        verifier = Verifier.from_config(config.verifier)
        verifier.start()
    # One progress line from the first second: loading, then the running step (0-based, as in the
    # records) and the count of steps done. A text bar, not a widget: in a notebook its last line
    # is still there after the kernel stops, and in an exported or reopened one.
    agent = config.run.agent
    bar = tqdm(total=config.run.steps, desc=f"{agent}: loading the model", unit="step", disable=not progress)
    try:
        if policy is None:
            from populora_nb.model.policy import LoRAPolicy  # model code stays out of this module's imports

            policy = LoRAPolicy.create(config, list(roster_for(config).items()))
        bar.set_description_str(f"{agent}: resuming or seeding the buffers")
        state = _resume_or_start(rd, policy, verifier, config)
        bar.update(state.step)
        evolving = config.run.agent == "population" and config.evolution.enabled
        step_fn = baseline_step if config.run.agent == "baseline" else population_step
        for step in range(state.step, config.run.steps):
            bar.set_description_str(f"{agent} · step {step} running")
            state.step = step
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
                rd.append(
                    "matches",
                    [
                        {
                            "step": step,
                            "teacher": p.proposer,
                            "student": p.solver,
                            "kind": p.kind,
                            "valid": isinstance(p.result, Task),
                            "rho": p.rho,
                        }
                        for p in out.proposals
                    ],
                )
            # No evolution after the last step: its children would never train or play.
            if evolving and (step + 1) % config.evolution.every == 0 and step + 1 < config.run.steps:
                rd.append("lineage", evolve(policy, state, config))
            state.step = step + 1
            every = config.run.checkpoint_every
            if (every and state.step % every == 0) or state.step == config.run.steps:
                _checkpoint(rd, policy, state)
            if on_step is not None:
                on_step(step, rows)
            bar.set_postfix_str(_summary(rows), refresh=False)
            bar.update(1)
        bar.set_description_str(f"{agent}: run complete" if bar.n == bar.total else f"{agent}: stopped")
        return rd
    finally:
        bar.close()
        if own_verifier:
            verifier.close()


def _resume_or_start(rd: RunDir, policy: Policy, verifier: Verifier, config: ExperimentConfig) -> RunState:
    """Resume from the newest checkpoint that verifies against its manifest (its files, and the record
    rows of the steps it committed), then cut the records back to it. A damaged newer checkpoint (or a
    `latest` naming a missing one) is reported in a one-line warning on stderr; damage with no good
    checkpoint to fall back on raises `CorruptRunError`, never a silent restart from step 0."""
    bad: list[str] = []  # what was wrong with each newer checkpoint, for the warning or the refusal
    checkpoints = rd.committed_checkpoints()
    if checkpoints and not any((path / MANIFEST).is_file() for _, path in checkpoints):
        # Every checkpoint predates manifests (an older populora_nb wrote this run; a checkpoint of
        # this version commits its manifest atomically with it): resume unverified, as then.
        step, path = checkpoints[0]
        print(
            f"warning: {rd.path} was written before checkpoint manifests; resuming from {path.name} "
            f"(step {step}) without verifying it",
            file=sys.stderr,
        )
        state = load_checkpoint(path, policy)
        rd.truncate_after(state.step - 1)
        return state
    try:
        rd.latest_checkpoint()  # only to report a `latest` naming a missing directory; the newest dir wins
    except CorruptRunError as e:
        bad.append(e.what)
    for step, path in checkpoints:
        try:
            manifest = rd.verify_checkpoint(path)
            state = load_checkpoint(path, policy)
        except CorruptRunError as e:
            bad.append(e.what)
            continue
        if bad:
            print(f"warning: {'; '.join(bad)}; resuming from {path.name} (step {step})", file=sys.stderr)
        rd.truncate_to(manifest)
        return state
    if bad:
        raise CorruptRunError(
            f"cannot resume {rd.path}: {'; '.join(bad)}",
            "no checkpoint verifies: restore the file, or start the run again in a new --out",
        )
    rc = config.run
    first = min(rc.checkpoint_every or rc.steps, rc.steps)  # the step of the first checkpoint a run writes
    logged = rd.last_logged_step()
    if logged >= first:
        raise CorruptRunError(
            f"{rd.path} holds records up to step {logged} but {rd.checkpoints} has no checkpoint "
            f"(the first is written at step {first})",
            "restore the checkpoints, or start the run again in a new --out",
        )
    rd.truncate_after(-1)  # a run killed before its first checkpoint starts clean
    return initial_state(config, verifier)


def _checkpoint(rd: RunDir, policy: Policy, state: RunState) -> None:
    tmp = rd.begin_checkpoint(state.step)
    policy.save(tmp / "policy")
    write_json(tmp / "state.json", state.to_json())
    rd.commit_checkpoint(tmp, state.step)


def _summary(rows: Sequence[dict]) -> str:
    def mean(key: str) -> str:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return f"{sum(vals) / len(vals):.2f}" if vals else "-"

    return f"valid {mean('teacher/valid_rate')} solve {mean('student/solve_rate')}"


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
