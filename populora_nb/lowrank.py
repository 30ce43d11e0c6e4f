"""LoRA factors and the SVD of (sums of) their ΔW = B·A in factored form: the linear algebra under
PopuLoRA's evolution operators (`populora_nb.operators`).

For each module ΔW = B @ A has rank ≤ r; it is never formed. Its SVD comes from the r×r Gram
matrices of the factors (see `gram_svd`), folded into r×r coefficient matrices, so the only big
work per module is the Gram products and two (d × r)·(r × r) products. The Grams run in the
factors' precision (float64 Grams cost several times the time for an error that stays small even on
near-collinear parents) and the r×r eigen-decompositions in float64, batched over modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor


class LoRAPair(NamedTuple):
    """One adapted module's factors; ΔW = B @ A (the population-wide alpha/r scale is left out)."""

    A: Tensor  # (r, d_in), the down projection
    B: Tensor  # (d_out, r), the up projection


LoRAFactors = dict[str, LoRAPair]  # module name (e.g. "model.layers.0.self_attn.q_proj") → factors


def lora_rank(factors: LoRAFactors) -> int:
    """The rank r shared by every module of a member."""
    ranks = {pair.A.shape[0] for pair in factors.values()}
    if len(ranks) != 1:
        raise ValueError(f"modules have different ranks {sorted(ranks)}; a member has one rank r")
    return ranks.pop()


def check_parents(parents: Sequence[LoRAFactors]) -> list[str]:
    names = list(parents[0])
    for other in parents[1:]:
        if list(other) != names:
            raise ValueError("parents adapt different modules; crossover needs the same module names")
        for name in names:
            if other[name].A.shape != parents[0][name].A.shape or other[name].B.shape != parents[0][name].B.shape:
                raise ValueError(f"module {name}: parents' factor shapes differ; crossover needs equal shapes")
    lora_rank(parents[0])
    return names


def work_dtype(factors: LoRAFactors) -> torch.dtype:
    # bf16/fp16 storage is multiplied in float32: their mantissas would blur the re-factored child.
    return torch.promote_types(next(iter(factors.values())).A.dtype, torch.float32)


# ---- SVD of weighted sums of ΔW, in factored form, batched over modules
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


def _eigh(x: Tensor) -> tuple[Tensor, Tensor]:
    """Batched symmetric eigendecomposition (ascending). On CPU numpy's LAPACK call runs the small
    (2r × 2r) batches faster than torch's (docs/performance.md)."""
    if x.device.type != "cpu":
        return torch.linalg.eigh(x)
    values, vectors = np.linalg.eigh(x.numpy())
    return torch.from_numpy(values), torch.from_numpy(vectors)


def stack_parents(parents: Sequence[LoRAFactors]) -> LoRAFactors:
    """One adapter of rank p·r per module whose ΔW is Σ_i ΔW_i: A = [A_1; …; A_p], B = [B_1 … B_p].

    One (p·r)-wide GEMM reads each factor once where p² blocked ones re-read them: the Grams and the
    re-factoring of a two-parent merge run faster on the stack, which pays for the copy."""
    names = check_parents(parents)
    if len(parents) == 1:
        return dict(parents[0])
    return {
        n: LoRAPair(torch.cat([p[n].A for p in parents]), torch.cat([p[n].B for p in parents], dim=1)) for n in names
    }


def factored_svd(parents: Sequence[LoRAFactors], weights: Sequence[float] = (1.0,)) -> FactoredSVD:
    """SVD of Σ_i weights[i]·ΔW_i for every module (modules in dict order); see `stacked_svd`."""
    if len(weights) != len(parents):
        raise ValueError(f"{len(parents)} parents need as many weights, got {len(weights)}")
    return stacked_svd(stack_parents(parents), weights)


def stacked_svd(stacked: LoRAFactors, weights: Sequence[float] = (1.0,)) -> FactoredSVD:
    """SVD of Σ_i weights[i]·B_i A_i for every module of a `stack_parents` stack of p = len(weights)
    parents (rank blocks of equal size r), from Gram matrices (`gram_svd` of A_cat = [A_1; …; A_p]
    and B_w = [w_1 B_1 … w_p B_p])."""
    n_parents = len(weights)
    r = lora_rank(stacked) // n_parents
    grams_a, grams_b = stacked_grams([stacked])
    w = torch.tensor(weights, dtype=torch.float64, device=grams_a.device).repeat_interleave(r)  # (q,)
    u_coef, S, v_coef = gram_svd(grams_a, grams_b * w[:, None] * w[None, :], dtype=work_dtype(stacked))
    gauge, a_row_rms = factor_balance(grams_a, grams_b, n_parents)
    return FactoredSVD(w[:, None] * u_coef, S, v_coef, gauge, a_row_rms)


