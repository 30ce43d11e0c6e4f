"""What one member's policy-gradient step trains on: sampled generations, left-padded into a batch.

`train_batch` left-pads `Generation`s into a `TrainBatch` whose completion tokens are the ones scored.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from populora_nb.policy import TokenIds
from populora_nb.rl import logprob_temperature

LossFn = Callable[[Tensor, "TrainBatch"], tuple[Tensor, dict[str, float]]]
"""(completion log-probs (B, T) with gradient, at the batch's sampling temperature, batch) ->
(scalar loss, stats), e.g. built on ``rl.policy_gradient_loss``."""


@dataclass(frozen=True)
class Generation:
    """One sampled completion: which member wrote it, and the exact token ids of its prompt and
    completion, so a later update scores exactly what was sampled (not a re-tokenisation)."""

    member_id: str | None
    """The member's name, as the loop knows it ("agent", "T0", "S3", an evolved child's name); None:
    the bare base (a rollout engine's evaluation row)."""
    prompt_ids: list[int]
    completion_ids: list[int]
    """Sampled tokens, the stop token included when ``stopped``."""
    text: str
    """The completion decoded without special tokens."""
    stopped: bool
    """Ended on a stop token (False: cut at max_new_tokens)."""
    logprobs: list[float] | None = None
    """A rollout engine's log-prob of each completion token, at the sampling temperature (None: the trainer sampled)."""
    cached_tokens: int = 0
    """Prompt tokens whose KV a rollout engine reused from its prefix cache instead of prefilling them."""


@dataclass
class TrainBatch:
    """Left-padded prompt + completion sequences for one member's policy-gradient step."""

    input_ids: Tensor  # (B, T)
    attention_mask: Tensor  # (B, T), 0 on left padding
    completion_mask: Tensor  # (B, T), 1 on the completion tokens that are scored
    advantages: Tensor  # (B,), one per sequence
    old_logprobs: Tensor | None = None  # (B, T), for PPO-style ratios over several epochs
    ref_logprobs: Tensor | None = None  # (B, T), for a KL penalty
    sampler_logprobs: Tensor | None = None
    """(B, T): the rollout engine's log-probs of the completion tokens (only compared, never trained
    on); NaN on a row no engine sampled."""
    temperature: float = 1.0
    """The sampling temperature, at which every log-prob of this batch is taken (0 scores at 1:
    ``rl.logprob_temperature``)."""

    def __post_init__(self) -> None:
        logprob_temperature(self.temperature)  # raises on a negative temperature
        shape = tuple(self.input_ids.shape)
        if (
            len(shape) != 2
            or self.attention_mask.shape != self.input_ids.shape
            or self.completion_mask.shape != self.input_ids.shape
        ):
            raise ValueError(f"input_ids, attention_mask and completion_mask must share one (B, T) shape, got {shape}")
        if self.advantages.shape != shape[:1]:
            raise ValueError(f"advantages must be (B,) = {shape[:1]}, got {tuple(self.advantages.shape)}")

    @property
    def logits_to_keep(self) -> int:
        """Logit rows needed: from the one before the earliest completion token to the end."""
        cols = self.completion_mask.bool().any(dim=0).nonzero()
        return self.input_ids.shape[1] - int(cols.min()) + 1 if cols.numel() else 1

    def rows(self, index: slice | Tensor) -> TrainBatch:
        return map_tensors(self, lambda t: t[index])

    def trimmed(self) -> TrainBatch:
        """Without the leading columns that are padding in every row (positions count real tokens)."""
        real = self.attention_mask.bool().any(dim=0).nonzero()
        start = int(real.min()) if real.numel() else 0
        return map_tensors(self, lambda t: t[:, start:] if t.dim() == 2 else t) if start else self

    def to(self, device: torch.device) -> TrainBatch:
        return map_tensors(self, lambda t: t.to(device))


def train_batch(
    generations: Sequence[Generation],
    advantages: Sequence[float] | Tensor,
    pad_token_id: int,
    temperature: float = 1.0,
) -> TrainBatch:
    """Left-pad each generation's prompt + completion into a ``TrainBatch`` (completion scored)."""
    ids, attn = left_pad([g.prompt_ids + g.completion_ids for g in generations], pad_token_id, torch.device("cpu"))
    comp = torch.zeros_like(ids)
    for i, g in enumerate(generations):
        if g.completion_ids:
            comp[i, -len(g.completion_ids) :] = 1
    return TrainBatch(ids, attn, comp, torch.as_tensor(advantages, dtype=torch.float32), temperature=temperature)


def micro_batch_size_of(weight_by: str) -> Callable[[TrainBatch], float]:
    """A micro-batch's size, whose share weighs its loss: rows or completion tokens (``weight_by``)."""
    if weight_by == "rows":
        return lambda b: float(b.input_ids.shape[0])
    if weight_by == "tokens":
        return lambda b: float(b.completion_mask.sum())
    raise ValueError(f"weight_by must be 'rows' or 'tokens', got {weight_by!r}")


def sample_generation(
    member_id: str, tokenizer: Any, prompt: str, completion: str, token_ids: TokenIds | None
) -> Generation:
    """A sample as scored: its sampled token ids, or (a scripted completion) its tokenisation + EOS."""
    if token_ids is not None:
        return Generation(member_id, list(token_ids[0]), list(token_ids[1]), completion, True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return Generation(member_id, prompt_ids, completion_ids, completion, True)


def concat(batches: Sequence[TrainBatch]) -> TrainBatch:
    """Several members' batches as one, left-padded to the widest (a row scores the same in any batch).
    Old and reference log-probs must be in all batches or none; the engine's are NaN in the rows of a
    batch without them."""
    if not batches:
        raise ValueError("concat needs at least one batch")
    temperatures = {b.temperature for b in batches}
    if len(temperatures) > 1:
        raise ValueError(f"batches sampled at different temperatures {sorted(temperatures)} cannot share a pass")
    width = max(b.input_ids.shape[1] for b in batches)

    def column(name: str) -> Tensor | None:
        parts = [getattr(b, name) for b in batches]
        if all(p is None for p in parts):
            return None
        if name == "sampler_logprobs":
            parts = [torch.full(b.input_ids.shape, math.nan) if p is None else p for b, p in zip(batches, parts)]
        elif any(p is None for p in parts):
            raise ValueError(f"{name} is set in some batches and not in others")
        return torch.cat([F.pad(p, (width - p.shape[1], 0)) if p.dim() == 2 else p for p in parts])

    fields: dict[str, Any] = {f.name: column(f.name) for f in dataclasses.fields(TrainBatch) if f.name != "temperature"}
    return TrainBatch(**fields, temperature=batches[0].temperature)


def aligned_logprobs(batch: TrainBatch, rows: Sequence[Sequence[float] | None]) -> Tensor:
    """Per-row completion log-probs on ``batch``'s completion positions, (B, T), 0 elsewhere; a None row is NaN."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for i, lps in enumerate(rows):
        n = int(batch.completion_mask[i].sum())
        if lps is None:
            out[i, batch.completion_mask[i].bool()] = math.nan
            continue
        if len(lps) != n:
            raise ValueError(f"row {i}: {len(lps)} log-probs for {n} completion tokens")
        if n:
            out[i, -n:] = torch.tensor(list(lps), dtype=torch.float32)
    return out


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Token id rows left-padded to one width: (ids (B, T), attention mask (B, T)) on ``device``."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s))
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def map_tensors(batch: TrainBatch, fn: Callable[[Tensor], Tensor]) -> TrainBatch:
    """A copy of ``batch`` with ``fn`` applied to every tensor field (None and scalars kept)."""
    fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    tensors: dict[str, Any] = {k: fn(v) for k, v in fields.items() if isinstance(v, Tensor)}
    return dataclasses.replace(batch, **tensors)
