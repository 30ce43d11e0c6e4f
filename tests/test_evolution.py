"""Tests for populora_nb.operators (weight-space operators) and populora_nb.evolution (replacement,
lineage). Small float64 adapters, so exactness claims are checked to ~1e-10."""

from __future__ import annotations

import inspect
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib
import pytest
import torch

from populora_nb.analysis.plots import plot_lineage
from populora_nb.config import EvolutionConfig
from populora_nb.evolution import (
    PAPER_MIX,
    Lineage,
    MemberRating,
    OperatorMix,
    ancestors,
    apply_operator,
    fitness,
    inherit_rating,
    plan_replacement,
    tournament_select,
)
from populora_nb.lowrank import LoRAPair, factored_svd, relative_change, singular_values
from populora_nb.operators import (
    OPERATORS,
    arity,
    copy_parent,
    crossover_dare,
    crossover_extrapolative,
    crossover_svd_subspace,
    dare_identical_change,
    linear_0_5,
    mutation_component_masking,
    mutation_full_gaussian,
    mutation_layer_selective_gaussian,
    mutation_neftune,
    mutation_svd_structured,
    synthetic_factors,
)
from studies.evolution_simulations import simulate_lineage
from studies.retention import retention_curves

matplotlib.use("Agg")
R = 6
# plan_replacement's tournament size and grace have no defaults (a run's come from its config)
RULES = {"tournament_size": 2, "grace_steps": 0}
SHAPES = {  # (d_in, d_out)
    "layers.0.q_proj": (24, 24),
    "layers.0.k_proj": (24, 8),
    "layers.0.down_proj": (40, 24),
    "layers.1.q_proj": (24, 24),
}


def delta_weight(pair: LoRAPair) -> torch.Tensor:
    """ΔW = B @ A of one module, formed densely: the oracle the factored operators are checked against."""
    return pair.B @ pair.A


def lora_svd(pair: LoRAPair) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD (U (d_out, r), S (r,), V (d_in, r)) of ΔW = B @ A through its factors' Grams."""
    svd = factored_svd([{"m": pair}])
    U = pair.B.to(torch.float64) @ svd.u_coef[0]
    V = pair.A.mT.to(torch.float64) @ svd.v_coef[0]
    return U, svd.S[0], V


def _factors(seed: int, dtype: torch.dtype = torch.float64, r: int = R):
    return synthetic_factors(SHAPES, r, generator=torch.Generator().manual_seed(seed), dtype=dtype, b_scale=0.1)


def _child(name: str, parents, seed: int = 0):
    return OPERATORS[name](*parents[: arity(name)], generator=torch.Generator().manual_seed(seed))


def _max_delta_error(a, b) -> float:
    """max over modules of ‖ΔW_a − ΔW_b‖_F / ‖ΔW_b‖_F, formed explicitly (small shapes)."""
    return max(float((delta_weight(a[n]) - delta_weight(b[n])).norm() / delta_weight(b[n]).norm()) for n in a)


@pytest.fixture(scope="module")
def parents():
    return _factors(1), _factors(2)


# ------------------------------------------------------------------ operators: every operator


@pytest.mark.parametrize("name", list(OPERATORS))
def test_child_has_parent_shapes_and_rank(name, parents):
    child = _child(name, parents)
    assert list(child) == list(parents[0])
    for module, (A, B) in child.items():
        assert A.shape == parents[0][module].A.shape and B.shape == parents[0][module].B.shape
        assert A.dtype == torch.float64 and B.dtype == torch.float64
        rho = inspect.signature(mutation_component_masking).parameters["rho"].default
        expected = R - round(rho * R) if name == "component_masking" else R  # M3 empties round(ρr) components
        assert torch.linalg.matrix_rank(delta_weight(child[module])).item() == expected


