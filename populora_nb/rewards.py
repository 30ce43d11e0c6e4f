"""Rewards: what a student, a PopuLoRA teacher and an AZR proposer earn (PopuLoRA §3, AZR §3.3).

All three are pure functions of verifier outcomes; nothing here sees a model.

Sources
-------
* Student / solver (AZR, arXiv 2505.03335, eq. 6 as implemented in AZR's reward manager: a
  well-formatted response scores its accuracy reward if positive, else −0.5; a format error −1):
  +1 correct, −0.5 wrong but well formed, −1 malformed (the answer could not be parsed).
* AZR proposer (same reward manager applied to the learnability reward r = 1 − s̄, which AZR sets
  to 0 when s̄ ∈ {0, 1}; 0 is not > 0, so those tasks fall through to −0.5):
  1 − s for 0 < s < 1, −0.5 for s ∈ {0, 1}, −1 for an invalid task, s the solve rate over n samples.
* PopuLoRA teacher (PopuLoRA blog / docs/design.md): −1 invalid, 0 when ρ = 0, else 1 − ρ.
  Unlike AZR, a task nobody solves earns 0 rather than −0.5, and a task everyone solves earns 0
  (1 − 1) without a separate case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Literal

AnswerStatus = Literal["correct", "wrong", "malformed"]
"""Outcome of one student answer: verifier passed / parsed but failed / could not be parsed."""

STUDENT_REWARDS: Mapping[AnswerStatus, float] = MappingProxyType({"correct": 1.0, "wrong": -0.5, "malformed": -1.0})
"""Student reward table (AZR eq. 6). Read-only so no caller can retune it globally."""

INVALID_TASK_REWARD = -1.0
"""Reward for a proposal the verifier rejected (parse failure, banned import, non-deterministic,
error, timeout). Same value in AZR and PopuLoRA."""

AZR_DEGENERATE_TASK_REWARD = -0.5
"""AZR proposer reward when every or no sample solved the task (no learning signal)."""


def _checked_rho(rho: float | None) -> float:
    """A valid task's solve rate, which must be given and lie in [0, 1]."""
    if rho is None:
        raise ValueError("a valid task needs its solve rate rho; pass valid=False for invalid tasks")
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1] (a fraction of solved samples), got {rho!r}")
    return rho


def student_reward(status: AnswerStatus) -> float:
    """+1 correct, −0.5 wrong but well formed, −1 malformed (AZR eq. 6)."""
    try:
        return STUDENT_REWARDS[status]
    except KeyError:
        raise ValueError(f"status must be one of {tuple(STUDENT_REWARDS)}, got {status!r}") from None


def solve_rate(statuses: Sequence[AnswerStatus]) -> float:
    """ρ: the fraction of a task's rollouts that are correct (malformed counts as unsolved)."""
    if not statuses:
        raise ValueError("solve_rate needs at least one rollout status")
    for s in statuses:
        if s not in STUDENT_REWARDS:
            raise ValueError(f"status must be one of {tuple(STUDENT_REWARDS)}, got {s!r}")
    return sum(s == "correct" for s in statuses) / len(statuses)


def teacher_reward(valid: bool, rho: float | None) -> float:
    """PopuLoRA teacher reward: −1 invalid, 0 when ρ = 0, else 1 − ρ.

    ``rho`` is the matched student's solve rate on the task; it must be given for a valid task
    and is ignored for an invalid one (the student never saw it).
    """
    if not valid:
        return INVALID_TASK_REWARD
    rho = _checked_rho(rho)
    # ρ = 0 is an unsolvable-looking task: no reward for stumping the student completely.
    return 0.0 if rho == 0.0 else 1.0 - rho


def azr_proposer_reward(valid: bool, rho: float | None) -> float:
    """AZR proposer reward: 1 − s for 0 < s < 1, −0.5 for s ∈ {0, 1}, −1 invalid.

    ``rho`` is AZR's s̄, the solver's mean accuracy over its n samples (AZR: n = 8); named like
    the teacher's argument so both rewards take the same inputs. Exact comparison with 0 and 1 is
    safe because it is a count divided by n.
    """
    if not valid:
        return INVALID_TASK_REWARD
    rho = _checked_rho(rho)
    return AZR_DEGENERATE_TASK_REWARD if rho in (0.0, 1.0) else 1.0 - rho


def novelty_capped(reward: float, new_program: bool) -> float:
    """A proposer's reward under ``tasks.copies_earn_nothing``: unchanged for a new program, else min(r, 0).

    A copy (a shown reference's program or an earlier one, `copies`) keeps what it loses and gives up
    what it would gain (1 − ρ in the band), so only a new program can earn while the two arms' rewards
    stay comparable. Not in AZR or the paper: docs/methodology.md, "Novelty pressure", says why and how
    it relates to OpenSIR's and R-Zero's novelty terms.
    """
    return reward if new_program else min(reward, 0.0)
