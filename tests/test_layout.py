"""The package's shape, checked so it cannot drift back: no import cycles (imports inside functions
counted), imports only downwards through the layers (`LAYERS`; the studies beside the package sit above
it, so `populora_nb` never imports `studies`), no package import inside a function,
a bare `import populora_nb` pulls in no model or optional backend, modules stay readable in size,
notebooks never reach into the test tree, and a non-editable install (no source checkout beside it) runs a step."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "populora_nb"
STUDIES = ROOT / "studies"
"""The studies beside the package (seed protocol, pilots, sweeps, retention): they import it, never the reverse."""
OURS = ("populora_nb", "studies", "benchmarks")
MAX_LINES = 420  # the "~400": a few lines of slack, not a second budget
LONG_REASON = "Long because"  # a module over MAX_LINES says why in its docstring, after these words


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class PackageImport:
    module: str
    """The populora_nb module (or package) imported."""
    line: int
    in_function: bool
    """Inside a function or method body: run on the call, not on import, and still an edge of the graph."""


def package_imports(path: Path, package: str = "") -> list[PackageImport]:
    """Every populora_nb or studies import of the file at `path`, at module level or inside a function, except
    under ``if TYPE_CHECKING:`` (never run). ``from pkg import name`` also counts ``pkg.name`` (it may
    be a module). `package` resolves relative imports (default: the package `path` lives in)."""
    tree = ast.parse(path.read_text())
    if not package:
        package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found: list[PackageImport] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + [base]).strip(".")
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        found.extend(PackageImport(n, node.lineno, in_function) for n in names if n.split(".")[0] in OURS)
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return found


def package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def modules() -> dict[str, Path]:
    return {module_name(p): p for folder in (PACKAGE, STUDIES) for p in folder.rglob("*.py")}


def import_graph(found: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """module -> the package modules it imports, at module level or inside functions."""
    found = modules() if found is None else found
    # Explicit edges only: `from populora_nb.verify import Verifier` is an edge to the package, but
    # the implicit run of a parent __init__ is not (a submodule never needs its parent's names).
    return {
        name: {
            i.module for i in package_imports(path, package_of(name, path)) if i.module in found and i.module != name
        }
        for name, path in found.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    return found


# The layers, lowest first: a module imports only from its own layer or below (STYLE.md rule 12).
# A name covers the module and everything under it; the longest name that covers a module decides.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # a leaf: the dataclasses and their checks, presets as data, the errors
    ("config", ("populora_nb.errors", "populora_nb.presets", "populora_nb.config")),
    # the sandbox the algorithm calls, and the Task it returns
    ("verifier", ("populora_nb.verify", "populora_nb.tasks")),
    # the paper's algorithm: pure, no model code, no records; `Policy` is its interface to a model
    (
        "algorithm",
        (
            "populora_nb.buffers",
            "populora_nb.prompts",
            "populora_nb.copies",
            "populora_nb.rewards",
            "populora_nb.rl",
            "populora_nb.matchmaking",
            "populora_nb.operators",
            "populora_nb.lowrank",
            "populora_nb.evolution",
            "populora_nb.policy",
            "populora_nb.stages",
            "populora_nb.solve_batches",
            "populora_nb.state",
            "populora_nb.step",
            "populora_nb.step_records",
        ),
    ),
    ("model", ("populora_nb.model",)),
    (
        "orchestration",
        (
            "populora_nb.records",
            "populora_nb.checkpoints",
            "populora_nb.loop",
            "populora_nb.probe",
            "populora_nb.warmup",
            "populora_nb.solver_warmup",
            "populora_nb.tracking",
        ),
    ),
    # read runs: curves, figures, benchmark scores, the report
    ("analysis", ("populora_nb.analysis", "populora_nb.evaluation")),
    # what a user calls: the CLI and the drivers that train, evaluate and then report
    (
        "entry points",
        (
            "populora_nb",
            "populora_nb.__main__",
            "populora_nb.experiment",
            "populora_nb.doctor",
            "populora_nb.lab",
        ),
    ),
    # beside the package: the studies, each a question about the method (python -m studies.NAME), and
    # the benchmarks and machine checks (benchmarks/: gpu_check, doctor_full)
    ("studies", ("studies", "benchmarks")),
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int:
    """The index of the layer whose longest name covers `module`; KeyError for a module in none."""
    covering = [
        (len(name), i)
        for i, (_, names) in enumerate(layers)
        for name in names
        if module == name or (module.startswith(name + ".") and name != "populora_nb")
    ]
    if not covering:
        raise KeyError(f"{module} is in no layer of tests/test_layout.py's LAYERS: add it to one")
    return max(covering)[1]


def upward_imports(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """`module (layer) -> dep (layer)` for every import of a module from a layer above its own."""
    out = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if layer_of(dep, layers) > layer_of(module, layers):
                here, there = layers[layer_of(module, layers)][0], layers[layer_of(dep, layers)][0]
                out.append(f"{module} ({here}) -> {dep} ({there})")
    return out


def test_no_import_cycles_counting_imports_inside_functions():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is still a cycle, and an
    import under TYPE_CHECKING is not an edge."""
    pkg = tmp_path / "populora_nb"
    pkg.mkdir()
    (pkg / "a.py").write_text("from populora_nb.b import x\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from populora_nb.c import y\n"
        "def f():\n    import populora_nb.a\n"
    )
    (pkg / "c.py").write_text("")
    found = {f"populora_nb.{n}": pkg / f"{n}.py" for n in "abc"}
    imports = package_imports(pkg / "b.py", "populora_nb")
    assert [(i.module, i.in_function) for i in imports] == [("populora_nb.a", True)]
    graph = import_graph(found)
    assert graph == {"populora_nb.a": {"populora_nb.b"}, "populora_nb.b": {"populora_nb.a"}, "populora_nb.c": set()}
    assert cycles(graph) == [["populora_nb.a", "populora_nb.b", "populora_nb.a"]]


