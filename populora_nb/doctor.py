"""``python -m populora_nb doctor``: a one-command check that this machine runs PopuLoRA, and how fast.

Two population and two baseline steps over one loaded base, a mixed-adapter engine call against a
single-adapter one, and one table of times and memory (`DoctorReport.table`); a failure is one line
naming its stage. ``--weights random`` needs no download. What each row means: docs/gpu.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from populora_nb import loop
from populora_nb.analysis.seed_stats import md_table
from populora_nb.config import AGENTS, ExperimentConfig, load_config, stage_config
from populora_nb.experiment import check_inputs
from populora_nb.model.base import Base, load_base
from populora_nb.model.engine_share import GIB, TrainerMemory, describe, measured_check, run_share
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.vllm_setup import quiet_vllm
from populora_nb.presets import read_yaml_overrides
from populora_nb.state import roster_for
from populora_nb.step_records import memory_mark, reset_peak_memory, step_summary
from populora_nb.verify import Verifier

DEFAULTS: dict[str, Any] = {"rollout.engine": "vllm", "run.steps": 2, "run.checkpoint_every": 0, "probe.every": 0}
"""What the doctor runs unless told otherwise: vLLM rollouts, two steps, no difficulty probe."""
RANDOM_WEIGHTS: dict[str, Any] = {"model.weights": "random", "sampling.ignore_eos": True}
"""What ``weights="random"`` adds: the architecture with random weights, every completion at its budget."""
MIXED_ROWS = 8
"""Rows of the mixed vs single-adapter micro-measurement."""
PARTS = ("generate", "validate", "train", "sync")
"""The parts a step's seconds are split into (`RunTimes`: ``generate_s`` ...)."""


@dataclass
class RunTimes:
    """One run's measurements, per step (lists) and summarised."""

    engine_start_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    generate_s: list[float] = field(default_factory=list)
    validate_s: list[float] = field(default_factory=list)
    train_s: list[float] = field(default_factory=list)
    sync_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    peak_gb: float | None = None
    first_peak_gb: float | None = None  # step 0's, its first update included (engine_share.measured_check)
    logp_diff_max: float | None = None

    def mean(self, name: str) -> float | None:
        values = getattr(self, name)
        return sum(values) / len(values) if values else None

    @property
    def tokens_per_s(self) -> float | None:
        gen = sum(self.generate_s)
        return sum(self.tokens) / gen if gen > 0 else None


