"""The whole population's update in one pass: every member's rows share each forward and backward.

PopuLoRA's 1.31x claim (§4) needs training batched as generation is (docs/performance.md, "The
update stage"). Micro-batches of ``rl.micro_batch`` rows cut across all members' rows, each row routed
to its member (`MultiLoRA.route_groups`). Each member's loss is normalised as in its own update
(`Population.train_step`); summing the losses before one backward gives each member the gradient of
its own loss alone, then each takes its own clipped AdamW step. Unsloth keeps the per-member loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from populora_nb.model.adapters import Population
from populora_nb.model.batch import LossFn, TrainBatch, concat, micro_batch_size_of
from populora_nb.model.multilora import checkpointing
from populora_nb.model.shared_prompt import completion_logprobs, micro_batch_order, repeated_prompts


def train_members(
    population: Population,
    batches: Mapping[str, TrainBatch],
    loss_fns: Mapping[str, LossFn],
    micro_batch_size: int | None = None,
    weight_by: Literal["rows", "tokens"] = "rows",
    share_prompts: bool = False,
) -> dict[str, dict[str, float]]:
    """One AdamW step per member on its own batch and loss, all members' rows sharing each micro-batch;
    as `Population.train_step`, ``time/train_step_s`` each member's share (by rows) of the pass."""
    size = micro_batch_size_of(weight_by)
    if population.base.backend == "unsloth":
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
    order = micro_batch_order(combined, share_prompts, owner.tolist())
    totals = [max(size(batches[m]), 1e-9) for m in members]
    stats: list[dict[str, float]] = [{} for _ in members]
    model = population.base.model
    for lo in range(0, n, step):
        rows = order[lo : lo + step]
        rows = rows[owner[rows].argsort(stable=True)]  # each member's rows together, for route_groups
        chunk = combined.rows(rows.to(device)).trimmed()
        chunk_owner = owner[rows].tolist()
        groups = repeated_prompts(chunk, chunk_owner) if share_prompts else None
        prompt_layout = [[slot_of[i] for i in groups.group_owner]] if groups is not None else []
        with (
            population.multi.route_groups([slot_of[i] for i in chunk_owner], also=prompt_layout),
            checkpointing(model, population.lora.gradient_checkpointing),
        ):
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
    seconds = time.perf_counter() - start
    out = {}
    for i, m in enumerate(members):
        share = batches[m].input_ids.shape[0] / n
        out[m] = stats[i] | population.optimizer_step(m) | {"time/train_step_s": seconds * share}
    return out
