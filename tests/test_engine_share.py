"""The engine's share of the card, counted before it starts (stands in for the GPU branch of
`VLLMEngine.__init__`, which reads the card's size and applies this arithmetic): the counts match a
real model's parameters, the `gpu` and `paper` presets' numbers are those of docs/gpu-memory.md, and
a share above what fits beside the trainer is refused."""

import dataclasses

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_nb.config import load_config
from populora_nb.model.engine_share import (
    GIB,
    MAX_SHARE,
    EngineShareError,
    activation_bytes_per_token,
    base_params,
    checked_share,
    lora_params,
    measured_check,
    run_share,
    trainer_memory,
)
from populora_nb.model.vllm_setup import adapter_bytes

QWEN_1_5B = Qwen2Config(
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    vocab_size=151936,
    tie_word_embeddings=True,
)
QWEN_7B = Qwen2Config(
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    vocab_size=152064,
    tie_word_embeddings=False,
)


def test_the_counts_are_a_real_models(tiny_base):
    """Parameter counts from the config equal the modules' own, for the tiny Llama and a small Qwen2
    (q/k/v biases, untied head), and one adapter's count equals what the engine's adapter file holds."""
    assert base_params(tiny_base.model.config) == tiny_base.n_parameters
    small = Qwen2Config(
        hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=300, tie_word_embeddings=False,
    )  # fmt: skip
    assert base_params(small) == sum(p.numel() for p in Qwen2ForCausalLM(small).parameters())
    lora = load_config("tiny").lora
    assert lora_params(tiny_base.model.config, lora) * 4 == adapter_bytes(tiny_base.model, lora)


def test_the_gpu_and_paper_numbers_of_the_memory_table():
    """Qwen2.5-Coder 1.5B and 7B as published (1.54B / 7.62B parameters), the adapters and activations
    docs/performance.md counted, and the shares docs/gpu-memory.md states for an 80 GiB card."""
    assert base_params(QWEN_1_5B) == pytest.approx(1.544e9, rel=1e-3)
    assert base_params(QWEN_7B) == pytest.approx(7.616e9, rel=1e-3)
    gpu, paper = load_config("gpu"), load_config("paper")
    assert lora_params(QWEN_1_5B, gpu.lora) == pytest.approx(18.46e6, rel=1e-3)
    assert lora_params(QWEN_7B, paper.lora) == pytest.approx(80.74e6, rel=1e-3)
    assert activation_bytes_per_token(QWEN_1_5B, checkpointing=False) == pytest.approx(2.6e6, rel=0.02)
    assert activation_bytes_per_token(QWEN_7B, checkpointing=True) == pytest.approx(0.40e6, rel=0.02)
    for config, cfg, share in ((gpu, QWEN_1_5B, 0.52), (paper, QWEN_7B, 0.54)):
        assert config.rollout.gpu_memory_utilization == "auto"
        trainer, got = run_share(config, cfg, 2, 80 * GIB)
        assert got == pytest.approx(share, abs=0.005)
        assert trainer.total + got * 80 * GIB == pytest.approx(80 * GIB)


def test_a_share_never_goes_above_what_fits():
    paper = load_config("paper")
    trainer = trainer_memory(QWEN_7B, paper.lora, 9, 2, 14240)
    assert checked_share("auto", trainer, 1000 * GIB, QWEN_7B, 14240) == MAX_SHARE  # a huge card: vLLM's cap
    assert checked_share(0.3, trainer, 80 * GIB, QWEN_7B, 14240) == 0.3  # asked for less: kept
    with pytest.raises(EngineShareError, match="above the 0.54") as e:
        checked_share(0.8, trainer, 80 * GIB, QWEN_7B, 14240)
    assert "\n" not in str(e.value)
    with pytest.raises(EngineShareError, match="rl.micro_batch"):  # the trainer alone nearly fills a 48 GiB card
        checked_share("auto", trainer, 48 * GIB, QWEN_7B, 14240)
    unchecked = dataclasses.replace(paper.lora, gradient_checkpointing=False)
    heavy = trainer_memory(QWEN_7B, unchecked, 9, 2, 14240)
    assert heavy.activations > 10 * trainer.activations  # why paper checkpoints
    with pytest.raises(EngineShareError):
        checked_share("auto", heavy, 80 * GIB, QWEN_7B, 14240)


def test_the_count_is_checked_against_what_the_trainer_held():
    """The doctor's check after the first step: a trainer that held more than its count (here 6 GiB
    more, as an undercounted activation term would) is named with the share that would fit; one within
    its count passes; without a GPU nothing is claimed."""
    paper = load_config("paper")
    trainer, share = run_share(paper, QWEN_7B, 2, 80 * GIB)
    within = measured_check(trainer, share, 80 * GIB, trainer.total - GIB)
    assert within.startswith("trainer within its count") and f"{share:.2f} fits" in within
    over = measured_check(trainer, share, 80 * GIB, trainer.total + 6 * GIB)
    fits = (80 * GIB - trainer.total - 6 * GIB - trainer.margin) / (80 * GIB)
    assert over.startswith("trainer over its count by 6.0 GiB") and f"gpu_memory_utilization={fits:.2f}" in over
    assert fits < share and "\n" not in over
    assert "no GPU" in measured_check(trainer, share, 80 * GIB, None)


def test_a_checkpoint_copies_optimizer_state_to_host_memory(tiny_base, monkeypatch, tmp_path):
    """Population.save hands write_population copies on the CPU, never the live AdamW tensors (on a
    GPU a clone would sit beside the awake engine; here the copy is what can be checked)."""
    from populora_nb.model import adapters
    from populora_nb.model.adapters import Population, roles_for
    from populora_nb.model.batch import Generation, train_batch
    from populora_nb.model.batched_update import train_step
    from populora_nb.rl import policy_gradient_loss

    pop = Population.create(tiny_base, roles_for(1, 0), load_config("tiny").lora, seed=0)
    tok = tiny_base.tokenizer
    batch = train_batch([Generation("T0", tok("x")["input_ids"], [5, 6], "", True)] * 2, [1.0, -1.0], 0)
    train_step(pop, "T0", batch, lambda lp, b: policy_gradient_loss(lp, b.completion_mask, b.advantages))
    seen = {}
    monkeypatch.setattr(adapters, "write_population", lambda d, saved: seen.update(saved.optimizer_states))
    pop.save(tmp_path)
    live = {t.data_ptr() for s in pop.optimizers["T0"].state.values() for t in s.values() if torch.is_tensor(t)}
    assert seen["T0"] and all(t.device.type == "cpu" for t in seen["T0"].values())
    assert not live & {t.data_ptr() for t in seen["T0"].values()}
