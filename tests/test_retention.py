"""The retention experiment on the tiny model: curves of n + 1 scores per operator, the same curves
for the same seed, copy_parent born at the parent's own score, the child (and only it) retrained.

The tiny model's random weights never answer in a fence, so a `GradedPolicy` keeps its real
generation (which depends on the LoRA weights and the seed) and grades each completion by its
hash: right answer, wrong answer, or the raw (malformed) text. Rewards then vary, TRR++ advantages
are non-zero and the updates really train the child.
"""

import zlib

import pytest
import torch

from populora_nb.buffers import TaskBuffer
from populora_nb.config import load_config
from populora_nb.lowrank import LoRAPair
from populora_nb.matchmaking import Rating
from populora_nb.model.policy import LoRAPolicy
from populora_nb.operators import OPERATORS
from populora_nb.prompts import render, solve_prompt
from populora_nb.records import RunDir, write_json
from populora_nb.solve_batches import worked_examples
from populora_nb.state import RunState, initial_state
from populora_nb.tasks import Task
from populora_nb.verify import Verifier
from studies.retention import (
    draw_tasks,
    fittest,
    load_population,
    retention_curves,
    retention_pool,
    run_retention,
    student_train_and_score,
    teacher_train_and_score,
)

BLOCK = {"code_o": "output", "code_i": "input", "code_f": "python"}


class GradedPolicy(LoRAPolicy):
    answers: dict[str, tuple[str, str]]  # set by the fixture: rendered solve prompt -> (right answer, wrong answer)

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        sampled = super().generate(member_ids, prompts, max_new_tokens, seed)
        out = []
        for prompt, c in zip(prompts, sampled):
            if prompt not in self.answers:
                out.append(c)
                continue
            grade = zlib.crc32(c.text.encode()) % 3
            out.append(c if grade == 2 else self.answers[prompt][grade])  # a written answer: no sampled ids
        return out


def grade_answers(pool, examples, tokenizer, fmt):
    answers = {}
    for t in pool:
        right = {"code_o": t.outputs[0], "code_i": t.inputs[0], "code_f": t.program}[t.kind]
        wrong = "def f(*a):\n    return None" if t.kind == "code_f" else "'no such value'"
        prompt = render(solve_prompt(t, examples.get(t.kind)), tokenizer, fmt)
        answers[prompt] = tuple(f"```{BLOCK[t.kind]}\n{a}\n```" for a in (right, wrong))
    return answers


@pytest.fixture(scope="module")
def config():
    # 4 new tokens: the graded policy only needs the sampled text to depend on the weights.
    return load_config("tiny", {"sampling.solve_max_new_tokens": 4, "sampling.propose_max_new_tokens": 4})


@pytest.fixture(scope="module")
def verifier():
    with Verifier(timeout_s=2.0, workers=1) as v:
        yield v


@pytest.fixture(scope="module")
def setup(config, verifier, tiny_base):
    state = initial_state(config, verifier)
    policy = GradedPolicy.create(config, list(state.roster.items()), base=tiny_base)
    gen = torch.Generator().manual_seed(7)
    for name in ("S0", "S1"):  # "trained" parents: far enough from the base to steer sampling
        trained = {
            m: LoRAPair(p.A, torch.randn(p.B.shape, generator=gen) * 0.3) for m, p in policy.factors(name).items()
        }
        policy.population.set_factors(name, trained)
    pool = retention_pool(state.buffers, config.tasks.kinds)
    examples = worked_examples(state.buffers)
    policy.answers = grade_answers(pool, examples, policy.tokenizer, config.tasks.prompt_format)
    return policy, state, pool, examples


def make_tas(setup, config, verifier, seed=0):
    policy, _, pool, examples = setup
    return student_train_and_score(
        policy, verifier, config, pool, member="S0", tasks_per_step=2, rollouts=2, seed=seed, examples=examples
    )


# ---- pure pieces ---------------------------------------------------------------------------------


def _task(i):
    return Task("code_o", f"def f(x):\n    return x + {i}", ("1",), (str(1 + i),))


def test_pool_is_the_runs_tasks_else_the_seeds():
    buf = TaskBuffer("code_o")
    buf.add(_task(0), seed=True)
    assert retention_pool({"code_o": buf}, ("code_o",)) == [_task(0)]
    buf.add(_task(1))
    buf.add(_task(2))
    assert retention_pool({"code_o": buf, "code_i": TaskBuffer("code_i")}, ("code_o", "code_i")) == [_task(1), _task(2)]
    with pytest.raises(ValueError, match="no tasks"):
        retention_pool({"code_i": TaskBuffer("code_i")}, ("code_o", "code_i"))


