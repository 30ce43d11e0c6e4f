"""Runs as tables (populora_nb.analysis.frames): one row per record, the documented columns, and a
seed protocol or a sweep as one frame labelled by seed and run."""

import math

import pandas as pd
import pytest

import populora_nb
from populora_nb.analysis.frames import TASK_COLUMNS, load_frames
from populora_nb.analysis.synthetic import write_synthetic_experiment
from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.state import roster_for
from tests.scripted import ScriptedLoRA


def _plain(column: pd.Series) -> list:
    return [None if pd.isna(v) else v for v in column]


class EvolvingScript(ScriptedLoRA):
    """The scripted completions for children too: a child (``student-s2-0``) answers as its role's ``*0``."""

    def generate(self, member_ids, prompts, max_new_tokens, seed):
        ids = [m if m == "agent" or m[1:].isdigit() else m[0].upper() + "0" for m in member_ids]
        return super().generate(ids, prompts, max_new_tokens, seed)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_base, verifier):
    """A tiny population run: scripted completions on a real tiny LoRA population, so its records hold
    valid and invalid tasks, matches and one evolution event (tiny: evolution every 2 of 3 steps)."""
    from populora_nb.model.policy import LoRAPolicy

    cfg = load_config("tiny", {"run.agent": "population"})
    policy = EvolvingScript(LoRAPolicy.create(cfg, list(roster_for(cfg).items()), base=tiny_base))
    return run(cfg, tmp_path_factory.mktemp("frames") / "population", policy=policy, verifier=verifier, progress=False)


def test_a_tiny_runs_frames_hold_one_row_per_record_and_the_documented_columns(tiny_run):
    frames = populora_nb.load_frames(tiny_run.path)  # the package-level name, imported lazily
    for stream in ("tasks", "metrics", "matches", "lineage", "probe"):  # tiny probes at steps 0 and 2
        records = tiny_run.read(stream)
        assert records, f"the tiny run wrote no {stream}"
        assert len(getattr(frames, stream)) == len(records), stream
    assert list(frames.tasks.columns[: len(TASK_COLUMNS)]) == list(TASK_COLUMNS)
    assert set(frames.tasks["run"]) == {"population"} and frames.runs == ["population"]

    tasks, rows = frames.tasks, tiny_run.read("tasks")
    assert tasks["task"].tolist() == list(range(len(rows)))
    assert tasks["program"].tolist() == [r["program"] for r in rows]
    assert tasks["valid"].tolist() == [r["valid"] for r in rows]
    assert _plain(tasks["reason"]) == [r["reason"] for r in rows]  # pandas reads a missing one as NaN
    for got, want in zip(tasks["rho"], (r["solve_rate"] for r in rows)):
        assert (math.isnan(got) and want is None) or got == want
    assert _plain(tasks["copy"]) == [r["copy"] for r in rows]
    assert _plain(tasks["repeat"]) == [r["repeat"] for r in rows]  # what the loop recorded, read again
    # the i-th task of a step is the i-th match of that step: its rollouts and solved attempts
    played = tasks[tasks["rho"].notna()]
    assert (played["rollouts"] == 4).all() and (played["n_solved"] == (played["rho"] * 4).round()).all()
    # complexity only where the proposer wrote the program (a valid code_o / code_i task)
    written = tasks[tasks["written"]]
    assert len(written) and written["ast_depth"].notna().all() and written["kind"].isin(["code_o", "code_i"]).all()
    assert tasks.loc[~tasks["written"], "ast_depth"].isna().all()
    assert (tasks["measured"] == (tasks["written"] & (tasks["copy"] == "new"))).all()

    metrics = frames.metrics
    assert {"step", "member", "role", "teacher/valid_rate", "rating/mu"} <= set(metrics.columns)
    assert {"teacher", "student", "kind", "valid", "rho", "rollouts"} <= set(frames.matches.columns)
    assert {"child", "parents", "operator", "birth_step"} <= set(frames.lineage.columns)
    assert len(frames.config) == 1 and frames.config.loc[0, "rl.rollouts"] == 4
    assert frames.config.loc[0, "run.agent"] == "population"


def test_a_seed_protocol_loads_as_one_frame_with_seed_and_run_columns(tmp_path):
    for seed in (0, 1):  # the seed protocol's layout: OUT/seed<S>/{baseline,population}
        write_synthetic_experiment(tmp_path / f"seed{seed}", n_steps=3, seed=seed)
    frames = load_frames(tmp_path)
    assert list(frames.tasks.columns[:2]) == ["seed", "run"]
    counts = frames.tasks.groupby(["seed", "run"]).size()
    assert set(counts.index) == {(s, r) for s in (0, 1) for r in ("baseline", "population")}
    assert set(frames.metrics["seed"]) == {0, 1} and len(frames.config) == 4
    one = frames.select(seed=1, run="population")
    assert set(one.tasks["seed"]) == {1} and set(one.tasks["run"]) == {"population"}
    assert len(one.tasks) == counts[(1, "population")]


def test_a_sweep_labels_its_grid_points(tmp_path):
    for point in ("population.n_teachers=1", "population.n_teachers=4"):
        write_synthetic_experiment(tmp_path / point / "seed-0", n_steps=2)
    frames = load_frames(tmp_path)
    assert list(frames.tasks.columns[:3]) == ["point", "seed", "run"]
    assert set(frames.config["point"]) == {"population.n_teachers=1", "population.n_teachers=4"}


def test_a_path_without_runs_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run directory"):
        load_frames(tmp_path)


def test_frames_are_pandas_and_pandas_is_not_imported_by_the_package():
    import subprocess
    import sys

    code = "import sys, populora_nb; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert isinstance(load_frames.__annotations__, dict) and pd.DataFrame is not None
