"""The warm-up (rejection-sampling fine-tuning): only verifier-accepted proposals become examples,
no benchmark data is read, the fine-tuning lowers the examples' loss, and every member of both runs
starts from the saved adapter."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file
from scripted import BAD_PROGRAM, GOOD_PROGRAM, ScriptedPolicy

from populora_nb import warmup
from populora_nb.config import load_config
from populora_nb.errors import UserInputError
from populora_nb.model import sft
from populora_nb.model.checkpoint import read_adapter, write_peft_adapter
from populora_nb.model.policy import LoRAPolicy
from populora_nb.prompts import parse_proposal
from populora_nb.stages import Proposed
from populora_nb.state import initial_state
from populora_nb.tasks import Task
from populora_nb.verify import Invalid


def _proposed(kind: str, completion: str, result) -> Proposed:
    return Proposed("agent", kind, "prompt", completion, parse_proposal(completion, kind, "chat"), result=result)


def test_only_accepted_distinct_proposals_become_examples():
    task = Task("code_o", "def f(x):\n    return x", ("1",), ("1",))
    parsed = parse_proposal("no code here", "code_o", "chat")
    proposals = [
        _proposed("code_o", GOOD_PROGRAM.format(n=1), task),
        _proposed("code_o", GOOD_PROGRAM.format(n=1), task),  # the same task again: one example
        _proposed("code_o", BAD_PROGRAM, Invalid("forbidden import os")),
        _proposed("code_o", "no code here", parsed),  # a parse failure
        _proposed("code_i", GOOD_PROGRAM.format(n=2), None),  # never validated
        _proposed("code_i", GOOD_PROGRAM.format(n=1), dataclasses.replace(task, kind="code_i")),  # other kind
    ]
    seen: set = set()
    examples = warmup.accepted_examples(proposals, seen)
    assert [(e.kind, e.program) for e in examples] == [("code_o", task.program), ("code_i", task.program)]
    assert warmup.accepted_examples(proposals, seen) == []  # seen across rounds
    rate = warmup.valid_rate(proposals)
    assert (rate.accepted, rate.total) == (3, 6)


def test_collect_keeps_verifier_accepted_proposals_and_reads_no_benchmark(monkeypatch, tmp_path, verifier, tokenizer):
    import populora_nb.evaluation.loaders as loaders

    def refuse(*args, **kwargs):
        raise AssertionError("the warm-up read benchmark data")

    for name in ("resolve_data_dir", "load_benchmark"):
        if hasattr(loaders, name):
            monkeypatch.setattr(loaders, name, refuse)
    config = load_config(
        "tiny",
        {"tasks.kinds": ["code_o"], "warmup.examples": 50, "warmup.max_rounds": 3, "warmup.batch": 4},
    )
    policy = ScriptedPolicy(tokenizer)  # alternates a valid program and one the verifier rejects (import os)
    buffers = initial_state(config, verifier).buffers
    examples, rate = warmup.collect(config, policy, verifier, buffers)
    assert rate.total == 12 and rate.accepted == 6  # every other proposal is valid
    assert examples and all("import os" not in e.program and "x * 3" in e.program for e in examples)
    assert len({(e.program, e.inputs) for e in examples}) == len(examples)


def _examples(n: int) -> list[sft.Example]:
    return [
        sft.Example("code_o", f"Write a puzzle {i}", f"def f(x):\n    return x * {i % 3}", None, "", ())
        for i in range(n)
    ]


def test_fine_tune_lowers_the_examples_loss_and_saved_factors_start_every_member(tmp_path):
    config = load_config("tiny", {"warmup.epochs": 6, "warmup.sft_batch": 4, "lora.lr": 5e-3, "run.agent": "baseline"})
    policy = LoRAPolicy.create(config, [(warmup.MEMBER, warmup.MEMBER)])
    before = policy.population.factors(warmup.MEMBER)
    losses = sft.fine_tune(policy, _examples(8), config, seed=0)
    assert len(losses) == 6 * 2
    assert sum(losses[-2:]) < sum(losses[:2])  # the same examples, fitted
    after = policy.population.factors(warmup.MEMBER)
    assert any(not torch.equal(before[n].B, after[n].B) for n in before)

    write_peft_adapter(tmp_path, after, config.lora, config.model.name, {"id": warmup.MEMBER})
    pop_config = load_config("tiny", {"lora.warmup": str(tmp_path)})
    members = LoRAPolicy.create(pop_config, [("T0", "teacher"), ("S0", "student")])
    for name in members.members:
        got = members.population.factors(name)
        assert all(torch.equal(got[n].A, after[n].A) and torch.equal(got[n].B, after[n].B) for n in after)


def test_warmup_factors_from_other_settings_or_missing_are_refused(tmp_path):
    config = load_config("tiny", {"run.agent": "baseline"})
    policy = LoRAPolicy.create(config, [(warmup.MEMBER, warmup.MEMBER)])
    with pytest.raises(UserInputError, match="no adapter there"):
        read_adapter(tmp_path, config.lora, config.model.name)
    write_peft_adapter(tmp_path, policy.population.factors(warmup.MEMBER), config.lora, config.model.name, {})
    other = load_config("tiny", {"lora.rank": 8})
    with pytest.raises(UserInputError, match="rank"):
        read_adapter(tmp_path, other.lora, other.model.name)
    with pytest.raises(UserInputError, match="lora.warmup"):
        LoRAPolicy.create(load_config("tiny", {"lora.rank": 8, "lora.warmup": str(tmp_path)}), [("T0", "teacher")])


def test_a_warmup_adapter_in_the_retired_factors_layout_is_refused_naming_the_commit(tmp_path):
    """Earlier versions wrote the warm-up adapter as one factors.safetensors ({module}.A / .B, rank,
    alpha and model in its metadata); commit 78e6802 retired it for peft's adapter files."""
    config = load_config("tiny", {"run.agent": "baseline"})
    policy = LoRAPolicy.create(config, [(warmup.MEMBER, warmup.MEMBER)])
    factors = policy.population.factors(warmup.MEMBER)
    tensors = {f"{n}.{part}": getattr(pair, part).contiguous() for n, pair in factors.items() for part in ("A", "B")}
    meta = {"rank": str(config.lora.rank), "alpha": str(config.lora.alpha), "model": config.model.name}
    save_file(tensors, str(tmp_path / "factors.safetensors"), metadata=meta)
    with pytest.raises(UserInputError, match=r"factors.safetensors layout .*retired in commit 78e6802"):
        read_adapter(tmp_path, config.lora, config.model.name)
    with pytest.raises(UserInputError, match="retired in commit 78e6802"):
        LoRAPolicy.create(load_config("tiny", {"lora.warmup": str(tmp_path)}), [("T0", "teacher")])