def test_default_mutation_strengths_are_comparable():
    """At their default strengths the mutations move ΔW by comparable amounts (M3 removes whole
    components, so its step is coarser), and DARE's drop noise adds about one mutation's worth to
    the plain average of its parents. At the old defaults M4 moved 0.06, M3 0.51, DARE 1.33."""
    shapes = {f"l{i}.{m}": (128, 128) for i in range(6) for m in ("q", "v")}
    p1, p2 = (synthetic_factors(shapes, 8, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    moved = {
        name: relative_change(p1, OPERATORS[name](p1, generator=gen()))
        for name in ("svd_structured", "layer_selective_gaussian", "full_gaussian", "neftune")
    }
    assert all(0.1 <= m <= 0.3 for m in moved.values()), moved
    assert max(moved.values()) / min(moved.values()) < 2.0, moved
    assert 0.1 <= relative_change(p1, mutation_component_masking(p1, generator=gen())) <= 0.6
    dare_noise = relative_change(p1, crossover_dare(p1, p2, generator=gen())) - relative_change(p1, linear_0_5(p1, p2))
    assert 0.0 < dare_noise < 0.3, dare_noise


@pytest.mark.parametrize("name", list(OPERATORS))
def test_same_seed_same_child_and_parents_untouched(name, parents):
    before = [{n: (p.A.clone(), p.B.clone()) for n, p in parent.items()} for parent in parents]
    first, second = _child(name, parents, seed=7), _child(name, parents, seed=7)
    for module in first:
        assert torch.equal(first[module].A, second[module].A) and torch.equal(first[module].B, second[module].B)
    for parent, saved in zip(parents, before):
        for module, (A, B) in saved.items():
            assert torch.equal(parent[module].A, A) and torch.equal(parent[module].B, B)
    parent_storage = {x.untyped_storage().data_ptr() for parent in parents for pair in parent.values() for x in pair}
    assert not parent_storage & {x.untyped_storage().data_ptr() for pair in first.values() for x in pair}


@pytest.mark.parametrize("name", [n for n in OPERATORS if n not in ("copy_parent", "linear_0_5", "extrapolative")])
def test_random_operators_depend_on_the_seed(name, parents):
    a, b = _child(name, parents, seed=1), _child(name, parents, seed=2)
    assert any(not torch.equal(a[m].A, b[m].A) or not torch.equal(a[m].B, b[m].B) for m in a)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_bfloat16_factors_stay_bfloat16(name):
    low = [_factors(s, dtype=torch.bfloat16) for s in (1, 2)]
    child = _child(name, low)
    assert all(p.A.dtype == torch.bfloat16 and p.B.dtype == torch.bfloat16 for p in child.values())
    assert all(torch.isfinite(p.A.float()).all() and torch.isfinite(p.B.float()).all() for p in child.values())


# ------------------------------------------------------------------ operators: exact properties


def test_factored_svd_matches_explicit_svd(parents):
    for pair in parents[0].values():
        U, S, V = lora_svd(pair)
        dense = delta_weight(pair)
        S_ref = torch.linalg.svdvals(dense)[:R]
        assert float((S - S_ref).abs().max() / S_ref[0]) < 1e-5
        assert float(((U * S) @ V.mT - dense).norm() / dense.norm()) < 1e-5
        assert torch.allclose(U.mT @ U, torch.eye(R, dtype=U.dtype), atol=1e-10)
        assert torch.allclose(V.mT @ V, torch.eye(R, dtype=V.dtype), atol=1e-10)
    ref = {n: torch.linalg.svdvals(delta_weight(p))[:R] for n, p in parents[0].items()}
    assert all(torch.allclose(s, ref[n], rtol=1e-10) for n, s in singular_values(parents[0]).items())


def test_copy_parent_reproduces_delta_w_exactly(parents):
    child = copy_parent(parents[0])
    assert all(torch.equal(child[m].A, p.A) and torch.equal(child[m].B, p.B) for m, p in parents[0].items())


def test_linear_0_5_of_identical_parents_is_that_parent(parents):
    assert _max_delta_error(linear_0_5(parents[0], parents[0]), parents[0]) < 1e-10


def test_linear_0_5_is_the_best_rank_r_mean_not_the_factor_mean(parents):
    child = linear_0_5(*parents)
    for m in child:
        mean = (delta_weight(parents[0][m]) + delta_weight(parents[1][m])) / 2
        U, S, Vh = torch.linalg.svd(mean)
        best = (U[:, :R] * S[:R]) @ Vh[:R]  # Eckart–Young
        assert float((delta_weight(child[m]) - best).norm() / best.norm()) < 1e-10
        p1, p2 = parents[0][m], parents[1][m]
        factor_mean = delta_weight(LoRAPair((p1.A + p2.A) / 2, (p1.B + p2.B) / 2))
        assert float((factor_mean - best).norm() / best.norm()) > 0.1


def test_svd_subspace_with_k_equal_r_is_parent_1_and_k_0_is_parent_2(parents):
    gen = torch.Generator().manual_seed(0)
    assert _max_delta_error(crossover_svd_subspace(*parents, generator=gen, k=R), parents[0]) < 1e-10
    assert _max_delta_error(crossover_svd_subspace(*parents, generator=gen, k=0), parents[1]) < 1e-10
    with pytest.raises(ValueError, match="must lie in"):
        crossover_svd_subspace(*parents, generator=gen, k=R + 1)


def test_svd_subspace_takes_parent_1s_top_k_and_the_rest_of_parent_2(parents):
    child = crossover_svd_subspace(*parents, generator=torch.Generator().manual_seed(0), k=2)
    for m in child:
        U1, S1, V1 = lora_svd(parents[0][m])
        W2 = delta_weight(parents[1][m])
        rest = (torch.eye(W2.shape[0], dtype=W2.dtype) - U1[:, :2] @ U1[:, :2].mT) @ W2
        rest = rest @ (torch.eye(W2.shape[1], dtype=W2.dtype) - V1[:, :2] @ V1[:, :2].mT)  # off U_k and V_k
        U2, S2, V2h = torch.linalg.svd(rest)
        top_2, rest_r = (U1[:, :2] * S1[:2]) @ V1[:, :2].mT, (U2[:, : R - 2] * S2[: R - 2]) @ V2h[: R - 2]
        target = top_2 + rest_r
        assert float((delta_weight(child[m]) - target).norm() / target.norm()) < 1e-10
        # The two parts are orthogonal, so the child's spectrum is parent_1's top 2 and the rest's top R − 2.
        spectrum = torch.cat([S1[:2], S2[: R - 2]]).sort(descending=True).values
        assert torch.allclose(torch.linalg.svdvals(delta_weight(child[m]))[:R], spectrum, atol=1e-10)


CROSSOVERS_THAT_KEEP_A_PARENT = {  # every crossover but DARE, whose random drop moves even a self-cross
    "layer_swap": {},
    "svd_subspace": {},
    "svd_subspace_k1": {"k": 1},
    "svd_subspace_k3": {"k": 3},
    "svd_subspace_k5": {"k": R - 1},
    "extrapolative": {},
    "linear_0_5": {},
}


def _cross(case: str, parent_1, parent_2, seed: int = 0):
    name = case.split("_k")[0]
    return OPERATORS[name](
        parent_1, parent_2, generator=torch.Generator().manual_seed(seed), **CROSSOVERS_THAT_KEEP_A_PARENT[case]
    )


@pytest.mark.parametrize("case", list(CROSSOVERS_THAT_KEEP_A_PARENT))
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-8), (torch.float32, 1e-3)], ids=["f64", "f32"])
def test_crossover_of_identical_parents_is_that_parent(case, dtype, tolerance):
    parent = _factors(1, dtype=dtype)
    for seed in range(3):  # layer_swap's coins and X3's random k differ by seed
        assert _max_delta_error(_cross(case, parent, parent, seed), parent) < tolerance


