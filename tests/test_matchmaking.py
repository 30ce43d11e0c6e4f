"""TrueSkill ratings, PFSP pairing and the solve-rate matrix."""

import math
import random
from collections import Counter

import numpy as np
import pytest
import trueskill

from populora_nb.matchmaking import (
    Match,
    Rating,
    initial_ratings,
    make_trueskill,
    match_winner,
    pfsp_pairs,
    pfsp_weights,
    round_robin_pairs,
    solve_rate_matrix,
    update_ratings,
    win_probability,
)

# Chi-square critical value, 4 degrees of freedom, p = 0.001.
CHI2_CRIT_DF4 = 18.467


@pytest.fixture
def env():
    return make_trueskill()


# ---------------------------------------------------------------- win probability


def test_win_probability_formula(env):
    a, b = Rating(30.0, 2.0), Rating(25.0, 3.0)
    p = win_probability(a, b, env)
    expected = 0.5 * (1 + math.erf((5.0 / math.sqrt(2 * env.beta**2 + 4 + 9)) / math.sqrt(2)))
    assert p == pytest.approx(expected, abs=1e-12)
    assert p + win_probability(b, a, env) == pytest.approx(1.0)
    assert win_probability(a, a, env) == pytest.approx(0.5)
    # A mean lead of beta between certain ratings wins Φ(1/√2) ≈ 76.0% (sublee/trueskill#11).
    certain = win_probability(Rating(25.0 + env.beta, 0.0), Rating(25.0, 0.0), env)
    assert certain == pytest.approx(0.76025, abs=1e-5)


def test_make_trueskill_leaves_the_global_environment_alone():
    before = trueskill.global_env()
    env = make_trueskill(mu=0.0, sigma=1.0, beta=0.5)
    assert trueskill.global_env() is before and before.mu == 25.0
    assert env.mu == 0.0 and env.draw_probability == 0.0
    assert initial_ratings(["a", "b"], env) == {"a": Rating(0.0, 1.0), "b": Rating(0.0, 1.0)}


# ---------------------------------------------------------------- rating updates


def test_student_win_and_teacher_win_move_mu_in_the_right_directions(env):
    r0 = initial_ratings(["T", "S"], env)
    student_won = update_ratings(r0, [Match("T", "S", valid=True, rho=0.75)], env)
    assert student_won["S"].mu > r0["S"].mu and student_won["T"].mu < r0["T"].mu
    teacher_won = update_ratings(r0, [Match("T", "S", valid=True, rho=0.25)], env)
    assert teacher_won["S"].mu < r0["S"].mu and teacher_won["T"].mu > r0["T"].mu
    for r in (student_won, teacher_won):
        assert r["S"].sigma < r0["S"].sigma and r["T"].sigma < r0["T"].sigma
    assert r0 == initial_ratings(["T", "S"], env)  # input not modified


def test_threshold_is_inclusive_for_the_student(env):
    assert match_winner(Match("T", "S", True, 0.5), threshold=0.5) == "student"
    assert match_winner(Match("T", "S", True, 0.49), threshold=0.5) == "teacher"
    assert match_winner(Match("T", "S", True, 0.25), threshold=0.25) == "student"


def test_invalid_tasks_counted_or_skipped(env):
    r0 = initial_ratings(["T", "S", "U"], env)
    invalid = [Match("T", "S", valid=False)]
    counted = update_ratings(r0, invalid, env, count_invalid=True)
    assert counted["T"].mu < r0["T"].mu and counted["S"].mu > r0["S"].mu
    skipped = update_ratings(r0, invalid, env, count_invalid=False)
    assert skipped == r0
    assert counted["U"] == r0["U"]  # bystanders untouched


def test_matches_apply_sequentially_in_the_given_order(env):
    r0 = initial_ratings(["T1", "T2", "S"], env)
    matches = [
        Match("T1", "S", True, 1.0),
        Match("T2", "S", True, 0.0),
        Match("T1", "S", True, 0.0),
    ]
    got = update_ratings(r0, matches, env)
    t1, t2, s = (env.create_rating(r0[m].mu, r0[m].sigma) for m in ("T1", "T2", "S"))
    s, t1 = trueskill.rate_1vs1(s, t1, env=env)
    t2, s = trueskill.rate_1vs1(t2, s, env=env)
    t1, s = trueskill.rate_1vs1(t1, s, env=env)
    assert got["T1"] == Rating(t1.mu, t1.sigma)
    assert got["T2"] == Rating(t2.mu, t2.sigma)
    assert got["S"] == Rating(s.mu, s.sigma)
    assert update_ratings(r0, matches[::-1], env)["S"] != got["S"]  # order matters


def test_update_rejects_unknown_members_and_bad_matches(env):
    r0 = initial_ratings(["T", "S"], env)
    with pytest.raises(KeyError, match="no rating"):
        update_ratings(r0, [Match("T", "X", True, 0.5)], env)
    with pytest.raises(ValueError, match="needs rho"):
        Match("T", "S", valid=True)
    with pytest.raises(ValueError, match="itself"):
        update_ratings(r0, [Match("T", "T", True, 0.5)], env)