def test_experiment_warmup_stage_is_shared_by_both_runs(tmp_path):
    from populora_nb.experiment import run_experiment

    config = load_config(
        "tiny",
        {
            "warmup.enabled": True,
            "warmup.examples": 2,
            "warmup.max_rounds": 1,
            "warmup.batch": 2,
            "warmup.measure_rounds": 1,
            "warmup.solver": True,
            "warmup.solver_samples": 1,
            "run.steps": 1,
        },
    )
    with pytest.raises(UserInputError, match="warmup stage"):
        run_experiment(config, tmp_path / "exp", stages=("baseline",), say=lambda m: None)
    out = run_experiment(config, tmp_path / "exp", stages=("warmup", "baseline", "population"), say=lambda m: None)
    report = json.loads((out / "warmup" / warmup.REPORT).read_text())
    assert report["before"]["total"] == report["after"]["total"] == 3  # 2 rounded up to one per kind
    solver = report["solver"]  # the solver warm-up ran on the same adapter, measured on held-out tasks
    assert solver["held_out_tasks"] > 0 and solver["before"]["total"] == solver["after"]["total"] > 0
    assert (out / "warmup" / warmup.SOLVER_EXAMPLES).is_file()
    for run in ("baseline", "population"):
        saved = load_config(None, yaml_path=out / run / "config.yaml")
        assert saved.lora.warmup == str((out / "warmup").resolve())


def _warmup_report(exp, before: int, after: int, total: int = 64) -> None:
    (exp / "warmup").mkdir(parents=True)
    report = {
        "before": {"accepted": before, "total": total, "rate": before / total},
        "after": {"accepted": after, "total": total, "rate": after / total},
        "examples": 48,
    }
    (exp / "warmup" / warmup.REPORT).write_text(json.dumps(report))


