"""The reply format between a sandboxed child and the parent: the child writes one JSON line per
input (`json_line`), the zygote caps the bytes (`reply_cap`), the parent decodes them as untrusted
data (`decode_run`).

Standard library only, and imported by plain name (``import protocol``) by the `sandbox` script as
well as by the parent as `populora_nb.verify.protocol`, so both sides use the same caps and statuses.
"""

from __future__ import annotations

import json
import signal
from typing import Any

RUN_STATUSES = tuple(
    "ok no_f runtime_error timeout memory output_not_literal output_too_long crash not_run nondeterministic".split()
)
"""Per-input statuses of a run; "ok" is the only success."""


_QUOTE = json.encoder.encode_basestring_ascii  # C; json.dumps costs ~80 page faults per child


def json_line(obj: dict) -> bytes:
    """One result as a JSON line for the parent; values are str, float or bool (what the harness writes)."""
    fields = (
        f'"{k}": {_QUOTE(v) if type(v) is str else repr(v) if type(v) is float else "true" if v else "false"}'
        for k, v in obj.items()
    )
    return ("{" + ", ".join(fields) + "}\n").encode("ascii")


def reply_cap(mode: str, n: int, max_output_chars: int, stdout_cap: int) -> int:
    """Most bytes a run's reply may hold: what the child's harness can write for `n` inputs (a JSON-escaped
    char is at most 12 bytes), plus stdout in script mode only. The zygote reads no more."""
    return max(1, n) * (12 * max_output_chars + 2048) + (12 * stdout_cap if mode == "script" else 0) + 4096


def decode_run(
    data: bytes, n: int, why: str, signal_number: int, exit_code: int, max_output_chars: int, stdout_cap: int
) -> list[dict]:
    """Per-input results from a child's raw lines (untrusted) and how the process ended.

    The lines are data the program could have written itself (it runs in the same process as
    the harness): each is checked as such, and a longer output or stdout than the policy allows
    is "output_too_long" here whatever status the line claims.
    """
    results: list[dict[str, Any]] = []
    for line in data.split(b"\n")[: n + 1]:
        try:
            obj = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or obj.get("status") not in RUN_STATUSES:
            continue
        seconds = obj.get("seconds")  # JSON numbers: int or float; bool is not a duration
        r: dict[str, Any] = {
            k: obj[k] if isinstance(obj.get(k), str) else "" for k in ("status", "output", "detail", "stdout")
        } | {
            "seconds": float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0,
            "load": obj.get("load") is True,
        }
        if len(r["output"]) > max_output_chars or len(r["stdout"]) > stdout_cap:
            r.update(status="output_too_long", output="", stdout="", detail="reported output over the cap")
        results.append(r)
    if results and results[0]["load"]:  # the program failed before any input ran
        results = results[:1] * n
    results = results[:n]
    if len(results) < n:  # the run ended early: say why for the first missing input
        why = why or ("timeout" if signal_number == signal.SIGXCPU else "crash")
        detail = f"signal {signal_number}" if signal_number else f"exit code {exit_code}"
        failed = dict(status=why, output="", detail=detail if why == "crash" else "", stdout="", seconds=0.0)
        results.append(failed | {"load": False})
        results += [dict(results[-1], status="not_run", detail="")] * (n - len(results))
    return results
