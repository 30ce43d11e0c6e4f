"""The verifier's static policy: what model code may import, call and touch, checked on the AST in
the parent before anything runs (PopuLoRA §3; AZR's checks, hardened).

An allow-list of modules, AZR's banned modules, banned builtins, no dunder attribute access, no
frame traversal, by-name attribute calls only with constant non-dunder names. `TASK_POLICY` is for
proposed tasks, `BENCHMARK_POLICY` for benchmark code and solutions to it. The sandbox
(`sandbox.py`) enforces the same module list again at run time; the `Verifier` runs both.

This is a fast first filter that gives a clear reason, never the boundary: Python has too many
routes from an allowed object to a dangerous one to close them all by syntax. The boundary is the
OS layer (`isolation.py`), which holds with this filter switched off (tests/test_isolation.py).
"""

from __future__ import annotations

import ast
import importlib
import warnings
from dataclasses import dataclass
from types import CodeType, MappingProxyType, ModuleType

AZR_BANNED_MODULES = frozenset(
    "logging random multiprocessing pebble subprocess threading datetime time hashlib hmac bcrypt calendar".split()
)
"""AZR's list (azr code_utils/checks.py), kept as an explicit ban even where an allow-list is wider."""
SYSTEM_MODULES = frozenset(
    "os sys shutil socket signal ctypes importlib io pathlib tempfile builtins gc inspect pickle marshal".split()
)
TASK_MODULES = frozenset(
    "math cmath collections collections.abc itertools functools re string heapq bisect operator copy "
    "typing fractions decimal statistics numbers array enum abc base64 binascii zlib struct json "
    "textwrap unicodedata difflib".split()
)
"""Modules that real AZR tasks import (see tests/test_verifier.py's corpus check), nothing else.
Not `dataclasses`: no seed task uses it and it pulls in `inspect` and `ast` (2.4 MB that every fork
copies); not `queue`: it imports `threading`, whose after-fork hook doubles the cost of a fork."""
NUMPY_MODULES = frozenset(
    "numpy numpy.linalg numpy.random numpy.fft numpy.polynomial numpy.ma numpy.lib numpy.lib.scimath "
    "numpy.dtypes numpy.exceptions numpy.matrixlib numpy.version".split()
)
"""numpy and the public submodules ``import numpy`` binds (np.linalg, np.random...): preloaded by
the zygote from site-packages, as the empty root has no files to import later. Not numpy.ctypeslib,
numpy.testing, numpy.f2py (ctypes, subprocess) nor the private numpy._core."""
BENCHMARK_MODULES = (
    TASK_MODULES
    | NUMPY_MODULES
    | frozenset(
        "sys io random datetime calendar time hashlib types contextlib dataclasses pprint reprlib "
        "graphlib weakref keyword warnings _strptime queue ast html secrets locale sre_constants".split()
    )
)
"""Benchmark code and solutions to it (HumanEval+, MBPP+, LiveCodeBench stdin programs): what
correct model solutions import in practice (numpy, queue, ast...). evalplus itself has no
allow-list (its `reliability_guard` stubs os/shutil/subprocess functions instead); docs/benchmarks.md lists
the modules a solution may import here and what stays banned (os, subprocess, pickle...)."""
FRAME_ATTRIBUTES = frozenset(
    "gi_frame gi_code gi_yieldfrom cr_frame cr_code cr_await ag_frame ag_code f_back f_globals "
    "f_locals f_builtins f_code tb_frame tb_next".split()
)
"""Non-dunder routes from any generator or traceback to the harness's globals."""
REFLECTIVE_ATTRIBUTES = frozenset(
    {"modules", "_getframe", "get_type_hints", "Formatter", "get_field", "f_builtins", "_OS"}
)
"""Routes found by an adversarial round: sys.modules through a module's `sys`,
string annotations that get_type_hints evaluates, Formatter field lookups returning objects."""
BANNED_NAMES = frozenset(
    {"open", "eval", "exec", "compile", "globals", "locals", "vars", "breakpoint", "help", "exit", "quit", "memoryview"}
)
BY_NAME_CALLS = frozenset({"getattr", "setattr", "delattr", "attrgetter", "methodcaller"})
"""Callables that reach attributes by string: allowed only with a constant, non-dunder name."""
SAFE_DUNDERS = frozenset(
    "__init__ __name__ __doc__ __len__ __iter__ __next__ __contains__ __getitem__ __setitem__ "
    "__delitem__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __repr__ __str__ __add__ __sub__ "
    "__mul__ __bool__".split()
)

