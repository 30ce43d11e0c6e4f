"""LoRAPolicy on the tiny model: generation routes per member, an update moves only that member."""

import torch

from populora_nb.policy import LoRAPolicy
from populora_nb.stages import Sample


def _snapshot(policy, name):
    return {k: (p.A.clone(), p.B.clone()) for k, p in policy.factors(name).items()}


def test_update_changes_only_its_member_and_scores_sampled_tokens(tiny_config, tiny_base):
    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    prompts = ["def f(a):", "Write a function"]
    texts = policy.generate(["T0", "T0"], prompts, max_new_tokens=6, seed=1)
    assert texts == policy.generate(["T0", "T0"], prompts, max_new_tokens=6, seed=1)  # seeded
    before_t, before_s = _snapshot(policy, "T0"), _snapshot(policy, "S0")
    samples = [Sample("T0", p, t, r, ("T0", "propose", "code_o"), a) for p, t, r, a in zip(prompts, texts, [1.0, -1.0], [1.0, -1.0])]
    # the policy remembers the sampled token ids for exactly these completions
    assert all(("T0", p, t) in policy._sampled for p, t in zip(prompts, texts))
    stats = policy.update("T0", samples)
    assert stats["optim/skipped"] == 0.0 and stats["optim/grad_norm"] > 0
    after_t, after_s = _snapshot(policy, "T0"), _snapshot(policy, "S0")
    assert any(not torch.equal(before_t[k][1], after_t[k][1]) for k in before_t)  # B moved (it started at 0)
    assert all(torch.equal(before_s[k][0], after_s[k][0]) and torch.equal(before_s[k][1], after_s[k][1]) for k in before_s)


def test_zero_advantages_skip_the_optimizer_step(tiny_config, tiny_base):
    policy = LoRAPolicy.create(tiny_config, [("agent", "agent")], base=tiny_base)
    before = _snapshot(policy, "agent")
    stats = policy.update("agent", [Sample("agent", "x", "y", -1.0, ("agent", "solve", "code_o"), 0.0)])
    assert stats == {"optim/skipped": 1.0}
    assert all(torch.equal(before[k][0], v[0]) for k, v in _snapshot(policy, "agent").items())


def test_checkpoint_round_trip_keeps_names_and_weights(tiny_config, tiny_base, tmp_path):
    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    texts = policy.generate(["S0"], ["hello"], 4, seed=0)
    policy.update("S0", [Sample("S0", "hello", texts[0], 1.0, ("S0", "solve", "code_o"), 1.0),
                         Sample("S0", "hello", texts[0] + "x", -1.0, ("S0", "solve", "code_o"), -1.0)])
    policy.save(tmp_path / "p")
    other = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    other.load(tmp_path / "p")
    assert other.names == policy.names
    for k, pair in policy.factors("S0").items():
        assert torch.equal(pair.B, other.factors("S0")[k].B)


def test_update_scores_at_the_sampling_temperature(tiny_base, monkeypatch):
    """The policy gradient must score the policy that sampled: LoRAPolicy.update hands the config's
    sampling temperature to every batch it trains on (log-probs of logits / T)."""
    from populora_nb.config import load_config
    from populora_nb.policy import LoRAPolicy
    from populora_nb.stages import Sample

    cfg = load_config("tiny", {"sampling.temperature": 0.7})
    policy = LoRAPolicy.create(cfg, [("T0", "teacher")], base=tiny_base)
    seen = []
    real = policy.population.train_step
    monkeypatch.setattr(policy.population, "train_step", lambda mid, batch, *a, **k: seen.append(batch.temperature) or real(mid, batch, *a, **k))
    prompts = ["hello", "world"]
    texts = policy.generate(["T0", "T0"], prompts, max_new_tokens=4, seed=0)
    policy.update("T0", [Sample("T0", p, t, r, ("T0", "propose", "code_o"), a)
                         for p, t, r, a in zip(prompts, texts, (1.0, -1.0), (1.0, -1.0))])
    assert seen == [0.7]
