"""One step run stage by stage, as notebooks 02 and 03 run it by hand (`populora_nb.stages`, one
function per stage): it is the loop's step (`step.population_step` and `step.baseline_step` call the same
stages in the same order), and the tables of its products agree with the rules."""

import copy
import dataclasses
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripted import ScriptedLoRA, ScriptedPolicy, spread_members

import populora_nb.stages as stages
from populora_nb.analysis import step_tables
from populora_nb.config import load_config
from populora_nb.copies import mark_copies
from populora_nb.matchmaking import game_rule
from populora_nb.model.policy import LoRAPolicy
from populora_nb.rewards import azr_proposer_reward, student_reward, teacher_reward
from populora_nb.solve_batches import assignments, buffer_jobs, learnability_jobs, solve_jobs, worked_examples
from populora_nb.state import initial_state, roster_for
from populora_nb.step import baseline_step, evolve, population_step
from populora_nb.tasks import Task

POP = {"run.agent": "population", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2}
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def by_hand(policy, verifier, state, c):
    """Notebook 03's cells, one stage each (a test below keeps the notebook calling these stages)."""
    h = SimpleNamespace(ratings_before=dict(state.ratings))
    h.partner, h.win_probabilities = stages.pair(state, c)
    h.proposals = stages.propose(policy, state.teachers, state.buffers, c, state.step, c.rl.teacher_proposals)
    h.proposals = [dataclasses.replace(p, solver=h.partner[p.proposer]) for p in h.proposals]
    h.proposals = stages.validate(verifier, h.proposals, c.tasks.code_f_inputs)
    h.proposals = mark_copies(h.proposals, state.seen, c.tasks.reject_copies, c.tasks.reject_repeats)
    mine = assignments(h.partner, h.proposals, state.students)
    jobs = solve_jobs(
        mine, h.proposals, state.buffers, c, state.step, c.rl.student_tasks, c.rl.student_rollouts_trained
    )
    h.attempts = stages.solve(policy, verifier, jobs, c, state.step, worked_examples(state.buffers))
    h.proposals = stages.solve_rates(h.proposals, h.attempts)
    h.samples = stages.reward(h.proposals, h.attempts, teacher_reward, c.rl.advantage_scale)
    h.update_stats = stages.update(policy, h.samples, list(state.roster))
    h.matches, state.ratings = stages.rate(state.ratings, h.proposals, c)
    stages.grow(state.buffers, h.proposals, c.tasks.one_task_per_program)
    return h


def stage_calls(source: str) -> list[str]:
    """The stages a piece of code calls, in order: `stages.X(`, the copy classes, the solve batches."""
    return re.findall(r"\b(stages\.\w+|mark_copies|solve_jobs|learnability_jobs|buffer_jobs|evolve)\(", source)


def _by_hand_section(name: str) -> str:
    text = (NOTEBOOKS / name).read_text()
    return text.split("## One step by hand", 1)[1].split("The scratch step is done", 1)[0]


@pytest.mark.parametrize(
    ("notebook", "step"), [("03_population.py", population_step), ("02_azr_baseline.py", baseline_step)]
)
def test_the_notebooks_call_the_loops_stages_in_its_order(notebook, step):
    """A stage added to (or dropped from) the loop's step without the notebook fails here."""
    loop = stage_calls(inspect.getsource(step))
    if step is baseline_step:  # the notebook follows AZR's solver (the default `run.baseline_solver`)
        loop.remove("solve_jobs")  # the "own_rollouts" ablation's batch
    else:
        loop.append("evolve")  # the notebook runs one evolution event after the step, as the loop does
    assert stage_calls(_by_hand_section(notebook)) == loop


def test_by_hand_is_the_loops_step(verifier, tokenizer):
    cfg = load_config("tiny", POP)
    state = initial_state(cfg, verifier)
    kept = copy.deepcopy(state)
    hand = by_hand(ScriptedPolicy(tokenizer), verifier, copy.deepcopy(state), cfg)
    assert state.to_json() == kept.to_json()  # the stages worked on their own copy
    # the loop's step on the real state makes the same proposals, solve rates, advantages and ratings
    out = population_step(ScriptedPolicy(tokenizer), verifier, state, cfg)
    assert [(p.proposer, p.solver, p.completion, p.rho) for p in out.proposals] == [
        (p.proposer, p.solver, p.completion, p.rho) for p in hand.proposals
    ]
    assert out.matches == hand.matches and state.ratings != kept.ratings
    assert [s.advantage for s in out.samples] == [s.advantage for s in hand.samples]


