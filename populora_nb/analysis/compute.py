"""Compute matching between the single AZR agent and the population (PopuLoRA §4).

The paper compares the two *per adapter*: every population member gets about the generation and
training budget the single agent gets, so the population as a whole spends about n_T times the
baseline's total (n_T teacher-student pairs each doing what the agent does alone). Nothing here
assumes that: the loop records, per member and step, the completion tokens it generated
(``compute/generated_tokens``: proposals and every rollout, trained on or not, e.g. AZR's
learnability rollouts) and the completion tokens it trained on (``compute/trained_tokens``), and
this module sums them so the report states the measured ratio next to the claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from populora_nb.records import RunDir

KEYS = ("compute/generated_tokens", "compute/trained_tokens")


@dataclass(frozen=True)
class RunCompute:
    """One run's measured compute, in completion tokens summed over every step and member."""

    name: str
    adapters: int
    steps: int
    generated: float
    trained: float

    @property
    def generated_per_adapter(self) -> float:
        """Completion tokens generated per adapter (the paper matches compute per adapter)."""
        return self.generated / self.adapters

    @property
    def trained_per_adapter(self) -> float:
        """Completion tokens trained on per adapter."""
        return self.trained / self.adapters


def run_compute(name: str, rows: list[dict]) -> RunCompute | None:
    """Sum a run's metrics rows; None for a run recorded before token counts existed."""
    if not any(KEYS[0] in r for r in rows):
        return None
    return RunCompute(
        name,
        _roster_size(rows),
        len({r["step"] for r in rows}),
        sum(r.get(KEYS[0], 0.0) for r in rows),
        sum(r.get(KEYS[1], 0.0) for r in rows),
    )


def _roster_size(rows: list[dict]) -> int:
    """Adapters alive at once: the most member rows of one step (evolution gives a child a new id,
    so counting distinct ids would over-count)."""
    per_step: dict[int, int] = {}
    for r in rows:
        per_step[r["step"]] = per_step.get(r["step"], 0) + 1
    return max(per_step.values())


def compute_table(runs: Mapping[str, str | Path]) -> list[list[str]]:
    """Rows for the report: per run, total and per-adapter generated / trained tokens, and for the
    population the ratio of its per-adapter compute to the baseline agent's (1.0 is the paper's
    per-adapter matching) and of its total (about n_T under that matching)."""
    measured = {name: run_compute(name, RunDir(Path(path)).read("metrics")) for name, path in runs.items()}
    rows = [
        [
            "run",
            "adapters",
            "steps",
            "generated tokens",
            "trained tokens",
            "generated / adapter",
            "trained / adapter",
            "per-adapter ratio to baseline (gen / train)",
            "total ratio to baseline (gen / train)",
        ]
    ]
    base = measured.get("baseline")
    for name, c in measured.items():
        if c is None:
            rows.append([name] + ["not recorded"] * 8)
            continue
        per = total = "reference" if name == "baseline" else "n/a (no baseline run)"
        if base is not None and name != "baseline":
            generated = _ratio(c.generated_per_adapter, base.generated_per_adapter)
            per = f"{generated} / {_ratio(c.trained_per_adapter, base.trained_per_adapter)}"
            total = f"{_ratio(c.generated, base.generated)} / {_ratio(c.trained, base.trained)}"
        rows.append(
            [
                name,
                str(c.adapters),
                str(c.steps),
                f"{c.generated:.0f}",
                f"{c.trained:.0f}",
                f"{c.generated_per_adapter:.0f}",
                f"{c.trained_per_adapter:.0f}",
                per,
                total,
            ]
        )
    return rows


def _ratio(a: float, b: float) -> str:
    # A baseline that trained on nothing (every update skipped: all advantages 0) has no ratio.
    return f"{a / b:.2f}" if b else "n/a"
