"""TRR++ advantages, the policy-gradient loss and completion log-probs, on small tensors."""

import pytest
import torch

from populora_nb.config import load_config
from populora_nb.presets import PRESETS
from populora_nb.rl import (
    completion_logprobs,
    completion_logprobs_from_hidden,
    logprob_temperature,
    policy_gradient_loss,
    trr_plus_plus_advantages,
)

# ---------------------------------------------------------------- TRR++ advantages


def test_whitening_gives_zero_mean_unit_std_per_group():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(30, generator=g) * 3 + 1
    keys = [("m0", "teacher", "code_o")] * 10 + [("m1", "student", "code_i")] * 20
    adv = trr_plus_plus_advantages(rewards, keys)
    assert adv.shape == (30,) and adv.dtype == torch.float32
    for sl in (slice(0, 10), slice(10, 30)):
        assert adv[sl].mean().item() == pytest.approx(0.0, abs=1e-6)
        assert adv[sl].std(correction=0).item() == pytest.approx(1.0, abs=1e-5)


def test_whitening_matches_formula_on_interleaved_groups():
    rewards = [1.0, -1.0, 0.5, -0.5, 1.0, 0.0]
    keys = ["a", "b", "a", "b", "a", "b"]
    adv = trr_plus_plus_advantages(rewards, keys, eps=0.0)
    a = torch.tensor([1.0, 0.5, 1.0], dtype=torch.float64)
    expected_a = (a - a.mean()) / a.std(correction=0)
    assert torch.allclose(adv[[0, 2, 4]].double(), expected_a, atol=1e-6)


def test_groups_do_not_leak():
    keys = [("m0", "teacher", "code_o")] * 3 + [("m0", "teacher", "code_i")] * 3
    base = trr_plus_plus_advantages([1.0, 0.0, -1.0, 0.2, 0.4, 0.9], keys)
    changed = trr_plus_plus_advantages([1.0, 0.0, -1.0, 50.0, -7.0, 3.0], keys)
    assert torch.equal(base[:3], changed[:3])
    assert not torch.allclose(base[3:], changed[3:])


def test_degenerate_groups_get_zero_advantage():
    keys = ["solo", "same", "same", "same", "pair", "pair"]
    adv = trr_plus_plus_advantages([5.0, 0.3, 0.3, 0.3, 1.0, -1.0], keys)
    assert adv[0] == 0.0  # size-1 group: no baseline
    assert torch.equal(adv[1:4], torch.zeros(3))  # all rewards equal: no preference
    assert adv[4] == pytest.approx(1.0, abs=1e-5) and adv[5] == pytest.approx(-1.0, abs=1e-5)


def test_advantages_reject_mismatched_keys():
    with pytest.raises(ValueError, match="one group key per reward"):
        trr_plus_plus_advantages([1.0, 2.0], ["a"])


# ---------------------------------------------------------------- policy-gradient loss


def _batch(seed=0, b=3, t=6):
    g = torch.Generator().manual_seed(seed)
    logprobs = (-torch.rand(b, t, generator=g) * 3).requires_grad_(True)
    mask = torch.zeros(b, t)
    mask[0, 2:] = 1  # prompt of 2 tokens
    mask[1, 3:5] = 1  # prompt of 3, then padding
    mask[2, 1:6] = 1
    return logprobs, mask


