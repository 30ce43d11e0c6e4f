"""Errors that blame the user's input, not the code: a config value, a path, a data file.

The CLI (`__main__`) prints any of these as one line and exits 2; every other exception is a bug
and keeps its traceback. Each is a ValueError, so library callers that catch ValueError still do.
"""

from __future__ import annotations


class UserInputError(ValueError):
    """A value, path or file the user supplied is wrong; the message names it and says the fix."""


class ConfigError(UserInputError):
    """A config value is unknown, of the wrong type, or out of range (raised by `populora_nb.config`)."""


class DataFileError(UserInputError):
    """A data file the user pointed at (seed tasks, benchmark JSONL) is empty or malformed; the
    message names the file, and the line when one line is at fault."""


class PathNotFoundError(UserInputError, FileNotFoundError):
    """A file or folder the user named does not exist (still a FileNotFoundError for callers)."""


class CorruptRunError(UserInputError):
    """A run directory holds damaged or missing state. The message is one line: ``what`` names the
    file and its fault, ``fix`` how to recover."""

    def __init__(self, what: str, fix: str = "restore the file, or start the run in a new --out") -> None:
        self.what, self.fix = what, fix
        super().__init__(f"{what}; {fix}")


def one_line(e: BaseException) -> str:
    """``Type: the message's first line``, 200 characters at most: the cause inside a file's one-line error."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]
