"""The loop driven end to end by a scripted policy (fixed completions), then by the tiny model."""

import pytest
from scripted import ScriptedPolicy

from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.policy import Completion
from populora_nb.stages import Attempt, StepOutcome
from populora_nb.state import initial_state
from populora_nb.step import baseline_step, population_step
from populora_nb.step_records import member_metrics, token_counts
from populora_nb.tasks import Task


def test_baseline_step_rewards_advantages_and_buffers(verifier, tokenizer):
    cfg = load_config("tiny", {"run.agent": "baseline", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2})
    state = initial_state(cfg, verifier)
    n_seeds = len(state.buffers["code_o"])
    policy = ScriptedPolicy(tokenizer)
    out = baseline_step(policy, verifier, state, cfg)
    # proposal 0 is valid (f(x) = 3x on 2), proposal 1 imports os: banned.
    assert [p.result.__class__.__name__ for p in out.proposals] == ["Task", "Invalid"]
    assert out.proposals[1].result.reason == "banned_import"
    # The agent solves its own valid task correctly in both rollouts: rho = 1 → AZR reward -0.5.
    assert out.proposals[0].rho == 1.0
    propose = [s for s in out.samples if s.group[1] == "propose"]
    assert sorted(s.reward for s in propose) == [-1.0, -0.5]
    # TRR++: advantages are whitened within the (agent, propose, code_o) group.
    assert sum(s.advantage for s in propose) == pytest.approx(0, abs=1e-6)
    assert max(propose, key=lambda s: s.reward).advantage > 0
    # Only the valid task joined the buffer.
    assert len(state.buffers["code_o"]) == n_seeds + 1
    assert state.buffers["code_o"].tasks[-1].program.endswith("return x * 3")
    assert [m for m, _ in policy.updates] == ["agent"]


def test_population_step_teacher_rewards_follow_the_students(verifier, tokenizer):
    cfg = load_config(
        "tiny",
        {
            "run.agent": "population",
            "tasks.kinds": ["code_o"],
            "rl.proposals_per_kind": 2,
            "matchmaking.mode": "round_robin",
        },
    )
    state = initial_state(cfg, verifier)
    policy = ScriptedPolicy(tokenizer)
    out = population_step(policy, verifier, state, cfg)
    for p in out.proposals:
        if p.rho is None:
            continue
        # Scripted students with even ids solve code_o, odd ones never do: teacher reward is 1 - rho.
        even = int(p.solver[1:]) % 2 == 0
        assert p.rho == (1.0 if even else 0.0)
    teacher_rewards = {(s.member, s.reward) for s in out.samples if s.group[1] == "propose"}
    assert all(r in (-1.0, 0.0) for _, r in teacher_rewards)  # rho 1 → 0, rho 0 → 0, invalid → -1
    # Every member got its own update, and only with its own samples.
    assert sorted(m for m, _ in policy.updates) == sorted(state.roster)
    assert all(all(s.member == m for s in samples) for m, samples in policy.updates)
    # rho is 0 or 1 here, never contested: a teacher wins no game (its reward is 0 either way) and
    # loses k games per invalid task; a student wins its solved rollouts and loses its failed ones.
    prior = cfg.matchmaking.mu
    played = {p.solver for p in out.proposals if p.rho is not None}
    for s in played:
        even = int(s[1:]) % 2 == 0
        assert (state.ratings[s].mu > prior) if even else (state.ratings[s].mu < prior), s
    assert all(state.ratings[t].mu < prior for t in state.teachers)  # every teacher wrote an invalid task


class CrashingPolicy(ScriptedPolicy):
    """Dies inside generate after a number of calls, like a kill mid-step."""

    def __init__(self, tokenizer, crash_after: int):
        super().__init__(tokenizer)
        self.crash_after = crash_after

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        if self.calls + len(prompts) > self.crash_after:
            raise KeyboardInterrupt("simulated kill")
        return super().generate(member_ids, prompts, max_new_tokens, seed)


