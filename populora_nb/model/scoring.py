"""Completion log-probs of a causal LM for the policy gradient, without its (tokens × vocab) logits.

The (B, L, V) logits and their float32 log-softmax copies cost as much as a 1.5B model's activations
at Qwen's 152k vocabulary (docs/performance.md, "Log-prob memory"), so the LM is split into backbone
and output layer, applied to the completion rows a chunk at a time. A model whose logits are more
than the output layer's product (a softcap or scale in its config) keeps the full forward.
"""

from __future__ import annotations

from torch import Tensor, nn

from populora_nb.model.batch import TrainBatch
from populora_nb.model.decoding import forward_kwarg_names, position_ids_from_mask
from populora_nb.rl import completion_logprobs, completion_logprobs_from_hidden

LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields with which transformers' causal LMs turn the head's output into other logits."""


def split_lm(model: nn.Module) -> tuple[nn.Module, nn.Linear] | None:
    """(backbone, output layer) when the model's logits are exactly ``head(backbone(...)[0])``, else None."""
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) not in (None, 0, 1) for name in LOGIT_TRANSFORMS):
        return None
    get_head, get_backbone = getattr(model, "get_output_embeddings", None), getattr(model, "get_decoder", None)
    if get_head is None or get_backbone is None:
        return None
    head, backbone = get_head(), get_backbone()
    if not isinstance(head, nn.Linear) or not isinstance(backbone, nn.Module) or backbone is model:
        return None
    return backbone, head


def lm_completion_logprobs(model: nn.Module, batch: TrainBatch, chunk_rows: int = 256) -> Tensor:
    """Completion log-probs (B, T) of ``batch`` under ``model`` as it stands (the caller opens the
    member's route), at ``batch.temperature``; differentiable when a gradient is recorded."""
    positions = position_ids_from_mask(batch.attention_mask)
    parts = split_lm(model)
    if parts is None:
        _, keep_kw = forward_kwarg_names(model)
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=positions,
            use_cache=False,
            **{keep_kw: batch.logits_to_keep},
        ).logits  # (B, L, V): only completion rows
        return completion_logprobs(logits, batch.input_ids, batch.completion_mask, batch.temperature, chunk_rows)
    backbone, head = parts
    hidden = backbone(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions, use_cache=False
    )[0]  # last_hidden_state (B, T, D), after the final norm
    return completion_logprobs_from_hidden(
        hidden[:, -batch.logits_to_keep :], head, batch.input_ids, batch.completion_mask, batch.temperature, chunk_rows
    )
