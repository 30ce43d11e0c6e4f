"""The novelty-pressure pilot's table: which laptop setting makes 135M proposers keep writing new
programs, read from every arm's records over seeds (docs/results/cpu-pilot-novelty).

At 135M both arms fall into re-posing a few programs (docs/laptop-run.md), so arms race vs collapse
cannot be read; a setting under which proposers keep writing new programs would let the two arms
differ. Per arm and run, pooled over the seeds:

* **new programs per step**: valid proposals whose program class is ``"new"`` (`copies.classify_rows`,
  names normalised): the measure of whether proposers write;
* the **valid rate before novelty rules**: valid proposals, plus those a novelty rule rejected after
  they were classed (`new_tasks.run_steps`), over proposals; a copy paid nothing (``copies_earn_nothing``)
  or rejected (``reject_copies``) still counts as the valid task it was, so no arm's rate falls by
  construction;
* the **band share over new programs**: new programs their matched solver attempted with 0 < ρ < 1;
* **seconds per step**, on the machine as it was.

Intervals: a 95% percentile bootstrap resampling whole (seed, step) clusters, since a step's tasks
share proposers and references (`new_tasks`); the ratio to the control resamples each arm's clusters
on its own.

**The rule**, stated before the pilot ran (issue #52): an arm wins when its **population** writes at
least ``NEW_RATIO`` times the control's new programs per step (pooled over seeds) with the ratio's
interval above ``RATIO_FLOOR``, at no less than ``VALID_RATIO`` times the control's valid rate; its
baseline (about one new program a step: too few to rule on) is reported beside it and must keep at
least ``VALID_RATIO`` times the control baseline's valid rate.

An arm's records are kept for this reading under docs/results by `keep_records`.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from populora_nb.analysis.runs import RUNS
from populora_nb.errors import UserInputError
from populora_nb.records import RunDir
from studies.new_tasks import (
    NEW_RATIO,
    VALID_RATIO,
    RunSteps,
    interval_text,
    mean_interval,
    mean_ratio,
    run_steps,
    step_share,
)

RATIO_FLOOR = 1.2
"""The ratio's 95% interval must lie above this for a win: a doubling inside the noise is not one."""
CONTROL = "control"


def pooled_steps(run_dirs: Sequence[str | Path]) -> RunSteps | None:
    """One arm's per-step counts over its seeds, concatenated: each (seed, step) one cluster; None
    when no seed made this run."""
    parts = [run_steps(d) for d in run_dirs if RunDir(Path(d)).has("tasks")]
    if not parts:
        return None
    joined: dict[str, Any] = {}
    for f in fields(RunSteps):
        arrays = [getattr(p, f.name) for p in parts]
        joined[f.name] = None if any(a is None for a in arrays) else np.concatenate(arrays)
    return RunSteps(**joined)


def valid_rate(c: RunSteps) -> float:
    return float(c.valid.sum() / c.proposals.sum()) if c.proposals.sum() else 0.0


def verdict(arm: Mapping[str, RunSteps], control: Mapping[str, RunSteps], ratio: tuple[float, float, float]) -> str:
    """The rule (module docstring) for one arm, in words."""
    pop, pop0 = arm.get("population"), control.get("population")
    if pop is None or pop0 is None:
        return "cannot be judged: the rule reads the population, which did not run"
    point, low, _ = ratio
    reasons = []
    if not point >= NEW_RATIO:
        reasons.append(f"{point:.2f}× the control's new programs per step, under {NEW_RATIO:g}×")
    if math.isnan(low) or not low > RATIO_FLOOR:
        reasons.append(f"the ratio's interval reaches down to {low:.2f}, not above {RATIO_FLOOR:g}")
    if valid_rate(pop) < VALID_RATIO * valid_rate(pop0):
        reasons.append(f"valid rate {valid_rate(pop):.0%} under {VALID_RATIO:g}× the control's {valid_rate(pop0):.0%}")
    base, base0 = arm.get("baseline"), control.get("baseline")
    if base is not None and base0 is not None and valid_rate(base) < VALID_RATIO * valid_rate(base0):
        reasons.append(f"its baseline's valid rate {valid_rate(base):.0%} falls under half the control baseline's")
    return "**wins**" if not reasons else "does not win: " + "; ".join(reasons)


