"""Runs as tables (populora_nb.analysis.frames): one row per record, the documented columns, and a
seed protocol or a sweep as one frame labelled by seed and run."""

import ast
import math
import re
from pathlib import Path

import pandas as pd
import pytest

import populora_nb
from populora_nb.analysis.frames import TASK_COLUMNS, load_frames, per_step
from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.records import STREAMS
from populora_nb.state import roster_for
from studies.synthetic import write_synthetic_experiment
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
    frames = load_frames(tiny_run.path)
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


# ----------------------------------------------------------------------------- one reader of the records
PACKAGE = Path(populora_nb.__file__).resolve().parent
STREAM_FILE = re.compile(r"^(metrics|tasks|matches|lineage|probe)\.jsonl(\.gz)?$")
DOORS = {PACKAGE / "records.py", PACKAGE / "analysis" / "frames.py"}
"""The writer (and resume's reader) of the run streams, and the analyses' one door to them."""


def stream_readers(path: Path, analysis: bool) -> list[str]:
    """Where ``path`` reads a run stream itself: a function that names a stream file and parses JSON,
    or (an analysis module) a ``.read("<stream>")`` or ``.stream_file(...)`` call: a second reader."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        nodes = list(ast.walk(fn))
        names = any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and STREAM_FILE.match(n.value) for n in nodes
        )
        calls = [n.func.attr for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        if names and {"loads", "load"} & set(calls):
            found.append(f"{path.name}:{fn.lineno} parses a stream file")
        for n in nodes:
            if analysis and isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                arg = n.args[0] if n.args else None
                named = isinstance(arg, ast.Constant) and arg.value in STREAMS
                if (n.func.attr == "read" and named) or n.func.attr == "stream_file":
                    found.append(f"{path.name}:{n.lineno} reads a stream past the frames")
    return sorted(set(found))


def test_the_records_module_and_the_frames_are_the_only_readers_of_the_run_streams():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in DOORS
        for hit in stream_readers(path, analysis=path.parent.name == "analysis")
    ]
    assert found == []


def test_the_reader_check_sees_a_second_reader(tmp_path):
    """Cases built to fail: the JSONL parsed by hand, and an analysis reading a stream past the frames."""
    by_hand = tmp_path / "by_hand.py"
    by_hand.write_text(
        "import json\n"
        "def load(run_dir):\n"
        "    return [json.loads(l) for l in (run_dir / 'tasks.jsonl').read_text().splitlines()]\n"
    )
    past = tmp_path / "past.py"
    past.write_text("def rows(rd):\n    return rd.read('metrics')\n")
    assert stream_readers(by_hand, analysis=False) == ["by_hand.py:2 parses a stream file"]
    assert stream_readers(past, analysis=True) == ["past.py:2 reads a stream past the frames"]
    assert stream_readers(past, analysis=False) == []  # orchestration reads through records.RunDir


# ----------------------------------------------------------------------------- a metric per step, run names
def test_per_step_means_over_the_members_that_logged_it_or_takes_the_steps_own_value():
    metrics = pd.DataFrame(
        [
            {"step": 0, "member": "T0", "role": "teacher", "x": 1.0, "time/step_s": 5.0},
            {"step": 0, "member": "S0", "role": "student", "x": 3.0, "time/step_s": 5.0},
            {"step": 1, "member": "T0", "role": "teacher", "x": None, "time/step_s": 7.0},
            {"step": 1, "member": "S0", "role": "student", "x": 4.0, "time/step_s": 7.0},
            {"step": 2, "member": "T0", "role": "teacher", "x": None},
        ]
    )
    assert per_step(metrics, "x").to_dict() == {0: 2.0, 1: 4.0}  # step 2 logged no x: absent
    assert per_step(metrics, "x", role="teacher").to_dict() == {0: 1.0}
    assert per_step(metrics, "time/step_s", how="first").to_dict() == {0: 5.0, 1: 7.0}
    assert per_step(metrics, "never/logged").empty and per_step(pd.DataFrame(), "x").empty


RUN_NAMES = re.compile(r"""["']baseline["'],\s*["']population["']""")


def run_name_lists(path: Path) -> list[str]:
    """Where ``path`` spells both run names in a row (a hand-written list of the runs), by line."""
    return [f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if RUN_NAMES.search(line)]


def test_the_run_names_live_in_the_run_finder_alone():
    """The analyses and studies take the runs of an experiment from `analysis.runs` (``RUNS``,
    ``experiment_runs``), which takes them from the config's arms (``config.AGENTS``): no other module
    of the package, no study and no notebook holds a list of its own."""
    root = PACKAGE.parent
    paths = [*sorted(PACKAGE.rglob("*.py")), *sorted((root / "studies").glob("*.py"))]
    paths += sorted((root / "notebooks").glob("*.py"))
    assert [hit for p in paths if p.name != "config.py" for hit in run_name_lists(p)] == []
    assert run_name_lists(PACKAGE / "config.py") == ["config.py:30"]  # the check sees a list
