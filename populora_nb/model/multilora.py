"""Batched multi-LoRA: N members' adapters on one frozen base, one forward for a mixed batch.

PopuLoRA's efficiency argument (8 adapters for ~1.3x the wall clock of one) rests on one batched
forward with each row routed to its own adapter, as punica / S-LoRA do; peft's mixed batch loops over
the adapters instead (docs/design.md, "Measured costs").

Layout. Per adapted ``nn.Linear`` the N slots' factors are two stacks, ``A (N, r, d_in)`` and
``Bt (N, r, d_out)`` (B transposed, so the slots flatten to one (N·r, d_out) matrix without a copy);
ΔW_m = (alpha / r) · Bt[m]ᵀ @ A[m]. Each slot owns leaf ``nn.Parameter`` *views* of its rows, so one
member's optimizer updates the stacks in place and never writes another slot's rows.

Routing. Forward hooks add the LoRA term to the base output only inside a ``route_*`` context;
outside one the model is the untouched base (and peft can wrap it: `find_target_modules`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


class MultiLoRA:
    """Stacked LoRA factors of ``n_slots`` members for the ``target_modules`` of one base model."""

    def __init__(
        self,
        model: nn.Module,
        target_modules: Sequence[str],
        n_slots: int,
        rank: int,
        alpha: float,
    ) -> None:
        self.model = model
        # Factors are kept in float32 (the masters); the LoRA term is computed in the base's
        # dtype (e.g. bf16 on a GPU), casting on the fly, a no-op when the two agree (CPU, fp32).
        self.compute_dtype = next(model.parameters()).dtype
        self.rank = rank
        self.alpha = alpha
        self.scale = alpha / rank
        self.modules: dict[str, nn.Linear] = find_target_modules(model, target_modules)
        # peft layers wrapping a target (base already wrapped by peft / Unsloth): their adapters are
        # switched off while a route's hooks sit on the base layers inside them.
        self._peft_layers = [m for n, m in model.named_modules() if n in self.modules and m is not self.modules[n]]
        device = next(model.parameters()).device
        self.A: dict[str, Tensor] = {}  # (N, r, d_in)
        self.Bt: dict[str, Tensor] = {}  # (N, r, d_out)
        for name, lin in self.modules.items():
            self.A[name] = torch.zeros(n_slots, rank, lin.in_features, dtype=torch.float32, device=device)
            self.Bt[name] = torch.zeros(n_slots, rank, lin.out_features, dtype=torch.float32, device=device)
        # One leaf Parameter per (slot, module, factor), a view into the stacks (see module docstring).
        self.slot_params: list[dict[str, tuple[nn.Parameter, nn.Parameter]]] = [
            {name: (nn.Parameter(self.A[name][s]), nn.Parameter(self.Bt[name][s])) for name in self.modules}
            for s in range(n_slots)
        ]
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    @property
    def n_slots(self) -> int:
        return len(self.slot_params)

    def parameters(self, slot: int) -> list[nn.Parameter]:
        """The slot's trainable leaves, A (r, d_in) and Bt (r, d_out) of every module in order."""
        return [p for pair in self.slot_params[slot].values() for p in pair]

    def nbytes(self) -> int:
        """Bytes held by the stacked factors of all slots (the views add nothing)."""
        return sum(t.numel() * t.element_size() for t in (*self.A.values(), *self.Bt.values()))

    # ---- routing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def route_slot(self, slot: int) -> Iterator[None]:
        """Every row uses ``slot``: two plain matmuls, differentiable with respect to the slot's
        parameters (added in place to the base output when no gradient is recorded)."""
        params = self.slot_params[slot]
        scale, cdt = self.scale, self.compute_dtype

        def make_hook(name: str):
            a, bt = params[name]  # (r, d_in), (r, d_out)
            a_t, bt_d = a.detach().to(cdt).t(), bt.detach().to(cdt)  # views when cdt is the factors' dtype

            def hook(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
                x = args[0]
                if torch.is_grad_enabled():  # cast inside the graph, so gradients reach the fp32 leaves
                    return out + scale * (F.linear(x, a.to(cdt)) @ bt.to(cdt))
                xa = x.reshape(-1, x.shape[-1]) @ a_t  # (B·T, r)
                out.view(-1, out.shape[-1]).addmm_(xa, bt_d, alpha=scale)
                return out

            return hook

        with self._hooks(make_hook):
            yield

    @contextlib.contextmanager
    def route_groups(self, slots: Sequence[int], also: Sequence[Sequence[int]] = ()) -> Iterator[None]:
        """Row i uses slot ``slots[i]``, each slot's rows contiguous, differentiable: the batched update.
        ``also``: row layouts of the same slots for forwards of other batch sizes inside the route (the
        shared prompt pass: one row per prompt, then per rollout); a forward takes the layout of its size.
        Two batched matmuls per module; a member's gradient sums over its own rows only."""
        runs = slot_runs(slots)
        if len(runs) == 1 and all(slot_runs(layout) == runs for layout in also):
            with self.route_slot(runs[0]):
                yield
            return
        scale, cdt = self.scale, self.compute_dtype
        device = next(iter(self.A.values())).device
        # per layout size: row i -> its member's index among the used slots (U of them)
        whiches: dict[int, Tensor] = {}
        for layout in (slots, *also):
            if slot_runs(layout) != runs:
                raise ValueError(f"route_groups: layout {list(layout)} uses other slots (or order) than {list(slots)}")
            which = torch.tensor([runs.index(s) for s in layout], device=device)
            if len(layout) in whiches and not torch.equal(whiches[len(layout)], which):
                raise ValueError(f"route_groups: two layouts of {len(layout)} rows route them differently")
            whiches[len(layout)] = which

        def make_hook(name: str):
            pairs = [self.slot_params[slot][name] for slot in runs]

            def hook(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
                x = args[0]  # (B, T, d_in)
                which = whiches[x.shape[0]]
                # each row's own factors, gathered from the used members' leaves (differentiable)
                a_rows = torch.stack([a for a, _ in pairs]).to(cdt)[which]  # (B, r, d_in)
                bt_rows = torch.stack([bt for _, bt in pairs]).to(cdt)[which]  # (B, r, d_out)
                return out.baddbmm(torch.bmm(x, a_rows.transpose(1, 2)), bt_rows, alpha=scale)  # (B, T, d_out)

            return hook

        with self._hooks(make_hook):
            yield

    @contextlib.contextmanager
    def bare(self) -> Iterator[None]:
        """The untouched base: no route, and the adapters of peft layers wrapping the targets off."""
        with peft_adapters_off(self._peft_layers):
            yield

    @contextlib.contextmanager
    def route_rows(self, slots: Tensor) -> Iterator[None]:
        """Row i uses slot ``slots[i]`` (a (B,) long tensor); inference only. With B ≤ N each row's
        factors are gathered once (at most the population's factor bytes) for ``bmm``; with more rows,
        decoding uses the masked dense form (each used slot read once, no copy) and the prefill
        gathers one module at a time."""
        device = next(iter(self.A.values())).device
        slots = slots.to(device=device, dtype=torch.long)
        if slots.numel() and bool((slots == slots[0]).all()):
            with self.route_slot(int(slots[0])):  # one member: plain matmuls
                yield
            return
        gather_once = len(slots) <= self.n_slots
        lo, hi = int(slots.min()), int(slots.max()) + 1  # the used slots' contiguous range
        # (B, (hi-lo)·r) 0/1: row i keeps the r columns of its own slot.
        cdt = self.compute_dtype
        block = torch.zeros(len(slots), hi - lo, self.rank, dtype=cdt, device=device)
        block[torch.arange(len(slots), device=device), slots - lo] = 1.0
        block = block.view(len(slots), -1)
        scale = self.scale

        def make_hook(name: str):
            a_all, bt_all = self.A[name].to(cdt), self.Bt[name].to(cdt)  # no copy when dtypes agree
            a_flat_t = a_all[lo:hi].view(-1, a_all.shape[-1]).t()  # (d_in, U·r), a view
            bt_flat = bt_all[lo:hi].view(-1, bt_all.shape[-1])  # (U·r, d_out), a view

            def gather() -> tuple[Tensor, Tensor]:  # each row's factors: (B, d_in, r), (B, r, d_out)
                return a_all.index_select(0, slots).transpose(1, 2), bt_all.index_select(0, slots)

            rows = gather() if gather_once else None

            def hook(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
                x = args[0]  # (B, T, d_in)
                if torch.is_grad_enabled() and x.requires_grad:
                    raise RuntimeError("route_rows is for inference; train one member with route_slot")
                if not gather_once and x.shape[1] == 1:  # decoding many rows: each used slot read once
                    xa = (x.reshape(x.shape[0], -1) @ a_flat_t).mul_(block)  # (B, U·r)
                    out.view(out.shape[0], -1).addmm_(xa, bt_flat, alpha=scale)
                    return out
                a_rows_t, bt_rows = rows if rows is not None else gather()
                xa = torch.bmm(x, a_rows_t)  # (B, T, r)
                return out.baddbmm_(xa, bt_rows, alpha=scale)  # (B, T, d_out)

            return hook

        with self._hooks(make_hook):
            yield

    @contextlib.contextmanager
    def _hooks(self, make_hook) -> Iterator[None]:
        if self._handles:
            raise RuntimeError("a MultiLoRA route is already active; routes do not nest")
        try:
            self._handles = [mod.register_forward_hook(make_hook(name)) for name, mod in self.modules.items()]
            with peft_adapters_off(self._peft_layers):
                yield
        finally:
            for h in self._handles:
                h.remove()
            self._handles = []


def slot_runs(slots: Sequence[int]) -> list[int]:
    """The slots of ``slots`` in order of their runs; raises ValueError when a slot's rows are not
    contiguous (`MultiLoRA.route_groups` needs them so)."""
    runs: list[int] = []
    for i, slot in enumerate(slots):
        if runs and runs[-1] == slot:
            continue
        if slot in runs:
            raise ValueError(f"route_groups needs each slot's rows contiguous; slot {slot} recurs at row {i}")
        runs.append(slot)
    return runs


def find_target_modules(model: nn.Module, target_modules: Sequence[str]) -> dict[str, nn.Linear]:
    """Linear layers whose name ends in one of ``target_modules`` (peft's suffix rule), by full name.
    A target peft (or Unsloth) already wrapped yields the ``nn.Linear`` under its ``base_layer``
    chain, under the wrapper's name: the same weights and checkpoint keys either way."""
    found: dict[str, nn.Linear] = {}
    for name, mod in model.named_modules():
        if name.rsplit(".", 1)[-1] not in target_modules:
            continue
        while not isinstance(mod, nn.Linear) and isinstance(getattr(mod, "base_layer", None), nn.Module):
            mod = mod.base_layer
        if isinstance(mod, nn.Linear):
            found[name] = mod
    if not found:
        raise ValueError(f"no nn.Linear named like {list(target_modules)} in the model; check lora target_modules")
    return found


@contextlib.contextmanager
def peft_adapters_off(layers: Sequence[nn.Module]) -> Iterator[None]:
    """peft layers' forward is their base layer's alone inside the context (else a peft layer would add
    its active adapter, e.g. the member an Unsloth slot last loaded, on top of the routed member's).
    peft's ``enable_adapters`` switch also rewrites ``requires_grad``: those flags are put back."""
    on = [layer for layer in layers if not getattr(layer, "disable_adapters", True)]
    flags = [(p, p.requires_grad) for layer in on for p in layer.parameters()]
    for layer in on:
        cast(Any, layer).enable_adapters(False)
    try:
        yield
    finally:
        for layer in on:
            cast(Any, layer).enable_adapters(True)
        for p, flag in flags:
            p.requires_grad_(flag)


# ---- activation checkpointing ------------------------------------------------------------------


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The repeated decoder blocks (the ModuleList with ``config.num_hidden_layers`` entries)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n:
            return mod
    raise ValueError("could not find the decoder layers (a ModuleList of config.num_hidden_layers blocks)")


@contextlib.contextmanager
def checkpointing(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Recompute each decoder layer in the backward pass (non-reentrant ``torch.utils.checkpoint``
    around every layer's forward, removed on exit). Not transformers' ``gradient_checkpointing_enable``:
    it only acts in ``train()`` mode, which would switch dropout on. The LoRA hooks run inside the
    recomputation, so the route must stay open until ``backward`` has finished."""
    if not enabled:
        yield
        return
    layers = list(decoder_layers(model))
    for layer in layers:
        plain = layer.forward

        def wrapped(*args, _plain=plain, **kwargs):
            return checkpoint(_plain, *args, use_reentrant=False, **kwargs)

        layer.forward = wrapped
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward
