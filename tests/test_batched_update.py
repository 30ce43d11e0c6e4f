"""The whole population's update in one pass (issue #30) equals one update per member.

Two policies start identical on the tiny model; one trains every member in one batched pass
(rl.update=batched), the other one member at a time (rl.update=sequential). After the same update
each member's LoRA factors and AdamW moments must agree to float32 rounding (relative 1e-5), with
members of different sample counts, a member without samples and one whose advantages are all 0;
and again after a checkpoint is resumed and after evolution replaces a member by a child.
"""

from __future__ import annotations

import pytest
import torch
from scripted import spread_members

from populora_nb.config import load_config
from populora_nb.model.adapters import roles_for
from populora_nb.model.batch import aligned_logprobs, concat, train_batch
from populora_nb.model.policy import LoRAPolicy, Mismatch
from populora_nb.policy import Sample

ROSTER = list(roles_for(2, 3).items())  # T0 T1 S0 S1 S2
PROMPTS = ["def f(x):\n    return", "The answer is", "import numpy", "x = [1, 2,", "Write a function", "f(3) ="]
COUNTS = {"T0": 5, "T1": 2, "S0": 6, "S1": 3, "S2": 0}  # S2: no samples at all
ZERO = "S1"  # every advantage 0: no step
LR = 1e-3
"""Adam's first step is lr * g / (|g| + eps): a gradient element near eps carries its float32 rounding
into the factors at up to lr's size, so the factors agree to 1e-5 only for a moderate lr (at 0.05 the
two paths differed by 1-4e-5 in A, scaling with lr); the moments compare the gradients themselves."""


def _policy(tiny_base, mode: str, **overrides) -> LoRAPolicy:
    config = load_config("tiny", {"rl.update": mode, "lora.lr": LR, "rl.micro_batch": 3, **overrides})
    policy = LoRAPolicy.create(config, ROSTER, base=tiny_base)
    spread_members(policy, scale=0.2, seed=10)  # members apart from step 0, so routing a row wrongly shows
    return policy


def _samples(policy: LoRAPolicy, seed: int, renamed: dict[str, str] | None = None) -> dict[str, list[Sample]]:
    """Each member's own sampled completions (lengths differ), with signed advantages; ``renamed``
    gives a replaced member's sample count to its child."""
    out: dict[str, list[Sample]] = {}
    for j, (m, n) in enumerate(COUNTS.items()):
        m = (renamed or {}).get(m, m)
        prompts = [PROMPTS[(i + j) % len(PROMPTS)] for i in range(n)]
        comps = policy.generate([m] * n, prompts, 4 + 2 * j, seed=seed + j) if n else []
        out[m] = [
            Sample(m, p, c.text, 0.0, (m,), 0.0 if m == ZERO else (1.0 if i % 3 else -1.5), c.token_ids)
            for i, (p, c) in enumerate(zip(prompts, comps))
        ]
    return out


def _state(policy: LoRAPolicy, m: str) -> dict[str, torch.Tensor]:
    """The member's factors and AdamW moments, by name."""
    tensors = {f"{k}.{n}": t for k, pair in policy.factors(m).items() for n, t in (("A", pair.A), ("B", pair.B))}
    return tensors | policy.population._optimizer_state(m)


def _assert_same(a: LoRAPolicy, b: LoRAPolicy, members) -> None:
    for m in members:
        sa, sb = _state(a, m), _state(b, m)
        assert sa.keys() == sb.keys(), m
        for k in sa:
            x, y = sa[k].double(), sb[k].double()
            rel = float((x - y).norm() / y.norm().clamp(min=1e-12))
            assert rel <= 1e-5, f"{m} {k}: relative difference {rel:.2e}"


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rl.ppo_epochs": 2, "rl.kl_coef": 0.1}, {"rl.micro_batch": 16}],
    ids=["reinforce", "ppo-epochs-and-kl", "one-micro-batch"],
)
def test_batched_update_equals_one_update_per_member(tiny_base, overrides):
    batched, sequential = _policy(tiny_base, "batched", **overrides), _policy(tiny_base, "sequential", **overrides)
    assert batched.batched_update and not sequential.batched_update
    samples = _samples(batched, seed=1)
    assert _samples(sequential, seed=1) == samples  # same start, same draws
    before = {m: _state(batched, m) for m in batched.members}
    stats_b, stats_s = batched.update_members(samples), sequential.update_members(samples)
    assert stats_b.keys() == stats_s.keys() == {"T0", "T1", "S0", "S1"}  # S2 had no samples
    assert stats_b[ZERO] == stats_s[ZERO] == {"optim/skipped": 1.0}
    for m in ("T0", "T1", "S0"):
        assert stats_b[m]["optim/n_samples"] == COUNTS[m]
        for k in ("loss/pg", "optim/grad_norm"):
            assert stats_b[m][k] == pytest.approx(stats_s[m][k], rel=1e-4, abs=1e-6), (m, k)
    _assert_same(batched, sequential, batched.members)
    for m in ("S1", "S2"):  # skipped members: nothing moved, no AdamW state was made
        assert all(torch.equal(before[m][k], v) for k, v in _state(batched, m).items())
        assert not batched.population._optimizer_state(m)
    for m in ("T0", "T1", "S0"):
        assert any(not torch.equal(before[m][k], v) for k, v in _state(batched, m).items()), m