def novelty_table(arms: Mapping[str, Sequence[str | Path]]) -> tuple[list[str], dict]:
    """The table (markdown lines) and its numbers: ``arms`` maps each arm (the control first) to its
    experiment directories, one per seed."""
    names = list(arms)
    if not names:
        return [], {}
    counts = {
        name: {run: c for run in RUNS if (c := pooled_steps([Path(d) / run for d in dirs])) is not None}
        for name, dirs in arms.items()
    }
    control = counts[names[0]]
    lines = [
        "| arm | run | seeds × steps | new programs / step | × control | valid rate before novelty rules "
        "| band share over new programs | s/step |",
        "|---|---|---:|---|---|---|---|---:|",
    ]
    record: dict = {"control": names[0], "rows": [], "verdicts": {}}
    record["rule"] = {"new_ratio": NEW_RATIO, "ratio_floor": RATIO_FLOOR, "valid_ratio": VALID_RATIO}
    verdicts = []
    for name in names:
        ratios = {}
        for run in RUNS:
            label = name if run == "baseline" else ""
            if run not in counts[name] or run not in control:
                lines.append(f"| {label} | {run} | not run | | | | | |")
                continue
            c, tag = counts[name][run], f"{name}/{run}"
            new = mean_interval(c.new_valid, f"{tag}/new")
            ratios[run] = ratio = mean_ratio(c.new_valid, control[run].new_valid, f"{tag}/ratio")
            valid = step_share(c.valid, c.proposals, f"{tag}/valid")
            band = step_share(c.new_in_band, c.new_played, f"{tag}/band")
            cost = mean_interval(c.seconds, f"{tag}/cost")
            n_seeds = len(arms[name])
            lines.append(
                f"| {label} | {run} | {n_seeds} × {len(c.steps) // max(n_seeds, 1)} | {interval_text(new)} "
                f"({int(c.new_valid.sum())}) | {'control' if name == names[0] else interval_text(ratio)} | "
                f"{interval_text(valid, '.0%')} ({int(c.valid.sum())}/{int(c.proposals.sum())}) | "
                f"{interval_text(band, '.0%')} ({int(c.new_in_band.sum())}/{int(c.new_played.sum())}) | "
                f"{interval_text(cost, '.0f')} |"
            )
            record["rows"].append(
                {"arm": name, "run": run, "seeds": n_seeds, "clusters": len(c.steps), "new_per_step": new}
                | {"ratio_to_control": ratio, "valid_rate_before_rules": valid, "band_share_new": band}
                | {"seconds_per_step": cost, "new": int(c.new_valid.sum()), "valid": int(c.valid.sum())}
                | {"proposals": int(c.proposals.sum())}
            )
        if name != names[0]:
            said = verdict(counts[name], control, ratios.get("population", (math.nan,) * 3))
            verdicts.append(f"- **{name}** {said}.")
            record["verdicts"][name] = said
    lines += [
        "",
        f"Rule (stated before the pilot ran): an arm wins when its population writes ≥ {NEW_RATIO:g}× the "
        f"control's new programs per step, pooled over seeds, with the ratio's 95% interval above "
        f"{RATIO_FLOOR:g}, at ≥ {VALID_RATIO:g}× the control's valid rate; its baseline must keep ≥ "
        f"{VALID_RATIO:g}× the control baseline's valid rate.",
        "",
        *verdicts,
    ]
    return lines, record


def pilot_arms(table_dir: str | Path) -> dict[str, list[Path]]:
    """The arms kept under ``table_dir/seed*/<arm>/``, the control first, then by name."""
    root = Path(table_dir)
    seeds = sorted(p for p in root.glob("seed*") if p.is_dir())
    if not seeds:
        raise UserInputError(f"{root} holds no seed*/ directories of pilot arms")
    names = sorted({arm.name for s in seeds for arm in s.iterdir() if arm.is_dir()})
    if CONTROL not in names:
        raise UserInputError(f"{root} holds no {CONTROL!r} arm: the table compares every arm with it")
    ordered = [CONTROL] + [n for n in names if n != CONTROL]
    return {n: [s / n for s in seeds if (s / n).is_dir()] for n in ordered}


def write_novelty_table(table_dir: str | Path) -> Path:
    """``novelty.md`` and ``novelty.json`` in ``table_dir``, from the records kept there."""
    root = Path(table_dir)
    lines, record = novelty_table(pilot_arms(root))
    (root / "novelty.json").write_text(json.dumps(record, indent=1, default=float) + "\n")
    (root / "novelty.md").write_text("\n".join(lines) + "\n")
    return root / "novelty.md"


KEPT_STREAMS = ("tasks", "metrics", "matches", "lineage")
"""The streams a kept pilot arm holds: enough for `studies.new_tasks`, this module and liveness."""


def keep_records(experiment: str | Path, dest: str | Path) -> Path:
    """A finished pilot arm's records, kept for reading at ``dest`` (committed under docs/results): the
    configs, stages.json, the warm-up's report and examples (whose programs count as met before step 1),
    and each run's streams compressed (``.jsonl.gz``, read alike by `records.RunDir`)."""
    src, dst = Path(experiment), Path(dest)
    if not (src / "stages.json").is_file():
        raise UserInputError(f"{src} is not an experiment directory (no stages.json): nothing to keep")
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "stages.json", "warmup/report.json", "warmup/examples.jsonl"):
        if (src / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, dst / name)
    for run in RUNS:
        if not (src / run / "config.yaml").is_file():
            continue
        (dst / run).mkdir(exist_ok=True)
        shutil.copyfile(src / run / "config.yaml", dst / run / "config.yaml")
        for stream in KEPT_STREAMS:
            if (src / run / f"{stream}.jsonl").is_file():
                data = (src / run / f"{stream}.jsonl").read_bytes()
                (dst / run / f"{stream}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    return dst


if __name__ == "__main__":  # python -m studies.novelty_pilot docs/results/cpu-pilot-novelty
    print(write_novelty_table(sys.argv[1] if len(sys.argv) > 1 else "docs/results/cpu-pilot-novelty"))
