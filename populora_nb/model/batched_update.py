"""The population's update: one AdamW step per member, all members' rows sharing each forward and backward.

PopuLoRA's 1.31x claim (§4) needs training batched as generation is (docs/performance.md, "The
update stage"). Micro-batches of ``rl.micro_batch`` rows cut across all members' rows, each row routed
to its member (`MultiLoRA.route_groups`). Each member's loss is normalised as in an update of its own,
so summing the losses before one backward gives each member the gradient of its own loss alone, then
each takes its own clipped AdamW step. `train_step` is the same pass with one member (on Unsloth the
only one: its slot serves one adapter at a time).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from populora_nb.model.adapters import Population
from populora_nb.model.batch import LossFn, TrainBatch, concat, micro_batch_size_of
from populora_nb.model.multilora import checkpointing
from populora_nb.model.shared_prompt import completion_logprobs, grouped_order, repeated_prompts


def train_members(
    population: Population,
    batches: Mapping[str, TrainBatch],
    loss_fns: Mapping[str, LossFn],
    micro_batch_size: int | None = None,
    weight_by: Literal["rows", "tokens"] = "rows",
    share_prompts: bool = False,
) -> dict[str, dict[str, float]]:
    """One AdamW step per member on its own batch and loss, the base and every other member bit-identical.
    ``micro_batch_size`` accumulates over row chunks sorted by length, each chunk's loss weighted by its
    share of the member's rows or completion tokens (``weight_by``, matching the loss's mean) so the step
    equals the unchunked one; ``share_prompts``: each prompt run once per chunk, the same step. Returns
    per member its loss_fn's stats averaged over chunks, ``optim/*`` and ``time/train_step_s`` (its
    share, by rows, of the pass)."""
    size = micro_batch_size_of(weight_by)
    unsloth = population.base.backend == "unsloth"
    if unsloth and len(batches) > 1:
        raise ValueError("the batched update needs the transformers backend (Unsloth serves one adapter at a time)")
    start = time.perf_counter()
    members = list(batches)
    if not members:
        return {}
    for m in members:
        population.zero_grad(m)
    device = population.base.device
    combined = concat([batches[m] for m in members]).to(device)
    owner = torch.cat([torch.full((batches[m].input_ids.shape[0],), i) for i, m in enumerate(members)])
    slot_of = [population.member(m).slot for m in members]
    n = combined.input_ids.shape[0]
    step = micro_batch_size or n
    # similar lengths (or one prompt's rows) share a micro-batch, padded to its own longest
    if step >= n:
        order = torch.arange(n)
    elif share_prompts:
        order = grouped_order(combined, owner.tolist())
    else:
        order = combined.attention_mask.sum(dim=1).cpu().argsort(descending=True, stable=True)
    totals = [max(size(batches[m]), 1e-9) for m in members]
    stats: list[dict[str, float]] = [{} for _ in members]
    model = population.base.model
    gradient_checkpointing = population.lora.gradient_checkpointing
    # On Unsloth the one member's slot stays loaded (and checkpointed) over every micro-batch.
    with population.member_forward(members[0]) if unsloth else contextlib.nullcontext():
        for lo in range(0, n, step):
            rows = order[lo : lo + step]
            rows = rows[owner[rows].argsort(stable=True)]  # each member's rows together, for route_groups
            chunk = combined.rows(rows.to(device)).trimmed()
            chunk_owner = owner[rows].tolist()
            groups = repeated_prompts(chunk, chunk_owner) if share_prompts and not unsloth else None
            prompt_layout = [[slot_of[i] for i in groups.group_owner]] if groups is not None else []
            slots = [slot_of[i] for i in chunk_owner]
            route = contextlib.nullcontext() if unsloth else population.multi.route_groups(slots, also=prompt_layout)
            with route, checkpointing(model, gradient_checkpointing and not unsloth):
                logprobs = completion_logprobs(model, chunk, groups)  # (B, T)
                loss: Tensor | float = 0.0
                for i in sorted(set(chunk_owner)):
                    first, end = chunk_owner.index(i), len(chunk_owner) - chunk_owner[::-1].index(i)
                    part = chunk.rows(slice(first, end))
                    weight = size(part) / totals[i]
                    member_loss, part_stats = loss_fns[members[i]](logprobs[first:end], part)
                    loss = loss + member_loss * weight
                    for k, v in part_stats.items():
                        stats[i][k] = stats[i].get(k, 0.0) + weight * v
                assert isinstance(loss, Tensor)
                loss.backward()
    optim = [population.optimizer_step(m) for m in members]
    seconds = time.perf_counter() - start  # the optimizer steps included, as a member's own update counts its step
    share = [batches[m].input_ids.shape[0] / n for m in members]
    return {m: stats[i] | optim[i] | {"time/train_step_s": seconds * share[i]} for i, m in enumerate(members)}


def train_step(
    population: Population,
    member_id: str,
    batch: TrainBatch,
    loss_fn: LossFn,
    micro_batch_size: int | None = None,
    weight_by: Literal["rows", "tokens"] = "rows",
    share_prompts: bool = False,
) -> dict[str, float]:
    """`train_members` for one member: its stats."""
    stats = train_members(
        population, {member_id: batch}, {member_id: loss_fn}, micro_batch_size, weight_by, share_prompts
    )
    return stats[member_id]
