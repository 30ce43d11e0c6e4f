"""LoRA weight-space operators of PopuLoRA's evolution: mutations M1–M5, crossovers X1–X4, and the
two controls (copy_parent, linear_0_5).

Every operator is a pure function from one or two parents' LoRA factors to a child with the same
rank r and shapes. Inputs are never modified, every random choice takes an explicit
`torch.Generator` (on the factors' device), and the child shares no storage with its parents, so
training it never touches them. The SVD-based ones work on the factors through `populora_nb.lowrank`
and never form ΔW.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import torch
from torch import Tensor

from populora_nb.lowrank import (
    LoRAFactors,
    LoRAPair,
    a_row_norms,
    check_parents,
    factor_balance,
    factored_svd,
    gram_svd,
    refactor,
    stack_parents,
    stacked_grams,
    stacked_svd,
    work_dtype,
)


# ---- Mutations: one parent → child of rank r
def _randn(shape: Sequence[int], generator: torch.Generator, like: Tensor) -> Tensor:
    return torch.randn(tuple(shape), generator=generator, dtype=like.dtype, device=like.device)


def mutation_svd_structured(
    parent: LoRAFactors, *, generator: torch.Generator, epsilon: float = 0.1, rotation_scale: float = 1.0
) -> LoRAFactors:
    """M1: multiplicative log-normal noise S·exp(εz) on every singular value and a random rotation
    ≈ exp(ε·rotation_scale·K) of the singular vectors inside the adapter's r-dimensional row and
    column spaces (K skew-symmetric, scaled by 1/√r so each singular vector moves by about ε; U and
    V get independent rotations). New directions outside those spaces come from M2, M4 and M5."""
    svd = factored_svd([parent])
    M, r = svd.S.shape
    S = svd.S * torch.exp(epsilon * _randn((M, r), generator, svd.S))
    rotations = []
    eye = torch.eye(r, dtype=svd.S.dtype, device=svd.S.device)
    alive = (svd.S > 0).to(svd.S.dtype)
    for _ in range(2):
        g = _randn((M, r, r), generator, svd.S)
        # Only non-empty components rotate: an empty one's U column is 0 and would drain the others.
        skew = (g - g.mT) * alive[:, :, None] * alive[:, None, :] / math.sqrt(2 * r)  # entries ~ N(0, 1/r)
        half_skew = epsilon * rotation_scale * skew / 2
        # Cayley transform (I − K/2)⁻¹(I + K/2): exactly orthogonal, exp(K) to second order, cheaper than matrix_exp.
        rotations.append(torch.linalg.solve(eye - half_skew, eye + half_skew))  # (M, r, r)
    a = a_row_norms(S, svd.gauge[:, None], svd.a_row_rms[:, None])
    t_b = (svd.u_coef @ rotations[0]) * (S / a)[:, None, :]
    t_a = (svd.v_coef @ rotations[1]) * a[:, None, :]
    return refactor([parent], t_a, t_b)


def _gaussian(parent: LoRAFactors, names: set[str], epsilon: float, generator: torch.Generator) -> LoRAFactors:
    child: LoRAFactors = {}
    for name, (A, B) in parent.items():
        if name not in names:
            child[name] = LoRAPair(A.clone(), B.clone())
            continue
        # Noise scaled to each factor's own std: A (kaiming init) and B (grown from 0) differ by orders.
        noisy = [
            torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device).mul_(epsilon * x.std()).add_(x)
            for x in (A, B)
        ]
        child[name] = LoRAPair(*noisy)
    return child


def mutation_layer_selective_gaussian(
    parent: LoRAFactors, *, generator: torch.Generator, epsilon: float = 0.25, fraction: float = 0.25
) -> LoRAFactors:
    """M2: Gaussian noise (std ε·std(factor)) on A and B of a random `fraction` of modules (≥ 1)."""
    names = list(parent)
    count = max(1, round(fraction * len(names)))
    chosen = torch.randperm(len(names), generator=generator, device=generator.device)[:count].tolist()
    return _gaussian(parent, {names[i] for i in chosen}, epsilon, generator)


def mutation_component_masking(parent: LoRAFactors, *, generator: torch.Generator, rho: float = 0.125) -> LoRAFactors:
    """M3: zero round(ρ·r) random singular components of every module. The masked components keep
    their A row (only the B column is zeroed), so they can regrow in training like a fresh LoRA."""
    svd = factored_svd([parent])
    M, r = svd.S.shape
    drop = torch.rand((M, r), generator=generator, dtype=svd.S.dtype, device=svd.S.device).argsort(dim=-1)
    keep = (drop >= round(rho * r)).to(svd.S.dtype)  # a uniform random subset of size round(ρr) per module
    a = a_row_norms(svd.S, svd.gauge[:, None], svd.a_row_rms[:, None])
    t_b = svd.u_coef * (svd.S * keep / a)[:, None, :]
    t_a = svd.v_coef * a[:, None, :]
    return refactor([parent], t_a, t_b)


def mutation_full_gaussian(parent: LoRAFactors, *, generator: torch.Generator, epsilon: float = 0.15) -> LoRAFactors:
    """M4: Gaussian noise with std ε·std(factor) on every A and B."""
    return _gaussian(parent, set(parent), epsilon, generator)


def mutation_neftune(parent: LoRAFactors, *, generator: torch.Generator, alpha: float = 0.5) -> LoRAFactors:
    """M5 (optional in the paper): NEFTune-style uniform noise U(−b, b), b = α/√(r·d_in), on the down
    factor A only (NEFTune: α/√(L·d) on embeddings; here the r rows of A play the L tokens); B is copied."""
    child: LoRAFactors = {}
    for name, (A, B) in parent.items():
        bound = alpha / math.sqrt(A.shape[0] * A.shape[1])
        noise = torch.empty(A.shape, dtype=A.dtype, device=A.device).uniform_(-bound, bound, generator=generator)
        child[name] = LoRAPair(noise.add_(A), B.clone())
    return child


def copy_parent(parent: LoRAFactors, *, generator: torch.Generator | None = None) -> LoRAFactors:
    """Control: an exact copy (own storage). `generator` is unused; it keeps one calling convention."""
    return {name: LoRAPair(A.clone(), B.clone()) for name, (A, B) in parent.items()}


# ---- Crossovers: two parents → child of rank r. By convention parent_1 is the fitter one.
def _merge_to_rank_r(stacked: LoRAFactors, weights: Sequence[float]) -> LoRAFactors:
    """Best rank-r approximation (Eckart–Young) of Σ w_i ΔW_i of a `stack_parents` stack, re-factored;
    all modules at once, so the r×r work runs batched."""
    svd = stacked_svd(stacked, weights)
    r = svd.S.shape[-1] // len(weights)
    S = svd.S[:, :r]
    a = a_row_norms(S, svd.gauge[:, None], svd.a_row_rms[:, None])
    return refactor([stacked], svd.v_coef[..., :r] * a[:, None, :], svd.u_coef[..., :r] * (S / a)[:, None, :])


def linear_0_5(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator | None = None
) -> LoRAFactors:
    """Control: (ΔW_1 + ΔW_2)/2 re-factored to rank r. Averaging A and B separately would give
    (B_1+B_2)(A_1+A_2)/4, which is not the mean of the ΔW. `generator` is unused."""
    return _merge_to_rank_r(stack_parents([parent_1, parent_2]), (0.5, 0.5))


def _keep_mask(shape: Sequence[int], threshold: int, generator: torch.Generator, like: Tensor) -> Tensor:
    """A {0, 1} mask of `shape` in `like`'s working dtype, each entry 0 with probability threshold/256."""
    # One random byte per entry (8 per 64-bit draw), far cheaper than a float draw at 7B: the drop
    # rate is quantised to 1/256. Float sub + clamp is faster here than compare + masked_fill.
    numel = math.prod(shape)
    bits = torch.empty(math.ceil(numel / 8), dtype=torch.int64, device=like.device)
    random_bytes = bits.random_(-(2**63), None, generator=generator).view(torch.uint8)[:numel]
    mask = random_bytes.view(tuple(shape)).to(torch.promote_types(like.dtype, torch.float32))
    return mask.sub_(threshold - 1).clamp_(0.0, 1.0)  # 1 iff byte ≥ threshold