def test_the_warmup_gain_is_paired_by_seed_and_reported(tmp_path):
    from studies.protocol import write_seed_report
    from studies.synthetic import write_synthetic_experiment
    from studies.warmup_gain import warmup_gain

    # Seeds differ a lot in level but each gains exactly 8/64: paired, the gain is exact.
    exps = [tmp_path / f"seed{k}" for k in range(3)]
    for exp, before in zip(exps, (8, 20, 32)):
        _warmup_report(exp, before, before + 8)
    g = warmup_gain(exps, n_resamples=2000)
    assert g is not None and g.seeds == ("seed0", "seed1", "seed2")
    assert g.gain.mean == pytest.approx(0.125) and g.gain.low == pytest.approx(0.125) == g.gain.high
    assert not g.before_est.low == g.before_est.high  # the levels themselves vary
    assert warmup_gain([tmp_path / "none"]) is None

    for k, exp in enumerate(exps):
        write_synthetic_experiment(exp, n_steps=4, seed=k)
    md = write_seed_report(exps, tmp_path / "report", window=2, n_resamples=500).read_text()
    assert "## The warm-up: valid-task rate before and after" in md and "| seed1 | 64 | 0.312 | 0.438 | +0.125" in md
    assert "Every seed gained exactly +0.125: no spread, so no t-interval and no claim" in md  # 8/64 each
    record = json.loads((tmp_path / "report" / "seeds.json").read_text())
    assert record["warmup"]["gain"]["mean"] == pytest.approx(0.125)
    assert (tmp_path / "report" / "seeds_warmup.png").is_file()


def test_measurement_prompts_show_other_seed_references_than_collection_prompts(verifier, tokenizer):
    """Issue #28: the held-out rounds draw their references from a disjoint half of the seeds,
    the same half in every kind's buffer, the same split for the same run seed."""
    config = load_config("tiny", {"tasks.kinds": ["code_o", "code_i"], "tasks.n_references": 3, "warmup.batch": 8})
    buffers = initial_state(config, verifier).buffers
    seeds = {t.program for t in buffers["code_o"].tasks}
    collect_b, measure_b = warmup.split_seeds(buffers, seed=0)
    halves = [{k: {t.program for t in b.tasks} for k, b in part.items()} for part in (collect_b, measure_b)]
    for half in halves:
        assert half["code_o"] == half["code_i"]  # one split for both kinds
    c, m = halves[0]["code_o"], halves[1]["code_o"]
    assert not c & m and c | m == seeds and len(m) == len(seeds) // 2
    assert all(b.n_seeds == len(b) and all(t.kind == k for t in b.tasks) for k, b in collect_b.items())
    again = warmup.split_seeds(buffers, seed=0)[1]
    assert {t.program for t in again["code_o"].tasks} == m  # deterministic
    assert {t.program for t in warmup.split_seeds(buffers, seed=1)[1]["code_o"].tasks} != m  # and drawn per seed

    policy = ScriptedPolicy(tokenizer)
    shown = lambda proposals: {r for p in proposals for r in p.references}  # noqa: E731
    collected = shown(warmup.proposal_round(config, policy, verifier, collect_b, warmup.COLLECT_STEP))
    measured = shown(warmup.proposal_round(config, policy, verifier, measure_b, warmup.MEASURE_STEP))
    assert collected and measured and collected <= c and measured <= m


def test_split_seeds_refuses_a_single_seed():
    from populora_nb.buffers import TaskBuffer

    b = TaskBuffer("code_o")
    b.add(Task("code_o", "def f(a):\n    return a", ("1",), ("1",)), seed=True)
    with pytest.raises(UserInputError, match="at least 2 distinct seed programs"):
        warmup.split_seeds({"code_o": b}, seed=0)


