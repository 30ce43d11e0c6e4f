"""The zygote's one-time lockdown, before it serves any run: dangerous functions replaced by stubs,
imports by model code refused outside the policy, capped output streams, stdin for scripts.

Defence in depth only: the OS layer (`isolation`) is the boundary. Standard library only, imported
by plain name (``import lockdown``) by the `sandbox` script, where this runs.
"""

from __future__ import annotations

import builtins
import io
import sys
from types import ModuleType, SimpleNamespace

_OS_DISABLED = tuple(
    "system popen fork forkpty kill killpg abort _exit remove unlink rmdir removedirs rename renames "
    "replace mkdir makedirs mkfifo mknod link symlink chmod lchmod fchmod chown lchown fchown truncate "
    "ftruncate utime chdir fchdir chroot open pipe putenv unsetenv setuid setgid setreuid setregid execv "
    "execve execl execle execlp execlpe execvp execvpe spawnl spawnle spawnlp spawnlpe spawnv spawnve "
    "spawnvp spawnvpe posix_spawn posix_spawnp register_at_fork".split()
)
_DISABLED = {
    "os": _OS_DISABLED,
    "posix": _OS_DISABLED,
    "io": ("open", "open_code", "FileIO"),
    "_io": ("open", "open_code", "FileIO"),
    "builtins": ("open", "breakpoint", "help", "input"),
    "shutil": ("rmtree", "move", "copy", "copy2", "copyfile", "copytree", "chown", "make_archive", "unpack_archive"),
}
# codecs load lazily, which the empty root forbids: the zygote imports these first (all ~120: 3.5 MB)
CODECS = tuple(
    "ascii latin_1 utf_8_sig utf_16 utf_16_le utf_16_be utf_32 utf_32_le utf_32_be utf_7 cp1252 cp437 "
    "mac_roman iso8859_15 charmap idna punycode raw_unicode_escape unicode_escape hex_codec base64_codec "
    "rot_13".split()
)


def _refuse(name: str):
    def refused(*args, **kwargs):  # must accept whatever the replaced function accepted
        raise PermissionError(f"{name} is disabled in the sandbox")

    return refused


def disable_dangerous() -> None:
    """Replace functions that write, spawn or signal with stubs that raise, and make socket and ssl
    unimportable: a program that slips past the static policy still finds them gone."""
    for module_name, names in _DISABLED.items():
        module = sys.modules.get(module_name)
        for name in names if module is not None else ():
            if hasattr(module, name):
                setattr(module, name, _refuse(name))
    for name in ("socket", "_socket", "ssl", "_ssl"):  # None in sys.modules makes import fail
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" marker


def guard_imports(allowed: frozenset, current: SimpleNamespace) -> None:
    """Refuse, at run time, imports by model code (whose globals are ``current.globals``) of modules
    outside `allowed`, also when reached through ``from x import module``."""
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if globals is not current.globals:  # the standard library's own imports pass through
            return real_import(name, globals, locals, fromlist, level)
        if level != 0 or name not in allowed:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        module = real_import(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            value = getattr(module, item, None)
            if isinstance(value, ModuleType) and value.__name__ not in allowed:
                raise ImportError(f"import of {value.__name__!r} is not allowed in the sandbox")
        return module

    builtins.__import__ = guarded_import


class Sink(io.RawIOBase):
    """Write-only stream keeping the first `cap` bytes; later writes only set `overflow`."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap, self.data, self.overflow = cap, bytearray(), False

    def writable(self) -> bool:
        """Always: this stream only takes writes."""
        return True

    def write(self, b) -> int:
        """Keep what fits under the cap; report every byte as written, so the program never blocks."""
        room = self.cap - len(self.data)
        self.overflow = self.overflow or len(b) > room
        if room > 0:
            self.data += bytes(b[:room])
        return len(b)


def stdin_opener(data: bytes):
    """`open` for scripts: ``open(0)`` (a competitive-programming idiom) reads stdin, nothing else opens."""

    def open_stdin(file, mode="r", *args, **kwargs):
        if file != 0 or any(c in mode for c in "wax+"):
            raise PermissionError("open is disabled in the sandbox; only open(0) reads stdin")
        return io.BytesIO(data) if "b" in mode else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")

    return open_stdin


def text_stream(sink: Sink) -> io.TextIOWrapper:
    """A text stream (what ``sys.stdout`` must be) writing into `sink`."""
    return io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8", errors="replace")


class _KeepRandomState:
    """Holds the replacement code of ``random.Random.seed`` (see `skip_reseed_after_fork`)."""

    def seed(self, a=None, version=2, _original=None):
        # the bare name gives this code the one free variable (the __class__ cell) random.Random.seed has
        __class__  # type: ignore[name-defined]  # noqa: B018
        if a is not None:  # explicit seeding still works; the after-fork reseed does nothing
            _original(self, a, version)


def skip_reseed_after_fork() -> None:
    """`random` reseeds from urandom in every forked child (~35 page faults per run); children
    here start from the zygote's state instead, which also makes their runs reproducible."""
    random = sys.modules.get("random")
    if random is not None:
        seed = random.Random.seed
        original = type(seed)(seed.__code__, seed.__globals__, "seed", seed.__defaults__, seed.__closure__)
        seed.__code__, seed.__defaults__ = _KeepRandomState.seed.__code__, (None, 2, original)
