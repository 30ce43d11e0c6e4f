"""Each prompt processed once (model.shared_prompt) gives the update the per-row passes give.

Two policies start identical on the tiny model (float32); one runs every repeated prompt once
(rl.share_prompts=true), the other every row through its own pass. Students train on k rollouts of
shared prompts of different lengths (left-padded), teachers on distinct prompts. After the same
update each member's LoRA factors and AdamW moments agree to relative 1e-5, for the sequential and
the batched update, micro-batches that split a group, PPO epochs with old log-probs and a KL
reference, gradient checkpointing, and an evolved child. A shared path that dropped a row, padded a
group wrongly or counted a prompt's gradient twice (or not at all) moves the factors off those of
the per-row passes; the direct tests also count the prompt tokens the shared pass really runs.
"""

from __future__ import annotations

import pytest
import torch
from scripted import spread_members
from test_batched_update import LR, _assert_same, _state

from populora_nb.config import load_config
from populora_nb.model.adapters import roles_for
from populora_nb.model.batch import Generation, train_batch
from populora_nb.model.multilora import checkpointing
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.scoring import lm_completion_logprobs
from populora_nb.model.shared_prompt import grouped_order, prompt_groups, shared_prompt_logprobs
from populora_nb.policy import Sample

ROSTER = list(roles_for(2, 3).items())  # T0 T1 S0 S1 S2
PROMPTS = [
    "def f(x):\n    return x + 1\n\nassert f(",
    "The answer is",
    "import numpy as np\nxs = np.arange(10)\nprint(",
    "x = [1, 2,",
    "Write a function that adds two numbers and returns",
]
K = 4


def _policy(tiny_base, share: bool, mode: str, **overrides) -> LoRAPolicy:
    settings = {"rl.update": mode, "rl.share_prompts": share, "lora.lr": LR, "rl.micro_batch": 3, **overrides}
    policy = LoRAPolicy.create(load_config("tiny", settings), ROSTER, base=tiny_base)
    spread_members(policy, scale=0.2, seed=10)  # members apart, so a row under the wrong member shows
    return policy


def _samples(policy: LoRAPolicy, seed: int, renamed: dict[str, str] | None = None) -> dict[str, list[Sample]]:
    """Teachers: distinct prompts, one completion each. Students: K rollouts of each of their prompts
    (S2 three of one), completions of sampled lengths, advantages of both signs."""
    plan = {"T0": [0, 1, 2], "T1": [3, 4], "S0": [0, 2] * K, "S1": [1, 4, 0] * K, "S2": [3] * 3}
    out: dict[str, list[Sample]] = {}
    for j, (m, picks) in enumerate(plan.items()):
        m = (renamed or {}).get(m, m)
        prompts = [PROMPTS[p] for p in sorted(picks)]
        comps = policy.generate([m] * len(prompts), prompts, 5 + j, seed=seed + j)
        out[m] = [
            Sample(m, p, c.text, 0.0, (m,), (1.0, -1.5, 0.5, -0.25)[i % 4], c.token_ids)
            for i, (p, c) in enumerate(zip(prompts, comps))
        ]
    return out


CASES = {
    "reinforce-groups-split": {},
    "ppo-epochs-old-logprobs-and-kl": {"rl.ppo_epochs": 2, "rl.kl_coef": 0.1},
    "one-micro-batch": {"rl.micro_batch": 64},
    "gradient-checkpointing": {"lora.gradient_checkpointing": True, "rl.micro_batch": 5},
}