def test_a_resumed_population_and_an_evolved_child_train_identically(tiny_base, tmp_path):
    first = _policy(tiny_base, "sequential")
    first.update_members(_samples(first, seed=1))
    first.save(tmp_path / "ckpt")
    runs = []
    for mode in ("batched", "sequential"):
        p = _policy(tiny_base, mode)
        p.load(tmp_path / "ckpt")  # resumed: factors and AdamW moments from the checkpoint
        # evolution: T1 is replaced by a child of T0 that inherits T0's optimizer state
        p.replace("T1", "child", p.factors("T0"), ["T0"], "copy", step=1, inherit_optimizer_from="T0")
        p.update_members(_samples(p, seed=2, renamed={"T1": "child"}))
        runs.append(p)
    assert runs[0].members == runs[1].members == ["T0", "child", "S0", "S1", "S2"]
    _assert_same(runs[0], runs[1], runs[0].members)


def test_route_groups_needs_each_members_rows_together(tiny_base):
    policy = _policy(tiny_base, "batched")
    multi = policy.population.multi
    with pytest.raises(ValueError, match="contiguous"):
        with multi.route_groups([0, 1, 0]):
            pass
    with multi.route_groups([2, 2, 4]):  # a valid grouping opens and closes cleanly
        pass
    assert not multi._handles


def test_concat_pads_every_row_to_the_widest_and_keeps_its_tokens(tiny_base):
    policy = _policy(tiny_base, "batched")
    samples = _samples(policy, seed=3)
    batches = [
        train_batch([policy._generation(m, s) for s in samples[m]], [s.advantage for s in samples[m]], 0)
        for m in ("T0", "T1")
    ]
    joined = concat(batches)
    assert joined.input_ids.shape == (7, max(b.input_ids.shape[1] for b in batches))
    row = 0
    for b in batches:
        for i in range(b.input_ids.shape[0]):
            keep = b.attention_mask[i].bool()
            assert torch.equal(joined.input_ids[row][joined.attention_mask[row].bool()], b.input_ids[i][keep])
            assert int(joined.completion_mask[row].sum()) == int(b.completion_mask[i].sum())
            row += 1
    with pytest.raises(ValueError, match="temperatures"):
        concat([batches[0], train_batch([policy._generation("T1", samples["T1"][0])], [1.0], 0, temperature=0.5)])


def test_a_member_without_engine_log_probs_joins_the_pass_and_is_not_compared(tiny_base):
    """One member's batch carries the engine's log-probs and another's none (a sample no engine
    sampled): the joined batch holds NaN on the second's rows, which the mismatch monitor skips, so
    it measures the first member's gap alone (this raised "set in some batches and not in others")."""
    policy = _policy(tiny_base, "batched")
    samples = _samples(policy, seed=4)
    batches = [
        train_batch([policy._generation(m, s) for s in samples[m]], [s.advantage for s in samples[m]], 0)
        for m in ("T0", "T1")
    ]
    batches[0].sampler_logprobs = aligned_logprobs(batches[0], [[-1.0] * len(s.token_ids[1]) for s in samples["T0"]])
    joined = concat(batches)
    assert joined.sampler_logprobs is not None
    comp = joined.completion_mask.bool()
    n0 = batches[0].input_ids.shape[0]
    assert joined.sampler_logprobs[:n0][comp[:n0]].eq(-1.0).all()
    assert joined.sampler_logprobs[n0:][comp[n0:]].isnan().all()
    mismatch = Mismatch()
    mismatch.add(torch.zeros(joined.input_ids.shape), joined)  # trainer log-probs 0: a gap of 1 where compared
    assert mismatch.stats() == {"rollout/logp_diff_mean": 1.0, "rollout/logp_diff_max": 1.0}
    assert mismatch.count == int(comp[:n0].sum())
