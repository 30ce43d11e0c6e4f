import random

import pytest

from populora_nb.buffers import TaskBuffer, load_seed_triplets
from populora_nb.config import load_config
from populora_nb.solve_batches import buffer_jobs
from populora_nb.stages import Proposed, grow
from populora_nb.tasks import Proposal, Task


def task(i: int) -> Task:
    return Task("code_o", f"def f(a):\n    return a + {i}", ("1",), (str(1 + i),))


def test_full_buffer_evicts_oldest_non_seed_and_keeps_seeds():
    b = TaskBuffer("code_o", cap=3)
    b.add(task(0), seed=True)
    for i in range(1, 6):
        b.add(task(i))
    assert [t.outputs[0] for t in b.tasks] == ["1", "5", "6"]
    assert b.n_added == 6 and b.n_seeds == 1


def test_recency_sampling_prefers_new_entries():
    b = TaskBuffer("code_o", cap=100)
    for i in range(20):
        b.add(task(i))
    rng = random.Random(0)
    picks = [b.sample(1, rng, "recency")[0].outputs[0] for _ in range(2000)]
    newest, oldest = picks.count("20"), picks.count("1")
    assert newest > 8 * oldest
    assert len(set(t.program for t in b.sample(5, rng, "uniform"))) == 5


def test_buffer_json_round_trip():
    b = TaskBuffer("code_o", cap=10)
    b.add(task(0), seed=True)
    b.add(task(1))
    b.add_batch([task(2), task(3)])
    assert TaskBuffer.from_json(b.to_json()) == b and b.n_recent == 2
    older = {k: v for k, v in b.to_json().items() if k != "n_recent"}  # a checkpoint from before n_recent
    assert TaskBuffer.from_json(older).n_recent == 0


def test_wrong_kind_is_rejected():
    with pytest.raises(ValueError):
        TaskBuffer("code_f").add(task(0))


def test_bundled_seeds_load_and_bad_seed_file_errors(tmp_path):
    seeds = load_seed_triplets()
    assert seeds[0]["program"].startswith("def f(a)") and seeds[0]["inputs"] == ["'Hello world'"]
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"program": "def f(): pass"}\n')
    with pytest.raises(ValueError, match="s.jsonl:1"):
        load_seed_triplets(bad)
    with pytest.raises(FileNotFoundError, match="tasks.seeds_path"):
        load_seed_triplets(tmp_path / "none.jsonl")


# ---- AZR's solver batch and its buffers (issue #28) -------------------------------------------------


def proposed(kind: str, i: int, valid: bool = True) -> Proposed:
    program = f"def f(a):\n    return a * {i}"
    t = Task(kind, program, ("2",), (str(2 * i),))  # type: ignore[arg-type]
    return Proposed("agent", kind, "", "", Proposal(kind, program, ("2",)), result=t if valid else None)  # type: ignore[arg-type]


def test_latest_batch_is_the_tail_and_survives_eviction():
    b = TaskBuffer("code_o", cap=6)
    for i in range(3):
        b.add(task(i), seed=True)
    assert b.recent == b.tasks  # before step 0 the seeds are the latest batch (AZR: step 0, in step 1's window)
    b.add_batch([task(10), task(11)])
    assert b.recent == [task(10), task(11)]
    b.add_batch([task(20), task(21), task(22), task(23)])  # cap 6 = 3 seeds + 3: one of this batch is evicted
    assert b.n_seeds == 3 and len(b) == 6
    assert b.recent == [task(21), task(22), task(23)]
    b.add_batch([])  # a step with no valid task of this kind: nothing is new at the next step
    assert b.recent == [] and len(b.sample_max_new(4, random.Random(0))) == 4


def test_solver_batch_share_of_the_previous_steps_tasks_is_azrs_max_new_rule():
    """A buffer with known insertion steps: 14 seeds, then 5 steps of 3 valid tasks each (ids by
    step). AZR's max_new with batch B = 8 takes all 3 of the previous step's tasks, then 5 uniform
    draws without replacement from all N = 29 entries: expected share (3 + 5 * 3/29) / 8 = 0.440.
    The rank-weighted recency draw this replaced gave 0.18 on the same buffer."""
    b, seeds, per_step, steps, k = TaskBuffer("code_o"), 14, 3, 5, 8
    for i in range(seeds):
        b.add(task(1000 + i), seed=True)
    for s in range(steps):
        b.add_batch([task(100 * s + i) for i in range(per_step)])
    previous = {task(100 * (steps - 1) + i).program for i in range(per_step)}
    rng, trials = random.Random(0), 4000
    batches = [b.sample_max_new(k, rng) for _ in range(trials)]
    assert all(
        len(x) == k and previous <= {t.program for t in x[:per_step]} for x in batches
    )  # new ones first, all of them
    share = sum(t.program in previous for x in batches for t in x) / (trials * k)
    n = len(b)
    assert share == pytest.approx((per_step + (k - per_step) * per_step / n) / k, abs=0.01)
    old = sum(t.program in previous for _ in range(trials) for t in b.sample(k, rng, "recency")) / (trials * k)
    assert old < 0.25 < 0.4 < share