# ---------------------------------------------------------------- PFSP


STUDENT_RATINGS = {
    "s0": Rating(15.0, 2.0),
    "s1": Rating(22.0, 2.0),
    "s2": Rating(25.0, 2.0),
    "s3": Rating(30.0, 2.0),
    "s4": Rating(40.0, 2.0),
}
TEACHER = Rating(25.0, 2.0)


def test_pfsp_var_prefers_balanced_and_hard_prefers_stronger_students(env):
    students = list(STUDENT_RATINGS.values())
    var = pfsp_weights(TEACHER, students, env, weighting="var", floor=0.0)
    hard = pfsp_weights(TEACHER, students, env, weighting="hard", gamma=2.0, floor=0.0)
    assert sum(var) == pytest.approx(1.0) and sum(hard) == pytest.approx(1.0)
    assert max(range(5), key=var.__getitem__) == 2  # the equal-rated student
    assert hard == sorted(hard)  # stronger students, lower p, more weight
    p = [win_probability(TEACHER, s, env) for s in students]
    f = [q * (1 - q) for q in p]
    assert var == pytest.approx([x / sum(f) for x in f])


def test_pfsp_floor_mixes_in_uniform(env):
    students = list(STUDENT_RATINGS.values())
    shaped = pfsp_weights(TEACHER, students, env, floor=0.0)
    mixed = pfsp_weights(TEACHER, students, env, floor=0.2)
    assert mixed == pytest.approx([0.8 * w + 0.2 / 5 for w in shaped])
    assert min(mixed) >= 0.2 / 5
    assert pfsp_weights(TEACHER, students, env, floor=1.0) == pytest.approx([0.2] * 5)
    # Every f(p) = 0 (certain ratings, far apart): fall back to uniform instead of dividing by 0.
    certain = [Rating(-1e6, 0.0), Rating(-1e6, 0.0)]
    assert pfsp_weights(Rating(1e6, 0.0), certain, env, floor=0.0) == [0.5, 0.5]


def test_pfsp_pairs_follow_the_weights(env):
    ratings = {"t0": TEACHER, **STUDENT_RATINGS}
    students = list(STUDENT_RATINGS)
    weights = pfsp_weights(TEACHER, list(STUDENT_RATINGS.values()), env, floor=0.1)
    rng = random.Random(1234)
    n = 4000
    draws = [pfsp_pairs(["t0"], students, ratings, env, rng, floor=0.1)[0] for _ in range(n)]
    counts = Counter(s for _, s in draws)
    observed = np.array([counts[s] for s in students], dtype=float)
    chi2 = float(((observed - n * np.array(weights)) ** 2 / (n * np.array(weights))).sum())
    assert chi2 < CHI2_CRIT_DF4
    # The check has teeth: the same draws are far from uniform.
    chi2_uniform = float(((observed - n / 5) ** 2 / (n / 5)).sum())
    assert chi2_uniform > 10 * CHI2_CRIT_DF4


def test_pfsp_pairs_are_seeded_and_one_per_teacher(env):
    ratings = {"t0": TEACHER, "t1": Rating(35.0, 3.0), "t2": Rating(18.0, 5.0), **STUDENT_RATINGS}
    teachers, students = ["t0", "t1", "t2"], list(STUDENT_RATINGS)

    def draw(seed):
        rng = random.Random(seed)
        return [pfsp_pairs(teachers, students, ratings, env, rng) for _ in range(20)]

    a, b = draw(7), draw(7)
    assert a == b
    assert draw(8) != a
    for step in a:
        assert [t for t, _ in step] == teachers
        assert all(s in students for _, s in step)


def test_round_robin_covers_every_pair_over_n_steps():
    teachers, students = ["t0", "t1", "t2", "t3"], ["s0", "s1", "s2", "s3"]
    seen = [pair for step in range(4) for pair in round_robin_pairs(teachers, students, step)]
    assert sorted(seen) == sorted((t, s) for t in teachers for s in students)
    assert round_robin_pairs(teachers, students, 1)[0] == ("t0", "s1")
    assert round_robin_pairs(teachers, students, 4) == round_robin_pairs(teachers, students, 0)


# ---------------------------------------------------------------- solve-rate matrix


def test_solve_rate_matrix_means_and_nans():
    matches = [
        Match("t0", "s0", True, 0.5),
        Match("t0", "s0", True, 1.0),
        Match("t0", "s1", False),
        Match("t1", "s1", True, 0.0),
    ]
    m = solve_rate_matrix(matches)
    assert m.teachers == ["t0", "t1"] and m.students == ["s0", "s1"]
    assert m.rho[0, 0] == pytest.approx(0.75)
    assert np.isnan(m.rho[0, 1])  # only an invalid task: nothing was solved or failed
    assert np.isnan(m.rho[1, 0])  # never played
    assert m.rho[1, 1] == 0.0
    ordered = solve_rate_matrix(matches, teachers=["t1", "t0", "t9"], students=["s1", "s0"])
    assert ordered.rho.shape == (3, 2)
    assert ordered.rho[1, 1] == pytest.approx(0.75) and np.isnan(ordered.rho[2]).all()
