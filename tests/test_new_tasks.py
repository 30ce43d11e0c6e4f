"""The new-task pilot's measure: new valid tasks per step count only valid proposals that are neither a
copy nor a repeat, intervals resample whole steps, and the decision rule needs both the new tasks and
the valid rate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from populora_nb.analysis.liveness import share_interval
from populora_nb.config import load_config
from populora_nb.records import RunDir
from studies.new_tasks import better, mean_interval, mean_ratio, new_task_table, run_steps, step_share


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(path, agent, per_step, steps=6):
    """A run whose every step proposes ``per_step`` = [(valid, copy, rho), ...]: programs distinct, but
    an "earlier" copy writes the identity seed's program (renamed) with a fresh input."""
    rd = RunDir.create(path, load_config("tiny", {"run.agent": agent}))
    tasks, matches, metrics = [], [], []
    for s in range(steps):
        for i, (valid, copy, rho) in enumerate(per_step):
            n = s * 100 + i
            program = "def f(y):\n    return y" if copy == "earlier" else f"def f(x):\n    return x + {n}"
            tasks.append(
                {"step": s, "kind": "code_i", "valid": valid, "copy": copy if valid else None, "repeat": False}
                | {"program": program, "inputs": [str(n)], "outputs": [str(n + 1)]}
                | {"solve_rate": rho if valid else None}
            )
            matches.append({"step": s, "valid": valid, "rho": rho if valid else None, "rollouts": 4})
        metrics.append({"step": s, "member": "agent", "time/step_s": 10.0 + s})
    _write(rd.path / "tasks.jsonl", tasks)
    _write(rd.path / "metrics.jsonl", metrics)
    if agent == "population":
        _write(rd.path / "matches.jsonl", matches)
    return rd.path


def _experiment(root, per_step):
    for agent in ("baseline", "population"):
        _run(root / agent, agent, per_step)
    return root


def test_only_valid_tasks_neither_copied_nor_repeated_count_as_new(tmp_path):
    per_step = [(True, "new", 0.5), (True, "reference", 0.0), (True, "earlier", 0.25), (False, "new", None)]
    c = run_steps(_run(tmp_path / "population", "population", per_step))
    assert list(c.new_valid) == [1] * 6 and list(c.valid) == [3] * 6 and list(c.proposals) == [4] * 6
    assert list(c.new_in_band) == [1] * 6 and list(c.seconds) == [10, 11, 12, 13, 14, 15]
    # teacher games on played non-repeat tasks: rho 0.5 of 4 rollouts -> 2 won, 0.25 -> 3 won, 0.0 -> none
    assert list(c.games_won) == [5] * 6 and list(c.games) == [12] * 6
    assert run_steps(_run(tmp_path / "baseline", "baseline", per_step)).games is None


def test_intervals_resample_whole_steps():
    # 10 steps of 8 tasks, each step all-or-nothing: 80 tasks, but only 10 independent draws
    hits = np.array([8, 0, 8, 0, 8, 0, 8, 0, 0, 0], dtype=float)
    totals = np.full(10, 8.0)
    share, low, high = step_share(hits, totals, "x")
    wilson = share_interval(32, 80)
    assert share == pytest.approx(0.4) and (high - low) > 1.5 * (wilson[1] - wilson[0])
    mean, lo, hi = mean_interval(hits)
    assert mean == pytest.approx(3.2) and lo < 3.2 < hi and mean_interval(np.array([2.0, 2.0])) == (2.0, 2.0, 2.0)
    ratio, rlo, rhi = mean_ratio(hits * 2, hits, "r")
    assert ratio == pytest.approx(2.0) and rlo < 2.0 < rhi  # independent resamples of the two runs


def test_the_rule_needs_twice_the_new_tasks_at_half_the_valid_rate_in_both_runs(tmp_path):
    control = _experiment(tmp_path / "control", [(True, "new", 0.5), (True, "reference", 0.0)] * 2)
    # twice the new tasks (4 a step against 2), valid rate 4/8 = half the control's 4/4: meets
    doubled = _experiment(tmp_path / "doubled", [(True, "new", 0.5)] * 4 + [(False, "new", None)] * 4)
    # twice the new tasks but valid 4/9, below half: fails on the valid rate
    invalid = _experiment(tmp_path / "invalid", [(True, "new", 0.5)] * 4 + [(False, "new", None)] * 5)
    # same valid rate, 1.5x the new tasks: fails on the count
    more = _experiment(tmp_path / "more", [(True, "new", 0.5)] * 3 + [(True, "reference", 0.0)])
    c0 = run_steps(control / "population")
    assert better(run_steps(doubled / "population"), c0)
    assert not better(run_steps(invalid / "population"), c0) and not better(run_steps(more / "population"), c0)
    assert not better(c0, c0)
    lines, record = new_task_table({"control": control, "doubled": doubled, "invalid": invalid, "more": more})
    assert lines[2].startswith("| control | baseline |") and "| control |" in lines[2][20:]
    assert record["better"] == {
        "doubled": {"baseline": True, "population": True},
        "invalid": {"baseline": False, "population": False},
        "more": {"baseline": False, "population": False},
    }
    assert any(line.startswith("- **doubled**: meets the rule in both runs") for line in lines)
    # control: 2 new tasks a step; doubled: twice that
    assert "| 2.00 [2.00, 2.00] (12) |" in lines[2] and "| 2.00 [2.00, 2.00] |" in lines[4]


def test_a_run_not_made_reads_not_run_and_the_rule_is_not_applied(tmp_path):
    control = _experiment(tmp_path / "control", [(True, "new", 0.5), (True, "reference", 0.0)])
    half = tmp_path / "half"
    _run(half / "baseline", "baseline", [(True, "new", 0.5)] * 4)
    (half / "population").mkdir()  # started, never stepped: no task records
    lines, record = new_task_table({"control": control, "half": half})
    assert "|  | population | not run |" in "\n".join(lines)
    assert any("**half**: cannot be judged: the rule needs both runs, baseline made" in line for line in lines)
    assert record["better"]["half"] == {"baseline": True}
