import pytest
import torch

from populora_nb.config import ConfigError, load_config
from populora_nb.model.base import chat, load_base
from populora_nb.model.sources import ModelLoadError


def test_tiny_preset_builds_a_frozen_llama(tiny_base, tiny_config):
    assert tiny_base.backend == "transformers"
    assert tiny_base.model.config.num_hidden_layers == 2
    assert tiny_base.model.config.hidden_size <= 64
    assert not any(p.requires_grad for p in tiny_base.model.parameters())
    assert tiny_base.tokenizer.padding_side == "left"
    assert tiny_base.model.config.vocab_size == len(tiny_base.tokenizer)


def test_tiny_is_deterministic_in_its_seed(tiny_config):
    a = load_base(tiny_config, seed=3).model.state_dict()
    b = load_base(tiny_config, seed=3).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_building_tiny_leaves_global_rng_alone(tiny_config):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_base(tiny_config)
    assert torch.equal(torch.rand(3), expected)


def test_missing_model_path_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as e:
        load_config("tiny", {"model.name": "./models/not-here"})
    assert "no model directory" in str(e.value) and "\n" not in str(e.value)


def test_unreachable_hub_id_says_how_to_supply_a_model(monkeypatch):
    import huggingface_hub.constants

    # huggingface_hub reads HF_HUB_OFFLINE once, at import: the environment alone would come too late
    # here, and each lookup would then wait on the closed network's retries (46 s measured).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="model.name=DIR"):
        load_base(load_config("tiny", {"model.name": "nobody-here/no-such-model-xyz"}))


@pytest.mark.slow
def test_bundled_smollm2_answers_a_chat_prompt(smol_base):
    assert smol_base.model.config.model_type == "llama"
    assert 130e6 < smol_base.n_parameters < 140e6
    assert smol_base.dtype == torch.float32
    reply = chat(smol_base, "What is 2 + 3? Answer with a number.", max_new_tokens=16)
    assert reply.strip(), "SmolLM2 returned empty text"


# ---- one model source (issue #29) ----------------------------------------------------------------


def _model_dir(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    return tmp_path / "m"


def test_the_source_is_the_name_exactly_or_the_directory_it_names(tmp_path, monkeypatch):
    from populora_nb.model.base import model_source

    monkeypatch.chdir(tmp_path)
    _model_dir(tmp_path)
    assert model_source(load_config("tiny").model) is None  # built in code
    assert model_source(load_config("tiny", {"model.name": "Qwen/Qwen2.5-Coder-1.5B-Instruct"}).model) == (
        "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    )
    assert model_source(load_config("tiny", {"model.name": "./m"}).model) == str(tmp_path / "m")


def test_unsloth_is_told_to_load_the_id_as_given(monkeypatch, tiny_base):
    """Unsloth maps Qwen/... to unsloth/... unless `use_exact_model_name`; vLLM loads the id as given."""
    import sys
    import types

    import populora_nb.model.base as base_module

    seen = {}

    def from_pretrained(**kwargs):
        seen.update(kwargs)
        return tiny_base.model, tiny_base.tokenizer

    fake = types.ModuleType("unsloth")
    fake.FastLanguageModel = types.SimpleNamespace(from_pretrained=from_pretrained)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "unsloth", fake)
    monkeypatch.setattr(base_module, "resolve_backend", lambda mc: "unsloth")
    monkeypatch.setattr(base_module, "hub_snapshot", lambda source: None)
    base = load_base(load_config("tiny", {"model.name": "Qwen/Qwen2.5-Coder-1.5B-Instruct"}))
    assert seen["model_name"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct" and seen["use_exact_model_name"] is True
    assert seen["offload_embedding"] is False  # else embed_tokens may move to the CPU on a full card
    assert base.source == "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def test_cached_memory_is_released_before_a_base_loads(monkeypatch, tiny_base):
    """A second base (the doctor loads several) must find the card as free as it is: gc and the CUDA
    cache emptied first (stands in for the GPU branch: release_cached_memory is a no-op on CPU)."""
    import populora_nb.model.base as base_module

    order = []
    monkeypatch.setattr(base_module, "release_cached_memory", lambda: order.append("release"))
    monkeypatch.setattr(
        base_module,
        "_build_tiny",
        lambda mc, dtype, seed: order.append("load") or (tiny_base.model, tiny_base.tokenizer),
    )
    load_base(load_config("tiny"))
    assert order == ["release", "load"]
