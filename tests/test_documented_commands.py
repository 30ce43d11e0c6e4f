"""The docs run by a test: every shell command in a fenced block of README.md, CONTRIBUTING.md,
studies/README.md and docs/*.md is either run here in a shortened form (`SHORTEN`: the command as documented, then the
`tiny` preset, one step and these overrides) or listed in `SKIPPED` with the reason, so a doc and
its command cannot drift apart unnoticed: a new or changed command fails the first test until it is
in one of the two tables.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "studies" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
FIXTURES = ROOT / "tests" / "fixtures" / "benchmarks"
ONE_STEP = ["--set", "run.steps=1", "--set", "eval.limit=1", "--set", "eval.benchmarks=[humanevalplus]"]

SHORTEN: dict[str, list[str]] = {
    # documented command -> what is added after it (with --preset tiny and --steps 1 in place of the doc's);
    # run in this order in one folder, so eval and report find the experiment the first one made
    ".venv/bin/python -m populora_nb experiment --preset smoke --out runs/exp": ONE_STEP,
    ".venv/bin/python -m populora_nb run --preset smoke --agent baseline --steps 6 --out runs/baseline": [],
    ".venv/bin/python -m populora_nb run --preset smoke --agent population --out runs/population --set rl.rollouts=4": [
        "--set",
        "run.steps=1",
    ],
    ".venv/bin/python -m populora_nb eval runs/exp": [],  # as documented: the experiment's own config
    ".venv/bin/python -m populora_nb report runs/exp": [],
    ".venv/bin/python -m populora_nb --help": [],
}
SKIPPED: dict[str, str] = {
    # a pattern of documented commands -> why this test does not run them
    r"^make (run|test|test-fast|bench|lint|setup)$": "make targets run the commands tested here and in CI (`.ci/run`)",
    r"^make lab$|jupyter lab": "starts a JupyterLab server that runs until stopped",
    r"^conda |^pip install|^source \.venv": "sets up an environment (CI's `make setup` does)",
    r"pre-commit install": "writes a git hook into the clone",
    r"jupytext --sync notebooks/NN_name\.py|nbstripout notebooks": "`make check-notebooks` runs these",
    r"doctor_cpu_cut\.yaml": "the random-weights doctor's CPU cut: tests/test_doctor.py runs it with that file (slow)",
    r"--preset (gpu|paper)|rollout\.engine=vllm": "needs a GPU and its vLLM (benchmarks/gpu_check.py on a GPU machine)",
    r"-m studies\.pilot ": "hours on the cpu preset; tests/test_pilot.py runs the pilot on tiny, "
    "tests/test_studies_cli.py its command line",
    r"-m studies\.seed_protocol ": "hours on the cpu preset; tests/test_protocol.py runs the protocol on tiny, "
    "tests/test_studies_cli.py its command line",
    r"-m studies\.sweep ": "a Ray Tune sweep of experiments; tests/test_sweep.py runs one on tiny, "
    "tests/test_studies_cli.py its command line",
    r"^pip --isolated install --dry-run|gpu-report\.json": "resolves the GPU stack against the registry "
    "(constraints-gpu.txt; tests/test_gpu_pins.py checks the pins)",
    r"^python -m studies\.(seed_protocol|pilot|sweep) --help$": "tests/test_studies_cli.py runs each study's --help",
    r"-m studies\.novelty_pilot ": "reads kept pilot arms; tests/test_novelty_pilot.py writes the table "
    "from arms it keeps",
    r"^export (TRITON_CACHE_DIR|HF_HOME|VLLM_CACHE_ROOT|TORCHINDUCTOR_CACHE_DIR)=": "sets a cache path for a GPU "
    "machine's shell",
}


def documented_commands() -> list[tuple[str, str]]:
    """(file, command) for every command line in a fenced bash/sh block, continuations joined, comments cut."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", doc.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                command = " ".join(line.split("  #")[0].split())
                if command and not command.startswith("#"):
                    found.append((doc.relative_to(ROOT).as_posix(), command))
    return found


def test_every_documented_command_is_run_or_skipped_with_a_reason():
    commands = documented_commands()
    assert len(commands) >= 20, "the fenced blocks were not found"
    unlisted = [
        f"{doc}: {cmd}" for doc, cmd in commands if cmd not in SHORTEN and not any(re.search(p, cmd) for p in SKIPPED)
    ]
    assert unlisted == [], "add each to SHORTEN or SKIPPED (with the reason)"
    stale = [cmd for cmd in SHORTEN if cmd not in {c for _, c in commands}]
    assert stale == [], "SHORTEN names commands no doc shows any more"


def shortened(command: str, extra: list[str]) -> list[str]:
    """The documented argv after ``-m populora_nb``, on the tiny preset and one step, plus ``extra``."""
    argv = shlex.split(command)
    argv = argv[argv.index("populora_nb") + 1 :]
    for flag, value in (("--preset", "tiny"), ("--steps", "1")):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    return argv + extra


@pytest.mark.slow
def test_the_documented_commands_run_shortened(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "POPULORA_PRESET"}
    env |= {"POPULORA_DATA": str(FIXTURES), "HF_HUB_OFFLINE": "1"}
    for command, extra in SHORTEN.items():
        argv = shortened(command, extra)
        done = subprocess.run(
            [sys.executable, "-m", "populora_nb", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"{command}\n-> {argv}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs" / "exp" / "report.html").is_file()
    assert (tmp_path / "runs" / "exp" / "eval" / "table.md").is_file()


RESULTS = sorted((ROOT / "docs" / "results").glob("*/README.md"))


def result_snippets() -> list[tuple[str, str]]:
    """(file, code) for every fenced python block of a committed result's README."""
    return [
        (doc.relative_to(ROOT).as_posix(), code)
        for doc in RESULTS
        for code in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    ]


@pytest.mark.parametrize(("doc", "code"), result_snippets(), ids=lambda v: v if v.endswith(".md") else "")
def test_a_result_readmes_python_runs_on_its_committed_records(doc, code):
    """A result's README shows how to read its records; that code runs on the committed files as they are
    (it broke once, silently, when the analysis moved from task objects to the tasks frame). A snippet that
    reads an uncommitted ``runs/`` folder cannot run in a clone: it says so by naming that folder."""
    if '"runs/' in code or 'Path("runs")' in code:
        pytest.skip(f"{doc}'s snippet reads an uncommitted runs/ folder (a rerun's output)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{doc}:\n{code}\n{done.stderr[-2000:]}"
    assert done.stdout.strip(), f"{doc}'s snippet printed nothing"