@pytest.mark.parametrize("case", list(CROSSOVERS_THAT_KEEP_A_PARENT))
def test_crossover_of_near_identical_parents_stays_near_parent_1(case):
    """Parents 2% apart give a child within about that distance of parent_1. X3's first definition
    (ΔW_2's own top r − k triplets) moved this child by 0.64–1.0."""
    parent_1 = _factors(1)
    parent_2 = mutation_full_gaussian(parent_1, generator=torch.Generator().manual_seed(5), epsilon=0.015)
    apart = relative_change(parent_1, parent_2)
    assert 0.01 < apart < 0.04
    moved = relative_change(parent_1, _cross(case, parent_1, parent_2))
    assert moved < min(0.1, 1.5 * apart), (moved, apart)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.3])
def test_dare_of_identical_parents_moves_by_its_stated_expectation(p):
    shapes = {f"l{i}.{m}": (128, 128) for i in range(6) for m in ("q", "v")}
    parent = synthetic_factors(shapes, 8, generator=torch.Generator().manual_seed(0))
    moved = [
        relative_change(parent, crossover_dare(parent, parent, generator=torch.Generator().manual_seed(s), p=p))
        for s in range(3)
    ]
    assert sum(moved) / 3 == pytest.approx(dare_identical_change(p), rel=0.1)
    assert dare_identical_change(0.0) == 0.0 and dare_identical_change(0.2) == pytest.approx(0.4988, abs=1e-4)


