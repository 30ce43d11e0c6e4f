"""The studies' command lines (`studies/`): each runs as ``python -m studies.NAME`` from the repository
root with the flags the package's CLI took before the studies left it, and bad input ends in one line
(exit 2) as it does there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_study(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("POPULORA_PRESET", "POPULORA_DATA")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", f"studies.{name}", *args], capture_output=True, text=True, timeout=180, cwd=cwd, env=env
    )


@pytest.mark.parametrize(
    "name,flags",
    [
        ("seed_protocol", ["--out", "--seeds", "--stages", "--window", "--preset", "--config", "--set"]),
        ("pilot", ["--out", "--steps", "--only", "--table", "--replace-table", "--preset", "--set"]),
        ("sweep", ["--out", "--grid", "--seeds", "--stages", "--address", "--cpus-per-trial", "--max-failures"]),
    ],
)
def test_each_study_runs_from_the_repository_root_with_its_flags(name, flags):
    r = run_study(name, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m studies.{name}")
    assert all(flag in r.stdout for flag in flags), r.stdout


@pytest.mark.parametrize(
    "name,argv,words",
    [
        ("seed_protocol", ["--preset", "tiny", "--out", "out", "--seeds", "0", "0"], ["--seeds"]),
        ("pilot", ["--preset", "tiny", "--out", "out", "--only", "no-such-arm"], ["no-such-arm", "candidates"]),
        (
            "sweep",
            ["--preset", "tiny", "--out", "out", "--grid", "run.steps=[1]", "--grid", "run.steps=[2]"],
            ["twice"],
        ),
        ("pilot", ["--out", "{tmp}/a_file/p"], ["--out", "a_file"]),
    ],
    ids=["protocol-repeated-seed", "pilot-unknown-candidate", "sweep-axis-twice", "pilot-out-under-a-file"],
)
def test_a_study_given_bad_input_says_so_in_one_line(tmp_path, name, argv, words):
    pytest.importorskip("ray") if name == "sweep" else None  # without Ray the sweep stops first, saying so
    (tmp_path / "a_file").write_text("not a directory\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    r = run_study(name, *argv, cwd=tmp_path)
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(err) == 1 and err[0].startswith("populora_nb: error: "), r.stderr
    assert all(w in err[0] for w in words), err[0]
    assert not (tmp_path / "out").exists()
