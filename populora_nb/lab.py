"""The notebooks open unmodified in JupyterLab: ``make lab`` starts it with `NotebookContents`, which
hands each notebook to the browser with the ``language_info`` of this environment's ipykernel, so a
kernel reporting another Python patch version than the committed file's does not mark it modified.
Nothing is written to disk; jupytext's pairing derives its manager from this one.
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
