"""The population's LoRA adapters: members, mixed-adapter generation, one-member training, save/load.

PopuLoRA (arXiv 2605.16727 §3) keeps N LoRA members (teachers and students; the AZR baseline has
one "agent") on one frozen base. A member is data (DESIGN.md): an id, a role, its parents and
birth step, its factors (A, B) for every adapted module, and its own AdamW state. Ratings are not
stored here: matchmaking keeps them, keyed by member id, so evolution can read both.

Initialisation: each member draws A independently (peft's Kaiming-uniform, one seed per member).
With ``init="zero_b"`` (peft's default) B = 0, so all members start as the base model and differ
only once trained; with ``init="random"`` B ~ N(0, random_b_std²) and members differ from step 0.

Compute goes through ``multilora.MultiLoRA`` on the transformers backend (all rows of a mixed batch
in one forward per decoding step) and through ``unsloth_slot.UnslothSlot`` on the Unsloth backend
(one peft slot, weights swapped per member; see that module for why). One API for both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from populora_nb.config import LoRAConfig
from populora_nb.model.base import Base
from populora_nb.model.multilora import MultiLoRA, checkpointing, decode, forward_kwarg_names, position_ids_from_mask
from populora_nb.operators import LoRAFactors, LoRAPair
from populora_nb.records import CorruptRunError
from populora_nb.rl import completion_logprobs, logprob_temperature

Role = Literal["teacher", "student", "agent"]
LossFn = Callable[[Tensor, "TrainBatch"], tuple[Tensor, dict[str, float]]]
"""(completion log-probs (B, T) with gradient, at the batch's sampling temperature, batch) ->
(scalar loss, stats), e.g. built on ``rl.policy_gradient_loss``."""

PEFT_PREFIX = "base_model.model."  # how peft names a causal LM's modules in adapter_model.safetensors


@dataclass
class Member:
    id: int
    role: Role
    slot: int
    """Row of the stacked factors this member occupies (a replaced member's child reuses it)."""
    parents: tuple[int, ...] = ()
    birth_step: int = 0
    operator: str = "init"
    """How the member was made: "init", or the evolution operator that produced it."""


@dataclass(frozen=True)
class Generation:
    member_id: int
    prompt_ids: list[int]
    completion_ids: list[int]
    """Sampled tokens, the stop token included when ``stopped``."""
    text: str
    """The completion decoded without special tokens."""
    stopped: bool
    """Ended on a stop token (False: cut at max_new_tokens)."""


@dataclass
class TrainBatch:
    """Left-padded prompt + completion sequences for one member's policy-gradient step."""

    input_ids: Tensor  # (B, T)
    attention_mask: Tensor  # (B, T), 0 on left padding
    completion_mask: Tensor  # (B, T), 1 on the completion tokens that are scored
    advantages: Tensor  # (B,), one per sequence
    old_logprobs: Tensor | None = None  # (B, T), for PPO-style ratios over several epochs
    ref_logprobs: Tensor | None = None  # (B, T), for a KL penalty
    temperature: float = 1.0
    """The temperature the completions were sampled at. Every log-prob of this batch (old, new,
    reference) is taken from logits / temperature, so the gradient and the PPO ratio are those of
    the policy that sampled; 0 (greedy) scores at 1 (see ``rl.logprob_temperature``)."""

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

    def rows(self, index: slice) -> TrainBatch:
        return _map_tensors(self, lambda t: t[index])


def train_batch(
    generations: Sequence[Generation],
    advantages: Sequence[float] | Tensor,
    pad_token_id: int,
    temperature: float = 1.0,
) -> TrainBatch:
    """Left-pad each generation's prompt + completion into a ``TrainBatch`` (completion scored).
    ``temperature``: the one the generations were sampled at (log-probs are taken at it)."""
    ids, attn = _left_pad([g.prompt_ids + g.completion_ids for g in generations], pad_token_id, torch.device("cpu"))
    comp = torch.zeros_like(ids)
    for i, g in enumerate(generations):
        if g.completion_ids:
            comp[i, -len(g.completion_ids) :] = 1
    return TrainBatch(ids, attn, comp, torch.as_tensor(advantages, dtype=torch.float32), temperature=temperature)


def roles_for(n_teachers: int, n_students: int) -> list[Role]:
    return ["teacher"] * n_teachers + ["student"] * n_students


class Population:
    """N LoRA members on one frozen base. Build with ``Population.create`` or ``Population.load``."""

    def __init__(self, base: Base, lora: LoRAConfig, n_slots: int) -> None:
        self.base = base
        self.lora = lora
        self.multi = MultiLoRA(base.model, lora.target_modules, n_slots, lora.rank, lora.alpha)
        self.members: list[Member] = []
        self.optimizers: dict[int, torch.optim.AdamW] = {}
        self.next_id = 0
        self._slot_engine = None
        if base.backend == "unsloth":
            from populora_nb.model.unsloth_slot import UnslothSlot  # CUDA only; never imported on CPU

            self._slot_engine = UnslothSlot(base, lora)

    @classmethod
    def create(
        cls, base: Base, roles: Sequence[Role], lora: LoRAConfig, seed: int = 0, random_b_std: float = 1e-3
    ) -> Population:
        """One member per role, each initialised from its own seed ``(seed, index)``.

        ``random_b_std`` (only for ``lora.init == "random"``) keeps ΔW x near 1% of W x for a
        pretrained 135M layer: members differ, yet none starts far from the base."""
        pop = cls(base, lora, len(roles))
        for slot, role in enumerate(roles):
            gen = torch.Generator().manual_seed(seed * 1_000_003 + slot)
            factors: LoRAFactors = {}
            for name, lin in pop.multi.modules.items():
                bound = 1.0 / math.sqrt(lin.in_features)  # kaiming_uniform_(a=√5), as peft inits lora_A
                a = (torch.rand(lora.rank, lin.in_features, generator=gen) * 2 - 1) * bound
                b = torch.zeros(lin.out_features, lora.rank)
                if lora.init == "random":
                    b = torch.randn(lin.out_features, lora.rank, generator=gen) * random_b_std
                factors[name] = LoRAPair(a, b)
            pop.members.append(Member(id=pop.next_id, role=role, slot=slot))
            pop.next_id += 1
            pop.set_factors(pop.members[-1].id, factors)
        return pop

    # ---- members --------------------------------------------------------------------------

    def member(self, member_id: int) -> Member:
        for m in self.members:
            if m.id == member_id:
                return m
        raise KeyError(f"no member {member_id}; members are {[m.id for m in self.members]}")

    def ids(self, role: Role | None = None) -> list[int]:
        return [m.id for m in self.members if role is None or m.role == role]

    def factors(self, member_id: int) -> LoRAFactors:
        """Detached clones of the member's factors, ΔW = B @ A per module (alpha/r left out)."""
        s = self.member(member_id).slot
        # B is stored transposed (multilora's layout); hand out a contiguous (d_out, r) copy.
        return {
            n: LoRAPair(
                self.multi.A[n][s].clone(), self.multi.Bt[n][s].t().clone(memory_format=torch.contiguous_format)
            )
            for n in self.multi.modules
        }

    def set_factors(self, member_id: int, factors: LoRAFactors, reset_optimizer: bool = True) -> None:
        """Install ``factors`` as the member's weights (e.g. an evolved child); the optimizer state
        is dropped unless ``reset_optimizer=False``."""
        if set(factors) != set(self.multi.modules):
            missing, extra = set(self.multi.modules) - set(factors), set(factors) - set(self.multi.modules)
            raise ValueError(
                f"factors must cover exactly the adapted modules; missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]}"
            )
        s = self.member(member_id).slot
        with torch.no_grad():
            for name, pair in factors.items():
                dst_a, dst_bt = self.multi.A[name][s], self.multi.Bt[name][s]
                if pair.A.shape != dst_a.shape or pair.B.t().shape != dst_bt.shape:
                    raise ValueError(
                        f"{name}: factor shapes {tuple(pair.A.shape)}, {tuple(pair.B.shape)} != "
                        f"{tuple(dst_a.shape)}, {tuple(dst_bt.t().shape)} (rank {self.lora.rank})"
                    )
                dst_a.copy_(pair.A)
                dst_bt.copy_(pair.B.t())
        if reset_optimizer:
            self.optimizers.pop(member_id, None)

    def replace(
        self,
        member_id: int,
        factors: LoRAFactors,
        parents: Sequence[int] = (),
        birth_step: int = 0,
        operator: str = "copy",
        role: Role | None = None,
        inherit_optimizer_from: int | None = None,
    ) -> Member:
        """Evolution: a child with a new id takes ``member_id``'s slot (the old member is gone)."""
        old = self.member(member_id)
        inherited = self._optimizer_state(inherit_optimizer_from) if inherit_optimizer_from is not None else None
        self.set_factors(member_id, factors)  # validates before any record changes; drops old's AdamW
        child = Member(self.next_id, role or old.role, old.slot, tuple(parents), birth_step, operator)
        self.next_id += 1
        self.members[self.members.index(old)] = child
        if inherited is not None:
            self._load_optimizer_state(child.id, inherited)
        return child

    # ---- generation -----------------------------------------------------------------------

    def generate(
        self,
        member_ids: Sequence[int],
        prompts: Sequence[str] | Sequence[Sequence[int]],
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        stop_token_ids: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Row i continues ``prompts[i]`` (text with any chat template already applied, or token ids)
        with member ``member_ids[i]``'s adapter; all rows share one forward per decoding step.

        temperature 0 is greedy. Sampling needs ``generator`` (a ``torch.Generator`` on the base's
        device), so runs are reproducible and no global RNG is touched. Stops at the tokenizer's
        EOS (or ``stop_token_ids``)."""
        if len(member_ids) != len(prompts):
            raise ValueError(f"one member per prompt: {len(member_ids)} members, {len(prompts)} prompts")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0 (0: greedy) and 0 < top_p <= 1, got {temperature}, {top_p}")
        if temperature > 0 and generator is None:
            raise ValueError("sampling (temperature > 0) needs generator=torch.Generator(device).manual_seed(seed)")
        tok = self.base.tokenizer
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
        if not prompt_ids or not all(prompt_ids):
            raise ValueError("every prompt needs at least one token")
        ids, mask = _left_pad(prompt_ids, tok.pad_token_id, self.base.device)
        slots = torch.tensor([self.member(m).slot for m in member_ids], device=self.base.device)
        stops = list(stop_token_ids) if stop_token_ids is not None else [tok.eos_token_id]
        sampling = dict(
            max_new_tokens=max_new_tokens,
            stop_token_ids=stops,
            pad_token_id=tok.pad_token_id,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
        )
        if self._slot_engine is not None:
            tokens, lengths = self._slot_engine.generate(self.multi, slots, ids, mask, **sampling)
        else:
            with self.multi.route_rows(slots):
                tokens, lengths = decode(self.base.model, ids, mask, **sampling)
        out = []
        for i, m in enumerate(member_ids):
            comp = tokens[i, : int(lengths[i])].tolist()
            stopped = bool(comp) and comp[-1] in stops
            out.append(Generation(m, prompt_ids[i], comp, tok.decode(comp, skip_special_tokens=True), stopped))
        return out

    # ---- training -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _member_forward(self, member_id: int | None) -> Iterator[Callable[[TrainBatch], Tensor]]:
        """A function batch -> completion log-probs (B, T) under this member's adapter (None: the
        bare base), at the batch's sampling temperature. The route stays open until the caller's
        backward is done (checkpointing)."""
        model = self.base.model
        _, keep_kw = forward_kwarg_names(model)

        def logprobs(b: TrainBatch) -> Tensor:
            logits = model(
                input_ids=b.input_ids,
                attention_mask=b.attention_mask,
                use_cache=False,
                position_ids=position_ids_from_mask(b.attention_mask),
                **{keep_kw: b.logits_to_keep},
            ).logits  # (B, L, V): only completion rows
            return completion_logprobs(logits, b.input_ids, b.completion_mask, b.temperature)

        if member_id is None:
            with self._slot_engine.bare() if self._slot_engine is not None else contextlib.nullcontext():
                yield logprobs
        elif self._slot_engine is not None:
            with self._slot_engine.member(self.multi, self.member(member_id).slot, self.lora.gradient_checkpointing):
                yield logprobs
        else:
            with (
                self.multi.route_slot(self.member(member_id).slot),
                checkpointing(model, self.lora.gradient_checkpointing),
            ):
                yield logprobs

    @torch.no_grad()
    def logprobs(self, member_id: int | None, batch: TrainBatch) -> Tensor:
        """Completion log-probs (B, T) without gradient, at ``batch.temperature`` (the sampling
        temperature, as ``train_step`` takes them): old log-probs for PPO epochs, or the base's
        (``member_id=None``) as a KL reference."""
        with self._member_forward(member_id) as forward:
            return forward(_to(batch, self.base.device))

    def train_step(
        self,
        member_id: int,
        batch: TrainBatch,
        loss_fn: LossFn,
        micro_batch_size: int | None = None,
        weight_by: Literal["rows", "tokens"] = "rows",
    ) -> dict[str, float]:
        """One AdamW step on this member's LoRA factors only; the base and every other member stay
        bit-identical. ``micro_batch_size`` accumulates gradients over row chunks, each chunk's loss
        weighted by its share of the batch's rows or completion tokens: ``weight_by`` must match the
        loss's mean ("rows" for a per-sequence mean, "tokens" for a token mean) for the step to equal
        the unchunked one. Returns the loss_fn's stats averaged over chunks plus ``optim/*``, ``time/*``."""
        if weight_by not in ("rows", "tokens"):
            raise ValueError(f"weight_by must be 'rows' or 'tokens', got {weight_by!r}")
        start = time.perf_counter()
        member = self.member(member_id)
        params = self.multi.parameters(member.slot)
        opt = self._optimizer(member_id)
        opt.zero_grad(set_to_none=True)
        batch = _to(batch, self.base.device)
        n = batch.input_ids.shape[0]
        step = micro_batch_size or n
        size = (lambda b: b.input_ids.shape[0]) if weight_by == "rows" else (lambda b: float(b.completion_mask.sum()))
        total = max(size(batch), 1e-9)
        stats: dict[str, float] = {}
        with self._member_forward(member_id) as forward:
            for lo in range(0, n, step):
                chunk = batch.rows(slice(lo, lo + step))
                weight = size(chunk) / total
                loss, chunk_stats = loss_fn(forward(chunk), chunk)
                (loss * weight).backward()
                for k, v in chunk_stats.items():
                    stats[k] = stats.get(k, 0.0) + weight * v
        if self._slot_engine is not None:
            self._slot_engine.grads_to(self.multi, member.slot)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.lora.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stats.update(
            {
                "optim/grad_norm": float(grad_norm),
                "optim/lr": self.lora.lr,
                "time/train_step_s": time.perf_counter() - start,
            }
        )
        return stats

    def _optimizer(self, member_id: int) -> torch.optim.AdamW:
        # One AdamW per member: with a shared one, momentum would keep moving members whose
        # gradient is zero this step.
        if member_id not in self.optimizers:
            params = self.multi.parameters(self.member(member_id).slot)
            self.optimizers[member_id] = torch.optim.AdamW(params, lr=self.lora.lr, weight_decay=self.lora.weight_decay)
        return self.optimizers[member_id]

    def _optimizer_state(self, member_id: int) -> dict[str, Tensor]:
        """The member's AdamW state as flat tensors ``{param_index}.{exp_avg|exp_avg_sq|step}``."""
        if member_id not in self.optimizers:
            return {}
        state = self.optimizers[member_id].state_dict()["state"]
        return {f"{i}.{k}": v.detach().clone() for i, s in state.items() for k, v in s.items()}

    def _load_optimizer_state(self, member_id: int, flat: dict[str, Tensor]) -> None:
        if not flat:
            return
        opt = self._optimizer(member_id)
        state: dict[int, dict[str, Tensor]] = {}
        for key, value in flat.items():
            i, k = key.split(".", 1)
            state.setdefault(int(i), {})[k] = value
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})

    # ---- memory ---------------------------------------------------------------------------

    def memory(self) -> dict[str, float]:
        """MiB held by the base's parameters, all members' factors and the AdamW moments so far,
        and the factors as a fraction of the base: what N adapters add to one frozen model."""
        mib = 2.0**20
        base = sum(p.numel() * p.element_size() for p in self.base.model.parameters())
        factors = self.multi.nbytes()
        optim = sum(
            t.numel() * t.element_size()
            for opt in self.optimizers.values()
            for st in opt.state.values()
            for t in st.values()
            if torch.is_tensor(t)
        )
        return {
            "base_mib": base / mib,
            "factors_mib": factors / mib,
            "per_member_mib": factors / len(self.members) / mib,
            "optimizer_mib": optim / mib,
            "factors_over_base": factors / base,
        }

    # ---- save / load ----------------------------------------------------------------------

    def save_member(self, member_id: int, directory: str | Path) -> Path:
        """Write a peft LoRA adapter (adapter_model.safetensors + adapter_config.json) that
        ``peft.PeftModel.from_pretrained(base_model, directory)`` loads, plus populora_member.json."""
        from peft import LoraConfig  # peft writes its own config so any peft version can read it

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for name, pair in self.factors(member_id).items():
            tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = pair.A.contiguous().cpu()
            tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = pair.B.contiguous().cpu()
        save_file(tensors, directory / "adapter_model.safetensors", metadata={"format": "pt"})
        LoraConfig(
            r=self.lora.rank,
            lora_alpha=self.lora.alpha,
            target_modules=list(self.lora.target_modules),
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            base_model_name_or_path=self.base.name,
        ).save_pretrained(str(directory))
        (directory / "populora_member.json").write_text(
            json.dumps(dataclasses.asdict(self.member(member_id)), indent=1)
        )
        return directory

    def save(self, directory: str | Path) -> Path:
        """Checkpoint the whole population: factors, AdamW states and member records."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stacks = {f"{n}.A": self.multi.A[n].cpu() for n in self.multi.modules}
        stacks |= {f"{n}.Bt": self.multi.Bt[n].cpu() for n in self.multi.modules}
        save_file(stacks, directory / "factors.safetensors")
        optim = {f"{m}.{k}": v.cpu() for m in self.optimizers for k, v in self._optimizer_state(m).items()}
        save_file(optim, directory / "optimizers.safetensors")
        meta = {
            "base": self.base.name,
            "lora": _plain(dataclasses.asdict(self.lora)),
            "next_id": self.next_id,
            "members": [dataclasses.asdict(m) for m in self.members],
        }
        (directory / "population.json").write_text(json.dumps(meta, indent=1))
        return directory

    @classmethod
    def load(cls, base: Base, directory: str | Path) -> Population:
        directory = Path(directory)
        meta = _read(directory / "population.json")
        lora = LoRAConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["lora"].items()})
        pop = cls(base, lora, len(meta["members"]))
        stacks = _read(directory / "factors.safetensors")
        if {k.rsplit(".", 1)[0] for k in stacks} != set(pop.multi.modules):
            raise ValueError(
                f"{directory} adapts other modules than this base model has; was it saved for {meta['base']}?"
            )
        with torch.no_grad():
            for n in pop.multi.modules:
                pop.multi.A[n].copy_(stacks[f"{n}.A"])
                pop.multi.Bt[n].copy_(stacks[f"{n}.Bt"])
        pop.members = [Member(**{**m, "parents": tuple(m["parents"])}) for m in meta["members"]]
        pop.next_id = meta["next_id"]
        optim = _read(directory / "optimizers.safetensors", device=str(base.device))
        for m in pop.members:
            prefix = f"{m.id}."
            pop._load_optimizer_state(m.id, {k[len(prefix) :]: v for k, v in optim.items() if k.startswith(prefix)})
        return pop


def load_member_factors(directory: str | Path) -> tuple[LoRAFactors, dict]:
    """Factors and adapter_config of a peft LoRA adapter directory (ours or any peft LoRA on the
    same modules), ready for ``Population.set_factors``. The config's alpha/r is returned, not
    applied: rescale B when it differs from the population's."""
    directory = Path(directory)
    config = _read(directory / "adapter_config.json")
    tensors = _read(directory / "adapter_model.safetensors")
    names = sorted({k[len(PEFT_PREFIX) :].rsplit(".lora_", 1)[0] for k in tensors})
    factors = {
        n: LoRAPair(tensors[f"{PEFT_PREFIX}{n}.lora_A.weight"], tensors[f"{PEFT_PREFIX}{n}.lora_B.weight"])
        for n in names
    }
    return factors, config


def _read(path: Path, device: str = "cpu") -> Any:
    """A saved file (.safetensors tensors, else JSON); a missing, truncated or damaged one raises one line
    naming it (safetensors' own error names no file)."""
    try:
        return load_file(path, device=device) if path.suffix == ".safetensors" else json.loads(path.read_text())
    except (OSError, ValueError, SafetensorError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptRunError(
            f"{path} does not load ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})",
            "restore it, or load another checkpoint",
        ) from None


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s))
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def _to(batch: TrainBatch, device: torch.device) -> TrainBatch:
    return _map_tensors(batch, lambda t: t.to(device))


def _map_tensors(batch: TrainBatch, fn: Callable[[Tensor], Tensor]) -> TrainBatch:
    """A copy of ``batch`` with ``fn`` applied to every tensor field (None and scalars kept)."""
    fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return dataclasses.replace(batch, **{k: fn(v) for k, v in fields.items() if isinstance(v, Tensor)})


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
