"""The command line: help, and every bad input a user can give ends in one line naming the problem,
a non-zero exit, and nothing written that blocks the corrected rerun (issue 18, item 8)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora_nb.config import load_config
from populora_nb.records import RunDir

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "benchmarks"


def run_cli(*args, cwd=None, env=None, timeout=180):
    full_env = {k: v for k, v in os.environ.items() if k not in ("POPULORA_PRESET", "POPULORA_DATA")}
    full_env.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "populora_nb", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=full_env,
    )


def test_help_lists_the_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ("run", "eval", "report", "experiment"):
        assert cmd in r.stdout
    # the studies left the CLI for their own modules (studies/README.md)
    commands = r.stdout.split("positional arguments:")[1].splitlines()[1]
    assert not {"protocol", "pilot", "sweep"} & set(commands.strip(" {}").split(","))
    assert "python -m studies.seed_protocol" in r.stdout
    gone = run_cli("pilot", "--out", "p")
    assert gone.returncode == 2 and "invalid choice: 'pilot'" in gone.stderr


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> Path:
    """A workspace of bad inputs shared by the cases (each case runs in its own empty cwd)."""
    w = tmp_path_factory.mktemp("bad_inputs")
    (w / "a_file").write_text("not a directory\n")
    (w / "seeds_empty.jsonl").write_text("\n\n")
    (w / "seeds_badjson.jsonl").write_text('{"program": "def f(a):\\n    return a", "inputs": ["1"]}\n{"program": \n')
    (w / "seeds_schema.jsonl").write_text('{"code": "def f(a):\\n    return a", "inputs": ["1"]}\n')
    (w / "seeds_inputs.jsonl").write_text('{"program": "def f(a):\\n    return a", "inputs": "1"}\n')
    (w / "seeds_dir").mkdir()
    (w / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (w / "list.yaml").write_text("- rl.rollouts: 2\n")
    (w / "syntax.yaml").write_text("rl: {rollouts: 2\n")
    (w / "unknown.yaml").write_text("rl:\n  rolouts: 2\n")
    (w / "not_a_model").mkdir()
    (w / "not_a_model" / "README.md").write_text("no weights here\n")
    shutil.copytree(FIXTURES, w / "data_badline")
    gsm = w / "data_badline" / "gsm8k" / "test.jsonl"
    gsm.write_text(gsm.read_text().splitlines()[0] + '\n{"question": "torn\n')
    (w / "data_empty").mkdir()
    (w / "exp_untrained").mkdir()
    (w / "a_run").mkdir()
    (w / "a_run" / "metrics.jsonl").write_text("")
    return w


TINY = ("--preset", "tiny", "--steps", "1")


EVAL, EXP = ("eval", "--preset", "tiny"), ("experiment", "--preset", "tiny")
DATA = {"POPULORA_DATA": str(FIXTURES)}


def run(*extra):
    """argv of `run` on the tiny preset into ./out, plus ``extra``."""
    return ["run", *TINY, "--out", "out", *extra]


# (id, argv with {w} for the workspace, extra env, words the one error line must contain)
CASES = [
    ("unknown-preset", ["run", "--preset", "nope"], {}, ["preset", "nope"]),
    ("unknown-preset-env", ["run", "--steps", "1", "--out", "out"], {"POPULORA_PRESET": "nope"}, ["preset", "nope"]),
    ("unknown-key", run("--set", "rl.rolouts=2"), {}, ["rl.rolouts", "rl.rollouts"]),
    ("unknown-section", run("--set", "nosuch.x=1"), {}, ["nosuch"]),
    ("bad-type", run("--set", "rl.rollouts=two"), {}, ["rl.rollouts", "int"]),
    ("bad-choice", run("--set", "model.dtype=float64"), {}, ["model.dtype"]),
    ("out-of-range", run("--set", "rl.rollouts=0"), {}, ["rl.rollouts"]),
    ("steps-zero", ["run", "--preset", "tiny", "--steps", "0", "--out", "out"], {}, ["run.steps"]),
    ("set-without-equals", run("--set", "rl.rollouts"), {}, ["rl.rollouts", "="]),
    ("set-bad-yaml", run("--set", "rl.rollouts=[1"), {}, ["rl.rollouts"]),
    ("section-as-value", run("--set", "rl=3"), {}, ["rl"]),
    ("steps-not-int", ["run", "--preset", "tiny", "--steps", "x", "--out", "out"], {}, ["--steps"]),
    ("verifier-memory-tiny", run("--set", "verifier.memory_mb=32"), {}, ["verifier.memory_mb"]),
    # accepted by the old config, then refused by the verifier's zygote after config.yaml was written
    ("verifier-memory-below-zygote", run("--set", "verifier.memory_mb=70"), {}, ["verifier.memory_mb"]),
    ("verifier-workers-zero", run("--set", "verifier.workers=0"), {}, ["verifier.workers"]),
    ("verifier-workers-many", run("--set", "verifier.workers=100"), {}, ["verifier.workers"]),
    ("verifier-timeout-zero", run("--set", "verifier.timeout_s=0"), {}, ["verifier.timeout_s"]),
    ("config-missing", run("--config", "{w}/nope.yaml"), {}, ["nope.yaml"]),
    ("config-binary", run("--config", "{w}/binary.yaml"), {}, ["binary.yaml"]),
    ("config-not-mapping", run("--config", "{w}/list.yaml"), {}, ["list.yaml", "mapping"]),
    ("config-bad-syntax", run("--config", "{w}/syntax.yaml"), {}, ["syntax.yaml"]),
    ("config-unknown-key", run("--config", "{w}/unknown.yaml"), {}, ["rl.rolouts"]),
    ("config-is-dir", run("--config", "{w}"), {}, ["config"]),
    ("seeds-missing", run("--set", "tasks.seeds_path={w}/nope.jsonl"), {}, ["nope.jsonl", "tasks.seeds_path"]),
    ("seeds-empty", run("--set", "tasks.seeds_path={w}/seeds_empty.jsonl"), {}, ["seeds_empty.jsonl"]),
    ("seeds-bad-json", run("--set", "tasks.seeds_path={w}/seeds_badjson.jsonl"), {}, ["seeds_badjson.jsonl:2"]),
    (
        "seeds-wrong-schema",
        run("--set", "tasks.seeds_path={w}/seeds_schema.jsonl"),
        {},
        ["seeds_schema.jsonl:1", "program"],
    ),
    (
        "seeds-inputs-not-list",
        run("--set", "tasks.seeds_path={w}/seeds_inputs.jsonl"),
        {},
        ["seeds_inputs.jsonl:1", "inputs"],
    ),
    ("seeds-is-dir", run("--set", "tasks.seeds_path={w}/seeds_dir"), {}, ["seeds_dir"]),
    ("out-under-file", ["run", *TINY, "--out", "{w}/a_file/run"], {}, ["--out", "a_file"]),
    ("out-is-file", ["run", *TINY, "--out", "{w}/a_file"], {}, ["--out", "a_file"]),
    ("experiment-out-under-file", [*EXP, "--out", "{w}/a_file/exp"], {}, ["--out", "a_file"]),
    ("seed-out-under-file", ["seed", "--preset", "tiny", "--out", "{w}/a_file/seeds.jsonl"], {}, ["--out", "a_file"]),
    ("notebooks-out-under-file", ["notebooks", "--out", "{w}/a_file/nb"], {}, ["--out", "a_file"]),
    (
        "model-dir-not-a-model",
        run("--set", "model.name={w}/not_a_model"),
        {},
        ["model.name", "not_a_model", "config.json"],
    ),
    ("model-path-missing", run("--set", "model.name={w}/no_model_here"), {}, ["model.name", "no_model_here"]),
    ("experiment-unknown-stage", [*EXP, "--out", "out", "--stages", "baseline", "training"], {}, ["training"]),
    ("experiment-data-missing", [*EXP, "--out", "out"], {"POPULORA_DATA": "{w}/no_data"}, ["POPULORA_DATA", "no_data"]),
    ("eval-run-dir-missing", [*EVAL, "no_such_experiment"], DATA, ["no_such_experiment"]),
    ("eval-untrained", [*EVAL, "{w}/exp_untrained"], DATA, ["baseline", "checkpoint"]),
    (
        "eval-data-missing",
        [*EVAL, "{w}/exp_untrained"],
        {"POPULORA_DATA": "{w}/no_data"},
        ["POPULORA_DATA", "no_data", "--set eval.data_dir="],
    ),
    ("report-of-a-run", ["report", "{w}/a_run"], {}, ["a_run", "single run", "experiment directory"]),
    ("eval-data-dir-missing", [*EVAL, "--set", "eval.data_dir={w}/no_data", "{w}/exp_untrained"], {}, ["no_data"]),
    ("eval-data-empty", [*EVAL, "{w}/exp_untrained"], {"POPULORA_DATA": "{w}/data_empty"}, ["data_empty"]),
    (
        "eval-benchmark-bad-line",
        [*EVAL, "--set", "eval.benchmarks=[gsm8k]", "{w}/exp_untrained"],
        {"POPULORA_DATA": "{w}/data_badline"},
        ["test.jsonl", ":2"],
    ),
    (
        "eval-unknown-benchmark",
        [*EVAL, "--set", "eval.benchmarks=[humaneval++]", "{w}/exp_untrained"],
        DATA,
        ["eval.benchmarks", "humaneval++"],
    ),
    ("report-missing-dir", ["report", "no_such_experiment"], {}, ["no_such_experiment"]),
    ("warmup-missing", run("--set", "lora.warmup={w}/no_warmup"), {}, ["lora.warmup", "factors.safetensors"]),
    (
        "warmup-before-stage",
        [*EXP, "--out", "out", "--set", "warmup.enabled=true", "--stages", "baseline"],
        {},
        ["warmup"],
    ),
    ("notebooks-none", ["notebooks", "--out", "nb", "--notebooks", "{w}/exp_untrained"], {}, ["exp_untrained"]),
]


@pytest.mark.parametrize("argv,env,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing_in_the_way(w, tmp_path, argv, env, words):
    fill = lambda s: s.replace("{w}", str(w))  # noqa: E731
    r = run_cli(*map(fill, argv), cwd=tmp_path, env={k: fill(v) for k, v in env.items()})
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode not in (0, None), f"exit 0 for a bad input:\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert 1 <= len(err) <= 3, r.stderr
    assert err[-1].startswith("populora_nb: error: "), r.stderr
    for word in words:
        assert fill(word) in err[-1], f"{word!r} not named in: {err[-1]}"
    # nothing written that blocks the corrected rerun into the same --out
    out = tmp_path / "out"
    assert not (out / "config.yaml").exists() or RunDir.create(out, load_config("tiny", {"run.steps": 1}))


def test_failed_model_load_leaves_an_out_the_corrected_rerun_can_use(tmp_path):
    # A hub id only fails when it is loaded, after the run directory was opened: the config.yaml of
    # a run that never finished a step must not block the rerun with the corrected config.
    bad = run_cli(
        "run",
        "--preset",
        "tiny",
        "--agent",
        "baseline",
        "--steps",
        "1",
        "--out",
        "out",
        "--set",
        "model.name=nobody-here/no-such-model-xyz",
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "nobody-here/no-such-model-xyz" in bad.stderr.splitlines()[-1]
    good = run_cli(
        "run",
        "--preset",
        "tiny",
        "--agent",
        "baseline",
        "--steps",
        "1",
        "--out",
        "out",
        "--set",
        "run.checkpoint_every=0",
        cwd=tmp_path,
    )
    assert good.returncode == 0, good.stderr
    assert RunDir(tmp_path / "out").load_config().model.name == "tiny"


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only directories; the under-a-file cases cover --out"
)
def test_out_in_a_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    r = run_cli("run", *TINY, "--out", ro / "run", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("populora_nb: error: --out") and "not writable" in r.stderr


def test_bugs_keep_their_traceback_and_ctrl_c_is_not_swallowed(monkeypatch, tmp_path, capsys):
    import populora_nb.__main__ as cli

    def broken(args):
        (args.out / "config.yaml").parent.mkdir(parents=True)
        (args.out / "config.yaml").write_text("preset: tiny\n")  # as RunDir.create would
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "cmd_run", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["run", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # nothing left that would refuse the rerun's config

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["run", "--out", str(tmp_path / "out")])
    monkeypatch.setattr(cli, "cmd_run", lambda args: (_ for _ in ()).throw(FileNotFoundError("no such thing: x.jsonl")))
    assert cli.main(["run", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "populora_nb: error: no such thing: x.jsonl\n"


@pytest.mark.slow
def test_eval_reads_the_experiments_own_config_and_overwrites_nothing(tmp_path):
    # issue 56: `eval EXP` as the docs show it (no --preset) took the default preset, evaluated
    # SmolLM2's base over the tiny experiment's result files, then failed to load the tiny adapters.
    exp = tmp_path / "exp"
    setup = ["--set", "run.steps=1", "--set", "eval.limit=1", "--set", "eval.benchmarks=[humanevalplus]"]
    stages = ["--stages", "baseline", "population", "eval"]
    made = run_cli("experiment", "--preset", "tiny", *setup, "--out", exp, *stages, env=DATA, timeout=900)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr
    results = sorted((exp / "eval").glob("*__*.json"))
    assert {"base__humanevalplus.json", "baseline__humanevalplus.json"} <= {p.name for p in results}
    before = {p.name: p.read_bytes() for p in results}

    again = run_cli("eval", exp, env=DATA, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert f"[eval] config: {exp / 'config.yaml'} (preset tiny), as saved" in again.stdout
    after = {p.name: p.read_bytes() for p in (exp / "eval").glob("*__*.json")}
    assert after == before  # every result loaded as it was, none rewritten
    assert all(json.loads(b)["settings"]["model"] == "tiny" for b in after.values())

    # a --set changes only the field it names, says so, and a replaced result says it is replaced
    changed = run_cli("eval", exp, "--set", "eval.max_new_tokens=8", env=DATA, timeout=600)
    assert changed.returncode == 0, changed.stdout[-2000:] + changed.stderr
    assert "(preset tiny); changed: eval.max_new_tokens 16 -> 8" in changed.stdout
    assert "replacing" in changed.stdout and "max_new_tokens 16 -> 8" in changed.stdout
    settings = json.loads((exp / "eval" / "base__humanevalplus.json").read_text())["settings"]
    assert (settings["model"], settings["max_new_tokens"], settings["limit"]) == ("tiny", 8, 1)


def test_a_stopped_doctor_leaves_no_temporary_folder(tmp_path):
    # issue 56: `timeout` or `kill` (SIGTERM) ended the doctor without its cleanup, leaving
    # /tmp/populora-doctor-* (and with vLLM /dev/shm/populora-vllm-*) behind.
    env = {k: v for k, v in os.environ.items() if k not in ("POPULORA_PRESET", "POPULORA_DATA")}
    doctor = subprocess.Popen(
        [sys.executable, "-m", "populora_nb", "doctor", "--preset", "tiny", "--set", "run.steps=50"],
        env={**env, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not list(tmp_path.glob("populora-doctor-*")) and doctor.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert list(tmp_path.glob("populora-doctor-*")), "the doctor never made its folder"
    doctor.send_signal(signal.SIGTERM)
    _, err = doctor.communicate(timeout=120)
    assert doctor.returncode != 0
    assert not list(tmp_path.glob("populora-doctor-*")), err[-2000:]