def test_every_module_is_in_a_layer_and_imports_only_downwards():
    graph = import_graph()
    for module in graph:
        layer_of(module)  # raises, naming the module, if it is in no layer
    assert not upward_imports(graph), "imports from a layer above: " + "; ".join(upward_imports(graph))


def test_the_package_never_imports_the_studies():
    """`populora_nb` is what a user's run needs; the studies (`studies/`) and the benchmarks and machine
    checks (`benchmarks/`) import it and sit in the layer above the entry points, so no package module,
    the CLI included, imports one."""
    assert STUDIES.is_dir() and (STUDIES / "__init__.py").is_file()
    graph = import_graph()
    assert any(m.startswith("studies.") for m in graph), "the layout test does not see the studies"
    assert layer_of("studies.pilot") == len(LAYERS) - 1 and layer_of("studies.pilot") > layer_of("populora_nb.__main__")
    wrong = sorted(
        f"{module_name(path)} -> {i.module}"
        for path in PACKAGE.rglob("*.py")
        for i in package_imports(path)
        if i.module.split(".")[0] in ("studies", "benchmarks")
    )
    assert not wrong, f"the package imports the studies or benchmarks: {wrong}"
    # the check itself: the CLI or a plot importing a study is reported as an import from the layer above
    assert upward_imports({"populora_nb.__main__": {"studies.pilot"}}) == [
        "populora_nb.__main__ (entry points) -> studies.pilot (studies)"
    ]
    assert upward_imports({"populora_nb.analysis.plots": {"studies.protocol_series"}})
    assert not upward_imports({"studies.pilot": {"populora_nb.__main__", "populora_nb.analysis.liveness"}})
    assert upward_imports({"populora_nb.__main__": {"benchmarks.doctor_full"}})  # the first-contact check too


@pytest.mark.parametrize(
    "above",
    [
        "populora_nb.model.policy",
        "populora_nb.model",
        "populora_nb.records",
        "populora_nb.loop",
        "populora_nb.analysis.frames",
        "populora_nb.__main__",
    ],
)
def test_an_algorithm_module_importing_model_code_records_or_anything_above_fails(tmp_path, above):
    """The layer check itself, on a module written to break it: an algorithm module (`rewards`)
    importing model code, the records or anything above, even inside a function, is reported; the
    same import from the entry points' layer is not."""
    path = tmp_path / "rewards.py"
    path.write_text(f"def reward():\n    import {above}\n    return 0.0\n")
    graph = {"populora_nb.rewards": {i.module for i in package_imports(path, "populora_nb")}}
    assert upward_imports(graph) == [f"populora_nb.rewards (algorithm) -> {above} ({LAYERS[layer_of(above)][0]})"]
    assert not upward_imports({"populora_nb.experiment": {above}})
    assert not upward_imports({"populora_nb.rewards": {"populora_nb.config", "populora_nb.verify", "populora_nb.rl"}})


