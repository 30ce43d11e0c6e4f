"""The whole experiment on the tiny preset: report completeness, and kill -9 + rerun resumes."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted import DATA, NO_DATA

from populora_nb.experiment import STAGES

SHARED = DATA
ARGS = [
    "experiment",
    "--preset",
    "tiny",
    "--set",
    "run.steps=3",
    "--set",
    "eval.limit=1",
    "--set",
    "eval.benchmarks=[humanevalplus, gsm8k]",
]


def _experiment(out: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "POPULORA_DATA": str(SHARED)}
    return subprocess.Popen(
        [sys.executable, "-m", "populora_nb", *ARGS, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason=NO_DATA)
def test_killed_experiment_resumes_and_its_report_is_complete(tmp_path):
    out = tmp_path / "exp"
    first = _experiment(out, start_new_session=True)
    lines = []
    for line in first.stdout:  # kill -9 as soon as the population stage starts
        lines.append(line)
        if line.startswith("[experiment] population"):
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.wait()
    assert (out / "baseline" / "metrics.jsonl").exists(), "".join(lines)
    baseline_mtime = (out / "baseline" / "metrics.jsonl").stat().st_mtime
    time.sleep(0.05)
    second = _experiment(out)
    log, _ = second.communicate(timeout=1500)
    assert second.returncode == 0, log
    assert "[experiment] baseline: already complete, skipped" in log
    assert (out / "baseline" / "metrics.jsonl").stat().st_mtime == baseline_mtime  # not redone

    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert images == re.findall(r'<img src="([^"]+)"', html)
    for name in (
        "solve_rates.png",
        "ratings.png",
        "solve_matrix.png",
        "complexity.png",
        "coverage.png",
        "lineage.png",
        "benchmarks.png",
    ):
        assert any(i.endswith(name) for i in images), f"report lacks {name}"
    for img in images:
        assert (out / img).stat().st_size > 1000, img
    tables = re.findall(r"^\| .+\|$", md, re.M)
    assert len(tables) > 8
    # every table row is filled (no empty cells)
    assert all("||" not in row.replace(" ", "") for row in tables)
    assert "| humanevalplus |" in md and "| gsm8k |" in md
    # Compute is measured for both runs, and the population's ratio to the baseline is stated.
    compute = md.split("## Compute")[1].split("## ")[0]
    assert re.search(r"^\| baseline \| 1 \|", compute, re.M) and "| reference |" in compute
    # (tiny's random model writes no valid answer: every update is skipped and nothing is trained on)
    assert re.search(
        r"^\| population \| 8 \| 3 \| \d+ \| \d+ \| \d+ \| \d+ \| [\d.]+ / ([\d.]+|n/a) \|", compute, re.M
    ), compute
    lineage = [json.loads(line) for line in (out / "population" / "lineage.jsonl").read_text().splitlines()]
    assert lineage and all(row["relative_change"] >= 0 for row in lineage)

    third = _experiment(out)
    log, _ = third.communicate(timeout=600)
    assert third.returncode == 0 and log.count("already complete") == len(STAGES)  # nothing redone


def test_an_experiment_directory_refuses_another_config_and_names_the_difference(tmp_path):
    from populora_nb.config import load_config
    from populora_nb.experiment import run_experiment

    run_experiment(load_config("tiny"), tmp_path / "exp", stages=())
    assert (tmp_path / "exp" / "config.yaml").exists()
    run_experiment(load_config("tiny"), tmp_path / "exp", stages=())  # the same config reopens
    with pytest.raises(ValueError, match=r"different config.*run\.steps"):
        run_experiment(load_config("tiny", {"run.steps": 7}), tmp_path / "exp", stages=())
    with pytest.raises(ValueError, match="unknown stages"):
        run_experiment(load_config("tiny"), tmp_path / "exp", stages=("train",))
