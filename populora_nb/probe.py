"""The fixed difficulty probe: every proposer's tasks scored on one scale by one frozen solver.

A run's own rho mixes the teacher's difficulty with the matched student's skill; the probe measures
difficulty alone: fixed prompts (references drawn once with ``probe.seed``, split across the run's
proposers, `probe_askers`), the same sampling seed at every event, one never-trained solver
(`PROBE_SOLVER`), and nothing trained on or stored but ``probe.jsonl``. Per proposer it gives the
valid rate, ``probe/rho``, the share in 0 < rho < 1 and the share of new programs (`probe_metrics`);
its cost is ``time/probe_s``. The rules and why: docs/methodology.md, "The difficulty probe".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from statistics import fmean

from populora_nb.buffers import TaskBuffer
from populora_nb.config import ExperimentConfig
from populora_nb.copies import known_fingerprints, mark_copies
from populora_nb.policy import PROBE_SOLVER, Policy
from populora_nb.solve_batches import learnability_jobs, worked_examples
from populora_nb.stages import Proposed, propose, solve, solve_rates, validate
from populora_nb.step_records import task_rows
from populora_nb.tasks import Task
from populora_nb.verify import Verifier


def probe_due(step: int, config: ExperimentConfig) -> bool:
    """Whether the probe runs at the top of ``step`` (every ``probe.every`` steps from step 0)."""
    every = config.probe.every
    return every > 0 and step % every == 0


def fixed_config(config: ExperimentConfig) -> ExperimentConfig:
    """The run's config with the probe's seed in place of the run's: `propose` and `solve` draw the
    references and the samples from it, so every probe event (and every run) draws the same."""
    return dataclasses.replace(config, run=dataclasses.replace(config.run, seed=config.probe.seed))


def probe_askers(proposers: Sequence[str], config: ExperimentConfig) -> list[str]:
    """The proposer that answers each of the event's ``probe.prompts_per_kind`` prompts: prompt j goes
    to ``proposers[j % n]``, so every run asks the same prompts, as many, whatever its n."""
    if not proposers:
        raise ValueError("the difficulty probe needs at least one proposer")
    return [proposers[j % len(proposers)] for j in range(config.probe.prompts_per_kind)]


def run_probe(
    policy: Policy,
    verifier: Verifier,
    proposers: Sequence[str],
    references: dict[str, TaskBuffer],
    config: ExperimentConfig,
) -> list[Proposed]:
    """One probe event: the proposers answer the fixed prompts between them (`probe_askers`), the
    verifier validates, the frozen solver attempts each valid task ``probe.rollouts`` times. Returns the
    proposals with their rho and copy class (against the references and seeds only, not the run's
    history, so the probe's scale does not depend on what a run wrote before)."""
    fixed, pc = fixed_config(config), config.probe
    proposals = propose(policy, probe_askers(proposers, config), references, fixed, 0, 1)
    proposals = validate(verifier, proposals, config.tasks.code_f_inputs)
    seen = known_fingerprints(t for b in references.values() for t in b.tasks)
    proposals = mark_copies(proposals, seen)
    proposals = [dataclasses.replace(p, solver=PROBE_SOLVER) for p in proposals]
    jobs = learnability_jobs(PROBE_SOLVER, proposals, pc.rollouts)  # rho only, never trained on
    attempts = solve(policy, verifier, jobs, fixed, 0, worked_examples(references))
    return solve_rates(proposals, attempts)


def probe_rows(step: int, proposals: Sequence[Proposed], config: ExperimentConfig) -> list[dict]:
    """The probe.jsonl rows of one event: a tasks.jsonl row per probe proposal (`task_rows`), with
    the prompt it answered (the same index means the same prompt at every event) and the rollouts."""
    kinds = len(config.tasks.kinds)  # propose() orders jobs by asker (one per prompt, `probe_askers`), then kind
    rows = task_rows(step, proposals)
    return [row | {"prompt_index": i // kinds, "rollouts": config.probe.rollouts} for i, row in enumerate(rows)]


def probe_metrics(proposals: Sequence[Proposed], member: str) -> dict[str, float | None]:
    """One proposer's probe metrics (module docstring), namespaced ``probe/``; empty when it did not
    take part. Rates over valid tasks are None when none was valid."""
    mine = [p for p in proposals if p.proposer == member]
    if not mine:
        return {}
    valid = [p for p in mine if isinstance(p.result, Task)]
    rhos = [p.rho for p in valid if p.rho is not None]
    return {
        "probe/n_asked": float(len(mine)),
        "probe/n_valid": float(len(valid)),
        "probe/valid_rate": len(valid) / len(mine),
        "probe/rho": fmean(rhos) if rhos else None,
        "probe/band_rate": sum(0 < r < 1 for r in rhos) / len(rhos) if rhos else None,
        "probe/new_rate": sum(p.copy == "new" for p in valid) / len(valid) if valid else None,
    }