def _dropped_stack(parents: Sequence[LoRAFactors], threshold: int, generator: torch.Generator) -> LoRAFactors:
    """`stack_parents` of the parents with DARE's drop applied (no rescale), one mask per stacked factor."""
    stacked: LoRAFactors = {}
    for name in check_parents(parents):
        (r, d_in), d_out = parents[0][name].A.shape, parents[0][name].B.shape[0]
        A = _keep_mask((len(parents) * r, d_in), threshold, generator, parents[0][name].A)
        B = _keep_mask((d_out, len(parents) * r), threshold, generator, parents[0][name].B)
        for i, parent in enumerate(parents):
            A[i * r : (i + 1) * r].mul_(parent[name].A)
            B[:, i * r : (i + 1) * r].mul_(parent[name].B)
        stacked[name] = LoRAPair(A, B)
    return stacked


def crossover_dare(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator, p: float = 0.2
) -> LoRAFactors:
    """X1 DARE (Yu et al. 2024): drop each factor entry of both parents with probability p, rescale
    the rest by 1/(1−p), then average the two ΔW re-factored to rank r. DARE drops up to 0.9 of a
    full fine-tune's deltas; LoRA factors are far less redundant, hence the lower default.

    The only crossover that moves identical parents: by drop noise of expected relative size
    `dare_identical_change(p)` ≈ √(p/(1−p)); for unrelated parents it adds to their mix in quadrature."""
    threshold = min(255, round(p * 256))
    scale = 256.0 / (256 - threshold)  # 1/(1 − p) for the quantised p
    # Both factors carry the 1/(1−p) rescale, so each dropped ΔW carries scale²: folded into the merge weights.
    child = _merge_to_rank_r(_dropped_stack([parent_1, parent_2], threshold, generator), (0.5 * scale**2,) * 2)
    dtype = next(iter(parent_1.values())).A.dtype
    return {name: LoRAPair(A.to(dtype), B.to(dtype)) for name, (A, B) in child.items()}


