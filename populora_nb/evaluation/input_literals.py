"""Data values as Python literal source text, the verifier's currency (docs/design.md): benchmark inputs
are stored and sent to the sandbox as text like ``"[1, 2], 'a'"``, never as live objects, and the
text must read back as exactly the value (non-finite floats and signed zeros included).
"""

from __future__ import annotations

import ast
import math
from typing import Any


def literal_text(value: Any) -> str:
    """Python literal source for a data value; non-finite floats as ``1e309`` (literal_eval -> inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            raise ValueError("NaN has no literal form")
        return "1e309" if value > 0 else "-1e309"
    if type(value) in (list, tuple, set, frozenset):
        items = [literal_text(v) for v in value]
        if type(value) is list:
            return "[" + ", ".join(items) + "]"
        if type(value) is tuple:
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        body = "{" + ", ".join(items) + "}" if items else ""
        return (body or "set()") if type(value) is set else f"frozenset({body})"
    if type(value) is dict:
        return "{" + ", ".join(f"{literal_text(k)}: {literal_text(v)}" for k, v in value.items()) + "}"
    if type(value) is complex:
        return complex_text(value)
    return repr(value)


def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) or a != a and b != b


def complex_text(z: complex) -> str:
    """A literal that reads back as exactly `z`, signs of zero included: repr writes ``(-0-1j)``,
    which literal_eval reads as ``0 - 1j`` = ``(0-1j)`` (as in Mbpp/124, Mbpp/252); ``-1j`` is
    ``(-0.0-1j)``. Two sign combinations have no literal at all (``-0.0`` real with a positive
    imaginary part; a ``-0.0`` imaginary part with another real part): ValueError."""
    if z.real != z.real or z.imag != z.imag:
        raise ValueError("NaN has no literal form")
    re_text, im_text = literal_text(z.real), literal_text(abs(z.imag)).lstrip("-")
    for text in (repr(z), f"{im_text}j", f"-{im_text}j", f"({re_text}+{im_text}j)", f"({re_text}-{im_text}j)"):
        try:
            back = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        if type(back) is complex and _same_float(back.real, z.real) and _same_float(back.imag, z.imag):
            return text
    raise ValueError(f"{z!r}: no Python literal keeps the signs of its zero parts")


def argument_text(args: list | tuple) -> str:
    """``[[1, 2], 'a']`` -> ``"[1, 2], 'a'"``: one call's arguments as the verifier takes them."""
    return ", ".join(literal_text(a) for a in args)
