"""The mechanism checks read before any curve, each built so that it can fail: repeats counted apart,
teacher wins from the games the rating rule scored, children judged at their first eligible event."""

import json

import pytest

from populora_nb.analysis.liveness import liveness, played_tasks
from populora_nb.analysis.liveness_report import protocol_liveness
from populora_nb.analysis.survival import judge_children, poisson_binomial_cdf
from populora_nb.config import load_config, save_config
from tests.scripted import ScriptedLoRA

CONFIG = {"population.n_teachers": 4, "population.n_students": 4, "evolution.every": 10, "rl.rollouts": 4}


def _program(n):
    return f"def f(x):\n    return x + {n}"


def _run(path, tasks, lineage=None, threshold=1.0):
    """A run directory: config, tasks.jsonl and (for a population: ``lineage`` given) one match per task."""
    path.mkdir(parents=True)
    save_config(load_config("tiny", {**CONFIG, "matchmaking.win_threshold": threshold}), path / "config.yaml")
    rows = [{"kind": "code_o", "proposer": "T0", "solver": "S0", "outputs": ["0"], **t} for t in tasks]
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if lineage is not None:
        matches = [
            {"step": t["step"], "teacher": "T0", "student": "S0", "kind": "code_o", "valid": t["valid"]}
            | {"rho": t["solve_rate"], "rollouts": 4}
            for t in rows
        ]
        (path / "matches.jsonl").write_text("".join(json.dumps(m) + "\n" for m in matches))
        (path / "lineage.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lineage))
    return path


def _task(rho, program=0, inputs=("1",), step=0, valid=True):
    return {"step": step, "program": _program(program), "inputs": list(inputs), "valid": valid, "solve_rate": rho}


def _birth(child, replaced, at, role="teacher"):
    return {"child": child, "replaced": replaced, "birth_step": at, "role": role, "parents": ["T0"]}


def test_repeated_tasks_are_shown_as_repeats_and_left_out_of_the_band_share(tmp_path):
    """A synthetic run whose later tasks repeat the first one exactly (reformatting aside): they are
    repeats, and the band share over non-repeats reads only what the run newly posed."""
    tasks = [_task(0.5, program=1, step=0)]
    tasks += [{**_task(0.5, program=1, step=s), "program": _program(1) + "  # again"} for s in (1, 2, 3)]
    tasks += [_task(0.0, program=1, inputs=("7",), step=4), _task(None, program=9, step=4, valid=False)]
    live = liveness(_run(tmp_path / "r", tasks))
    assert [r for _, r in live.valid] == [False, True, True, True, False]
    assert live.shares()["band"] == 0.5  # 1 of the 2 non-repeats; counting repeats it would read 4/5
    assert sum(h for _, h in live.band_items(False)) == 4 and len(live.band_items(False)) == 5
    assert live.checks() == {"new tasks": "pass", "band": "pass"}
    only_repeats = liveness(_run(tmp_path / "q", [_task(0.0, program=1)] + [_task(0.5, program=1)] * 12))
    assert only_repeats.checks()["new tasks"] == "fail" and only_repeats.checks()["band"] == "fail"


def test_matches_at_rho_three_quarters_raise_the_band_share_but_not_teacher_wins(tmp_path):
    base = [_task(0.25, program=1), _task(0.0, program=2)]
    easy = [_task(0.75, program=10 + i) for i in range(6)]
    before = liveness(_run(tmp_path / "before", base, lineage=[]))
    after = liveness(_run(tmp_path / "after", base + easy, lineage=[]))
    assert after.shares()["band"] > before.shares()["band"]
    assert after.contested > before.contested  # the earlier rule: every 0 < rho < 1 counted as a teacher win
    majority = [sum(h for _, h in x.majority_items()) for x in (before, after)]
    assert majority == [1, 1]  # the teacher won most games only at rho = 1/4
    assert after.shares()["teacher majority"] < before.shares()["teacher majority"]
    won = [p.teacher_won for p in after.played]
    assert won[:2] == [3, 0] and set(won[2:]) == {1}  # at rho = 3/4 the teacher won 1 game of 4
    assert after.shares()["teacher games"] < before.shares()["teacher games"]
    assert after.checks()["teacher majority"] == "pass"
    lost = liveness(_run(tmp_path / "lost", [_task(0.75, program=i) for i in range(8)], lineage=[]))
    assert lost.shares()["band"] == 1.0 and lost.checks()["teacher majority"] == "fail"


def _culled_chain(events, cull, n_founders=4):
    """Each event replaces, per role, the child born 20 steps earlier when ``cull`` (else a founder) and
    adds a child: with grace 20 every child is first eligible 20 steps after its birth."""
    founders = {role: [f"{role[0].upper()}{i}" for i in range(n_founders)] for role in ("teacher", "student")}
    rows = []
    for e in events:
        for role in founders:
            old = f"{role}-s{e - 20}-0"
            gone = old if cull and e - 20 in events else founders[role].pop(0) if founders[role] else old
            rows.append(_birth(f"{role}-s{e}-0", gone, e, role))
    return rows


def test_children_culled_at_their_first_eligible_event_fail_the_check():
    culled = judge_children(_culled_chain([10, 20, 30, 40, 50, 60], cull=True), {"teacher": 4, "student": 4}, 20)
    assert culled.n == 8 and culled.survived == 0 and culled.verdict == "fail"
    assert {(j.event - j.born, j.eligible, j.replaced) for j in culled.judged} == {(20, 3, 1)}  # chance 2/3
    kept = judge_children(_culled_chain([10, 20, 30, 40, 50, 60], False, 8), {"teacher": 8, "student": 8}, 20)
    assert kept.n == 8 and kept.survived == 8 and kept.verdict == "pass"
    # An event inside grace is not a survival: children born at 10 meet only the event at 20.
    young = judge_children(_culled_chain([10, 20], cull=False), {"teacher": 4, "student": 4}, 20)
    assert young.n == 0 and young.verdict == "too few to judge"
    few = judge_children(_culled_chain([10, 20, 30], cull=True), {"teacher": 4, "student": 4}, 20)
    assert (few.n, few.survived, few.verdict) == (2, 0, "too few to judge")


def test_the_poisson_binomial_tail_is_the_binomial_for_equal_chances():
    from scipy.stats import binom

    assert poisson_binomial_cdf([2 / 3] * 6, 4) == pytest.approx(binom.cdf(4, 6, 2 / 3))
    assert poisson_binomial_cdf([0.5, 0.9], 0) == pytest.approx(0.05)


class HalfSolvingLoRA(ScriptedLoRA):
    """Scripted completions (half the proposals valid) whose students solve every other rollout of a
    code_o task (rho = 1/2: contested), on a real tiny LoRA population so evolution can act."""

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        out = super().generate(["agent"] * len(prompts), prompts, max_new_tokens, seed)  # children's ids too
        for i, p in enumerate(prompts):
            if "What does f return" in p:
                x = p.split("```input\n")[-1].split("\n")[0]
                out[i] = f"```output\n{3 * int(x) if x.isdigit() and i % 2 == 0 else -1}\n```"
        return out


def test_a_tiny_population_run_is_read_for_every_check(tmp_path, tiny_base):
    """The tiny preset's settings, scripted play: teachers win games on contested tasks; the scripted
    teachers pose one program with a few inputs, so most tasks repeat and the check says so."""
    from populora_nb.loop import run
    from populora_nb.model.policy import LoRAPolicy
    from populora_nb.state import roster_for

    cfg = load_config("tiny", {"run.steps": 6, "tasks.kinds": ["code_o", "code_i"], "run.checkpoint_every": 0})
    policy = HalfSolvingLoRA(LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base))
    rd = run(cfg, tmp_path / "run", policy=policy, progress=False)
    live = liveness(rd.path)
    assert live.contested > 0 and sum(p.teacher_won for p in live.played) > 0, live
    assert sum(r for _, r in live.valid) > 0 and live.survival is not None and live.survival.born >= 2
    assert set(live.checks()) == {"new tasks", "band", "teacher games", "teacher majority", "children"}


