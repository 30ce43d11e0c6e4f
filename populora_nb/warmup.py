"""The warm-up: rejection-sampling fine-tuning (expert iteration) on the model's own proposals that
the verifier accepted, before RL, so that a small model starts where RL has signal (TRR++ learns only
from groups whose rewards differ, and a small model's mostly invalid proposals give few).

`run_warmup` writes ``EXP/warmup/``: the peft adapter every member of both runs starts from
(``lora.warmup``), ``examples.jsonl`` (and ``solver_examples.jsonl``) and ``report.json`` (the
valid rate before and after on held-out prompts). docs/methodology.md, "The warm-up".
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from populora_nb.buffers import TaskBuffer
from populora_nb.config import ExperimentConfig
from populora_nb.copies import WARMUP_EXAMPLES
from populora_nb.errors import UserInputError
from populora_nb.model.checkpoint import write_peft_adapter
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.sft import MEMBER, Example, fine_tune
from populora_nb.policy import Policy
from populora_nb.solver_warmup import run_solver_warmup
from populora_nb.stages import Proposed, propose, validate
from populora_nb.state import seed_buffers
from populora_nb.tasks import Task
from populora_nb.verify import Verifier

COLLECT_STEP, MEASURE_STEP = 1_000_000, 2_000_000
"""Step ids the warm-up's prompt draws and sampling seeds are derived from (`stages.rng_for`): far
from any RL step, so the warm-up never sees an RL step's prompts, and measurement never sees collection's."""
REPORT, EXAMPLES = "report.json", WARMUP_EXAMPLES
SOLVER_EXAMPLES = "solver_examples.jsonl"


@dataclass(frozen=True)
class ValidRate:
    """Accepted proposals out of all proposals (parse failures count as not accepted)."""

    accepted: int
    total: int

    @property
    def rate(self) -> float:
        return self.accepted / self.total if self.total else math.nan


def accepted_examples(proposals: Sequence[Proposed], seen: set[tuple[str, str, tuple[str, ...]]]) -> list[Example]:
    """The proposals whose verdict is a `Task` (the verifier ran the program and accepted it), one
    per distinct (kind, program, inputs) not already in ``seen`` (which is updated). An invalid
    task, a parse failure or an unvalidated proposal is never an example."""
    out = []
    for p in proposals:
        task = p.result
        if not isinstance(task, Task):
            continue
        key = (p.kind, task.program, tuple(task.inputs))
        if key in seen:
            continue
        seen.add(key)
        out.append(Example(p.kind, p.prompt, p.completion, p.token_ids, task.program, tuple(task.inputs), task))
    return out


def valid_rate(proposals: Sequence[Proposed]) -> ValidRate:
    return ValidRate(sum(isinstance(p.result, Task) for p in proposals), len(proposals))


def proposal_round(
    config: ExperimentConfig, policy: Policy, verifier, buffers: dict[str, TaskBuffer], step: int
) -> list[Proposed]:
    """``warmup.batch`` proposals by the warm-up adapter, split over the kinds, validated."""
    per_kind = max(1, math.ceil(config.warmup.batch / len(config.tasks.kinds)))
    cfg = dataclasses.replace(config, rl=dataclasses.replace(config.rl, proposals_per_kind=per_kind))
    return validate(verifier, propose(policy, [MEMBER], buffers, cfg, step), config.tasks.code_f_inputs)


def measure(
    config: ExperimentConfig,
    policy: Policy,
    verifier,
    buffers: dict[str, TaskBuffer],
    accepted: list[Task] | None = None,
) -> ValidRate:
    """The valid rate on the held-out rounds (`MEASURE_STEP` + i): the same prompts and seeds each
    call. The tasks they accepted are appended to ``accepted`` when given."""
    steps = range(MEASURE_STEP, MEASURE_STEP + config.warmup.measure_rounds)
    proposals = [p for step in steps for p in proposal_round(config, policy, verifier, buffers, step)]
    if accepted is not None:
        accepted += [p.result for p in proposals if isinstance(p.result, Task)]
    return valid_rate(proposals)


def collect(
    config: ExperimentConfig,
    policy: Policy,
    verifier,
    buffers: dict[str, TaskBuffer],
    on_round: Callable[[int, int], None] | None = None,
) -> tuple[list[Example], ValidRate]:
    """Rounds of proposals until ``warmup.examples`` distinct accepted ones exist (or ``max_rounds``);
    returns them and the valid rate over every collection round."""
    wc = config.warmup
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    examples: list[Example] = []
    proposed: list[Proposed] = []
    for r in range(wc.max_rounds):
        proposals = proposal_round(config, policy, verifier, buffers, COLLECT_STEP + r)
        proposed += proposals
        examples += accepted_examples(proposals, seen)
        if on_round is not None:
            on_round(r, len(examples))
        if len(examples) >= wc.examples:
            break
    return examples[: wc.examples], valid_rate(proposed)


def split_seeds(buffers: dict[str, TaskBuffer], seed: int) -> tuple[dict[str, TaskBuffer], dict[str, TaskBuffer]]:
    """The seed buffers cut in two by program: (collection, measurement), disjoint, covering every
    seed, the measurement half the smaller one when odd; a program is in the same half in every kind's
    buffer. Deterministic in ``seed`` (sorted, then shuffled by a generator of their own)."""
    programs = sorted({t.program for b in buffers.values() for t in b.tasks})
    if len(programs) < 2:
        raise UserInputError(
            f"the warm-up needs at least 2 distinct seed programs to keep its measurement prompts' "
            f"references apart from its collection prompts'; the seed buffer holds {len(programs)}: "
            f"add seeds to tasks.seeds_path or set warmup.enabled=false"
        )
    random.Random(f"{seed}:warmup_split").shuffle(programs)
    held_out = set(programs[: len(programs) // 2])

    def part(measurement: bool) -> dict[str, TaskBuffer]:
        out = {}
        for kind, b in buffers.items():
            half = TaskBuffer(b.kind, b.cap)
            for i, t in enumerate(b.tasks):
                if (t.program in held_out) == measurement:
                    half.add(t, seed=i < b.n_seeds)
            out[kind] = half
        return out

    return part(False), part(True)


def run_warmup(config: ExperimentConfig, out: str | Path, say: Callable[[str], None] = print) -> dict:
    """The experiment's warmup stage (see the module docstring); returns and writes ``report.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cfg = dataclasses.replace(
        config,
        lora=dataclasses.replace(config.lora, lr=config.warmup.lr, warmup=None),
        run=dataclasses.replace(config.run, agent="baseline"),
    )
    policy = LoRAPolicy.create(cfg, [(MEMBER, MEMBER)])
    try:  # closes a rollout engine the policy started, however the stage ends
        with Verifier.from_config(cfg.verifier) as verifier:
            collect_buffers, measure_buffers = split_seeds(seed_buffers(cfg, verifier), cfg.run.seed)
            held_out: list[Task] = []  # tasks the held-out proposer rounds accepted: the solver warm-up's measure
            before = measure(cfg, policy, verifier, measure_buffers, held_out)
            say(f"[warmup] valid rate before: {before.accepted}/{before.total}")
            examples, collected = collect(
                cfg,
                policy,
                verifier,
                collect_buffers,
                lambda r, n: say(f"[warmup] round {r}: {n} accepted distinct proposals"),
            )
            losses = fine_tune(policy, examples, cfg, seed=cfg.run.seed) if examples else []
            after = measure(cfg, policy, verifier, measure_buffers, held_out)
            say(
                f"[warmup] valid rate after: {after.accepted}/{after.total} "
                f"({len(examples)} examples, {len(losses)} steps)"
            )
            solver: dict | None = None
            solved: list[Example] = []
            if cfg.warmup.solver:
                solver, solved = run_solver_warmup(
                    cfg, policy, verifier, examples, collect_buffers, measure_buffers, held_out, MEMBER
                )
                b, a = solver["before"], solver["after"]
                say(
                    f"[warmup] solver: solve rate on {solver['held_out_tasks']} held-out tasks {b['correct']}/"
                    f"{b['total']} -> {a['correct']}/{a['total']} ({len(solved)} solved examples)"
                )
    finally:
        policy.close()
    record = {"id": MEMBER, "role": "agent", "warmup": True}
    write_peft_adapter(out, policy.population.factors(MEMBER), cfg.lora, cfg.model.name, record)
    rows = [{"kind": e.kind, "program": e.program, "inputs": list(e.inputs)} for e in examples]
    (out / EXAMPLES).write_text("".join(json.dumps(row) + "\n" for row in rows))
    if cfg.warmup.solver:  # what the solver warm-up fine-tuned on: the task and the model's correct answer
        rows = [
            {"kind": e.kind, "program": e.program, "inputs": list(e.inputs), "answer": e.completion} for e in solved
        ]
        (out / SOLVER_EXAMPLES).write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = {
        "seed": cfg.run.seed,
        "before": dataclasses.asdict(before) | {"rate": before.rate},
        "after": dataclasses.asdict(after) | {"rate": after.rate},
        "collected": dataclasses.asdict(collected) | {"rate": collected.rate},
        "examples": len(examples),
        # the seed programs each half's prompts drew their references from (disjoint, `split_seeds`)
        "seed_programs": {
            "collect": len({t.program for b in collect_buffers.values() for t in b.tasks}),
            "measure": len({t.program for b in measure_buffers.values() for t in b.tasks}),
        },
        "kinds": {k: sum(e.kind == k for e in examples) for k in cfg.tasks.kinds},
        "sft_steps": len(losses),
        "nll_first": losses[0] if losses else None,
        "nll_last": losses[-1] if losses else None,
        "solver": solver,
        "seconds": round(time.time() - t0, 1),
    }
    (out / REPORT).write_text(json.dumps(report, indent=1))
    return report
