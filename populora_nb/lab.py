"""The notebooks open unmodified in JupyterLab: ``make lab`` starts it with `NotebookContents`, which
hands each notebook to the browser with the ``language_info`` of this environment's ipykernel, so a
kernel reporting another Python patch version than the committed file's does not mark it modified.
Nothing is written to disk; jupytext's pairing derives its manager from this one.
"""

from __future__ import annotations

from typing import Any

from ipykernel.ipkernel import IPythonKernel
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


class NotebookContents(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, with each notebook's ``language_info`` as its kernel's."""

    async def get(
        self, path: Any, content: Any = True, type: Any = None, format: Any = None, require_hash: Any = False
    ):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            # what this environment's IPython kernel reports in its kernel_info reply
            model["content"]["metadata"]["language_info"] = dict(IPythonKernel.language_info)
        return model