@dataclass
class DoctorReport:
    preset: str = ""
    engine: str = ""
    device: str = ""
    memory_kind: str = ""
    """What peak memory measures: "GPU allocated (trainer)" or "RSS (process)"."""
    steps: int = 0
    base_load_s: float | None = None
    population: RunTimes = field(default_factory=RunTimes)
    baseline: RunTimes = field(default_factory=RunTimes)
    mixed_s: float | None = None
    single_s: float | None = None
    mixed_tokens: int = 0
    """New tokens per row in the mixed vs single-adapter measurement."""
    weights: str = "pretrained"
    engine_share: str = ""
    """The vLLM engine's share of the card and the trainer's peak it leaves room for (`model.engine_share`)."""
    engine_share_check: str = ""  # the count against the trainer's first step (engine_share.measured_check)
    memory: list[dict[str, Any]] = field(default_factory=list)
    """At each stage's end: {"stage", "peak_reserved_gb", "free_gb"} (`step_records.memory_mark`)."""
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def step_ratio(self) -> float | None:
        p, b = self.population.mean("step_s"), self.baseline.mean("step_s")
        return p / b if p is not None and b else None

    @property
    def mixed_ratio(self) -> float | None:
        return self.mixed_s / self.single_s if self.mixed_s is not None and self.single_s else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ok=self.ok, step_ratio=self.step_ratio, mixed_ratio=self.mixed_ratio)
        for run in ("population", "baseline"):
            d[run]["tokens_per_s"] = getattr(self, run).tokens_per_s
        return d

    def table(self) -> str:
        def f(v: float | None, unit: str = "") -> str:
            return "n/a" if v is None else f"{v:.3g}{unit}"

        p, b = self.population, self.baseline
        gap = "n/a (random weights)" if self.weights == "random" else None
        rows = [
            ("load: base model (s, shared)", f(self.base_load_s), ""),
            ("load: vLLM engine start (s)", f(p.engine_start_s), f(b.engine_start_s)),
            (f"step (s, mean of {self.steps})", f(p.mean("step_s")), f(b.mean("step_s"))),
            *((f"  {part} (s/step)", f(p.mean(f"{part}_s")), f(b.mean(f"{part}_s"))) for part in PARTS),
            ("rollout tokens/s", f(p.tokens_per_s), f(b.tokens_per_s)),
            (f"peak memory (GB, {self.memory_kind})", f(p.peak_gb), f(b.peak_gb)),
            ("train vs engine log-prob gap, max", gap or f(p.logp_diff_max), gap or f(b.logp_diff_max)),
            ("population ÷ baseline step time", f(self.step_ratio, "x"), ""),
            (
                f"mixed ÷ single-adapter generation ({MIXED_ROWS} rows × {self.mixed_tokens} tokens)"
                if self.mixed_tokens
                else "mixed ÷ single-adapter generation (vLLM only)",
                f(self.mixed_ratio, "x"),
                "",
            ),
        ]
        cpu = self.device in ("", "CPU")
        peak, free = ("peak RSS", "RAM available") if cpu else ("peak reserved", "free on the card")
        memory = [(m["stage"], f(m["peak_reserved_gb"]), f(m["free_gb"])) for m in self.memory]
        lines = [
            f"PopuLoRA doctor · preset {self.preset} · {self.weights} weights · rollout engine {self.engine} "
            f"· {self.device}",
            "",
            *md_table([("measure", "population", "baseline"), *rows]),
            "",
            "generate: time inside the policy's generate (sampling, tokenising, decoding); validate: proposal "
            "validation plus the sandbox judging answers; train: the members' updates; sync: pushing updated "
            "adapters to the engine. Step time also holds rewards, ratings, records and the last step's checkpoint. "
            "Peak memory is the trainer's process (the vLLM engine runs in its own). Mixed ÷ single: one engine call "
            f"of {MIXED_ROWS} rows over {MIXED_ROWS} members' adapters against the same rows on one adapter.",
            "",
            *md_table([("memory after stage", f"{peak} (GB)", f"{free} (GB)"), *memory]),
            *(f"vLLM {line}" for line in (self.engine_share, self.engine_share_check) if line),
            "",
            "status: OK" if self.ok else "status: FAILED: " + "; ".join(self.failures),
        ]
        return "\n".join(lines)

    def check(self) -> None:
        """Add a failure for any missing or non-finite number the table needs."""
        needed: dict[str, float | None] = {"base_load_s": self.base_load_s, "step_ratio": self.step_ratio}
        for run in ("population", "baseline"):
            t: RunTimes = getattr(self, run)
            needed |= {f"{run}.peak_gb": t.peak_gb, f"{run}.tokens_per_s": t.tokens_per_s}
            for name in ("step_s", *(f"{part}_s" for part in PARTS), "tokens"):
                values = getattr(t, name)
                needed[f"{run}.{name}"] = None if len(values) != self.steps else sum(values)
            if self.engine == "vllm":
                needed[f"{run}.engine_start_s"] = t.engine_start_s
        if self.engine == "vllm":
            needed["mixed_ratio"] = self.mixed_ratio
        bad = sorted(k for k, v in needed.items() if v is None or not math.isfinite(v))
        if bad:
            self.failures.append(f"check: missing or non-finite measurements: {', '.join(bad)}")


def wrap_calls(obj: Any, method: str, note: Callable[[tuple[Any, ...], float], None]) -> None:
    """Wrap ``obj.method`` (an instance attribute: only this object) to call ``note(args, seconds)`` after each call."""
    inner = getattr(obj, method)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        out = inner(*args, **kwargs)
        note(args, time.perf_counter() - started)
        return out

    setattr(obj, method, wrapped)


def doctor_config(
    preset: str | None, extra: dict[str, Any], overrides: dict[str, Any] | None, config_path: Path | None
) -> ExperimentConfig:
    """`DEFAULTS` and ``extra`` are the floor: a --config file and --set override them, in that order."""
    from_file = read_yaml_overrides(config_path, ExperimentConfig) if config_path is not None else {}
    return load_config(preset, {**DEFAULTS, **extra, **from_file, **(overrides or {})}, config_path)


