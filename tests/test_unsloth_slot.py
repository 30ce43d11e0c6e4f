"""Issue #29, item 1: more than one population on a base peft has wrapped (what Unsloth leaves).

Unsloth's ``FastLanguageModel.get_peft_model`` calls peft's ``get_peft_model``, which swaps every
target ``nn.Linear`` of the base for a peft ``lora.Linear`` in place. Before the fix the next
``Population`` on that base raised "no nn.Linear named like ...", and a second ``get_peft_model``
would have re-created the adapter the first population's slot writes into. No GPU here: plain peft
stands in for Unsloth, with a stand-in ``unsloth`` module whose ``get_peft_model`` is peft's.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import sys
import types
import warnings

import pytest
import torch
from peft import LoraConfig, get_peft_model

from populora_nb.config import load_config
from populora_nb.lowrank import LoRAPair
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.base import load_base
from populora_nb.model.batch import Generation, train_batch
from populora_nb.model.batched_update import train_step
from populora_nb.model.scoring import lm_completion_logprobs
from populora_nb.model.unsloth_slot import FP32_GRAD
from populora_nb.rl import policy_gradient_loss


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny")


def fresh_base(cfg, backend="transformers"):
    """A tiny base of its own (wrapping mutates it), with the same weights as the session's tiny_base."""
    return dataclasses.replace(load_base(cfg), backend=backend)