@pytest.mark.parametrize("name", ["svd_subspace", "linear_0_5", "extrapolative"])
def test_crossover_keeps_empty_components_trainable(name, parents):
    """Parents with empty components (M3's zeroed B columns): a self-cross keeps them, and it and a
    cross where parent_2 lies inside parent_1's subspace (X3's projection of it is then empty) give
    every empty component an A row of about the parents' RMS norm, so it can regrow. Before, the
    self-crosses of linear_0_5 and X4 left those A rows at 0."""
    masked = mutation_component_masking(parents[0], generator=torch.Generator().manual_seed(0), rho=0.5)
    empties = 0
    for pair in ((masked, masked), (parents[0], masked)):
        for seed in range(3):
            child = OPERATORS[name](*pair, generator=torch.Generator().manual_seed(seed))
            for m, (A, B) in child.items():
                empty = B.norm(dim=0) == 0
                rms = float(pair[1][m].A.norm()) / R**0.5
                assert (A.norm(dim=1)[empty] > 0.5 * rms).all(), (m, A.norm(dim=1), rms)
                empties += int(empty.sum())
    assert empties >= 3 * len(SHAPES) * round(0.5 * R)  # at least the self-crosses' empty components


def test_extrapolative_follows_the_fitter_parent(parents):
    gen = torch.Generator().manual_seed(0)
    assert _max_delta_error(crossover_extrapolative(*parents, generator=gen, eta=1.0), parents[0]) < 1e-10
    assert _max_delta_error(crossover_extrapolative(*parents, generator=gen, eta=0.0), parents[1]) < 1e-10
    child = crossover_extrapolative(*parents, generator=gen, eta=1.5)
    for m in child:
        target = delta_weight(parents[1][m]) + 1.5 * (delta_weight(parents[0][m]) - delta_weight(parents[1][m]))
        U, S, Vh = torch.linalg.svd(target)
        assert torch.allclose(delta_weight(child[m]), (U[:, :R] * S[:R]) @ Vh[:R], atol=1e-10)


def test_dare_without_drops_is_linear_0_5(parents):
    child = crossover_dare(*parents, generator=torch.Generator().manual_seed(0), p=0.0)
    assert _max_delta_error(child, linear_0_5(*parents)) < 1e-10


def test_dare_drops_about_p_of_the_entries():
    ones = {"m": LoRAPair(torch.ones(8, 4000, dtype=torch.float64), torch.ones(4000, 8, dtype=torch.float64))}
    from populora_nb.operators import _dropped_stack  # the mask itself is what DARE's p means

    stacked = _dropped_stack([ones, ones], round(0.3 * 256), torch.Generator().manual_seed(0))
    for kept in stacked["m"]:
        assert kept.shape in {(16, 4000), (4000, 16)}
        assert set(kept.unique().tolist()) == {0.0, 1.0}
        assert abs(float(kept.mean()) - (1 - round(0.3 * 256) / 256)) < 0.01
    assert not torch.equal(stacked["m"].A[:8], stacked["m"].A[8:])  # each parent gets its own drops


def test_svd_mutations_with_zero_noise_keep_delta_w_and_factor_balance(parents):
    gen = torch.Generator().manual_seed(0)
    quiet = (
        mutation_svd_structured(parents[0], generator=gen, epsilon=0.0),
        mutation_component_masking(parents[0], generator=gen, rho=0.0),
    )
    for child in quiet:
        assert _max_delta_error(child, parents[0]) < 1e-10
        for m, (A, B) in child.items():  # re-factored, but with the parent's ‖B‖/‖A‖
            assert abs(float(B.norm() / A.norm()) / float(parents[0][m].B.norm() / parents[0][m].A.norm()) - 1) < 1e-8


def test_component_masking_keeps_masked_components_trainable(parents):
    child = mutation_component_masking(parents[0], generator=torch.Generator().manual_seed(0), rho=0.5)
    for A, B in child.values():
        assert (A.norm(dim=1) > 0).all()  # every A row kept: a zero row and zero column never regrow
        assert int((B.norm(dim=0) > 0).sum()) == R - round(0.5 * R)


def test_untrained_parent_gives_a_trainable_child():
    fresh = {m: LoRAPair(p.A, torch.zeros_like(p.B)) for m, p in _factors(3).items()}  # peft init: B = 0
    for name in ("svd_structured", "component_masking", "svd_subspace", "linear_0_5"):
        child = _child(name, (fresh, fresh))
        for m, (A, B) in child.items():
            assert torch.count_nonzero(B) == 0
            assert torch.allclose(A.norm(dim=1), fresh[m].A.norm() / R**0.5 * torch.ones(R, dtype=A.dtype))


