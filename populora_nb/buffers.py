"""Task buffers: the validated tasks a proposer sees as references (AZR §3.3.1), and the seeds.

One buffer per task kind, kept apart as AZR's `DatasetManager` (trainer/ppo/azr_ray_trainer.py) keeps
its 'input' (code_i), 'output' (code_o) and 'problem' (code_f) lists; only the seeds go in both code_o
and code_i. Unlike AZR, which stops storing at 16,384 entries, a full buffer drops its oldest non-seed
entry (FIFO), so references keep tracking what the population writes now. References are drawn
uniformly (AZR's default), recency-weighted, or least shown first (``tasks.reference_sampling``, not
AZR: docs/methodology.md, "Novelty pressure"). The AZR solver's batch is `TaskBuffer.sample_max_new`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from populora_nb.errors import DataFileError, PathNotFoundError
from populora_nb.tasks import Task, TaskKind

DEFAULT_SEEDS = Path(__file__).resolve().parent / "data" / "seed_tasks.jsonl"  # package data


@dataclass
class TaskBuffer:
    kind: TaskKind
    cap: int = 4096
    tasks: list[Task] = field(default_factory=list)
    n_seeds: int = 0
    """The first n_seeds entries are seeds and are never evicted."""
    n_added: int = 0
    """Every task ever added, evicted or not (a counter for curves)."""
    n_recent: int = 0
    """How many of the newest entries the latest `add_batch` added: AZR's `get_recent_additions`."""
    times_shown: dict[str, int] = field(default_factory=dict)
    """How often each program (its text) was drawn as a reference; kept for ``least_shown`` draws."""

    def __len__(self) -> int:
        return len(self.tasks)

    def add(self, task: Task, seed: bool = False) -> None:
        """One task, counted into the latest batch (a seed only while no written task follows it)."""
        if task.kind != self.kind and not (seed and {task.kind, self.kind} <= {"code_o", "code_i"}):
            raise ValueError(f"a {task.kind} task does not belong in the {self.kind} buffer")
        if seed:
            at_end = self.n_seeds == len(self.tasks)
            self.tasks.insert(self.n_seeds, task)
            self.n_seeds += 1
        else:
            at_end = True
            self.tasks.append(task)
        self.n_recent += at_end  # the latest batch is always the buffer's last n_recent entries
        self.n_added += 1
        if len(self.tasks) > self.cap and len(self.tasks) > self.n_seeds:
            if self.n_seeds >= len(self.tasks) - self.n_recent:  # the evicted entry is in the latest batch
                self.n_recent -= 1
            del self.tasks[self.n_seeds]  # the oldest non-seed entry

    def add_batch(self, tasks: Sequence[Task]) -> None:
        """One step's valid tasks of this kind (possibly none): they become the latest batch, as
        AZR's `add_input_batch(entries, global_step)` / `add_output_batch` stamp them with the step."""
        self.n_recent = 0
        for task in tasks:
            self.add(task)

    @property
    def recent(self) -> list[Task]:
        """The latest batch's entries (the previous step's valid tasks once a run has stepped)."""
        return self.tasks[len(self.tasks) - self.n_recent :]

    def sample_max_new(self, k: int, rng: random.Random) -> list[Task]:
        """AZR's solver batch (`_create_train_code_pred_dataloader`, ``pred_data_mix_strategy = "max_new"``):
        up to k of the latest batch's tasks, then the rest uniformly from the whole buffer, new tasks
        included (so one can be drawn twice), each without replacement; fewer than k if the buffer is."""
        new = rng.sample(self.recent, min(k, len(self.recent)))
        return new + rng.sample(self.tasks, min(k - len(new), len(self.tasks)))

    def sample(
        self, k: int, rng: random.Random, mode: Literal["uniform", "recency", "least_shown"] = "uniform"
    ) -> list[Task]:
        """k distinct references (fewer if the buffer is smaller); every draw counts in `times_shown`."""
        k = min(k, len(self.tasks))
        if k == 0:
            return []
        if mode == "uniform":
            chosen_tasks = rng.sample(self.tasks, k)
        elif mode == "least_shown":
            chosen_tasks = self._least_shown(k, rng)
        elif mode == "recency":
            chosen_tasks = self._by_recency(k, rng)
        else:
            raise ValueError(f"reference sampling must be uniform, recency or least_shown, got {mode!r}")
        self.note_shown([t.program for t in chosen_tasks])
        return chosen_tasks

    def note_shown(self, programs: Sequence[str]) -> None:
        """Count each program as shown once more (a reference drawn here or from a pool built on this buffer)."""
        for program in programs:
            self.times_shown[program] = self.times_shown.get(program, 0) + 1

    def _least_shown(self, k: int, rng: random.Random) -> list[Task]:
        """The k entries shown least often so far; among equally shown ones a uniform draw."""
        order = sorted(self.tasks, key=lambda t: (self.times_shown.get(t.program, 0), rng.random()))
        return order[:k]

    def _by_recency(self, k: int, rng: random.Random) -> list[Task]:
        """k entries drawn without replacement, each with weight equal to its insertion rank."""
        left = list(range(len(self.tasks)))
        chosen: list[Task] = []
        for _ in range(k):  # weighted sampling without replacement
            j = rng.choices(range(len(left)), weights=[i + 1.0 for i in left])[0]
            chosen.append(self.tasks[left.pop(j)])
        return chosen

    def to_json(self) -> dict:
        counts = {f: getattr(self, f) for f in ("kind", "cap", "n_seeds", "n_added", "n_recent")}
        return {**counts, "times_shown": dict(self.times_shown), "tasks": [task_to_json(t) for t in self.tasks]}

    @classmethod
    def from_json(cls, data: dict) -> TaskBuffer:
        counts = {f: data[f] for f in ("kind", "cap", "n_seeds", "n_added")}
        # a checkpoint from before n_recent / times_shown were kept: no batch is recent, nothing was shown
        return cls(
            **counts,
            n_recent=data.get("n_recent", 0),
            times_shown=dict(data.get("times_shown", {})),
            tasks=[task_from_json(t) for t in data["tasks"]],
        )


