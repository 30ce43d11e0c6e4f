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
    "bench_probe.py": "| choice | rollouts |",
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
