"""The population's LoRA adapters: the member bank, mixed-adapter generation, one member's forward and AdamW step.

PopuLoRA (arXiv 2605.16727 §3) keeps N LoRA members (teachers and students; the AZR baseline has
one "agent") on one frozen base. A member is data (docs/design.md): an id, a role, parents, birth
step, its factors and its own AdamW state (ratings live in matchmaking under the same ids). Compute
goes through ``multilora.MultiLoRA`` on transformers and ``unsloth_slot.UnslothSlot`` on Unsloth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from populora_nb.config import LoRAConfig
from populora_nb.lowrank import LoRAFactors, LoRAPair
from populora_nb.model.base import Base, decode_text
from populora_nb.model.batch import Generation, LossFn, TrainBatch, left_pad
from populora_nb.model.checkpoint import SavedPopulation, read_population, write_peft_adapter, write_population
from populora_nb.model.multilora import MultiLoRA, checkpointing
from populora_nb.model.shared_prompt import completion_logprobs, decode_rows, repeated_prompts
from populora_nb.model.unsloth_slot import UnslothSlot

Role = Literal["teacher", "student", "agent"]


@dataclass
class Member:
    """One member's record; its factors live in the bank's row ``slot``, its AdamW state in ``optimizers[id]``."""

    id: str
    """The member's name in the loop ("agent", "T0", "S3", an evolved child's)."""
    role: Role
    slot: int
    """Row of the stacked factors this member occupies (a replaced member's child reuses it)."""
    parents: tuple[str, ...] = ()
    birth_step: int = 0
    operator: str = "init"
    """How the member was made: "init", or the evolution operator that produced it."""


def roles_for(n_teachers: int, n_students: int) -> dict[str, Role]:
    """The loop's roster of a population: {"T0": "teacher", ..., "S0": "student", ...}."""
    teachers: dict[str, Role] = {f"T{i}": "teacher" for i in range(n_teachers)}
    return teachers | {f"S{i}": "student" for i in range(n_students)}


class Population:
    """The bank of LoRA members on one frozen base: factors (one *slot* of ``multilora``'s stacks per
    member), records and AdamW states. Build with ``create`` or ``load`` (a checkpoint)."""

    def __init__(self, base: Base, lora: LoRAConfig, n_slots: int) -> None:
        self.base = base
        self.lora = lora
        self.multi = MultiLoRA(base.model, lora.target_modules, n_slots, lora.rank, lora.alpha)
        self.members: list[Member] = []
        """In slot order; an evolved child takes its replaced member's place."""
        self.optimizers: dict[str, torch.optim.AdamW] = {}
        self._slot_engine = None
        if base.backend == "unsloth":
            # CUDA only: the slot imports unsloth inside, so importing its module on CPU loads nothing
            self._slot_engine = UnslothSlot(base, lora)

    @classmethod
    def create(
        cls, base: Base, roster: Mapping[str, Role], lora: LoRAConfig, seed: int = 0, random_b_std: float = 1e-3
    ) -> Population:
        """One member per ``{name: role}`` of the roster, the i-th drawing A (peft's Kaiming-uniform)
        from its own seed. B = 0 with ``lora.init="zero_b"``; with ``"random"``, B ~ N(0, random_b_std²),
        which keeps ΔW x near 1% of W x for a pretrained 135M layer."""
        for name, role in roster.items():
            if role not in get_args(Role):
                raise ValueError(f"member {name!r}: role must be one of {get_args(Role)}, got {role!r}")
        pop = cls(base, lora, len(roster))
        for slot, (name, role) in enumerate(roster.items()):
            gen = torch.Generator().manual_seed(seed * 1_000_003 + slot)
            factors: LoRAFactors = {}
            for module, lin in pop.multi.modules.items():
                bound = 1.0 / math.sqrt(lin.in_features)  # kaiming_uniform_(a=√5), as peft inits lora_A
                a = (torch.rand(lora.rank, lin.in_features, generator=gen) * 2 - 1) * bound
                b = torch.zeros(lin.out_features, lora.rank)
                if lora.init == "random":
                    b = torch.randn(lin.out_features, lora.rank, generator=gen) * random_b_std
                factors[module] = LoRAPair(a, b)
            pop.members.append(Member(id=name, role=role, slot=slot))
            pop.set_factors(name, factors)
        return pop

    # ---- members --------------------------------------------------------------------------

    def member(self, member_id: str) -> Member:
        for m in self.members:
            if m.id == member_id:
                return m
        raise KeyError(f"no member {member_id!r}; members are {[m.id for m in self.members]}")

    def ids(self, role: Role | None = None) -> list[str]:
        """The members' ids (names) in slot order, all or those of one role."""
        return [m.id for m in self.members if role is None or m.role == role]

    def factors(self, member_id: str) -> LoRAFactors:
        """Detached clones of the member's factors, ΔW = B @ A per module (alpha/r left out)."""
        s = self.member(member_id).slot
        # B is stored transposed (multilora's layout); hand out a contiguous (d_out, r) copy.
        return {
            n: LoRAPair(
                self.multi.A[n][s].clone(), self.multi.Bt[n][s].t().clone(memory_format=torch.contiguous_format)
            )
            for n in self.multi.modules
        }

    def set_factors(self, member_id: str, factors: LoRAFactors, reset_optimizer: bool = True) -> None:
        """Install ``factors`` as the member's weights (e.g. an evolved child); the optimizer state
        is dropped unless ``reset_optimizer=False``."""
        if set(factors) != set(self.multi.modules):
            missing, extra = set(self.multi.modules) - set(factors), set(factors) - set(self.multi.modules)
            raise ValueError(
                "factors must cover exactly the adapted modules; "
                f"missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]}"
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
        member_id: str,
        child_id: str,
        factors: LoRAFactors,
        parents: Sequence[str] = (),
        birth_step: int = 0,
        operator: str = "copy",
        inherit_optimizer_from: str | None = None,
    ) -> Member:
        """Evolution: the child ``child_id`` takes ``member_id``'s slot and place (the old member is
        gone), with a fresh AdamW or a copy of ``inherit_optimizer_from``'s."""
        old = self.member(member_id)
        if child_id in self.ids():
            raise ValueError(f"a child needs a new id; {child_id!r} is already a member")
        inherited = self._optimizer_state(inherit_optimizer_from) if inherit_optimizer_from is not None else None
        self.set_factors(member_id, factors)  # validates before any record changes; drops old's AdamW
        child = Member(child_id, old.role, old.slot, tuple(parents), birth_step, operator)
        self.members[self.members.index(old)] = child
        if inherited is not None:
            self._load_optimizer_state(child.id, inherited)
        return child

    # ---- generation -----------------------------------------------------------------------

    def generate(
        self,
        member_ids: Sequence[str],
        prompts: Sequence[str] | Sequence[Sequence[int]],
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        stop_token_ids: Sequence[int] | None = None,
        share_prompts: bool = False,
    ) -> list[Generation]:
        """Row i continues ``prompts[i]`` (text or token ids) with member ``member_ids[i]``'s adapter,
        all rows in one forward per decoding step; temperature 0 is greedy, sampling needs
        ``generator`` (no global RNG). Stops at EOS or ``stop_token_ids``. ``share_prompts``: each
        distinct (member, prompt) prefilled once (`shared_prompt.decode_rows`), the same tokens."""
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
        ids, mask = left_pad(prompt_ids, tok.pad_token_id, self.base.device)
        slots = torch.tensor([self.member(m).slot for m in member_ids], device=self.base.device)
        stops = list(stop_token_ids) if stop_token_ids is not None else [tok.eos_token_id]
        sampling: dict[str, Any] = dict(max_new_tokens=max_new_tokens, stop_token_ids=stops, temperature=temperature)
        sampling |= dict(pad_token_id=tok.pad_token_id, top_p=top_p, generator=generator)
        if self._slot_engine is not None:
            tokens, lengths = self._slot_engine.generate(self.multi, slots, ids, mask, **sampling)
        else:
            tokens, lengths = decode_rows(self.multi, self.base.model, slots, ids, mask, share_prompts, **sampling)
        out = []
        for i, m in enumerate(member_ids):
            comp = tokens[i, : int(lengths[i])].tolist()
            stopped = bool(comp) and comp[-1] in stops
            out.append(Generation(m, prompt_ids[i], comp, decode_text(tok, comp), stopped))
        return out

    # ---- training -------------------------------------------------------------------------

    @contextlib.contextmanager
    def member_forward(
        self, member_id: str | None, share_prompts: bool = False
    ) -> Iterator[Callable[[TrainBatch], Tensor]]:
        """batch -> completion log-probs (B, T) under this member's adapter (None: the bare base), each
        repeated prompt run once with ``share_prompts`` (not on Unsloth); open until the backward is done."""
        model = self.base.model
        share = share_prompts and self._slot_engine is None

        def logprobs(b: TrainBatch) -> Tensor:  # without the (tokens × vocab) logits (model.scoring)
            return completion_logprobs(model, b, repeated_prompts(b) if share else None)

        if member_id is None:
            with self._slot_engine.bare() if self._slot_engine is not None else self.multi.bare():
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
    def logprobs(self, member_id: str | None, batch: TrainBatch, share_prompts: bool = False) -> Tensor:
        """Completion log-probs (B, T) without gradient: old log-probs for PPO epochs, or the base's
        (``member_id=None``) as a KL reference."""
        with self.member_forward(member_id, share_prompts) as forward:
            return forward(batch.to(self.base.device))

    def loss_and_grads(self, member_id: str, batch: TrainBatch, loss_fn: LossFn) -> tuple[float, list[Tensor]]:
        """The member's loss on ``batch`` and its gradients (float32 CPU copies), no step taken: what
        `benchmarks/stack.compare_gradients` compares across two backends."""
        self.zero_grad(member_id)
        slot = self.member(member_id).slot
        batch = batch.to(self.base.device)
        with self.member_forward(member_id) as forward:
            loss, _ = loss_fn(forward(batch), batch)
            loss.backward()
        if self._slot_engine is not None:
            self._slot_engine.grads_to(self.multi, slot)
        params = self.multi.parameters(slot)
        grads = [torch.zeros(p.shape) if p.grad is None else p.grad.detach().float().cpu().clone() for p in params]
        self.zero_grad(member_id)
        return float(loss.detach()), grads

    def zero_grad(self, member_id: str) -> None:
        """Clear the member's gradients (before accumulating a step's micro-batches)."""
        self._optimizer(member_id).zero_grad(set_to_none=True)

    def optimizer_step(self, member_id: str) -> dict[str, float]:
        """Clip to ``lora.grad_clip``, take the member's AdamW step, clear its gradients; returns
        ``optim/grad_norm`` (before clipping) and ``optim/lr``."""
        slot = self.member(member_id).slot
        if self._slot_engine is not None:  # the gradients Unsloth's slot summed, onto the member's leaves
            self._slot_engine.grads_to(self.multi, slot)
        params = self.multi.parameters(slot)
        opt = self._optimizer(member_id)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.lora.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"optim/grad_norm": float(grad_norm), "optim/lr": self.lora.lr}

    def _optimizer(self, member_id: str) -> torch.optim.AdamW:
        # One AdamW per member: with a shared one, momentum would keep moving members whose
        # gradient is zero this step.
        if member_id not in self.optimizers:
            params = self.multi.parameters(self.member(member_id).slot)
            self.optimizers[member_id] = torch.optim.AdamW(params, lr=self.lora.lr, weight_decay=self.lora.weight_decay)
        return self.optimizers[member_id]

    def _optimizer_state(self, member_id: str, device: str | None = None) -> dict[str, Tensor]:
        """The member's AdamW state as flat tensors ``{param_index}.{field}``, copied (onto ``device``)."""
        if member_id not in self.optimizers:
            return {}
        state = self.optimizers[member_id].state_dict()["state"]
        return {
            f"{i}.{k}": v.detach().to(device or v.device, copy=True) for i, s in state.items() for k, v in s.items()
        }

    def _load_optimizer_state(self, member_id: str, flat: dict[str, Tensor]) -> None:
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
        """MiB of the base, all members' factors and AdamW moments, and factors ÷ base: what N adapters add."""
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

    def save_member(self, member_id: str, directory: str | Path) -> Path:
        """The member as a peft LoRA adapter with its record (`checkpoint.write_peft_adapter`)."""
        record = dataclasses.asdict(self.member(member_id))
        return write_peft_adapter(directory, self.factors(member_id), self.lora, self.base.name, record)

    def save(self, directory: str | Path) -> Path:
        """Checkpoint the whole population: factors, AdamW states and member records."""
        stacks = {f"{n}.A": self.multi.A[n] for n in self.multi.modules}
        stacks |= {f"{n}.Bt": self.multi.Bt[n] for n in self.multi.modules}
        states = {m: self._optimizer_state(m, device="cpu") for m in self.optimizers}
        members = [dataclasses.asdict(m) for m in self.members]
        return write_population(directory, SavedPopulation(self.base.name, self.lora, members, stacks, states))

    @classmethod
    def load(cls, base: Base, directory: str | Path) -> Population:
        """The population checkpointed in ``directory``, on ``base`` (a retired layout: refused, see ``checkpoint``)."""
        saved = read_population(directory, device=str(base.device))
        pop = cls(base, saved.lora, len(saved.members))
        if {k.rsplit(".", 1)[0] for k in saved.stacks} != set(pop.multi.modules):
            raise ValueError(
                f"{directory} adapts other modules than this base model has; was it saved for {saved.base}?"
            )
        with torch.no_grad():
            for n in pop.multi.modules:
                pop.multi.A[n].copy_(saved.stacks[f"{n}.A"])
                pop.multi.Bt[n].copy_(saved.stacks[f"{n}.Bt"])
        pop.members = [Member(**{**m, "parents": tuple(m["parents"])}) for m in saved.members]
        for m in pop.members:
            pop._load_optimizer_state(m.id, saved.optimizer_states.get(m.id, {}))
        return pop
