"""A base model of the real architecture with random weights: memory and timings with no download.

Whether a preset fits a GPU, and how long a step takes, before fetching 15 GB. The architecture comes
from a shipped ``config.json`` (`ARCHITECTURES`) or a local directory's; a vLLM engine loads the same
shapes with its dummy weights (not the trainer's: their log-prob gap means nothing). The tokenizer is
a stand-in (`sources.stand_in_tokenizer`); the embedding keeps the architecture's vocabulary size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedTokenizerBase
from transformers.initialization import no_init_weights  # transformers >= 5, as pyproject.toml requires

from populora_nb.config import ModelConfig
from populora_nb.model.sources import ModelLoadError, cache_root, stand_in_tokenizer

ARCHITECTURE_DIR = Path(__file__).resolve().parents[1] / "data" / "architectures"  # package data
ARCHITECTURES: Mapping[str, str] = MappingProxyType(
    {
        "Qwen/Qwen2.5-Coder-1.5B-Instruct": "qwen2.5-coder-1.5b.json",  # the gpu preset
        "Qwen/Qwen2.5-Coder-1.5B": "qwen2.5-coder-1.5b.json",
        "Qwen/Qwen2.5-Coder-7B": "qwen2.5-coder-7b.json",  # the paper preset
        "Qwen/Qwen2.5-Coder-7B-Instruct": "qwen2.5-coder-7b.json",
    }
)
"""Hub ids whose config.json ships with the package, and its file."""


def architecture(mc: ModelConfig) -> dict[str, Any]:
    """The config.json values of ``mc.name`` (shipped, or a local directory's), with
    ``mc.random_layers`` decoder layers if set. Raises a `ModelLoadError` saying which names work."""
    local = Path(mc.name).expanduser() / "config.json"
    if mc.name in ARCHITECTURES:
        path = ARCHITECTURE_DIR / ARCHITECTURES[mc.name]
    elif local.is_file():
        path = local
    else:
        raise ModelLoadError(
            f"model.weights=random needs the architecture of model.name={mc.name!r}: use one of "
            f"{', '.join(ARCHITECTURES)} (shipped with the package) or a local directory holding its config.json"
        )
    values: dict[str, Any] = json.loads(path.read_text())
    if mc.random_layers is not None:
        values["num_hidden_layers"] = mc.random_layers
        if "max_window_layers" in values:
            values["max_window_layers"] = min(values["max_window_layers"], mc.random_layers)
    return values


def model_config(mc: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    """The transformers config of the architecture, with the stand-in tokenizer's special ids (the
    vocabulary size stays the architecture's)."""
    values = architecture(mc) | {
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    }
    model_type = values.pop("model_type")
    return AutoConfig.for_model(model_type, **values)


def build_random_base(
    mc: ModelConfig, dtype: torch.dtype, seed: int, device: torch.device | str = "cpu"
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase, Path]:
    """The architecture with random weights on ``device`` (built there: a 7B model never passes
    through host RAM), its tokenizer, and the directory an engine loads it from with dummy weights
    (config.json + tokenizer, written once under the cache root and reused)."""
    tokenizer = stand_in_tokenizer(mc)
    cfg = model_config(mc, tokenizer)
    with no_init_weights(), torch.device(device):  # skips transformers' and torch's init: fill_random_ sets the values
        model: Any = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.tie_weights()  # tied embeddings (1.5B) stay one tensor, as in the real model
    fill_random_(model, std=float(getattr(cfg, "initializer_range", 0.02)), seed=seed)
    layers = cfg.num_hidden_layers
    name = Path(ARCHITECTURES.get(mc.name, mc.name.replace("/", "--"))).stem
    engine_dir = cache_root(mc) / "random-architectures" / f"{name}-{layers}layers-vocab{len(tokenizer)}"
    if not (engine_dir / "config.json").is_file():
        engine_dir.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(engine_dir)
        cfg.save_pretrained(engine_dir)  # config.json last: its presence marks a complete directory
    return model, tokenizer, engine_dir


RANDOM_BLOCK = 1_000_003
"""Length of the random block tiled into every weight: a prime, so no row of a weight repeats another."""


@torch.no_grad()
def fill_random_(model: torch.nn.Module, std: float = 0.02, seed: int = 0) -> None:
    """Norm weights 1, biases 0, every other weight tiled from one seeded block of `RANDOM_BLOCK`
    N(0, std²) draws: copying is much faster than drawing 1.5 billion normals, and the values only need
    the right scale, not independence."""
    gen = torch.Generator().manual_seed(seed)
    draws = torch.randn(2 * RANDOM_BLOCK, generator=gen) * std
    blocks: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}  # the draws in each weight's dtype
    offset = 0
    for name, p in model.named_parameters():
        block = blocks.setdefault((p.dtype, p.device), draws.to(p.device, p.dtype))
        if name.endswith("bias"):
            p.zero_()
        elif "norm" in name.rsplit(".", 2)[-2]:
            p.fill_(1.0)
        else:
            flat = p.view(-1)
            for lo in range(0, flat.numel(), RANDOM_BLOCK):
                n = min(RANDOM_BLOCK, flat.numel() - lo)
                flat[lo : lo + n].copy_(block[offset : offset + n])
            offset = (offset + 7919) % RANDOM_BLOCK
