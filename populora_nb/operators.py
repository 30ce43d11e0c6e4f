"""LoRA weight-space operators of PopuLoRA's evolution: mutations M1–M5, crossovers X1–X4, and the
two controls (copy_parent, linear_0_5).

Every operator is a pure function from one or two parents' LoRA factors to a child with the same
rank r and shapes. Inputs are never modified, every random choice takes an explicit
`torch.Generator` (on the factors' device), and the child shares no storage with its parents, so
training it never touches them.

For each module ΔW = B @ A has rank ≤ r; it is never formed. Its SVD comes from the r×r Gram
matrices of the factors (see `factored_svd`), folded into r×r coefficient matrices, so the only big
work per module is the Gram products and two (d × r)·(r × r) products. The Grams run in the
factors' precision (float32 by default) and the r×r eigen-decompositions in float64, batched over
modules. Why not float64 Grams: they cost 3–6× the time here and, measured on near-collinear
parents (the hard case: a Gram squares the condition number), moved the child's ΔW by ≤ 7e-5
relative to the exact rank-r answer, against 2e-7 for float64. The price is that singular
components below √eps·S_max (3.5e-4 in float32) are treated as empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, NamedTuple, Sequence

import torch
from torch import Tensor


class LoRAPair(NamedTuple):
    """One adapted module's factors; ΔW = B @ A (the population-wide alpha/r scale is left out)."""

    A: Tensor  # (r, d_in), the down projection
    B: Tensor  # (d_out, r), the up projection


LoRAFactors = dict[str, LoRAPair]  # module name (e.g. "model.layers.0.self_attn.q_proj") → factors



def delta_weight(pair: LoRAPair) -> Tensor:
    """ΔW = B @ A of one module. Only for small shapes (tests, plots): at 7B it is 18944×3584."""
    return pair.B @ pair.A


def lora_rank(factors: LoRAFactors) -> int:
    """The rank r shared by every module of a member."""
    ranks = {pair.A.shape[0] for pair in factors.values()}
    if len(ranks) != 1:
        raise ValueError(f"modules have different ranks {sorted(ranks)}; a member has one rank r")
    return ranks.pop()


def _check_parents(parents: Sequence[LoRAFactors]) -> list[str]:
    names = list(parents[0])
    for other in parents[1:]:
        if list(other) != names:
            raise ValueError("parents adapt different modules; crossover needs the same module names")
        for name in names:
            if other[name].A.shape != parents[0][name].A.shape or other[name].B.shape != parents[0][name].B.shape:
                raise ValueError(f"module {name}: parents' factor shapes differ; crossover needs equal shapes")
    lora_rank(parents[0])
    return names


def _work_dtype(factors: LoRAFactors) -> torch.dtype:
    # bf16/fp16 storage is multiplied in float32: their mantissas would blur the re-factored child.
    return torch.promote_types(next(iter(factors.values())).A.dtype, torch.float32)


# ---------------------------------------------------------------------------------------------
# SVD of weighted sums of ΔW, in factored form, batched over modules
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactoredSVD:
    """SVD of Σ_i w_i B_i A_i for every module (M modules, p parents, q = p·r), never forming ΔW.

    U = [B_1 … B_p] @ u_coef[m] and V = [A_1ᵀ … A_pᵀ] @ v_coef[m]; Σ w_i B_i A_i = U diag(S) Vᵀ.
    """

    u_coef: Tensor  # (M, q, q) float64
    S: Tensor  # (M, q) float64, descending
    v_coef: Tensor  # (M, q, q) float64
    gauge: Tensor  # (M,) float64, sqrt(‖B‖_F / ‖A‖_F) of the parents (geometric mean)
    a_row_rms: Tensor  # (M,) float64, RMS row norm of the parents' A


def _gram(parts: Sequence[Tensor], dim: int) -> Tensor:
    """Gram matrix (q, q), in float64, of the parts concatenated along `dim` (the rank axis).

    Built block by block (upper triangle, then mirrored): for two parents that is 3 GEMMs instead
    of the 4 a concatenated Gram computes, and no copy of the big factors."""
    xs = [x.to(torch.promote_types(x.dtype, torch.float32)) for x in parts]
    r = xs[0].shape[dim]
    gram = torch.empty(len(xs) * r, len(xs) * r, dtype=torch.float64, device=xs[0].device)
    for i, xi in enumerate(xs):
        for j in range(i, len(xs)):
            block = xi @ xs[j].mT if dim == 0 else xi.mT @ xs[j]  # (r, r)
            gram[i * r : (i + 1) * r, j * r : (j + 1) * r] = block
            gram[j * r : (j + 1) * r, i * r : (i + 1) * r] = block.mT
    return gram


