"""A run's state between steps (`RunState`), how a run starts (`initial_state`), and its checkpoints:
written atomically with a manifest (`write_checkpoint`), resumed from the newest one that verifies
(`resume_or_start`), and read back whole by evaluation, retention and notebooks (`load_run`).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from populora_nb.buffers import TaskBuffer, load_seed_triplets, make_buffers
from populora_nb.config import ExperimentConfig
from populora_nb.copies import known_fingerprints, warmup_fingerprints
from populora_nb.errors import DataFileError, PathNotFoundError
from populora_nb.matchmaking import Rating, initial_ratings, make_trueskill
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Policy
from populora_nb.records import MANIFEST, CorruptRunError, RunDir, read_json, write_json
from populora_nb.tasks import Task
from populora_nb.verify import Proposal, Verifier

if TYPE_CHECKING:
    import trueskill


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
    seen: set[str] = field(default_factory=set)
    """Fingerprints of every program the run has met (seeds, warm-up examples, valid proposals so far):
    what a proposal's copy class is judged against (`populora_nb.copies`)."""

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
            "seen": sorted(self.seen),
        }

    @classmethod
    def from_json(cls, d: dict) -> RunState:
        buffers = {k: TaskBuffer.from_json(b) for k, b in d["buffers"].items()}
        # A checkpoint written before copies were classed: the buffers hold what the run had met.
        seen = set(d["seen"]) if "seen" in d else known_fingerprints(t for b in buffers.values() for t in b.tasks)
        return cls(
            step=d["step"],
            roster=dict(d["roster"]),
            born=d["born"],
            buffers=buffers,
            ratings={m: Rating(mu, sigma) for m, (mu, sigma) in d["ratings"].items()},
            seen=seen,
        )


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


def trueskill_env(config: ExperimentConfig) -> trueskill.TrueSkill:
    """The run's TrueSkill environment, from its matchmaking config (the one place it is built):
    one object per distinct set of parameters, so every step of a run rates with the same one."""
    mc = config.matchmaking
    return _trueskill_env(mc.mu, mc.sigma, mc.beta, mc.tau, mc.draw_probability)


@functools.lru_cache(maxsize=16)  # the env is immutable parameters; caching only avoids rebuilding it
def _trueskill_env(mu: float, sigma: float, beta: float, tau: float, draw: float) -> trueskill.TrueSkill:
    return make_trueskill(mu, sigma, beta, tau, draw)


def roster_for(config: ExperimentConfig) -> dict[str, str]:
    if config.run.agent == "baseline":
        return {"agent": "agent"}
    pc = config.population
    return {**{f"T{i}": "teacher" for i in range(pc.n_teachers)}, **{f"S{i}": "student" for i in range(pc.n_students)}}


def seed_buffers(config: ExperimentConfig, verifier: Verifier) -> dict[str, TaskBuffer]:
    """Buffers holding only the seed triplets, re-validated in the sandbox (seeds are data, not
    trusted): a run's starting buffers, and the difficulty probe's fixed references (`probe`)."""
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
    return buffers


def initial_state(config: ExperimentConfig, verifier: Verifier) -> RunState:
    """A run at step 0: the seed buffers (`seed_buffers`), prior ratings, the seeds' and warm-up's fingerprints."""
    buffers = seed_buffers(config, verifier)
    roster = roster_for(config)
    ratings = initial_ratings(list(roster), trueskill_env(config)) if config.run.agent == "population" else {}
    seen = known_fingerprints(t for b in buffers.values() for t in b.tasks)
    if config.lora.warmup is not None:  # a copy of what the warm-up trained on is not new either
        seen |= warmup_fingerprints(config.lora.warmup)
    return RunState(step=0, roster=roster, buffers=buffers, ratings=ratings, seen=seen)


def resume_or_start(rd: RunDir, policy: Policy, verifier: Verifier, config: ExperimentConfig) -> RunState:
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


def write_checkpoint(rd: RunDir, policy: Policy, state: RunState) -> None:
    """The policy's adapters and the state as checkpoint `state.step`, committed atomically with its manifest."""
    tmp = rd.begin_checkpoint(state.step)
    policy.save(tmp / "policy")
    write_json(tmp / "state.json", state.to_json())
    rd.commit_checkpoint(tmp, state.step)
