"""Task buffers: the validated tasks a proposer sees as references (AZR §3.3.1), and the seeds.

One buffer per task kind. AZR keeps the first 16,384 entries and then stops storing, so after about
250 steps its references freeze; here a full buffer instead drops its oldest non-seed entry (FIFO),
so references keep tracking what the population writes now, while the seeds are never evicted.
References are drawn uniformly, or recency-weighted with weight proportional to insertion rank
(the newest entry is n times as likely as the oldest).
"""

from __future__ import annotations

import json
import random
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

    def __len__(self) -> int:
        return len(self.tasks)

    def add(self, task: Task, seed: bool = False) -> None:
        if task.kind != self.kind and not (seed and {task.kind, self.kind} <= {"code_o", "code_i"}):
            raise ValueError(f"a {task.kind} task does not belong in the {self.kind} buffer")
        if seed:
            self.tasks.insert(self.n_seeds, task)
            self.n_seeds += 1
        else:
            self.tasks.append(task)
        self.n_added += 1
        if len(self.tasks) > self.cap and len(self.tasks) > self.n_seeds:
            del self.tasks[self.n_seeds]  # the oldest non-seed entry

    def sample(self, k: int, rng: random.Random, mode: Literal["uniform", "recency"] = "uniform") -> list[Task]:
        """k distinct references (fewer if the buffer is smaller)."""
        k = min(k, len(self.tasks))
        if k == 0:
            return []
        if mode == "uniform":
            return rng.sample(self.tasks, k)
        idx = list(range(len(self.tasks)))
        chosen: list[int] = []
        weights = [i + 1.0 for i in idx]
        for _ in range(k):  # weighted sampling without replacement
            j = rng.choices(range(len(idx)), weights=weights)[0]
            chosen.append(idx.pop(j))
            weights.pop(j)
        return [self.tasks[i] for i in chosen]

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "cap": self.cap,
            "n_seeds": self.n_seeds,
            "n_added": self.n_added,
            "tasks": [task_to_json(t) for t in self.tasks],
        }

    @classmethod
    def from_json(cls, data: dict) -> TaskBuffer:
        return cls(
            kind=data["kind"],
            cap=data["cap"],
            n_seeds=data["n_seeds"],
            n_added=data["n_added"],
            tasks=[task_from_json(t) for t in data["tasks"]],
        )


def task_to_json(task: Task) -> dict:
    return {
        "kind": task.kind,
        "program": task.program,
        "inputs": list(task.inputs),
        "outputs": list(task.outputs),
        "message": task.message,
        "meta": task.meta,
    }


def task_from_json(data: dict) -> Task:
    return Task(
        kind=data["kind"],
        program=data["program"],
        inputs=tuple(data["inputs"]),
        outputs=tuple(data["outputs"]),
        message=data.get("message", ""),
        meta=data.get("meta", {}),
    )


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
