"""`make bench` runs every script in benchmarks/ with --quick: each must still run and print its table."""

import os
import re
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
    "bench_probe.py": "| choice | rollouts |",
}


NEEDS_DATA = {"bench_scoring.py"}
"""Scripts that time our benchmark data: they print "skipped: <what to set>" without $POPULORA_DATA."""


def test_every_benchmark_script_is_checked():
    assert {p.name for p in BENCHMARKS} == set(PRINTS)


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_script_runs_quick(script):
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600, cwd=script.parents[1]
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    if script.name in NEEDS_DATA and done.stdout.startswith("skipped: "):  # no $POPULORA_DATA here
        pytest.skip(done.stdout.strip())
    assert PRINTS[script.name] in done.stdout, done.stdout[-2000:]


def test_no_benchmark_script_imports_the_tests():
    """benchmarks/ runs from a clone without tests/ on its path: it never reads a test module."""
    for path in BENCHMARKS[0].parent.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"""["']tests["']|^\s*(from|import) tests\b|test_\w+\.py["']""", text, re.M), path.name


def test_bench_scoring_finds_its_data_through_populora_data(tmp_path):
    """issue 56: bench_scoring took its data folder from a test module that named ../shared, so `make
    bench` failed in a clone without it, even with $POPULORA_DATA set."""
    script = BENCHMARKS[0].parent / "bench_scoring.py"
    env = {k: v for k, v in os.environ.items() if k != "POPULORA_DATA"}
    for data, said in ((None, "set POPULORA_DATA"), (tmp_path, f"{tmp_path / 'humanevalplus'}")):
        run_env = env if data is None else {**env, "POPULORA_DATA": str(data)}
        done = subprocess.run(
            [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300, env=run_env
        )
        assert done.returncode == 0 and done.stdout.startswith("skipped: "), done.stdout[-1000:] + done.stderr[-2000:]
        assert said in done.stdout