def test_gradient_descent_direction_has_the_sign_of_the_advantage():
    logprobs, mask = _batch()
    adv = torch.tensor([1.5, -0.7, 0.3])
    loss, stats = policy_gradient_loss(logprobs, mask, adv)
    loss.backward()
    grad = logprobs.grad
    on = mask.bool()
    # −grad is the update direction: raise log-probs of tokens with positive advantage.
    assert torch.equal(torch.sign(-grad[on]), torch.sign(adv[:, None].expand_as(grad)[on]))
    assert torch.equal(grad[~on], torch.zeros_like(grad[~on]))
    # On-policy REINFORCE, token mean: loss = −Σ A·mask / n_tokens.
    expected = -(adv[:, None] * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert stats["loss/pg"] == pytest.approx(expected.item(), abs=1e-6)
    assert stats["policy/n_tokens"] == mask.sum().item()


def test_masking_excludes_prompt_and_pad_tokens():
    logprobs, mask = _batch()
    adv = torch.tensor([1.0, -2.0, 0.5])
    old = logprobs.detach() - 0.05
    ref = logprobs.detach() + 0.1
    loss_a, _ = policy_gradient_loss(logprobs, mask, adv, old, ref, kl_coef=0.1)
    # Garbage (huge or −inf) outside the mask must change nothing, nor create NaNs.
    garbage = torch.where(mask.bool(), torch.zeros_like(mask), torch.full_like(mask, -torch.inf))
    lp_b = (logprobs.detach() + garbage).requires_grad_(True)
    old_b = old + torch.where(mask.bool(), torch.zeros_like(mask), torch.full_like(mask, 1e4))
    loss_b, _ = policy_gradient_loss(lp_b, mask, adv, old_b, ref, kl_coef=0.1)
    assert loss_b.item() == pytest.approx(loss_a.item(), abs=1e-6)
    loss_b.backward()
    assert torch.isfinite(lp_b.grad).all()
    assert torch.equal(lp_b.grad[~mask.bool()], torch.zeros(int((~mask.bool()).sum())))


def test_ppo_clip_stops_gradient_beyond_the_clip_range():
    eps = 0.2
    logprobs = torch.zeros(4, 1, requires_grad=True)
    mask = torch.ones(4, 1)
    # ratio = exp(logp − old): 1.5 and 0.5 lie outside [0.8, 1.2].
    old = torch.log(torch.tensor([[1 / 1.5], [1 / 0.5], [1 / 1.5], [1 / 1.1]]))
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, stats = policy_gradient_loss(logprobs, mask, adv, old_logprobs=old, epsilon=eps)
    loss.backward()
    g = logprobs.grad[:, 0]
    assert g[0] == 0.0  # ratio 1.5 > 1.2 with A > 0: clipped, no push further up
    assert g[1] == 0.0  # ratio 0.5 < 0.8 with A < 0: clipped, no push further down
    assert g[2] > 0.0  # ratio 1.5 with A < 0: pessimistic bound keeps the gradient (lower it)
    assert g[3] < 0.0  # ratio 1.1 inside the range: ordinary gradient
    assert stats["policy/clip_frac"] == pytest.approx(0.5)
    assert stats["policy/ratio_max"] == pytest.approx(1.5, rel=1e-5)


def test_kl_term_is_zero_when_policy_equals_reference():
    logprobs, mask = _batch(seed=1)
    adv = torch.tensor([0.5, -0.5, 1.0])
    base, _ = policy_gradient_loss(logprobs, mask, adv)
    g_base = torch.autograd.grad(base, logprobs)[0]
    loss, stats = policy_gradient_loss(logprobs, mask, adv, ref_logprobs=logprobs.detach(), kl_coef=1.0)
    g = torch.autograd.grad(loss, logprobs)[0]
    assert stats["loss/kl"] == 0.0
    assert loss.item() == pytest.approx(base.item(), abs=1e-7)
    assert torch.allclose(g, g_base)
    # Away from the reference the k3 estimate is positive and pulls back towards it.
    loss_far, stats_far = policy_gradient_loss(logprobs, mask, adv, ref_logprobs=logprobs.detach() - 0.5, kl_coef=1.0)
    assert stats_far["loss/kl"] > 0.0 and loss_far.item() > base.item()


def test_kl_is_logged_but_not_added_when_coef_is_zero():
    logprobs, mask = _batch(seed=2)
    adv = torch.tensor([0.5, -0.5, 1.0])
    base, _ = policy_gradient_loss(logprobs, mask, adv)
    loss, stats = policy_gradient_loss(logprobs, mask, adv, ref_logprobs=logprobs.detach() - 1.0)
    assert stats["loss/kl"] > 0.0
    assert loss.item() == base.item()
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_gradient_loss(logprobs, mask, adv, kl_coef=0.1)


def test_sequence_mean_weighs_completions_equally():
    logprobs = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    tok, _ = policy_gradient_loss(logprobs, mask, adv, aggregation="token_mean")
    seq, _ = policy_gradient_loss(logprobs, mask, adv, aggregation="sequence_mean")
    assert tok.item() == pytest.approx(-(1 - 4) / 5)
    assert seq.item() == pytest.approx(0.0)
    # A row with no completion tokens does not dilute the sequence mean.
    mask3 = torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]])
    seq3, _ = policy_gradient_loss(logprobs, mask3, adv, aggregation="sequence_mean")
    assert seq3.item() == pytest.approx(-1.0)