def factored_svd(parents: Sequence[LoRAFactors], weights: Sequence[float] = (1.0,)) -> FactoredSVD:
    """SVD of Σ_i weights[i]·ΔW_i for every module (modules in dict order), from Gram matrices.

    With A_cat = [A_1; …; A_p], B_w = [w_1 B_1 … w_p B_p] and G_A = A_cat A_catᵀ = W Λ Wᵀ:
    A_catᵀ = Q_A R_A with R_A = Λ^½ Wᵀ; the right singular vectors of ΔW are Q_A V_c where
    V_c diag(S²) V_cᵀ = R_A (B_wᵀ B_w) R_Aᵀ, and U = ΔW V / S = B_w R_Aᵀ V_c / S. Eigen-
    decompositions stand in for QR and SVD: Cholesky fails on rank-deficient factors (a fresh LoRA's
    B = 0, or two identical parents stacked to rank 2r), and two batched eighs cost less than the
    eigh + eigh + SVD of the textbook route. Null directions get a zero pseudo-inverse, which is
    exact because they carry nothing. A Gram's rounding error ε·S_max² swamps S_i² below
    √ε·S_max, so those components are set empty (S = 0, U = 0).
    """
    names = _check_parents(parents)
    r = parents[0][names[0]].A.shape[0]
    grams_a = torch.stack([_gram([p[n].A for p in parents], dim=0) for n in names])  # (M, q, q)
    grams_b = torch.stack([_gram([p[n].B for p in parents], dim=1) for n in names])  # (M, q, q)
    rtol = max(torch.finfo(_work_dtype(parents[0])).eps, 1e-12)  # the Grams' rounding level
    w = torch.tensor(weights, dtype=torch.float64, device=grams_a.device).repeat_interleave(r)  # (q,)

    lam_a, w_a = torch.linalg.eigh(grams_a)
    keep = lam_a > rtol * lam_a.amax(dim=-1, keepdim=True)
    root_a = torch.where(keep, lam_a.clamp_min(0).sqrt(), 0.0)
    inv_root_a = torch.where(keep, 1.0 / torch.where(keep, root_a, 1.0), 0.0)
    r_a_t = w_a * root_a[..., None, :]  # R_Aᵀ = W Λ^½, (M, q, q)
    core = r_a_t.mT @ (grams_b * w[:, None] * w[None, :]) @ r_a_t  # CᵀC, symmetric PSD
    s2, v_c = torch.linalg.eigh((core + core.mT) / 2)  # ascending
    s2, v_c = s2.flip(-1), v_c.flip(-1)
    S = s2.clamp_min(0).sqrt()
    alive = S > math.sqrt(rtol) * S[..., :1]
    u_coef = w[:, None] * (r_a_t @ v_c) * torch.where(alive, 1.0 / torch.where(alive, S, 1.0), 0.0)[..., None, :]
    v_coef = (w_a * inv_root_a[..., None, :]) @ v_c
    S = torch.where(alive, S, 0.0)

    blocks = torch.arange(len(parents) * r, device=w.device) // r  # parent index of each rank slot
    norm2_a = torch.zeros(len(names), len(parents), dtype=torch.float64, device=w.device)
    norm2_b = torch.zeros_like(norm2_a)
    norm2_a.index_add_(1, blocks, grams_a.diagonal(dim1=-2, dim2=-1))
    norm2_b.index_add_(1, blocks, grams_b.diagonal(dim1=-2, dim2=-1))
    ratio = torch.where((norm2_a > 0) & (norm2_b > 0), (norm2_b / norm2_a.clamp_min(1e-300)) ** 0.25, 1.0)
    gauge = ratio.log().mean(dim=1).exp()  # geometric mean over parents of sqrt(‖B‖/‖A‖)
    a_row_rms = (norm2_a.sum(dim=1) / (len(parents) * r)).sqrt()
    return FactoredSVD(u_coef, S, v_coef, gauge, a_row_rms)


def _a_row_norms(S: Tensor, gauge: Tensor, a_row_rms: Tensor) -> Tensor:
    """Row norms (M, r) of the child's A for singular values S (M, r); gauge, a_row_rms broadcast.

    √S/gauge keeps the parents' ‖B‖/‖A‖ balance, so Adam's per-element steps move the child as they
    moved its parents. A component carrying nothing keeps an A row at the parents' RMS row norm
    (B column 0), like a fresh LoRA direction, so it can regrow: a zero row in A and a zero column
    in B would both get zero gradient forever."""
    a = torch.where(S > 0, S.sqrt() / gauge, a_row_rms.expand_as(S))  # `factored_svd` zeroed the noise
    return torch.where(a > 0, a, torch.ones_like(a))  # all-zero parents: any scale, B is 0 anyway


