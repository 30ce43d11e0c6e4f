"""Supervised fine-tuning of one member on completions the verifier accepted: the step both
warm-ups (`populora_nb.warmup`, `populora_nb.solver_warmup`) take after rejection sampling.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from populora_nb.config import ExperimentConfig
from populora_nb.model.batch import sample_generation, train_batch
from populora_nb.model.batched_update import train_step
from populora_nb.model.policy import LoRAPolicy
from populora_nb.policy import TokenIds
from populora_nb.tasks import Task

MEMBER = "agent"
"""The one adapter the warm-ups fine-tune (a baseline-shaped roster)."""


@dataclass(frozen=True)
class Example:
    """One accepted proposal to fine-tune on: the prompt, the completion as sampled, the task."""

    kind: str
    prompt: str
    completion: str
    token_ids: TokenIds | None
    program: str
    inputs: tuple[str, ...]
    task: Task | None = None
    """The accepted task (a proposal example) or the task solved (a solver example)."""


def fine_tune(policy: LoRAPolicy, examples: Sequence[Example], config: ExperimentConfig, seed: int) -> list[float]:
    """``warmup.epochs`` shuffled passes of ``warmup.sft_batch`` examples per AdamW step, each minimising
    the token-mean NLL of the completion tokens as sampled, at temperature 1; returns each step's loss."""
    wc = config.warmup
    rng = random.Random(seed)
    tok = policy.tokenizer
    gens = [sample_generation(MEMBER, tok, e.prompt, e.completion, e.token_ids) for e in examples]

    def nll(logprobs, b):
        mask = b.completion_mask.to(logprobs.dtype)
        loss = -(logprobs * mask).sum() / mask.sum().clamp(min=1.0)
        return loss, {"warmup/nll": float(loss.detach())}

    losses = []
    for _ in range(wc.epochs):
        order = list(range(len(gens)))
        rng.shuffle(order)
        for lo in range(0, len(order), wc.sft_batch):
            chunk = [gens[i] for i in order[lo : lo + wc.sft_batch]]
            batch = train_batch(chunk, [1.0] * len(chunk), tok.pad_token_id, temperature=1.0)
            stats = train_step(
                policy.population, MEMBER, batch, nll, micro_batch_size=config.rl.micro_batch, weight_by="tokens"
            )
            losses.append(stats["warmup/nll"])
    policy.changed(MEMBER)  # trained outside `update`: a rollout engine must sample the new factors
    return losses
