"""HumanEval+ and MBPP+ with no benchmark folder, as evalplus users get them (data/README.md):
evalplus' release files (HumanEval+ v0.1.10, MBPP+ v0.2.0, the versions our scorer is checked
against) from the local copy ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` names, else
evalplus' own cache, parsed by our loader (``evalplus.data`` imports ``datasets``, which an
evalplus installed without dependencies lacks). The one place those variables are read.
"""

from __future__ import annotations

import gzip
import os
import types
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from populora_nb.errors import DataFileError
from populora_nb.records import write_atomic

GITHUB = "https://github.com/evalplus"
"""Where evalplus publishes its release files (``evalplus.data.utils.get_dataset_metadata``)."""


@dataclass(frozen=True)
class Release:
    """One evalplus release file: its name, the version our scorer is checked against, and the
    variable evalplus reads for a local copy."""

    name: str
    version: str
    override: str


RELEASES: Mapping[str, Release] = types.MappingProxyType(
    {
        "humanevalplus": Release("HumanEvalPlus", "v0.1.10", "HUMANEVAL_OVERRIDE_PATH"),
        "mbppplus": Release("MbppPlus", "v0.2.0", "MBPP_OVERRIDE_PATH"),
    }
)


class ReleaseUnavailable(DataFileError, FileNotFoundError):
    """No local copy, not in the cache, and the download failed: the message says what to set."""


def cache_dir() -> Path:
    """evalplus' cache folder, as ``appdirs.user_cache_dir("evalplus")`` names it on this system."""
    try:
        from appdirs import user_cache_dir  # evalplus' own dependency: the same folder it uses
    except ImportError:  # Linux's answer without appdirs
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalplus"
    return Path(user_cache_dir("evalplus"))


def cache_path(benchmark: str) -> Path:
    """Where evalplus keeps the release file of ``benchmark`` (uncompressed JSONL)."""
    r = RELEASES[benchmark]
    return cache_dir() / f"{r.name}-{r.version}.jsonl"


def cached_release(benchmark: str) -> Path | None:
    """The local copy the override variable names (it must exist), else the cached release file,
    else None. Never downloads."""
    r = RELEASES[benchmark]
    named = os.environ.get(r.override)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ReleaseUnavailable(f"${r.override}={named} is not a file; point it at {r.name}.jsonl(.gz)")
        return path
    cached = cache_path(benchmark)
    return cached if cached.is_file() else None


def fetch_release(benchmark: str, base_url: str | None = None, timeout_s: float = 30.0) -> Path:
    """`cached_release`, or the release file downloaded into evalplus' cache (gunzipped, written
    whole or not at all). Offline: `ReleaseUnavailable` in one line naming what to set."""
    found = cached_release(benchmark)
    if found is not None:
        return found
    r, target = RELEASES[benchmark], cache_path(benchmark)
    release = f"{r.name.lower()}_release/releases/download/{r.version}/{r.name}.jsonl.gz"
    url = f"{(base_url or GITHUB).rstrip('/')}/{release}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            write_atomic(target, gzip.decompress(response.read()))
    except (urllib.error.URLError, OSError, EOFError, gzip.BadGzipFile) as e:
        reason = getattr(e, "reason", None) or e
        raise ReleaseUnavailable(
            f"{r.name} {r.version} is not in {target} and {url} could not be fetched ({reason}); set "
            f"{r.override}=/path/to/{r.name}.jsonl.gz, or POPULORA_DATA (--set eval.data_dir=...) to a benchmark folder"
        ) from None
    return target
