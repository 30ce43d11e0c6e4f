"""The mechanism counts read before any curve: teacher wins, the learnable band, surviving children."""

import json

from populora_nb.analysis.liveness import liveness
from populora_nb.config import load_config, save_config


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
