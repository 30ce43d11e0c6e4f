"""A run's checkpoints: the policy's adapters and the `RunState`, written atomically with a manifest
(`write_checkpoint`), resumed from the newest one that verifies (`resume_or_start`), and read back
whole by evaluation, retention and notebooks (`load_run`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populora_nb.config import ExperimentConfig
from populora_nb.errors import PathNotFoundError
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Policy
from populora_nb.records import MANIFEST, CorruptRunError, RunDir, read_json, write_json
from populora_nb.state import RunState, initial_state, roster_for
from populora_nb.verify import Verifier


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
    whose files match its manifest (else `CorruptRunError`; none: `PathNotFoundError`). `config`
    defaults to the run's own; `base` shares an already loaded base model."""
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


def resume_or_start(rd: RunDir, policy: Policy, verifier: Verifier, config: ExperimentConfig) -> RunState:
    """Resume from the newest checkpoint that verifies against its manifest (its files, and the record
    rows of the steps it committed), then cut the records back to it. A damaged newer checkpoint is a
    one-line warning; damage with no good checkpoint raises `CorruptRunError`, never a restart from 0."""
    bad: list[str] = []  # what was wrong with each newer checkpoint, for the warning or the refusal
    checkpoints = rd.committed_checkpoints()
    if checkpoints and not any((path / MANIFEST).is_file() for _, path in checkpoints):
        # Every checkpoint predates manifests (an older populora_nb wrote this run): resume unverified.
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


def write_checkpoint(rd: RunDir, policy: Policy, state: RunState) -> None:
    """The policy's adapters and the state as checkpoint `state.step`, committed atomically with its manifest."""
    tmp = rd.begin_checkpoint(state.step)
    policy.save(tmp / "policy")
    write_json(tmp / "state.json", state.to_json())
    rd.commit_checkpoint(tmp, state.step)
