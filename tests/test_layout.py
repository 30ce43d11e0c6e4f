"""The package's shape, checked so it cannot drift back: no import cycles, a bare `import populora_nb`
pulls in no model or optional backend, modules stay readable in size, notebooks never reach into the
test tree, and a non-editable install (no source checkout beside it) runs a step."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "populora_nb"
MAX_LINES = 420  # the "~400": a few lines of slack, not a second budget
LONG_REASON = "Long because"  # a module over MAX_LINES says why in its docstring, after these words


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, package: str = "") -> set[str]:
    """populora_nb modules imported when `path` is imported: module-level statements only (a
    function-level import is deliberate laziness; `if TYPE_CHECKING:` blocks never run). `package`
    resolves relative imports (default: the package `path` lives in)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    if not package:
        package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Try | ast.If):
                visit(node.body)
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("populora_nb"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                if base.startswith("populora_nb"):
                    found.add(base)
                    found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`

    visit(tree.body)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # Explicit edges only: `from populora_nb.verify import Verifier` is an edge to the package, but
        # the implicit run of a parent __init__ is not (a submodule never needs its parent's names).
        graph[name] = {d for d in top_level_imports(path) if d in modules and d != name}
    return graph


def test_no_import_cycles():
    graph = import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The checker itself: two modules importing each other at module level are reported."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from populora_nb.b import x\n")
    b.write_text("import populora_nb.a\nif TYPE_CHECKING:\n    from populora_nb.c import y\n")
    assert top_level_imports(a, "populora_nb") == {"populora_nb.b", "populora_nb.b.x"}
    assert top_level_imports(b, "populora_nb") == {"populora_nb.a"}  # TYPE_CHECKING imports do not count


def test_import_populora_nb_loads_no_model_or_optional_backend():
    heavy = ["torch", "transformers", "peft", "unsloth", "vllm", "ray", "math_verify", "matplotlib", "trueskill"]
    code = f"import sys, populora_nb; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_modules_stay_readable_in_size():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
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
