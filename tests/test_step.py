"""One step run stage by stage (`populora_nb.step.Step`), as notebooks 02 and 03 run it by hand: it is
the loop's step, it leaves the run's state and directory alone, and its tables agree with the rules."""

import copy

import pytest
from scripted import ScriptedLoRA, ScriptedPolicy, spread_members

from populora_nb.analysis import step_tables
from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.matchmaking import game_rule
from populora_nb.model.policy import LoRAPolicy
from populora_nb.records import RunDir, read_json
from populora_nb.rewards import azr_proposer_reward, student_reward, teacher_reward
from populora_nb.state import RunState, initial_state, roster_for
from populora_nb.step import Step, population_step
from populora_nb.tasks import Task

POP = {"run.agent": "population", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2}


def _tree(path):
    return sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*"))


def test_by_hand_is_the_loops_step_on_a_copy(verifier, tokenizer):
    cfg = load_config("tiny", POP)
    state = initial_state(cfg, verifier)
    kept = copy.deepcopy(state)
    hand = Step.by_hand(ScriptedPolicy(tokenizer), verifier, state, cfg)
    hand.pair(), hand.propose(), hand.validate(), hand.solve(), hand.reward(), hand.update(), hand.rate(), hand.grow()
    # the run's state is untouched: same step, ratings, buffers, fingerprints
    assert state.to_json() == kept.to_json()
    # the loop's step on the real state makes the same proposals, solve rates and ratings
    out = population_step(ScriptedPolicy(tokenizer), verifier, state, cfg)
    assert [(p.proposer, p.solver, p.completion, p.rho) for p in out.proposals] == [
        (p.proposer, p.solver, p.completion, p.rho) for p in hand.out.proposals
    ]
    assert state.ratings == hand.state.ratings and state.ratings != kept.ratings
    assert [s.advantage for s in out.samples] == [s.advantage for s in hand.out.samples]


def test_tables_follow_the_rules(verifier, tokenizer):
    cfg = load_config("tiny", {**POP, "rl.rollouts": 3})
    hand = Step.by_hand(ScriptedPolicy(tokenizer), verifier, initial_state(cfg, verifier), cfg)
    hand.run()
    # the pairing: every teacher has a matched student and a win probability against each student
    pairing = step_tables.pairing_table(hand)
    assert list(pairing.index) == hand.state.teachers
    assert set(pairing["matched"]) <= set(hand.state.students)
    probs = pairing.drop(columns="matched").to_numpy()
    assert ((probs > 0) & (probs < 1)).all()
    # proposals: a verdict per proposal, with the verifier's reason for an invalid one
    proposals = step_tables.proposals_table(hand)
    assert len(proposals) == len(hand.out.proposals)
    assert set(proposals["verdict"]) == {"valid", "invalid"}  # the scripted teachers write both
    assert (proposals.loc[proposals["verdict"] == "invalid", "reason"].str.startswith("banned_import")).all()
    # rollouts: rho is the passed count over the rollouts, for every fresh task
    rollouts = step_tables.rollouts_table(hand)
    fresh = rollouts[rollouts["task"].str.startswith("proposal")]
    assert len(fresh) == sum(isinstance(p.result, Task) for p in hand.out.proposals) > 0
    assert (fresh["k"] == cfg.rl.rollouts).all()
    assert (fresh["ρ"] == (fresh["passed"] / fresh["k"]).round(2)).all()
    assert set(rollouts.loc[~rollouts["task"].str.startswith("proposal"), "ρ"]) <= {step_tables.NO_RHO}
    assert (rollouts["rollouts"].str.len() == rollouts["k"]).all()
    # rewards: a teacher's follow PopuLoRA's rule from its task's verdict and rho; a student's its status
    rewarded = [p for p in hand.out.proposals if not (isinstance(p.result, Task) and p.rho is None)]
    for p, s in zip(rewarded, hand.out.samples):
        assert s.member == p.proposer and s.reward == teacher_reward(isinstance(p.result, Task), p.rho)
    trained = [a for a in hand.out.attempts if a.train]
    assert [s.reward for s in hand.out.samples if s.group[1] == "solve"] == [student_reward(a.status) for a in trained]
    rewards = step_tables.rewards_table(hand)
    assert rewards["samples"].sum() == len(hand.out.samples)
    # advantages: centred within each group
    adv = step_tables.advantages_table(hand)
    assert adv["n"].sum() == len(hand.out.samples)
    assert adv["advantage mean"].abs().max() == pytest.approx(0, abs=1e-6)
    # the update: one row per member that had samples
    assert set(step_tables.update_table(hand)["member"]) == {s.member for s in hand.out.samples}
    # ratings: moved exactly for the members that played, in the direction of their games
    ratings = step_tables.ratings_table(hand)
    assert list(ratings["member"]) == list(hand.state.roster)
    for _, r in ratings.iterrows():
        games = r["games won"] + r["games lost"]
        assert (r["Δμ"] == 0) == (games == 0), r["member"]
        if games and r["games won"] == 0:
            assert r["Δμ"] < 0
        if games and r["games lost"] == 0:
            assert r["Δμ"] > 0
    teacher = ratings[ratings["role"] == "teacher"].iloc[0]
    rule = game_rule(hand.out.matches[0], "teacher", cfg.matchmaking.win_threshold)
    assert rule.split(":")[0] in teacher["rules (matches)"]


