"""The novelty-pressure settings of the laptop pilot (docs/results/cpu-pilot-novelty): copies earn
nothing positive, one task per program in the buffers, references drawn least-shown first."""

from __future__ import annotations

import random

import pytest

import populora_nb.stages as stages
from populora_nb.buffers import TaskBuffer, count_pool_draws, snippet_pool
from populora_nb.config import ConfigError, load_config
from populora_nb.loop import run
from populora_nb.records import read_json
from populora_nb.rewards import azr_proposer_reward, novelty_capped, teacher_reward
from populora_nb.stages import Proposed
from populora_nb.state import RunState
from populora_nb.tasks import Task
from populora_nb.verify import Invalid, Proposal
from tests.scripted import ScriptedPolicy


def _task(body: str, arg: str = "2", out: str = "4", kind: str = "code_o") -> Task:
    return Task(kind, f"def f(a):\n    return {body}", (arg,), (out,))  # type: ignore[arg-type]


def _proposed(copy: str | None, rho: float | None, valid: bool = True, who: str = "T0") -> Proposed:
    task = _task("a * 2")
    result = task if valid else Invalid("error", "it raised")
    parsed = Proposal("code_o", task.program, task.inputs)
    return Proposed(who, "code_o", "p", "c", parsed, result, "S0", rho, copy=copy)


# ---- the reward ------------------------------------------------------------------------------------
@pytest.mark.parametrize("reward", [teacher_reward, azr_proposer_reward])
def test_a_copied_program_keeps_losses_and_loses_gains(reward) -> None:
    for rho in (0.0, 0.25, 0.5, 0.75, 1.0):
        r = reward(True, rho)
        assert novelty_capped(r, new_program=True) == r
        assert novelty_capped(r, new_program=False) == min(r, 0.0)
    assert novelty_capped(reward(False, None), new_program=False) == -1.0
    # in the band a copy is what changes: 1 - rho > 0 becomes 0
    assert novelty_capped(reward(True, 0.25), new_program=False) == 0.0


@pytest.mark.parametrize("reward", [teacher_reward, azr_proposer_reward])
def test_rewards_pay_copies_nothing_only_with_the_setting_on(reward) -> None:
    proposals = [
        _proposed("new", 0.25),
        _proposed("earlier", 0.25),
        _proposed("reference", 0.5),
        _proposed("earlier", 0.0),
        _proposed(None, None, valid=False),
    ]
    off = [s.reward for s in stages.reward(proposals, [], reward)]
    on = [s.reward for s in stages.reward(proposals, [], reward, copies_earn_nothing=True)]
    expected_off = [reward(True, 0.25), reward(True, 0.25), reward(True, 0.5), reward(True, 0.0), -1.0]
    assert off == expected_off
    assert on == [reward(True, 0.25), 0.0, 0.0, min(reward(True, 0.0), 0.0), -1.0]
    # the advantages follow: with copies paid nothing, the new program stands out from its group
    adv_on = {s.reward: s.advantage for s in stages.reward(proposals, [], reward, copies_earn_nothing=True)}
    assert adv_on[reward(True, 0.25)] > adv_on[0.0]


def test_a_valid_proposal_without_its_class_is_refused_under_the_setting() -> None:
    with pytest.raises(ValueError, match="program class"):
        stages.reward([_proposed(None, 0.5)], [], teacher_reward, copies_earn_nothing=True)


# ---- one task per program ------------------------------------------------------------------------------
def _valid(task: Task) -> Proposed:
    return Proposed("T0", task.kind, "p", "c", Proposal(task.kind, task.program, task.inputs), task)


def test_a_buffer_keeps_one_task_per_program_with_the_setting_on() -> None:
    renamed = Task("code_o", "def f(b):\n    return b * 2", ("5",), ("10",))  # a * 2 renamed, another input
    proposals = [_valid(_task("a * 2")), _valid(renamed), _valid(_task("a * 3", out="6")), _valid(_task("a * 2"))]
    on = {"code_o": TaskBuffer("code_o")}
    on["code_o"].add(_task("a + 1", out="3"), seed=True)
    stages.grow(on, [_valid(_task("a + 1", arg="7", out="8"))] + proposals, one_task_per_program=True)
    assert [t.program for t in on["code_o"].tasks] == [
        "def f(a):\n    return a + 1",  # the seed; its re-posed program was not stored again
        "def f(a):\n    return a * 2",
        "def f(a):\n    return a * 3",
    ]
    off = {"code_o": TaskBuffer("code_o")}
    stages.grow(off, proposals)
    assert len(off["code_o"]) == 4  # AZR: every valid task is stored


