"""Policy-gradient math, no model: TRR++ advantages (AZR arXiv 2505.03335 §3.3.5, eq. 8) and the
clipped policy-gradient loss on log-probabilities taken at the sampling temperature
(`completion_logprobs`). AZR groups rewards by (task kind × role); a population adds the member.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

Aggregation = Literal["token_mean", "sequence_mean"]


def trr_plus_plus_advantages(
    rewards: Sequence[float] | torch.Tensor,
    group_keys: Sequence[Hashable],
    eps: float = 1e-6,
    scale_keys: Sequence[Hashable] | None = None,
) -> torch.Tensor:
    """Whiten scalar rewards within each group: ``(r − mean) / (std + eps)``, (B,) float32, one
    advantage per completion as AZR's TRR++ (token-level whitening would weight responses by length);
    ``std`` divides by n. ``scale_keys`` (e.g. ``(member, role)``) keep the group mean as baseline but
    divide by the RMS of the centred rewards over each scale key (REINFORCE++'s global normalisation:
    docs/methodology.md, "Advantages keep their size"). A group of 1 or of equal rewards gets 0.
    """
    r = torch.as_tensor(rewards, dtype=torch.float64).flatten()
    if r.numel() != len(group_keys):
        raise ValueError(f"need one group key per reward: {r.numel()} rewards vs {len(group_keys)} keys")
    if scale_keys is not None and len(scale_keys) != len(group_keys):
        raise ValueError(f"need one scale key per reward: {len(scale_keys)} scale keys vs {len(group_keys)} keys")
    if not torch.isfinite(r).all():
        raise ValueError("rewards must be finite")
    centred = torch.zeros_like(r)
    scale = torch.ones_like(r)
    for idx in _indices(group_keys).values():
        if len(idx) < 2:
            continue
        # float64 so groups of identical rewards give exactly 0, not rounding noise / eps.
        g = r[idx]
        centred[idx] = g - g.mean()
        scale[idx] = g.std(correction=0)
    if scale_keys is not None:
        for idx in _indices(scale_keys).values():
            # every group's centred values sum to 0, so their RMS is the std over the whole scale set
            scale[idx] = centred[idx].square().mean().sqrt()
    return (centred / (scale + eps)).to(torch.float32)


def _indices(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    return groups


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, aggregation: Aggregation) -> torch.Tensor:
    """Mean of ``x`` (B, T) over masked tokens: all pooled, or per sequence then averaged."""
    if aggregation == "token_mean":
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    if aggregation == "sequence_mean":
        lengths = mask.sum(dim=1)  # (B,)
        per_seq = (x * mask).sum(dim=1) / lengths.clamp(min=1.0)  # (B,)
        has_tokens = (lengths > 0).to(x.dtype)
        # Rows without completion tokens (e.g. an empty generation) do not dilute the mean.
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"aggregation must be 'token_mean' or 'sequence_mean', got {aggregation!r}")


def policy_gradient_loss(
    logprobs: torch.Tensor,
    completion_mask: torch.Tensor,
    advantages: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "token_mean",
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss over completion tokens; returns (loss, stats).

    Shapes: ``logprobs``, ``completion_mask``, ``old_logprobs``, ``ref_logprobs``, ``entropy``
    are (B, T) aligned token by token (as ``completion_logprobs`` returns them); ``advantages``
    is (B,), one per completion (``trr_plus_plus_advantages``).

    Per token, with ratio = exp(logp − logp_old):
        pg = −min(ratio · A, clip(ratio, 1 − epsilon, 1 + epsilon) · A)        (PPO-clip)
        kl = exp(ref − logp) − (ref − logp) − 1                               (k3, ≥ 0)
        loss = agg(pg) + kl_coef · agg(kl)
    Without ``old_logprobs`` the batch is on-policy (ratio 1, plain REINFORCE −A ∇logp); with them
    (several epochs on one batch) clipping stops tokens that moved past the trust region.

    ``aggregation``: "token_mean" (every token weighs the same; verl's default, which AZR trains
    with) or "sequence_mean" (each completion averaged first). ``entropy`` is only logged.
    Stats keys: ``loss/total``, ``loss/pg``, ``loss/kl`` (with ``ref_logprobs``), ``policy/clip_frac``,
    ``policy/approx_kl``, ``policy/ratio_max`` (with ``old_logprobs``), ``policy/entropy`` (with
    ``entropy``), ``policy/advantage_mean``, ``policy/n_tokens``.
    """
    shape = tuple(logprobs.shape)  # shapes checked: a mismatch would otherwise broadcast silently
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (B, T), got shape {shape}")
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,) = {shape[:1]}, got {tuple(advantages.shape)}")
    aligned = {"completion_mask": completion_mask, "old_logprobs": old_logprobs, "ref_logprobs": ref_logprobs}
    for name, other in {**aligned, "entropy": entropy}.items():
        if other is not None and other.shape != logprobs.shape:
            raise ValueError(f"{name} {tuple(other.shape)} must match logprobs {shape}")
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon is the PPO clip range and must lie in (0, 1), got {epsilon}")
    if kl_coef < 0.0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0.0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (log-probs of the reference policy)")

    mask = completion_mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).detach()[:, None]  # (B, 1): one advantage per completion
    old = logprobs.detach() if old_logprobs is None else old_logprobs.detach()

    # Masked positions may hold anything (0 or -inf for padding); zero the log-ratio there so the
    # exp cannot overflow into NaNs that survive the mask multiplication.
    log_ratio = torch.where(mask > 0, logprobs - old, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon) * adv
    pg_loss = _masked_mean(-torch.minimum(unclipped, clipped), mask, aggregation)
    loss = pg_loss

    stats: dict[str, float] = {"loss/pg": pg_loss.item()}
    if ref_logprobs is not None:
        delta = torch.where(mask > 0, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))
        kl = torch.exp(delta) - delta - 1.0  # k3 estimator of KL(pi || ref), per token
        kl_loss = _masked_mean(kl, mask, aggregation)
        if kl_coef > 0.0:
            loss = loss + kl_coef * kl_loss
        stats["loss/kl"] = kl_loss.item()
    stats["loss/total"] = loss.item()

    n_tokens = mask.sum().clamp(min=1.0)
    with torch.no_grad():
        if old_logprobs is not None:
            # A token is clipped when the clipped term is the active (smaller) one and differs.
            is_clipped = (clipped < unclipped).to(mask.dtype) * mask
            stats["policy/clip_frac"] = (is_clipped.sum() / n_tokens).item()
            stats["policy/approx_kl"] = ((-log_ratio * mask).sum() / n_tokens).item()
            stats["policy/ratio_max"] = (ratio * mask).max().item()
        if entropy is not None:
            stats["policy/entropy"] = ((entropy * mask).sum() / n_tokens).item()
        n_seq = max(advantages.numel(), 1)
        stats["policy/advantage_mean"] = (advantages.float().sum() / n_seq).item()
        stats["policy/n_tokens"] = mask.sum().item()
    return loss, stats


