"""Tests for populora_nb.analysis.complexity and populora_nb.analysis.coverage: metrics on hand-written programs,
what counts as a proposer's work, coverage at equal sample sizes (rarefaction), the collapse
detector, the run-directory loader, and notebook 05 on a synthetic experiment."""

from __future__ import annotations

import ast
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from populora_nb.analysis import complexity as cx
from populora_nb.analysis import coverage as cov
from populora_nb.analysis.frames import load_tasks, task_frame
from populora_nb.analysis.runs import find_runs
from studies.synthetic import SEED_PROGRAM, write_synthetic_experiment, write_synthetic_run

IDENTITY = "def f(a):\n    return a"
LOOP = """\
def f(a, b):
    total = 0
    for i in a:
        if i > b:
            total += i
    return total
"""
THREE_FUNCTIONS = """\
def g(x):
    if x:
        return 1
    return 0


def f(a):
    def h(y):
        return y if y else 0
    return [g(v) for v in a if h(v)]
"""
COMMENTED = '''\
def f(a):
    """Docstring."""
    # a comment

    return a
'''


def record(
    program: str,
    step: int = 0,
    proposer: str = "T0",
    inputs=("1",),
    outputs=("2",),
    valid: bool = True,
    solve_rate: float | None = 0.5,
    kind: str = "code_o",
    copy: str = "new",
) -> dict:
    """A tasks.jsonl row, with the copy class a valid one gets (`frame`)."""
    return {
        "step": step,
        "proposer": proposer,
        "kind": kind,
        "program": program,
        "valid": valid,
        "inputs": list(inputs),
        "outputs": list(outputs) if valid else [],
        "solve_rate": solve_rate if valid else None,
        "copy": copy if valid else None,
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    """The tasks frame of ``rows``: each valid one of the class it names, none a repeat."""
    return task_frame(rows, [r["copy"] for r in rows], [False if r["valid"] else None for r in rows])


# ----------------------------------------------------------------------------- per-program metrics
@pytest.mark.parametrize(
    "program, depth, cc, sloc, n_vars",
    [
        # Module > FunctionDef > Return > Name (and > arguments > arg)
        (IDENTITY, 3, (1, 1), 2, 1),
        # Module > FunctionDef > For > If > AugAssign > Name; cc 1 + for + if; vars a b total i
        (LOOP, 5, (3, 3), 6, 4),
        # g: 1 + if = 2; h: 1 + ternary = 2 (radon keeps it out of f); f: 1 + comprehension for + if = 3
        # depth: Module > FunctionDef f > Return > ListComp > comprehension > Call h(v) > Name;
        # 8 code lines (blank lines dropped); vars x a y v
        (THREE_FUNCTIONS, 6, (3, 7), 8, 4),
        # no def: module-level complexity; Module > Assign > Lambda > IfExp > Name; vars f x
        ("f = lambda x: x if x else 0", 4, (2, 2), 1, 2),
        # docstring, comment and blank lines are not source lines
        (COMMENTED, 3, (1, 1), 2, 1),
    ],
)
def test_metrics_of_hand_written_programs(program, depth, cc, sloc, n_vars):
    m = cx.program_metrics(program)
    assert m["parsed"]
    assert (m["ast_depth"], (m["cc_max"], m["cc_total"]), m["sloc"], m["n_variables"]) == (depth, cc, sloc, n_vars)
    assert m["n_chars"] == len(program)


def test_cyclomatic_walks_methods_of_nested_classes_and_closures():
    program = """\
class C:
    def m(self):
        def inner(z):
            if z:
                return 1
        return 2
    class D:
        def n(self):
            return 1 if self else 2
"""
    # m 1, inner 2, n 2: radon's own .blocks would miss both inner and n
    assert cx.cyclomatic_complexity(ast.parse(program)) == (2, 5)


def test_variable_count_kinds_of_binding():
    program = """\
import os
def f(a, *args, k=1, **kw):
    with open(a) as fh:
        pass
    try:
        pass
    except ValueError as err:
        pass
    [x for x in args]
    match a:
        case [y, *rest]:
            pass
    os.sep = 1
    return len(a)
"""
    # a args k kw fh err x y rest; not f, os, len (def, import, builtin), not the attribute store
    assert cx.variable_count(ast.parse(program)) == 9


def test_ast_depth_ignores_tag_nodes():
    # Module > FunctionDef > Return > BinOp > Name; the Add and Load tags add no level
    assert cx.ast_depth(ast.parse("def f(a):\n    return a + 1")) == 4
    assert cx.ast_depth(ast.parse("")) == 0


def test_unparseable_program_gets_nan_and_is_counted():
    tasks = [record(IDENTITY), record("def f(a) return a"), record("def f(a):\n    return " + "-" * 5000 + "a")]
    programs = cov.measured(frame(tasks))
    assert len(programs) == 3 and (~programs["parsed"].astype(bool)).sum() == 2  # measured, counted as unparsed
    bad = programs.iloc[1]
    assert not bad["parsed"] and pd.isna(bad["shape"]) and not bad["ngrams"]
    assert cov.coverage_units(frame(tasks), "shapes")[1] == frozenset()  # a draw without a shape
    assert all(math.isnan(bad[f]) for f in cx.COMPLEXITY_FIELDS + ("cc_max",))
    assert bad["io_profile"] == "(int) -> int"  # the I/O is still data worth counting


def test_programs_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    program = f"import os\nos.system('touch {marker}')\ndef f(a):\n    open({str(marker)!r}, 'w')\n    return a"
    inputs = (f"__import__('os').system('touch {marker}')",)
    m = cx.program_metrics(program, inputs, (f"open({str(marker)!r}, 'w')",))
    assert m["parsed"] and not marker.exists()
    assert m["io_profile"] == "? -> ?"


@pytest.mark.parametrize(
    "inputs, output, expected",
    [
        ("[1, 2], 'a'", "3", "(list[int], str) -> int"),
        ("'Hello world'", "'Hello world'", "(str) -> str"),
        ("{'a': [1, 2.5]}", "None", "(dict[str, list[float | int]]) -> None"),
        ("(1, 'x'), True", "[]", "(tuple[int | str, ...], bool) -> list"),
        ("", "{1, 2}", "() -> set[int]"),
        ("[[[[1]]]]", "-1.5", "(list[list[list[list]]]) -> float"),
        ("x + 1", "<object at 0x7f>", "? -> ?"),
        ("1), (2", "b'x'", "(int, tuple[int, ...]) -> bytes"),  # odd text still only builds data
    ],
)
def test_io_signature(inputs, output, expected):
    assert cov.io_signature(inputs, output) == expected


def test_io_profile_joins_distinct_pair_signatures():
    m = cx.program_metrics(IDENTITY, ("1", "'a'", "2"), ("1", "'a'", "2"))
    assert m["io_profile"] == "(int) -> int; (str) -> str"
    assert m["signatures"] == {"(int) -> int", "(str) -> str"}


# ----------------------------------------------------------------------------- coverage features
def test_shape_abstracts_own_names_and_constants_only():
    shape = lambda src: cov.ast_shape(ast.parse(src))  # noqa: E731
    base = shape("def f(a):\n    b = a + 1\n    return len(b)")
    assert shape("def g(x):\n    y = x + 7\n    return len(y)") == base  # renamed, new constant
    assert shape("def f(a):\n    b = a + 1.0\n    return len(b)") != base  # constant type differs
    assert shape("def f(a):\n    b = a + 1\n    return sum(b)") != base  # a different builtin
    assert shape("def f(a):\n    b = a - 1\n    return len(b)") != base  # a different operator
    assert shape("def f(a):\n    b = a + 1\n    return len(a)") != base  # different data flow


def test_ngram_features_of_identity():
    features = cov.ngram_features(ast.parse(IDENTITY))
    assert ("FunctionDef", "Return", "Name") in features and ("Module",) in features
    assert ("Module", "FunctionDef", "Return", "Name") not in features  # n = 3 at most
    assert all(1 <= len(f) <= 3 for f in features)


# ----------------------------------------------------------------------------- what a proposer wrote
def _assert_same_series(a: cx.StepSeries, b: cx.StepSeries) -> None:
    for name in ("steps", "mean", "lo", "hi", "count"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name


def test_complexity_counts_only_programs_the_proposer_wrote():
    # code_f tasks are handed a buffer program (here the identity seed, resampled every step): it is
    # not the teacher's program.
    written = [
        record(LOOP, step=0),
        record(THREE_FUNCTIONS, step=1, kind="code_i"),
        record("def f(a):\n    return a + 1", step=2),
    ]
    handed = [
        record(IDENTITY, step=s, kind="code_f", inputs=("'x'",) * 10, outputs=("'x'",) * 10, solve_rate=1.0)
        for s in range(3)
    ]
    mixed = frame(written + handed)
    alone = frame(written)
    assert cov.measured(mixed)["kind"].tolist() == ["code_o", "code_i", "code_o"]
    assert (len(cov.new_tasks(mixed)) - len(cov.measured(mixed)), cov.proposers(mixed)) == (3, ("T0",))
    for metric in (*cx.COMPLEXITY_FIELDS, "cc_max", "n_chars"):
        _assert_same_series(cx.step_series(mixed, metric), cx.step_series(alone, metric))
        _assert_same_series(cx.step_series(mixed, metric, proposer="T0"), cx.step_series(alone, metric))
    # the detector trends the same complexity; its solve rate does count the code_f tasks
    trend = lambda analysis: cx.detect_collapse(analysis, min_steps=2).relative_change  # noqa: E731
    assert trend(mixed) == trend(alone)
    assert cx.step_series(mixed, "solve_rate").mean.tolist() == [0.75] * 3
    # a copy counts in the copy rate only: not in the solve rate, not in complexity
    with_copy = frame([*written, *handed, record(IDENTITY, solve_rate=0.0, copy="earlier")])
    for metric in ("solve_rate", *cx.COMPLEXITY_FIELDS):
        _assert_same_series(cx.step_series(with_copy, metric), cx.step_series(mixed, metric))
    assert cx.copy_series(with_copy).mean.tolist() == pytest.approx([1 / 3, 0.0, 0.0])
    # coverage: shapes from the written programs only; code_f adds its inputs' signatures
    assert len(cov.coverage_units(mixed, "shapes")) == 3
    assert set().union(*cov.coverage_units(mixed, "signatures")) == {"(int) -> int", "(str) -> str"}


def test_every_valid_task_is_measured_and_a_copy_of_a_seed_is_the_proposers(verifier, tokenizer):
    """Issue #28: the old `seed` proposer filter matched no record, since the loop logs proposals
    only (the seeds sit in the buffers). A proposal copying the identity seed is the proposer's
    proposal: measured (its copy column says it is a copy), not skipped as if it were the seed."""
    from scripted import ScriptedPolicy

    from populora_nb.config import load_config
    from populora_nb.state import initial_state
    from populora_nb.step import baseline_step
    from populora_nb.step_records import task_rows

    cfg = load_config("tiny", {"run.agent": "baseline", "tasks.kinds": ["code_o"], "rl.proposals_per_kind": 2})
    state = initial_state(cfg, verifier)
    assert {t.meta.get("proposer") for t in state.buffers["code_o"].tasks} == {"seed"}  # in the buffer...
    rows = task_rows(0, baseline_step(ScriptedPolicy(tokenizer), verifier, state, cfg).proposals)
    assert rows and {r["proposer"] for r in rows} == {"agent"}  # ...never in the records
    assert not hasattr(cx, "SEED_PROPOSER") and not hasattr(cov, "SEED_PROPOSER")
    copied = record(IDENTITY, step=1, proposer="agent")  # the identity seed, written again
    tasks = frame([record(LOOP), copied, record(LOOP, valid=False)])
    assert cov.measured(tasks)["n_chars"].tolist() == [len(LOOP), len(IDENTITY)]
    assert len(cov.new_tasks(tasks)) == len(cov.valid_tasks(tasks)) == len(tasks) - 1


def test_complexity_of_a_fake_run_whose_code_f_reuses_buffer_programs(tmp_path):
    run = write_synthetic_run(tmp_path / "run", "population", n_steps=12, seed=5)
    tasks = load_tasks(run)
    valid = cov.valid_tasks(tasks)
    code_f = valid[valid["kind"] == "code_f"]
    earlier = {SEED_PROGRAM} | set(valid.loc[valid["kind"] != "code_f", "program"])
    assert len(code_f) and code_f["program"].isin(earlier).all()  # the fixture reuses the buffer
    assert (code_f["program"] == SEED_PROGRAM).any()
    alone = tasks[tasks["kind"].isin(["code_o", "code_i"])]
    for metric in cx.COMPLEXITY_FIELDS:
        _assert_same_series(cx.step_series(tasks, metric), cx.step_series(alone, metric))


# ----------------------------------------------------------------------------- coverage (rarefaction)
OPS = "+-*%"


def shape_program(k: int) -> str:
    """256 distinct AST shapes: four ``a = a <op> 1`` lines, the operators spelling k in base 4."""
    return "def f(a):\n" + "".join(f"    a = a {OPS[k >> 2 * i & 3]} 1\n" for i in range(4)) + "    return a"


def shape_run(seed: int, pool: int, n: int) -> pd.DataFrame:
    """``n`` valid code_o programs drawn uniformly, with replacement, from the first ``pool`` shapes."""
    draw = random.Random(seed)
    return frame([record(shape_program(draw.randrange(pool)), step=i) for i in range(n)])


def raw_count(tasks: pd.DataFrame, kind: str) -> int:
    return len(set().union(*cov.coverage_units(tasks, kind)))


def test_shape_program_pool_is_256_shapes():
    assert len({cov.ast_shape(ast.parse(shape_program(k))) for k in range(256)}) == 256


def test_rarefaction_sees_through_volume():
    # Same diversity, 4x the volume (a population against one agent drawing from one distribution).
    # The pool is 256 shapes rather than 20 so that the raw count keeps growing with volume.
    small, large = shape_run(0, 256, 100), shape_run(100, 256, 400)
    assert raw_count(large, "shapes") > 2 * raw_count(small, "shapes")  # the raw count says "covers more"
    rng = np.random.default_rng(0)
    curves = cov.rarefaction_curves({"small": small, "large": large}, "shapes", rng)
    compared = cov.compare_at_equal_n(curves)
    at_small, at_large = compared.at["small"], compared.at["large"]
    assert compared.n == 100 and at_small.lo == at_small.hi == raw_count(small, "shapes")  # all of it: exact
    assert at_large.lo <= at_small.mean <= at_large.hi  # equal coverage within the band
    assert compared.leader is None and "no difference" in compared.summary()


def test_rarefaction_ranks_the_more_diverse_run_higher_at_equal_n():
    # The diverse run has fewer programs, so raw counts rank it lower: rarefaction must not.
    diverse, narrow = shape_run(1, 256, 60), shape_run(2, 64, 400)
    assert raw_count(diverse, "shapes") < raw_count(narrow, "shapes")
    curves = cov.rarefaction_curves({"diverse": diverse, "narrow": narrow}, "shapes", np.random.default_rng(0))
    compared = cov.compare_at_equal_n(curves)
    assert compared.n == 60 and compared.at["diverse"].lo > compared.at["narrow"].hi
    assert compared.leader == "diverse" and "diverse covers more" in compared.summary()


# The same problems, one run's code twice as long: each long program is its short twin plus a block
# of other node types (a list, a subscript, an if), so it holds more n-grams but the same I/O pair.
LENGTHEN = "    b = [a, a]\n    if b[0] == b[1]:\n        a = b[0]\n"
IO_POOL = [("1", "2"), ("'ab'", "'ba'"), ("[1, 2]", "3"), ("'x', 2", "'xx'"), ("{'k': 1}", "True")]


def twin_runs(n: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    draw = random.Random(4)
    short, long = [], []
    for i in range(n):
        program, (x, y) = shape_program(draw.randrange(256)), draw.choice(IO_POOL)
        longer = program.replace("def f(a):\n", "def f(a):\n" + LENGTHEN, 1)
        short.append(record(program, step=i, inputs=(x,), outputs=(y,)))
        long.append(record(longer, step=i, inputs=(x,), outputs=(y,)))
    return frame(short), frame(long)


def test_program_signature_coverage_ignores_program_size_where_ngram_coverage_does_not():
    """Issue #28: a size-insensitive measure beside the n-grams, at the same common n."""
    from studies.protocol_series import expected_distinct  # the seed protocol's exact rarefaction

    short, long = twin_runs()
    assert all(b > 1.5 * a for a, b in zip(cov.measured(short)["n_chars"], cov.measured(long)["n_chars"]))
    assert all(len(u) == 1 for u in cov.coverage_units(long, "program_signatures"))  # one per program
    # same units as the n-grams (written programs), so the common n is the n-gram coverage's
    assert len(cov.coverage_units(long, "program_signatures")) == len(cov.coverage_units(long, "ngrams"))
    runs = {"short": short, "long": long}
    compared = cov.compare_at_common_n(runs, ("ngrams", "program_signatures"), np.random.default_rng(0))
    assert compared["ngrams"].n == compared["program_signatures"].n == 60
    sig, grams = compared["program_signatures"].at, compared["ngrams"].at
    assert sig["short"] == sig["long"] and sig["short"].mean == len(IO_POOL)  # the same problems: the same measure
    assert grams["long"].mean > grams["short"].mean  # longer code: more n-grams
    for n in (5, 20, 40):  # and at any smaller common n, by the exact expectation
        units = {name: cov.coverage_units(a, "program_signatures") for name, a in runs.items()}
        assert expected_distinct(units["short"], n) == pytest.approx(expected_distinct(units["long"], n))
        grams_at = {name: expected_distinct(cov.coverage_units(a, "ngrams"), n) for name, a in runs.items()}
        assert grams_at["long"] > grams_at["short"]
    with pytest.raises(ValueError, match="n must be in"):
        cov.compare_at_equal_n(cov.rarefaction_curves(runs, "ngrams", np.random.default_rng(0)), n=61)


def test_rarefaction_is_seeded_monotone_and_exact_at_the_ends():
    units = cov.coverage_units(shape_run(3, 64, 150), "shapes")
    one, two = (cov.rarefy(units, np.random.default_rng(7), n_resamples=50) for _ in range(2))
    for name in ("n", "mean", "lo", "hi"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name  # same seed, same curve
    assert not np.array_equal(one.mean, cov.rarefy(units, np.random.default_rng(8), n_resamples=50).mean)
    for values in (one.mean, one.lo, one.hi):
        assert (np.diff(values) >= 0).all()  # never decreases in n
    assert one.size == 150 and one.at(0) == cov.CoverageAt(0, 0.0, 0.0, 0.0)
    assert one.at(150) == cov.CoverageAt(150, *(float(len(set().union(*units))),) * 3)
    assert (one.lo <= one.hi).all()  # (a skewed count can put its 5th percentile above its mean)
    with pytest.raises(ValueError, match=r"n must be in \[0, 150\]"):
        one.at(151)


def test_rarefaction_mean_matches_the_exact_expectation():
    # Hurlbert (1971): E[distinct among n of N] = sum over features of 1 - C(N - N_f, n) / C(N, n),
    # N_f the units holding feature f. Overlapping feature sets, like n-grams.
    units = [frozenset({i % 5, i % 7 + 10, 99}) if i % 3 else frozenset() for i in range(40)]
    curve = cov.rarefy(units, np.random.default_rng(0), n_resamples=4000)
    holders = {f: sum(f in u for u in units) for u in units for f in u}
    for n in (1, 5, 13, 30):
        exact = sum(1 - math.comb(40 - k, n) / math.comb(40, n) for k in holders.values())
        assert curve.mean[n] == pytest.approx(exact, abs=0.1), n


def test_rarefaction_of_nothing_is_a_flat_zero():
    empty = cov.rarefy([], np.random.default_rng(0))
    assert empty.size == 0 and empty.mean.tolist() == [0.0]
    no_features = cov.rarefy([frozenset()] * 3, np.random.default_rng(0))
    assert no_features.mean.tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="kind must be one of"):
        cov.coverage_units(frame([]), "tokens")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    exp = write_synthetic_experiment(tmp_path_factory.mktemp("exp"), n_steps=30, seed=0)
    return {name: load_tasks(path) for name, path in find_runs(exp).items()}


def test_coverage_per_teacher_and_at_equal_n_on_a_fake_experiment(experiment):
    population = experiment["population"]
    for kind in cov.COVERAGE_KINDS:
        per_teacher = cov.per_proposer_curves(population, kind, np.random.default_rng(0), n_resamples=20)
        assert set(per_teacher) == {"T0", "T1", "T2", "T3"}
        assert sum(c.size for c in per_teacher.values()) == len(cov.coverage_units(population, kind))
    curves = cov.rarefaction_curves(experiment, "signatures", np.random.default_rng(0), n_resamples=50)
    assert curves["population"].size == len(cov.new_tasks(population))  # every new valid proposal
    compared = cov.compare_at_equal_n(curves)
    assert compared.n == curves["baseline"].size < curves["population"].size
    assert compared.leader == "population"  # the scripted arms race keeps drawing new input types


def test_rarefaction_figure_says_why_a_panel_is_empty(experiment):
    from populora_nb.analysis import complexity_plots

    curves = {
        kind: cov.rarefaction_curves(experiment, kind, np.random.default_rng(0), n_resamples=20)
        for kind in cov.COVERAGE_KINDS
    }
    fig = complexity_plots.plot_rarefaction_grid(curves)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(label.startswith("population (N=") and "at n=" in label for label in labels)
    nothing = {"baseline": frame([record(IDENTITY, valid=False)])}
    empty = complexity_plots.plot_rarefaction(cov.rarefaction_curves(nothing, "shapes", np.random.default_rng(0)))
    assert any("nothing to count" in t.get_text() for t in empty.axes[0].texts)
    flat = complexity_plots.plot_program_metric(nothing, "ast_depth")
    assert any("nothing to plot" in t.get_text() for t in flat.axes[0].texts)


# ----------------------------------------------------------------------------- collapse detector
def test_detector_fires_on_synthetic_collapse(experiment):
    report = cx.detect_collapse(experiment["baseline"])
    assert report.collapsed, report.reason
    assert report.solve_rate_end >= 0.9 and report.n_falling >= 3
    assert all(-1 <= c <= -0.1 for c in report.relative_change.values())


def test_detector_quiet_on_synthetic_arms_race(experiment):
    report = cx.detect_collapse(experiment["population"])
    assert not report.collapsed, report.reason
    assert report.n_falling == 0 and report.solve_rate_end < 0.9


def _trend_run(levels, solve_rates):
    """One program per step with ``level`` sibling ifs: cc, sloc and variables follow the level,
    AST depth stays flat."""
    body = lambda n: "".join(f"    if a > {i}:\n        v{i} = a\n" for i in range(n))  # noqa: E731
    return frame(
        [
            record(f"def f(a):\n{body(n)}    return a", step=s, solve_rate=r)
            for s, (n, r) in enumerate(zip(levels, solve_rates))
        ]
    )


def test_detector_needs_both_high_solve_rate_and_falling_complexity():
    falling, rising = list(range(12, 0, -1)), list(range(1, 13))
    assert cx.detect_collapse(_trend_run(falling, [1.0] * 12)).collapsed
    assert not cx.detect_collapse(_trend_run(falling, [0.5] * 12)).collapsed  # still hard
    assert not cx.detect_collapse(_trend_run(rising, [1.0] * 12)).collapsed  # strong solver
    report = cx.detect_collapse(_trend_run(falling, [1.0] * 12), min_falling=4)
    assert report.n_falling == 3 and not report.collapsed  # depth stays flat: 3 of 4 fall
    short = cx.detect_collapse(_trend_run(falling[:3], [1.0] * 3))
    assert not short.collapsed and "too few steps" in short.reason


def test_step_series_rolls_over_window():
    analysis = _trend_run([1, 2, 3, 4], [0.0, 1.0, 1.0, 0.0])
    series = cx.step_series(analysis, "n_variables", window=2)
    assert series.steps.tolist() == [0, 1, 2, 3]
    # one program per step with 1 + level variables; step 1 pools steps 0..1
    assert series.mean.tolist() == [2.0, 2.5, 3.5, 4.5]
    assert series.count.tolist() == [1, 2, 2, 2]
    with pytest.raises(ValueError, match="window"):
        cx.step_series(analysis, "sloc", window=0)


# ----------------------------------------------------------------------------- loading
def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.parent


ROW = {
    "step": 0,
    "proposer": "T0",
    "kind": "code_o",
    "program": IDENTITY,
    "inputs": ["1"],
    "outputs": ["1"],
    "message": "",
    "valid": True,
    "reason": None,
    "solver": "S0",
    "solve_rate": 0.25,
}


def test_load_tasks_reads_rows_and_drops_a_truncated_last_line(tmp_path):
    whole = json.dumps(ROW) + "\n" + json.dumps({**ROW, "step": 1, "valid": False, "outputs": []}) + "\n"
    run = _write(tmp_path / "run" / "tasks.jsonl", whole + json.dumps(ROW)[:40])
    tasks = load_tasks(run)
    assert tasks["step"].tolist() == [0, 1] and set(tasks["run"]) == {"run"}
    # recorded before the loop classed copies: the identity seed's program is met before (a seed's)
    first = tasks.iloc[0][["step", "proposer", "kind", "program", "valid", "inputs", "outputs", "message", "reason"]]
    assert first.tolist() == [0, "T0", "code_o", IDENTITY, True, ["1"], ["1"], "", None]
    assert tasks.iloc[0][["solver", "rho", "copy", "repeat"]].tolist() == ["S0", 0.25, "earlier", False]
    assert not tasks.iloc[1]["valid"] and tasks.iloc[1]["outputs"] == []


def test_load_tasks_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere" / "tasks.jsonl")):
        load_tasks(tmp_path / "nowhere")
    empty = _write(tmp_path / "empty" / "tasks.jsonl", "\n")
    with pytest.raises(ValueError, match=f"{empty / 'tasks.jsonl'}.*empty"):
        load_tasks(empty)
    broken = _write(tmp_path / "broken" / "tasks.jsonl", "{oops\n" + json.dumps(ROW) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:1 is not valid JSON"):
        load_tasks(broken)
    lacking = _write(tmp_path / "lacking" / "tasks.jsonl", json.dumps({"step": 0}) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl: row 1: task record lacks \['proposer'"):
        load_tasks(lacking)


def test_load_tasks_parses_a_run_once_until_its_records_change(tmp_path, monkeypatch):
    """A report reads a run's tasks for its figures, its liveness (`load_frames`) and its tables: its
    programs are parsed once, each caller gets its own copy, and rewritten records are read again."""
    from populora_nb.analysis import frames

    calls = []

    def counted(*args):
        calls.append(args)
        return cx.program_metrics(*args)

    monkeypatch.setattr(frames, "program_metrics", counted)
    run = _write(tmp_path / "run" / "tasks.jsonl", json.dumps(ROW) + "\n")
    first, second = load_tasks(run), load_tasks(run)
    assert len(calls) == 1 and first.equals(second) and first is not second
    assert frames.load_frames(run).tasks.equals(first) and len(calls) == 1
    first.loc[0, "ast_depth"] = 99.0  # a caller's frame is its own
    assert load_tasks(run).loc[0, "ast_depth"] == 3.0 and len(calls) == 1
    (run / "tasks.jsonl").write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "step": 1}) + "\n")
    assert load_tasks(run)["step"].tolist() == [0, 1] and len(calls) == 3


def test_find_runs(tmp_path):
    exp = tmp_path / "exp"
    write_synthetic_run(exp / "baseline", "baseline", n_steps=2)
    write_synthetic_run(exp / "population", "population", n_steps=2)
    assert find_runs(exp) == {"baseline": exp / "baseline", "population": exp / "population"}
    assert find_runs(exp / "population") == {"population": exp / "population"}
    solo = _write(tmp_path / "solo" / "tasks.jsonl", json.dumps(ROW) + "\n")  # no config.yaml
    assert find_runs(solo) == {"solo": solo}
    with pytest.raises(FileNotFoundError, match="no run directory"):
        find_runs(tmp_path / "exp" / "baseline" / "missing")
    # the first place that holds a run wins; None (an unset out_dir) is skipped
    assert find_runs(None, tmp_path / "nothing", exp) == find_runs(exp)
    assert find_runs(None, tmp_path / "nothing", missing_ok=True) == {}
    (exp / "eval").mkdir()  # a folder without records is not a run
    assert list(find_runs(exp)) == ["baseline", "population"]


# ----------------------------------------------------------------------------- notebook
@pytest.mark.slow
def test_notebook_runs_on_an_experiment_directory(tmp_path):
    papermill = pytest.importorskip("papermill")
    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "05_complexity.ipynb"
    exp = write_synthetic_experiment(tmp_path / "exp", n_steps=12, seed=3)
    out = tmp_path / "figures"
    papermill.execute_notebook(
        str(notebook),
        str(tmp_path / "out.ipynb"),
        kernel_name="python3",
        language="python",
        cwd=str(notebook.parent),
        progress_bar=False,
        parameters={"run_dir": str(exp), "out_dir": str(out), "preset": "tiny"},
    )
    saved = {p.name for p in out.glob("*.png")}
    assert {
        "05_complexity.png",
        "05_coverage.png",
        "05_population_per_teacher.png",
        "05_population_coverage_per_teacher.png",
    } <= saved
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    printed = "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", ()))
    assert "population: 192 proposed tasks over 12 steps" in printed  # it read our run_dir
    assert "SYNTHETIC" not in printed
    # the notebook prints its evidence, checked here: every valid task sorted, coverage never decreasing
    sorted_lines = re.findall(r"(\w+): \d+ task rows; (\d+) sorted of (\d+) valid", printed)
    assert {name for name, _, _ in sorted_lines} == {"baseline", "population"}
    assert all(done == valid for _, done, valid in sorted_lines), sorted_lines
    assert "coverage never decreases True" in printed and "coverage never decreases False" not in printed


def _written_run(path: Path, steps_with_programs: dict[int, int], n_steps: int = 20) -> pd.DataFrame:
    """A run whose steps write ``steps_with_programs[step]`` new programs (each its own constant) and
    otherwise one invalid proposal."""
    rows, k = [], 0
    for step in range(n_steps):
        for _ in range(steps_with_programs.get(step, 0)):
            k += 1
            body = f"return x + {k}" if step < n_steps // 2 else f"y = x * {k}\n    return y"
            row = {"step": step, "proposer": "agent", "kind": "code_o", "program": f"def f(x):\n    {body}"}
            rows.append({**row, "valid": True, "inputs": ["1"], "outputs": ["2"], "solve_rate": 0.5})
        rows.append({"step": step, "proposer": "agent", "kind": "code_o", "program": "", "valid": False})
    path.mkdir()
    (path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_tasks(path)


def test_complexity_windows_are_fixed_steps_with_counts_and_a_floor(tmp_path):
    """Two runs of 20 steps: one writes its programs early in each window, one late. Their windows are
    the same steps (0–4, 15–19) whatever steps happened to hold a program, each with its count; a
    window under the floor says so instead of giving a number."""
    from studies.windows import MIN_PROGRAMS, complexity_windows, fixed_windows

    early = _written_run(tmp_path / "early", {0: 3, 1: 3, 15: 2, 16: 4, 9: 5})
    late = _written_run(tmp_path / "late", {3: 6, 4: 1, 18: 1, 19: 1})
    steps = lambda tasks: sorted(set(tasks["step"]))  # noqa: E731
    assert fixed_windows(steps(early), 5) == fixed_windows(steps(late), 5) == ((0, 4), (15, 19))
    start, end = complexity_windows(early, "n_variables", 5)
    assert (start.n, end.n, start.value, end.value) == (6, 6, 1.0, 2.0)  # step 9's programs in neither
    start, end = complexity_windows(late, "n_variables", 5)
    assert (start.n, end.n) == (7, 2) and math.isnan(end.value) and end.n < MIN_PROGRAMS
    assert end.cell() == "too few new programs (n = 2, steps 15–19)" and start.cell().startswith("1.00 (n = 7")
    with pytest.raises(ValueError, match="window"):
        fixed_windows(steps(early), 0)
