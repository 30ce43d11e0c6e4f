"""One self-play step as its stages, each a method that returns what it made (`Step`): the loop's
`baseline_step` and `population_step` call the methods in order, and a notebook calls them one per
cell on a scratch copy of the run's state (`Step.by_hand`) to show what each stage produced.

    pair → propose → validate → solve → reward (rewards + TRR++ advantages) → update → rate → grow
    → (every E steps) evolve

AZR's single agent skips `pair` and `rate` (one member, no ratings), solves its own proposals
(k learnability rollouts that only set ρ, plus one response to each of a batch of buffer tasks)
and earns AZR's proposer reward; PopuLoRA's teachers are matched by PFSP, earn −1 / 0 / 1 − ρ,
and every match moves the TrueSkill ratings by the rules in `matchmaking`.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict, dataclass, field

import torch

import populora_nb.stages as stages
from populora_nb.config import ExperimentConfig
from populora_nb.copies import mark_copies
from populora_nb.evolution import MemberRating, OperatorMix, apply_operator, inherit_rating, plan_replacement
from populora_nb.lowrank import relative_change
from populora_nb.matchmaking import Match, Rating, pfsp_pairs, round_robin_pairs, update_ratings, win_probability
from populora_nb.policy import Policy, Sample
from populora_nb.rewards import azr_proposer_reward, teacher_reward
from populora_nb.stages import Attempt, Proposed, StepOutcome, rng_for, seed_for
from populora_nb.state import RunState, trueskill_env
from populora_nb.step_records import Timer
from populora_nb.tasks import Task
from populora_nb.verify import Verifier


@dataclass
class Step:
    """One step of ``state`` (AZR's agent or the population), stage by stage: each method runs one stage,
    keeps its product and returns it; `run` calls them in order. ``out`` is what the loop records."""

    policy: Policy
    verifier: Verifier
    state: RunState
    config: ExperimentConfig
    out: StepOutcome = field(default_factory=StepOutcome)
    partner: dict[str, str] = field(default_factory=dict)
    """teacher -> its matched student (population only)."""
    win_probabilities: dict[str, dict[str, float]] = field(default_factory=dict)
    """P(teacher beats student) for every teacher × student, on the ratings PFSP drew with."""
    ratings_before: dict[str, Rating] = field(default_factory=dict)
    """The ratings as the step found them; ``state.ratings`` holds them after `rate`."""
    births: list[dict] = field(default_factory=list)
    """The evolution event's lineage rows (`evolve`), when one ran."""

    @property
    def population(self) -> bool:
        return self.config.run.agent == "population"

    @classmethod
    def by_hand(cls, policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> Step:
        """A step on a deep copy of ``state``, so the run's own state is left as it was; ``policy`` is
        updated in place: pass one the run does not go on with."""
        return cls(policy, verifier, copy.deepcopy(state), config)

    def run(self) -> StepOutcome:
        """Every stage in order (the loop's step); evolution is the loop's business (`evolve`)."""
        if self.population:
            self.pair()
        self.propose()
        self.validate()
        self.solve()
        self.reward()
        self.update()
        if self.population:
            self.rate()
        self.grow()
        return self.out

    # ---- the stages ----------------------------------------------------------------------------
    def pair(self) -> dict[str, str]:
        """teacher -> student for this step: a PFSP-weighted matching on TrueSkill ratings, in which every
        student gets as many teachers as any other (within one), or the round-robin ablation; with the
        win probability of every teacher × student pair that weighted it."""
        self.ratings_before = dict(self.state.ratings)
        env, mc, state = trueskill_env(self.config), self.config.matchmaking, self.state
        r = state.ratings
        self.win_probabilities = {
            t: {s: win_probability(r[t], r[s], env) for s in state.students} for t in state.teachers
        }
        if mc.mode == "round_robin":
            pairs = round_robin_pairs(state.teachers, state.students, state.step)
        else:
            pairs = pfsp_pairs(
                state.teachers,
                state.students,
                state.ratings,
                env,
                rng_for(self.config.run.seed, state.step, "pfsp"),
                weighting="var" if mc.mode == "pfsp_var" else "hard",
                gamma=mc.gamma,
                floor=mc.floor,
            )
        self.partner = dict(pairs)
        return self.partner

    def propose(self) -> list[Proposed]:
        """Every proposer writes its tasks in one mixed-adapter batch; each is given its solver."""
        c, step = self.config, self.state.step
        proposers, per_kind = (self.state.teachers, c.rl.teacher_proposals) if self.population else (["agent"], None)
        with Timer(self.out.timings, "propose_s"):
            proposals = stages.propose(self.policy, proposers, self.state.buffers, c, step, per_kind)
        # the solver is known before anything is solved: the matched student, or the agent itself
        solver = self.partner.get if self.population else (lambda _: "agent")
        self.out.proposals = [dataclasses.replace(p, solver=solver(p.proposer)) for p in proposals]
        return self.out.proposals

    def validate(self) -> list[Proposed]:
        """The verifier's verdict on every proposal (a Task, or the reason it is invalid), and its copy class."""
        with Timer(self.out.timings, "validate_s"):
            valid = stages.validate(self.verifier, self.out.proposals, self.config.tasks.code_f_inputs)
            tasks = self.config.tasks
            self.out.proposals = mark_copies(valid, self.state.seen, tasks.reject_copies, tasks.reject_repeats)
        return self.out.proposals

    def solve(self) -> list[Attempt]:
        """The solvers' rollouts, judged by the verifier, and each fresh task's solve rate ρ."""
        c, step, buffers = self.config, self.state.step, self.state.buffers
        with Timer(self.out.timings, "solve_s"):
            if self.population:
                assignments: dict[str, list[int]] = {s: [] for s in self.state.students}
                for i, p in enumerate(self.out.proposals):
                    assignments[self.partner[p.proposer]].append(i)
                quota, trained = c.rl.student_tasks, c.rl.student_rollouts_trained
                jobs = stages.solve_jobs(assignments, self.out.proposals, buffers, c, step, quota, trained)
            elif c.run.baseline_solver == "azr":
                # AZR: k learnability rollouts per valid proposal set rho (not trained on); the solver
                # learns from its own batch of buffer tasks, one response each.
                jobs = stages.learnability_jobs("agent", self.out.proposals, c.rl.rollouts)
                jobs += stages.buffer_jobs("agent", buffers, c, step)
            else:  # "own_rollouts": the solver trains on the rollouts that measured its own proposals
                mine = {"agent": list(range(len(self.out.proposals)))}
                jobs = stages.solve_jobs(mine, self.out.proposals, buffers, c, step, c.rl.proposals_per_kind)
            self.out.attempts = stages.solve(self.policy, self.verifier, jobs, c, step, stages.worked_examples(buffers))
            self.out.proposals = stages.solve_rates(self.out.proposals, self.out.attempts)
        return self.out.attempts

    def reward(self) -> list[Sample]:
        """Every proposal's and trained rollout's reward, and its TRR++ advantage within its group."""
        proposer_reward = teacher_reward if self.population else azr_proposer_reward
        scale = self.config.rl.advantage_scale
        capped = self.config.tasks.copies_earn_nothing
        self.out.samples = stages.reward_samples(
            self.out.proposals, self.out.attempts, proposer_reward, scale, copies_earn_nothing=capped
        )
        return self.out.samples

    def update(self) -> dict[str, dict[str, float]]:
        """One policy-gradient update of each member on its own samples; each member's statistics."""
        with Timer(self.out.timings, "update_s"):
            self.out.update_stats = stages.update(self.policy, self.out.samples, list(self.state.roster))
        # a rollout engine apart from the trainer (vLLM, `LoRAPolicy.sync`) gets the updated members
        with Timer(self.out.timings, "sync_s"):
            if hasattr(self.policy, "sync"):
                self.policy.sync()
        return self.out.update_stats

    def rate(self) -> list[Match]:
        """One TrueSkill match per proposal, in proposal order; the ratings move (`update_ratings`)."""
        if not self.ratings_before:
            self.ratings_before = dict(self.state.ratings)
        # rho is None unless the partner attempted the task (always so for an invalid one): Match.played
        k = self.config.rl.rollouts
        self.out.matches = [
            Match(p.proposer, p.solver or "", isinstance(p.result, Task), p.rho, k) for p in self.out.proposals
        ]
        env, threshold = trueskill_env(self.config), self.config.matchmaking.win_threshold
        self.state.ratings = update_ratings(self.state.ratings, self.out.matches, env, threshold)
        return self.out.matches

    def grow(self) -> None:
        """This step's valid tasks join the buffers."""
        stages.grow_buffers(self.state.buffers, self.out.proposals, self.config.tasks.one_task_per_program)

    def evolve(self) -> list[dict]:
        """The evolution event the loop runs every E steps (`evolve`), run now; its lineage rows."""
        self.births = evolve(self.policy, self.state, self.config)
        return self.births


# ---- the loop's steps and the pieces they share ---------------------------------------------------
def run_step(policy: Policy, verifier: Verifier, state: RunState, config: ExperimentConfig) -> StepOutcome:
    """One step of AZR's single agent or of the population, as ``config.run.agent`` says (module
    docstring); updates the members, the ratings (population) and the buffers."""
    return Step(policy, verifier, state, config).run()


baseline_step = population_step = run_step  # the loop's step under each agent's name: `Step` branches on the agent


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
