"""Fail when a notebook has outputs, lacks its py:percent pair, differs from it, or has no kernelspec.

The .py file is what reviewers read; the .ipynb is what users open. Both must say the same thing.
"""

import sys
from pathlib import Path

import jupytext
import nbformat

# Without a kernelspec JupyterLab opens the notebook with a "Select Kernel" dialog. The .py pair
# carries no metadata (jupytext.toml), so the .ipynb is where it lives.
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


def main() -> int:
    problems = []
    notebooks = sorted(Path("notebooks").glob("*.ipynb"))
    if not notebooks:
        problems.append("no notebooks found under notebooks/")
    for ipynb in notebooks:
        py = ipynb.with_suffix(".py")
        nb = nbformat.read(ipynb, as_version=4)
        if any(c.get("outputs") or c.get("execution_count") for c in nb.cells if c.cell_type == "code"):
            problems.append(f"{ipynb}: has outputs; run nbstripout {ipynb}")
        if nb.metadata.get("kernelspec") != KERNELSPEC:
            problems.append(f"{ipynb}: kernelspec must be {KERNELSPEC} (JupyterLab asks for a kernel otherwise)")
        if not py.exists():
            problems.append(f"{ipynb}: no paired {py}; run jupytext --set-formats ipynb,py:percent {ipynb}")
            continue
        if cells(nb) != cells(jupytext.read(py)):
            problems.append(f"{ipynb} and {py} differ; run jupytext --sync {py}")
        first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
        if first_code is None or "parameters" not in first_code.get("metadata", {}).get("tags", []):
            problems.append(f"{ipynb}: the first code cell must be tagged 'parameters' (papermill)")
    for p in problems:
        print("notebook check:", p)
    print(f"notebook check: {len(notebooks)} notebooks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
