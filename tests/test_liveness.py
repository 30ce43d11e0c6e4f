"""The mechanism counts read before any curve: teacher wins, the learnable band, surviving children."""

import json

from populora_nb.analysis.liveness import liveness, played_tasks
from populora_nb.config import load_config, save_config
from tests.scripted import ScriptedLoRA


def _run(path, matches, lineage, threshold=1.0):
    path.mkdir()
    save_config(load_config("tiny", {"matchmaking.win_threshold": threshold}), path / "config.yaml")
    (path / "matches.jsonl").write_text("".join(json.dumps(m) + "\n" for m in matches))
    (path / "lineage.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lineage))
    return path


def _match(rho, valid=True):
    return {"step": 0, "teacher": "T0", "student": "S0", "kind": "code_o", "valid": valid, "rho": rho}


def _birth(child, replaced, at):
    return {"child": child, "replaced": replaced, "birth_step": at, "role": "teacher", "parents": ["T0"]}


def test_a_run_whose_teachers_never_win_and_whose_children_die_is_not_live(tmp_path):
    # the earlier rules at 2 rollouts: rho in {0, 1/2, 1}, teacher band 0 < rho < 1/2
    matches = [_match(0.0), _match(0.5), _match(1.0), _match(None, valid=False)]
    lineage = [_birth("c1", "T1", 2), _birth("c2", "c1", 4)]
    live = liveness(_run(tmp_path / "dead", matches, lineage, threshold=0.5))
    assert (live.valid_matches, live.played, live.contested, live.learnable) == (3, 3, 0, 1)
    assert (live.children, live.judged_next, live.survived_next) == (2, 1, 0)
    assert "no teacher ever won a game" in live.summary() and "no child survived" in live.summary()


def test_a_live_run_counts_its_wins_band_and_survivors(tmp_path):
    matches = [_match(0.25), _match(0.75), _match(0.0), _match(1.0)]
    lineage = [_birth("c1", "T1", 2), _birth("c2", "T2", 4), _birth("c3", "c2", 6)]
    live = liveness(_run(tmp_path / "live", matches, lineage))
    assert live.contested == 2 and live.teacher_win_share == 0.5 and live.band_share == 0.5
    assert (live.judged_next, live.survived_next) == (2, 1)  # c1 lived through step 4; c2 died at 6
    assert live.summary().endswith("Every part acted.")


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


def test_a_tiny_population_run_is_live(tmp_path, tiny_base):
    """The tiny preset's settings, scripted play: teachers win games on contested tasks and a child
    lives through the evolution event after its birth (issue #27: none did under the earlier rules)."""
    from populora_nb.loop import run
    from populora_nb.model.policy import LoRAPolicy
    from populora_nb.state import roster_for

    cfg = load_config("tiny", {"run.steps": 6, "tasks.kinds": ["code_o", "code_i"], "run.checkpoint_every": 0})
    policy = HalfSolvingLoRA(LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base))
    rd = run(cfg, tmp_path / "run", policy=policy, progress=False)
    live = liveness(rd.path)
    assert live.contested > 0 and live.teacher_win_share > 0.1, live
    assert live.survived_next >= 1, live
    assert live.summary().endswith("Every part acted.")


def _task(rho, valid=True):
    return {"step": 0, "kind": "code_i", "valid": valid, "solve_rate": rho}


def test_the_protocol_report_counts_each_seed_and_names_the_seeds_that_were_not_live(tmp_path):
    """Issue #31: the seed protocol states, per seed, the band share of both runs (the baseline from
    its task records: it plays no matches), the teacher wins and the surviving children, and names a
    seed whose population mechanism did not act."""
    from populora_nb.analysis.liveness import protocol_liveness

    def seed(name, matches, lineage):
        exp = tmp_path / name
        exp.mkdir()
        pop = _run(exp / "population", matches, lineage)
        (exp / "baseline").mkdir()
        base_tasks = [_task(0.5), _task(0.0), _task(1.0), _task(None), _task(0.25, valid=False)]
        (exp / "baseline" / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in base_tasks))
        (pop / "tasks.jsonl").write_text("".join(json.dumps(_task(m["rho"])) + "\n" for m in matches))
        return exp

    live = seed("seed0", [_match(0.25), _match(0.0)], [_birth("c1", "T1", 2), _birth("c2", "T2", 4)])
    dead = seed("seed1", [_match(0.25), _match(0.0)], [_birth("c1", "T1", 2), _birth("c2", "c1", 4)])
    lines, records = protocol_liveness([live, dead])
    text = "\n".join(lines)
    assert "| seed0 | 33% (1/3) [6%, 79%] | 50% (1/2) [9%, 91%] | 50% (1/2) [9%, 91%] | 1 of 1 (2 born) |" in text
    assert "| seed1 |" in text and "0 of 1 (2 born)" in text
    assert text.endswith("Not live in seed1: read those seeds' population curves as produced by construction.")
    assert records[0]["baseline_band"] == [1, 3] and records[1]["population"]["survived_next"] == 0
    assert protocol_liveness([live])[0][-1].startswith("Every seed's population mechanism acted")
    (tmp_path / "seed3" / "baseline").mkdir(parents=True)  # a protocol still in its baseline
    assert protocol_liveness([tmp_path / "seed3"])[0][-1] == "No population records in seed3."
    young = seed("seed2", [_match(0.25)], [_birth("c1", "T1", 2)])  # a run stopped before its next event
    assert protocol_liveness([young])[0][-1] == (
        "No child has met an evolution event after its birth in seed2: survival not measured."
    )


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
