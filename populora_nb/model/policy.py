"""The loop's `Policy` on a real model: the LoRA population generates, and learns with TRR++.

Members are named by the loop's ids ("agent", "T0", "S3", an evolved child's name) here and in
the `Population` alike. This module returns every completion with the token ids it was sampled as
(they travel with the proposal or attempt into its `Sample`, so the policy gradient scores exactly
the sampled tokens, not a re-tokenisation of the text), and turns a member's samples into
policy-gradient updates (`rl.policy_gradient_loss`, PPO-clip over `rl.ppo_epochs`, optional KL to
the frozen base), with every log-prob taken at the sampling temperature it was drawn at.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch

from populora_nb.config import ExperimentConfig
from populora_nb.lowrank import LoRAFactors
from populora_nb.model.adapters import Population, Role
from populora_nb.model.base import Base, load_base
from populora_nb.model.batch import Generation, train_batch
from populora_nb.rl import policy_gradient_loss
from populora_nb.stages import Completion, Sample


class LoRAPolicy:
    """What the loop generates and trains with on a real model: a `Population` of LoRA members on
    one frozen `Base`, sampling and updating with the run's config (``sampling``, ``rl``), and
    replacing members when evolution breeds children. Members are named by the loop's ids
    throughout; `members` lists them."""

    def __init__(self, config: ExperimentConfig, base: Base, population: Population):
        self.config, self.base, self.population = config, base, population
        self.tokenizer = base.tokenizer
        """The base's tokenizer (prompts are rendered with it)."""

    @classmethod
    def create(
        cls, config: ExperimentConfig, roster: Sequence[tuple[str, str]], base: Base | None = None
    ) -> LoRAPolicy:
        """A fresh population with one member per (name, role) of the roster, in its order; loads
        the configured base unless one is given."""
        if base is None:
            # transformers' own "Loading weights" bar would be a second bar in the run's cell: the
            # run's progress line already says "loading the model".
            from transformers.utils import logging as hf_logging

            was_enabled = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                base = load_base(config, seed=config.run.seed)
            finally:
                if was_enabled:
                    hf_logging.enable_progress_bar()
        # Population.create rejects a role that is not a Role.
        roles = {name: cast(Role, role) for name, role in roster}
        population = Population.create(base, roles, config.lora, seed=config.run.seed)
        if config.lora.warmup is not None:  # every member starts from the shared warm-up adapter
            from populora_nb.warmup import load_factors

            warm = load_factors(config.lora.warmup, config)
            for name in population.ids():
                population.set_factors(name, warm)
        return cls(config, base, population)

    @property
    def members(self) -> list[str]:
        """The members' ids in the population's (slot) order, which is the loop roster's."""
        return self.population.ids()

    def generate(
        self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int, seed: int
    ) -> list[Completion]:
        """One completion per (member, prompt), sampled in one mixed-adapter batch; each carries the
        token ids it was sampled as, which `update` scores."""
        sc = self.config.sampling
        generator = torch.Generator(device=self.base.device).manual_seed(seed)
        gens = self.population.generate(
            member_ids,
            list(prompts),
            max_new_tokens=max_new_tokens,
            temperature=sc.temperature,
            top_p=sc.top_p,
            generator=generator,
        )
        return [Completion(g.text, (tuple(g.prompt_ids), tuple(g.completion_ids))) for g in gens]

    def generate_greedy(self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """The greedy (temperature 0) completion text of each (member, prompt), in one mixed-adapter
        batch: what evaluation scores."""
        gens = self.population.generate(member_ids, list(prompts), max_new_tokens=max_new_tokens, temperature=0.0)
        return [g.text for g in gens]

    def update(self, member_id: str, samples: Sequence[Sample]) -> dict[str, float]:
        """PPO-clip / REINFORCE update of one member on its own samples; returns the step's stats
        (``optim/skipped`` 1 when every advantage is 0 and no step was taken)."""
        gens = [self._generation(member_id, s) for s in samples]
        advantages = [s.advantage for s in samples]
        if all(a == 0 for a in advantages):
            # Zero advantages carry no gradient, but an AdamW step would still move the factors
            # along their momentum: skip the step entirely.
            return {"optim/skipped": 1.0}
        rl = self.config.rl
        # Score at the temperature the samples were drawn at: old, new and reference log-probs are
        # then those of the policy that sampled (rl.logprob_temperature says why, and what 0 does).
        # With top_p < 1 they stay those of the untruncated distribution (rl.completion_logprobs).
        temperature = self.config.sampling.temperature
        batch = train_batch(gens, advantages, self.tokenizer.pad_token_id, temperature=temperature)
        if rl.kl_coef > 0:
            batch.ref_logprobs = self.population.logprobs(None, batch)
        if rl.ppo_epochs > 1:
            batch.old_logprobs = self.population.logprobs(member_id, batch)

        def loss_fn(logprobs, b):  # token mean (AZR's verl default): micro-batches are weighted by tokens
            return policy_gradient_loss(
                logprobs,
                b.completion_mask,
                b.advantages,
                old_logprobs=b.old_logprobs,
                ref_logprobs=b.ref_logprobs,
                epsilon=rl.clip_epsilon,
                kl_coef=rl.kl_coef,
                aggregation="token_mean",
            )

        stats: dict[str, float] = {}
        for _ in range(rl.ppo_epochs):
            stats = self.population.train_step(
                member_id, batch, loss_fn, micro_batch_size=rl.micro_batch, weight_by="tokens"
            )
        stats["optim/skipped"] = 0.0
        stats["optim/n_samples"] = float(len(samples))
        return stats

    def _generation(self, member_id: str, s: Sample) -> Generation:
        if s.token_ids is not None:  # sampled by a model: score exactly those tokens
            prompt_ids, completion_ids = s.token_ids
            return Generation(member_id, list(prompt_ids), list(completion_ids), s.completion, True)
        # Not sampled by a model (e.g. a scripted completion): score its tokenisation.
        tok = self.tokenizer
        prompt_ids = tok(s.prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tok(s.completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return Generation(member_id, prompt_ids, completion_ids, s.completion, True)

    # ---- evolution ------------------------------------------------------------------------------

    def factors(self, member_id: str) -> LoRAFactors:
        """Detached copies of the member's LoRA factors (evolution's operators read them)."""
        return self.population.factors(member_id)

    def set_factors(self, member_id: str, factors: LoRAFactors) -> None:
        """Overwrite the member's factors, with a fresh AdamW (as a newborn gets)."""
        self.population.set_factors(member_id, factors)

    def replace(
        self,
        old: str,
        new: str,
        factors: LoRAFactors,
        parents: Sequence[str],
        operator: str,
        step: int,
        inherit_optimizer_from: str | None = None,
    ) -> None:
        """The child ``new`` takes ``old``'s slot and place; ``old`` leaves the population."""
        self.population.replace(
            old,
            new,
            factors,
            parents=parents,
            birth_step=step,
            operator=operator,
            inherit_optimizer_from=inherit_optimizer_from,
        )

    # ---- checkpoints ----------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Checkpoint every member (factors, AdamW states, records) into the directory ``path``."""
        self.population.save(path)

    def load(self, path: Path) -> None:
        """Replace the population by the one checkpointed at ``path`` (a checkpoint written before
        issue #15, with names.json, loads too)."""
        self.population = Population.load(self.base, path)
