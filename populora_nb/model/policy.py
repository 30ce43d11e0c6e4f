"""The loop's `Policy` on a real model: the LoRA population generates, and learns with TRR++.

Every completion carries the token ids it was sampled as, so the policy gradient
(`rl.policy_gradient_loss`) scores exactly them, at the sampling temperature. With
``rollout.engine="vllm"`` a `VLLMEngine` samples instead, each member an adapter pushed again when its
factors change (`sync`); the trainer recomputes every log-prob and compares the engine's (`Mismatch`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import torch
from transformers.utils import logging as hf_logging

from populora_nb.config import ConfigError, ExperimentConfig
from populora_nb.errors import UserInputError
from populora_nb.lowrank import LoRAFactors, LoRAPair
from populora_nb.model.adapters import Population, Role
from populora_nb.model.base import Base, load_base
from populora_nb.model.batch import Generation, LossFn, TrainBatch, aligned_logprobs, sample_generation, train_batch
from populora_nb.model.batched_update import train_members, train_step
from populora_nb.model.checkpoint import read_adapter
from populora_nb.model.vllm_engine import EngineError, VLLMEngine
from populora_nb.policy import PROBE_SOLVER, Completion, Sample, TokenIds
from populora_nb.rl import policy_gradient_loss


class LoRAPolicy:
    """What the loop generates and trains with on a real model: a `Population` on one frozen `Base`."""

    def __init__(self, config: ExperimentConfig, base: Base, population: Population, engine: VLLMEngine | None = None):
        self.config, self.base, self.population = config, base, population
        self.tokenizer = base.tokenizer
        """The base's tokenizer (prompts are rendered with it)."""
        self._engine = engine
        self._owns_engine = False
        self._stale: set[str] = set(population.ids())
        """Members whose factors the engine has not seen yet."""
        self._loaded_from: Path | None = None
        """The checkpoint `load` read, named if it lacks the difficulty probe's solver."""
        self._sampled: dict[tuple[str, TokenIds], tuple[float, ...]] = {}
        """The engine's log-probs of what it sampled since the last sync, by (member, token ids)."""

    @property
    def engine(self) -> VLLMEngine | None:
        """The vLLM engine with ``rollout.engine="vllm"`` (started on first use); None on the native path."""
        c = self.config
        if self._engine is None and c.rollout.engine == "vllm":
            n = len(self.population.ids())
            self._engine = VLLMEngine(
                self.base, c.lora, c.rollout, n, c.model.max_seq_len, c.run.seed, c.rl.micro_batch
            )
            self._owns_engine = True
            self._stale = set(self.population.ids())
        return self._engine

    def close(self) -> None:
        """Stop the engine this policy started (its own process); the native path holds nothing."""
        if self._owns_engine and self._engine is not None:
            self._engine.close()
        self._engine, self._owns_engine = None, False

    def sync(self) -> float:
        """Push every changed member to the engine (drop replaced ones); returns the seconds (0 without one)."""
        if self._engine is None:
            return 0.0
        self._sampled.clear()  # this step's updates have read them
        return self._push_stale()

    def changed(self, member_id: str) -> None:
        """The member's factors changed outside `update` (the warm-up): the engine gets them before it next samples."""
        self._stale.add(member_id)

    def _push_stale(self) -> float:
        engine = self.engine
        assert engine is not None
        started = time.perf_counter()
        for gone in set(engine.adapters) - set(self.population.ids()):
            engine.drop(gone)
        for m in self.population.ids():
            if m in self._stale:
                engine.push(m, self.factors(m), self._probe_logprobs(m, engine.probe_ids))
        self._stale.clear()
        return time.perf_counter() - started

    @torch.no_grad()
    def _probe_logprobs(self, member_id: str, ids: list[int]) -> list[float] | None:
        """The trainer's `VLLMEngine.probe_peaks` of the member's current factors; None with random
        weights (vLLM's dummy weights are not the trainer's)."""
        if self.base.weights == "random":
            return None
        x = torch.tensor([ids], device=self.base.device)
        with self.population.member_forward(member_id):
            logits = self.base.model(input_ids=x).logits[0].float()  # (T, V)
        return logits.log_softmax(-1).max(-1).values.tolist()

    @classmethod
    def create(
        cls, config: ExperimentConfig, roster: Sequence[tuple[str, str]], base: Base | None = None
    ) -> LoRAPolicy:
        """A fresh population, one member per (name, role) of the roster; loads the base unless given."""
        if base is None:
            # transformers' own "Loading weights" bar would be a second bar in the run's cell: the
            # run's progress line already says "loading the model".
            was_enabled = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                base = load_base(config, seed=config.run.seed)
            finally:
                if was_enabled:
                    hf_logging.enable_progress_bar()
        # Population.create rejects a role that is not a Role.
        roles = {name: cast(Role, role) for name, role in roster}
        if config.probe.every > 0:  # the difficulty probe's frozen solver: a slot of its own, never trained
            roles[PROBE_SOLVER] = "student"
        population = Population.create(base, roles, config.lora, seed=config.run.seed)
        if config.lora.warmup is not None:  # every member starts from the shared warm-up adapter
            try:
                warm = read_adapter(config.lora.warmup, config.lora, config.model.name)
            except UserInputError as e:
                fix = "run the experiment's warmup stage (python -m populora_nb experiment --stages warmup ...)"
                raise UserInputError(f"lora.warmup: {e}; {fix} or set lora.warmup=null") from None
            for name in population.ids():
                population.set_factors(name, warm)
        elif config.probe.every > 0:  # the starting adapter all members share: zero ΔW, the base model
            zero = {n: LoRAPair(f.A, torch.zeros_like(f.B)) for n, f in population.factors(PROBE_SOLVER).items()}
            population.set_factors(PROBE_SOLVER, zero)
        return cls(config, base, population)

    @property
    def members(self) -> list[str]:
        """The members' ids in slot order (the roster's), without the difficulty probe's solver."""
        return [m for m in self.population.ids() if m != PROBE_SOLVER]

    def generate(
        self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int, seed: int
    ) -> list[Completion]:
        """One sampled completion per (member, prompt), in one mixed-adapter batch, with its token ids."""
        return self._generate(member_ids, prompts, max_new_tokens, self.config.sampling.temperature, seed)

    def generate_greedy(self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """The greedy completion text of each (member, prompt), in one mixed-adapter batch (evaluation)."""
        return [c.text for c in self._generate(member_ids, prompts, max_new_tokens, 0.0, None)]

    def _generate(
        self,
        member_ids: Sequence[str],
        prompts: Sequence[str],
        max_new_tokens: int,
        temperature: float,
        seed: int | None,
    ) -> list[Completion]:
        if PROBE_SOLVER in member_ids and PROBE_SOLVER not in self.population.ids():
            raise ConfigError(
                f"{self._loaded_from or 'this population'} holds no difficulty-probe solver (it was "
                "written before the probe or with probe.every=0); run it with probe.every=0"
            )
        sc = self.config.sampling
        stops: list[int] | None = [] if sc.ignore_eos else None  # fixed lengths: every row to its budget
        engine = self.engine
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        if not all(prompt_ids):
            raise ValueError("every prompt needs at least one token")
        if engine is None:
            generator = None if seed is None else torch.Generator(device=self.base.device).manual_seed(seed)
            gens = self.population.generate(
                member_ids,
                prompt_ids,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=sc.top_p,
                generator=generator,
                stop_token_ids=stops,
                share_prompts=self.config.rl.share_prompts,
            )
        else:
            if self._stale:
                self._push_stale()
            gens = engine.generate(
                list(member_ids), prompt_ids, max_new_tokens, temperature, sc.top_p, seed=seed, stop_token_ids=stops
            )
        completions = []
        for m, g in zip(member_ids, gens):
            ids: TokenIds = (tuple(g.prompt_ids), tuple(g.completion_ids))
            if temperature > 0 and g.logprobs is not None:  # the engine's, compared in the update (`Mismatch`)
                self._sampled[(m, ids)] = tuple(g.logprobs)
            completions.append(Completion(g.text, ids))
        return completions

    @property
    def batched_update(self) -> bool:
        """Whether `update_members` trains all members in one pass (``rl.update``; "auto": not on Unsloth)."""
        mode = self.config.rl.update
        if mode == "batched" and self.base.backend == "unsloth":
            raise ConfigError("rl.update=batched needs the transformers backend; on Unsloth set rl.update=auto")
        return mode == "batched" or (mode == "auto" and self.base.backend != "unsloth")

    def update_members(self, samples: Mapping[str, Sequence[Sample]]) -> dict[str, dict[str, float]]:
        """One policy-gradient update of each member on its own samples, batched or one at a time
        (`batched_update`, the same result). All-zero advantages: no step (``optim/skipped`` 1); no
        samples: no entry."""
        return self._update({m: mine for m, mine in samples.items() if mine}, self.batched_update)

    def update(self, member_id: str, samples: Sequence[Sample]) -> dict[str, float]:
        """One member's `update_members`; returns its stats."""
        return self._update({member_id: samples}, batched=False)[member_id]

    def _update(self, samples: Mapping[str, Sequence[Sample]], batched: bool) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        todo: dict[str, tuple[TrainBatch, Mismatch]] = {}
        for m, mine in samples.items():
            # Zero advantages carry no gradient, but an AdamW step would still move the factors
            # along their momentum: skip the step entirely.
            if all(s.advantage == 0 for s in mine):
                out[m] = {"optim/skipped": 1.0}
            else:
                todo[m] = self._prepare(m, mine)
        batches = {m: batch for m, (batch, _) in todo.items()}
        loss_fns = {m: self._loss_fn(mismatch) for m, (_, mismatch) in todo.items()}
        stats: dict[str, dict[str, float]] = {}
        for epoch in range(self.config.rl.ppo_epochs):
            for _, mismatch in todo.values():
                mismatch.active = epoch == 0  # before any optimizer step: the weights the engine sampled with
            if batched:
                stats = train_members(self.population, batches, loss_fns, **self._passes())
            else:
                stats = {
                    m: train_step(self.population, m, b, loss_fns[m], **self._passes()) for m, b in batches.items()
                }
        for m, (_, mismatch) in todo.items():
            out[m] = stats[m] | mismatch.stats() | {"optim/skipped": 0.0, "optim/n_samples": float(len(samples[m]))}
        return {m: out[m] for m in samples}  # in the caller's order

    def _passes(self) -> dict:
        """How an update's passes run: micro-batches (token-weighted) and prompt sharing."""
        rl = self.config.rl
        return {"micro_batch_size": rl.micro_batch, "weight_by": "tokens", "share_prompts": rl.share_prompts}

    def _prepare(self, member_id: str, samples: Sequence[Sample]) -> tuple[TrainBatch, Mismatch]:
        """The member's samples as a batch (engine, reference and old log-probs as configured) and its `Mismatch`."""
        gens = [self._generation(member_id, s) for s in samples]
        # scored at the sampling temperature (TrainBatch.temperature); with top_p < 1 the log-probs
        # stay those of the untruncated distribution (rl.completion_logprobs)
        temperature = self.config.sampling.temperature
        batch = train_batch(gens, [s.advantage for s in samples], self.tokenizer.pad_token_id, temperature=temperature)
        # `get`, not `pop`: two rollouts of one task that sampled the same tokens (a 135M student's
        # short answers often do) share one key and one set of log-probs; `sync` clears them.
        sampled = [self._sampled.get((member_id, s.token_ids)) if s.token_ids else None for s in samples]
        if any(lp is not None for lp in sampled):
            # A sample no engine sampled (a scripted one, or one from before the last sync) still
            # trains, since the trainer recomputes every log-prob it trains on; it only has nothing
            # to compare with, so its row is NaN and the mismatch monitor skips it (`Mismatch.add`).
            batch.sampler_logprobs = aligned_logprobs(batch, sampled)
        if self._engine is not None:
            self._engine.sleep()  # on a GPU: the KV cache makes room for training
            self._stale.add(member_id)
        rl = self.config.rl
        if rl.kl_coef > 0:
            batch.ref_logprobs = self.population.logprobs(None, batch, share_prompts=rl.share_prompts)
        if rl.ppo_epochs > 1:
            batch.old_logprobs = self.population.logprobs(member_id, batch, share_prompts=rl.share_prompts)
        # random weights (doctor --weights random): the engine's dummy weights are not the trainer's by design
        random = self.base.weights == "random"
        return batch, Mismatch(limit=None if random else self.config.rollout.logp_gap_limit)

    def _loss_fn(self, mismatch: Mismatch) -> LossFn:
        rl = self.config.rl

        def loss_fn(logprobs: torch.Tensor, b: TrainBatch) -> tuple[torch.Tensor, dict[str, float]]:
            # token mean (AZR's verl default): micro-batches are weighted by tokens
            mismatch.add(logprobs, b)
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

        return loss_fn

    def _generation(self, member_id: str, s: Sample) -> Generation:
        return sample_generation(member_id, self.tokenizer, s.prompt, s.completion, s.token_ids)

    # ---- evolution ------------------------------------------------------------------------------

    def factors(self, member_id: str) -> LoRAFactors:
        """Detached copies of the member's LoRA factors (evolution's operators read them)."""
        return self.population.factors(member_id)

    def set_factors(self, member_id: str, factors: LoRAFactors) -> None:
        """Overwrite the member's factors, with a fresh AdamW (as a newborn gets)."""
        self.population.set_factors(member_id, factors)
        self._stale.add(member_id)

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
            old, new, factors, parents, step, operator, inherit_optimizer_from=inherit_optimizer_from
        )
        self._stale.add(new)

    # ---- checkpoints ----------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Checkpoint every member (factors, AdamW states, records) into the directory ``path``."""
        self.population.save(path)

    def load(self, path: Path) -> None:
        """Replace the population by the one checkpointed at ``path``."""
        self.population = Population.load(self.base, path)
        self._loaded_from = path
        self._stale = set(self.population.ids())


