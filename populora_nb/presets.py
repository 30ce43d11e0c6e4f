"""The named presets (tiny, smoke, cpu, gpu, paper) as data, and how a tree of config dataclasses
is built from one (`populora_nb.config.load_config` is the entry point). Imports only `errors`, so
config can import it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from populora_nb.errors import ConfigError

TINY_MODEL = "tiny"
"""``model.name`` of the random 2-layer Llama built in memory (`model.random_base`)."""

_LAPTOP: Mapping[str, Any] = {
    # What smoke and cpu share: a 135M model on a laptop CPU.
    "model.dtype": "bfloat16",  # this CPU's AMX/AVX-512 BF16: a faster step than fp32 (docs/performance.md)
    "sampling.temperature": 0.7,  # 135M writes runnable code ~6/20 at 0.7, ~never at 1.0
    "sampling.propose_max_new_tokens": 72,  # a 135M proposal is a short function + one input
    "sampling.solve_max_new_tokens": 24,  # an output or input literal
    # k = 4: three solve rates in the teacher's band; counts matching per-adapter trained tokens (EXPECTED_LENGTHS)
    "rl.rollouts": 4,
    "rl.proposals_per_kind": 3,
    "rl.teacher_proposals_per_kind": 4,
    "rl.student_tasks_per_kind": 3,
    "rl.micro_batch": 4,
    # code_i only: more tasks in 0 < rho < 1 at a lower step cost (docs/results/cpu-pilot). A departure
    # from AZR's task mix: the arms race on the kind a 135M model can be taught in 40 steps.
    "tasks.kinds": ["code_i"],
    "tasks.n_references": 2,  # shorter prompts for a 135M model on CPU
    "tasks.prompt_style": "short",  # 135M loses the format under AZR's full criteria (docs/methodology.md)
    "eval.max_new_tokens": 96,
}

# Presets are short named overrides; each line says why it differs from the defaults.
PRESETS: Mapping[str, Mapping[str, Any]] = types.MappingProxyType(
    {
        "tiny": {
            "model.name": TINY_MODEL,  # random 2-layer Llama: a population step in seconds
            "model.max_seq_len": 2048,  # AZR's full proposer criteria + K = 6 references: ~1,000 prompt tokens
            "lora.rank": 4,  # tiny hidden size (64)
            "sampling.propose_max_new_tokens": 32,  # random weights never write a valid task anyway
            "sampling.solve_max_new_tokens": 16,
            # k = 4: rho in {0, 1/4, ..., 1}, so the teacher's band 0 < rho < 1 holds three values
            "rl.rollouts": 4,
            "rl.proposals_per_kind": 2,  # TRR++ centres per (member, role, kind): 1 would leave every A = 0
            "run.steps": 3,
            "run.checkpoint_every": 1,
            "evolution.every": 2,  # so a 3-step run exercises one evolution event
            "probe.every": 2,  # the difficulty probe at steps 0 and 2, so the notebooks draw its curve
            "verifier.timeout_s": 2.0,
            "eval.limit": 2,
            "eval.max_new_tokens": 16,
        },
        "smoke": {
            **_LAPTOP,  # `make run`'s first experiment, minutes on 2 cores: `cpu` without its warm-up, for 3 steps
            "run.steps": 3,
            "run.checkpoint_every": 1,
            "evolution.every": 2,  # one evolution event, after step 1 (children are not judged within 3 steps)
            "probe.every": 2,  # the difficulty probe before training (step 0) and at step 2
            # one prompt per teacher, 4 samples: the curve is drawn cheaply; 3 steps cannot measure difficulty anyway
            "probe.prompts_per_kind": 4,
            "probe.rollouts": 4,
            "eval.limit": 2,  # 10 models (base, baseline, 8 members): eval dominates on CPU
            "eval.benchmarks": ["humanevalplus"],  # one code benchmark, every model within make run's minutes
        },
        "cpu": {
            **_LAPTOP,  # a laptop research run after a shared warm-up (costs: docs/performance.md)
            "run.steps": 40,
            "run.checkpoint_every": 5,  # resumable: at most 5 steps lost to a kill
            "evolution.every": 10,
            "probe.every": 10,  # 4 probe events in 40 steps (0-30)
            # 8 prompts per run and event; 16 rollouts put more probe tasks in 0 < rho < 1 (docs/results/probe-choice)
            "probe.prompts_per_kind": 8,
            "probe.rollouts": 16,
            "warmup.enabled": True,  # rejection-sampling fine-tuning before RL, shared by both runs
            "eval.limit": 4,
            "eval.benchmarks": ["humanevalplus", "gsm8k"],
        },
        "gpu": {
            "model.name": "Qwen/Qwen2.5-Coder-1.5B-Instruct",  # fits 4T+4S with room for rollouts on one GPU
            "lora.rank": 16,
            "tasks.prompt_format": "r1",  # AZR's <think> block: reasoning length can grow (a paper claim)
            "sampling.propose_max_new_tokens": 2048,  # room for that growth (AZR allows 8096, the paper preset)
            "sampling.solve_max_new_tokens": 2048,
            # Compute matched per adapter in trained tokens (EXPECTED_LENGTHS): a student trains on one rollout
            # of each of >= 16 tasks (AZR's one response per solver task; all 4 rollouts still give rho).
            "rl.proposals_per_kind": 8,
            "rl.rollouts": 4,
            "rl.teacher_proposals_per_kind": 16,
            "rl.student_tasks_per_kind": 16,
            "rl.student_rollouts_trained": 1,
            # activations of 2 x 6,144 tokens fit beside the engine (docs/gpu-memory.md)
            "rl.micro_batch": 2,
            "run.steps": 200,
            # 20 events; 16 prompts x 3 kinds per run (4 per teacher), generated only
            "probe.every": 10,
            "probe.prompts_per_kind": 16,
            "run.checkpoint_every": 10,
            "model.max_seq_len": 6144,  # a code_o/code_i prompt with K = 6 references + 2048 new
            "rollout.engine": "vllm",  # multi-LoRA rollouts: the paper's 1.31x population overhead
        },
        "paper": {
            "model.name": "Qwen/Qwen2.5-Coder-7B",  # the paper's and AZR's base model
            "lora.rank": 32,
            "tasks.prompt_format": "r1",  # AZR's `User: ... Assistant: <think>` wrapper
            "sampling.propose_max_new_tokens": 8096,  # AZR's data.max_response_length (its 7B self-play script)
            "sampling.solve_max_new_tokens": 8096,
            "sampling.temperature": 1.0,  # AZR samples at 1.0 (the default, stated for the record)
            "lora.gradient_checkpointing": True,  # 8k-token completions on a 7B base
            "rl.proposals_per_kind": 16,
            "rl.rollouts": 8,  # AZR estimates solve rates over 8 samples
            # compute matched per adapter as at gpu: 32 proposals per teacher, one rollout of >= 32 tasks per student
            "rl.teacher_proposals_per_kind": 32,
            "rl.student_tasks_per_kind": 32,
            "rl.student_rollouts_trained": 1,
            # checkpointed activations of 2 x 14,240 tokens fit beside the engine (docs/gpu-memory.md)
            "rl.micro_batch": 2,
            "run.steps": 500,
            "probe.every": 20,  # 25 events; generated only, never trained on
            "probe.prompts_per_kind": 32,  # per run: 8 per teacher
            "run.checkpoint_every": 25,
            "model.max_seq_len": 14240,  # AZR: max_prompt_length 6144 + max_response_length 8096
            "rollout.engine": "vllm",  # multi-LoRA rollouts: the paper's 1.31x population overhead
        },
    }
)

PRESET_SHOWS: Mapping[str, str] = types.MappingProxyType(
    {
        "tiny": "preset tiny: a random 2-layer model, so this run has nothing to show: every proposal is "
        "unparsed, every reward -1, every update skipped. It checks that the code runs (CI); for results "
        "set POPULORA_PRESET=smoke (README, Presets).",
        "smoke": "preset smoke: SmolLM2-135M for 3 steps: the loop acting (a few valid tasks, ratings "
        "moving, one evolution event), not a trend.",
        "cpu": "preset cpu: SmolLM2-135M after a warm-up, 40 steps: the laptop result, population against "
        "baseline over seeds.",
        "gpu": "preset gpu: Qwen2.5-Coder-1.5B for 200 steps on one GPU: the paper's curves at a smaller scale.",
        "paper": "preset paper: Qwen2.5-Coder-7B for 500 steps: the paper's setting.",
    }
)
"""What a run of each preset can show, in one line: the first line a notebook prints."""


EXPECTED_LENGTHS: Mapping[str, tuple[int, int]] = types.MappingProxyType(
    {
        # (proposal, answer) completion tokens each preset's per-kind counts were chosen at (tests/test_compute.py)
        "cpu": (37, 13),  # measured (docs/results/cpu-protocol-before-27)
        # Stated, not measured: under r1 both roles write a <think> block under the same cap; only the ratio matters.
        "gpu": (600, 600),
        "paper": (1500, 1500),
    }
)


def build_config(
    root: type,
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    yaml_path: str | Path | None = None,
) -> Any:
    """What `populora_nb.config.load_config` returns (it documents the order): ``root`` (its
    `ExperimentConfig`) built from the preset, the file and the overrides; lives here, next to PRESETS."""
    flat = preset_fields(preset or os.environ.get("POPULORA_PRESET") or "smoke")
    if yaml_path is not None:
        flat.update(read_yaml_overrides(yaml_path, root))
    flat.update(flatten(dict(overrides or {}), root))
    return _build(root, _unflatten(flat), prefix="")


def preset_fields(name: str) -> dict[str, Any]:
    """The preset's fields as dotted keys, with ``preset`` itself; an unknown name is a `ConfigError`."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return {"preset": name, **PRESETS[name]}


