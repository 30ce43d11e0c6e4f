"""The Unsloth backend for the population: one peft LoRA slot whose weights are swapped per member.

Why a swapped slot and not ``multilora``'s per-row routing: Unsloth's decode kernels
(``fast_forward_inference``) and fused training forward (``apply_lora_qkv`` / ``apply_lora_mlp``)
read the *active* peft adapter's weights and never call the ``nn.Linear`` modules, so forward hooks
and peft's mixed batches are bypassed. So one member runs at a time (a mixed batch is split per
member). The float32 masters stay in ``MultiLoRA``'s stacks; the slot is a compute buffer in the
base's dtype (in float32, peft would cast each layer's input to float32 and keep that copy for the
backward), its gradients summed into float32 buffers after every backward, which `grads_to` hands to
the masters. Written from Unsloth's ``models/llama.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from populora_nb.config import LoRAConfig
from populora_nb.model.base import Base
from populora_nb.model.checkpoint import PEFT_PREFIX
from populora_nb.model.multilora import MultiLoRA, checkpointing

FP32_GRAD = "populora_fp32_grad"
"""The attribute on each slot parameter holding the float32 sum of its gradients since its member was loaded."""


def _accumulate(param: Tensor) -> None:
    """After each backward: add the slot parameter's gradient to its float32 sum, and clear it."""
    if param.grad is None:
        return
    total = getattr(param, FP32_GRAD)
    grad = param.grad.float()
    setattr(param, FP32_GRAD, grad if total is None else total.add_(grad))
    param.grad = None


def _clear(*params: Tensor) -> None:
    """Drop the slot parameters' gradients and float32 sums (a new member, or handed over)."""
    for p in params:
        p.grad = None
        setattr(p, FP32_GRAD, None)