def test_tables_follow_the_rules(verifier, tokenizer):
    cfg = load_config("tiny", {**POP, "rl.rollouts": 3})
    state = initial_state(cfg, verifier)
    hand = by_hand(ScriptedPolicy(tokenizer), verifier, state, cfg)
    # the pairing: every teacher has a matched student and a win probability against each student
    pairing = step_tables.pairing_table(hand.win_probabilities, hand.partner)
    assert list(pairing.index) == state.teachers
    assert set(pairing["matched"]) <= set(state.students)
    probs = pairing.drop(columns="matched").to_numpy()
    assert ((probs > 0) & (probs < 1)).all()
    # proposals: a verdict per proposal, with the verifier's reason for an invalid one
    proposals = step_tables.proposals_table(hand.proposals)
    assert len(proposals) == len(hand.proposals)
    assert set(proposals["verdict"]) == {"valid", "invalid"}  # the scripted teachers write both
    assert (proposals.loc[proposals["verdict"] == "invalid", "reason"].str.startswith("banned_import")).all()
    # rollouts: rho is the passed count over the rollouts, for every fresh task
    rollouts = step_tables.rollouts_table(hand.attempts, hand.proposals)
    fresh = rollouts[rollouts["task"].str.startswith("proposal")]
    assert len(fresh) == sum(isinstance(p.result, Task) for p in hand.proposals) > 0
    assert (fresh["k"] == cfg.rl.rollouts).all()
    assert (fresh["ρ"] == (fresh["passed"] / fresh["k"]).round(2)).all()
    assert set(rollouts.loc[~rollouts["task"].str.startswith("proposal"), "ρ"]) <= {step_tables.NO_RHO}
    assert (rollouts["rollouts"].str.len() == rollouts["k"]).all()
    # rewards: a teacher's follow PopuLoRA's rule from its task's verdict and rho; a student's its status
    rewarded = [p for p in hand.proposals if not (isinstance(p.result, Task) and p.rho is None)]
    for p, s in zip(rewarded, hand.samples):
        assert s.member == p.proposer and s.reward == teacher_reward(isinstance(p.result, Task), p.rho)
    trained = [a for a in hand.attempts if a.train]
    assert [s.reward for s in hand.samples if s.group[1] == "solve"] == [student_reward(a.status) for a in trained]
    rewards = step_tables.rewards_table(hand.samples)
    assert rewards["samples"].sum() == len(hand.samples)
    assert set(rewards["role"]) == {"teacher", "student"}
    # advantages: centred within each group
    adv = step_tables.advantages_table(hand.samples)
    assert adv["n"].sum() == len(hand.samples)
    assert adv["advantage mean"].abs().max() == pytest.approx(0, abs=1e-6)
    # the update: one row per member that had samples
    assert set(step_tables.update_table(hand.update_stats, state.roster)["member"]) == {s.member for s in hand.samples}
    # ratings: moved exactly for the members that played, in the direction of their games
    threshold = cfg.matchmaking.win_threshold
    ratings = step_tables.ratings_table(hand.matches, hand.ratings_before, state.ratings, state.roster, threshold)
    assert list(ratings["member"]) == list(state.roster)
    for _, r in ratings.iterrows():
        games = r["games won"] + r["games lost"]
        assert (r["Δμ"] == 0) == (games == 0), r["member"]
        if games and r["games won"] == 0:
            assert r["Δμ"] < 0
        if games and r["games lost"] == 0:
            assert r["Δμ"] > 0
    teacher = ratings[ratings["role"] == "teacher"].iloc[0]
    rule = game_rule(hand.matches[0], "teacher", threshold)
    assert rule.split(":")[0] in teacher["rules (matches)"]


def test_the_agent_step_uses_azrs_reward_and_no_ratings(verifier, tokenizer):
    cfg = load_config("tiny", {**POP, "run.agent": "baseline"})
    state = initial_state(cfg, verifier)
    out = baseline_step(ScriptedPolicy(tokenizer), verifier, state, cfg)
    assert out.matches == [] and {p.solver for p in out.proposals} == {"agent"}
    for p in out.proposals:
        valid = isinstance(p.result, Task)
        mine = [s for s in out.samples if s.group[1] == "propose" and s.completion == p.completion]
        assert mine and mine[0].reward == azr_proposer_reward(valid, p.rho)
    assert set(step_tables.rewards_table(out.samples)["role"]) == {"proposer", "solver"}
    learn = step_tables.rollouts_table(out.attempts, out.proposals)
    assert set(learn.loc[~learn["trained on"], "task"]) <= {f"proposal {i}" for i in range(len(out.proposals))}
    # AZR's batches: learnability rollouts of each valid proposal (not trained on), buffer tasks trained on
    fresh = learnability_jobs("agent", out.proposals, cfg.rl.rollouts)
    assert sum(not a.train for a in out.attempts) == sum(j.rollouts for j in fresh)
    assert sum(a.train for a in out.attempts) == len(buffer_jobs("agent", initial_state(cfg, verifier).buffers, cfg, 0))


def test_an_evolution_event_replaces_the_weakest_of_each_role(verifier, tiny_base):
    cfg = load_config("tiny", {**POP, "run.steps": 1})
    lora = LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base)
    spread_members(lora, 0.05, seed=1)
    policy, state = ScriptedLoRA(lora), initial_state(cfg, verifier)
    population_step(policy, verifier, state, cfg)
    births = evolve(policy, state, cfg)
    assert len(births) == 2 * cfg.evolution.replace_per_role  # one event: the weakest of each role replaced
    table = step_tables.evolution_table(births)
    assert set(table["role"]) == {"teacher", "student"}
    for b, (_, row) in zip(births, table.iterrows()):
        assert row["child"] in state.roster and row["replaced"] not in state.roster
        assert len(b["parent_changes"]) == len(b["parents"]) and all(c > 0 for c in b["parent_changes"])


def test_the_pairing_figure_boxes_each_teachers_student(verifier):
    cfg = load_config("tiny", POP)
    state = initial_state(cfg, verifier)
    partner, win = stages.pair(state, cfg)
    fig = step_tables.plot_pairing(win, partner)
    assert len(fig.axes[0].patches) == len(state.teachers)
