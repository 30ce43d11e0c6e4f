"""`make bench` runs every script in benchmarks/ with --quick: each must still run and print its table."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py"))
# A line each script prints only after its measurements: the table or the ratio it exists for.
PRINTS = {
    "bench_adapters.py": "(a) mixed 8-member batch / single-member batch",
    "bench_evolution.py": "| X1 dare |",
    "bench_logprobs.py": "before #29 / fused head, bytes per scored token:",
    "bench_step.py": "population step / baseline step =",
    "bench_cpu_dtype.py": "bf16/fp32",
    "bench_scoring.py": "project / evalplus candidates per second:",
    "bench_verifier.py": "ratio hardened/unsafe:",
    "bench_rollouts.py": "| vLLM / native |",
    "bench_update.py": "batched / sequential =",
    "bench_prefix.py": "population step shared/unshared =",
}


def test_every_benchmark_script_is_checked():
    assert {p.name for p in BENCHMARKS} == set(PRINTS)


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_script_runs_quick(script):
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600, cwd=script.parents[1]
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert PRINTS[script.name] in done.stdout, done.stdout[-2000:]


@pytest.mark.slow
def test_the_gpu_check_cpu_fallback_writes_its_json(tmp_path):
    """benchmarks/gpu_check.py is what a lent GPU runs first (issue #29): its CPU fallback must keep
    running, every section measured (none an error), population and baseline side by side."""
    import json

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(script), "--cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=script.parents[1],
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["cpu_fallback"] and set(report["shapes"]) == {"tiny"}
    shape = report["shapes"]["tiny"]
    for agent, adapters in (("baseline", 1), ("population", 8)):
        run = shape[agent]
        assert run["adapters"] == adapters and run["generate_s"] > 0 and run["train_s"] > 0
        assert run["new_tokens"] == run["rows"] * run["new"]  # fixed lengths: no row stopped early
    assert shape["population_over_baseline"]["step_s"] > 0
    # issue #30: the update stage alone, each population mode beside the agent's on the same rows
    updates = shape["update_stage"]
    assert set(updates["over_agent"]) == {"sequential", "batched", "batched_wide"}
    assert updates["batched_wide"]["micro_batch"] == 8 * updates["batched"]["micro_batch"]
    assert shape["full_length_update"]["attempts"][-1]["ok"]
