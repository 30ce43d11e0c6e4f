"""`model.weights=random` (issue #29): the gpu and paper presets' architectures, shipped as config.json,
built with random weights and no download; what a vLLM engine needs to load the same shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from populora_nb.config import ConfigError, ModelConfig, load_config
from populora_nb.model.base import load_base
from populora_nb.model.random_base import (
    ARCHITECTURE_DIR,
    ARCHITECTURES,
    architecture,
    model_config,
)
from populora_nb.model.sources import ModelLoadError, byte_tokenizer


def parameter_count(mc: ModelConfig) -> int:
    """Parameters of the architecture, counted on the meta device (no memory, no init)."""
    cfg = model_config(mc, byte_tokenizer())
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("preset", "billions", "tied"),
    [("gpu", 1.54, True), ("paper", 7.61, False)],  # the Qwen2.5-Coder model cards: 1.54B and 7.61B parameters
)
def test_the_presets_architectures_have_the_model_cards_parameter_counts(preset, billions, tied):
    mc = load_config(preset, {"model.weights": "random"}).model
    assert mc.name in ARCHITECTURES
    assert int(parameter_count(mc) / 1e7) / 100 == billions  # the cards truncate (7,615,616,512 is "7.61B")
    values = architecture(mc)
    assert values["num_hidden_layers"] == 28 and values["tie_word_embeddings"] is tied


def test_random_layers_shortens_the_architecture_only():
    mc = load_config("paper", {"model.weights": "random", "model.random_layers": 2}).model
    values = architecture(mc)
    assert values["num_hidden_layers"] == 2 and values["hidden_size"] == 3584 and values["vocab_size"] == 152064


def test_random_layers_without_random_weights_is_refused():
    with pytest.raises(ConfigError, match="random_layers.*weights=random"):
        load_config("gpu", {"model.random_layers": 2})


def test_a_model_whose_shape_is_not_shipped_says_which_are():
    with pytest.raises(ModelLoadError, match="Qwen/Qwen2.5-Coder-7B"):
        architecture(ModelConfig(name="org/unknown-model", weights="random"))


def small_qwen_dir(tmp_path):
    """A local directory holding only a config.json: a Qwen2 of the real head sizes, narrow."""
    values = json.loads((ARCHITECTURE_DIR / "qwen2.5-coder-1.5b.json").read_text())
    values |= {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
    values |= {"vocab_size": 1024, "num_hidden_layers": 3}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(values))
    return str(tmp_path)


@pytest.mark.slow  # loads the bundled tokenizer
def test_load_base_builds_the_architecture_with_random_weights_and_an_engine_directory(tmp_path):
    name = small_qwen_dir(tmp_path / "model")
    cfg = {"model.name": name, "model.weights": "random", "model.random_layers": 2, "model.cache_dir": str(tmp_path)}
    base = load_base(load_config("tiny", cfg))
    model = base.model
    assert base.weights == "random" and base.backend == "transformers"
    assert type(model).__name__ == "Qwen2ForCausalLM" and len(model.model.layers) == 2
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as the 1.5B model
    assert torch.equal(model.model.norm.weight, torch.ones(64))
    q = model.model.layers[0].self_attn.q_proj
    assert torch.equal(q.bias, torch.zeros_like(q.bias)) and 0.015 < float(q.weight.std()) < 0.025
    assert not any(p.requires_grad for p in model.parameters())
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape[-1] == 1024 and torch.isfinite(logits).all()
    # what vLLM's dummy loading reads: the shapes and a tokenizer, no weights
    engine_dir = base.source
    assert engine_dir is not None
    saved = json.loads((Path(engine_dir) / "config.json").read_text())
    assert saved["num_hidden_layers"] == 2 and saved["vocab_size"] == 1024
    assert any(p.name.startswith("tokenizer") for p in Path(engine_dir).iterdir())
    assert not list(Path(engine_dir).glob("*.safetensors"))


@pytest.mark.slow  # loads the bundled tokenizer
def test_two_builds_with_one_seed_are_equal_and_leave_the_global_rng_alone(tmp_path):
    cfg = {"model.name": small_qwen_dir(tmp_path / "m"), "model.weights": "random", "model.cache_dir": str(tmp_path)}
    config = load_config("tiny", cfg)
    state = torch.random.get_rng_state()
    a, b = load_base(config, seed=3).model, load_base(config, seed=3).model
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_the_byte_tokenizer_round_trips_any_text():
    tok = byte_tokenizer()
    text = "def f(x):\n    return 'é' * x  # ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode()) and tok.decode(ids) == text
    assert tok.eos_token_id == 256 == tok.pad_token_id
