"""The fixed difficulty probe (issue #28): one frozen solver scores every proposer's tasks on one
scale, from the same prompts under the same draws, and nothing it makes is trained on."""

import dataclasses
import random

import pytest

from populora_nb.config import ProbeConfig, load_config
from populora_nb.probe import PROBE_SOLVER, probe_askers, probe_due, probe_metrics, probe_rows, run_probe
from populora_nb.state import seed_buffers

EASY = "```python\ndef f(x):\n    return x + 1\n```\n```input\n{n}\n```"
HARD = "```python\ndef f(x):\n    return (x * 7 + 3) % 11\n```\n```input\n{n}\n```"
BROKEN = "```python\nimport os\ndef f(x):\n    return os.getcwd()\n```\n```input\n1\n```"


class KnownDifficulty:
    """Proposers of known difficulty: T0 writes tasks the frozen solver always solves, T1 tasks it
    solves with probability 1/4 per rollout (seeded by the call's seed), T2 nothing valid. Only the
    probe's solver answers; a solve prompt from any other member is a bug in the probe."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.solvers: set[str] = set()

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        rng = random.Random(seed)
        out = []
        for i, (m, p) in enumerate(zip(member_ids, prompts)):
            if "Write a new Python puzzle" in p:
                template = {"T0": EASY, "T1": HARD}.get(m, BROKEN)
                out.append(template.format(n=i % 5 + 2))
            elif "What does f return" in p:
                self.solvers.add(m)
                question = p.split("```python\n")[-1]
                x = int(question.split("```input\n")[-1].split("\n")[0])
                easy = "return x + 1" in question
                right = x + 1 if easy else (x * 7 + 3) % 11
                solved = easy or rng.random() < 0.25
                out.append(f"```output\n{right if solved else -99}\n```")
            else:
                out.append("no")
        return out


@pytest.fixture(scope="module")
def probed(verifier, tokenizer):
    config = load_config("tiny", {"tasks.kinds": ["code_o"], "probe.every": 2, "probe.prompts_per_kind": 18})
    policy = KnownDifficulty(tokenizer)
    refs = seed_buffers(config, verifier)
    before = {k: len(b) for k, b in refs.items()}
    first = run_probe(policy, verifier, ["T0", "T1", "T2"], refs, config)
    again = run_probe(policy, verifier, ["T0", "T1", "T2"], refs, config)
    return config, policy, refs, before, first, again


def test_the_probe_orders_proposers_by_the_difficulty_they_were_built_with(probed):
    config, policy, *_, first, _ = probed
    easy, hard, broken = (probe_metrics(first, m) for m in ("T0", "T1", "T2"))
    assert easy["probe/valid_rate"] == hard["probe/valid_rate"] == 1.0 and broken["probe/valid_rate"] == 0.0
    assert easy["probe/rho"] == 1.0 and easy["probe/band_rate"] == 0.0
    # 6 tasks x 8 rollouts at p = 1/4: rho ~ 0.25, far below the easy proposer's 1.0
    assert 0.05 < hard["probe/rho"] < 0.5 and hard["probe/band_rate"] > 0.5
    assert broken["probe/rho"] is None and broken["probe/n_asked"] == 6.0
    assert policy.solvers == {PROBE_SOLVER}  # the frozen solver alone answers


def test_every_event_asks_the_same_prompts_under_the_same_draws(probed):
    *_, first, again = probed
    assert [p.prompt for p in first] == [p.prompt for p in again]
    assert [p.rho for p in first] == [p.rho for p in again]
    rows = probe_rows(4, first, probed[0])
    assert [r["prompt_index"] for r in rows] == list(range(18)) and rows[0]["rollouts"] == 8
    assert {r["solver"] for r in rows} == {PROBE_SOLVER} and rows[0]["step"] == 4


def test_both_runs_ask_the_same_prompts_as_many_at_each_event(verifier, tokenizer):
    """The baseline's one agent and a population's four teachers answer the same fixed prompts, as many,
    in the same order: equal task counts per run and event (prompt j to proposer j mod n)."""
    config = load_config("tiny", {"tasks.kinds": ["code_o", "code_i"], "probe.prompts_per_kind": 6})
    refs = seed_buffers(config, verifier)
    policy = KnownDifficulty(tokenizer)
    runs = {"baseline": ["T0"], "population": ["T0", "T0", "T0", "T0"]}  # the same adapter at step 0
    probes = {run: run_probe(policy, verifier, askers, refs, config) for run, askers in runs.items()}
    base, pop = probes["baseline"], probes["population"]
    assert len(base) == len(pop) == 12 and [p.prompt for p in base] == [p.prompt for p in pop]
    assert [p.kind for p in base] == ["code_o", "code_i"] * 6
    assert [(p.result, p.rho) for p in base] == [(p.result, p.rho) for p in pop]  # step 0: one measurement
    assert len(run_probe(policy, verifier, ["T0", "T1", "T2", "T3"], refs, config)) == 12  # not 4 x 12
    rows = probe_rows(0, base, config)
    assert [r["prompt_index"] for r in rows] == [j for j in range(6) for _ in range(2)]
    assert probe_askers(["T0", "T1", "T2", "T3"], config) == ["T0", "T1", "T2", "T3", "T0", "T1"]
    with pytest.raises(ValueError, match="at least one proposer"):
        probe_askers([], config)


def test_the_probe_stores_nothing(probed):
    _, _, refs, before, *_ = probed
    assert {k: len(b) for k, b in refs.items()} == before


def test_the_probe_runs_every_n_steps_from_step_zero():
    config = load_config("tiny", {"probe.every": 3})
    assert [s for s in range(8) if probe_due(s, config)] == [0, 3, 6]
    assert not any(probe_due(s, load_config("tiny", {"probe.every": 0})) for s in range(8))


def test_a_run_records_its_probe_and_never_trains_on_it(tmp_path, tiny_base):
    """A tiny population run with the probe on (scripted text on a real tiny population): probe.jsonl
    rows at each probe step, teachers' metrics carry probe/ keys there, no update is the frozen
    solver's and no sample is a probe prompt's."""
    from populora_nb.loop import run
    from populora_nb.model.policy import LoRAPolicy
    from populora_nb.records import RunDir
    from populora_nb.state import roster_for
    from tests.scripted import ScriptedLoRA

    class Probing(ScriptedLoRA):
        def generate(self, member_ids, prompts, max_new_tokens, seed):
            return super().generate(["agent"] * len(prompts), prompts, max_new_tokens, seed)

    cfg = load_config("tiny", {"run.steps": 3, "probe.every": 2, "probe.rollouts": 2, "run.checkpoint_every": 0})
    lora = LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base)
    assert PROBE_SOLVER not in lora.members and PROBE_SOLVER in lora.population.ids()
    assert all(int((f.B != 0).sum()) == 0 for f in lora.factors(PROBE_SOLVER).values())  # zero ΔW: the base
    policy = Probing(lora)
    rd = RunDir(run(cfg, tmp_path / "run", policy=policy, progress=False).path)
    rows = rd.read("probe")
    per_event = len(cfg.tasks.kinds) * cfg.probe.prompts_per_kind  # split across the teachers, not per teacher
    assert sorted({r["step"] for r in rows}) == [0, 2] and len(rows) == 2 * per_event
    assert any(r["valid"] for r in rows) and all(r["solver"] == PROBE_SOLVER for r in rows)
    teacher_rows = [r for r in rd.read("metrics") if r["role"] == "teacher"]
    assert {r["step"] for r in teacher_rows if "probe/valid_rate" in r} == {0, 2}
    assert all(r["time/probe_s"] > 0 for r in teacher_rows if "probe/valid_rate" in r)
    assert PROBE_SOLVER not in {m for m, _ in policy.updates}
    # the same run without the probe trains on exactly the same samples: the probe changes nothing
    off = Probing(LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base))
    run(dataclasses.replace(cfg, probe=ProbeConfig()), tmp_path / "off", policy=off, progress=False)
    assert _samples(off.updates) == _samples(policy.updates)


def _samples(updates):
    return [(m, [(s.prompt, s.completion, s.reward, s.advantage) for s in samples]) for m, samples in updates]


def test_the_probe_analysis_reads_a_scripted_difficulty_the_right_way_round(tmp_path):
    """Synthetic records whose probe difficulty is known (baseline easier, teachers harder over
    time): the events, the figure and the table say so; a run without a probe has no row."""
    from populora_nb.analysis.difficulty_probe import plot_probe, probe_events, probe_table
    from studies.synthetic import write_synthetic_experiment

    exp = write_synthetic_experiment(tmp_path / "exp", n_steps=40, seed=0)
    base, pop = probe_events(exp / "baseline"), probe_events(exp / "population")
    assert [e.step for e in base] == list(range(0, 40, 5)) and len(pop) == 8
    assert base[-1].rho[0] > base[0].rho[0] + 0.2 and pop[-1].rho[0] < pop[0].rho[0] - 0.1
    assert pop[0].asked == 16 and 0 < pop[0].valid <= 16  # 4 teachers pooled, 4 prompts each
    table = probe_table({"baseline": exp / "baseline", "population": exp / "population", "none": tmp_path})
    assert [r[0] for r in table[1:]] == ["baseline", "population"]
    assert table[1][5].startswith("+") and table[2][5].startswith("-")  # last − first, each way round
    fig = plot_probe({"baseline": exp / "baseline", "population": exp / "population"})
    assert len(fig.axes[0].lines) == 2 and len(fig.axes[1].lines) == 2
    assert len(fig.axes[2].lines) == 5  # per run: in the band, at zero; and the floor-bound line


def test_a_probe_whose_tasks_all_sit_at_rho_zero_is_flagged_floor_bound(tmp_path):
    """And the step-0-adjusted difference at equal task counts: a population with 4x the tasks of the
    baseline but the same per-task ρ reads no difference, whatever its raw means."""
    import json

    from populora_nb.analysis.difficulty_probe import probe_events
    from studies.probe_floor import equal_count_difference, floor_bound, floor_share, probe_floor_lines

    def probe(path, rhos_by_step):
        path.mkdir(parents=True)
        rows = [
            {"step": s, "proposer": f"T{i}", "valid": True, "solve_rate": r, "prompt_index": i}
            for s, rhos in rhos_by_step.items()
            for i, r in enumerate(rhos)
        ]
        (path / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return probe_events(path)

    floor = probe(tmp_path / "a" / "baseline", {0: [0.0, 0.0], 5: [0.0, 0.0]})
    assert floor_share(floor) == (4, 4) and floor_bound(floor)
    pop = probe(tmp_path / "a" / "population", {0: [0.5] * 8, 5: [0.5, 0.5, 0.5, 0.0] * 2})
    assert not floor_bound(pop) and not floor_bound([])
    # the flag's edge: 4 of 5 at zero is at the threshold (not flagged), 5 of 6 above it
    edge = probe(tmp_path / "edge" / "baseline", {0: [0.0, 0.0, 0.0, 0.0, 0.5]})
    above = probe(tmp_path / "above" / "baseline", {0: [0.0, 0.0, 0.0, 0.0, 0.0, 0.5]})
    assert not floor_bound(edge) and floor_bound(above)
    eq = equal_count_difference(floor, pop, n_draws=200)
    assert eq.counts == (2, 2) and eq.population[0] == pytest.approx(0.5) and eq.adjusted < 0  # a fall, adjusted
    lines, records = probe_floor_lines([tmp_path / "a"])
    assert "floor-bound" in lines[6] and "Floor-bound (more than 80%" in lines[-1]
    assert records[0]["baseline"]["floor_bound"] and not records[0]["population"]["floor_bound"]
    # where the probe starts (step 0, the shared warm-up adapter): a floor there leaves no room to read a fall
    assert (records[0]["baseline"]["step0"], records[0]["population"]["step0"]) == ((0, 2, 2), (8, 0, 8))
    assert "| 0/2 / 8/8 |" in lines[6]
    assert "baseline 0/2 in 0 < ρ < 1 and 2/2 at ρ = 0 (floor-bound there); population 8/8" in lines[-1]
    assert "0/8 at ρ = 0 (not floor-bound there)" in lines[-1]


def _probe_run(path, rhos_per_event, members=("T0",)):
    """A run directory with probe events at steps 0, 10, 20, 30 (each the given valid tasks' ρ) and the
    matching ``probe/rho`` metric, as `populora_nb.probe` logs them."""
    import json

    path.mkdir(parents=True)
    probe = [
        {"step": 10 * e, "proposer": members[i % len(members)], "valid": True, "solve_rate": r, "prompt_index": i}
        for e, rhos in enumerate(rhos_per_event)
        for i, r in enumerate(rhos)
    ]
    metrics = [
        {"step": 10 * e, "member": m, "probe/rho": sum(rhos) / len(rhos)}
        for e, rhos in enumerate(rhos_per_event)
        for m in members
    ]
    (path / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probe))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))


def _probe_experiments(tmp_path, baseline_tasks, population_floor):
    """3 seeds; per event the baseline answers ``baseline_tasks`` tasks, half of them at ρ = 0, and the
    population 12 tasks, all but one at ρ = 0 when ``population_floor``, else half; the population's
    last event sits 0.2 higher than its first at every seed."""
    exps = []
    for k in range(3):
        e = tmp_path / f"seed{k}"
        base = [[0.0, 0.5] * (baseline_tasks // 2) for _ in range(4)]
        lift = [0.0, 0.0, 0.0, 0.2 + 0.01 * k]
        if population_floor:
            pop = [[0.0] * 11 + [0.5 + 4 * d] for d in lift]
        else:
            pop = [[0.0, 0.5 + 2 * d] * 6 for d in lift]
        _probe_run(e / "baseline", base, members=("agent",))
        _probe_run(e / "population", pop, members=("T0", "T1"))
        exps.append(e)
    return exps


def test_a_probe_that_is_floor_bound_or_holds_too_few_tasks_gets_no_verdict_mdd_or_holm_place(tmp_path):
    """Issue #51: a floor-bound probe, or one of fewer than MIN_PROBE_TASKS valid tasks (the committed
    baselines' 15 and 9), gives the probe ρ series no value: no verdict, no detectable-difference figure,
    no place in the Holm family; its seed's probe row shows no difference. Readable probes keep all three."""
    import math

    from populora_nb.analysis.difficulty_probe import probe_events
    from studies.power import power_row
    from studies.probe_floor import MIN_PROBE_TASKS, probe_floor_lines, probe_silence
    from studies.protocol import compare, difference_holm, difference_verdict, finding_lines

    assert MIN_PROBE_TASKS > 15
    readable = _probe_experiments(tmp_path / "readable", baseline_tasks=8, population_floor=False)  # 32 and 48 tasks
    (c,) = compare(readable, keys=("probe/rho",), n_resamples=200)
    assert c.paired and len(c.baseline) == len(c.population) == 3
    assert difference_verdict(c, difference_holm([c])["probe/rho"]) == "population higher"
    assert power_row("probe", c.baseline, c.population)["n"] == 3

    for name, tasks, floor in (("few", 4, False), ("floor", 8, True)):  # 16 baseline tasks; a floor-bound population
        exps = _probe_experiments(tmp_path / name, baseline_tasks=tasks, population_floor=floor)
        (c,) = compare(exps, keys=("probe/rho",), n_resamples=200)
        assert not c.paired and difference_verdict(c, difference_holm([c])["probe/rho"]) == "n/a"
        assert (len(c.baseline), len(c.population)) == ((3, 0) if floor else (0, 3))
        silent = {run: probe_silence(probe_events(exps[0] / run)) for run in ("baseline", "population")}
        assert silent == (
            {"baseline": None, "population": "floor-bound: 44/48 at ρ = 0"}
            if floor
            else {"baseline": f"16 valid probe tasks, under {MIN_PROBE_TASKS}", "population": None}
        )
        assert math.isnan(difference_holm([c])["probe/rho"])  # out of the Holm family
        assert not any("no detectable difference" in line or "higher" in line for line in finding_lines([c]))
        lines, records = probe_floor_lines(exps)
        assert all(r["equal_count"] is None for r in records)
        assert "probe says nothing" in lines[6] and "no place in the Holm families" in lines[-1]
