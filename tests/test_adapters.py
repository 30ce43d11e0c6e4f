"""Tests for the LoRA population (adapters.py, batch.py, checkpoint.py) and the batched multi-LoRA
forward (multilora.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from populora_nb.config import load_config
from populora_nb.lowrank import LoRAPair
from populora_nb.model import decoding
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.base import load_base
from populora_nb.model.batch import Generation, TrainBatch, train_batch
from populora_nb.model.batched_update import train_step
from populora_nb.model.checkpoint import load_member_factors
from populora_nb.model.decoding import sample_next
from populora_nb.rl import policy_gradient_loss

PROMPTS = ["Hello there", "def f(a):\n    return a", "x", "The quick brown fox jumps over"]


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny", {"lora.init": "random"})


@pytest.fixture(scope="module")
def base(cfg):
    return load_base(cfg)


@pytest.fixture()
def pop(base, cfg):
    # Large random B so members' greedy continuations differ on the random tiny model.
    # Members T0, T1, S0, S1 (slots 0..3).
    return Population.create(base, roles_for(2, 2), cfg.lora, seed=0, random_b_std=0.5)


def pg_loss(logprobs, batch):
    return policy_gradient_loss(logprobs, batch.completion_mask, batch.advantages, aggregation="sequence_mean")


def make_batch(pop: Population, member_id: str, n: int = 4) -> TrainBatch:
    gens = pop.generate([member_id] * n, PROMPTS[:n], max_new_tokens=6, stop_token_ids=[])
    return train_batch(gens, torch.linspace(-1.0, 1.0, n), pop.base.tokenizer.pad_token_id)


def snapshot(pop: Population) -> dict[str, torch.Tensor]:
    state = {f"base.{k}": v.clone() for k, v in pop.base.model.state_dict().items()}
    for m in pop.members:
        for name, pair in pop.factors(m.id).items():
            state[f"{m.id}.{name}.A"], state[f"{m.id}.{name}.B"] = pair.A, pair.B
    return state


# ---- creation ------------------------------------------------------------------------------------


def test_create_zero_b_members_share_function_but_not_a(base, cfg):
    lora = dataclasses.replace(cfg.lora, init="zero_b")
    pop = Population.create(base, roles_for(1, 2), lora, seed=3)
    assert pop.ids() == ["T0", "S0", "S1"] and pop.ids("student") == ["S0", "S1"]
    f0, f1 = pop.factors("T0"), pop.factors("S0")
    name = next(iter(f0))
    assert all((p.B == 0).all() for p in f0.values())
    assert not torch.equal(f0[name].A, f1[name].A)  # independent seeds
    assert pop.members[0].role == "teacher" and pop.members[2].role == "student"
    again = Population.create(base, roles_for(1, 2), lora, seed=3)
    assert torch.equal(again.factors("S0")[name].A, f1[name].A)  # seeded
    # B = 0: every member generates exactly what the bare base does.
    outs = pop.generate(["T0", "S0", "S1"], PROMPTS[:3], max_new_tokens=5)
    agent = Population.create(base, {"agent": "agent"}, lora, seed=99)
    bare = agent.generate(["agent"] * 3, PROMPTS[:3], max_new_tokens=5)
    assert [o.completion_ids for o in outs] == [o.completion_ids for o in bare]


def test_factor_shapes_follow_the_lora_pair_convention(pop, cfg):
    factors = pop.factors("T0")
    lin = pop.multi.modules["model.layers.0.mlp.down_proj"]
    pair = factors["model.layers.0.mlp.down_proj"]
    assert pair.A.shape == (cfg.lora.rank, lin.in_features) and pair.B.shape == (lin.out_features, cfg.lora.rank)
    assert len(factors) == 7 * pop.base.model.config.num_hidden_layers
    pair.A.zero_()  # a detached clone: the member is untouched
    assert pop.factors("T0")["model.layers.0.mlp.down_proj"].A.abs().sum() > 0


# ---- generation ----------------------------------------------------------------------------------


def test_mixed_batch_greedy_equals_each_member_alone(pop):
    ids = ["S1", "T1", "T0", "S0"]
    mixed = pop.generate(ids, PROMPTS, max_new_tokens=10)
    for m, prompt, got in zip(ids, PROMPTS, mixed):
        alone = pop.generate([m], [prompt], max_new_tokens=10)[0]
        assert got.completion_ids == alone.completion_ids and got.member_id == m
    # The members really differ, so routing a row to the wrong adapter would be caught.
    same_prompt = pop.generate(pop.ids(), [PROMPTS[1]] * 4, max_new_tokens=10)
    assert len({tuple(g.completion_ids) for g in same_prompt}) > 1


def test_more_rows_than_members_uses_the_dense_path_and_still_matches(pop):
    ids = ["T0", "T1", "T0", "S0", "S1", "T1"]  # 6 rows > 4 members
    prompts = PROMPTS + PROMPTS[:2]
    mixed = pop.generate(ids, prompts, max_new_tokens=8)
    for m, prompt, got in zip(ids, prompts, mixed):
        assert got.completion_ids == pop.generate([m], [prompt], max_new_tokens=8)[0].completion_ids


def test_generation_leaves_the_base_model_untouched(pop):
    model, tok = pop.base.model, pop.base.tokenizer
    ids = torch.tensor([tok("Hello there")["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
        pop.generate(["T0", "T1"], PROMPTS[:2], max_new_tokens=3)
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)
    assert not any(m._forward_hooks for m in pop.multi.modules.values())


def test_sampling_is_seeded_and_leaves_global_rng_alone(pop):
    rng = torch.random.get_rng_state()
    run = lambda seed: pop.generate(  # noqa: E731
        pop.ids(),
        PROMPTS,
        max_new_tokens=8,
        temperature=1.0,
        top_p=0.9,
        generator=torch.Generator().manual_seed(seed),
    )
    a, b, c = run(7), run(7), run(8)
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]
    assert [g.completion_ids for g in a] != [g.completion_ids for g in c]
    assert torch.equal(rng, torch.random.get_rng_state())
    with pytest.raises(ValueError, match="generator"):
        pop.generate(["T0"], PROMPTS[:1], temperature=1.0)


def test_stop_token_ends_a_row_and_is_kept(pop):
    free = pop.generate(["T0", "T1"], PROMPTS[:2], max_new_tokens=6)
    stop = free[0].completion_ids[2]
    got = pop.generate(["T0", "T1"], PROMPTS[:2], max_new_tokens=6, stop_token_ids=[stop])
    first = free[0].completion_ids.index(stop)
    assert got[0].completion_ids == free[0].completion_ids[: first + 1] and got[0].stopped
    assert len(got[1].completion_ids) <= 6


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.6, gen)) for _ in range(200)}
    assert draws == {0, 1}  # 0.5 < 0.6 so the second token is needed; the rest never appear
    assert int(sample_next(logits, 0.0, 1.0, None)) == 0


# ---- training ------------------------------------------------------------------------------------


def test_train_step_touches_only_its_member(pop):
    batch = make_batch(pop, "T1")
    before = snapshot(pop)
    stats = train_step(pop, "T1", batch, pg_loss)
    after = snapshot(pop)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("T1.") for k in changed)
    assert stats["optim/grad_norm"] > 0 and "loss/pg" in stats
    assert set(pop.optimizers) == {"T1"}
    # A later step of another member must not move T1 (no shared optimizer momentum).
    mid = snapshot(pop)
    train_step(pop, "S0", make_batch(pop, "S0"), pg_loss)
    end = snapshot(pop)
    assert {k for k in mid if not torch.equal(mid[k], end[k])} <= {k for k in mid if k.startswith("S0.")}


def test_gradient_checkpointing_and_micro_batches_give_the_same_update(base, cfg):
    results = []
    for gc, micro in [(False, None), (True, None), (False, 2)]:
        lora = dataclasses.replace(cfg.lora, gradient_checkpointing=gc)
        pop = Population.create(base, roles_for(1, 1), lora, seed=0, random_b_std=0.5)
        stats = train_step(pop, "T0", make_batch(pop, "T0"), pg_loss, micro_batch_size=micro)
        results.append((stats["optim/grad_norm"], pop.factors("T0")))
    for norm, factors in results[1:]:
        assert norm == pytest.approx(results[0][0], rel=1e-4)
        for name, pair in factors.items():
            torch.testing.assert_close(pair.A, results[0][1][name].A, rtol=1e-4, atol=1e-6)


def test_each_micro_batch_is_padded_to_its_own_longest_row_and_the_update_is_unchanged(base, cfg):
    # Issue #29: rows sorted by length, each micro-batch trimmed to its longest, same gradient.
    tok = base.tokenizer
    prompts = ["x", PROMPTS[3] * 3, "y =", PROMPTS[1]]
    gens = [Generation("T0", tok(p)["input_ids"], [5, 6, 7], "", True) for p in prompts]
    lengths = sorted((len(g.prompt_ids) + 3 for g in gens), reverse=True)
    widths, norms = [], []
    for micro in (None, 2):
        pop = Population.create(base, roles_for(1, 1), cfg.lora, seed=0, random_b_std=0.5)
        batch = train_batch(gens, [1.0, -1.0, 0.5, -0.5], tok.pad_token_id)

        def loss(logprobs, b):
            widths.append(b.input_ids.shape[1])
            return pg_loss(logprobs, b)

        norms.append(train_step(pop, "T0", batch, loss, micro_batch_size=micro)["optim/grad_norm"])
    assert widths == [lengths[0], lengths[0], lengths[2]]  # whole batch; then its two micro-batches
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)
    trimmed = batch.rows(slice(0, 1)).trimmed()  # "x" alone: every padding column dropped
    assert trimmed.input_ids.shape[1] == len(gens[0].prompt_ids) + 3 and bool(trimmed.attention_mask.all())
    assert trimmed.advantages.shape == (1,)


def test_micro_batches_weighted_by_tokens_reproduce_a_token_mean_step(base, cfg):
    def token_loss(logprobs, batch):
        return policy_gradient_loss(logprobs, batch.completion_mask, batch.advantages, aggregation="token_mean")

    norms = {}
    for micro, weight_by in [(None, "rows"), (1, "tokens"), (1, "rows")]:
        pop = Population.create(base, roles_for(1, 1), cfg.lora, seed=0, random_b_std=0.5)
        batch = make_batch(pop, "T0")
        batch.completion_mask[0, -5:] = 0  # completions of unequal length: 1, 6, 6, 6 scored tokens
        stats = train_step(pop, "T0", batch, token_loss, micro_batch_size=micro, weight_by=weight_by)
        norms[(micro, weight_by)] = stats["optim/grad_norm"]
    assert norms[(1, "tokens")] == pytest.approx(norms[(None, "rows")], rel=1e-4)
    assert norms[(1, "rows")] != pytest.approx(norms[(None, "rows")], rel=1e-2)  # rows would be wrong here
    with pytest.raises(ValueError, match="weight_by"):
        train_step(pop, "T0", batch, token_loss, weight_by="sequences")


def test_logprobs_of_the_base_ignore_the_adapters(pop):
    batch = make_batch(pop, "T0")
    base_lp = pop.logprobs(None, batch)
    member_lp = pop.logprobs("T0", batch)
    mask = batch.completion_mask.bool()
    assert not torch.allclose(base_lp[mask], member_lp[mask])
    assert (base_lp[~mask] == 0).all() and (base_lp[mask] < 0).all()


def _sample_recording_logprobs(pop, member_id, temperature, monkeypatch, n=3):
    """Sample with the package's own decoder and record, at every step, the log-prob the sampler
    drew each token with: log_softmax(logits / T)[token] of the very logits ``sample_next`` saw."""
    steps = []

    def recording_sample_next(logits, temperature, top_p, generator):
        token = sample_next(logits, temperature, top_p, generator)
        if temperature > 0:
            steps.append(torch.log_softmax(logits.float() / temperature, -1).gather(1, token[:, None]).squeeze(1))
        return token

    monkeypatch.setattr(decoding, "sample_next", recording_sample_next)
    gens = pop.generate(
        [member_id] * n,
        PROMPTS[:n],
        max_new_tokens=6,
        temperature=temperature,
        generator=torch.Generator().manual_seed(3),
        stop_token_ids=[],
    )
    monkeypatch.undo()
    return gens, (torch.stack(steps, dim=1) if steps else None)  # (n, 6): no row stops early


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_trainer_logprobs_are_the_samplers_at_the_sampling_temperature(pop, monkeypatch, temperature):
    gens, sampler_logp = _sample_recording_logprobs(pop, "T1", temperature, monkeypatch)
    batch = train_batch(gens, torch.tensor([1.0, -1.0, 0.5]), pop.base.tokenizer.pad_token_id, temperature=temperature)
    mask = batch.completion_mask.bool()
    old = pop.logprobs("T1", batch)  # the old log-probs of a PPO epoch
    torch.testing.assert_close(old[mask].view_as(sampler_logp), sampler_logp, atol=1e-4, rtol=0)
    torch.testing.assert_close(old.sum(1), sampler_logp.sum(1), atol=1e-4, rtol=0)
    # The new log-probs of train_step's first epoch are the same numbers: the PPO ratio is exactly 1.
    batch.old_logprobs = old
    seen = {}

    def loss_fn(logprobs, b):
        seen["new"] = logprobs.detach()
        return policy_gradient_loss(logprobs, b.completion_mask, b.advantages, old_logprobs=b.old_logprobs)

    stats = train_step(pop, "T1", batch, loss_fn)
    assert torch.equal(seen["new"], old)
    assert stats["policy/ratio_max"] == 1.0 and stats["policy/clip_frac"] == 0.0


def test_greedy_batches_score_at_temperature_one(pop):
    gens = pop.generate(["T0", "T0"], PROMPTS[:2], max_new_tokens=6, stop_token_ids=[])  # temperature 0
    pad = pop.base.tokenizer.pad_token_id
    greedy = train_batch(gens, [1.0, -1.0], pad, temperature=0.0)
    lp = pop.logprobs("T0", greedy)
    assert torch.isfinite(lp).all() and torch.equal(lp, pop.logprobs("T0", train_batch(gens, [1.0, -1.0], pad)))
    stats = train_step(pop, "T0", greedy, pg_loss, micro_batch_size=1)  # rows() keeps the temperature
    assert stats["optim/grad_norm"] > 0 and all(v == v for v in stats.values())  # no NaN
    assert greedy.rows(slice(0, 1)).temperature == 0.0
    with pytest.raises(ValueError, match="temperature"):
        train_batch(gens, [1.0, -1.0], pad, temperature=-1.0)


# ---- evolution hooks -----------------------------------------------------------------------------


def test_replace_gives_a_new_member_in_the_same_slot(pop):
    train_step(pop, "T0", make_batch(pop, "T0"), pg_loss)
    child_factors = {n: LoRAPair(p.A * 0.5, p.B * 2.0) for n, p in pop.factors("T1").items()}
    child = pop.replace("T0", "teacher-s5-0", child_factors, parents=("T1",), birth_step=5, operator="mutation_test")
    assert child.id == "teacher-s5-0" and child.slot == 0 and child.parents == ("T1",) and child.role == "teacher"
    assert pop.ids() == ["teacher-s5-0", "T1", "S0", "S1"] and "T0" not in pop.optimizers
    name = next(iter(child_factors))
    assert torch.equal(pop.factors(child.id)[name].B, child_factors[name].B)
    with pytest.raises(ValueError, match="shapes"):
        pop.set_factors(child.id, {n: LoRAPair(p.A[:1], p.B[:, :1]) for n, p in child_factors.items()})
    with pytest.raises(ValueError, match="already a member"):
        pop.replace("S0", "T1", child_factors)
    with pytest.raises(KeyError, match="no member 'T0'"):
        pop.factors("T0")


# ---- save / load ---------------------------------------------------------------------------------


def test_population_save_load_round_trip_is_exact(pop, tmp_path):
    batch = make_batch(pop, "S0")
    train_step(pop, "S0", batch, pg_loss)
    pop.save(tmp_path / "ckpt")
    loaded = Population.load(pop.base, tmp_path / "ckpt")
    assert loaded.members == pop.members
    assert all(torch.equal(snapshot(pop)[k], v) for k, v in snapshot(loaded).items())
    # Restored AdamW moments: the next step is identical in both.
    train_step(pop, "S0", batch, pg_loss)
    train_step(loaded, "S0", batch, pg_loss)
    for name, pair in pop.factors("S0").items():
        assert torch.equal(pair.A, loaded.factors("S0")[name].A) and torch.equal(pair.B, loaded.factors("S0")[name].B)


def test_member_save_load_round_trip_is_exact(pop, tmp_path):
    pop.save_member("S1", tmp_path / "m3")
    factors, config = load_member_factors(tmp_path / "m3")
    assert config["r"] == pop.lora.rank and config["lora_alpha"] == pop.lora.alpha
    for name, pair in pop.factors("S1").items():
        assert torch.equal(factors[name].A, pair.A) and torch.equal(factors[name].B, pair.B)
    pop.set_factors("T0", factors)
    assert [g.completion_ids for g in pop.generate(["T0"], PROMPTS[:1])] == [
        g.completion_ids for g in pop.generate(["S1"], PROMPTS[:1])
    ]


def test_peft_loads_a_saved_member_and_gives_the_same_logits(pop, cfg, tmp_path):
    from peft import PeftModel

    pop.save_member("S0", tmp_path / "m2")
    fresh = load_base(cfg)  # peft injects its layers into the model it wraps: use a separate copy
    peft_model = PeftModel.from_pretrained(fresh.model, str(tmp_path / "m2"))
    tok = pop.base.tokenizer
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        ours_slot = pop.member("S0").slot
        with pop.multi.route_slot(ours_slot):
            ours = pop.base.model(**enc).logits
        theirs = peft_model(**enc).logits
        bare = pop.base.model(**enc).logits
    mask = enc["attention_mask"].bool()
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-4, atol=1e-5)
    assert (ours[mask] - bare[mask]).abs().max() > 1e-3  # the adapter matters


def test_train_batch_left_pads_and_marks_completions(base):
    gens = [Generation("T0", [5, 6, 7], [8, 9], "", True), Generation("S0", [5], [8, 9, 10], "", False)]
    b = train_batch(gens, [1.0, -1.0], pad_token_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [0, 5, 8, 9, 10]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert b.completion_mask.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]]
    assert b.logits_to_keep == 4


# ---- the real model ------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_smollm2_mixed_batch_equals_members_alone():
    smoke = load_config("smoke", {"lora.init": "random", "model.dtype": "float32"})  # exact batching checks
    real = load_base(smoke)
    pop = Population.create(real, roles_for(2, 2), smoke.lora, seed=0, random_b_std=0.05)
    tok = real.tokenizer
    qs = ["Write a Python function that reverses a string.", "What is 2+2?", "Name a prime.", "Say hi."]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in qs
    ]
    mixed = pop.generate(pop.ids(), prompts, max_new_tokens=12)
    for m, prompt, got in zip(pop.ids(), prompts, mixed):
        assert got.completion_ids == pop.generate([m], [prompt], max_new_tokens=12)[0].completion_ids
    assert all(g.text.strip() for g in mixed)


def test_memory_reports_factor_bytes(pop, cfg):
    mem = pop.memory()
    n_params = sum(cfg.lora.rank * (m.in_features + m.out_features) for m in pop.multi.modules.values())
    assert mem["per_member_mib"] * 2**20 == pytest.approx(4 * n_params)
    assert mem["factors_mib"] == pytest.approx(4 * mem["per_member_mib"])
    assert mem["optimizer_mib"] == 0  # AdamW moments appear with a member's first step
    train_step(pop, "T0", make_batch(pop, "T0"), pg_loss)
    assert pop.memory()["optimizer_mib"] == pytest.approx(2 * mem["per_member_mib"], rel=1e-2)  # + step counters


def test_bf16_base_keeps_fp32_factors_and_trains_them():
    cfg16 = load_config("tiny", {"lora.init": "random", "model.dtype": "bfloat16"})
    base16 = load_base(cfg16)
    pop = Population.create(base16, roles_for(1, 1), cfg16.lora, seed=0, random_b_std=0.5)
    assert pop.factors("T0")["model.layers.0.self_attn.q_proj"].A.dtype == torch.float32
    mixed = pop.generate(["S0", "T0"], PROMPTS[:2], max_new_tokens=5)
    assert mixed[0].completion_ids == pop.generate(["S0"], PROMPTS[:1], max_new_tokens=5)[0].completion_ids
    before = pop.factors("T0")
    stats = train_step(pop, "T0", make_batch(pop, "T0", n=2), pg_loss)
    assert stats["optim/grad_norm"] > 0
    assert any(not torch.equal(before[n].A, p.A) for n, p in pop.factors("T0").items())
