"""The smoke preset `make run` trains: long enough to exercise every part of the loop, and its
report says what a run that short can and cannot show."""

from populora_nb.analysis.report import run_length_note
from populora_nb.config import load_config
from populora_nb.probe import probe_due


def _events(config):
    ec, steps = config.evolution, config.run.steps
    return [s for s in range(steps) if ec.enabled and (s + 1) % ec.every == 0 and s + 1 < steps]


def test_smoke_runs_every_part_at_least_once():
    for agent in ("baseline", "population"):
        config = load_config("smoke", {"run.agent": agent})
        assert config.run.steps >= 3
        assert sum(probe_due(s, config) for s in range(config.run.steps)) >= 2
    assert len(_events(load_config("smoke", {"run.agent": "population"}))) >= 1
    # the teacher's band holds a reachable rho at its rollouts
    assert load_config("smoke").rl.rollouts >= 3


def test_the_note_says_a_short_run_judges_no_child_and_shows_no_trend():
    note = run_length_note(load_config("smoke"))
    assert "1 evolution event " in note and "2 probe events" in note
    assert "cannot judge any child" in note and "Nor can a run this short show a trend" in note
    long = run_length_note(load_config("cpu"))  # 40 steps, events at 10, 20, 30, grace 20
    assert "can judge children born at steps 10" in long and "cannot judge" not in long
    assert "Nor can" not in long