def test_the_solver_warmup_fine_tunes_on_correct_answers_and_measures_on_held_out_programs(
    monkeypatch, verifier, tokenizer
):
    """Issue #31's solver warm-up: only answers the verifier judged correct become examples, on the
    training tasks (accepted proposals and collection seeds); the solve rate is measured before and
    after on the same held-out tasks, none of whose programs is a training task's."""
    from populora_nb import solver_warmup

    config = load_config("tiny", {"tasks.kinds": ["code_o"], "warmup.solver": True, "warmup.solver_samples": 2})
    collect_buffers, measure_buffers = warmup.split_seeds(initial_state(config, verifier).buffers, config.run.seed)
    triple = Task("code_o", "def f(x):\n    return x * 3", ("4",), ("12",))
    proposal = sft.Example("code_o", "p", GOOD_PROGRAM.format(n=4), None, triple.program, ("4",), triple)
    # accepted by a held-out proposer round, but its program is a training task's: never measured on
    seen_in_training = Task("code_o", triple.program, ("5",), ("15",))
    tuned: list = []
    monkeypatch.setattr(
        solver_warmup, "fine_tune", lambda policy, examples, cfg, seed: tuned.append(examples) or [1.0, 0.5]
    )
    policy = ScriptedPolicy(tokenizer)  # answers f(x) = 3x questions right, every seed question wrong
    report, examples = solver_warmup.run_solver_warmup(
        config, policy, verifier, [proposal], collect_buffers, measure_buffers, [seen_in_training], warmup.MEMBER
    )
    n_collect, n_measure = (len(b.tasks) for b in (collect_buffers["code_o"], measure_buffers["code_o"]))
    assert report["train_tasks"] == 1 + n_collect and report["held_out_tasks"] == n_measure
    assert [e.program for e in examples] == [triple.program]  # 2 samples, one distinct correct answer
    assert tuned == [examples] and report["sft_steps"] == 2
    for when in ("before", "after"):  # the same held-out tasks and draws: a paired measurement
        assert report[when]["total"] == 2 * n_measure and report[when]["correct"] == 0
    assert report["collected"]["correct"] == 2


def test_solved_examples_keep_correct_distinct_answers_up_to_the_limit():
    from populora_nb import solver_warmup
    from populora_nb.stages import Attempt

    task = Task("code_o", "def f(x):\n    return x", ("1",), ("1",))
    attempts = [
        Attempt("agent", task, "q", "```output\n1\n```", "correct", None),
        Attempt("agent", task, "q", "```output\n1\n```", "correct", None),  # the same answer again
        Attempt("agent", task, "q", "```output\n2\n```", "wrong", None),
        Attempt("agent", task, "q", "I think ```output\n1\n```", "correct", None),
        Attempt("agent", task, "q", "", "malformed", None),
    ]
    got = solver_warmup.solved_examples(attempts, limit=5)
    assert [e.completion for e in got] == ["```output\n1\n```", "I think ```output\n1\n```"]
    assert solver_warmup.solved_examples(attempts, limit=1) == got[:1]
    rate = solver_warmup.solve_rate(attempts)
    assert (rate.correct, rate.total, rate.tasks) == (3, 5, 1)


def test_the_solver_warmup_generates_in_chunks_of_the_warmup_batch_with_repeatable_draws(verifier, tokenizer):
    """~500 rows in one native generate call took 24 GB on the cpu preset and were killed: attempts go
    in chunks of warmup.batch rows, and a second pass over the same tasks and step draws the same seeds."""
    from populora_nb import solver_warmup

    config = load_config("tiny", {"tasks.kinds": ["code_o"], "warmup.batch": 6, "warmup.solver_samples": 2})
    tasks = [Task("code_o", f"def f(x):\n    return x + {n}", ("1",), (str(1 + n),)) for n in range(7)]
    calls: list[tuple[int, int]] = []

    class Recording(ScriptedPolicy):
        def generate(self, member_ids, prompts, max_new_tokens, seed):
            calls.append((len(prompts), seed))
            return super().generate(member_ids, prompts, max_new_tokens, seed)

    policy = Recording(tokenizer)
    first = solver_warmup.attempt(config, policy, verifier, tasks, 100, warmup.MEMBER, {})
    assert len(first) == 14 and [n for n, _ in calls] == [6, 6, 2]  # 3 tasks x 2 samples, twice; then 1 task
    assert len({s for _, s in calls}) == 3  # each chunk its own draws
    solver_warmup.attempt(config, policy, verifier, tasks, 100, warmup.MEMBER, {})
    assert calls[3:] == calls[:3]  # before and after: the same chunks, the same seeds