@pytest.mark.parametrize(
    "mutate, levels",
    [
        (lambda p, g, e: mutation_svd_structured(p, generator=g, epsilon=e), (0.01, 0.05, 0.2)),
        (lambda p, g, e: mutation_layer_selective_gaussian(p, generator=g, epsilon=e), (0.01, 0.05, 0.2)),
        (lambda p, g, e: mutation_component_masking(p, generator=g, rho=e), (0.2, 0.5, 0.8)),
        (lambda p, g, e: mutation_full_gaussian(p, generator=g, epsilon=e), (0.01, 0.05, 0.2)),
        (lambda p, g, e: mutation_neftune(p, generator=g, alpha=e), (0.1, 0.5, 2.0)),
    ],
    ids=["M1", "M2", "M3", "M4", "M5"],
)
def test_mutation_change_grows_with_epsilon(mutate, levels, parents):
    changes = [relative_change(parents[0], mutate(parents[0], torch.Generator().manual_seed(0), e)) for e in levels]
    assert 0 < changes[0] < changes[1] < changes[2]


def test_layer_selective_gaussian_touches_only_a_fraction_of_modules(parents):
    child = mutation_layer_selective_gaussian(parents[0], generator=torch.Generator().manual_seed(0), fraction=0.5)
    changed = [m for m in child if not torch.equal(child[m].A, parents[0][m].A)]
    assert len(changed) == 2 and all(not torch.equal(child[m].B, parents[0][m].B) for m in changed)


def test_relative_change_matches_explicit_norms(parents):
    explicit = sum(float((delta_weight(parents[1][m]) - delta_weight(p)).norm() ** 2) for m, p in parents[0].items())
    base = sum(float(delta_weight(p).norm() ** 2) for p in parents[0].values())
    assert abs(relative_change(parents[0], parents[1]) - (explicit / base) ** 0.5) < 1e-9


def test_crossover_rejects_mismatched_parents(parents):
    other = synthetic_factors({"x": (4, 4)}, R, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ValueError, match="different modules"):
        linear_0_5(parents[0], other)


# ------------------------------------------------------------------ evolution: selection and replacement


def _members(per_role: int = 4):
    roles = ("teacher", "student")
    return [MemberRating(f"{role}-{i}", role, mu=20.0 + 2 * i, sigma=2.0) for role in roles for i in range(per_role)]


def test_fitness_is_conservative_skill():
    assert fitness(25.0, 25 / 3) == pytest.approx(0.0)
    assert fitness(30.0, 1.0, k=2.0) == 28.0


def test_tournament_with_everyone_picks_the_fittest():
    members = _members()[:4]
    assert tournament_select(members, random.Random(0), size=4, k=3.0).member_id == "teacher-3"


def test_plan_replaces_the_weakest_of_each_role_with_children_of_survivors():
    members = _members()
    plan = plan_replacement(members, step=10, rng=random.Random(0), num_replaced=2, **RULES)
    assert sorted((p.role, p.replaced) for p in plan) == [
        ("student", "student-0"),
        ("student", "student-1"),
        ("teacher", "teacher-0"),
        ("teacher", "teacher-1"),
    ]
    rating = {m.member_id: m for m in members}
    for p in plan:
        assert len(p.parents) == arity(p.operator) and p.operator in PAPER_MIX.weights
        replaced = ("teacher-0", "teacher-1", "student-0", "student-1")
        assert all(rating[q].role == p.role and q not in replaced for q in p.parents)
        fits = [fitness(rating[q].mu, rating[q].sigma) for q in p.parents]
        assert fits == sorted(fits, reverse=True)  # crossover parents: fitter first
    assert len({p.child for p in plan}) == 4 and all(p.step == 10 for p in plan)
    assert plan == plan_replacement(members, step=10, rng=random.Random(0), num_replaced=2, **RULES)


def test_plan_uses_only_mutations_when_one_parent_is_left():
    members = _members(per_role=2)
    for seed in range(20):
        assert all(arity(p.operator) == 1 for p in plan_replacement(members, step=5, rng=random.Random(seed), **RULES))
    with pytest.raises(ValueError, match="must be smaller"):
        plan_replacement(members, step=5, rng=random.Random(0), num_replaced=2, **RULES)


