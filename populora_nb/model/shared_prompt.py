"""Each prompt processed once: the rollouts of one prompt share its prefill and its training pass.

Prefix sharing for grouped policy-gradient rollouts ("Prefix Grouper", arXiv 2506.05433;
docs/performance.md, "Each prompt processed once"). In the update (`shared_prompt_logprobs`) rows of
one (member, prompt) form a group: the prompt minus its last token goes through the backbone once per
group, its keys and values kept in the graph, and every row's last prompt token + completion attends
to them, so one backward sums the rows' gradients into the prompt's pass. In generation
(`decode_rows`) each distinct (member, prompt) is prefilled once and its cache gathered to its rows.
The caches (`PrefixLayer`) never grow, so a layer gradient checkpointing re-runs sees what its first
run saw. The Unsloth backend keeps the unshared path (its kernels own the cache).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence
from transformers.cache_utils import Cache, DynamicLayer

from populora_nb.model.batch import TrainBatch, left_pad
from populora_nb.model.decoding import decode, new_cache, position_ids_from_mask, prefill
from populora_nb.model.multilora import MultiLoRA, decoder_layers
from populora_nb.model.scoring import lm_completion_logprobs, split_lm
from populora_nb.rl import token_logprobs


@dataclass(frozen=True)
class PromptGroups:
    """A batch's rows grouped by (owner, prompt token ids), laid out for the two passes."""

    row_group: Tensor
    """(B,) long: each row's group."""
    group_owner: list[int]
    """Each group's owner (the owner of its rows)."""
    prefix_ids: Tensor
    """(G, P) left-padded: each group's prompt without its last token."""
    prefix_mask: Tensor
    """(G, P), 0 on padding."""
    suffix_ids: Tensor
    """(B, S) right-padded: each row's last prompt token, then its completion."""
    suffix_mask: Tensor
    """(B, S), 0 on padding."""
    suffix_positions: Tensor
    """(B, S): positions continuing the prefix's real tokens."""
    completion_len: Tensor
    """(B,) long: scored tokens per row."""

    @property
    def n_groups(self) -> int:
        return len(self.group_owner)


def prompt_groups(batch: TrainBatch, owners: Sequence[int] | None = None) -> PromptGroups:
    """Group ``batch``'s rows by (owner, prompt). A row's prompt is its real tokens before its
    completion, which must be the row's last tokens (as `train_batch` lays it out) after at least one
    prompt token; raises ValueError naming the row otherwise."""
    device = batch.input_ids.device  # grouped on the CPU: one copy, no per-row device reads
    ids, real, comp = batch.input_ids.cpu(), batch.attention_mask.bool().cpu(), batch.completion_mask.bool().cpu()
    n, width = ids.shape
    owners = list(owners) if owners is not None else [0] * n
    if len(owners) != n:
        raise ValueError(f"one owner per row: {len(owners)} owners for {n} rows")
    comp_len = comp.sum(dim=1)
    row_prompts: list[tuple[int, ...]] = []
    for i in range(n):
        k = int(comp_len[i])
        if not bool(comp[i, width - k :].all()) or not bool(real[i, width - k :].all()):
            raise ValueError(f"row {i}: its completion must be the row's last tokens, as train_batch lays it out")
        row_prompts.append(tuple(ids[i, : width - k][real[i, : width - k]].tolist()))
        if not row_prompts[-1]:
            raise ValueError(f"row {i} has no prompt token to predict its first completion token from")
    firsts, row_group = first_of_each(list(zip(owners, row_prompts)))
    prompts = [row_prompts[f] for f in firsts]
    group_owner = [owners[f] for f in firsts]
    prefix_ids, prefix_mask = left_pad([p[:-1] for p in prompts], 0, device)
    suffixes = [[prompts[g][-1], *ids[i, width - int(comp_len[i]) :].tolist()] for i, g in enumerate(row_group)]
    suffix_ids = pad_sequence([torch.tensor(s, dtype=torch.long) for s in suffixes], batch_first=True)  # (B, S)
    suffix_mask = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in suffixes], batch_first=True)
    s_width = suffix_ids.shape[1]
    groups = torch.tensor(row_group, dtype=torch.long)
    start = torch.tensor([len(prompts[g]) - 1 for g in row_group])[:, None]  # real prefix tokens before the suffix
    return PromptGroups(
        row_group=groups.to(device),
        group_owner=group_owner,
        prefix_ids=prefix_ids,
        prefix_mask=prefix_mask,
        suffix_ids=suffix_ids.to(device),
        suffix_mask=suffix_mask.to(device),
        suffix_positions=(start + torch.arange(s_width)).to(device),
        completion_len=comp_len.to(device),
    )


def grouped_order(batch: TrainBatch, owners: Sequence[int] | None = None) -> Tensor:
    """Row order keeping each group's rows adjacent, largest groups first (so micro-batches of a
    multiple or divisor of k straddle no group), then longest first, within a group longest first."""
    length = batch.attention_mask.sum(dim=1).tolist()
    rows_of: dict[int, list[int]] = {}  # each group's rows, in order
    for i, g in enumerate(prompt_groups(batch, owners).row_group.tolist()):
        rows_of.setdefault(g, []).append(i)
    ranked = sorted(rows_of.values(), key=lambda rows: (-len(rows), -max(length[i] for i in rows), rows[0]))
    return torch.tensor([i for rows in ranked for i in sorted(rows, key=lambda i: -length[i])], dtype=torch.long)


