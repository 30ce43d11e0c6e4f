import random

import pytest

from populora_nb.buffers import TaskBuffer, load_seed_triplets
from populora_nb.tasks import Task


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
    assert TaskBuffer.from_json(b.to_json()) == b


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