def test_loss_validates_shapes():
    logprobs, mask = _batch()
    with pytest.raises(ValueError, match="advantages must be"):
        policy_gradient_loss(logprobs, mask, torch.zeros(2))
    with pytest.raises(ValueError, match="completion_mask"):
        policy_gradient_loss(logprobs, mask[:, :3], torch.zeros(3))


def test_bandit_policy_learns_the_best_arm():
    """End to end: sample, reward, whiten, step. A softmax policy over 3 arms finds arm 2."""
    theta = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.5)
    g = torch.Generator().manual_seed(0)
    arm_reward = torch.tensor([-0.5, 0.0, 1.0])
    for _ in range(40):
        probs = torch.softmax(theta.detach(), 0)
        actions = torch.multinomial(probs, 16, replacement=True, generator=g)
        adv = trr_plus_plus_advantages(arm_reward[actions], ["bandit"] * 16)
        logp = torch.log_softmax(theta, 0)[actions][:, None]  # (B, T=1)
        loss, _ = policy_gradient_loss(logp, torch.ones_like(logp), adv)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.softmax(theta, 0)[2].item() > 0.9


# ---------------------------------------------------------------- completion log-probs


def _naive_logprobs(logits, input_ids, mask):
    full = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    out = torch.zeros(input_ids.shape)
    for b in range(input_ids.shape[0]):
        for t in range(1, input_ids.shape[1]):
            if mask[b, t]:
                out[b, t] = full[b, t - 1, input_ids[b, t]]
    return out


def _lm_batch(seed=0, b=3, t=7, v=11):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g) * 2
    input_ids = torch.randint(0, v, (b, t), generator=g)
    mask = torch.zeros(b, t, dtype=torch.bool)
    mask[0, 3:] = True
    mask[1, 2:5] = True  # right padding after position 4
    mask[2, 5:] = True
    return logits, input_ids, mask


def test_completion_logprobs_equal_naive_full_computation():
    logits, input_ids, mask = _lm_batch()
    got = completion_logprobs(logits, input_ids, mask)
    assert got.shape == input_ids.shape and got.dtype == torch.float32
    assert torch.allclose(got, _naive_logprobs(logits, input_ids, mask), atol=1e-5)
    assert torch.equal(got[~mask], torch.zeros(int((~mask).sum())))


def test_completion_logprobs_with_kept_tail_logits_and_bf16():
    logits, input_ids, mask = _lm_batch(seed=1)
    expected = _naive_logprobs(logits, input_ids, mask)
    keep = 6  # like logits_to_keep=6: rows for positions 1..6 predict tokens 2..6
    tail = completion_logprobs(logits[:, -keep:], input_ids, mask)
    assert torch.allclose(tail, expected, atol=1e-5)
    bf16 = completion_logprobs(logits.bfloat16(), input_ids, mask)
    assert bf16.dtype == torch.float32
    assert torch.allclose(bf16, expected, atol=0.05)
    with pytest.raises(ValueError, match="no predicting logit"):
        completion_logprobs(logits[:, -4:], input_ids, mask)  # position 2 needs row for pos 1