class LogprobGapError(EngineError):
    """The engine's log-probs are far from the trainer's (`Mismatch`): it sampled from other weights."""


class Mismatch:
    """Training–inference mismatch of one update (as TRL and veRL monitor it): |logp_engine − logp_train|
    over the completion tokens before the optimizer step; a mean over ``limit`` (``rollout.logp_gap_limit``)
    raises `LogprobGapError` inside the loss, so before any step."""

    def __init__(self, limit: float | None = None) -> None:
        self.total, self.count, self.max = 0.0, 0, 0.0
        self.active = True
        self.limit = limit

    def add(self, logprobs: torch.Tensor, batch: TrainBatch) -> None:
        if not self.active or batch.sampler_logprobs is None:
            return
        sampler = batch.sampler_logprobs.to(logprobs.device)
        mask = batch.completion_mask.bool() & ~sampler.isnan()  # NaN: a row no engine sampled
        diff = (logprobs.detach().float() - sampler)[mask].abs()
        if diff.numel():
            self.total += float(diff.sum())
            self.count += diff.numel()
            self.max = max(self.max, float(diff.max()))
        if self.limit is not None and self.count and self.total / self.count > self.limit:
            raise LogprobGapError(
                f"the engine's log-probs differ from the trainer's by {self.total / self.count:.3g} nats per token "
                f"on average (rollout.logp_gap_limit={self.limit:g}; measured in fp32: 7e-5 at most), so the engine "
                f"sampled from other weights than the trainer's (an adapter that did not load or stopped applying "
                f"after a wake); nothing was trained on it. Fix: rerun to resume from the last checkpoint, and if it "
                f"recurs set rollout.sleep_during_training=false or rollout.sync=new_id (or raise the limit when a "
                f"gap is expected, e.g. a quantized base)"
            )

    def stats(self) -> dict[str, float]:
        if not self.count:
            return {}
        return {"rollout/logp_diff_mean": self.total / self.count, "rollout/logp_diff_max": self.max}
