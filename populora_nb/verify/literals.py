"""Literal values as text, both ways: parse model text without running it (the parent: inputs,
answers, outputs), write a program's result back as a literal (the sandboxed child), and write
benchmark inputs as literal text that reads back as exactly the value (`argument_text`: data is
stored and sent to the sandbox as text like ``"[1, 2], 'a'"``, never as live objects).

Standard library only, and imported by plain name (``import literals``) by the `sandbox` script as
well as by the parent as `populora_nb.verify.literals`, so both sides agree on what a value is.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

MAX_LITERAL_DEPTH = 50
"""Deeper nesting is not a literal here (catches cycles; the parser itself stops near 200)."""
_ATOMS = (int, float, complex, str, bytes, bool, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _node_value(node: ast.AST, depth: int = 0):
    import ast  # here, not at the top: the zygote never parses, and ast is 1.7 MB every fork copies

    if depth > MAX_LITERAL_DEPTH:
        raise ValueError("literal nested too deeply")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_node_value(e, depth + 1) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if k is not None]
        if len(keys) != len(node.keys):
            raise ValueError("dict unpacking is not a literal")
        return {_node_value(k, depth + 1): _node_value(v, depth + 1) for k, v in zip(keys, node.values)}
    # frozenset has no literal syntax; accept exactly the form repr() writes: frozenset({...}).
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "frozenset"
        and not node.keywords
        and len(node.args) <= 1
    ):
        if node.args and not isinstance(node.args[0], ast.Set):
            raise ValueError("frozenset(...) must wrap a set display")
        return frozenset(_node_value(node.args[0], depth + 1)) if node.args else frozenset()
    value = ast.literal_eval(node)  # constants, signed numbers, complex sums, set()
    if value is Ellipsis:
        raise ValueError("Ellipsis is not a supported literal")
    return value


def _parse(text: str) -> ast.AST:
    import ast

    with warnings.catch_warnings():  # "invalid escape sequence" in model text is not ours to print
        warnings.simplefilter("ignore")
        return ast.parse(text, mode="eval").body


def parse_literal(text: str):
    """Value of one literal (int, float, complex, str, bytes, bool, None, containers, frozenset).

    Raises ValueError for anything else. Only ``ast`` parsing and ``ast.literal_eval`` are used:
    nothing in `text` is executed.
    """
    try:
        return _node_value(_parse(text.strip()))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a literal ({type(e).__name__})") from None


def parse_arguments(text: str) -> tuple[tuple, dict]:
    """(args, kwargs) of an argument list written as literal text, e.g. ``"[1, 2], 'a', k=3"``.

    Parsed as the arguments of a call node, so ``'zz') or (True`` cannot close the list early.
    """
    import ast

    try:
        call = _parse(f"_({text})")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise ValueError(f"not an argument list ({type(e).__name__})") from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_"):
        raise ValueError("not a single argument list")
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError("*args / **kwargs are not literals")
    try:
        return tuple(_node_value(a) for a in call.args), {k.arg: _node_value(k.value) for k in call.keywords}
    except (ValueError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"argument is not a literal ({type(e).__name__})") from None


def outputs_equal(gold, answer) -> bool:
    """Does an answer's value equal the gold output's? AZR's rule: Python ``==`` on the two values
    (its `PythonExecutor.eval_output_prediction` tests ``eval(gold_output) == eval(agent_output)``,
    `eval_input_prediction` runs ``{gold_output} == f({agent_input})``), so ``1``, ``1.0`` and
    ``True`` are equal, and ``[1, (2, True)]`` equals ``[1.0, (2, 1)]``; ``(1,)`` and ``[1]`` or
    ``'1'`` and ``1`` are not. Safe because both sides are parsed literals of exact built-in types
    (`parse_literal`; program results cross the sandbox only as `literal_repr`), so no ``__eq__`` a
    model wrote runs. nan never reaches here: it has no literal form, so a task whose output is nan
    is invalid and a run that returns nan fails (in AZR both never pass either: ``nan == x`` is
    False, and a gold written ``nan`` is a NameError in its template). One difference is left: AZR
    evaluates an answer such as ``[0] * 3`` or ``f(1)``; here an answer must be a literal.
    """
    return gold == answer


def values_equal(a, b) -> bool:
    """Equality of parsed literals that also requires equal types, recursively (1 != 1.0 != True):
    what tells two inputs or two runs of one program apart (`rules`); answers are judged with
    AZR's looser `outputs_equal`.

    Set members and dict keys compare with ``==`` (hashing has already merged 1 and True there).
    Floats compare with ``==`` too, as evalplus and AZR do: ``0.0`` and ``-0.0`` are equal (two
    runs giving ``0.0`` and ``-0.0`` agree); nan never reaches here (it is not a literal).
    """
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return a == b


def _check_literal(v, depth: int) -> None:
    """Raise TypeError unless `v` is a finite literal of exact built-in types, not nested too deep."""
    t = type(v)  # exact types: a subclass could override __eq__ or __repr__
    if t in _ATOMS:
        if t in (float, complex) and v - v != 0:
            raise TypeError("nan/inf have no literal form")
        return
    if t not in _CONTAINERS:
        raise TypeError(f"{t.__name__} is not a literal type")
    if depth > MAX_LITERAL_DEPTH:
        raise TypeError("nested too deeply (or cyclic)")
    for item in itertools.chain.from_iterable(v.items()) if t is dict else v:  # keys and values
        _check_literal(item, depth + 1)


def literal_repr(value, max_chars: int) -> tuple[str, str]:
    """(status, repr or reason) of a program result: exact literal types, finite, within the cap."""
    try:
        _check_literal(value, 0)
    except (TypeError, RecursionError) as e:
        return "output_not_literal", str(e)
    try:
        text = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits
        return "output_too_long", "int too large to print"
    if len(text) > max_chars:
        return "output_too_long", f"{len(text)} > {max_chars} characters"
    return "ok", text


# ---------------------------------------------------------------- data as literal text (benchmark inputs)
def literal_text(value) -> str:
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
    import ast

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
