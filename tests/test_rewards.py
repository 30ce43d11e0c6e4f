"""The reward tables equal the formulas of AZR and PopuLoRA (see populora_nb/rewards.py)."""

import pytest

from populora_nb.rewards import (
    azr_proposer_reward,
    solve_rate,
    student_reward,
    teacher_reward,
)


@pytest.mark.parametrize(("status", "expected"), [("correct", 1.0), ("wrong", -0.5), ("malformed", -1.0)])
def test_student_reward_table(status, expected):
    assert student_reward(status) == expected


def test_student_reward_rejects_unknown_status():
    with pytest.raises(ValueError, match="status must be one of"):
        student_reward("right")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("valid", "rho", "expected"),
    [
        (False, None, -1.0),
        (False, 0.5, -1.0),  # rho of an invalid task is ignored
        (True, 0.0, 0.0),
        (True, 0.125, 0.875),
        (True, 0.5, 0.5),
        (True, 0.875, 0.125),
        (True, 1.0, 0.0),
    ],
)
def test_teacher_reward_table(valid, rho, expected):
    assert teacher_reward(valid, rho) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("valid", "rho", "expected"),
    [
        (False, None, -1.0),
        (True, 0.0, -0.5),
        (True, 1.0, -0.5),
        (True, 1 / 8, 7 / 8),
        (True, 4 / 8, 0.5),
        (True, 7 / 8, 1 / 8),
    ],
)
def test_azr_proposer_reward_table(valid, rho, expected):
    assert azr_proposer_reward(valid, rho) == pytest.approx(expected, abs=1e-12)


def test_teacher_and_azr_differ_exactly_on_degenerate_tasks():
    # The only places the two proposer rewards disagree: tasks no one / everyone solves.
    for k in range(9):
        rho = k / 8
        same = teacher_reward(True, rho) == azr_proposer_reward(True, rho)
        assert same == (0 < k < 8), k


@pytest.mark.parametrize("fn", [teacher_reward, azr_proposer_reward])
def test_valid_task_needs_a_rate_in_unit_interval(fn):
    with pytest.raises(ValueError, match="needs its solve rate"):
        fn(True, None)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fn(True, 1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fn(True, -0.1)


def test_solve_rate_counts_only_correct():
    assert solve_rate(["correct", "wrong", "malformed", "correct"]) == 0.5
    assert solve_rate(["malformed"] * 3) == 0.0
    with pytest.raises(ValueError):
        solve_rate([])
