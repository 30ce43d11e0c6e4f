"""Cross-check: the project's EvalPlus scorer (`evalplus_scoring.score_evalplus`) against the official
evaluator, evalplus 0.3.1, on the same local data ($POPULORA_DATA) and the same candidate programs; the
machinery (candidates, both scorers) is benchmarks/evalplus_crosscheck.py, which bench_scoring.py times.
Base and plus verdicts must agree on >= 99.5% of the candidates and every disagreement must be on its
allow-list, each entry a row of docs/benchmarks.md "Differences from official evalplus" table.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "evalplus_crosscheck.py"
_SPEC = importlib.util.spec_from_file_location("evalplus_crosscheck", _PATH)
if _SPEC.name in sys.modules:  # loaded once per process (test_official_scorer loads it too)
    cc = sys.modules[_SPEC.name]
else:
    cc = importlib.util.module_from_spec(_SPEC)
    sys.modules[_SPEC.name] = cc  # the pool's workers find its functions by this name
    _SPEC.loader.exec_module(cc)
ALLOWED, MIN_AGREEMENT, score_both = cc.ALLOWED, cc.MIN_AGREEMENT, cc.score_both

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(cc.missing_data()), reason=cc.missing_data())]


# ---------------------------------------------------------------- the test
def test_verdicts_agree_with_official_evalplus():
    pytest.importorskip("evalplus.eval", reason="evalplus 0.3.1 is installed by `make setup` (--no-deps)")
    check = score_both()
    rows, mine, theirs = check.rows, check.mine, check.theirs
    ordinary = [i for i, (_, p, _, _) in enumerate(rows) if p.id not in ALLOWED]
    base_agree = sum(mine[i][0] == theirs[i][0] for i in ordinary) / len(ordinary)
    plus_agree = sum(mine[i][1] == theirs[i][1] for i in ordinary) / len(ordinary)
    differences = [
        (p.id, kind, mine[i][:2], theirs[i], mine[i][2])
        for i, (_, p, kind, _) in enumerate(rows)
        if mine[i][:2] != tuple(theirs[i])
    ]
    by_kind: dict[str, list[int]] = {}
    for i, (_, _, kind, _) in enumerate(rows):
        by_kind.setdefault(kind, []).append(i)
    print(
        f"\n{len(rows)} candidates on {len({p.id for _, p, _, _ in rows})} tasks ({len(ordinary)} ordinary): "
        f"base agreement {base_agree:.2%}, plus agreement {plus_agree:.2%}; seconds "
        + ", ".join(f"{k} {v:.1f}" for k, v in check.seconds.items())
    )
    for kind, idx in sorted(by_kind.items()):
        print(
            f"  {kind:20s} n={len(idx):3d}  "
            f"pass base/plus here {sum(mine[i][0] for i in idx):3d}/{sum(mine[i][1] for i in idx):3d}"
            f"  official {sum(theirs[i][0] for i in idx):3d}/{sum(theirs[i][1] for i in idx):3d}"
        )
    for d in differences:
        print(
            f"  differs: {d[0]} {d[1]}: here (base, plus)={d[2]} ({d[4]}), official={d[3]}"
            + (f"  [allowed: {ALLOWED[d[0]]}]" if d[0] in ALLOWED else "")
        )

    assert len(rows) >= 300, "the cross-check should cover a few hundred candidates"
    assert sum(theirs[i][1] for i in by_kind["reference"]) >= 0.9 * len(by_kind["reference"]), "official side broken?"
    assert base_agree >= MIN_AGREEMENT and plus_agree >= MIN_AGREEMENT
    assert [d for d in differences if d[0] not in ALLOWED] == []