def _refactor(parents: Sequence[LoRAFactors], t_a: Tensor, t_b: Tensor) -> LoRAFactors:
    """Child factors A' = Σ_i t_a[m, block_i]ᵀ A_i and B' = Σ_i B_i t_b[m, block_i]; t_* (M, q, r)."""
    names = list(parents[0])
    dtype = _work_dtype(parents[0])
    r = t_a.shape[-1]
    t_a, t_b = t_a.to(dtype), t_b.to(dtype)
    child: LoRAFactors = {}
    for m, name in enumerate(names):
        new_a, new_b = None, None
        for i, parent in enumerate(parents):
            a, b = parent[name].A.to(dtype), parent[name].B.to(dtype)
            ta, tb = t_a[m, i * r : (i + 1) * r], t_b[m, i * r : (i + 1) * r]  # (r, r) each
            new_a = ta.mT @ a if new_a is None else new_a.addmm_(ta.mT, a)  # (r, d_in)
            new_b = b @ tb if new_b is None else new_b.addmm_(b, tb)  # (d_out, r)
        src = parents[0][name]
        child[name] = LoRAPair(new_a.to(src.A.dtype), new_b.to(src.B.dtype))
    return child


def lora_svd(pair: LoRAPair) -> tuple[Tensor, Tensor, Tensor]:
    """Thin SVD (U (d_out, r), S (r,), V (d_in, r)) of ΔW = B @ A through its factors' Grams."""
    svd = factored_svd([{"m": pair}])
    U = pair.B.to(torch.float64) @ svd.u_coef[0]
    V = pair.A.mT.to(torch.float64) @ svd.v_coef[0]
    return U, svd.S[0], V


def singular_values(factors: LoRAFactors) -> dict[str, Tensor]:
    """Singular values (r,) of every module's ΔW, float64, descending."""
    return dict(zip(factors, factored_svd([factors]).S))


def relative_change(parent: LoRAFactors, child: LoRAFactors) -> float:
    """‖ΔW_child − ΔW_parent‖_F / ‖ΔW_parent‖_F over all modules, from Grams (no ΔW formed).

    The squared norms are differences of Gram traces, so the result has a floor of ~1e-8 (√eps of
    float64): it measures how far an operator moved, not whether two children are bit-identical."""
    diff2, base2 = 0.0, 0.0
    for name in _check_parents([parent, child]):
        ga = _gram([parent[name].A, child[name].A], dim=0)  # [A_p; A_c][A_p; A_c]ᵀ
        gb = _gram([parent[name].B, child[name].B], dim=1)
        r = parent[name].A.shape[0]
        sign = torch.cat([torch.ones(r), -torch.ones(r)]).to(ga)
        diff2 += float((gb * sign[:, None] * sign[None, :] * ga).sum())  # tr(GB_± GA) = ‖B_p A_p − B_c A_c‖²
        base2 += float((gb[:r, :r] * ga[:r, :r]).sum())
    return math.sqrt(max(diff2, 0.0) / base2) if base2 > 0 else math.sqrt(max(diff2, 0.0))


# ---------------------------------------------------------------------------------------------
# Mutations: one parent → child of rank r
# ---------------------------------------------------------------------------------------------


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
        # Cayley transform (I − K/2)⁻¹(I + K/2): exactly orthogonal, equal to exp(K) to second order,
        # and several times cheaper than matrix_exp for a batch of 196 matrices.
        rotations.append(torch.linalg.solve(eye - half_skew, eye + half_skew))  # (M, r, r)
    a = _a_row_norms(S, svd.gauge[:, None], svd.a_row_rms[:, None])
    t_b = (svd.u_coef @ rotations[0]) * (S / a)[:, None, :]
    t_a = (svd.v_coef @ rotations[1]) * a[:, None, :]
    return _refactor([parent], t_a, t_b)


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
    parent: LoRAFactors, *, generator: torch.Generator, epsilon: float = 0.1, fraction: float = 0.25
) -> LoRAFactors:
    """M2: Gaussian noise (std ε·std(factor)) on A and B of a random `fraction` of modules (≥ 1)."""
    names = list(parent)
    count = max(1, round(fraction * len(names)))
    chosen = torch.randperm(len(names), generator=generator, device=generator.device)[:count].tolist()
    return _gaussian(parent, {names[i] for i in chosen}, epsilon, generator)