def _comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]


def test_run_writes_records_and_a_crashed_run_resumes_to_the_same_records(tmp_path, tokenizer):
    cfg = load_config(
        "tiny", {"run.agent": "population", "evolution.enabled": False, "run.steps": 4, "run.checkpoint_every": 2}
    )
    full = run(cfg, tmp_path / "full", policy=ScriptedPolicy(tokenizer), progress=False)
    rows = full.read("metrics")
    assert {r["step"] for r in rows} == {0, 1, 2, 3} and len(rows) == 4 * cfg.n_members
    assert full.latest_checkpoint()[0] == 4
    assert all(r["time/step_s"] > 0 and r["memory/peak_rss_gb"] > 0.01 for r in rows)  # the report's cost columns
    per_step = cfg.population.n_teachers * len(cfg.tasks.kinds) * cfg.rl.teacher_proposals
    assert len(full.read("tasks")) == 4 * per_step

    calls_per_step = ScriptedPolicy(tokenizer)
    run(cfg, tmp_path / "probe", policy=calls_per_step, progress=False)
    crash_at = calls_per_step.calls * 3 // 4 + 1  # inside step 3, after the step-2 checkpoint
    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path / "part", policy=CrashingPolicy(tokenizer, crash_at), progress=False)
    resumed = run(cfg, tmp_path / "part", policy=ScriptedPolicy(tokenizer), progress=False)
    for stream in ("metrics", "tasks", "matches"):
        assert _comparable(resumed.read(stream)) == _comparable(full.read(stream)), stream


def test_grow_seeds_adds_distinct_valid_proposals(verifier, tokenizer):
    from populora_nb.loop import grow_seeds

    cfg = load_config("tiny", {"run.agent": "baseline", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2})
    n_seeds = len(initial_state(cfg, verifier).buffers["code_o"])
    tasks = grow_seeds(cfg, ScriptedPolicy(tokenizer), verifier, target=n_seeds + 1, max_rounds=3)
    assert len(tasks) == n_seeds + 1  # the scripted valid program f(x) = 3x, once; the os program is rejected
    assert tasks[-1].program.endswith("return x * 3")


def test_azr_baseline_trains_its_solver_on_a_buffer_batch_not_on_its_learnability_rollouts(verifier, tokenizer):
    """AZR: k rollouts per valid proposal estimate rho for the proposer reward and are not trained
    on; the solver learns from proposals_per_kind buffer tasks per kind, one response each."""
    cfg = load_config(
        "tiny", {"run.agent": "baseline", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2, "rl.rollouts": 3}
    )
    assert cfg.run.baseline_solver == "azr"  # the default for the baseline
    state = initial_state(cfg, verifier)
    policy = ScriptedPolicy(tokenizer)
    out = baseline_step(policy, verifier, state, cfg)
    fresh = [a for a in out.attempts if a.fresh]
    batch = [a for a in out.attempts if not a.fresh]
    assert len(fresh) == 3 and not any(a.train for a in fresh)  # one valid proposal x k = 3, rho only
    assert out.proposals[0].rho == 1.0
    assert len(batch) == 2 and all(a.train for a in batch)  # 2 buffer tasks x 1 response
    solve_samples = [s for s in out.samples if s.group[1] == "solve"]
    assert sorted(s.prompt for s in solve_samples) == sorted(a.prompt for a in batch)
    # Compute is measured, not assumed: the learnability rollouts are generated but not trained on.
    tokens = token_counts(out, tokenizer)["agent"]
    n = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    generated = sum(n(p.completion) for p in out.proposals) + sum(n(a.completion) for a in out.attempts)
    trained = sum(n(s.completion) for s in out.samples)
    assert tokens == {"compute/generated_tokens": generated, "compute/trained_tokens": trained}
    assert trained < generated


