"""How much of the card the vLLM engine may take: computed before it starts, from parameter counts.

The share is the card less the trainer's peak (base weights, N adapters with their AdamW moments,
one micro-batch's activations, a margin), at most `MAX_SHARE`: docs/gpu-memory.md has the arithmetic
and the numbers at each preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from populora_nb.config import ExperimentConfig, LoRAConfig
from populora_nb.errors import UserInputError

GIB = 2**30
MARGIN_BYTES = 4 * GIB
"""CUDA context (~0.5 GiB per process, two processes), allocator fragmentation and the sleeping
engine's residue: a stated allowance until a GPU run measures it."""
MAX_SHARE = 0.9
"""Never more: vLLM's own default, leaving room for what nobody counted."""


class EngineShareError(UserInputError, ValueError):
    """The trainer and the engine do not fit on this card together."""


def module_shapes(cfg: Any) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each projection a LoRA may target, in one decoder layer of a Llama/Qwen2 config."""
    h, m = cfg.hidden_size, cfg.intermediate_size
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    q, kv = heads * head_dim, cfg.num_key_value_heads * head_dim
    attention = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}
    return attention | {"gate_proj": (h, m), "up_proj": (h, m), "down_proj": (m, h)}


def base_params(cfg: Any) -> int:
    """Parameters of the base: embeddings (and an untied head), projections (with Qwen2's q/k/v biases), norms."""
    shapes = module_shapes(cfg)
    h = cfg.hidden_size
    per_layer = sum(d_in * d_out for d_in, d_out in shapes.values()) + 2 * h
    if getattr(cfg, "model_type", "") == "qwen2" or getattr(cfg, "attention_bias", False):
        per_layer += shapes["q_proj"][1] + 2 * shapes["k_proj"][1]
    embed = cfg.vocab_size * h * (1 if getattr(cfg, "tie_word_embeddings", False) else 2)
    return embed + cfg.num_hidden_layers * per_layer + h


def lora_params(cfg: Any, lora: LoRAConfig) -> int:
    """Parameters of one adapter: A (r × d_in) and B (d_out × r) of every target module of every layer."""
    shapes = module_shapes(cfg)
    return cfg.num_hidden_layers * lora.rank * sum(sum(shapes[t]) for t in lora.target_modules)


def activation_bytes_per_token(cfg: Any, checkpointing: bool, dtype_bytes: int = 2) -> int:
    """Bytes a backward pass keeps per scored token: per layer about 7 hidden-sized and 4 MLP-sized
    values, or with checkpointing each layer's input plus one layer's recompute (docs/gpu-memory.md)."""
    h, m, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    one_layer = 7 * h + 4 * m
    values = layers * h + one_layer if checkpointing else layers * one_layer
    return values * dtype_bytes


@dataclass(frozen=True)
class TrainerMemory:
    """What the trainer holds on the card at its peak, in bytes, term by term."""

    base: int
    adapters: int
    """N × (factors + two AdamW moments), float32."""
    activations: int
    margin: int

    @property
    def total(self) -> int:
        return self.base + self.adapters + self.activations + self.margin


def trainer_memory(
    cfg: Any, lora: LoRAConfig, n_adapters: int, micro_batch: int, max_seq_len: int, dtype_bytes: int = 2
) -> TrainerMemory:
    """The trainer's peak with ``n_adapters`` members (each with AdamW moments: an upper bound)
    training ``micro_batch`` rows of ``max_seq_len`` tokens."""
    per_token = activation_bytes_per_token(cfg, lora.gradient_checkpointing, dtype_bytes)
    return TrainerMemory(
        base=base_params(cfg) * dtype_bytes,
        adapters=n_adapters * lora_params(cfg, lora) * (4 + 8),
        activations=micro_batch * max_seq_len * per_token,
        margin=MARGIN_BYTES,
    )


def checked_share(
    requested: float | str, trainer: TrainerMemory, card_bytes: int, cfg: Any, max_seq_len: int, dtype_bytes: int = 2
) -> float:
    """``gpu_memory_utilization``, the share the engine starts with: "auto" is the card less the
    trainer's peak, as a share, at most `MAX_SHARE`; a number is taken as given. `EngineShareError`
    when what fits leaves the engine less than its weights and one full-length sequence's KV cache,
    or the number asked for is above what fits."""
    fits = min(MAX_SHARE, (card_bytes - trainer.total) / card_bytes)
    kv_per_token = 2 * cfg.num_hidden_layers * module_shapes(cfg)["k_proj"][1] * dtype_bytes  # keys and values
    need = base_params(cfg) * dtype_bytes + max_seq_len * kv_per_token
    if fits * card_bytes < need:
        raise EngineShareError(
            f"the trainer needs {trainer.total / GIB:.1f} GiB of this {card_bytes / GIB:.0f} GiB card "
            f"({terms(trainer)}), which leaves the engine less than the {need / GIB:.1f} GiB of its "
            f"weights and one full-length sequence. Fix: lower rl.micro_batch or model.max_seq_len, set "
            f"lora.gradient_checkpointing=true, or use a larger card"
        )
    if requested == "auto":
        return fits
    share = float(requested)
    if share > fits + 1e-9:
        raise EngineShareError(
            f"rollout.gpu_memory_utilization={share:g} is above the {fits:.2f} of this {card_bytes / GIB:.0f} GiB card "
            f"that fits beside the trainer's {trainer.total / GIB:.1f} GiB ({terms(trainer)}). Fix: set it to auto"
        )
    return share


def terms(trainer: TrainerMemory) -> str:
    """The trainer's peak term by term, in GiB."""
    return (
        f"base {trainer.base / GIB:.1f} + adapters {trainer.adapters / GIB:.1f} + activations "
        f"{trainer.activations / GIB:.1f} + margin {trainer.margin / GIB:.1f}"
    )


def describe(trainer: TrainerMemory, share: float, card_bytes: int) -> str:
    """One line for the doctor: the share and the arithmetic behind it."""
    return (
        f"engine share {share:.2f} of a {card_bytes / GIB:.0f} GiB card = {share * card_bytes / GIB:.1f} GiB; "
        f"the trainer {trainer.total / GIB:.1f} GiB ({terms(trainer)})"
    )


def measured_check(trainer: TrainerMemory, share: float, card_bytes: int, held_bytes: float | None) -> str:
    """One line: the counted peak against the allocator's peak at the trainer's first step (None
    without a GPU); a trainer over its count leaves the engine's share too large: the line says which fits."""
    if held_bytes is None:
        return "share not checked against a measurement: no GPU (the count above is all there is)"
    counted = f"counted {trainer.total / GIB:.1f} GiB, held {held_bytes / GIB:.1f} GiB at its first step"
    over = held_bytes - trainer.total
    if over <= 0:
        return f"trainer within its count ({counted}): the engine's share {share:.2f} fits"
    fits = max(0.0, min(MAX_SHARE, (card_bytes - held_bytes - trainer.margin) / card_bytes))
    return (
        f"trainer over its count by {over / GIB:.1f} GiB ({counted}): the engine's share {share:.2f} leaves it "
        f"too little. Fix: set rollout.gpu_memory_utilization={fits:.2f} or lower"
    )


def run_share(config: ExperimentConfig, cfg: Any, dtype_bytes: int, card_bytes: int) -> tuple[TrainerMemory, float]:
    """The trainer's peak and the engine's share for a run of ``config`` (the probe's solver an adapter too)."""
    pc = config.population
    n = pc.n_teachers + pc.n_students + (1 if config.probe.every > 0 else 0)
    length = config.model.max_seq_len
    trainer = trainer_memory(cfg, config.lora, n, config.rl.micro_batch, length, dtype_bytes)
    return trainer, checked_share(config.rollout.gpu_memory_utilization, trainer, card_bytes, cfg, length, dtype_bytes)
