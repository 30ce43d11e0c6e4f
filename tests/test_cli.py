import subprocess
import sys


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "populora_nb", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_the_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ("run", "eval", "report", "experiment"):
        assert cmd in r.stdout


def test_bad_override_is_a_clean_error():
    r = run_cli("run", "--preset", "tiny", "--set", "rl.rolouts=2", "--steps", "1")
    assert r.returncode != 0
    assert "rl.rollouts" in r.stderr and "Traceback" not in r.stderr
