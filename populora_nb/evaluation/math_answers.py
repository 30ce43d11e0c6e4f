"""Math benchmark answers: extraction from a completion, and equivalence with math-verify in a
worker process (PopuLoRA §4; AIME 24/25, AMC 23, MATH-500, Minerva, GSM8K, OlympiadBench).

The answer is the last ``<answer>...</answer>`` (AZR's format; a ``\\boxed{}`` inside it wins) or
else the last ``\\boxed{...}``. math-verify decides equivalence with sympy. It never evaluates
model text as Python (its expression regex admits only digits and operators, LaTeX goes through
a grammar), but adversarial input can make sympy run for a very long time or exhaust memory, and
its own timeouts rely on SIGALRM in the main thread. So it runs in a separate worker with an
address-space limit, a wall-clock deadline per check, and a restart after any timeout.
"""

from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys

from populora_nb.evaluation.loaders import last_boxed

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

_WORKER = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
from math_verify import parse, verify

def parsed(text):
    for form in ("\\boxed{{" + text + "}}", "$" + text + "$", text):
        value = parse(form)
        if value:
            return value
    return []

print(json.dumps({{"ready": True}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    try:
        gold, pred = parsed(req["gold"]), parsed(req["pred"])
        reply = {{"ok": bool(gold and pred and verify(gold, pred)), "status": "" if gold else "gold_unparsed"}}
    except Exception as e:  # sympy raises anything; a crash here must not lose the worker
        reply = {{"ok": False, "status": "error:" + type(e).__name__}}
    print(json.dumps(reply), flush=True)
"""


def extract_math_answer(completion: str) -> str | None:
    """The answer a completion commits to, or None when it gives none in an accepted form."""
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        boxed = last_boxed(tags[-1])
        return (boxed if boxed is not None else tags[-1]).strip() or None
    boxed = last_boxed(completion)
    return (boxed.strip() or None) if boxed is not None else None


def normalize(answer: str) -> str:
    """Cheap canonical form for the exact-match fast path: no spaces, $, or trailing period."""
    return re.sub(r"\s+|\$|\\[,!; ]", "", answer).rstrip(".")


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill a worker, close its pipes and reap it."""
    proc.kill()
    proc.communicate()


class MathChecker:
    """math-verify in one long-lived worker process (importing sympy is slow, so it is paid once)."""

    MEMORY_MB, START_TIMEOUT_S = 2048, 120.0

    def __init__(self, timeout_s: float = 10.0):
        if timeout_s <= 0:
            raise ValueError("MathChecker needs timeout_s > 0")
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> MathChecker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process (a later check starts a fresh one)."""
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None

    def _start(self) -> subprocess.Popen[str]:
        source = _WORKER.format(memory=self.MEMORY_MB << 20)
        pipe = subprocess.PIPE
        proc = subprocess.Popen(
            [sys.executable, "-c", source], stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL, text=True
        )
        if self._readline(proc, self.START_TIMEOUT_S) is None:
            _stop(proc)
            raise RuntimeError(
                "math-verify worker did not start: is math-verify installed? (pip install 'populora_nb[eval]')"
            )
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen[str], timeout_s: float) -> dict | None:
        assert proc.stdout is not None  # started with stdout=PIPE
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=timeout_s):
                return None
        line = proc.stdout.readline()
        return json.loads(line) if line else None

    def check(self, gold: str, answer: str) -> tuple[bool, str]:
        """(equivalent, status) for one gold answer and one extracted answer."""
        if normalize(gold) == normalize(answer):
            return True, "pass"
        if self._proc is None:
            self._proc = self._start()
        try:
            assert self._proc.stdin is not None  # started with stdin=PIPE
            self._proc.stdin.write(json.dumps({"gold": gold, "pred": answer}) + "\n")
            self._proc.stdin.flush()
            reply = self._readline(self._proc, self.timeout_s)
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:  # hung or died: a fresh worker for the next check
            self.close()
            return False, "verify_timeout"
        if reply["ok"]:
            return True, "pass"
        return False, reply["status"] or "not_equivalent"