class PrefixLayer(DynamicLayer):
    """One decoder layer's cache that never grows: ``update(k, v)`` returns the fixed prefix's keys
    and values (gathered by ``rows`` when given) followed by ``k, v``, and records ``k, v`` as
    `written`. A re-run of the layer (gradient checkpointing) thus sees exactly what the first saw."""

    def __init__(self, keys: Tensor | None = None, values: Tensor | None = None, rows: Tensor | None = None) -> None:
        super().__init__()
        self.keys, self.values, self.rows = keys, values, rows
        self.is_initialized = keys is not None
        self.written: tuple[Tensor, Tensor] | None = None

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        self.written = (key_states, value_states)
        if self.keys is None or self.values is None:
            return key_states, value_states
        k, v = (self.keys, self.values) if self.rows is None else (self.keys[self.rows], self.values[self.rows])
        return torch.cat([k, key_states], dim=-2), torch.cat([v, value_states], dim=-2)


def prefix_pass(backbone: nn.Module, n_layers: int, ids: Tensor, mask: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Each layer's keys and values of ``ids`` (left-padded, ``mask``), in the graph when a gradient
    is recorded: the prompt pass whose cache the rows' suffixes attend to."""
    layers = [PrefixLayer() for _ in range(n_layers)]
    backbone(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids_from_mask(mask),
        past_key_values=Cache(layers=list(layers)),
        use_cache=True,
    )
    written = [layer.written for layer in layers]
    if any(w is None for w in written):
        raise RuntimeError("the backbone did not write every layer's keys and values into the cache it was given")
    return [w for w in written if w is not None]


def shared_prompt_logprobs(
    model: nn.Module, batch: TrainBatch, groups: PromptGroups | None = None, chunk_rows: int = 256
) -> Tensor:
    """Completion log-probs (B, T) of ``batch`` with each group's prompt through the backbone once
    (module docstring). The caller opens a route that serves both the groups' rows
    (``groups.group_owner``) and the batch's; ``groups`` defaults to one owner for all rows."""
    parts = split_lm(model)
    groups = groups if groups is not None else prompt_groups(batch)
    if parts is None or groups.prefix_ids.shape[1] == 0:  # no head split, or every prompt one token long
        return lm_completion_logprobs(model, batch, chunk_rows)
    backbone, head = parts
    kv = prefix_pass(backbone, len(decoder_layers(model)), groups.prefix_ids, groups.prefix_mask)
    rows = groups.row_group
    cache = Cache(layers=[PrefixLayer(k, v, rows) for k, v in kv])
    hidden = backbone(
        input_ids=groups.suffix_ids,
        attention_mask=torch.cat([groups.prefix_mask[rows], groups.suffix_mask], dim=1),
        position_ids=groups.suffix_positions,
        past_key_values=cache,
        use_cache=True,
    )[0]  # (B, S, D): suffix position j predicts completion token j
    b, t = batch.completion_mask.bool().nonzero(as_tuple=True)
    j = t - (batch.input_ids.shape[1] - groups.completion_len.to(t.device)[b])
    logp = token_logprobs(hidden[b, j], batch.input_ids[b, t], batch.temperature, head=head, chunk_rows=chunk_rows)
    return torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=logp.device).index_put((b, t), logp)


def repeated_prompts(batch: TrainBatch, owners: Sequence[int] | None = None) -> PromptGroups | None:
    """`prompt_groups` of ``batch`` when some rows repeat a prompt, else None (nothing to share)."""
    groups = prompt_groups(batch, owners)
    return groups if groups.n_groups < batch.input_ids.shape[0] else None


def completion_logprobs(model: nn.Module, batch: TrainBatch, groups: PromptGroups | None) -> Tensor:
    """`shared_prompt_logprobs` over ``groups`` (`repeated_prompts`), or `lm_completion_logprobs` without."""
    return lm_completion_logprobs(model, batch) if groups is None else shared_prompt_logprobs(model, batch, groups)


def first_of_each(keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """(index of each distinct key's first occurrence, each key's index among the distinct ones)."""
    seen: dict[Hashable, int] = {}
    firsts: list[int] = []
    for i, key in enumerate(keys):
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(i)
    return firsts, [seen[key] for key in keys]


def distinct_rows(slots: Tensor, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(first row of each distinct (slot, prompt), each row's index among them) of a left-padded batch."""
    slots_, ids_, mask_ = slots.tolist(), ids.cpu(), mask.cpu().bool()
    firsts, which = first_of_each([(slots_[i], tuple(ids_[i][mask_[i]].tolist())) for i in range(len(slots_))])
    return torch.tensor(firsts, device=ids.device), torch.tensor(which, device=ids.device)


def decode_rows(
    multi: MultiLoRA, model: nn.Module, slots: Tensor, ids: Tensor, mask: Tensor, share_prompts: bool, **sampling: Any
) -> tuple[Tensor, Tensor]:
    """`decoding.decode` of the left-padded prompts, row i under slot ``slots[i]``; with
    ``share_prompts`` each distinct (slot, prompt) prefilled once (module docstring)."""
    firsts, which = distinct_rows(slots, ids, mask)
    if not share_prompts or len(firsts) == len(slots):
        with multi.route_rows(slots):
            return decode(model, ids, mask, **sampling)
    cache = new_cache(model)
    with multi.route_rows(slots[firsts]):
        logits = prefill(model, ids[firsts], mask[firsts], cache)
    cache.batch_select_indices(which)
    with multi.route_rows(slots):
        return decode(model, ids, mask, **sampling, prefilled=(cache, logits[which]))