INVALID_REASONS = MappingProxyType(
    {
        "syntax": "the program does not parse",
        "no_f": "no top-level `def f` (or the entry point is not callable)",
        "program_too_long": "the program exceeds policy.max_program_chars",
        "banned_import": "imports a module outside policy.allowed_modules, or one AZR bans",
        "banned_call": "uses eval/exec/open/... or reaches attributes by a non-constant or dunder name",
        "banned_attribute": "dunder or frame attribute access, or a module reached through another",
        "no_message": "code_f without a message for the solver",
        "too_few_inputs": "code_f with fewer than policy.min_code_f_inputs inputs",
        "wrong_input_count": "code_f with another number of inputs than the prompt asked for (tasks.code_f_inputs)",
        "duplicate_inputs": "code_f with two equal inputs "
        "(a hidden pair that repeats a shown one lets a lookup table pass)",
        "input_too_long": "an input exceeds policy.max_input_chars",
        "input_not_literal": "an input is not a literal argument list",
        "runtime_error": "the program raised (while loading or on an input)",
        "timeout": "over the wall-clock or CPU-time limit",
        "memory": "over the address-space limit (MemoryError)",
        "crash": "the process died without reporting (os._exit, a signal)",
        "output_not_literal": "a result is not a finite int/float/complex/str/bytes/bool/None or container",
        "output_too_long": "a result's repr exceeds policy.max_output_chars (rejected, never truncated)",
        "nondeterministic": "the two runs (different PYTHONHASHSEED) disagree, "
        "or f answered two calls in one run differently",
        "sandbox_error": "the verifier itself failed (not the model's fault)",
    }
)
VERDICTS = ("pass", "wrong", "answer_not_literal", "answer_too_long") + tuple(INVALID_REASONS)


@dataclass(frozen=True)
class SandboxPolicy:
    """What model code may do; one policy per `Verifier` (its zygotes preload these modules)."""

    allowed_modules: frozenset = TASK_MODULES
    """Importable modules; anything else (and anything in `banned_modules`) is banned_import."""
    banned_modules: frozenset = AZR_BANNED_MODULES | SYSTEM_MODULES
    banned_names: frozenset = BANNED_NAMES
    """Builtins a program may not even mention (``g = eval`` would dodge a call check)."""
    allowed_dunder_attributes: frozenset = frozenset()
    """Dunder attributes a program may use (``x.__init__``); tasks need none."""
    banned_attributes: frozenset = FRAME_ATTRIBUTES | REFLECTIVE_ATTRIBUTES
    """Non-dunder attribute names a program may not use, directly or through getattr & co."""
    max_program_chars: int = 20_000
    max_input_chars: int = 2_000
    max_output_chars: int = 1_000
    """repr length cap: AZR truncates outputs to 400 chars; here longer outputs are rejected."""
    max_stdout_chars: int = 1 << 20
    """run_script_many's stdout cap; validation discards printed text."""
    min_code_f_inputs: int = 2
    """At least one shown and one hidden pair (AZR writes 10: 5 shown, 5 hidden)."""
    disable_dangerous: bool = True
    """Stub os/posix/shutil/io/builtins functions inside the child (defence in depth)."""
    guard_imports: bool = True
    """Refuse imports outside `allowed_modules` at run time too (defence in depth)."""

    def __post_init__(self) -> None:
        if min(self.max_program_chars, self.max_input_chars, self.max_output_chars) <= 0:
            raise ValueError("SandboxPolicy caps must be positive")
        if self.min_code_f_inputs < 2:
            raise ValueError("min_code_f_inputs must be >= 2 so code_f has shown and hidden pairs")

    def module_allowed(self, name: str) -> bool:
        """May a program import `name` (allow-listed and not banned)?"""
        return name in self.allowed_modules and name not in self.banned_modules


TASK_POLICY = SandboxPolicy()
BENCHMARK_POLICY = SandboxPolicy(
    allowed_modules=BENCHMARK_MODULES,
    banned_modules=frozenset(
        "subprocess multiprocessing pebble socket ctypes os shutil signal importlib pathlib tempfile pickle".split()
    ),
    banned_names=BANNED_NAMES - {"open", "exit", "quit"},  # scripts end with exit(); open(0) reads stdin
    allowed_dunder_attributes=SAFE_DUNDERS,
    max_program_chars=100_000,
    max_input_chars=1_000_000,
    max_output_chars=1_000_000,
)
"""Trusted-ish benchmark code and model solutions to it: more modules (sys for stdin, random,
time...), ``super().__init__`` and friends, same isolation. Threads still cannot start (no new
processes), and in call mode ``open`` is stubbed; in script mode only ``open(0)`` works (stdin)."""


@dataclass(frozen=True)
class Invalid:
    """Why a proposal was rejected: `reason` is a key of INVALID_REASONS (the verifier's), or the loop's
    `copies.COPY_OF_REFERENCE` / `copies.REPEAT_OF_EARLIER_TASK` when `tasks.reject_copies` / `reject_repeats` is on."""

    reason: str
    detail: str = ""