def dare_identical_change(p: float = 0.2) -> float:
    """Expected `relative_change` of `crossover_dare`'s child of two identical parents, √(q/(1−q))
    for p quantised to q = round(256p)/256: to first order each factor's drop adds squared norm
    q/(1−q)·‖ΔW‖² (rows of A orthogonal, as in a re-factored child), the two parents' independent
    drops average to half of the sum, and the rank-r truncation removes only the drop-on-drop term."""
    q = min(255, round(p * 256)) / 256
    return math.sqrt(q / (1 - q))


def crossover_layer_swap(parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator) -> LoRAFactors:
    """X2: each module's (A, B) copied whole from a parent drawn by a fair coin."""
    check_parents([parent_1, parent_2])
    coins = torch.rand(len(parent_1), generator=generator, device=generator.device).lt(0.5).tolist()
    return copy_parent({name: parent_1[name] if heads else parent_2[name] for name, heads in zip(parent_1, coins)})


def crossover_svd_subspace(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator, k: int | None = None
) -> LoRAFactors:
    """X3: the top-k singular triplets of parent_1's ΔW_1 and the rest of parent_2's subspace: the
    top r−k triplets of ΔW_2 projected off parent_1's top-k singular subspaces, (I − U_kU_kᵀ) ΔW_2
    (I − V_kV_kᵀ). k = None draws k uniformly from 1 … r−1 for each module; k = r gives ΔW_1 and
    k = 0 gives ΔW_2. The two parts are orthogonal on both sides, so they are the child's SVD, and
    identical parents give the parent back: the projection leaves exactly its trailing r−k triplets.

    Why the projection: ΔW_2's own top r−k triplets would repeat parent_1's directions (identical
    parents would move), and ΔW_2's triplets k … r−1 depend on an unstable split where singular
    values lie close; the projection depends on neither."""
    grams_a, grams_b = stacked_grams([parent_1, parent_2])  # (M, 2r, 2r): blocks [11 12; 21 22]
    M, r = grams_a.shape[0], grams_a.shape[-1] // 2
    dtype, device = work_dtype(parent_1), grams_a.device
    if k is None:
        ks = torch.randint(1, max(r, 2), (M, 1), generator=generator, device=generator.device).to(device)
    elif 0 <= k <= r:
        ks = torch.full((M, 1), k, device=device)
    else:
        raise ValueError(f"k={k} must lie in 0 … r={r}")
    slots = torch.arange(r, device=device)[None, :]  # (1, r)
    from_1 = slots < ks  # child slot j < k: parent_1's j-th triplet; else the projection's (j − k)-th
    one, two = slice(0, r), slice(r, 2 * r)
    u_1, S_1, v_1 = gram_svd(grams_a[:, one, one], grams_b[:, one, one], dtype=dtype)  # U_1 = B_1 u_1, V_1 = A_1ᵀ v_1
    u_k, v_k = u_1 * from_1[:, None, :], v_1 * from_1[:, None, :]  # parent_1's top-k columns, (M, r, r)
    # In the coordinates of the stack [B_1 B_2], [A_1; A_2] (rows 0 … r−1 weigh parent_1's factors,
    # r … 2r−1 parent_2's): (I − U_kU_kᵀ) B_2 = [B_1 B_2] c_b and A_2 (I − V_kV_kᵀ) = c_aᵀ [A_1; A_2].
    eye = torch.eye(r, dtype=torch.float64, device=device).expand(M, r, r)
    c_b = torch.cat([-u_k @ (u_k.mT @ grams_b[:, one, two]), eye], dim=1)  # (M, 2r, r)
    c_a = torch.cat([-v_k @ (v_k.mT @ grams_a[:, one, two]), eye], dim=1)
    # Emptiness judged against ‖ΔW_2‖_F: what the projection removed is rounding, not signal.
    size_2 = (grams_a[:, two, two] * grams_b[:, two, two]).sum(dim=(-2, -1)).clamp_min(0).sqrt()  # (M,)
    u_p, S_p, v_p = gram_svd(c_a.mT @ grams_a @ c_a, c_b.mT @ grams_b @ c_b, dtype=dtype, scale=size_2)
    # An empty slot of the projection (ΔW_2 has fewer than r−k directions outside parent_1's) takes
    # parent_2's own j-th right singular vector as its A row: the projected A_2 can be rank-deficient
    # there, and a direction it lacks would give a zero, untrainable A row.
    _, _, v_2 = gram_svd(grams_a[:, two, two], grams_b[:, two, two], dtype=dtype)
    index_p = (slots - ks).clamp_min(0)  # (M, r): the projection's triplet for each slot
    columns_p = index_p[:, None, :].expand(M, 2 * r, r)
    S = torch.where(from_1, S_1, S_p.gather(1, index_p))
    pad = torch.zeros_like(u_1)
    u_child = torch.where(from_1[:, None, :], torch.cat([u_1, pad], dim=1), (c_b @ u_p).gather(2, columns_p))
    v_proj = torch.where((S > 0)[:, None, :], (c_a @ v_p).gather(2, columns_p), torch.cat([pad, v_2], dim=1))
    v_child = torch.where(from_1[:, None, :], torch.cat([v_1, pad], dim=1), v_proj)
    gauge_1, rms_1 = factor_balance(grams_a[:, one, one], grams_b[:, one, one], 1)
    gauge_2, rms_2 = factor_balance(grams_a[:, two, two], grams_b[:, two, two], 1)
    gauge = torch.where(from_1, gauge_1[:, None], gauge_2[:, None])
    a = a_row_norms(S, gauge, torch.where(from_1, rms_1[:, None], rms_2[:, None]))
    return refactor([parent_1, parent_2], v_child * a[:, None, :], u_child * (S / a)[:, None, :])


