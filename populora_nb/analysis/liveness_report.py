"""The seed protocol's mechanism section: every seed's liveness checks (`analysis.liveness`), read
before any curve, as markdown lines and the records behind them (seeds.json)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from populora_nb.analysis.clustered import BLOCK_STEPS, share_cell
from populora_nb.analysis.liveness import CHECKS, Liveness, liveness
from populora_nb.analysis.seed_stats import md_table
from populora_nb.analysis.survival import Survival
from populora_nb.records import RunDir

COLUMNS = (
    "seed",
    "run",
    "repeats / valid tasks",
    "repeats, last 5 steps",
    "0 < ρ < 1, non-repeats",
    "0 < ρ < 1, all played",
    "teacher games won, non-repeats",
    "matches the teacher won most games of",
    "children at first eligible event",
    "checks failed",
)


def _row(name: str, run: str, live: Liveness, seed: int) -> list[str]:
    tag = f"{name}/{run}"
    last = live.repeat_items(5)
    cells = [
        name,
        run,
        share_cell(live.repeat_items(), seed=seed, name=f"{tag}/repeats", of="valid"),
        f"{sum(r for _, r in last) / len(last):.0%} ({sum(r for _, r in last)}/{len(last)})" if last else "n/a",
        share_cell(live.band_items(), seed=seed, name=f"{tag}/band_non_repeats"),
        share_cell(live.band_items(False), seed=seed, name=f"{tag}/band_all"),
    ]
    if live.survival is None:
        cells += ["—", "—", "—"]
    else:
        cells += [
            share_cell(live.game_items(), seed=seed, name=f"{tag}/teacher_games", of="games"),
            share_cell(live.majority_items(), seed=seed, name=f"{tag}/teacher_majority", of="matches"),
            live.survival.text(),
        ]
    return [*cells, ", ".join(live.failed()) or "none"]


def protocol_liveness(experiments: Sequence[str | Path], *, seed: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Per seed and run, the liveness checks with their counts and block-bootstrap intervals; the
    children pooled over seeds; the seeds whose population failed a check, named. Records:
    ``{"seeds": [per seed: its runs' `Liveness.record`], "pooled_children": ...}``."""
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    unrun: list[str] = []
    pooled: list[Survival] = []
    for exp in map(Path, experiments):
        record: dict[str, Any] = {"seed": exp.name}
        for run in ("baseline", "population"):
            d = exp / run
            if not RunDir(d).has("tasks"):
                record[run] = None
                continue
            live = liveness(d)
            record[run] = live.record(seed=seed, name=f"{exp.name}/{run}")
            rows.append(_row(exp.name, run, live, seed))
            if run == "population":
                pooled.append(live.survival or Survival(0, ()))
                if live.failed():
                    failed.append(f"{exp.name} ({', '.join(live.failed())})")
        if record.get("population") is None:
            unrun.append(exp.name)
        records.append(record)
    together = Survival(sum(s.born for s in pooled), tuple(j for s in pooled for j in s.judged))
    notes = []
    if failed:
        notes.append(
            f"Failed a check: {'; '.join(failed)}: read those seeds' population curves with that part not acting."
        )
    if unrun:
        notes.append(f"No population records in {', '.join(unrun)}.")
    verdict = " ".join(notes) or "Every seed's population passed every check it could be judged on."
    return [
        "## Is the mechanism live?",
        "",
        "Counted from each seed's records before any curve is read (`analysis.liveness`). A **repeat** is a valid "
        "task with the same normalised program and input (code_f: input set) as a task met before in the run (an "
        "earlier task, a seed, a warm-up example; references are drawn from those): its ρ measures memory, not "
        "difficulty, so the band share and the teacher's games count non-repeats. Teacher games are the games the "
        "rating rule scored (`matchmaking.teacher_games`: on 0 < ρ < win_threshold one win per failed rollout, "
        "else none), not membership of the band. Children are judged at their first evolution event outside grace, "
        "against the chance rate there (1 − replaced / eligible members of the role), with the one-sided p of so "
        "few survivors. Brackets: 95% intervals from a block bootstrap over "
        f"{BLOCK_STEPS}-step blocks (seeded; a step's tasks share a proposer and repeat each other, so they are "
        "not independent draws; `analysis.clustered`). The last 5 steps fall in one block: no interval.",
        "",
        "Checks and pass thresholds: " + "; ".join(f"**{k}**: {v}" for k, v in CHECKS.items()) + ".",
        "",
        *md_table([COLUMNS, *rows]),
        "",
        f"Children pooled over the {len(pooled)} seeds: {together.text()}.",
        "",
        verdict,
    ], {"seeds": records, "pooled_children": together.as_dict()}
