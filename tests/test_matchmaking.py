"""TrueSkill ratings, PFSP pairing and the solve-rate matrix."""

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest
import trueskill

from populora_nb.config import ConfigError, load_config, reachable_band
from populora_nb.evolution import fitness
from populora_nb.matchmaking import (
    Game,
    Match,
    Rating,
    contested,
    initial_ratings,
    make_trueskill,
    pfsp_pairs,
    pfsp_weights,
    round_robin_pairs,
    student_games,
    teacher_games,
    update_ratings,
    win_probability,
)
from populora_nb.rewards import teacher_reward

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


def _conservative(r: Rating) -> float:
    return fitness(r.mu, r.sigma, 3.0)  # evolution's fitness, mu - 3 sigma


def _rated_against_a_fixed_opponent(env, role: str, match_args: tuple, opponent: Rating, matches: int = 120) -> Rating:
    """The member's rating after `matches` identical matches against an opponent whose rating is
    reset before every match: identical opponents for every member compared."""
    me, other = ("T", "S") if role == "teacher" else ("S", "T")
    ratings = initial_ratings(["T", "S"], env)
    for _ in range(matches):
        ratings[other] = opponent
        ratings = update_ratings(ratings, [Match("T", "S", *match_args)], env)
    return ratings[me]


@pytest.mark.parametrize("k", [4, 8])
def test_teacher_ratings_follow_the_teacher_reward(env, k):
    """invalid (-1) < unsolvable (0) = trivial (0) < contested (1 - rho), lower contested rho better."""
    opponent = Rating(25.0, 3.0)
    behaviours = {"invalid": (False, None, k), "unsolvable": (True, 0.0, k), "trivial": (True, 1.0, k)}
    behaviours |= {f"rho={j}/{k}": (True, j / k, k) for j in range(k - 1, 0, -1)}  # reward rising
    got = {
        name: _conservative(_rated_against_a_fixed_opponent(env, "teacher", b, opponent))
        for name, b in behaviours.items()
    }
    assert got["invalid"] < got["unsolvable"] - 1.0
    assert got["unsolvable"] == got["trivial"]  # both k losses to the reference
    ordered = ["trivial"] + [f"rho={j}/{k}" for j in range(k - 1, 0, -1)]
    assert all(got[a] < got[b] for a, b in zip(ordered, ordered[1:])), got
    rewards = [teacher_reward(*b[:2]) for b in behaviours.values()]
    ratings = list(got.values())
    # the whole order, ties included: a higher reward never rates lower
    assert all(ra <= rb for (wa, ra), (wb, rb) in itertools.product(zip(rewards, ratings), repeat=2) if wa < wb)


@pytest.mark.parametrize("k", [4, 8])
def test_student_ratings_follow_the_student_reward(env, k):
    """fails all < solves some (more is better) < solves all; failing is never rated up."""
    opponent = Rating(25.0, 3.0)
    got = [
        _conservative(_rated_against_a_fixed_opponent(env, "student", (True, j / k, k), opponent)) for j in range(k + 1)
    ]
    assert all(a < b for a, b in zip(got, got[1:])), got
    fails_all = _rated_against_a_fixed_opponent(env, "student", (True, 0.0, k), opponent, matches=5)
    assert fails_all.mu < env.mu  # the old rule rated this student up to mu ~ 42


def test_a_threshold_below_one_caps_the_band(env):
    opponent = Rating(25.0, 3.0)

    def rated(rho, threshold):
        ratings = initial_ratings(["T", "S"], env)
        for _ in range(10):
            ratings["S"] = opponent
            ratings = update_ratings(ratings, [Match("T", "S", True, rho, 4)], env, threshold)
        return ratings["T"].mu

    assert rated(0.5, 0.5) < rated(0.25, 0.5)  # rho = threshold is out of the band
    assert rated(0.5, 0.5) == rated(1.0, 0.5)  # rated like a trivial task
    assert rated(0.5, 1.0) > rated(1.0, 1.0) + 1.0  # at the default threshold 1 every contested task gains


def test_games_per_rollout():
    lost_to_reference, won, lost = Game(False, "reference"), Game(True, "partner"), Game(False, "partner")
    assert teacher_games(Match("T", "S", False, rollouts=4)) == [lost_to_reference] * 8
    assert teacher_games(Match("T", "S", True, 0.0, 4)) == [lost_to_reference] * 4
    assert teacher_games(Match("T", "S", True, 1.0, 4)) == [lost_to_reference] * 4
    assert teacher_games(Match("T", "S", True, 0.25, 4)) == [won, won, won, lost]
    assert teacher_games(Match("T", "S", True, 0.5, 4), threshold=0.5) == [lost_to_reference] * 4
    assert teacher_games(Match("T", "S", True, None, 4)) == []  # never attempted
    assert student_games(Match("T", "S", True, 0.5, 4)) == [lost, won, lost, won]
    assert student_games(Match("T", "S", True, 0.0, 2)) == [lost, lost]
    assert student_games(Match("T", "S", False, rollouts=2)) == []
    assert contested(Match("T", "S", True, 0.25, 4)) and not contested(Match("T", "S", True, 1.0, 4))
    with pytest.raises(ValueError, match="whole number"):
        Match("T", "S", True, 0.3, 4)