def test_baseline_solver_batch_is_the_previous_steps_valid_tasks_when_they_fill_it():
    """Through the stages: a step whose 2 code_o proposals were both valid gives the next step's
    solver batch exactly those 2 tasks (proposals_per_kind = 2), whatever the buffer holds."""
    cfg = load_config(
        "tiny", {"run.agent": "baseline", "tasks.kinds": ["code_o", "code_i"], "rl.proposals_per_kind": 2}
    )
    buffers = {k: TaskBuffer(k) for k in cfg.tasks.kinds}  # type: ignore[arg-type]
    for kind, b in buffers.items():
        for i in range(14):
            b.add(Task(kind, f"def f(a):\n    return a - {i}", ("1",), (str(1 - i),)), seed=True)  # type: ignore[arg-type]
    for step in range(6):
        grow(
            buffers,
            [proposed("code_o", 10 * step), proposed("code_o", 10 * step + 1), proposed("code_i", 10 * step + 2)],
        )
        jobs = buffer_jobs("agent", buffers, cfg, step + 1)
        code_o = sorted(j.task.program for j in jobs if j.task.kind == "code_o")
        assert code_o == sorted(
            p.result.program for p in (proposed("code_o", 10 * step), proposed("code_o", 10 * step + 1))
        )
        code_i = [j.task.program for j in jobs if j.task.kind == "code_i"]
        assert (
            len(code_i) == 2 and code_i[0] == proposed("code_i", 10 * step + 2).result.program
        )  # the 1 new, then 1 uniform
        assert all(j.rollouts == 1 and j.train and j.proposed_index is None for j in jobs)


def test_code_o_and_code_i_buffers_stay_apart():
    """AZR adds a code_o proposal to its 'output' dataset only and a code_i one to 'input' only."""
    buffers = {k: TaskBuffer(k) for k in ("code_o", "code_i", "code_f")}  # type: ignore[arg-type]
    grow(buffers, [proposed("code_o", 1), proposed("code_i", 2), proposed("code_o", 3, valid=False)])
    assert [t.program for t in buffers["code_o"].tasks] == [proposed("code_o", 1).result.program]
    assert [t.program for t in buffers["code_i"].tasks] == [proposed("code_i", 2).result.program]
    assert all(t.kind == k for k, b in buffers.items() for t in b.tasks) and not buffers["code_f"].tasks
    with pytest.raises(ValueError):  # only a seed may be shared between them
        buffers["code_i"].add(task(0))


def test_code_f_references_come_from_both_buffers_each_program_once():
    """AZR shows a code_f proposer a program from the merged snippets of every buffer
    (`get_snippets`), not the code_o buffer alone."""
    from populora_nb.buffers import snippet_pool

    def t(kind: str, program: str) -> Task:
        return Task(kind, program, ("1",), ("1",))

    o, i = TaskBuffer("code_o"), TaskBuffer("code_i")
    o.add(t("code_o", "def f(a):\n    return a"), seed=True)
    i.add(t("code_i", "def f(a):\n    return a"), seed=True)  # the same seed in both: once in the pool
    o.add_batch([t("code_o", "def f(a):\n    return a + 1"), t("code_o", "def f(a):\n    return a + 2")])
    i.add_batch([t("code_i", "def f(a):\n    return a * 3")])
    pool = snippet_pool({"code_o": o, "code_i": i})
    assert pool is not None and pool.n_seeds == 1
    assert [p.program.split("return ")[1] for p in pool.tasks] == ["a", "a + 1", "a * 3", "a + 2"]
    assert snippet_pool({"code_f": TaskBuffer("code_f")}) is None
    drawn = {pool.sample(1, random.Random(s))[0].program for s in range(60)}
    assert "def f(a):\n    return a * 3" in drawn  # the code_i buffer's program is shown too


def test_solve_jobs_take_their_quota_and_trained_rollouts_as_arguments_not_the_experiments_kind():
    """The student batch: every valid task proposed to the solver with k rollouts, topped up from the
    buffer to ``quota`` tasks of each kind, ``trained_rollouts`` of each learned from. Given the same
    arguments it is the same batch whichever experiment the config names: the stage does not read
    ``run.agent``."""
    from populora_nb.solve_batches import solve_jobs

    buffers = {"code_o": TaskBuffer("code_o", 16)}
    for i in range(6):
        buffers["code_o"].add(task(i))
    proposals = [proposed("code_o", 1), proposed("code_o", 2, valid=False), proposed("code_o", 3)]
    batches = []
    for agent in ("baseline", "population"):
        config = load_config("tiny", {"tasks.kinds": ["code_o"], "run.agent": agent})
        batches.append(solve_jobs({"S0": [0, 1, 2]}, proposals, buffers, config, 0, quota=5, trained_rollouts=2))
    assert batches[0] == batches[1]
    jobs = batches[0]
    assert [j.proposed_index for j in jobs] == [0, 2, None, None, None]  # 2 fresh valid tasks, 3 top-ups
    assert all(j.rollouts == 4 and j.trained_rollouts == 2 and j.train for j in jobs)
    none = solve_jobs({"S0": [0, 1, 2]}, proposals, buffers, config, 0, quota=0)
    assert [j.proposed_index for j in none] == [0, 2] and all(j.trained_rollouts is None for j in none)