def crossover_extrapolative(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator | None = None, eta: float = 1.25
) -> LoRAFactors:
    """X4: P_a + η(P_b − P_a) on ΔW with P_b = parent_1 (fitter) and P_a = parent_2, re-factored to
    rank r; η > 1 steps past the fitter parent. `generator` is unused."""
    return _merge_to_rank_r(stack_parents([parent_1, parent_2]), (eta, 1.0 - eta))


# ---- Registry and test/benchmark adapters
Operator = Callable[..., LoRAFactors]  # (parent[, parent_2], *, generator, hyperparameters…)

# Default strengths are chosen so every mutation moves ΔW by a comparable `relative_change` (~0.18
# on `synthetic_factors`; smaller ones are copies in practice). M3 moves more: one whole singular
# component is its smallest step. Crossovers move by about the distance between the parents.
MUTATIONS: Mapping[str, Operator] = MappingProxyType(
    {
        "svd_structured": mutation_svd_structured,  # M1
        "layer_selective_gaussian": mutation_layer_selective_gaussian,  # M2
        "component_masking": mutation_component_masking,  # M3
        "full_gaussian": mutation_full_gaussian,  # M4
        "neftune": mutation_neftune,  # M5
        "copy_parent": copy_parent,  # control
    }
)
CROSSOVERS: Mapping[str, Operator] = MappingProxyType(
    {
        "dare": crossover_dare,  # X1
        "layer_swap": crossover_layer_swap,  # X2
        "svd_subspace": crossover_svd_subspace,  # X3
        "extrapolative": crossover_extrapolative,  # X4
        "linear_0_5": linear_0_5,  # control
    }
)
OPERATORS: Mapping[str, Operator] = MappingProxyType({**MUTATIONS, **CROSSOVERS})
CONTROLS = frozenset({"copy_parent", "linear_0_5"})
PAPER_IDS: Mapping[str, str] = MappingProxyType(
    {name: f"M{i}" for i, name in enumerate(MUTATIONS, 1)}
    | {name: f"X{i}" for i, name in enumerate(CROSSOVERS, 1)}
    | {name: name for name in CONTROLS}
)
"""Each operator's id in the paper (M1–M5, X1–X4: registry order); a control is its own name."""


def arity(operator: str) -> int:
    """How many parents the named operator takes (1 or 2)."""
    if operator not in OPERATORS:
        raise KeyError(f"unknown operator {operator!r}; choose from {sorted(OPERATORS)}")
    return 1 if operator in MUTATIONS else 2


def synthetic_factors(
    shapes: Mapping[str, tuple[int, int]],
    r: int,
    *,
    generator: torch.Generator,
    b_scale: float = 1e-2,
    decay: float = 0.9,
    dtype: torch.dtype = torch.float32,
) -> LoRAFactors:
    """Trained-looking LoRA factors for tests, plots and benchmarks: A like peft's kaiming-uniform
    init (U(±1/√d_in)), B Gaussian with column scales b_scale·decay^j so ΔW's spectrum decays.
    shapes: module name → (d_in, d_out)."""
    factors: LoRAFactors = {}
    column_scale = b_scale * decay ** torch.arange(r, dtype=dtype)
    for name, (d_in, d_out) in shapes.items():
        A = (torch.rand((r, d_in), generator=generator, dtype=dtype) * 2 - 1) / math.sqrt(d_in)
        B = torch.randn((d_out, r), generator=generator, dtype=dtype) * column_scale
        factors[name] = LoRAPair(A, B)
    return factors