def _completion_positions(
    logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices (batch, token position, logit row) of every completion token.

    ``logits`` (B, L, V), or the hidden states (B, L, D) they come from, may cover only the last L
    positions of ``input_ids`` (B, T), as with transformers' ``logits_to_keep=L``; logit row j sits
    at position T − L + j and predicts the token at position T − L + j + 1.
    """
    if input_ids.dim() != 2 or completion_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids and completion_mask must both be (B, T), got {tuple(input_ids.shape)} "
            f"and {tuple(completion_mask.shape)}"
        )
    batch, length = input_ids.shape
    if logits.dim() != 3 or logits.shape[0] != batch or not 0 < logits.shape[1] <= length:
        raise ValueError(f"logits (or hidden states) must be (B={batch}, L<= T={length}, V), got {tuple(logits.shape)}")
    offset = length - logits.shape[1]  # position of logit row 0
    b, t = completion_mask.bool().nonzero(as_tuple=True)
    if t.numel() and int(t.min()) < offset + 1:
        raise ValueError(
            f"completion token at position {int(t.min())} has no predicting logit: logits cover "
            f"positions {offset}..{length - 1}, so completions must start at {offset + 1} or later "
            "(keep more logits, e.g. logits_to_keep = completion length + 1)"
        )
    return b, t, t - 1 - offset


def logprob_temperature(temperature: float) -> float:
    """The temperature log-probs are taken at for completions sampled at ``temperature``.

    The policy optimised is the one that sampled, softmax(logits / T), as in TRL's GRPOTrainer and
    veRL's actor. Greedy (0) is no stochastic policy, so it scores at 1.0 rather than divide by zero.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    return float(temperature) if temperature > 0 else 1.0


CHUNK_ROWS = 64
"""Rows per log-prob chunk: bounds the (rows, V) float32 buffers a chunk makes at a large vocabulary."""


def completion_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """Log-prob of each taken token on completion positions; (B, T) float32, 0 elsewhere.

    ``out[b, t] = log softmax(logits at t − 1, divided by T)[input_ids[b, t]]`` where ``completion_mask[b, t]``,
    aligned with ``input_ids`` so the same mask feeds ``policy_gradient_loss``. ``temperature``: the one
    the completions were *sampled* at (`logprob_temperature`); with top_p < 1 these are still log-probs of
    the untruncated distribution, as in TRL and veRL. Only the N completion rows are normalised
    (`token_logprobs`), so no (B, T, V) float32 copy is kept. Gradients flow to ``logits``.
    """
    b, t, row = _completion_positions(logits, input_ids, completion_mask)
    token_logp = token_logprobs(logits[b, row], input_ids[b, t], temperature, chunk_rows=chunk_rows)  # (N,)
    return _place(token_logp, b, t, input_ids.shape)


def completion_logprobs_from_hidden(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """``completion_logprobs(head(hidden), ...)`` without the logits: (B, T) float32, 0 elsewhere.

    ``hidden`` (B, L, D) are the last L positions' final hidden states and ``head`` the output layer
    that maps them to logits (an LM's ``lm_head``). Only the N completion rows go through ``head``,
    ``chunk_rows`` at a time with activation checkpointing, so a scored token keeps D hidden values
    for the backward pass, not V logits. Gradients flow to ``hidden`` (and ``head``'s weights)."""
    b, t, row = _completion_positions(hidden, input_ids, completion_mask)
    token_logp = token_logprobs(hidden[b, row], input_ids[b, t], temperature, head=head, chunk_rows=chunk_rows)
    return _place(token_logp, b, t, input_ids.shape)


def token_logprobs(
    rows: torch.Tensor,
    taken: torch.Tensor,
    temperature: float = 1.0,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """``log softmax(head(rows) / T)[taken]`` row by row: (N,) float32 from ``rows`` (N, D), ``taken`` (N,).

    ``head`` maps rows to logits (None: ``rows`` are the logits). The rows go ``chunk_rows`` at a
    time, each (while a gradient is recorded) under non-reentrant activation checkpointing, so its
    (chunk, V) logits are recomputed in the backward rather than kept; values equal the unchunked
    ones. A single chunk is not checkpointed (bounded anyway; a first checkpoint costs seconds)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    t = logprob_temperature(temperature)
    recompute = torch.is_grad_enabled() and rows.shape[0] > chunk_rows
    parts = [
        checkpoint(_chunk_logprobs, r, k, t, head, use_reentrant=False) if recompute else _chunk_logprobs(r, k, t, head)
        for r, k in zip(rows.split(chunk_rows), taken.split(chunk_rows))
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float32, device=rows.device)


def _chunk_logprobs(
    rows: torch.Tensor, taken: torch.Tensor, temperature: float, head: Callable[[torch.Tensor], torch.Tensor] | None
) -> torch.Tensor:
    logits = (rows if head is None else head(rows)).float() / temperature  # (c, V) float32: upcast first (bf16)
    return logits.gather(1, taken[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)


def _place(values: torch.Tensor, b: torch.Tensor, t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """(B, T) float32 holding ``values`` at positions (b, t), 0 elsewhere (differentiable)."""
    out = torch.zeros(shape, dtype=torch.float32, device=values.device)
    return out.index_put((b, t), values)
