"""The output shim: how a benchmark program's results cross the sandbox boundary (docs/design.md).

Outputs cross as literals. A shim appended to each program turns results into plain literals
first: builtin subclasses (Counter, namedtuple) and numpy scalars into their base types,
non-finite floats into tagged strings, and an output whose text is over `DIGEST_OVER` characters
(or an int too long to print) into a SHA-256 digest of a canonical text under which values equal
by ``==`` agree (3 and 3.0, dict and set order), so huge outputs are compared as ``==`` would
(without the float tolerance). The parent compares parsed values; no model object's ``__eq__``
runs. Used by both code scorers (`evalplus_scoring`, `lcb_scoring`).
"""

from __future__ import annotations

from typing import Any

from populora_nb.verify import parse_literal

DIGEST_OVER = 100_000
SCORER_VERSION = 2
"""Bumped when the shim's output text changes (2: canonical digests), so cached ground truths are redone."""
ENTRY = "_bench_entry"

_NONFINITE = "\x00nonfinite:"
_DIGEST = "\x00sha256:"

# Appended after the program, so these definitions replace any of the same name in it. It runs in
# the sandbox child; only the literal it returns reaches the parent.
_SHIM = """

import numbers as _bench_numbers


def _bench_plain(x):
    if x is None or type(x) is bool:
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        x = float(x)
        if x != x or x in (float("inf"), float("-inf")):
            return "{nonfinite}" + repr(x)
        return x
    for base in (complex, str, bytes):
        if isinstance(x, base):
            return base(x)
    if isinstance(x, dict):
        return {{_bench_plain(k): _bench_plain(v) for k, v in x.items()}}
    for base in (list, tuple, set, frozenset):
        if isinstance(x, base):
            return base(_bench_plain(v) for v in x)
    if isinstance(x, _bench_numbers.Integral):  # numpy scalars: equal to their Python value in evalplus
        return int(x)
    if isinstance(x, _bench_numbers.Real):
        return _bench_plain(float(x))
    if isinstance(x, _bench_numbers.Complex):
        return complex(x)
    if type(x).__name__ in ("bool", "bool_"):
        return bool(x)
    return x


def _bench_canon(x):
    t = type(x)
    if t is bool or t is int:
        return str(int(x)) if -(1 << 4096) < x < (1 << 4096) else hex(x)
    if t is float:
        return _bench_canon(int(x)) if x == int(x) else repr(x)
    if t is complex:
        return _bench_canon(x.real) if x.imag == 0 else "c(" + _bench_canon(x.real) + "," + _bench_canon(x.imag) + ")"
    if t is list:
        return "[" + ",".join(_bench_canon(v) for v in x) + "]"
    if t is tuple:
        return "(" + ",".join(_bench_canon(v) for v in x) + ")"
    if t is set or t is frozenset:
        return "{{" + ",".join(sorted(_bench_canon(v) for v in x)) + "}}"
    if t is dict:
        return "d{{" + ",".join(sorted(_bench_canon(k) + ":" + _bench_canon(v) for k, v in x.items())) + "}}"
    return repr(x)


def _bench_fit(x):
    import hashlib
    x = _bench_plain(x)
    try:
        unprintable = False
        if len(repr(x)) <= {digest_over} // 2:  # the canonical text is at most ~2x the repr
            return x
    except ValueError:  # an int over 4300 digits: no float equals it; its canonical text is hex
        unprintable = True
    try:
        text = _bench_canon(x)
    except (ValueError, OverflowError, RecursionError):
        return x
    if unprintable or len(text) > {digest_over}:
        return "{digest}" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    return x


def {entry}(*args):
    out = {call}(*args)
    {post}return _bench_fit(out)
"""


def shim(call: str, not_none: bool = False) -> str:
    """The shim calling `call` (``f`` or ``Solution().f``); `not_none` maps non-bools to ``is not None``."""
    post = "out = out if type(out) is bool else out is not None\n    " if not_none else ""
    return _SHIM.format(
        nonfinite=_NONFINITE.encode("unicode_escape").decode(),
        digest=_DIGEST.encode("unicode_escape").decode(),
        digest_over=DIGEST_OVER,
        entry=ENTRY,
        call=call,
        post=post,
    )


def decode_output(text: str) -> Any:
    """A shim output repr -> value (tagged non-finite floats restored); ValueError if not a literal."""
    return _restore(parse_literal(text))


def _restore(x: Any) -> Any:
    if type(x) is str and x.startswith(_NONFINITE):
        return float(x[len(_NONFINITE) :])
    if type(x) in (list, tuple):
        return type(x)(_restore(v) for v in x)
    if type(x) is dict:
        return {k: _restore(v) for k, v in x.items()}
    return x