def stacked_grams(blocks: Sequence[LoRAFactors]) -> tuple[Tensor, Tensor]:
    """Grams (M, q, q), float64, of every module's factors concatenated over `blocks` (parents or
    stacks) along the rank axis: G_A = A_cat A_catᵀ and G_B = B_catᵀ B_cat, no copy of the factors."""
    names = check_parents(blocks)
    grams_a = torch.stack([_gram([block[n].A for block in blocks], dim=0) for n in names])
    grams_b = torch.stack([_gram([block[n].B for block in blocks], dim=1) for n in names])
    return grams_a, grams_b


def gram_svd(
    grams_a: Tensor, grams_b: Tensor, *, dtype: torch.dtype, scale: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """SVD of ΔW = B A for every module from its Grams G_A = A Aᵀ and G_B = Bᵀ B (M, q, q) alone:
    (u_coef (M, q, q), S (M, q) descending, v_coef (M, q, q)), float64, with U = B u_coef and
    V = Aᵀ v_coef. B and A may be any linear combinations of stored factors, known only through
    their Grams. `dtype`: the precision the Grams were accumulated in; `scale` (M,): the size of
    the matrix they were computed from (default: this ΔW's largest singular value). Together they
    set which components count as empty: a projection of a bigger ΔW passes that ΔW's size, so
    what the projection removed, down to rounding, is not mistaken for signal.

    With G_A = W Λ Wᵀ: Aᵀ = Q_A R_A with R_A = Λ^½ Wᵀ; the right singular vectors of ΔW are Q_A V_c
    where V_c diag(S²) V_cᵀ = R_A G_B R_Aᵀ, and U = ΔW V / S = B R_Aᵀ V_c / S. Eigen-decompositions
    stand in for QR and SVD: Cholesky fails on rank-deficient factors (a fresh LoRA's B = 0, or two
    identical parents stacked to rank 2r), and two batched eighs cost less than the eigh + eigh +
    SVD of the textbook route. Null directions get a zero pseudo-inverse, which is exact because
    they carry nothing. A Gram's rounding error ε·S_max² swamps S_i² below √ε·S_max, so those
    components are set empty (S = 0, U = 0).
    """
    rtol = max(torch.finfo(dtype).eps, 1e-12)  # the Grams' rounding level
    lam_a, w_a = _eigh(grams_a)
    keep = lam_a > rtol * lam_a.amax(dim=-1, keepdim=True)
    root_a = torch.where(keep, lam_a.clamp_min(0).sqrt(), 0.0)
    inv_root_a = torch.where(keep, 1.0 / torch.where(keep, root_a, 1.0), 0.0)
    r_a_t = w_a * root_a[..., None, :]  # R_Aᵀ = W Λ^½, (M, q, q)
    core = r_a_t.mT @ grams_b @ r_a_t  # CᵀC, symmetric PSD, zero outside the kept block
    # + τ on the kept block shifts its eigenvalues and leaves its eigenvectors alone, so empty
    # components take directions A has (unit V, trainable A rows) before its null ones (V = 0).
    tau = core.diagonal(dim1=-2, dim2=-1).amax(dim=-1, keepdim=True) if scale is None else scale[:, None] ** 2
    tau = torch.where(tau > 0, tau, 1.0)  # (M, 1), ≈ S_max²: far above the rounding, 1 for an empty ΔW
    s2, v_c = _eigh((core + core.mT) / 2 + torch.diag_embed(tau * keep))  # ascending
    s2, v_c = s2.flip(-1) - tau, v_c.flip(-1)
    S = s2.clamp_min(0).sqrt()
    alive = S > math.sqrt(rtol) * (S[..., :1] if scale is None else scale[..., None])
    u_coef = (r_a_t @ v_c) * torch.where(alive, 1.0 / torch.where(alive, S, 1.0), 0.0)[..., None, :]
    v_coef = (w_a * inv_root_a[..., None, :]) @ v_c
    return u_coef, torch.where(alive, S, 0.0), v_coef


def factor_balance(grams_a: Tensor, grams_b: Tensor, n_parents: int) -> tuple[Tensor, Tensor]:
    """(gauge, a_row_rms), each (M,), of `FactoredSVD` from the Grams of n_parents stacked parents."""
    M, q = grams_a.shape[:2]
    blocks = torch.arange(q, device=grams_a.device) // (q // n_parents)  # parent index of each rank slot
    norm2_a = torch.zeros(M, n_parents, dtype=torch.float64, device=grams_a.device)
    norm2_b = torch.zeros_like(norm2_a)
    norm2_a.index_add_(1, blocks, grams_a.diagonal(dim1=-2, dim2=-1))
    norm2_b.index_add_(1, blocks, grams_b.diagonal(dim1=-2, dim2=-1))
    ratio = torch.where((norm2_a > 0) & (norm2_b > 0), (norm2_b / norm2_a.clamp_min(1e-300)) ** 0.25, 1.0)
    gauge = ratio.log().mean(dim=1).exp()  # geometric mean over parents of sqrt(‖B‖/‖A‖)
    return gauge, (norm2_a.sum(dim=1) / q).sqrt()


def a_row_norms(S: Tensor, gauge: Tensor, a_row_rms: Tensor) -> Tensor:
    """Row norms (M, r) of the child's A for singular values S (M, r); gauge, a_row_rms broadcast.

    √S/gauge keeps the parents' ‖B‖/‖A‖ balance, so Adam's per-element steps move the child as they
    moved its parents. A component carrying nothing keeps an A row at the parents' RMS row norm
    (B column 0), like a fresh LoRA direction, so it can regrow: a zero row in A and a zero column
    in B would both get zero gradient forever."""
    a = torch.where(S > 0, S.sqrt() / gauge, a_row_rms.expand_as(S))  # `factored_svd` zeroed the noise
    return torch.where(a > 0, a, torch.ones_like(a))  # all-zero parents: any scale, B is 0 anyway


def refactor(blocks: Sequence[LoRAFactors], t_a: Tensor, t_b: Tensor) -> LoRAFactors:
    """Child factors A' = Σ_i t_a[m, slots_i]ᵀ A_i and B' = Σ_i B_i t_b[m, slots_i]; t_* (M, q, r).

    `blocks` are parents or stacks of parents; block i fills the next rank(block i) of the q slots."""
    names = list(blocks[0])
    dtype = work_dtype(blocks[0])
    t_a, t_b = t_a.to(dtype), t_b.to(dtype)
    child: LoRAFactors = {}
    for m, name in enumerate(names):
        new_a, new_b, start = None, None, 0
        for block in blocks:
            a, b = block[name].A.to(dtype), block[name].B.to(dtype)
            stop = start + a.shape[0]
            ta, tb = t_a[m, start:stop], t_b[m, start:stop]  # (rank of the block, r) each
            new_a = ta.mT @ a if new_a is None else new_a.addmm_(ta.mT, a)  # (r, d_in)
            new_b = b @ tb if new_b is None else new_b.addmm_(b, tb)  # (d_out, r)
            start = stop
        src = blocks[0][name]
        assert new_a is not None and new_b is not None  # every module has at least one block
        child[name] = LoRAPair(new_a.to(src.A.dtype), new_b.to(src.B.dtype))
    return child


def singular_values(factors: LoRAFactors) -> dict[str, Tensor]:
    """Singular values (r,) of every module's ΔW, float64, descending."""
    return dict(zip(factors, factored_svd([factors]).S))


def relative_change(parent: LoRAFactors, child: LoRAFactors) -> float:
    """‖ΔW_child − ΔW_parent‖_F / ‖ΔW_parent‖_F over all modules, from Grams (no ΔW formed).

    The squared norms are differences of Gram traces in the factors' precision, so the result has a
    floor of about √eps (~2e-4 for float32): it measures how far an operator moved, not bit-identity."""
    diff2, base2 = 0.0, 0.0
    for name in check_parents([parent, child]):
        ga = _gram([parent[name].A, child[name].A], dim=0)  # [A_p; A_c][A_p; A_c]ᵀ
        gb = _gram([parent[name].B, child[name].B], dim=1)
        r = parent[name].A.shape[0]
        sign = torch.cat([torch.ones(r), -torch.ones(r)]).to(ga)
        diff2 += float((gb * sign[:, None] * sign[None, :] * ga).sum())  # tr(GB_± GA) = ‖B_p A_p − B_c A_c‖²
        base2 += float((gb[:r, :r] * ga[:r, :r]).sum())
    return math.sqrt(max(diff2, 0.0) / base2) if base2 > 0 else math.sqrt(max(diff2, 0.0))