# ---- least-shown references ------------------------------------------------------------------------------
def test_references_come_least_shown_first() -> None:
    buffer = TaskBuffer("code_o")
    for i in range(6):
        buffer.add(_task(f"a + {i}", out=str(2 + i)))
    rng = random.Random(0)
    first = buffer.sample(2, rng, "least_shown")
    second = buffer.sample(2, rng, "least_shown")
    third = buffer.sample(2, rng, "least_shown")
    drawn = [t.program for t in first + second + third]
    assert sorted(drawn) == sorted(t.program for t in buffer.tasks)  # each shown once before any twice
    assert set(buffer.times_shown.values()) == {1}
    buffer.add(_task("a - 9", out="-7"))  # a newcomer, never shown, comes next
    assert buffer.sample(1, rng, "least_shown")[0].program == "def f(a):\n    return a - 9"
    # the counts travel with a checkpoint
    assert TaskBuffer.from_json(buffer.to_json()).times_shown == buffer.times_shown


def test_uniform_draws_can_repeat_before_all_are_shown() -> None:
    """The contrast that makes the least-shown test mean something: uniform draws revisit entries early."""
    buffer = TaskBuffer("code_o")
    for i in range(6):
        buffer.add(_task(f"a + {i}", out=str(2 + i)))
    rng = random.Random(0)
    repeats = 0
    for _ in range(20):
        counts = TaskBuffer.from_json(buffer.to_json())
        counts.times_shown = {}
        for _ in range(3):
            counts.sample(2, rng, "uniform")
        repeats += max(counts.times_shown.values()) > 1
    assert repeats > 0


def test_code_f_pool_draws_are_remembered_by_the_buffers() -> None:
    buffers = {"code_o": TaskBuffer("code_o"), "code_i": TaskBuffer("code_i")}
    for i in range(3):
        buffers["code_o"].add(_task(f"a + {i}", out=str(2 + i)))
    rng = random.Random(1)
    seen = []
    for _ in range(3):  # one draw a step, the pool rebuilt each step as `stages.propose` does
        ref = snippet_pool(buffers).sample(1, rng, "least_shown")  # type: ignore[union-attr]
        count_pool_draws(buffers, [ref[0].program])
        seen.append(ref[0].program)
    assert len(set(seen)) == 3


def test_the_config_names_an_unknown_sampling_rule() -> None:
    with pytest.raises(ConfigError, match="reference_sampling"):
        load_config("tiny", {"tasks.reference_sampling": "newest"})
    config = load_config("tiny", {"tasks.copies_earn_nothing": True, "tasks.one_task_per_program": True})
    assert config.tasks.copies_earn_nothing and config.tasks.one_task_per_program


# ---- in a run ----------------------------------------------------------------------------------------------
class HalfRight(ScriptedPolicy):
    """The scripted policy, with every other code_o answer wrong: tasks land at rho = 1/2, in the band,
    where a copy would earn 1 - rho > 0 without the setting."""

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        out = super().generate(member_ids, prompts, max_new_tokens, seed)
        return [
            "```output\n-1\n```" if "What does f return" in p and i % 2 else o
            for i, (p, o) in enumerate(zip(prompts, out))
        ]


def _positive_proposer_rewards(policy: ScriptedPolicy) -> int:
    return sum(s.reward > 0 for _, samples in policy.updates for s in samples if s.group[1] == "propose")


def test_a_run_pays_copied_programs_nothing_and_stores_each_program_once(tmp_path, tokenizer) -> None:
    # The scripted teachers write one program (x * 3) with fresh inputs: one new program, then copies.
    settings = {"run.steps": 2, "evolution.enabled": False, "tasks.kinds": ["code_o"], "rl.rollouts": 2}
    plain = HalfRight(tokenizer)
    run(load_config("tiny", settings), tmp_path / "plain", policy=plain, progress=False)
    assert _positive_proposer_rewards(plain) > 1  # copies in the band earn 1 - rho
    pressed = HalfRight(tokenizer)
    on = {**settings, "tasks.copies_earn_nothing": True, "tasks.one_task_per_program": True}
    rd = run(load_config("tiny", on), tmp_path / "pressed", policy=pressed, progress=False)
    rows = [r for r in rd.read("tasks") if r["valid"]]
    assert [r["copy"] for r in rows].count("new") == 1 and len(rows) > 1
    assert _positive_proposer_rewards(pressed) <= 1  # only the new program can earn
    _, checkpoint = rd.latest_checkpoint()  # type: ignore[misc]
    buffer = RunState.from_json(read_json(checkpoint / "state.json")).buffers["code_o"]
    assert sum("x * 3" in t.program for t in buffer.tasks) == 1
