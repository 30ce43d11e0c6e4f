"""LoRAPolicy on the tiny model: generation routes per member, an update moves only that member."""

from pathlib import Path

import pytest
import torch

from populora_nb.errors import UserInputError
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import Sample

LEGACY = Path(__file__).parent / "fixtures" / "legacy_policy"
"""A policy checkpoint written by the code before issue #15 (population.json with integer ids,
names.json mapping the loop's names to them), a layout retired in commit d2ebfef: its population.json
and names.json are kept (the refusal reads no tensor file)."""


def _snapshot(policy, name):
    return {k: (p.A.clone(), p.B.clone()) for k, p in policy.factors(name).items()}


def test_update_changes_only_its_member_and_scores_sampled_tokens(tiny_config, tiny_base):
    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    prompts = ["def f(a):", "Write a function"]
    outs = policy.generate(["T0", "T0"], prompts, max_new_tokens=6, seed=1)
    assert outs == policy.generate(["T0", "T0"], prompts, max_new_tokens=6, seed=1)  # seeded
    before_t, before_s = _snapshot(policy, "T0"), _snapshot(policy, "S0")
    samples = [
        Sample("T0", p, c.text, r, ("T0", "propose", "code_o"), a, token_ids=c.token_ids)
        for p, c, r, a in zip(prompts, outs, [1.0, -1.0], [1.0, -1.0])
    ]
    # every completion carries the ids it was sampled as, and the update scores exactly those
    assert all(c.token_ids is not None and len(c.token_ids[1]) > 0 for c in outs)
    scored = [policy._generation("T0", s) for s in samples]
    assert [(tuple(g.prompt_ids), tuple(g.completion_ids)) for g in scored] == [c.token_ids for c in outs]
    stats = policy.update("T0", samples)
    assert stats["optim/skipped"] == 0.0 and stats["optim/grad_norm"] > 0
    after_t, after_s = _snapshot(policy, "T0"), _snapshot(policy, "S0")
    assert any(not torch.equal(before_t[k][1], after_t[k][1]) for k in before_t)  # B moved (it started at 0)
    assert all(
        torch.equal(before_s[k][0], after_s[k][0]) and torch.equal(before_s[k][1], after_s[k][1]) for k in before_s
    )


def test_zero_advantages_skip_the_optimizer_step(tiny_config, tiny_base):
    policy = LoRAPolicy.create(tiny_config, [("agent", "agent")], base=tiny_base)
    before = _snapshot(policy, "agent")
    stats = policy.update("agent", [Sample("agent", "x", "y", -1.0, ("agent", "solve", "code_o"), 0.0)])
    assert stats == {"optim/skipped": 1.0}
    assert all(torch.equal(before[k][0], v[0]) for k, v in _snapshot(policy, "agent").items())


def test_checkpoint_round_trip_keeps_names_and_weights(tiny_config, tiny_base, tmp_path):
    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    out = policy.generate(["S0"], ["hello"], 4, seed=0)[0]
    policy.update(
        "S0",
        [
            Sample("S0", "hello", out.text, 1.0, ("S0", "solve", "code_o"), 1.0, token_ids=out.token_ids),
            Sample("S0", "hello", out.text + "x", -1.0, ("S0", "solve", "code_o"), -1.0),
        ],
    )
    policy.save(tmp_path / "p")
    other = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    other.load(tmp_path / "p")
    assert other.members == policy.members == ["T0", "S0"]
    assert not (tmp_path / "p" / "names.json").exists()  # the population's ids are the names
    for k, pair in policy.factors("S0").items():
        assert torch.equal(pair.B, other.factors("S0")[k].B)


def test_update_scores_at_the_sampling_temperature(tiny_base, monkeypatch):
    """The policy gradient must score the policy that sampled: LoRAPolicy.update hands the config's
    sampling temperature to every batch it trains on (log-probs of logits / T)."""
    from populora_nb.config import load_config
    from populora_nb.model.policy import LoRAPolicy
    from populora_nb.policy import Sample

    cfg = load_config("tiny", {"sampling.temperature": 0.7})
    policy = LoRAPolicy.create(cfg, [("T0", "teacher")], base=tiny_base)
    seen = []
    import populora_nb.model.policy as model_policy

    real = model_policy.train_step
    monkeypatch.setattr(
        model_policy,
        "train_step",
        lambda pop, mid, batch, *a, **k: seen.append(batch.temperature) or real(pop, mid, batch, *a, **k),
    )
    prompts = ["hello", "world"]
    outs = policy.generate(["T0", "T0"], prompts, max_new_tokens=4, seed=0)
    policy.update(
        "T0",
        [
            Sample("T0", p, c.text, r, ("T0", "propose", "code_o"), a, token_ids=c.token_ids)
            for p, c, r, a in zip(prompts, outs, (1.0, -1.0), (1.0, -1.0))
        ],
    )
    assert seen == [0.7]


def test_a_checkpoint_in_the_retired_numbered_layout_is_refused_naming_the_commit(tiny_config, tiny_base):
    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    with pytest.raises(UserInputError, match=r"numbered-member layout .*retired in commit d2ebfef") as caught:
        policy.load(LEGACY)
    assert "\n" not in str(caught.value)
    assert policy.members == ["T0", "S0"]  # the refused load left the population as it was


def test_a_log_prob_gap_far_beyond_rounding_stops_the_update_before_it_trains(tiny_base):
    """An engine that sampled from other weights (here: log-probs of -30 per token, against ~-11 for
    the tiny model's) stops the run with one line, before any optimizer step; below the limit it is
    recorded only."""
    import dataclasses

    import pytest

    from populora_nb.config import load_config
    from populora_nb.model.policy import LogprobGapError

    config = load_config("tiny")
    policy = LoRAPolicy.create(config, [("T0", "teacher")], base=tiny_base)
    prompts = ["def f(a):", "Write a function"]
    outs = policy.generate(["T0", "T0"], prompts, max_new_tokens=6, seed=1)
    samples = [
        Sample("T0", p, c.text, r, ("T0", "propose", "code_o"), r, token_ids=c.token_ids)
        for p, c, r in zip(prompts, outs, [1.0, -1.0])
    ]

    def engine_sampled():  # what the engine would have reported for these samples
        for c in outs:
            assert c.token_ids is not None
            policy._sampled[("T0", c.token_ids)] = (-30.0,) * len(c.token_ids[1])

    before = _snapshot(policy, "T0")
    engine_sampled()
    with pytest.raises(LogprobGapError) as e:
        policy.update("T0", samples)
    assert "rollout.logp_gap_limit" in str(e.value) and "\n" not in str(e.value)
    assert all(torch.equal(before[k][1], v[1]) for k, v in _snapshot(policy, "T0").items())  # not trained on
    policy.config = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, logp_gap_limit=None))
    engine_sampled()
    assert policy.update("T0", samples)["rollout/logp_diff_mean"] > 10