@pytest.mark.parametrize("mode", ["batched", "sequential"])
@pytest.mark.parametrize("case", list(CASES))
def test_shared_prompt_update_equals_the_per_row_update(tiny_base, mode, case):
    shared, per_row = _policy(tiny_base, True, mode, **CASES[case]), _policy(tiny_base, False, mode, **CASES[case])
    samples = _samples(per_row, seed=1)
    assert _samples(shared, seed=1) == samples  # same start, same draws (shared prefill included)
    before = {m: _state(shared, m) for m in shared.members}
    stats_s, stats_p = shared.update_members(samples), per_row.update_members(samples)
    for m in stats_p:
        for k in ("loss/pg", "optim/grad_norm"):
            assert stats_s[m][k] == pytest.approx(stats_p[m][k], rel=1e-4, abs=1e-6), (m, k)
    _assert_same(shared, per_row, shared.members)
    for m in shared.members:  # every member took a step: the equality is not that of untouched factors
        assert any(not torch.equal(before[m][k], v) for k, v in _state(shared, m).items()), m


def test_a_resumed_population_and_an_evolved_child_train_identically(tiny_base, tmp_path):
    first = _policy(tiny_base, False, "batched")
    first.update_members(_samples(first, seed=1))
    first.save(tmp_path / "ckpt")
    runs = []
    for share in (True, False):
        p = _policy(tiny_base, share, "batched")
        p.load(tmp_path / "ckpt")
        p.replace("S1", "child", p.factors("S0"), ["S0"], "copy", step=1, inherit_optimizer_from="S0")
        p.update_members(_samples(p, seed=2, renamed={"S1": "child"}))
        runs.append(p)
    _assert_same(runs[0], runs[1], runs[0].members)


def _batch(tiny_base, member_rows: list[tuple[int, int]], seed: int = 0):
    """A train batch of (prompt index, completion length) rows with random completion tokens."""
    tok, g = tiny_base.tokenizer, torch.Generator().manual_seed(seed)
    gens = []
    for p, n in member_rows:
        prompt = tok(PROMPTS[p], add_special_tokens=False)["input_ids"]
        gens.append(Generation("S0", prompt, torch.randint(0, 2000, (n,), generator=g).tolist(), "", True))
    advantages = torch.linspace(-1.0, 1.5, len(gens))
    return train_batch(gens, advantages, tok.pad_token_id, temperature=0.7)


def _logprobs_and_grads(policy, batch, shared: bool, gc: bool = False):
    pop, model = policy.population, policy.base.model
    slot = pop.member("S0").slot
    pop.zero_grad("S0")
    with pop.multi.route_slot(slot), checkpointing(model, gc):
        lp = shared_prompt_logprobs(model, batch) if shared else lm_completion_logprobs(model, batch)
        (lp * batch.advantages[:, None]).sum().backward()
    return lp.detach(), [p.grad.clone() for p in pop.multi.parameters(slot)]


@pytest.mark.parametrize("gc", [False, True], ids=["plain", "checkpointed"])
def test_shared_logprobs_and_gradients_equal_the_per_row_ones(tiny_base, gc):
    policy = _policy(tiny_base, True, "sequential")
    rows = [(0, 3), (1, 7), (0, 5), (2, 1), (0, 4), (1, 2), (3, 6)]  # groups of 3, 2, 1, 1; left-padded prompts
    batch = _batch(tiny_base, rows)
    groups = prompt_groups(batch)
    assert groups.n_groups == 4 and groups.row_group.tolist() == [0, 1, 0, 2, 0, 1, 3]
    lp_s, g_s = _logprobs_and_grads(policy, batch, True, gc)
    lp_p, g_p = _logprobs_and_grads(policy, batch, False, gc)
    assert torch.equal(lp_s != 0, batch.completion_mask.bool())  # every scored token of every row, nothing else
    torch.testing.assert_close(lp_s, lp_p, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_s, g_p):
        assert float((a - b).norm() / b.norm()) <= 1e-5