def mutation_component_masking(parent: LoRAFactors, *, generator: torch.Generator, rho: float = 0.25) -> LoRAFactors:
    """M3: zero round(ρ·r) random singular components of every module. The masked components keep
    their A row (only the B column is zeroed), so they can regrow in training like a fresh LoRA."""
    svd = factored_svd([parent])
    M, r = svd.S.shape
    drop = torch.rand((M, r), generator=generator, dtype=svd.S.dtype, device=svd.S.device).argsort(dim=-1)
    keep = (drop >= round(rho * r)).to(svd.S.dtype)  # a uniform random subset of size round(ρr) per module
    a = _a_row_norms(svd.S, svd.gauge[:, None], svd.a_row_rms[:, None])
    t_b = svd.u_coef * (svd.S * keep / a)[:, None, :]
    t_a = svd.v_coef * a[:, None, :]
    return _refactor([parent], t_a, t_b)


def mutation_full_gaussian(parent: LoRAFactors, *, generator: torch.Generator, epsilon: float = 0.05) -> LoRAFactors:
    """M4: Gaussian noise with std ε·std(factor) on every A and B."""
    return _gaussian(parent, set(parent), epsilon, generator)


def mutation_neftune(parent: LoRAFactors, *, generator: torch.Generator, alpha: float = 1.0) -> LoRAFactors:
    """M5 (optional in the paper): NEFTune-style uniform noise U(−b, b), b = α/√(r·d_in), on the down
    factor A only (NEFTune: α/√(L·d) on embeddings; here the r rows of A play the L tokens). The
    noise std is α/√r times a kaiming-initialised A's std (18% at α = 1, r = 32); B is copied."""
    child: LoRAFactors = {}
    for name, (A, B) in parent.items():
        bound = alpha / math.sqrt(A.shape[0] * A.shape[1])
        noise = torch.empty(A.shape, dtype=A.dtype, device=A.device).uniform_(-bound, bound, generator=generator)
        child[name] = LoRAPair(noise.add_(A), B.clone())
    return child


def copy_parent(parent: LoRAFactors, *, generator: torch.Generator | None = None) -> LoRAFactors:
    """Control: an exact copy (own storage). `generator` is unused; it keeps one calling convention."""
    return {name: LoRAPair(A.clone(), B.clone()) for name, (A, B) in parent.items()}


# ---------------------------------------------------------------------------------------------
# Crossovers: two parents → child of rank r. By convention parent_1 is the fitter one.
# ---------------------------------------------------------------------------------------------


def _merge_to_rank_r(parents: Sequence[LoRAFactors], weights: Sequence[float]) -> LoRAFactors:
    """Best rank-r approximation (Eckart–Young) of Σ w_i ΔW_i, re-factored."""
    svd = factored_svd(parents, weights)
    r = svd.S.shape[-1] // len(parents)
    S = svd.S[:, :r]
    a = _a_row_norms(S, svd.gauge[:, None], svd.a_row_rms[:, None])
    return _refactor(parents, svd.v_coef[..., :r] * a[:, None, :], svd.u_coef[..., :r] * (S / a)[:, None, :])


def linear_0_5(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator | None = None
) -> LoRAFactors:
    """Control: (ΔW_1 + ΔW_2)/2 re-factored to rank r. Averaging A and B separately would give
    (B_1+B_2)(A_1+A_2)/4, which is not the mean of the ΔW. `generator` is unused."""
    return _merge_to_rank_r([parent_1, parent_2], (0.5, 0.5))


def _drop(x: Tensor, threshold: int, generator: torch.Generator) -> Tensor:
    """x with each entry zeroed with probability threshold/256 (no rescale)."""
    # One random byte per entry, 8 per 64-bit draw: ~10x cheaper than a float uniform draw, which
    # keeps DARE under a second at 7B; the drop rate is therefore quantised to 1/256. The byte → {0, 1}
    # step runs as float sub + clamp, several times faster here than a compare + masked_fill.
    bits = torch.empty(math.ceil(x.numel() / 8), dtype=torch.int64, device=x.device)
    random_bytes = bits.random_(-(2**63), None, generator=generator).view(torch.uint8)[: x.numel()]
    keep = random_bytes.view(x.shape).to(torch.promote_types(x.dtype, torch.float32))
    return keep.sub_(threshold - 1).clamp_(0.0, 1.0).mul_(x)  # 1 iff byte ≥ threshold


