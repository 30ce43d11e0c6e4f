"""`run`, which drives AZR's single-agent step or PopuLoRA's population step (`populora_nb.step`
says what each does, stage by stage) into a run directory with checkpoints and resume, and AZR's
seeding run (`grow_seeds`).

`run` reads as CleanRL's loop does: for each step the probe, the step, its records, evolution and a
checkpoint, each when due.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm  # a text bar, not tqdm.auto's widget: see run()

from populora_nb.checkpoints import resume_or_start, write_checkpoint
from populora_nb.config import ExperimentConfig
from populora_nb.matchmaking import contested
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Policy
from populora_nb.probe import probe_due, probe_metrics, probe_rows, run_probe
from populora_nb.records import RunDir
from populora_nb.stages import StepOutcome, propose, validate
from populora_nb.state import RunState, roster_for, seed_buffers
from populora_nb.step import evolve, run_step
from populora_nb.step_records import (
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


# ---- run --------------------------------------------------------------------------------------------
def run(
    config: ExperimentConfig,
    run_dir: str | Path,
    policy: Policy | None = None,
    verifier: Verifier | None = None,
    on_step: Callable[[int, list[dict]], None] | None = None,
    progress: bool = True,
) -> RunDir:
    """Run ``config.run.steps`` steps into ``run_dir``, resuming from its latest checkpoint (module docstring)."""
    rd = RunDir.create(run_dir, config)
    agent = config.run.agent
    with contextlib.ExitStack() as owned:  # what this run started, closed however it ends
        # run.report_to's trackers (none by default): a missing backend fails here, in one line, before any work
        tracker = owned.enter_context(open_tracker(config.run.report_to, rd.path, config.to_dict()))
        if verifier is None:
            verifier = owned.enter_context(Verifier.from_config(config.verifier))
        # One progress line from the first second: a text bar (it survives the kernel and export), on stdout
        # (JupyterLab paints stderr as an error box); the running step is 0-based, as in the records.
        desc, steps = f"{agent}: loading the model", config.run.steps
        bar = owned.enter_context(tqdm(total=steps, desc=desc, unit="step", disable=not progress, file=sys.stdout))
        if policy is None:
            policy = LoRAPolicy.create(config, list(roster_for(config).items()))
            owned.callback(policy.close)  # a rollout engine this run started (its own process)
        bar.set_description_str(f"{agent}: resuming or seeding the buffers")
        state = resume_or_start(rd, policy, verifier, config)
        if state.step > 0:  # one line, so a rerun is never mistaken for a fresh start
            tqdm.write(f"[{agent}] resuming at step {state.step}: steps 0-{state.step - 1} restored", file=sys.stdout)
        bar.update(state.step)
        probe_refs: dict | None = None  # the probe's fixed references, built at its first event
        for step in range(state.step, config.run.steps):
            state.step = step
            probed: dict[str, dict] = {}
            if probe_due(step, config):  # before the step trains: the members as the last step left them
                bar.set_description_str(f"{agent} · step {step} difficulty probe")
                probe_refs = probe_refs or seed_buffers(config, verifier)
                probed = difficulty_probe(policy, verifier, state, config, probe_refs, rd)
            bar.set_description_str(f"{agent} · step {step} running")
            reset_peak_memory()
            started = time.perf_counter()
            out = run_step(policy, verifier, state, config)
            cost = {"time/step_s": time.perf_counter() - started, **peak_memory_gb()}
            rows = metric_rows(step, out, state, config, cost, probed, policy.tokenizer)
            record_step(rd, step, out, rows, config)
            if evolution_due(step, config):
                rd.append("lineage", evolve(policy, state, config))
            state.step = step + 1
            if checkpoint_due(state.step, config):
                write_checkpoint(rd, policy, state)
            tracker.log_step(step, rows)
            if on_step is not None:
                on_step(step, rows)
            bar.set_postfix_str(step_summary(step, rows, config.tasks.kinds), refresh=False)
            bar.update(1)
        bar.set_description_str(f"{agent}: run complete" if bar.n == bar.total else f"{agent}: stopped")
    return rd


# ---- the loop's pieces ------------------------------------------------------------------------------
def metric_rows(
    step: int,
    out: StepOutcome,
    state: RunState,
    config: ExperimentConfig,
    cost: dict[str, float],
    probed: dict[str, dict],
    tokenizer: Any,
) -> list[dict]:
    """The step's metrics rows, one per member in roster order: its stage metrics, the step's cost,
    its tokens, its probe metrics at a probe step, and its rating after the step (population)."""
    tokens = token_counts(out, tokenizer)
    return [
        {
            "step": step,
            **member_metrics(m, r, out, config.tasks.kinds),
            **cost,
            **tokens.get(m, {}),
            **probed.get(m, {}),
            **(
                {"rating/mu": state.ratings[m].mu, "rating/sigma": state.ratings[m].sigma} if m in state.ratings else {}
            ),
        }
        for m, r in state.roster.items()
    ]


def record_step(rd: RunDir, step: int, out: StepOutcome, rows: list[dict], config: ExperimentConfig) -> None:
    """The step's records: tasks.jsonl, metrics.jsonl and, in the population, matches.jsonl."""
    rd.append("tasks", task_rows(step, out.proposals))
    rd.append("metrics", rows)
    if config.run.agent == "population":  # a row per match, in proposal order; contested: the teacher won games on it
        threshold = config.matchmaking.win_threshold
        matches = [
            {"step": step, "kind": p.kind, **dataclasses.asdict(m), "contested": contested(m, threshold)}
            for p, m in zip(out.proposals, out.matches)
        ]
        rd.append("matches", matches)


def evolution_due(step: int, config: ExperimentConfig) -> bool:
    """After every E-th step of a population run, but not the last (its children would never train)."""
    ec = config.evolution
    population = config.run.agent == "population" and ec.enabled
    return population and (step + 1) % ec.every == 0 and step + 1 < config.run.steps


def checkpoint_due(steps_done: int, config: ExperimentConfig) -> bool:
    """A checkpoint after every ``run.checkpoint_every`` steps (0: none between) and after the last."""
    every = config.run.checkpoint_every
    return bool(every and steps_done % every == 0) or steps_done == config.run.steps


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
    buffers = seed_buffers(config, verifier)
    buffer = buffers["code_o"] if "code_o" in buffers else buffers[config.tasks.kinds[0]]
    seen = {(t.program, t.inputs) for t in buffer.tasks}
    for round_ in range(max_rounds):
        if len(buffer) >= target:
            break
        proposals = propose(policy, ["agent"], buffers, config, round_)
        proposals = validate(verifier, proposals, config.tasks.code_f_inputs)
        for task in (p.result for p in proposals if p.kind in ("code_o", "code_i")):
            if isinstance(task, Task) and (task.program, task.inputs) not in seen:
                seen.add((task.program, task.inputs))
                buffer.add(Task(buffer.kind, task.program, task.inputs, task.outputs))
        if on_round is not None:
            on_round(round_, len(buffer))
    return buffer.tasks