def test_reachable_band_and_the_config_refusal():
    assert reachable_band(2, 0.5) == [] and reachable_band(4, 0.5) == [0.25]
    assert reachable_band(2, 1.0) == [0.5] and reachable_band(1, 1.0) == []
    with pytest.raises(ConfigError, match=r"win_threshold=0.5 with rl.rollouts=2.*rl.rollouts >= 3"):
        load_config("tiny", {"rl.rollouts": 2, "matchmaking.win_threshold": 0.5})
    with pytest.raises(ConfigError, match=r"rl.rollouts >= 2"):
        load_config("tiny", {"rl.rollouts": 1})
    load_config("tiny", {"rl.rollouts": 4, "matchmaking.win_threshold": 0.5})


def test_match_played_only_when_valid_and_attempted():
    assert Match("T", "S", True, 0.0).played
    with pytest.raises(ValueError, match="no rollouts"):
        update_ratings(initial_ratings(["T", "S"], make_trueskill()), [Match("T", "S", True, 0.0)], make_trueskill())
    assert not Match("T", "S", True).played
    assert not Match("T", "S", False).played
    with pytest.raises(ValueError, match="never shown"):
        Match("T", "S", valid=False, rho=0.5)


def test_invalid_task_moves_only_the_teacher_against_a_fixed_reference(env):
    r0 = {"T": Rating(27.0, 6.0), "S": Rating(31.0, 2.5), "U": Rating(12.0, 4.0), "V": Rating(20.0, 3.0)}
    got = update_ratings(r0, [Match("T", "S", valid=False, rollouts=2)] * 5, env)  # 2k = 4 games each
    assert got["S"] == r0["S"]  # exactly: mu and sigma, no tau inflation either
    assert got["U"] == r0["U"] and got["V"] == r0["V"]  # bystanders untouched
    # The teacher lost 5 x 4 games to the prior-rated reference, whoever its partner was.
    t = env.create_rating(27.0, 6.0)
    for _ in range(20):
        _, t = trueskill.rate_1vs1(env.create_rating(env.mu, env.sigma), t, env=env)
    assert got["T"] == Rating(t.mu, t.sigma)
    assert update_ratings(r0, [Match("T", "U", valid=False, rollouts=2)] * 5, env)["T"] == got["T"]


def test_unattempted_task_moves_nobody(env):
    r0 = {"T": Rating(27.0, 6.0), "S": Rating(31.0, 2.5)}
    assert update_ratings(r0, [Match("T", "S", valid=True, rho=None, rollouts=4)] * 3, env) == r0


def test_each_side_plays_the_other_as_it_stood_before_the_match(env):
    r0 = {"T": Rating(27.0, 6.0), "S": Rating(31.0, 2.5)}
    got = update_ratings(r0, [Match("T", "S", True, 0.5, 2), Match("T", "S", True, 0.0, 2)], env)
    t0, s0 = (env.create_rating(r0[m].mu, r0[m].sigma) for m in ("T", "S"))
    ref = env.create_rating(env.mu, env.sigma)
    t = trueskill.rate_1vs1(t0, s0, env=env)[0]  # the contested task: a failed rollout, the teacher's win
    t = trueskill.rate_1vs1(s0, t, env=env)[1]  # and a solved one, its loss, both against S as it stood
    s = trueskill.rate_1vs1(t0, s0, env=env)[1]
    s = trueskill.rate_1vs1(s, t0, env=env)[0]
    t1, s1 = t, s
    for _ in range(2):  # the unsolvable task: the teacher loses to the reference, the student to T as it stood
        t = trueskill.rate_1vs1(ref, t, env=env)[1]
        s = trueskill.rate_1vs1(t1, s, env=env)[1]
    assert got["T"] == Rating(t.mu, t.sigma) and got["S"] == Rating(s.mu, s.sigma)
    assert s1 is not s


def test_student_whose_partner_only_wrote_invalid_tasks_keeps_its_rating(env):
    teachers, students = ["A", "B", "C"], ["s0", "s1", "s2"]
    r = initial_ratings(teachers + students, env)
    r0 = dict(r)
    for _ in range(20):  # s2 only ever meets C, whose tasks are all invalid
        r = update_ratings(
            r,
            [Match("A", "s0", True, 1.0, 4), Match("B", "s1", True, 0.25, 4), Match("C", "s2", False, rollouts=4)],
            env,
        )
    assert r["s2"] == r0["s2"]
    assert r["s0"].mu > r0["s0"].mu and r["s1"].mu < r0["s1"].mu  # the students who played moved
    assert r["s0"].sigma < r0["s0"].sigma and r["s1"].sigma < r0["s1"].sigma