def task_to_json(task: Task) -> dict:
    return dataclasses.asdict(task) | {"inputs": list(task.inputs), "outputs": list(task.outputs)}


def task_from_json(data: dict) -> Task:
    pairs = {"inputs": tuple(data["inputs"]), "outputs": tuple(data["outputs"])}
    return Task(**{"message": "", "meta": {}, **data, **pairs})


def snippet_pool(buffers: Mapping[str, TaskBuffer]) -> TaskBuffer | None:
    """The programs a code_f proposer is shown (one, to write inputs for): the code_o and code_i
    buffers' programs merged, each once, as AZR draws them (`dataset_manager.get_snippets`): seeds
    first, then the written ones alternating oldest first (so recency sampling still favours the
    newest). None when neither buffer exists."""
    parts = [buffers[k] for k in ("code_o", "code_i") if k in buffers]
    if not parts:
        return None
    pool = TaskBuffer("code_o", cap=sum(b.cap for b in parts))
    seen: set[str] = set()

    def take(task: Task, seed: bool) -> None:
        if task.program not in seen:  # a code_i triplet is a program with its I/O, as a code_o one
            seen.add(task.program)
            pool.add(dataclasses.replace(task, kind="code_o"), seed=seed)

    for b in parts:  # a program's draws so far, wherever it was drawn (`count_pool_draws`)
        for program, n in b.times_shown.items():
            pool.times_shown[program] = pool.times_shown.get(program, 0) + n
    for b in parts:
        for task in b.tasks[: b.n_seeds]:
            take(task, seed=True)
    written = [b.tasks[b.n_seeds :] for b in parts]
    for i in range(max(len(w) for w in written)):
        for w in written:
            if i < len(w):
                take(w[i], seed=False)
    return pool


def count_pool_draws(buffers: Mapping[str, TaskBuffer], programs: Sequence[str]) -> None:
    """Count programs drawn from a `snippet_pool` as shown in the first of the code_o / code_i buffers
    holding each, so the next step's pool (rebuilt from those buffers) remembers this step's draws."""
    for program in programs:
        for kind in ("code_o", "code_i"):
            if kind in buffers and any(t.program == program for t in buffers[kind].tasks):
                buffers[kind].note_shown([program])
                break


def load_seed_triplets(path: str | Path | None = None) -> list[dict]:
    """Seed (program, inputs, outputs) records; untrusted until the verifier has re-run them."""
    p = Path(path) if path else DEFAULT_SEEDS
    if not p.is_file():
        raise PathNotFoundError(
            f"seed tasks {p} {'is not a file' if p.exists() else 'not found'}; "
            f"set tasks.seeds_path to a JSONL of seed tasks"
        )
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataFileError(f"seed tasks {p} is not UTF-8 text; tasks.seeds_path takes a JSONL of seed tasks") from None
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            ok = isinstance(rec["program"], str) and isinstance(rec["inputs"], list) and rec["inputs"]
        except (json.JSONDecodeError, KeyError, TypeError):
            ok = False
        if not ok or not all(isinstance(i, str) for i in rec["inputs"]):
            raise DataFileError(
                f"{p}:{n}: a seed must be a JSON object with a 'program' string and a non-empty "
                f'\'inputs\' list of literal strings, e.g. {{"program": "def f(a): ...", "inputs": ["1"]}}'
            )
        records.append(rec)
    if not records:
        raise DataFileError(f"seed tasks {p} holds no seed tasks (one JSON object per line)")
    return records


def make_buffers(kinds: tuple[str, ...], cap: int) -> dict[str, TaskBuffer]:
    return {k: TaskBuffer(kind=k, cap=cap) for k in kinds}  # type: ignore[arg-type]