def write_outputs(out_dir: Path | None, name: str, table: str, data: dict[str, Any]) -> None:
    """``name``.md (the table) and ``name``.json into ``out_dir``, if given."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{name}.md").write_text(table + "\n")
        (out_dir / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")


@dataclass
class _Stage:
    """Which stage runs, for the one-line failure message; says each start and end, notes the memory at each end."""

    marks: list[dict[str, Any]]
    say: Callable[[str], None]
    name: str = "config"

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.name = name
        self.say(f"[doctor] {name} ...")
        reset_peak_memory()  # each stage's own peak (the loop restarts it each step: the last step's)
        started = time.perf_counter()
        yield
        self.say(f"[doctor] {name} done in {time.perf_counter() - started:.1f}s")
        self.marks.append(memory_mark(name))


def run_doctor(
    preset: str | None,
    overrides: dict[str, Any] | None = None,
    out_dir: Path | None = None,
    say: Callable[[str], None] = print,
    config_path: Path | None = None,
    weights: str = "pretrained",
) -> DoctorReport:
    """Run the check (module docstring) and return its report (a failing stage is named in its
    ``failures``, never raised); writes doctor.md and doctor.json into ``out_dir`` if given."""
    report = DoctorReport(weights=weights)
    stage = _Stage(report.memory, say)
    try:
        with quiet_vllm():
            config = doctor_config(preset, RANDOM_WEIGHTS if weights == "random" else {}, overrides, config_path)
            _run(report, stage, config)
    except Exception as e:  # noqa: BLE001 - the doctor reports every failure as one line
        text = " ".join(str(e).split()) or type(e).__name__
        report.failures.append(f"stage {stage.name!r} failed: {type(e).__name__}: {text}")
    if report.ok:
        report.check()
    write_outputs(out_dir, "doctor", report.table(), report.to_dict())
    return report


def _run(report: DoctorReport, stage: _Stage, config: ExperimentConfig) -> None:
    check_inputs(config, AGENTS)
    report.preset, report.engine, report.steps = config.preset, config.rollout.engine, config.run.steps
    report.weights = config.model.weights

    with stage("load base"):
        cuda = torch.cuda.is_available()
        report.device = torch.cuda.get_device_name() if cuda else "CPU"
        report.memory_kind = "GPU allocated, trainer" if cuda else "RSS, process"
        started = time.perf_counter()
        base = load_base(config, seed=config.run.seed)
        report.base_load_s = time.perf_counter() - started

    sizing: tuple[TrainerMemory, float, int] | None = None
    if config.rollout.engine == "vllm":
        with stage("size the engine"):
            card = torch.cuda.mem_get_info()[1] if cuda else 80 * GIB
            trainer, share = run_share(config, base.model.config, base.dtype.itemsize, card)
            report.engine_share = describe(trainer, share, card) + ("" if cuda else " (no GPU: an 80 GiB card)")
            stage.say(f"vLLM {report.engine_share}")
            sizing = (trainer, share, card)

    verifier = Verifier.from_config(config.verifier)
    with stage("start the sandbox"):
        verifier.start()
    try:
        with tempfile.TemporaryDirectory(prefix="populora-doctor-") as tmp:
            for agent in ("population", "baseline"):
                _run_agent(report, stage, stage_config(config, agent), base, verifier, Path(tmp) / agent)
                if agent == "population" and sizing is not None:  # the count against the card's allocation
                    held = report.population.first_peak_gb if report.memory_kind.startswith("GPU") else None
                    report.engine_share_check = measured_check(*sizing, None if held is None else held * GIB)
                    stage.say(f"vLLM {report.engine_share_check}")
    finally:
        verifier.close()


def _run_agent(
    report: DoctorReport,
    stage: _Stage,
    config: ExperimentConfig,
    base: Base,
    verifier: Verifier,
    run_dir: Path,
) -> None:
    agent = config.run.agent
    times: RunTimes = getattr(report, agent)
    policy = LoRAPolicy.create(config, list(roster_for(config).items()), base=base)
    try:
        if config.rollout.engine == "vllm":
            with stage(f"{agent}: start the vLLM engine"):
                engine = policy.engine
                assert engine is not None
                times.engine_start_s = engine.load_s
                policy.sync()  # the first push of every adapter: not part of a step
        if config.model.weights == "random":
            train_on_every_sample(policy)
        spent = {"generate": 0.0, "judge": 0.0}  # seconds in these calls since the last step ended
        wrap_calls(policy, "generate", lambda _args, s: spent.update(generate=spent["generate"] + s))
        wrap_calls(verifier, "judge_many", lambda _args, s: spent.update(judge=spent["judge"] + s))

        def on_step(step: int, rows: list[dict]) -> None:
            r = rows[0]  # timings and memory are per step, the same in every member's row
            times.step_s.append(r["time/step_s"])
            times.generate_s.append(spent["generate"])
            times.validate_s.append(r.get("time/validate_s", 0.0) + spent["judge"])
            spent.update(generate=0.0, judge=0.0)
            times.train_s.append(r.get("time/update_s", 0.0))
            times.sync_s.append(r.get("time/sync_s", 0.0))
            times.tokens.append(sum(x.get("compute/generated_tokens", 0.0) for x in rows))
            stage.say(f"[doctor] {agent} " + step_summary(step, rows, config.tasks.kinds))

        with stage(f"{agent}: {config.run.steps} steps"):
            rd = loop.run(config, run_dir, policy=policy, verifier=verifier, on_step=on_step, progress=False)
        metrics = rd.read("metrics")
        members = set(policy.members)
        for step in range(config.run.steps):
            logged = {r["member"] for r in metrics if r.get("step") == step}
            if logged != members:
                raise RuntimeError(f"{agent} step {step} recorded members {sorted(logged)}, expected {sorted(members)}")
        key = "memory/cuda_peak_gb" if report.memory_kind.startswith("GPU") else "memory/peak_rss_gb"
        times.peak_gb = max((r[key] for r in metrics if r.get(key) is not None), default=None)
        times.first_peak_gb = max((r[key] for r in metrics if r.get(key) is not None and r["step"] == 0), default=None)
        diffs = [r["rollout/logp_diff_max"] for r in metrics if r.get("rollout/logp_diff_max") is not None]
        times.logp_diff_max = max(diffs) if diffs and config.model.weights != "random" else None
        if agent == "population" and policy.engine is not None:
            with stage("mixed vs single-adapter generation"):
                report.mixed_tokens = max(8, min(128, config.sampling.solve_max_new_tokens))
                report.mixed_s, report.single_s = _mixed_vs_single(policy, report.mixed_tokens)
    finally:
        verifier.__dict__.pop("judge_many", None)  # the timing wrapper: the class's method again
        policy.close()


def train_on_every_sample(policy: LoRAPolicy) -> None:
    """Random weights tie every reward (advantage 0, update skipped): give this policy's samples
    alternating ±1 advantages, so each update does a real step's work. Only this policy is changed."""
    inner = policy.update_members

    def update_members(samples: Any) -> dict[str, dict[str, float]]:
        signed = {
            m: [dataclasses.replace(s, advantage=1.0 if i % 2 == 0 else -1.0) for i, s in enumerate(mine)]
            for m, mine in samples.items()
        }
        return inner(signed)

    policy.update_members = update_members  # type: ignore[method-assign]  # this instance only


def _mixed_vs_single(policy: LoRAPolicy, n_new: int) -> tuple[float, float]:
    """Seconds for one engine call of MIXED_ROWS rows over as many members' adapters and for the same
    rows on one adapter (fixed token count, greedy; warmed up, best of two calls)."""
    engine = policy.engine
    assert engine is not None
    members = policy.members
    mixed = [members[i % len(members)] for i in range(MIXED_ROWS)]
    single = [members[0]] * MIXED_ROWS
    tok = policy.tokenizer
    prompt_ids = [
        tok(f"def f{i}(x):\n    return x * {i} +", add_special_tokens=False)["input_ids"] for i in range(MIXED_ROWS)
    ]

    def best(adapters: list[str]) -> float:
        engine.generate(adapters, prompt_ids, n_new, 0.0, stop_token_ids=[])
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            outs = engine.generate(adapters, prompt_ids, n_new, 0.0, stop_token_ids=[])
            runs.append(time.perf_counter() - started)
            if any(len(o.completion_ids) != n_new for o in outs):
                raise RuntimeError(f"the engine stopped before {n_new} tokens with no stop token")
        return min(runs)

    return best(mixed), best(single)
