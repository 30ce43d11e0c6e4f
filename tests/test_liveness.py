"""The mechanism checks read before any curve, each built so that it can fail: repeats counted apart,
teacher wins from the games the rating rule scored, children judged at their first eligible event."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from populora_nb.analysis.liveness import judge, liveness, played_tasks
from populora_nb.analysis.survival import judge_children, poisson_binomial_cdf
from populora_nb.config import load_config, save_config
from studies.liveness_report import protocol_liveness
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
    assert [v.repeat for v in live.valid] == [False, True, True, True, False]
    assert [v.new_program for v in live.valid] == [True, False, False, False, False]
    assert live.judged["band"].share == 0.5  # 1 of the 2 non-repeats; counting repeats it would read 4/5
    assert sum(h for _, h in live.band_items("all")) == 4 and len(live.band_items("all")) == 5
    assert live.distinct_programs == 1 and live.steps == 5
    only_repeats = [_task(0.0, program=1, step=s // 3) for s in range(3)]
    only_repeats += [_task(0.5, program=1, step=s // 3) for s in range(3, 60)]
    checks = liveness(_run(tmp_path / "q", only_repeats)).checks()
    assert checks["new programs"] == "fail" and checks["band"] == "too few to judge"  # one non-repeat played


def _one_program_run(path, *, steps=40, per_step=10, new_until=0, rho=0.5, fresh_inputs=True):
    """A run of ``steps`` steps, ``per_step`` valid tasks each: every task a new program before step
    ``new_until``, afterwards one program re-posed (renamed, reformatted), with a fresh input each
    time or (``fresh_inputs=False``) the same one: exact repeats."""
    tasks, fresh = [], 0
    for step in range(steps):
        for i in range(per_step):
            fresh += 1
            if step < new_until:
                tasks.append(_task(rho, program=1000 + fresh, inputs=(str(fresh),), step=step))
            else:
                name = "xyzwv"[i % 5]
                program = f"def f({name}):\n    return {name} * {name}" + "  # again" * (i % 2)
                tasks.append({**_task(rho, inputs=(str(fresh if fresh_inputs else 0),), step=step), "program": program})
    return liveness(_run(path, tasks))


def test_a_proposer_reposing_one_program_with_fresh_inputs_fails_the_new_programs_check(tmp_path):
    """The collapse the repeat class cannot see: no task repeats (every input is fresh), the band share
    over non-repeats is full, yet one program is all the run wrote."""
    live = _one_program_run(tmp_path / "one")
    assert not any(v.repeat for v in live.valid) and live.distinct_programs == 1
    assert live.judged["band"].state == "pass"  # what the old "new tasks" check read as liveness
    assert live.checks()["new programs"] == "fail" and live.checks()["new programs, last window"] == "fail"
    assert "Every check passed" not in live.summary() and "Fail: new programs" in live.summary()
    writing = _one_program_run(tmp_path / "writing", new_until=40)
    assert writing.checks()["new programs"] == "pass" and writing.checks()["new programs, last window"] == "pass"
    assert writing.verdict() == "Every check passed." and writing.distinct_programs == 400


def test_a_run_new_at_the_start_and_copying_at_the_end_fails_its_last_window(tmp_path):
    live = _one_program_run(tmp_path / "late", new_until=30)
    assert live.window_start == 30 and live.new_programs_per_step(True) == 0.1  # the one program, once
    assert live.checks()["new programs"] == "pass"  # 301 of 400 over the whole run
    assert live.checks()["new programs, last window"] == "fail"
    assert live.judged["new programs, last window"].blocks == 5  # 10 steps in 2-step blocks
    repeats = _one_program_run(tmp_path / "repeats", new_until=30, fresh_inputs=False)
    assert all(v.repeat for v in repeats.valid if v.step >= 31)  # the last window: one task again and again
    assert repeats.checks()["new programs, last window"] == "fail" and repeats.checks()["new programs"] == "pass"


def test_an_interval_across_the_threshold_is_inconclusive_and_few_blocks_are_too_few():
    straddles = [(s, s % 10 == 0 and i == 0) for s in range(40) for i in range(3)]  # 4 of 120: 3%
    assert judge(straddles, 0.05, block=5).state == "inconclusive"
    assert judge(straddles, 0.20, block=5).state == "fail" and judge(straddles, 0.01, block=5).state == "inconclusive"
    clear = [(s, i < 2) for s in range(40) for i in range(3)]  # 2 of 3 in every step
    assert judge(clear, 0.5, block=5).state == "pass"
    assert judge(clear[:9], 0.5, block=5).state == "too few to judge"  # 3 steps: one block
    zeros = [(s, False) for s in range(20)]  # every block 0: a zero-width bootstrap is widened, not precise
    check = judge(zeros, 0.10, block=5)
    assert check.low == 0 and check.high > 0.15 and check.state == "inconclusive"  # 0/20: Wilson reaches 16%
    assert judge([(s, False) for s in range(400)], 0.10, block=5).state == "fail"
    assert judge([], 0.1, block=5).state == "no data"


def test_a_short_run_is_too_few_to_judge_and_never_reads_every_check_passed(tmp_path):
    live = _one_program_run(tmp_path / "smoke", steps=3, per_step=4, new_until=3)
    assert set(live.checks().values()) == {"too few to judge"}
    assert live.verdict() == "Too few to judge: new programs, new programs, last window, band."
    assert "Every check passed" not in live.summary()


def test_a_committed_run_with_every_program_replaced_by_one_fails_new_programs(tmp_path):
    """Built from the committed laptop protocol: every valid program replaced by one program, inputs
    kept: the repeat class sees almost nothing, the new-programs checks fail."""
    source = Path(__file__).parent.parent / "docs" / "results" / "cpu-protocol-first-probe" / "seed0" / "population"
    if not source.is_dir():
        pytest.skip(f"no committed protocol run at {source}")
    run = tmp_path / "population"
    shutil.copytree(source, run)
    (run / "config.yaml").write_text((source / "config.yaml").read_text())
    rows = [json.loads(line) for line in gzip.open(source / "tasks.jsonl.gz", "rt")]
    for i, r in enumerate(rows):
        if r["valid"]:
            r["program"], r["inputs"], r["outputs"] = "def f(n):\n    return n * n", [str(i)], [str(i * i)]
    (run / "tasks.jsonl.gz").unlink()
    (run / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    collapsed, original = liveness(run), liveness(source)
    assert collapsed.distinct_programs == 1 and sum(v.repeat for v in collapsed.valid) == 0
    assert collapsed.checks()["new programs"] == "fail" and collapsed.checks()["new programs, last window"] == "fail"
    assert original.distinct_programs > 20 and len(original.valid) == len(collapsed.valid)


def test_matches_at_rho_three_quarters_raise_the_band_share_but_not_teacher_wins(tmp_path):
    base = [_task(0.25, program=1), _task(0.0, program=2)]
    easy = [_task(0.75, program=10 + i) for i in range(6)]
    before = liveness(_run(tmp_path / "before", base, lineage=[]))
    after = liveness(_run(tmp_path / "after", base + easy, lineage=[]))
    assert after.judged["band"].share > before.judged["band"].share
    assert after.contested > before.contested  # the earlier rule: every 0 < rho < 1 counted as a teacher win
    majority = [sum(h for _, h in x.majority_items()) for x in (before, after)]
    assert majority == [1, 1]  # the teacher won most games only at rho = 1/4
    assert after.judged["teacher majority"].share < before.judged["teacher majority"].share
    won = [p.teacher_won for p in after.played]
    assert won[:2] == [3, 0] and set(won[2:]) == {1}  # at rho = 3/4 the teacher won 1 game of 4
    assert after.judged["teacher games"].share < before.judged["teacher games"].share
    assert after.checks()["teacher majority"] == "too few to judge"  # every task in step 0: one block
    won = liveness(_run(tmp_path / "won", [_task(0.25, program=i, step=i // 4) for i in range(80)], lineage=[]))
    assert won.checks()["teacher majority"] == "pass" and won.checks()["teacher games"] == "pass"
    lost = liveness(_run(tmp_path / "lost", [_task(0.75, program=i, step=i // 4) for i in range(80)], lineage=[]))
    assert lost.judged["band"].share == 1.0 and lost.checks()["band"] == "pass"
    assert lost.checks()["teacher majority"] == "fail"  # 0 of 80 matches: a band full of tasks the teacher lost


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
    assert sum(v.repeat for v in live.valid) > 0 and live.survival is not None and live.survival.born >= 2
    assert set(live.checks()) == {
        "new programs",
        "new programs, last window",
        "band",
        "teacher games",
        "teacher majority",
        "children",
    }
    assert live.distinct_programs >= 1 and "distinct programs" in live.summary()


def test_the_protocol_section_states_each_seeds_checks_and_names_a_failing_seed(tmp_path):
    def seed(name, pop_tasks, lineage):
        exp = tmp_path / name
        _run(exp / "population", pop_tasks, lineage)
        _run(exp / "baseline", [_task(0.5, 1), _task(0.0, 2), _task(1.0, 3), _task(None, 4, valid=False)])
        return exp

    chain = _culled_chain([10, 20, 30, 40, 50, 60], cull=True)
    live = seed("seed0", [_task(0.25, i, step=i // 4) for i in range(80)], _culled_chain([10, 20, 30], cull=False))
    dead = seed("seed1", [_task(0.75, i, step=i // 4) for i in range(80)], chain)
    lines, records = protocol_liveness([live, dead])
    text = "\n".join(lines)
    assert "| seed0 | baseline | 3 | 3 | 100% (3/3) [44%, 100%]: too few to judge (3.00)" in text
    assert "| 2 of 2 (equal-skill chance 1.3; p = 1; 6 born): too few to judge | too few to judge: children |" in text
    assert "0 of 8 (equal-skill chance 5.3; p = 0.00015; 12 born): fail | fail: teacher majority, children |" in text
    assert "Not every check passed: seed0 (Too few to judge: children.); seed1 (Fail: teacher majority" in text
    assert records["seeds"][1]["population"]["children"]["survived"] == 0
    assert records["seeds"][0]["population"]["new_programs"][-1] == "pass"
    assert records["seeds"][0]["population"]["distinct_programs"] == 80
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
