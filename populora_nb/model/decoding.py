"""Sampling from a causal LM with a KV cache: the native decoder the routes of `multilora` serve.

``decode`` is a plain KV-cache sampling loop (temperature, top-p, stop tokens) driven by an explicit
``torch.Generator``. Positions count real tokens, so a left-padded row decodes as it would alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn
from transformers import DynamicCache, PretrainedConfig


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions counting only real tokens, so a left-padded row starts at 0 (as HF generate does)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)


def forward_kwarg_names(model: nn.Module) -> tuple[str, str]:
    """(cache kwarg, logits-to-keep kwarg) of this transformers version's causal-LM forward."""
    params = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    keep = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    return cache, keep


def new_cache(model: nn.Module) -> DynamicCache:
    return DynamicCache(config=cast(PretrainedConfig, model.config))  # a causal LM module has one


def sample_next(logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> Tensor:
    """One token per row from (B, V) logits: argmax at temperature 0, else nucleus sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # Drop a token when the mass strictly before it already reaches top_p (the first always stays).
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def prefill(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, cache: DynamicCache, positions: Tensor | None = None
) -> Tensor:
    """The left-padded prompts' forward into ``cache`` (a decoding step: the new tokens at
    ``positions``); returns their last logits (B, V)."""
    cache_kw, keep_kw = forward_kwarg_names(model)
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask) if positions is None else positions,
        use_cache=True,
        **{cache_kw: cache, keep_kw: 1},
    ).logits[:, -1, :]


@torch.no_grad()
def decode(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    max_new_tokens: int,
    stop_token_ids: Sequence[int],
    pad_token_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    prefilled: tuple[DynamicCache, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Sample up to ``max_new_tokens`` per left-padded row: (tokens (B, n), padded after a row's first
    stop token; each row's length, the stop token included). ``prefilled``: the prompts' cache and
    last logits (B, V) already computed (the shared prefill), else `prefill` runs."""
    if max_new_tokens <= 0:
        return input_ids.new_zeros(input_ids.shape[0], 0), input_ids.new_zeros(input_ids.shape[0])
    cache = prefilled[0] if prefilled is not None else new_cache(model)
    logits = prefilled[1] if prefilled is not None else prefill(model, input_ids, attention_mask, cache)
    batch = input_ids.shape[0]
    device = input_ids.device
    stop = torch.tensor(list(stop_token_ids), device=device, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    mask = attention_mask.long()
    positions = position_ids_from_mask(mask)[:, -1:]
    out: list[Tensor] = []
    for step in range(max_new_tokens):
        if step:
            logits = prefill(model, out[-1][:, None], mask, cache, positions)  # (B, V)
        token = sample_next(logits, temperature, top_p, generator)
        token = torch.where(done, torch.full_like(token, pad_token_id), token)
        out.append(token)
        lengths += (~done).long()
        done |= torch.isin(token, stop)
        if bool(done.all()):
            break
        positions = positions + 1
        mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
    tokens = torch.stack(out, dim=1) if out else input_ids.new_zeros(batch, 0)
    return tokens, lengths