def test_the_prompt_runs_once_per_group(tiny_base):
    """The embedding sees each group's prompt once (its prefix) plus each row's suffix, against every
    row's whole sequence on the per-row path."""
    policy = _policy(tiny_base, True, "sequential")
    batch = _batch(tiny_base, [(4, 3)] * K + [(1, 2)])
    seen: list[int] = []
    embed = policy.base.model.get_input_embeddings()
    handle = embed.register_forward_hook(lambda mod, args, out: seen.append(int(args[0].numel())))
    try:
        _logprobs_and_grads(policy, batch, True)
    finally:
        handle.remove()
    prompt_len = [len(policy.base.tokenizer(PROMPTS[p], add_special_tokens=False)["input_ids"]) for p in (4, 1)]
    assert seen == [2 * (max(prompt_len) - 1), (K + 1) * (1 + 3)]  # prefix pass (G rows), suffix pass (B rows)


def test_grouped_order_keeps_a_groups_rows_together(tiny_base):
    # a single (prompt 4, the longest) and two groups: the largest group first, then by length
    batch = _batch(tiny_base, [(4, 1), (0, 3), (1, 9), (0, 5), (1, 2), (0, 4)])
    order = grouped_order(batch).tolist()
    groups = prompt_groups(batch).row_group[order].tolist()
    assert sorted(order) == list(range(6)) and groups == [1, 1, 1, 2, 2, 0]
    assert order[:3] == [3, 5, 1]  # the group's rows longest first


def test_rows_of_other_members_never_share_a_prompt(tiny_base):
    batch = _batch(tiny_base, [(0, 3), (0, 4), (0, 2)])
    assert prompt_groups(batch, owners=[0, 1, 1]).group_owner == [0, 1]
    with pytest.raises(ValueError, match="one owner per row"):
        prompt_groups(batch, owners=[0])


def test_a_row_whose_completion_is_not_at_its_end_is_refused(tiny_base):
    batch = _batch(tiny_base, [(0, 3), (0, 4)])
    batch.completion_mask[0] = batch.completion_mask[0].roll(-1)
    with pytest.raises(ValueError, match="row 0: its completion must be the row's last tokens"):
        prompt_groups(batch)


def test_route_groups_layouts_must_route_the_same_members(tiny_base):
    multi = _policy(tiny_base, True, "batched").population.multi
    with pytest.raises(ValueError, match="other slots"):
        with multi.route_groups([2, 2, 3], also=[[3, 2]]):
            pass
    with pytest.raises(ValueError, match="route them differently"):
        with multi.route_groups([2, 2, 3], also=[[2, 3, 3]]):
            pass
    with multi.route_groups([2, 2, 3], also=[[2, 3]]):
        pass
    assert not multi._handles


# ---- generation: each distinct (member, prompt) prefilled once ----------------------------------


def _generate(policy, share: bool, temperature: float, seen: list[int] | None = None):
    members = ["S0", "S1", "S0", "T0", "S1", "S0", "S0"]  # repeats not adjacent: the batch's row order is kept
    prompts = [PROMPTS[i] for i in (0, 0, 1, 0, 0, 0, 1)]
    embed = policy.base.model.get_input_embeddings()
    handle = embed.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)))
    try:
        gens = policy.population.generate(
            members,
            prompts,
            max_new_tokens=12,
            temperature=temperature,
            generator=torch.Generator().manual_seed(5) if temperature else None,
            stop_token_ids=[],
            share_prompts=share,
        )
    finally:
        handle.remove()
    return [(g.member_id, g.prompt_ids, g.completion_ids) for g in gens]


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_shared_prefill_generates_the_same_tokens(tiny_base, temperature):
    policy = _policy(tiny_base, True, "batched")
    seen_shared: list[tuple[int, ...]] = []
    seen_rows: list[tuple[int, ...]] = []
    shared = _generate(policy, True, temperature, seen_shared)
    per_row = _generate(policy, False, temperature, seen_rows)
    assert shared == per_row  # token for token; sampled: the same draws from the same seed
    assert len({tuple(c) for _, _, c in per_row}) > 2  # members and prompts really differ
    width = seen_rows[0][1]
    assert seen_rows[0] == (7, width) and seen_shared[0] == (4, width)  # prefill: 4 distinct (member, prompt)
    assert seen_shared[1:] == seen_rows[1:] == [(7, 1)] * 11  # then every row decodes
