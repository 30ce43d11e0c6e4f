"""The novelty pilot's table: new programs per step pooled over seeds, a valid rate counted before any
novelty rule, and a rule that a change of volume, a collapse or noise cannot pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populora_nb.config import load_config
from populora_nb.errors import UserInputError
from populora_nb.records import RunDir
from studies.novelty_pilot import (
    RATIO_FLOOR,
    keep_records,
    novelty_table,
    pilot_arms,
    pooled_steps,
    write_novelty_table,
)

NEW, COPY, BAD = (True, "new"), (True, "earlier"), (False, None)


def _run(path: Path, agent: str, steps: list[list[tuple[bool, str | None]]]) -> None:
    """A run whose step s proposes ``steps[s]`` = [(valid, class), ...]; new programs are distinct,
    copies re-pose one program with fresh inputs, rejected copies are invalid with their class kept."""
    rd = RunDir.create(path, load_config("tiny", {"run.agent": agent}))
    tasks, metrics = [], []
    for s, proposals in enumerate(steps):
        for i, (valid, cls) in enumerate(proposals):
            n = 100 * s + i
            program = "def f(y):\n    return y" if cls == "earlier" else f"def f(x):\n    return x + {n}"
            tasks.append(
                {"step": s, "kind": "code_i", "valid": valid, "copy": cls, "repeat": False, "program": program}
                | {"inputs": [str(n)], "outputs": [str(n + 1)], "solve_rate": 0.5 if valid else None}
            )
        metrics.append({"step": s, "member": "agent", "time/step_s": 30.0})
    (rd.path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (rd.path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))


def _arm(root: Path, name: str, population: list, baseline: list | None = None, seeds: int = 2) -> list[Path]:
    dirs = []
    for seed in range(seeds):
        exp = root / f"seed{seed}" / name
        _run(exp / "population", "population", population)
        _run(exp / "baseline", "baseline", baseline or [[NEW, COPY, COPY]] * len(population))
        dirs.append(exp)
    return dirs


CONTROL = [[NEW] + [COPY] * 9] * 10  # one new program a step among ten valid proposals


def _verdicts(tmp_path: Path, **arms: list) -> dict[str, str]:
    table = {"control": _arm(tmp_path, "control", CONTROL)}
    table |= {name: _arm(tmp_path, name, steps) for name, steps in arms.items()}
    return novelty_table(table)[1]["verdicts"]


def test_three_times_the_new_programs_at_the_same_valid_rate_wins(tmp_path) -> None:
    assert _verdicts(tmp_path, writes=[[NEW] * 3 + [COPY] * 7] * 10)["writes"] == "**wins**"


def test_more_volume_with_the_same_diversity_does_not_win(tmp_path) -> None:
    # twice the proposals, all the extra ones copies: as many new programs a step as the control
    said = _verdicts(tmp_path, louder=[[NEW] + [COPY] * 19] * 10)["louder"]
    assert said.startswith("does not win") and "1.00×" in said


def test_a_collapse_does_not_win(tmp_path) -> None:
    assert "0.00×" in _verdicts(tmp_path, collapsed=[[COPY] * 10] * 10)["collapsed"]


def test_new_programs_bought_with_invalid_proposals_do_not_win(tmp_path) -> None:
    said = _verdicts(tmp_path, sloppy=[[NEW] * 3 + [BAD] * 17] * 10)["sloppy"]
    assert "valid rate 15%" in said


def test_a_doubling_inside_the_noise_does_not_win(tmp_path) -> None:
    # 2x on average, but half the steps write nothing new: the ratio's interval reaches below the floor
    noisy = [[NEW] * 4 + [COPY] * 6 if s % 2 else [COPY] * 10 for s in range(10)]
    said = _verdicts(tmp_path, noisy=noisy)["noisy"]
    assert "2.00×" not in said and f"not above {RATIO_FLOOR:g}" in said


def test_rejected_copies_count_as_valid_before_the_rule(tmp_path) -> None:
    rejected = [[NEW] + [(False, "reference")] * 9] * 10  # a reject_copies arm: its copies made invalid
    pooled = pooled_steps([d / "population" for d in _arm(tmp_path, "reject", rejected)])
    assert pooled is not None and pooled.valid.sum() == pooled.proposals.sum() == 200
    assert len(pooled.steps) == 20  # two seeds of ten steps: twenty clusters


def test_the_table_regenerates_from_kept_arms_and_names_a_missing_control(tmp_path) -> None:
    _arm(tmp_path, "writes", [[NEW] * 3 + [COPY] * 7] * 10)
    with pytest.raises(UserInputError, match="'control' arm"):
        pilot_arms(tmp_path)
    _arm(tmp_path, "control", CONTROL)
    assert list(pilot_arms(tmp_path)) == ["control", "writes"]
    md = write_novelty_table(tmp_path).read_text()
    assert "| control | baseline | 2 × 10 |" in md and "**writes** **wins**" in md
    assert json.loads((tmp_path / "novelty.json").read_text())["verdicts"]["writes"] == "**wins**"
    with pytest.raises(UserInputError, match="no seed"):
        pilot_arms(tmp_path / "seed0")


def test_kept_records_read_as_the_run_did(tmp_path) -> None:
    exp = _arm(tmp_path / "runs", "control", CONTROL, seeds=1)[0]
    with pytest.raises(UserInputError, match="stages.json"):
        keep_records(exp, tmp_path / "kept")
    (exp / "stages.json").write_text("{}")
    kept = keep_records(exp, tmp_path / "docs" / "seed0" / "control")
    assert (kept / "population" / "tasks.jsonl.gz").is_file() and not (kept / "population" / "tasks.jsonl").exists()
    for run in ("baseline", "population"):
        assert RunDir(kept / run).read("tasks") == RunDir(exp / run).read("tasks")
    assert pooled_steps([kept / "population"]).new_valid.tolist() == [1.0] * 10  # type: ignore[union-attr]


def test_the_committed_pilot_table_is_what_its_kept_records_give() -> None:
    """docs/results/cpu-pilot-novelty: the table the page quotes regenerates from the records kept beside
    it, with the control first and every arm's verdict (none won at 2 seeds × 10 steps)."""
    root = Path(__file__).parents[1] / "docs" / "results" / "cpu-pilot-novelty"
    lines, record = novelty_table(pilot_arms(root))
    assert (root / "novelty.md").read_text() == "\n".join(lines) + "\n"
    assert list(record["verdicts"]) == ["K1", "copies-earn-nothing", "one-per-program", "tokens128"]
    assert all(said.startswith("does not win") for said in record["verdicts"].values())
