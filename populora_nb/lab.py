"""The notebooks open unmodified in JupyterLab: a contents manager that hands each notebook to the
browser with the ``language_info`` its kernel will report.

JupyterLab writes the kernel's ``language_info`` (which names Python's patch version, e.g. 3.11.7)
into a notebook's metadata as soon as the kernel connects; where it differs from the file's, the
notebook is marked modified and asks to be saved on close. The committed notebooks cannot carry every
machine's patch version, so ``make lab`` starts JupyterLab with this manager
(``--ServerApp.contents_manager_class=populora_nb.lab.NotebookContents``), which fills in the value
of this environment's ipykernel (the kernel the notebooks' ``python3`` kernelspec starts) when a
notebook is read. Nothing is written to disk; jupytext's pairing derives its manager from this one.
"""

from __future__ import annotations

from typing import Any

from ipykernel.ipkernel import IPythonKernel
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


def kernel_language_info() -> dict[str, Any]:
    """The ``language_info`` this environment's IPython kernel reports in its kernel_info reply."""
    return dict(IPythonKernel.language_info)


class NotebookContents(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, with each notebook's ``language_info`` as its kernel's."""

    async def get(
        self, path: Any, content: Any = True, type: Any = None, format: Any = None, require_hash: Any = False
    ):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            model["content"]["metadata"]["language_info"] = kernel_language_info()
        return model