def crossover_dare(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator, p: float = 0.5
) -> LoRAFactors:
    """X1 DARE (Yu et al. 2024): drop each factor entry of both parents with probability p, rescale
    the rest by 1/(1−p), then average the two ΔW re-factored to rank r. DARE drops up to 0.9 of a
    full fine-tune's deltas; LoRA factors are far less redundant, hence the lower default."""
    threshold = min(255, round(p * 256))
    scale = 256.0 / (256 - threshold)  # 1/(1 − p) for the quantised p
    dropped = [
        {name: LoRAPair(_drop(A, threshold, generator), _drop(B, threshold, generator))
         for name, (A, B) in parent.items()}
        for parent in (parent_1, parent_2)
    ]
    # Both factors carry the 1/(1−p) rescale, so each dropped ΔW carries scale²: folded into the
    # merge weights instead of another pass over 80M entries.
    child = _merge_to_rank_r(dropped, (0.5 * scale**2, 0.5 * scale**2))
    dtype = next(iter(parent_1.values())).A.dtype
    return {name: LoRAPair(A.to(dtype), B.to(dtype)) for name, (A, B) in child.items()}


def crossover_layer_swap(parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator) -> LoRAFactors:
    """X2: each module's (A, B) copied whole from a parent drawn by a fair coin."""
    _check_parents([parent_1, parent_2])
    coins = torch.rand(len(parent_1), generator=generator, device=generator.device).lt(0.5).tolist()
    chosen = {name: parent_1[name] if heads else parent_2[name] for name, heads in zip(parent_1, coins)}
    return {name: LoRAPair(A.clone(), B.clone()) for name, (A, B) in chosen.items()}


def crossover_svd_subspace(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator, k: int | None = None
) -> LoRAFactors:
    """X3: the top-k singular triplets of parent_1's ΔW and the top r−k of parent_2's. k = None
    draws k uniformly from 1 … r−1 for each module; k = r gives parent_1's ΔW."""
    svd_1, svd_2 = factored_svd([parent_1]), factored_svd([parent_2])
    M, r = svd_1.S.shape
    if k is None:
        ks = torch.randint(1, max(r, 2), (M, 1), generator=generator, device=generator.device).to(svd_1.S.device)
    elif 0 <= k <= r:
        ks = torch.full((M, 1), k, device=svd_1.S.device)
    else:
        raise ValueError(f"k={k} must lie in 0 … r={r}")
    slots = torch.arange(r, device=svd_1.S.device)[None, :]  # (1, r)
    from_1 = slots < ks  # child slot j < k: parent_1's j-th triplet; else parent_2's (j − k)-th
    index_2 = (slots - ks).clamp_min(0)  # (M, r)
    S = torch.where(from_1, svd_1.S, svd_2.S.gather(1, index_2))
    gauge = torch.where(from_1, svd_1.gauge[:, None], svd_2.gauge[:, None])
    a = _a_row_norms(S, gauge, torch.where(from_1, svd_1.a_row_rms[:, None], svd_2.a_row_rms[:, None]))
    columns_2 = index_2[:, None, :].expand(M, r, r)  # parent_2's coefficient column for each slot
    mask_1, mask_2 = from_1[:, None, :].to(S), (~from_1)[:, None, :].to(S)
    # Stacked over the two parents' rank blocks: rows 0…r−1 weigh parent_1's factors, r…2r−1 parent_2's.
    t_b = torch.cat([svd_1.u_coef * mask_1, svd_2.u_coef.gather(2, columns_2) * mask_2], dim=1) * (S / a)[:, None, :]
    t_a = torch.cat([svd_1.v_coef * mask_1, svd_2.v_coef.gather(2, columns_2) * mask_2], dim=1) * a[:, None, :]
    return _refactor([parent_1, parent_2], t_a, t_b)


def crossover_extrapolative(
    parent_1: LoRAFactors, parent_2: LoRAFactors, *, generator: torch.Generator | None = None, eta: float = 1.25
) -> LoRAFactors:
    """X4: P_a + η(P_b − P_a) on ΔW with P_b = parent_1 (fitter) and P_a = parent_2, re-factored to
    rank r; η > 1 steps past the fitter parent. `generator` is unused."""
    return _merge_to_rank_r([parent_1, parent_2], (eta, 1.0 - eta))


# ---------------------------------------------------------------------------------------------
# Registry and test/benchmark adapters
# ---------------------------------------------------------------------------------------------

Operator = Callable[..., LoRAFactors]  # (parent[, parent_2], *, generator, hyperparameters…)

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
    {
        "svd_structured": "M1",
        "layer_selective_gaussian": "M2",
        "component_masking": "M3",
        "full_gaussian": "M4",
        "neftune": "M5",
        "dare": "X1",
        "layer_swap": "X2",
        "svd_subspace": "X3",
        "extrapolative": "X4",
        "copy_parent": "copy_parent",
        "linear_0_5": "linear_0_5",
    }
)


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
