"""`make lab`'s contents manager: a notebook reaches the browser with its kernel's language_info, so
JupyterLab does not mark it modified when the kernel connects (tests/test_browser.py checks that in Chromium)."""

import asyncio
import json
import shutil
from pathlib import Path

from ipykernel.ipkernel import IPythonKernel

from populora_nb.lab import NotebookContents

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def test_a_notebook_is_read_with_its_kernels_language_info(tmp_path):
    kernel_language_info = dict(IPythonKernel.language_info)  # what the kernel reports in kernel_info
    shutil.copy(NOTEBOOKS / "02_azr_baseline.ipynb", tmp_path)
    committed = json.loads((tmp_path / "02_azr_baseline.ipynb").read_text())["metadata"]["language_info"]
    assert committed != kernel_language_info  # the committed file cannot name this machine's patch version
    cm = NotebookContents(root_dir=str(tmp_path))
    model = asyncio.run(cm.get("02_azr_baseline.ipynb"))
    assert model["content"]["metadata"]["language_info"] == kernel_language_info
    assert kernel_language_info["version"].startswith("3.")
    # the file itself is untouched, and a listing (no content) is passed through
    assert json.loads((tmp_path / "02_azr_baseline.ipynb").read_text())["metadata"]["language_info"] == committed
    assert asyncio.run(cm.get("02_azr_baseline.ipynb", content=False))["content"] is None
