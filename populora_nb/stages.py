"""The stages of one self-play step, one function each, data in and data out: `pair`, `propose`,
`validate`, `solve` (with `solve_rates`), `reward`, `update`, `rate`, `grow`. `step` runs them in order
(its docstring draws it), notebooks 02 and 03 one per cell. No model code: generation and the update go
through a `Policy`. This step's valid proposals are solved with k rollouts each, which gives the
proposer its ρ in the same step, as AZR's code does (which tasks each solver gets: `solve_batches`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from populora_nb.buffers import TaskBuffer, count_pool_draws, snippet_pool
from populora_nb.config import ExperimentConfig
from populora_nb.copies import fingerprint
from populora_nb.matchmaking import Match, Rating, pfsp_pairs, round_robin_pairs, update_ratings, win_probability
from populora_nb.policy import Policy, Sample, TokenIds, as_completion
from populora_nb.prompts import (
    ParseFailure,
    PromptTooLongError,
    bounded_propose_prompt,
    bounded_solve_prompt,
    parse_answer,
    parse_proposal,
    render,
)
from populora_nb.rewards import novelty_capped, student_reward
from populora_nb.rl import trr_plus_plus_advantages
from populora_nb.state import RunState, trueskill_env
from populora_nb.tasks import Task
from populora_nb.verify import Invalid, Proposal, Verifier


# ---- plain data passed between stages -------------------------------------------------------------
@dataclass
class Proposed:
    """One proposal of a step: who wrote it, prompt and completion, the verdict, the matched solver and rho."""

    proposer: str
    kind: str
    prompt: str
    completion: str
    parsed: Proposal | ParseFailure
    """What the completion parses to (kept beside the verdict: an invalid task's program stays readable)."""
    result: Task | Invalid | ParseFailure | None = None
    """The verdict once validated (`validate`): a Task, an Invalid with its reason, or the ParseFailure."""
    solver: str | None = None
    rho: float | None = None
    token_ids: TokenIds | None = None
    references: tuple[str, ...] = ()
    """The reference programs its code_o / code_i prompt showed, so a copy of one can be told apart."""
    references_dropped: int = 0
    """References drawn but left out so the prompt fits (code_f: 1 when a shorter program was shown)."""
    copy: str | None = None
    """For a valid task: "new", "reference" or "earlier" (`populora_nb.copies`)."""
    repeat: bool | None = None
    """For a valid task: the same task as its student meets it, met before in the run (`copies.is_repeat`)."""


@dataclass(frozen=True)
class SolveJob:
    """One task for one solver: `rollouts` samples, learned from when `train`."""

    solver: str
    task: Task
    proposed_index: int | None
    """Index into the step's proposals (a fresh task), or None for a task drawn from the buffer."""
    rollouts: int
    train: bool = True
    """False for AZR's learnability rollouts: they estimate rho for the proposer reward only."""
    trained_rollouts: int | None = None
    """When `train`: how many of the rollouts (the first ones) are learned from; None: all."""

    def trains_on(self, rollout: int) -> bool:
        """Whether the solver learns from rollout number ``rollout`` (0-based) of this job."""
        return self.train and (self.trained_rollouts is None or rollout < self.trained_rollouts)


@dataclass
class Attempt:
    """One rollout of a solver at a task, with the verifier's status."""

    solver: str
    task: Task
    prompt: str
    completion: str
    status: str  # correct | wrong | malformed
    proposed_index: int | None  # index into the step's proposals; None for a buffer task
    train: bool = True
    token_ids: TokenIds | None = None

    @property
    def fresh(self) -> bool:
        """An attempt at a task proposed this step (not a buffer top-up or a buffer batch task)."""
        return self.proposed_index is not None


@dataclass
class StepOutcome:
    """What one step made (proposals, attempts, samples, update statistics, timings), for the records."""

    proposals: list[Proposed] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    update_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    matches: list[Match] = field(default_factory=list)
    """A population step's rating matches, one per proposal in proposal order (none for the baseline)."""


def rng_for(seed: int, step: int, purpose: str) -> random.Random:
    """Every random choice of a step draws from its own stream, so a resumed run repeats exactly."""
    return random.Random(f"{seed}:{step}:{purpose}")


def seed_for(seed: int, step: int, purpose: str) -> int:
    return rng_for(seed, step, purpose).getrandbits(62)


# ---- stages ---------------------------------------------------------------------------------------
def pair(state: RunState, config: ExperimentConfig) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """teacher -> student for this step: a PFSP-weighted matching on TrueSkill ratings, in which every
    student gets as many teachers as any other (within one), or the round-robin ablation; with the
    win probability of every teacher × student pair, on the ratings the draw used."""
    env, mc, r = trueskill_env(config), config.matchmaking, state.ratings
    win = {t: {s: win_probability(r[t], r[s], env) for s in state.students} for t in state.teachers}
    if mc.mode == "round_robin":
        pairs = round_robin_pairs(state.teachers, state.students, state.step)
    else:
        rng = rng_for(config.run.seed, state.step, "pfsp")
        hard = mc.mode != "pfsp_var"
        pairs = pfsp_pairs(state.teachers, state.students, r, env, rng, "hard" if hard else "var", mc.gamma, mc.floor)
    return dict(pairs), win


def propose(
    policy: Policy,
    proposers: Sequence[str],
    buffers: dict[str, TaskBuffer],
    config: ExperimentConfig,
    step: int,
    per_kind: int | None = None,
) -> list[Proposed]:
    """Every proposer writes `per_kind` tasks of each kind (default `rl.proposals_per_kind`, the
    agent's; population teachers pass `rl.teacher_proposals`), all in one mixed-adapter batch."""
    per_kind = per_kind or config.rl.proposals_per_kind
    rng = rng_for(config.run.seed, step, "references")
    tc = config.tasks
    program_buffer = snippet_pool(buffers) if "code_f" in tc.kinds else None
    if "code_f" in tc.kinds and program_buffer is None:
        raise ValueError("code_f proposals need a code_o or code_i buffer for their reference programs")
    count = token_counter(policy.tokenizer, tc.prompt_format)
    budget = config.propose_prompt_budget
    # (member, kind, prompt, program, shown, references dropped to fit the budget)
    jobs: list[tuple[str, str, str, str, tuple[str, ...], int]] = []
    shown: tuple[str, ...]
    for member in proposers:
        for kind in tc.kinds:
            for _ in range(per_kind):
                if kind == "code_f":
                    refs = program_buffer.sample(1, rng, tc.reference_sampling)  # type: ignore[union-attr]  # checked above
                    count_pool_draws(buffers, [r.program for r in refs])
                    try:
                        text, used = bounded_propose_prompt(
                            "code_f", refs, count, budget, tc.code_f_inputs, tc.prompt_style
                        )
                    except PromptTooLongError:  # a program too long to show: the buffer's shortest instead
                        shortest = sorted(program_buffer.tasks, key=lambda t: len(t.program))[:4]  # type: ignore[union-attr]
                        text, used = bounded_propose_prompt(
                            "code_f", shortest, count, budget, tc.code_f_inputs, tc.prompt_style
                        )
                    program, shown, dropped = used[0].program, (), int(used[0] is not refs[0])
                else:
                    refs = buffers[kind].sample(tc.n_references, rng, tc.reference_sampling)
                    text, used = bounded_propose_prompt(kind, refs, count, budget, style=tc.prompt_style)  # type: ignore[arg-type]  # kinds checked
                    program, dropped = "", len(refs) - len(used)
                    shown = tuple(r.program for r in used)
                jobs.append((member, kind, render(text, policy.tokenizer, tc.prompt_format), program, shown, dropped))
    seed = seed_for(config.run.seed, step, "propose")
    generated = policy.generate(
        [j[0] for j in jobs], [j[2] for j in jobs], config.sampling.propose_max_new_tokens, seed
    )
    completions = map(as_completion, generated)
    return [
        Proposed(
            m,
            k,
            p,
            c.text,
            parse_proposal(c.text, k, tc.prompt_format, program=prog),  # type: ignore[arg-type]
            token_ids=c.token_ids,
            references=shown,
            references_dropped=dropped,
        )
        for (m, k, p, prog, shown, dropped), c in zip(jobs, completions)
    ]


def token_counter(tokenizer: Any, fmt: str) -> Callable[[Any], int]:
    """A prompt's length in tokens as the policy sees it: rendered, tokenised without special tokens."""
    return lambda prompt: len(tokenizer(render(prompt, tokenizer, fmt), add_special_tokens=False)["input_ids"])  # type: ignore[arg-type]


def validate(verifier: Verifier, proposals: Sequence[Proposed], code_f_inputs: int) -> list[Proposed]:
    """New proposals with their verdicts (``result``): a Task, an Invalid(reason), or the ParseFailure
    itself. A code_f task must have exactly the ``code_f_inputs`` inputs its prompt asked for."""
    todo = [p for p in proposals if not isinstance(p.parsed, ParseFailure)]
    verdicts = iter(verifier.validate_many([p.parsed for p in todo], code_f_inputs=code_f_inputs))  # type: ignore[misc]
    out = []
    for p in proposals:
        verdict: Task | Invalid | ParseFailure = p.parsed if isinstance(p.parsed, ParseFailure) else next(verdicts)
        if isinstance(verdict, Task):
            verdict = dataclasses.replace(verdict, meta={"proposer": p.proposer})
        out.append(dataclasses.replace(p, result=verdict))
    return out


def solve(
    policy: Policy,
    verifier: Verifier,
    jobs: list[SolveJob],
    config: ExperimentConfig,
    step: int,
    examples: dict[str, Task] | None = None,
) -> list[Attempt]:
    """Every job's rollouts in one mixed-adapter batch, then the verifier judges each parsed answer."""
    fmt = config.tasks.prompt_format
    examples = examples or {}
    count, budget = token_counter(policy.tokenizer, fmt), config.solve_prompt_budget
    # A task whose question alone exceeds the budget goes unsolved this step (no rho, no match played).
    prompts = [(j, bounded_solve_prompt(j.task, examples.get(j.task.kind), count, budget)) for j in jobs]
    rows = [(j, render(d, policy.tokenizer, fmt), r) for j, d in prompts if d is not None for r in range(j.rollouts)]
    if not rows:
        return []
    seed = seed_for(config.run.seed, step, "solve")
    members, texts = [j.solver for j, _, _ in rows], [prompt for _, prompt, _ in rows]
    completions = [
        as_completion(c) for c in policy.generate(members, texts, config.sampling.solve_max_new_tokens, seed)
    ]
    answers = [parse_answer(c.text, j.task.kind, fmt) for (j, _, _), c in zip(rows, completions)]
    to_judge = [(j.task, a) for (j, _, _), a in zip(rows, answers) if isinstance(a, str)]
    verdicts = iter(verifier.judge_many(to_judge))
    attempts = []
    for (j, prompt, rollout), c, answer in zip(rows, completions, answers):
        status = "malformed" if isinstance(answer, ParseFailure) else ("correct" if next(verdicts).passed else "wrong")
        attempts.append(
            Attempt(j.solver, j.task, prompt, c.text, status, j.proposed_index, j.trains_on(rollout), c.token_ids)
        )
    return attempts


def solve_rates(proposals: Sequence[Proposed], attempts: Sequence[Attempt]) -> list[Proposed]:
    """The proposals with rho set: the fraction of each fresh task's rollouts judged correct (None
    for a proposal nobody attempted). New objects: the inputs are not changed."""
    by_index: dict[int, list[str]] = {}
    for a in attempts:
        if a.proposed_index is not None:
            by_index.setdefault(a.proposed_index, []).append(a.status)
    return [
        dataclasses.replace(p, rho=sum(s == "correct" for s in by_index[i]) / len(by_index[i])) if i in by_index else p
        for i, p in enumerate(proposals)
    ]


def reward(
    proposals: list[Proposed],
    attempts: list[Attempt],
    proposer_reward: Callable[[bool, float | None], float],
    advantage_scale: str = "role",
    copies_earn_nothing: bool = False,
) -> list[Sample]:
    """Teacher/proposer and student samples with their rewards and TRR++ advantages, centred per
    (member, role, kind); scaled per (member, role) (``advantage_scale="role"``) or per group
    ("group", AZR's exact TRR++; `config.RLConfig.advantage_scale`). ``proposer_reward(valid, rho)``:
    ``rewards.teacher_reward`` (PopuLoRA's -1 / 0 / 1-rho) or ``rewards.azr_proposer_reward``; with
    ``copies_earn_nothing`` a valid proposal whose program is not new earns at most 0 (`rewards.novelty_capped`)."""
    samples = []
    for p in proposals:
        valid = isinstance(p.result, Task)
        # A valid task no solver attempted (no match this step) has no rho: it is not rewarded.
        if valid and p.rho is None:
            continue
        r = proposer_reward(valid, p.rho)
        if copies_earn_nothing and valid:
            if p.copy is None:
                raise ValueError("copies_earn_nothing needs each valid proposal's program class (copies.mark_copies)")
            r = novelty_capped(r, p.copy == "new")
        samples.append(
            Sample(p.proposer, p.prompt, p.completion, r, (p.proposer, "propose", p.kind), token_ids=p.token_ids)
        )
    for a in attempts:
        if a.train:  # AZR's learnability rollouts set rho only
            r = student_reward(a.status)  # type: ignore[arg-type]
            samples.append(
                Sample(a.solver, a.prompt, a.completion, r, (a.solver, "solve", a.task.kind), token_ids=a.token_ids)
            )
    if not samples:
        return []
    if advantage_scale not in ("role", "group"):
        raise ValueError(f"advantage_scale must be 'role' or 'group', got {advantage_scale!r}")
    scale_keys = [s.group[:2] for s in samples] if advantage_scale == "role" else None
    adv = trr_plus_plus_advantages([s.reward for s in samples], [s.group for s in samples], scale_keys=scale_keys)
    return [dataclasses.replace(s, advantage=float(a)) for s, a in zip(samples, adv)]


def update(policy: Policy, samples: list[Sample], members: Sequence[str]) -> dict[str, dict[str, float]]:
    """One policy-gradient update per member, only on its own samples and its own LoRA (the policy
    runs them as one batched pass or one by one: `rl.update`); members without samples are left out."""
    mine = {m: [s for s in samples if s.member == m] for m in members}
    return policy.update_members({m: s for m, s in mine.items() if s})


def rate(
    ratings: dict[str, Rating], proposals: Sequence[Proposed], config: ExperimentConfig
) -> tuple[list[Match], dict[str, Rating]]:
    """One TrueSkill match per proposal, in proposal order, and the ratings they move to (the rules
    are `matchmaking`'s). ρ is None unless the partner attempted the task (never for an invalid one)."""
    k = config.rl.rollouts
    matches = [Match(p.proposer, p.solver or "", isinstance(p.result, Task), p.rho, k) for p in proposals]
    return matches, update_ratings(ratings, matches, trueskill_env(config), config.matchmaking.win_threshold)


def grow(buffers: dict[str, TaskBuffer], proposals: Sequence[Proposed], one_task_per_program: bool = False) -> None:
    """Add this step's valid tasks to the run's buffers, in place: each kind's to its own buffer only,
    as one batch (the next step's solver batch starts from it), as AZR keeps the kinds apart (`buffers`).
    With ``one_task_per_program`` (`config.TaskConfig`) a task whose program (`copies.fingerprint`: the
    normalised program, code_f its inputs too) the buffer already holds is not stored again."""
    for kind, buffer in buffers.items():
        tasks = [p.result for p in proposals if p.kind == kind and isinstance(p.result, Task)]
        if one_task_per_program:
            held = {fingerprint(kind, t.program, t.inputs) for t in buffer.tasks}
            first: dict[str, Task] = {}
            for t in tasks:
                first.setdefault(fingerprint(kind, t.program, t.inputs), t)
            tasks = [t for key, t in first.items() if key not in held]
        buffer.add_batch(tasks)