def test_grace_protects_young_children():
    members = _members()
    young = [
        MemberRating(m.member_id, m.role, m.mu, m.sigma, born=8 if m.member_id.endswith("-0") else 0) for m in members
    ]
    replaced = {
        p.replaced for p in plan_replacement(young, step=10, rng=random.Random(0), tournament_size=2, grace_steps=5)
    }
    assert replaced == {"teacher-1", "student-1"}


def test_operator_mix_validates_and_samples_in_proportion():
    with pytest.raises(ValueError, match="unknown operators"):
        OperatorMix({"svd_structurd": 1.0})
    with pytest.raises(ValueError, match="≥ 0"):
        OperatorMix({"dare": -1.0})
    mix = OperatorMix({"dare": 3.0, "full_gaussian": 1.0})
    rng = random.Random(0)
    counts = Counter(mix.sample(rng) for _ in range(4000))
    assert 0.72 < counts["dare"] / 4000 < 0.78
    assert {mix.sample(random.Random(s), max_parents=1) for s in range(50)} == {"full_gaussian"}


def test_inherit_rating():
    assert inherit_rating([(30.0, 2.0), (20.0, 3.0)]) == (25.0, 3.0)  # the parents' sigma: see newborn_fate
    assert inherit_rating([(30.0, 2.0), (20.0, 3.0)], sigma_inflation=2.0) == (25.0, 6.0)
    assert inherit_rating([(30.0, 6.0)], sigma_inflation=2.0) == (30.0, 25 / 3)  # capped at the prior σ


def test_simulated_lineage_is_a_consistent_tree():
    evolution = EvolutionConfig(every=10, replace_per_role=2, grace_steps=10)
    records = simulate_lineage(_members(), evolution, generations=5, rng=random.Random(1))
    assert len(records) == 5 * 2 * 2
    alive = {m.member_id for m in _members()}
    for step in sorted({r.step for r in records}):
        births = [r for r in records if r.step == step]
        for r in births:
            assert set(r.parents) <= alive and r.replaced in alive and r.replaced not in r.parents
        alive = (alive - {r.replaced for r in births}) | {r.child for r in births}
    last = records[-1]
    assert set(last.parents) <= ancestors(last.child, records)
    assert ancestors(last.child, records) <= {m.member_id for m in _members()} | {r.child for r in records}


def test_apply_operator_and_plot(parents):
    record = Lineage("teacher-s1-0", ("a", "b"), "linear_0_5", 1, "teacher", "c")
    child = apply_operator(record, parents, generator=torch.Generator().manual_seed(0))
    assert _max_delta_error(child, linear_0_5(*parents)) < 1e-12
    with pytest.raises(ValueError, match="takes 2 parents"):
        apply_operator(record, parents[:1], generator=torch.Generator())
    records = simulate_lineage(_members(), EvolutionConfig(every=5), generations=3, rng=random.Random(0))
    mentioned = {i for r in records for i in (r.replaced, *r.parents)} & {m.member_id for m in _members()}
    assert len(plot_lineage(records).axes[0].get_yticks()) == len(mentioned)
    ax = plot_lineage(records, founders={m.member_id: m.role for m in _members()}).axes[0]
    assert len(ax.get_yticks()) == 8
    # one arrow per parent → child edge, and each child named where it is born
    assert len(ax.texts) == sum(len(r.parents) for r in records) + len(records)
    assert {t.get_text() for t in ax.texts} - {""} == {r.child for r in records}


def test_retention_curves_call_training_once_per_operator(parents):
    seen = []

    def train_and_score(child, steps):
        seen.append(relative_change(parents[0], child))
        return [1.0 - seen[-1]] * (steps + 1)

    operators = ("copy_parent", "linear_0_5", "dare")
    curves = retention_curves(*parents, train_and_score=train_and_score, num_steps=3, operators=operators)
    assert list(curves) == ["copy_parent", "linear_0_5", "dare"] and all(len(c) == 4 for c in curves.values())
    assert curves["copy_parent"][0] == pytest.approx(1.0, abs=1e-7) and seen[1] > 0.1
    again = retention_curves(*parents, train_and_score=train_and_score, num_steps=3, operators=("dare",))
    assert again["dare"] == curves["dare"]  # per-operator seeds: independent of the other operators


@pytest.mark.slow
def test_benchmark_script_runs():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_evolution.py"
    out = subprocess.run(
        [sys.executable, str(script), "--ranks", "4", "--layers", "1", "--repeats", "1", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "| M1 svd_structured |" in out and "| linear_0_5 |" in out and "load average" in out