def test_draws_depend_on_seed_and_step_only():
    pool = [_task(i) for i in range(20)]
    assert draw_tasks(pool, 3, seed=1, step=4) == draw_tasks(pool, 3, seed=1, step=4)
    assert len({tuple(t.program for t in draw_tasks(pool, 3, seed=1, step=s)) for s in range(5)}) > 1
    assert len(draw_tasks(pool[:2], 3, seed=1, step=0)) == 2


def test_fittest_ranks_a_role_by_conservative_skill():
    roster = {"T0": "teacher", "S0": "student", "S1": "student", "S2": "student"}
    ratings = {"T0": Rating(40, 1), "S0": Rating(30, 8), "S1": Rating(25, 1), "S2": Rating(26, 1)}
    assert fittest(roster, ratings, "student") == ["S2", "S1", "S0"]  # S0: 30 - 24 is weakest
    assert fittest(roster, {}, "student") == ["S0", "S1", "S2"]  # unrated: roster order
    assert fittest(roster, ratings, "agent") == []


# ---- on the tiny model ---------------------------------------------------------------------------


@pytest.mark.slow
def test_curves_repeat_for_a_seed_and_copy_parent_starts_at_the_parent(setup, config, verifier):
    policy = setup[0]
    parent, partner = policy.factors("S0"), policy.factors("S1")
    others = {m: policy.factors(m) for m in ("S1", "T0")}
    own = make_tas(setup, config, verifier)(parent, 0)
    assert len(own) == 1
    ops = ("full_gaussian", "dare", "copy_parent")
    first = retention_curves(
        parent, partner, train_and_score=make_tas(setup, config, verifier), num_steps=2, operators=ops
    )
    assert list(first) == list(ops) and all(len(c) == 3 for c in first.values())
    trained = policy.factors("S0")
    again = retention_curves(
        parent, partner, train_and_score=make_tas(setup, config, verifier), num_steps=2, operators=ops
    )
    assert again == first
    # copy_parent runs after two other children trained in the same slot: nothing of theirs leaks.
    assert first["copy_parent"][0] == own[0]
    # The graded rewards vary, so the child really trained: its slot moved and no other slot did.
    assert len({s for c in first.values() for s in c}) > 1
    assert any(not torch.equal(trained[m].B, parent[m].B) for m in parent)
    assert all(torch.equal(policy.factors(n)[m].B, f[m].B) for n, f in others.items() for m in f)


def test_run_retention_gives_every_operator_n_plus_one_scores(config, verifier, tiny_base):
    curves = run_retention(config, None, n_steps=1, seed=3, base=tiny_base, verifier=verifier, tasks_per_step=1)
    assert list(curves) == list(OPERATORS)
    assert all(len(c) == 2 and all(-1.0 <= s <= 1.0 for s in c) for c in curves.values())


def test_teacher_variant_trains_only_the_teacher(setup, config, verifier):
    policy, state, _, _ = setup
    student = {m: p.B.clone() for m, p in policy.factors("S1").items()}
    tas = teacher_train_and_score(policy, verifier, config, state.buffers, member="T0", student="S1", seed=0)
    scores = tas(policy.factors("T0"), 1)
    assert len(scores) == 2 and all(-1.0 <= s <= 1.0 for s in scores)
    assert all(torch.equal(policy.factors("S1")[m].B, b) for m, b in student.items())


def test_load_population_reads_the_latest_checkpoint(config, verifier, tiny_base, tmp_path):
    state = initial_state(config, verifier)
    policy = LoRAPolicy.create(config, list(state.roster.items()), base=tiny_base)
    marked = {m: LoRAPair(p.A, torch.full_like(p.B, 0.01)) for m, p in policy.factors("S1").items()}
    policy.population.set_factors("S1", marked)
    state = RunState(
        step=2, roster=state.roster, buffers=state.buffers, ratings={**state.ratings, "S1": Rating(30.0, 1.0)}
    )
    run = RunDir.create(tmp_path / "population", config)
    tmp = run.begin_checkpoint(2)
    policy.save(tmp / "policy")
    write_json(tmp / "state.json", state.to_json())
    run.commit_checkpoint(tmp, 2)

    loaded, loaded_state = load_population(config, run.path, verifier, base=tiny_base)
    assert fittest(loaded_state.roster, loaded_state.ratings, "student")[0] == "S1"
    assert all(torch.equal(loaded.factors("S1")[m].B, p.B) for m, p in marked.items())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_population(config, tmp_path / "empty", verifier, base=tiny_base)


def test_plot_draws_controls_dashed():
    import matplotlib

    matplotlib.use("Agg")
    from populora_nb.analysis.plots import plot_retention

    ax = plot_retention({"full_gaussian": [-1, -0.5, 0], "copy_parent": [0, 0, 0.5], "linear_0_5": [-1, 0, 0]}).axes[0]
    style = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert style["copy_parent"] == style["linear_0_5"] == "--"
    assert style["M4 full_gaussian"] == "-"
