"""The GPU stack stays resolvable: `constraints-gpu.txt` pins every package of the resolved GPU
environment and `environment.yml` installs with it, so every GPU-side dependency of
pyproject.toml (the [gpu] and [vllm] extras, and torch, transformers and peft, which the GPU path
shares) must be pinned there, at a version its own specifier accepts."""

from __future__ import annotations

from pathlib import Path

import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SHARED_WITH_GPU = ("torch", "transformers", "peft")
"""Core dependencies whose version the GPU path depends on (vLLM and Unsloth pin or cap them)."""


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints-gpu.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints-gpu.txt: {line!r} is not pinned with =="
            out[canonicalize_name(name)] = version
    return out


def gpu_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [Requirement(r) for r in extras["gpu"] + extras["vllm"]]
    return reqs + [r for r in map(Requirement, project["dependencies"]) if r.name in SHARED_WITH_GPU]


def test_every_gpu_side_dependency_is_pinned_at_a_version_pyproject_accepts():
    pinned = pins()
    for req in gpu_requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} (pyproject.toml) is not pinned in constraints-gpu.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (req, pinned[name])
    # the packages the issue named, which pyproject leaves to the resolver
    assert {"unsloth-zoo", "xformers", "triton"} <= set(pinned)


def test_environment_yml_installs_with_the_constraints_and_agrees_with_them():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-c constraints-gpu.txt" in pip
    pinned = pins()
    for line in pip:
        if "==" in line and not line.startswith("-"):
            req = Requirement(line)
            assert req.specifier.contains(pinned[canonicalize_name(req.name)]), (line, pinned[req.name])