def test_own_rollouts_baseline_trains_on_the_rollouts_of_its_proposals(verifier, tokenizer):
    cfg = load_config(
        "tiny",
        {
            "run.agent": "baseline",
            "tasks.kinds": ["code_o"],
            "rl.proposals_per_kind": 2,
            "rl.rollouts": 3,
            "run.baseline_solver": "own_rollouts",
        },
    )
    state = initial_state(cfg, verifier)
    out = baseline_step(ScriptedPolicy(tokenizer), verifier, state, cfg)
    fresh = [a for a in out.attempts if a.fresh]
    assert len(fresh) == 3 and all(a.train for a in out.attempts)
    # the one valid proposal's 3 rollouts + 1 top-up task (proposals_per_kind - 1) x 3
    assert len([s for s in out.samples if s.group[1] == "solve"]) == 6


def test_headline_solve_rate_counts_fresh_tasks_only():
    """A student who fails every fresh task but solves every buffer top-up (say, the identity seed)
    must not show a 50% solve rate: buffer attempts are recorded apart."""
    task = Task("code_o", "def f(a):\n    return a", ("1",), ("1",))
    attempts = [
        Attempt("S0", task, "p", "c", "wrong", 0),
        Attempt("S0", task, "p", "c", "wrong", 0),
        Attempt("S0", task, "p", "c", "correct", None),
        Attempt("S0", task, "p", "c", "correct", None),
    ]
    row = member_metrics("S0", "student", StepOutcome(attempts=attempts), ["code_o"])
    assert row["student/solve_rate"] == 0.0 and row["solve_rate/code_o"] == 0.0
    assert row["student/buffer_solve_rate"] == 1.0 and row["buffer_solve_rate/code_o"] == 1.0
    assert row["student/n_fresh_attempts"] == 2 and row["student/n_buffer_attempts"] == 2
    only_buffer = member_metrics("S0", "student", StepOutcome(attempts=attempts[2:]), ["code_o"])
    assert "student/solve_rate" not in only_buffer  # no fresh task: no headline value, not a 1.0


class IdPolicy(ScriptedPolicy):
    """Scripted texts, returned as a model would: with (made-up) sampled token ids."""

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        texts = super().generate(member_ids, prompts, max_new_tokens, seed)
        return [Completion(t, ((1, 2), (len(t), 7))) for t in texts]


def test_sampled_token_ids_travel_from_generation_to_the_update(verifier, tokenizer):
    """No cache, no re-tokenisation: every sample the update receives carries the ids its
    completion was sampled as, and the compute count reads them."""
    cfg = load_config("tiny", {"run.agent": "population", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2})
    state = initial_state(cfg, verifier)
    policy = IdPolicy(tokenizer)
    out = population_step(policy, verifier, state, cfg)
    updated = [s for _, samples in policy.updates for s in samples]
    assert updated and all(s.token_ids == ((1, 2), (len(s.completion), 7)) for s in updated)
    generated = token_counts(out, tokenizer)
    assert sum(c["compute/generated_tokens"] for c in generated.values()) == 2 * (
        len(out.proposals) + len(out.attempts)
    )


def test_task_rows_record_the_parsed_program_of_a_rejected_proposal_in_r1():
    """The parse travels beside the verdict: under AZR's r1 format a draft in <think> is not the
    proposal; the one inside <answer> is (today's rows re-parsed the text as chat and took the draft)."""
    from populora_nb.prompts import parse_proposal
    from populora_nb.stages import Proposed
    from populora_nb.step_records import task_rows
    from populora_nb.verify import Invalid

    text = (
        "draft:\n```python\ndef f(a):\n    return a  # draft\n```\n</think>\n<answer>\n```python\nimport os\n"
        "def f(a):\n    return os.getcwd()\n```\n```input\n1\n```\n</answer>"
    )
    p = Proposed("T0", "code_o", "prompt", text, parse_proposal(text, "code_o", "r1"))
    p.result = Invalid("banned_import")
    (row,) = task_rows(0, [p])
    assert row["program"].startswith("import os") and row["reason"] == "banned_import"
