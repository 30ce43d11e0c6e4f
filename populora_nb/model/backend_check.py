"""One member's loss and gradients on two trainers of the same weights (Unsloth's and transformers',
in ``doctor --full``): Unsloth replaces the kernels and keeps its own copies of the factors, so the
gradient a GPU trains with is the one the CPU tests check only if the two agree."""

from __future__ import annotations

import torch

from populora_nb.config import ExperimentConfig
from populora_nb.lowrank import LoRAPair
from populora_nb.model.adapters import Population
from populora_nb.model.base import Base
from populora_nb.model.batch import sample_generation, train_batch
from populora_nb.rl import policy_gradient_loss

GRAD_TEXTS = (("def f(x):\n    return", " x * 2 + 1\n"), ("print(sorted([3, 1, 2])", ")\n# prints [1, 2, 3]"))
"""(prompt, completion) pairs of the comparison's batch: any text, the same on both paths."""


def compare_gradients(first: Base, second: Base, config: ExperimentConfig, seed: int = 0) -> dict[str, float]:
    """One member with the same factors (B random, so A's gradient is not zero) on each base, its loss
    and gradients on the same batch (`GRAD_TEXTS`, advantages ±1): the losses' absolute difference,
    the gradients' largest absolute difference (and relative to the largest gradient) and cosine."""
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