def read_yaml_overrides(yaml_path: str | Path, root: type) -> dict[str, Any]:
    """A ``--config`` YAML file's values as dotted keys (one clear error for a missing, binary,
    malformed or non-mapping file)."""
    path = Path(yaml_path)
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a file" if path.exists() else f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not text (expected a YAML mapping of sections)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return flatten(data, root)


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (numbers, lists, null...)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.field=value, e.g. rl.rollouts=8")
    key, value = text.split("=", 1)
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise ConfigError(
            f"override {text!r}: the value is not valid YAML; quote it, e.g. {key.strip()}='...'"
        ) from None


# ---- validation machinery -------------------------------------------------------------------
# Keys old run directories' config.yaml hold that no longer mean anything: dropped, so old runs still load.
RETIRED_KEYS = frozenset({"sampling.seed"})


def _build(cls: type, values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        where = f"{prefix}{key}"
        if where in RETIRED_KEYS:
            continue
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {prefix + close[0]!r}?)" if close else f"; known: {', '.join(names)}"
            raise ConfigError(f"unknown config key {where!r}{hint}")
        hint = hints[key]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{where} is a section: give a mapping of its fields, not {value!r}")
            kwargs[key] = _build(hint, value, prefix=f"{where}.")
        else:
            kwargs[key] = _coerce(value, hint, where)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        msg = str(e)
        # Field checks in __post_init__ name the bare field; say which section it lives in.
        if prefix and msg.split(" ", 1)[0].rstrip(":") in names:
            msg = f"{prefix}{msg}"
        raise ConfigError(msg) from None


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in (a for a in args if a is not type(None)):  # the first arm the value fits (str | tuple)
            try:
                return _coerce(value, arm, where)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {type(value).__name__} {value!r}")
        return tuple(_coerce(v, args[0], where) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
        return {_coerce(k, args[0], where): _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(f"{where} must be {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


def flatten(data: Mapping[str, Any], root: type, prefix: str = "") -> dict[str, Any]:
    """Nested sections (``{"rl": {"rollouts": 8}}``) as dotted keys (``{"rl.rollouts": 8}``)."""
    out: dict[str, Any] = {}
    section_keys = {f.name for f in dataclasses.fields(root)}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and (full in section_keys):
            out.update(flatten(value, root, f"{full}."))
        else:
            out[full] = value
    return out


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key!r}: {part!r} is a field, not a section")
        node[parts[-1]] = value
    return nested
