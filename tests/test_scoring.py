"""model.scoring: completion log-probs from the backbone's hidden states and the output layer equal
those of the LM's full forward, gradients included (issue #29)."""

from __future__ import annotations

import pytest
import torch

from populora_nb.lowrank import LoRAPair
from populora_nb.model import scoring
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.batch import Generation, train_batch


@pytest.fixture(scope="module")
def pop(tiny_base, tiny_config):
    pop = Population.create(tiny_base, roles_for(1, 0), tiny_config.lora, seed=0)
    g = torch.Generator().manual_seed(3)
    pop.set_factors("T0", {n: LoRAPair(p.A, torch.randn(p.B.shape, generator=g)) for n, p in pop.factors("T0").items()})
    return pop


def _batch(tokenizer):
    gens = [
        Generation("T0", tokenizer("def f(a):\n    return a")["input_ids"], [11, 12, 13, 14, 15], "", True),
        Generation("T0", tokenizer("x =")["input_ids"], [21, 22], "", True),  # more left padding
    ]
    return train_batch(gens, [1.0, -1.0], tokenizer.pad_token_id, temperature=0.7)


def _scored(pop, batch, fused, monkeypatch):
    """Log-probs and the member's gradients, through the fused path or the LM's full forward."""
    if not fused:
        monkeypatch.setattr(scoring, "split_lm", lambda model: None)
    params = pop.multi.parameters(0)
    for p in params:
        p.grad = None
    with pop.multi.route_slot(0):
        lp = scoring.lm_completion_logprobs(pop.base.model, batch, chunk_rows=3)
        (lp * torch.linspace(-1, 1, lp.shape[1])).sum().backward()
    monkeypatch.undo()
    return lp.detach(), [p.grad.clone() for p in params]


def test_fused_head_logprobs_and_gradients_equal_the_full_forward(pop, monkeypatch):
    assert scoring.split_lm(pop.base.model) == (pop.base.model.model, pop.base.model.lm_head)
    batch = _batch(pop.base.tokenizer)
    fused, fused_grads = _scored(pop, batch, True, monkeypatch)
    full, full_grads = _scored(pop, batch, False, monkeypatch)
    mask = batch.completion_mask.bool()
    assert (fused[mask] < 0).all() and (fused[~mask] == 0).all()
    torch.testing.assert_close(fused, full, atol=1e-5, rtol=0)
    for a, b in zip(fused_grads, full_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in fused_grads)


def test_a_logit_softcap_keeps_the_full_forward(pop, monkeypatch):
    monkeypatch.setattr(pop.base.model.config, "final_logit_softcapping", 30.0, raising=False)
    assert scoring.split_lm(pop.base.model) is None
    monkeypatch.undo()
    assert scoring.split_lm(pop.base.model) is not None
