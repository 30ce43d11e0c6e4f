"""The seed protocol's mechanism section: every seed's liveness checks (`analysis.liveness`), read
before any curve, as markdown lines and the records behind them (seeds.json)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from populora_nb.analysis.clustered import BLOCK_STEPS
from populora_nb.analysis.liveness import CHECKS, LAST_WINDOW, MIN_BLOCKS, Liveness, liveness
from populora_nb.analysis.runs import RUNS
from populora_nb.analysis.seed_stats import md_table
from populora_nb.analysis.survival import Survival
from populora_nb.records import RunDir

COLUMNS = (
    "seed",
    "run",
    "valid tasks",
    "distinct programs",
    "new programs / valid (per step)",
    "new programs, last window (per step)",
    "repeats / valid",
    "0 < ρ < 1, non-repeats",
    "0 < ρ < 1, new programs",
    "teacher games won, non-repeats",
    "matches the teacher won most games of",
    "children at first eligible event",
    "checks not passed",
)


def _cell(live: Liveness, check: str, of: str) -> str:
    return live.judged[check].text(of)


def _row(name: str, run: str, live: Liveness) -> list[str]:
    n_repeats = sum(v.repeat for v in live.valid)
    cells = [
        name,
        run,
        str(len(live.valid)),
        str(live.distinct_programs),
        f"{_cell(live, 'new programs', 'valid')} ({live.new_programs_per_step():.2f})",
        f"{_cell(live, 'new programs, last window', 'valid')} ({live.new_programs_per_step(True):.2f})",
        f"{n_repeats}/{len(live.valid)}",
        _cell(live, "band", "played"),
        _fraction(live.band_items("new programs")),
    ]
    if live.survival is None:
        cells += ["—", "—", "—"]
    else:
        cells += [
            _cell(live, "teacher games", "games"),
            _cell(live, "teacher majority", "matches"),
            live.survival.text(),
        ]
    rest = live.not_passed()
    return [*cells, "; ".join(f"{s}: {', '.join(c)}" for s, c in rest.items()) or "none"]


def _fraction(items: Sequence[tuple[int, bool]]) -> str:
    hits, total = sum(h for _, h in items), len(items)
    return f"{hits / total:.0%} ({hits}/{total})" if total else "n/a (0 played)"


def protocol_liveness(experiments: Sequence[str | Path], *, seed: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Per seed and run, the liveness checks with their counts, intervals and states; the children
    pooled over seeds; each seed whose population did not pass every check, named with the states.
    Records: ``{"seeds": [per seed: its runs' `Liveness.record`], "pooled_children": ...}``."""
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    not_passed: list[str] = []
    unrun: list[str] = []
    pooled: list[Survival] = []
    for exp in map(Path, experiments):
        record: dict[str, Any] = {"seed": exp.name}
        for run in RUNS:
            d = exp / run
            if not RunDir(d).has("tasks"):
                record[run] = None
                continue
            live = liveness(d, seed=seed, name=f"{exp.name}/{run}")
            record[run] = live.record()
            rows.append(_row(exp.name, run, live))
            if run == "population":
                pooled.append(live.survival or Survival(0, ()))
                if live.not_passed():
                    not_passed.append(f"{exp.name} ({live.verdict()})")
        if record.get("population") is None:
            unrun.append(exp.name)
        records.append(record)
    together = Survival(sum(s.born for s in pooled), tuple(j for s in pooled for j in s.judged))
    notes = []
    if not_passed:
        notes.append(
            f"Not every check passed: {'; '.join(not_passed)} Read those seeds' population curves with those parts "
            "not shown to act."
        )
    if unrun:
        notes.append(f"No population records in {', '.join(unrun)}.")
    verdict = " ".join(notes) or "Every seed's population passed every check."
    return [
        "## Is the mechanism live?",
        "",
        "Counted from each seed's records before any curve is read (`analysis.liveness`). A **new program** is a "
        "valid task whose program (names, formatting and comments normalised) is not a shown reference's, a seed's, "
        "a warm-up example's or an earlier task's of the run; a **repeat** is the same task as its student meets it "
        "(code_o: program and input; code_i: program and output; code_f: program and shown pairs) met before: its "
        "student may have met it, so the band share and the teacher's games count non-repeats, and are shown over "
        "new programs beside them. Teacher games are the games the rating rule scored "
        "(`matchmaking.teacher_games`: on 0 < ρ < win_threshold one win per failed rollout, else none), not "
        "membership of the band. Children are judged at their first evolution event outside grace, against the "
        "equal-skill chance rate there (inheriting a tournament winner's rating does not favour survival: "
        "`analysis.survival`), with the one-sided p of so few survivors. Brackets: 95% intervals from a block "
        f"bootstrap over {BLOCK_STEPS}-step blocks (fewer steps per block where a span holds fewer than "
        f"{MIN_BLOCKS}: the last window, the last {LAST_WINDOW:.0%} of steps), widened to at least the Wilson "
        "interval of the count; a check **passes** when its interval lies at or above the threshold, **fails** "
        "below it, is **inconclusive** when it straddles it and **too few to judge** with fewer than "
        f"{MIN_BLOCKS} blocks.",
        "",
        "Checks and thresholds: " + "; ".join(f"**{k}**: {v}" for k, v in CHECKS.items()) + ".",
        "",
        *md_table([COLUMNS, *rows]),
        "",
        f"Children pooled over the {len(pooled)} seeds: {together.text()}.",
        "",
        verdict,
    ], {"seeds": records, "pooled_children": together.as_dict()}