# ---------------------------------------------------------------- static policy (parent)
def _submodule(base: str, name: str) -> str | None:
    """The name of the module that attribute `name` of the real module `base` is, if it is one."""
    try:
        value = getattr(importlib.import_module(base), name, None)
    except ImportError:
        return None
    return value.__name__ if isinstance(value, ModuleType) else None


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def compile_program(
    program: str, policy: SandboxPolicy = TASK_POLICY, entry_point: str | None = "f"
) -> CodeType | Invalid:
    """Check `program` against the policy and compile it (compiling runs nothing); or say why not."""
    if len(program) > policy.max_program_chars:
        return Invalid("program_too_long", f"{len(program)} > {policy.max_program_chars}")
    try:
        with warnings.catch_warnings():  # SyntaxWarnings about model code are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(program)
            invalid = _policy_violation(tree, policy, entry_point)
            return invalid if invalid else compile(tree, "<program>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return Invalid("syntax", f"{type(e).__name__}: {e}"[:300])


def _policy_violation(tree: ast.Module, policy: SandboxPolicy, entry_point: str | None) -> Invalid | None:
    nodes = list(ast.walk(tree))  # walked once: the walk costs more than every check below
    modules: dict[str, str] = {}  # local name -> module it is bound to by an import
    call_targets = set()
    for node in nodes:
        if type(node) is ast.Import or type(node) is ast.ImportFrom:
            invalid = _import_violation(node, policy, modules)
            if invalid:
                return invalid
        elif type(node) is ast.Name:
            if node.id in policy.banned_names:
                return Invalid("banned_call", node.id)
            if _dunder(node.id) and node.id != "__name__":
                return Invalid("banned_attribute", node.id)
        elif type(node) is ast.Attribute:
            if node.attr in policy.banned_attributes or (
                _dunder(node.attr) and node.attr not in policy.allowed_dunder_attributes
            ):
                return Invalid("banned_attribute", node.attr)
        elif type(node) is ast.Call:
            call_targets.add(id(node.func))
    for node in nodes:  # second pass: needs every import alias and call
        if type(node) is ast.Call:
            func = node.func
            name = func.id if type(func) is ast.Name else func.attr if type(func) is ast.Attribute else ""
            if name in BY_NAME_CALLS:
                consts = node.args[1:2] if name in ("getattr", "setattr", "delattr") else node.args
                if (
                    not consts
                    or node.keywords
                    or not all(
                        type(a) is ast.Constant
                        and type(a.value) is str
                        and not any(_dunder(p) or p in policy.banned_attributes for p in a.value.split("."))
                        for a in consts
                    )
                ):
                    return Invalid("banned_call", f"{name} with a non-constant, dunder or frame name")
                base = _module_of(node.args[0], modules) if name in ("getattr", "setattr", "delattr") else None
                attr = node.args[1].value if base and isinstance(node.args[1], ast.Constant) else None
                sub = _submodule(base, attr) if base and isinstance(attr, str) else None  # a str, checked above
                if sub and not policy.module_allowed(sub):
                    return Invalid("banned_attribute", f"getattr({base}, ...) is module {sub}")
        elif type(node) is ast.Name and node.id in BY_NAME_CALLS and id(node) not in call_targets:
            return Invalid("banned_call", f"{node.id} used as a value")
        elif type(node) is ast.Attribute and modules and (base := _module_of(node.value, modules)):
            sub = _submodule(base, node.attr)
            if sub and not policy.module_allowed(sub):
                return Invalid("banned_attribute", f"{base}.{node.attr} is module {sub}")
    if entry_point is not None and not any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point for n in tree.body
    ):
        return Invalid("no_f", f"no top-level def {entry_point}")
    return None


def _import_violation(
    node: ast.Import | ast.ImportFrom, policy: SandboxPolicy, modules: dict[str, str]
) -> Invalid | None:
    """Check one import against the policy and record the module names it binds in `modules`."""
    module = node.module if isinstance(node, ast.ImportFrom) else None
    names = [a.name for a in node.names] if type(node) is ast.Import else [module or ""]
    for name in names:
        if getattr(node, "level", 0) or not policy.module_allowed(name):
            why = "banned" if name.split(".")[0] in policy.banned_modules else "not allow-listed"
            return Invalid("banned_import", f"{name or '.'} ({why})")
    for alias in node.names:
        if alias.name in policy.banned_attributes:  # from typing import get_type_hints
            return Invalid("banned_import", f"{alias.name} from {module}")
        if type(node) is ast.Import:
            target = alias.name if alias.asname else alias.name.split(".")[0]
            modules[alias.asname or target] = target
            continue
        sub = _submodule(module or "", alias.name)  # `from typing import sys`
        if sub:
            if not policy.module_allowed(sub):
                return Invalid("banned_import", f"{sub} via {module}")
            modules[alias.asname or alias.name] = sub
    return None


def _module_of(node: ast.AST, modules: dict[str, str]) -> str | None:
    """Module name an expression like ``collections.abc`` denotes, via import aliases; else None."""
    if isinstance(node, ast.Name):
        return modules.get(node.id)
    if isinstance(node, ast.Attribute) and (base := _module_of(node.value, modules)):
        return _submodule(base, node.attr)
    return None