def test_completion_logprobs_gradient_reaches_only_predicting_rows():
    logits, input_ids, mask = _lm_batch(seed=2)
    logits.requires_grad_(True)
    completion_logprobs(logits, input_ids, mask).sum().backward()
    predicting = torch.zeros(mask.shape, dtype=torch.bool)
    predicting[:, :-1] = mask[:, 1:]
    row_has_grad = logits.grad.abs().sum(-1) > 0
    assert torch.equal(row_has_grad, predicting)


# ---------------------------------------------------------------- chunks of rows (issue #29)


def test_chunked_logprobs_equal_the_unchunked_with_the_same_gradient():
    logits, input_ids, mask = _lm_batch(seed=8)
    whole = logits.clone().requires_grad_(True)
    chunked = logits.clone().requires_grad_(True)
    lp_whole = completion_logprobs(whole, input_ids, mask, 0.7)
    lp_chunked = completion_logprobs(chunked, input_ids, mask, 0.7, chunk_rows=2)  # 5 chunks, the last of 1
    assert torch.equal(lp_chunked, lp_whole)
    (lp_whole * torch.arange(7.0)).sum().backward()
    (lp_chunked * torch.arange(7.0)).sum().backward()
    torch.testing.assert_close(chunked.grad, whole.grad, atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="chunk_rows"):
        completion_logprobs(logits, input_ids, mask, chunk_rows=0)


@pytest.mark.parametrize("keep", [7, 6])
def test_logprobs_from_hidden_states_equal_those_of_the_heads_logits(keep):
    logits, input_ids, mask = _lm_batch(seed=9)
    g = torch.Generator().manual_seed(9)
    head = torch.nn.Linear(5, 11, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(11, 5, generator=g))
    head.requires_grad_(False)  # frozen, as the LM head is under LoRA
    hidden = torch.randn(3, 7, 5, generator=g)[:, -keep:]  # like logits_to_keep
    via_logits, fused = hidden.clone().requires_grad_(True), hidden.clone().requires_grad_(True)
    expected = completion_logprobs(head(via_logits), input_ids, mask, 0.7)
    got = completion_logprobs_from_hidden(fused, head, input_ids, mask, 0.7, chunk_rows=2)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(fused.grad, via_logits.grad, atol=1e-6, rtol=0)
    with torch.no_grad():  # no gradient recorded: no checkpointing, same numbers
        assert torch.equal(
            completion_logprobs_from_hidden(hidden, head, input_ids, mask, 0.7, chunk_rows=2), got.detach()
        )


# ---------------------------------------------------------------- sampling temperature


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_logprobs_are_of_the_tempered_distribution(temperature):
    logits, input_ids, mask = _lm_batch(seed=4)
    got = completion_logprobs(logits, input_ids, mask, temperature)
    assert torch.allclose(got, _naive_logprobs(logits / temperature, input_ids, mask), atol=1e-5)
    assert not torch.allclose(got, _naive_logprobs(logits, input_ids, mask), atol=1e-2)  # T matters


def test_temperature_one_changes_nothing():
    logits, input_ids, mask = _lm_batch(seed=5)
    assert torch.equal(completion_logprobs(logits, input_ids, mask, 1.0), completion_logprobs(logits, input_ids, mask))
    assert torch.allclose(
        completion_logprobs(logits, input_ids, mask, 1.0), _naive_logprobs(logits, input_ids, mask), atol=1e-5
    )


def test_greedy_temperature_scores_at_one_and_negative_is_rejected():
    # Greedy decoding has no stochastic policy: log-probs fall back to T = 1 instead of logits / 0.
    assert logprob_temperature(0.0) == 1.0 and logprob_temperature(0.7) == 0.7
    logits, input_ids, mask = _lm_batch(seed=6)
    greedy = completion_logprobs(logits, input_ids, mask, 0.0)
    assert torch.isfinite(greedy).all()
    assert torch.equal(greedy, completion_logprobs(logits, input_ids, mask, 1.0))
    with pytest.raises(ValueError, match="temperature"):
        completion_logprobs(logits, input_ids, mask, -0.5)


