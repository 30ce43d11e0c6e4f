"""kill -9 a real (tiny-model) population run at a random point; the resumed run's records must
equal an uninterrupted run's."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from populora_nb.records import RunDir

ARGS = ["run", "--preset", "tiny", "--agent", "population", "--steps", "3",
        "--set", "run.checkpoint_every=1", "--set", "evolution.every=2"]


def _cli(out, **kw):
    return subprocess.Popen([sys.executable, "-m", "populora_nb", *ARGS, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _records(path):
    run = RunDir(path)
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]  # noqa: E731
    return {s: strip(run.read(s)) for s in ("metrics", "tasks", "matches", "lineage")}


@pytest.mark.slow
def test_kill_9_and_resume_gives_the_same_records(tmp_path):
    full = _cli(tmp_path / "full")
    out, _ = full.communicate(timeout=900)
    assert full.returncode == 0, out
    # Kill once a random number of steps has been logged (possibly mid-step, mid-write).
    victim = _cli(tmp_path / "killed", start_new_session=True)
    target = random.Random().randint(1, 2)
    deadline = time.time() + 600
    while time.time() < deadline and victim.poll() is None:
        if RunDir(tmp_path / "killed").last_logged_step() >= target - 1:
            time.sleep(random.uniform(0, 2.0))
            break
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    resumed = _cli(tmp_path / "killed")
    out, _ = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, out
    assert _records(tmp_path / "killed") == _records(tmp_path / "full")