def test_no_package_import_inside_a_function():
    """An import inside a function is for an optional dependency (trueskill, vllm, unsloth, ray,
    ...), never a module of this package: such an import hides an edge of the graph from a reader
    (and used to hide cycles). Every module is checked."""
    inner = [
        f"{name}:{i.line} {i.module}"
        for name, path in sorted(modules().items())
        for i in package_imports(path)
        if i.in_function and i.module in modules()
    ]
    assert not inner, f"{len(inner)} package imports inside functions: " + "; ".join(inner)


def test_import_populora_nb_loads_no_model_or_optional_backend():
    heavy = ["torch", "transformers", "peft", "unsloth", "vllm", "ray", "math_verify", "matplotlib", "trueskill"]
    code = f"import sys, populora_nb; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_modules_stay_readable_in_size():
    too_long = []
    for path in sorted([*PACKAGE.rglob("*.py"), *STUDIES.rglob("*.py")]):
        n = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if n > MAX_LINES and LONG_REASON not in doc:
            too_long.append(f"{path.relative_to(ROOT)} ({n} lines)")
    assert not too_long, f"over {MAX_LINES} lines without '{LONG_REASON} ...' in the docstring: {too_long}"


def test_notebooks_never_import_from_the_test_tree():
    for nb in sorted((ROOT / "notebooks").glob("*.py")):
        text = nb.read_text()
        assert "fake_runs" not in text and "tests/fixtures" not in text, nb.name
        assert '"tests"' not in text and "sys.path" not in text, f"{nb.name} reaches into the repository"


@pytest.mark.slow
def test_a_non_editable_install_runs_a_tiny_step(tmp_path):
    """`pip install .` (not -e) into a fresh venv, run from a folder with no checkout: the package
    finds its own seed tasks (package data) and trains one tiny step. Dependencies come from the
    project venv through a path entry, so nothing is downloaded."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # a plain path line: the project venv's own .pth files (its editable populora_nb) are not run
    Path(site, "project_deps.pth").write_text(deps + "\n")
    build = tmp_path / "src"  # what `pip install .` needs from a checkout, as the working tree has it
    shutil.copytree(PACKAGE, build / "populora_nb", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, build / name)
    wheel = subprocess.run(  # built by the project venv's setuptools (a fresh venv's may predate bdist_wheel)
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path / "dist",
            build,
        ],
        capture_output=True,
        text=True,
    )
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    (whl,) = (tmp_path / "dist").glob("populora_nb-*.whl")
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", whl], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [python, "-c", "import populora_nb; print(populora_nb.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(env_dir)), f"imported {where}, not the installed copy"
    run = subprocess.run(
        [python, "-m", "populora_nb", "run", "--preset", "tiny", "--agent", "baseline", "--steps", "1"]
        + ["--out", str(work / "run")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (work / "run" / "metrics.jsonl").read_text().strip(), "the step wrote no metrics"


def test_what_a_user_reads_cites_the_design_in_the_repository():
    """The design document a user can open is docs/design.md; the package, notebooks and docs cite no
    design or style file that lives outside the repository."""
    root = Path(__file__).resolve().parent.parent
    assert (root / "docs" / "design.md").is_file()
    read = [*root.joinpath("populora_nb").rglob("*.py"), *root.joinpath("studies").rglob("*.py")]
    read += [*root.joinpath("notebooks").glob("*.py"), *root.joinpath("studies").glob("*.md")]
    read += [root / "README.md", root / "CONTRIBUTING.md", root / "pyproject.toml", *root.joinpath("docs").glob("*.md")]
    citing = [str(p.relative_to(root)) for p in read if re.search(r"(?<!docs/)\b(DESIGN|STYLE)\.md", p.read_text())]
    assert not citing, f"cite docs/design.md instead of a file outside the repository: {citing}"