def test_tempered_logprobs_keep_gradients_and_bf16_precision():
    logits, input_ids, mask = _lm_batch(seed=7)
    expected = _naive_logprobs(logits / 0.7, input_ids, mask)
    assert torch.allclose(completion_logprobs(logits.bfloat16(), input_ids, mask, 0.7), expected, atol=0.05)
    logits.requires_grad_(True)
    completion_logprobs(logits, input_ids, mask, 0.7).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


# ---------------------------------------------------------------- advantage magnitudes (issue #27)


def test_role_scale_keeps_the_size_of_a_gap_where_groups_of_two_do_not():
    # kind A: a validity gap (-1 vs 0); kind B: a difficulty gap (0 vs 0.5); one teacher's batch
    rewards = [-1.0, 0.0, 0.0, 0.5]
    groups = [("T", "propose", "code_o")] * 2 + [("T", "propose", "code_i")] * 2
    per_group = trr_plus_plus_advantages(rewards, groups)
    assert per_group[0].abs().item() == pytest.approx(per_group[2].abs().item(), rel=1e-4)  # both +-1: a sign
    scaled = trr_plus_plus_advantages(rewards, groups, scale_keys=[g[:2] for g in groups])
    assert (scaled[1] - scaled[0]).item() == pytest.approx(2 * (scaled[3] - scaled[2]).item(), rel=1e-4)  # ratio kept
    assert scaled[:2].sum().item() == pytest.approx(0.0, abs=1e-6) and scaled.square().mean().item() == pytest.approx(
        1.0, rel=1e-4
    )


def test_role_scale_leaves_degenerate_groups_at_zero_and_other_members_alone():
    rewards = [0.0, 0.0, 1.0, -0.5, 3.0]
    groups = [("T", "propose", "a")] * 2 + [("T", "propose", "b")] * 2 + [("U", "propose", "a")]
    adv = trr_plus_plus_advantages(rewards, groups, scale_keys=[g[:2] for g in groups])
    assert adv[:2].tolist() == [0.0, 0.0] and adv[4].item() == 0.0  # all equal; a singleton
    assert adv[2].item() > 0 > adv[3].item()
    with pytest.raises(ValueError, match="scale key"):
        trr_plus_plus_advantages(rewards, groups, scale_keys=["x"])


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_keeps_a_difficulty_gap_and_a_validity_gap_apart(preset):
    """At the preset's own group sizes (proposals per kind x kinds), a teacher batch with one invalid
    task, one contested task (rho = 1/2) and the rest teaching nothing gives the invalid and the
    contested task advantages of different size: the update sees the validity gap (-1) as larger
    than the difficulty gap (0.5)."""
    cfg = load_config(preset)
    n, kinds = cfg.rl.proposals_per_kind, cfg.tasks.kinds
    rewards = [0.0] * (n * len(kinds))
    groups = [("T", "propose", k) for k in kinds for _ in range(n)]
    rewards[0] = -1.0  # invalid, in the first kind's group
    rewards[1 if n >= 3 else n] = 0.5  # contested: the same group when it has room for a third value
    scale = [g[:2] for g in groups] if cfg.rl.advantage_scale == "role" else None
    adv = trr_plus_plus_advantages(rewards, groups, scale_keys=scale)
    nothing = [i for i in range(len(rewards)) if rewards[i] == 0.0 and groups[i] == groups[0]]
    invalid_gap = (adv[nothing[0]] - adv[0]).item()
    contested_index = 1 if n >= 3 else n
    same_group = [i for i in range(len(rewards)) if rewards[i] == 0.0 and groups[i] == groups[contested_index]]
    contested_gap = (adv[contested_index] - adv[same_group[0]]).item()
    assert invalid_gap > 0 and contested_gap > 0
    assert invalid_gap == pytest.approx(2 * contested_gap, rel=0.05), (invalid_gap, contested_gap)