def test_ratings_rank_teachers_as_their_rewards_do_in_a_shared_pool(env):
    """A writes valid tasks nobody solves (reward 0), B tasks solved a quarter of the time
    (reward 0.75), C only invalid ones (reward -1); all meet a common pool of students by PFSP.
    B must rate clearly above A, and A above C, in mu and in mu - 3 sigma."""
    teachers, students = ["A", "B", "C"], ["s0", "s1", "s2", "s3"]
    behaviour = {"A": (True, 0.0, 4), "B": (True, 0.25, 4), "C": (False, None, 4)}
    ratings, rng = initial_ratings(teachers + students, env), random.Random(0)
    for _ in range(60):
        pairs = pfsp_pairs(teachers, students, ratings, env, rng)
        matches = [Match(t, s, *behaviour[t]) for t, s in pairs for _ in range(4)]
        ratings = update_ratings(ratings, matches, env)
    a, b, c = ratings["A"], ratings["B"], ratings["C"]
    assert b.mu > a.mu + env.beta and a.mu > c.mu + 1.0  # A and C only lose (to the reference): both sink
    assert _conservative(b) > _conservative(a) + env.beta and _conservative(a) > _conservative(c) + 1.0


def test_matches_apply_sequentially_in_the_given_order(env):
    r0 = initial_ratings(["T1", "T2", "S"], env)
    matches = [Match("T1", "S", True, 1.0, 2), Match("T1", "S", True, 0.0, 2), Match("T2", "S", True, 0.5, 2)]
    got = update_ratings(r0, matches, env)
    assert update_ratings(r0, matches[::-1], env)["S"] != got["S"]  # order matters


def test_update_rejects_unknown_members_and_bad_matches(env):
    r0 = initial_ratings(["T", "S"], env)
    with pytest.raises(KeyError, match="no rating"):
        update_ratings(r0, [Match("T", "X", True, 0.5, 2)], env)
    with pytest.raises(ValueError, match="itself"):
        update_ratings(r0, [Match("T", "T", True, 0.5, 2)], env)
    with pytest.raises(ValueError, match="threshold"):
        update_ratings(r0, [], env, threshold=1.5)


def test_the_old_invalid_policy_knob_is_a_clear_config_error(tmp_path):
    old = tmp_path / "config.yaml"
    old.write_text("matchmaking:\n  invalid_policy: teacher_loss\n")
    with pytest.raises(ConfigError, match="unknown config key 'matchmaking.invalid_policy'"):
        load_config("tiny", yaml_path=old)


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
        # Fewer teachers than students: every teacher gets a distinct student.
        assert len({s for _, s in step}) == 3 and all(s in students for _, s in step)


@pytest.mark.parametrize("n_teachers, n_students, allowed", [(4, 4, {1}), (6, 4, {1, 2}), (9, 4, {2, 3})])
def test_pfsp_pairs_give_every_student_its_share_of_teachers(env, n_teachers, n_students, allowed):
    """Independent draws left a student without a teacher in 91% of 4+4 steps; a matching never does."""
    teachers = [f"t{i}" for i in range(n_teachers)]
    students = [f"s{j}" for j in range(n_students)]
    ratings = initial_ratings(teachers + students, env)
    rng = random.Random(3)
    doubled = Counter()
    for _ in range(1000):
        pairs = pfsp_pairs(teachers, students, ratings, env, rng)
        assert [t for t, _ in pairs] == teachers
        load = Counter(s for _, s in pairs)
        assert set(students) == set(load) and set(load.values()) <= allowed
        doubled.update(s for s, n in load.items() if n == max(allowed))
    # Which students take the extra teachers is part of the draw, not always the same ones.
    assert set(doubled) == set(students)


def test_pfsp_matching_still_prefers_near_balanced_pairs(env):
    skills = [15.0, 22.0, 30.0, 40.0]
    teachers, students = [f"t{i}" for i in range(4)], [f"s{i}" for i in range(4)]
    ratings = {
        **{t: Rating(m, 2.0) for t, m in zip(teachers, skills)},
        **{s: Rating(m, 2.0) for s, m in zip(students, skills)},
    }
    rng = random.Random(11)
    counts = Counter(pair for _ in range(2000) for pair in pfsp_pairs(teachers, students, ratings, env, rng))
    for i, t in enumerate(teachers):
        # Each teacher meets its equal-rated student most often.
        assert max(students, key=lambda s: counts[(t, s)]) == students[i]
    balanced = sum(counts[(t, s)] for t, s in zip(teachers, students))
    lopsided = sum(n for (t, s), n in counts.items() if abs(ratings[t].mu - ratings[s].mu) >= 15.0)
    assert balanced > 3 * lopsided  # 4,716 against 647 with this seed


def test_round_robin_covers_every_pair_over_n_steps():
    teachers, students = ["t0", "t1", "t2", "t3"], ["s0", "s1", "s2", "s3"]
    seen = [pair for step in range(4) for pair in round_robin_pairs(teachers, students, step)]
    assert sorted(seen) == sorted((t, s) for t in teachers for s in students)
    assert round_robin_pairs(teachers, students, 1)[0] == ("t0", "s1")
    assert round_robin_pairs(teachers, students, 4) == round_robin_pairs(teachers, students, 0)