def test_the_agent_step_uses_azrs_reward_and_no_ratings(verifier, tokenizer):
    cfg = load_config("tiny", {**POP, "run.agent": "baseline"})
    hand = Step.by_hand(ScriptedPolicy(tokenizer), verifier, initial_state(cfg, verifier), cfg)
    hand.run()
    assert hand.partner == {} and hand.out.matches == []
    assert step_tables.pairing_table(hand).empty and step_tables.ratings_table(hand).empty
    for p in hand.out.proposals:
        valid = isinstance(p.result, Task)
        mine = [s for s in hand.out.samples if s.group[1] == "propose" and s.completion == p.completion]
        assert mine and mine[0].reward == azr_proposer_reward(valid, p.rho)
    learn = step_tables.rollouts_table(hand)
    assert set(learn.loc[~learn["trained on"], "task"]) <= {f"proposal {i}" for i in range(len(hand.out.proposals))}


def test_an_evolution_event_by_hand_writes_nothing_into_the_run(tmp_path, verifier, tiny_base):
    cfg = load_config("tiny", {**POP, "run.steps": 1})

    def policy():
        lora = LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base)
        spread_members(lora, 0.05, seed=1)
        return ScriptedLoRA(lora)

    rd = run(cfg, tmp_path / "run", policy=policy(), verifier=verifier, progress=False)
    before = _tree(rd.path)
    step, path = rd.verified_checkpoint()
    state = RunState.from_json(read_json(path / "state.json"))
    kept = state.to_json()
    hand = Step.by_hand(policy(), verifier, state, cfg)
    hand.run()
    births = hand.evolve()
    assert _tree(rd.path) == before and state.to_json() == kept
    assert len(births) == 2 * cfg.evolution.replace_per_role  # one event: the weakest of each role replaced
    table = step_tables.evolution_table(hand)
    assert set(table["role"]) == {"teacher", "student"}
    for b, (_, row) in zip(births, table.iterrows()):
        assert row["child"] in hand.state.roster and row["replaced"] not in hand.state.roster
        assert len(b["parent_changes"]) == len(b["parents"]) and all(c > 0 for c in b["parent_changes"])
    assert RunDir(rd.path).verified_checkpoint()[0] == step


def test_the_pairing_figure_boxes_each_teachers_student(verifier, tokenizer):
    cfg = load_config("tiny", POP)
    hand = Step.by_hand(ScriptedPolicy(tokenizer), verifier, initial_state(cfg, verifier), cfg)
    hand.pair()
    fig = step_tables.plot_pairing(hand)
    assert len(fig.axes[0].patches) == len(hand.state.teachers)