class UnslothSlot:
    def __init__(self, base: Base, lora: LoRAConfig) -> None:
        from unsloth import FastLanguageModel  # CUDA only: importing it patches transformers

        self.fast = FastLanguageModel
        self.base = base
        # Unsloth's own checkpointing acts only in train() mode, which also makes its forward drop
        # the attention mask (it assumes right padding); our batches are left-padded, so we train
        # in eval() mode and checkpoint with multilora.checkpointing instead.
        self.peft_model = shared_peft_model(base, lora, FastLanguageModel.get_peft_model)
        self.slot: dict[str, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}
        for name, mod in self.peft_model.named_modules():
            if hasattr(mod, "lora_A") and "default" in getattr(mod, "lora_A", {}):
                key = name[len(PEFT_PREFIX) :] if name.startswith(PEFT_PREFIX) else name
                key = key.replace(".base_layer", "")
                self.slot[key] = (mod.lora_A["default"].weight, mod.lora_B["default"].weight)
        with torch.no_grad():
            for pair in self.slot.values():
                for p in pair:
                    if p.dtype != base.dtype:  # the first population on this peft model
                        p.data = p.data.to(base.dtype)  # in place: the modules keep these Parameters
                    if not hasattr(p, FP32_GRAD):  # one hook per parameter, whichever population wraps it
                        setattr(p, FP32_GRAD, None)
                        p.register_post_accumulate_grad_hook(_accumulate)
        self.loaded: int | None = None

    def _load(self, multi: MultiLoRA, slot: int) -> None:
        missing = set(multi.modules) - set(self.slot)
        if missing:
            raise RuntimeError(f"Unsloth's LoRA slot lacks modules {sorted(missing)[:3]}; check lora.target_modules")
        with torch.no_grad():
            for name, (a, b) in self.slot.items():
                a.copy_(multi.A[name][slot])
                b.copy_(multi.Bt[name][slot].t())
        self.loaded = slot

    @contextlib.contextmanager
    def member(self, multi: MultiLoRA, slot: int, gradient_checkpointing: bool) -> Iterator[None]:
        """The slot holds ``slot``'s weights and records gradients; call ``grads_to`` after backward."""
        self._load(multi, slot)
        self.fast.for_training(self.peft_model)
        self.peft_model.eval()  # keep the attention mask (see __init__); LoRA dropout is 0 anyway
        for pair in self.slot.values():
            _clear(*pair)
        with checkpointing(self.base.model, gradient_checkpointing):
            yield

    @contextlib.contextmanager
    def bare(self) -> Iterator[None]:
        """The base without any adapter (peft's ``disable_adapter``), e.g. for KL reference log-probs."""
        self.fast.for_training(self.peft_model)
        self.peft_model.eval()
        with self.peft_model.disable_adapter():
            yield

    def grads_to(self, multi: MultiLoRA, slot: int) -> None:
        """Move the slot's gradients onto the member's own parameters (its optimizer's leaves)."""
        for name, (a, b) in self.slot.items():
            pa, pb = multi.slot_params[slot][name]
            ga, gb = getattr(a, FP32_GRAD), getattr(b, FP32_GRAD)
            pa.grad = None if ga is None else ga.to(pa.dtype)
            pb.grad = None if gb is None else gb.t().to(pb.dtype).contiguous()  # Bt layout
            _clear(a, b)

    @torch.no_grad()
    def generate(
        self,
        multi: MultiLoRA,
        slots: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        max_new_tokens: int,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One Unsloth ``generate`` per distinct member; same return as ``decoding.decode``."""
        self.fast.for_inference(self.peft_model)
        batch = input_ids.shape[0]
        tokens = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=input_ids.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=input_ids.device)
        stops = torch.tensor(list(stop_token_ids), device=input_ids.device)
        for slot in slots.unique().tolist():
            rows = (slots == slot).nonzero().squeeze(1)
            ids, mask = input_ids[rows], attention_mask[rows]
            keep = int(mask.sum(dim=1).max())  # drop columns that are padding in every row of the sub-batch
            ids, mask = ids[:, -keep:], mask[:, -keep:]
            self._load(multi, slot)
            # HF generate samples from the global RNG: seed it from our generator inside fork_rng.
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) if generator else 0
            with torch.random.fork_rng(devices=[input_ids.device] if input_ids.is_cuda else []):
                torch.manual_seed(seed)
                out = self.peft_model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=max_new_tokens,
                    do_sample=temperature > 0,
                    temperature=temperature if temperature > 0 else None,
                    top_p=top_p if temperature > 0 else None,
                    eos_token_id=list(stop_token_ids) or None,
                    # top_k=0: the model's generation_config may carry top_k=50, which would truncate
                    # the distribution the trainer's log-probs (logits / T, untruncated) describe.
                    top_k=0,
                    pad_token_id=pad_token_id,
                )[:, ids.shape[1] :]
            n = out.shape[1]
            is_stop = torch.isin(out, stops) if stops.numel() else torch.zeros_like(out, dtype=torch.bool)
            first = torch.where(is_stop.any(dim=1), is_stop.float().argmax(dim=1) + 1, torch.full_like(rows, n))
            tokens[rows, :n] = out
            lengths[rows] = first
        return tokens, lengths


def shared_peft_model(base: Base, lora: LoRAConfig, get_peft_model: Callable[..., Any]) -> Any:
    """The base's one peft model, wrapped on first use and kept on ``base.peft_model``; a later
    population reuses it when its LoRA shape is the same and is refused otherwise (a second
    ``get_peft_model`` would re-create the modules an earlier population's slot writes into)."""
    if base.peft_model is None:
        base.peft_model = get_peft_model(
            base.model,
            r=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=list(lora.target_modules),
            lora_dropout=0.0,
            bias="none",
            use_gradient_checkpointing=False,
            random_state=0,
        )
        return base.peft_model
    have = base.peft_model.peft_config["default"]
    theirs = (have.r, float(have.lora_alpha), set(have.target_modules))
    if theirs != (lora.rank, float(lora.alpha), set(lora.target_modules)):
        raise ValueError(
            f"this Unsloth base already holds a LoRA slot of rank {have.r}, alpha {have.lora_alpha}, modules "
            f"{sorted(have.target_modules)}; a population with lora.rank={lora.rank}, lora.alpha={lora.alpha} "
            "needs its own base (load_base) or the same lora settings"
        )
    return base.peft_model