def peft_wrap(model, lora, **kw):
    """Plain peft's get_peft_model with the arguments UnslothSlot passes (peft warns on a second wrap)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=list(lora.target_modules), **kw)
        return get_peft_model(model, config)


def batch_of(tokenizer, member="T0"):
    gens = [
        Generation(member, tokenizer("def f(a):")["input_ids"], [11, 12, 13, 14], "", True),
        Generation(member, tokenizer("x")["input_ids"], [21, 22, 23], "", True),
    ]
    return train_batch(gens, [1.0, -1.0], tokenizer.pad_token_id, temperature=0.7)


def spread(pop, member, seed):
    """Members far from the base (B = 0 at creation would hide a missing delta)."""
    g = torch.Generator().manual_seed(seed)
    pop.set_factors(
        member, {n: LoRAPair(p.A, torch.randn(p.B.shape, generator=g)) for n, p in pop.factors(member).items()}
    )


def pg(logprobs, b):
    return policy_gradient_loss(logprobs, b.completion_mask, b.advantages)


def test_a_population_on_a_peft_wrapped_base_adapts_the_wrapped_linears_with_peft_off(cfg, tiny_base):
    base = fresh_base(cfg)
    peft_model = peft_wrap(base.model, cfg.lora, init_lora_weights=False)  # a non-zero peft delta, as a loaded slot
    pop = Population.create(base, roles_for(1, 1), cfg.lora, seed=0)  # raised before: no nn.Linear
    ref = Population.create(tiny_base, roles_for(1, 1), cfg.lora, seed=0)  # same weights, never wrapped
    assert set(pop.multi.modules) == set(ref.multi.modules)  # same names: checkpoints stay interchangeable
    spread(pop, "T0", 1)
    spread(ref, "T0", 1)
    batch = batch_of(base.tokenizer)
    mask = batch.completion_mask.bool()
    # Only the routed member's delta: peft's own adapter is off inside a route, and on again after.
    torch.testing.assert_close(pop.logprobs("T0", batch), ref.logprobs("T0", batch), atol=1e-5, rtol=0)
    torch.testing.assert_close(pop.logprobs(None, batch), ref.logprobs(None, batch), atol=1e-5, rtol=0)
    q = base.model.model.layers[0].self_attn.q_proj
    assert not q.disable_adapters and q.lora_A["default"].weight.requires_grad
    ids = batch.input_ids[:1]
    with peft_model.disable_adapter():
        bare = base.model(input_ids=ids).logits
    assert not torch.allclose(base.model(input_ids=ids).logits, bare)  # peft's adapter applies outside routes
    # Training moves only the member's own factors; peft's adapter weights stay untouched.
    peft_before = {n: p.clone() for n, p in base.model.named_parameters() if "lora_" in n}
    before = pop.factors("T0")
    assert train_step(pop, "T0", batch, pg)["optim/grad_norm"] > 0
    assert not torch.equal(
        pop.factors("T0")["model.layers.0.self_attn.q_proj"].A, before["model.layers.0.self_attn.q_proj"].A
    )
    assert all(torch.equal(p, peft_before[n]) for n, p in base.model.named_parameters() if "lora_" in n)
    assert mask.any()


@pytest.fixture()
def fake_unsloth(monkeypatch):
    """A stand-in ``unsloth`` whose get_peft_model is plain peft's (what Unsloth calls underneath);
    counts the calls."""
    calls = []

    class FastLanguageModel:
        @staticmethod
        def get_peft_model(
            model, r, lora_alpha, target_modules, lora_dropout, bias, use_gradient_checkpointing, random_state
        ):
            calls.append(r)
            lora = types.SimpleNamespace(rank=r, alpha=lora_alpha, target_modules=target_modules)
            return peft_wrap(model, lora, lora_dropout=lora_dropout, bias=bias)

        @staticmethod
        def for_training(model):
            pass

        @staticmethod
        def for_inference(model):
            pass

    module = types.ModuleType("unsloth")
    module.__spec__ = importlib.machinery.ModuleSpec("unsloth", None)  # load_base's find_spec reads it
    module.FastLanguageModel = FastLanguageModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "unsloth", module)
    return calls


def test_two_populations_on_one_unsloth_base_share_its_peft_slot(cfg, tiny_base, fake_unsloth):
    base = fresh_base(cfg, backend="unsloth")
    first = Population.create(base, roles_for(1, 1), cfg.lora, seed=0)
    spread(first, "T0", 1)
    batch = batch_of(base.tokenizer)
    before = first.logprobs("T0", batch)
    second = Population.create(base, roles_for(2, 0), cfg.lora, seed=5)  # raised before: no nn.Linear
    assert fake_unsloth == [cfg.lora.rank], "one get_peft_model per base"
    assert second._slot_engine.peft_model is first._slot_engine.peft_model is base.peft_model
    spread(second, "T1", 2)
    assert train_step(second, "T1", batch_of(base.tokenizer, "T1"), pg)["optim/grad_norm"] > 0
    # The first population still scores through weights the forward reads: the slot path equals the
    # routed path of a never-wrapped base with the same factors, and is not the bare base.
    ref = Population.create(tiny_base, roles_for(1, 1), cfg.lora, seed=0)
    ref.set_factors("T0", first.factors("T0"))
    torch.testing.assert_close(first.logprobs("T0", batch), before, atol=0, rtol=0)
    torch.testing.assert_close(first.logprobs("T0", batch), ref.logprobs("T0", batch), atol=1e-4, rtol=0)
    assert not torch.allclose(first.logprobs("T0", batch), first.logprobs(None, batch), atol=1e-3)
    with pytest.raises(ValueError, match="its own base"):
        Population.create(base, roles_for(1, 0), dataclasses.replace(cfg.lora, rank=8))


def test_the_slot_computes_in_the_bases_dtype_and_its_gradients_sum_in_float32(fake_unsloth):
    """Unsloth leaves the slot's LoRA weights in float32, so peft would cast every adapted layer's
    input to float32 and keep the copy for the backward (stands in for Unsloth on a bf16 GPU base):
    the slot is cast to the base's dtype, the masters stay float32, and a step over two micro-batches
    sums its gradients in float32, not in the slot's dtype."""
    cfg = load_config("tiny", {"model.dtype": "bfloat16"})
    base = fresh_base(cfg, backend="unsloth")
    pop = Population.create(base, roles_for(1, 0), cfg.lora, seed=0)
    spread(pop, "T0", 1)
    slot = pop._slot_engine
    assert {p.dtype for pair in slot.slot.values() for p in pair} == {torch.bfloat16}
    assert {p.dtype for pair in pop.factors("T0").values() for p in pair} == {torch.float32}
    seen = []
    q = base.model.model.layers[0].self_attn.q_proj
    handle = q.lora_A["default"].register_forward_pre_hook(lambda mod, args: seen.append(args[0].dtype))
    batch = batch_of(base.tokenizer)
    pop.logprobs("T0", batch)
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}, "peft upcast the input: the slot is not in the base's dtype"
    # Two micro-batches: the master's gradient is the float32 sum of the two bf16 gradients.
    q_name = "model.layers.0.self_attn.q_proj"
    a = slot.slot[q_name][0]
    chunks = [batch.rows(slice(i, i + 1)).trimmed() for i in range(2)]

    def backward(chunks_):
        with slot.member(pop.multi, pop.member("T0").slot, False):
            for chunk in chunks_:
                pg(lm_completion_logprobs(base.model, chunk), chunk)[0].backward()
            one = getattr(a, FP32_GRAD).clone()
            slot.grads_to(pop.multi, pop.member("T0").slot)
        return one

    g1, g2 = backward(chunks[:1]), backward(chunks[1:])
    assert g1.dtype == torch.float32 and a.grad is None
    backward(chunks)
    master = pop.multi.slot_params[pop.member("T0").slot][q_name][0]
    assert master.grad.dtype == torch.float32 and torch.equal(master.grad, g1 + g2)
    assert not torch.equal((g1.bfloat16() + g2.bfloat16()).float(), g1 + g2)  # what summing in the slot would give
