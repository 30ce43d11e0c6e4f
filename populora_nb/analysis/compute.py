"""Compute matching between the single AZR agent and the population (PopuLoRA §4).

The paper's baseline is "per-adapter compute-matched": each member gets what the single agent gets,
so the population spends about n times the baseline in total. Per member and step the loop records
the completion tokens generated (``compute/generated_tokens``) and trained on
(``compute/trained_tokens``); this module sums them per role so the report states the measured
ratio beside the claim. The ±15% band applies to trained tokens: AZR's learnability rollouts are
generated and never trained on, so generated tokens cannot match as well (docs/methodology.md,
"Compute is matched per adapter").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from populora_nb.analysis.frames import read_stream

KEYS = ("compute/generated_tokens", "compute/trained_tokens")
BAND = 0.15
"""Per-adapter trained tokens within ±15% of the agent's count as matched."""


@dataclass(frozen=True)
class RunCompute:
    """One run's (or one role's) measured compute, in completion tokens summed over every step and member."""

    name: str
    adapters: int
    steps: int
    generated: float
    trained: float

    @property
    def generated_per_adapter(self) -> float:
        """Completion tokens generated per adapter and step."""
        return self.generated / self.adapters / self.steps

    @property
    def trained_per_adapter(self) -> float:
        """Completion tokens trained on per adapter and step."""
        return self.trained / self.adapters / self.steps

    def ratio_to(self, base: RunCompute) -> tuple[float, float]:
        """(generated, trained) tokens per adapter and step over ``base``'s; NaN where ``base``'s is 0."""
        generated = _div(self.generated_per_adapter, base.generated_per_adapter)
        return generated, _div(self.trained_per_adapter, base.trained_per_adapter)


def run_compute(name: str, metrics: pd.DataFrame, role: str | None = None) -> RunCompute | None:
    """Sum a run's metrics frame (only ``role``'s members when given); None for a run recorded
    before token counts existed, or with no member of that role."""
    if role is not None:
        metrics = metrics[metrics["role"] == role] if "role" in metrics else metrics.iloc[:0]
    if KEYS[0] not in metrics or metrics[KEYS[0]].isna().all():
        return None
    per_step = metrics["step"].value_counts()
    # adapters alive at once: the most member rows of one step (evolution gives a child a new id,
    # so counting distinct ids would over-count)
    generated, trained = (float(metrics[key].sum()) if key in metrics else 0.0 for key in KEYS)
    return RunCompute(name, int(per_step.max()), len(per_step), generated, trained)


def _div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def compute_table(runs: Mapping[str, str | Path]) -> list[list[str]]:
    """Rows for the report: per run (and per role of the population), adapters, steps, total tokens,
    tokens per adapter and step, and the per-adapter ratio to the baseline agent with whether its
    trained tokens lie in the ±15% band; the population's total ratio (about n adapters under
    per-adapter matching) on its own row."""
    by_run = {name: read_stream(path, "metrics") for name, path in runs.items()}
    header = ["run", "adapters", "steps", "generated tokens", "trained tokens", "generated / adapter / step"]
    header += [
        "trained / adapter / step",
        "per-adapter ratio to the agent (gen / train)",
        f"trained within ±{BAND:.0%}",
    ]
    rows = [header + ["total ratio to the agent (gen / train)"]]
    base = run_compute("baseline", by_run["baseline"]) if "baseline" in by_run else None
    for name, metrics in by_run.items():
        roles = [None, "teacher", "student"] if name != "baseline" and "role" in metrics else [None]
        for role in roles:
            c = run_compute(name, metrics, role)
            label = name if role is None else f"{name} · {role}s"
            if c is None:
                if role is None:
                    rows.append([label] + ["not recorded"] * (len(rows[0]) - 1))
                continue
            per = total = band = "reference" if name == "baseline" else "n/a (no baseline run)"
            if base is not None and name != "baseline":
                gen, train = c.ratio_to(base)
                per = f"{_fmt(gen)} / {_fmt(train)}"
                band = "n/a" if train != train else ("yes" if abs(train - 1) <= BAND else "no")
                total = f"{_fmt(_div(c.generated, base.generated))} / {_fmt(_div(c.trained, base.trained))}"
                total = "(see the run's row)" if role is not None else total
            tokens = (c.generated, c.trained, c.generated_per_adapter, c.trained_per_adapter)
            rows.append([label, str(c.adapters), str(c.steps), *(f"{t:.0f}" for t in tokens), per, band, total])
    return rows


def _fmt(x: float) -> str:
    # A baseline that trained on nothing (every update skipped: all advantages 0) has no ratio.
    return "n/a" if x != x else f"{x:.2f}"