def test_the_protocol_section_states_each_seeds_checks_and_names_a_failing_seed(tmp_path):
    def seed(name, pop_tasks, lineage):
        exp = tmp_path / name
        _run(exp / "population", pop_tasks, lineage)
        _run(exp / "baseline", [_task(0.5, 1), _task(0.0, 2), _task(1.0, 3), _task(None, 4, valid=False)])
        return exp

    chain = _culled_chain([10, 20, 30, 40, 50, 60], cull=True)
    live = seed("seed0", [_task(0.25, i, step=i) for i in range(4)], _culled_chain([10, 20, 30], cull=False))
    dead = seed("seed1", [_task(0.75, i, step=i) for i in range(4)], chain)
    lines, records = protocol_liveness([live, dead])
    text = "\n".join(lines)
    assert "| seed0 | baseline | 0% (0/3)" in text and "| seed0 | population |" in text
    assert "2 of 2 (equal-skill chance 1.3; p = 1; 6 born): too few to judge | none |" in text
    assert "0 of 8 (equal-skill chance 5.3; p = 0.00015; 12 born): fail | teacher majority, children |" in text
    assert "Failed a check: seed1 (teacher majority, children)" in text
    assert records["seeds"][1]["population"]["children"]["survived"] == 0
    assert records["pooled_children"]["n"] == 10
    (tmp_path / "seed3" / "baseline").mkdir(parents=True)  # a protocol still in its baseline
    assert protocol_liveness([tmp_path / "seed3"])[0][-1] == "No population records in seed3."


def test_a_played_task_is_valid_with_a_measured_rho_and_nothing_else_counts():
    tasks = [
        {"valid": True, "solve_rate": 0.0},  # fresh, the solver never solved it: played
        {"valid": True, "solve_rate": 0.5},
        {"valid": True, "solve_rate": None},  # drawn from the buffer: no rho
        {"valid": False, "solve_rate": None},  # rejected by the executor
        {"valid": False, "solve_rate": 0.0},  # a malformed record must not count either
        {"solve_rate": 1.0},  # no validity recorded: not played
    ]
    assert [t["solve_rate"] for t in played_tasks(tasks)] == [0.0, 0.5]
