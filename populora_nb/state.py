"""A run's state between steps (`RunState`) and how a run starts (`initial_state`: the seed tasks,
re-validated, prior ratings, and the fingerprints of what the run starts from). Plain data the step
functions read and change; `populora_nb.checkpoints` writes it to disk and reads it back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from populora_nb.buffers import TaskBuffer, load_seed_triplets, make_buffers
from populora_nb.config import ExperimentConfig
from populora_nb.copies import is_current_fingerprint, known_fingerprints, warmup_fingerprints
from populora_nb.errors import DataFileError
from populora_nb.matchmaking import Rating, initial_ratings, make_trueskill
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
        # A checkpoint written before copies were classed, or before names were normalised
        # (`copies.is_current_fingerprint`): the buffers hold what the run had met.
        stored = d.get("seen", [])
        current = bool(stored) and all(is_current_fingerprint(k) for k in stored)
        seen = set(stored) if current else known_fingerprints(t for b in buffers.values() for t in b.tasks)
        ratings = {m: Rating(mu, sigma) for m, (mu, sigma) in d["ratings"].items()}
        return cls(d["step"], dict(d["roster"]), buffers, ratings, born=d["born"], seen=seen)


def trueskill_env(config: ExperimentConfig) -> trueskill.TrueSkill:
    """The run's TrueSkill environment, from its matchmaking config (the one place it is built):
    one object per distinct set of parameters, so every step of a run rates with the same one."""
    mc = config.matchmaking
    return _trueskill_env(mc.mu, mc.sigma, mc.beta, mc.tau, mc.draw_probability)


_trueskill_env = functools.lru_cache(maxsize=16)(make_trueskill)  # immutable parameters: cached, never rebuilt


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
