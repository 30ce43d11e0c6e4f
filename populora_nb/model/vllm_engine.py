"""Rollouts on vLLM's multi-LoRA engine: one engine over the frozen base, every member an adapter.

The paper's "multi-LoRA inference [that] routes batched requests to the correct adapter without
swapping the base model" (PopuLoRA §4; docs/gpu.md, "Rollout engine"): one ``generate`` call serves a
mixed batch, every row naming its member's adapter. The engine only samples (token ids and its own
log-probs after temperature); the trainer recomputes what it trains on and compares (`model.policy`).
A member reaches the engine as a peft adapter in a RAM-backed directory (`push`); after every start,
wake and push `check_applied` probes whose adapter each member is served with.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import time
from collections.abc import Sequence
from typing import Any, cast

import torch

from populora_nb.config import LoRAConfig, RolloutConfig
from populora_nb.lowrank import LoRAFactors
from populora_nb.model.base import Base, decode_text, release_cached_memory
from populora_nb.model.batch import Generation
from populora_nb.model.checkpoint import write_peft_adapter
from populora_nb.model.engine_probe import probe_gap, probe_noise, visible
from populora_nb.model.engine_share import checked_share, trainer_memory
from populora_nb.model.vllm_setup import (
    EngineError,
    adapter_bytes,
    cpu_lora_slots,
    engine_args,
    engine_env,
    install_hint,
    ram_dir,
    start_error,
)

PROBE_TEXT = "def f(x):\n    return x + 1\n\nprint(f("
"""The applied-adapter probe's prompt: any short text the base continues."""
PROBE_TOKENS = 4
"""Greedy tokens per probe row: their log-probs are compared with the base's."""


class AdapterNotApplied(EngineError):
    """The engine samples a member from the bare base although its adapter is large enough to show."""


class AdapterMixedUp(EngineError):
    """The engine serves a member with another member's adapter or its own previous version."""


class VLLMEngine:
    """One vLLM engine over ``base``'s weights with LoRA on, and the members' adapters in it."""

    def __init__(
        self,
        base: Base,
        lora: LoRAConfig,
        rollout: RolloutConfig,
        max_loras: int,
        max_model_len: int,
        seed: int = 0,
        micro_batch: int = 1,
    ) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise EngineError(f"rollout.engine=vllm needs vLLM: {install_hint()}, or set rollout.engine=native")
        self.base, self.lora, self.rollout = base, lora, rollout
        self.cuda = torch.cuda.is_available()
        # Room for every member's adapter, plus the one a "new_id" push writes before it drops the old.
        need = cpu_lora_slots(max_loras, rollout) * adapter_bytes(base.model, lora, base.dtype)
        self.work = ram_dir("populora-vllm-", need)
        self.runner = rollout.model_runner
        """vLLM's model runner, as the started engine reports it ("v1" or "v2"; the config pins it)."""
        self._adapters: dict[str, Any] = {}  # name -> the LoRARequest generate uses
        self._zero: set[str] = set()  # members pushed too close to B = 0 to show (`visible`): excepted from the check
        self._expected: dict[str, tuple[list[float], list[float] | None]] = {}
        """Per member: the trainer's `probe_peaks` under the factors pushed last and the version before."""
        self._next_id = 1
        self.asleep = False
        self.check_due = True
        """Whether the next generate first runs `check_applied` (set at start and by every wake)."""
        started = time.perf_counter()
        release_cached_memory()  # vLLM's start checks the card's free memory, which the trainer's cache hides
        self.share: float | None = None
        """The engine's share of the card ("auto": the card less the trainer's counted peak); None on a CPU."""
        if self.cuda:
            card, cfg, nbytes = torch.cuda.mem_get_info()[1], base.model.config, base.dtype.itemsize
            trainer = trainer_memory(cfg, lora, max_loras, micro_batch, max_model_len, nbytes)
            self.share = checked_share(rollout.gpu_memory_utilization, trainer, card, cfg, max_model_len, nbytes)
        try:
            self.llm = self._start(max_loras, max_model_len, seed)
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        self.load_s = time.perf_counter() - started
        """Seconds the engine took to start (model load, profiling, KV cache)."""

    def _start(self, max_loras: int, max_model_len: int, seed: int) -> Any:
        with engine_env(self.cuda, self.rollout):  # vLLM reads its logging level when first imported
            from vllm import LLM

        limits = (max_loras, max_model_len, seed, self.cuda, self.share)
        kwargs = engine_args(self._model_dir(), self.base.dtype, self.lora, self.rollout, *limits)
        if getattr(self.base, "weights", "pretrained") == "random":
            kwargs["load_format"] = "dummy"  # the same shapes, vLLM's own random values (model.weights)
        try:
            with engine_env(self.cuda, self.rollout):
                llm = LLM(**kwargs)
                # The runner the engine runs, read while the pin is set (vLLM reads it from the environment).
                self.runner = "v2" if llm.llm_engine.vllm_config.use_v2_model_runner else "v1"
        except (ValueError, RuntimeError, MemoryError) as e:
            raise start_error(e, max_model_len, self.cuda) from None
        if self.runner != self.rollout.model_runner:
            llm.llm_engine.engine_core.shutdown()
            raise EngineError(
                f"vLLM runs its {self.runner} model runner although rollout.model_runner={self.rollout.model_runner} "
                f"pinned it (an engine option that needs {self.runner}); set rollout.model_runner={self.runner}"
            )
        return llm

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

    @property
    def probe_ids(self) -> list[int]:
        """The applied-adapter probe's tokens (`check_applied`)."""
        return list(self.base.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])

    def push(self, name: str, factors: LoRAFactors, expected: Sequence[float] | None = None) -> float:
        """Make ``factors`` the adapter the engine samples ``name`` with; returns the seconds taken.
        ``expected``: the trainer's `probe_peaks` under ``factors``, for `_check_whose`."""
        from vllm.lora.request import LoRARequest

        started = time.perf_counter()
        self.wake()  # the sync follows the step's updates: load adapters into an awake engine
        old = self._adapters.get(name)
        inplace = self.rollout.sync == "inplace" and old is not None
        lora_id = old.lora_int_id if old is not None and inplace else self._next_id
        path = self.work / "adapters" / f"{lora_id}"
        if path.exists():
            shutil.rmtree(path)
        write_peft_adapter(path, factors, self.lora, self.base.name, {"id": name}, dtype=self.base.dtype)
        self.llm.llm_engine.add_lora(LoRARequest(name, lora_id, str(path), load_inplace=inplace))
        if not inplace:
            self._next_id += 1
            if old is not None:
                self._remove(old.lora_int_id)
        self._adapters[name] = LoRARequest(name, lora_id, str(path))
        if visible(factors, self.lora.alpha / self.lora.rank, self.base.dtype):
            self._zero.discard(name)
        else:
            self._zero.add(name)
        previous = self._expected.pop(name, None)
        if expected is not None:  # without it, which trainer output these factors give is unknown
            self._expected[name] = (list(expected), previous[0] if previous else None)
        self.check_due = True  # a push can load the wrong weights or none: check before sampling from it
        return time.perf_counter() - started

    def drop(self, name: str) -> None:
        """Forget a member's adapter (a member evolution replaced)."""
        old = self._adapters.pop(name, None)
        self._zero.discard(name)
        self._expected.pop(name, None)
        if old is not None:
            self._remove(old.lora_int_id)

    def _remove(self, lora_id: int) -> None:
        self.llm.llm_engine.remove_lora(lora_id)
        shutil.rmtree(self.work / "adapters" / f"{lora_id}", ignore_errors=True)

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
    ) -> list[Generation]:
        """Row i continues ``prompt_ids[i]`` with adapter ``adapters[i]`` (None: the bare base), in one
        engine call; sampling needs ``seed`` (row i its own seeded stream). Stops only at
        ``stop_token_ids`` (default: EOS), as the native decoder does."""
        from vllm import SamplingParams

        if len(adapters) != len(prompt_ids):
            raise ValueError(f"one adapter per prompt: {len(adapters)} adapters, {len(prompt_ids)} prompts")
        if temperature > 0 and seed is None:
            raise ValueError("sampling (temperature > 0) needs a seed")
        unknown = sorted({a for a in adapters if a is not None and a not in self._adapters})
        if unknown:
            raise KeyError(f"no adapter pushed for {unknown}; the engine has {self.adapters}")
        self.wake()
        if self.check_due:
            self.check_applied()
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
        rows = []
        outs = self._generate(prompt_ids, params, adapters)
        for a, p, o in zip(adapters, prompt_ids, outs):
            ids, lps = _tokens_and_logprobs(o.outputs[0])
            stopped = bool(ids) and ids[-1] in stops
            cached = int(getattr(o, "num_cached_tokens", None) or 0)
            rows.append(Generation(a, list(p), list(ids), decode_text(tok, list(ids)), stopped, list(lps), cached))
        return rows

    def _request(self, name: str | None) -> Any:
        """The LoRARequest rows of ``name`` are served with (None: the bare base)."""
        return None if name is None else self._adapters[name]

    def _generate(self, prompt_ids: Sequence[Sequence[int]], params: Any, names: Sequence[str | None]) -> Any:
        """One engine call: row i continues ``prompt_ids[i]`` with ``names[i]``'s adapter."""
        prompts = [{"prompt_token_ids": list(p)} for p in prompt_ids]
        return self.llm.generate(prompts, params, lora_request=[self._request(n) for n in names], use_tqdm=False)

    def check_applied(self) -> None:
        """Every member is served with an adapter (`_check_base`), and with its own (`_check_whose`)."""
        self.check_due = False
        self._check_base()
        self._check_whose()

    def _check_base(self) -> None:
        """One greedy probe of every member beside the bare base in one batch: a member whose tokens
        and log-probs all equal the base's is not applied (`AdapterNotApplied`). Members too close to
        B = 0 to show at the engine's dtype (`visible`) are skipped."""
        from vllm import SamplingParams

        members = [m for m in self._adapters if m not in self._zero]
        # vLLM's dummy weights (`model.weights=random`) are uniform in ±1e-3: activations so small that a
        # member's first updates move no probe token or log-prob, and the check would stop a sound run.
        if not members or getattr(self.base, "weights", "pretrained") == "random":
            return
        params = SamplingParams(
            n=1,
            temperature=0.0,
            max_tokens=PROBE_TOKENS,
            ignore_eos=True,
            logprobs=0,
            skip_reading_prefix_cache=True,  # every row computed in this batch, the base's included
        )
        rows: list[str | None] = [None, *members]
        outs = self._generate([self.probe_ids] * len(rows), params, rows)
        seen = [_tokens_and_logprobs(o.outputs[0]) for o in outs]
        same = [m for m, probe in zip(members, seen[1:]) if probe == seen[0]]
        if same:
            raise AdapterNotApplied(
                f"the vLLM engine samples {', '.join(same)} from the bare base although their adapters are "
                f"far from zero (a greedy probe's tokens and log-probs equal the base's), so they would train on the "
                f"base's samples. Fix: rerun to resume from the last checkpoint; if it recurs set "
                f"rollout.sleep_during_training=false, or rollout.engine=native"
            )

    def _check_whose(self) -> None:
        """Every member whose trainer output `push` was given: its engine probe (`probe_peaks`) must not
        be closer, by more than `probe_noise`, to another member's output or its own previous
        version's; otherwise `AdapterMixedUp` (a swapped or stale adapter, which the bare-base check
        passes and the log-prob gap monitor misses while members are close)."""
        members = [m for m in self._adapters if m in self._expected]
        if not members:
            return
        peaks = self.probe_peaks(members)
        noise = probe_noise(self.base.dtype)
        for m in members:
            own, previous = self._expected[m]
            rivals = {f"{j}'s": self._expected[j][0] for j in members if j != m}
            if previous is not None:
                rivals["its own previous version's"] = previous
            gap = probe_gap(peaks[m], own)
            # closer by more than the noise: members too alike to tell apart (all at B = 0 at the start,
            # or an engine whose kernels round differently from the trainer's) are not told apart
            gaps = {who: probe_gap(peaks[m], v) for who, v in rivals.items()}
            closer = [(g, who) for who, g in gaps.items() if g + noise < gap]
            if closer:
                near, who = min(closer)
                raise AdapterMixedUp(
                    f"the vLLM engine serves {m} with other weights: its probe is {gap:.3g} nats/token from {m}'s "
                    f"trainer output (noise: {noise:g}) and {near:.3g} from {who} (a swapped or stale adapter), "
                    f"so {m} would train on another policy's samples. Fix: rerun to resume from the last checkpoint; "
                    f"if it recurs set rollout.sync=new_id, or rollout.engine=native"
                )

    def probe_peaks(self, members: Sequence[str]) -> dict[str, list[float]]:
        """Per member, the engine's greedy log-prob after each prefix of `probe_ids`: the peak of its
        next-token distribution, which the trainer computes from one forward (`LoRAPolicy`). A peak,
        not a fixed token's log-prob: vLLM's prompt log-probs with LoRA fail on its CPU kernels, and a
        peak does not jump when rounding flips a near-tie between two greedy tokens."""
        from vllm import SamplingParams

        ids = self.probe_ids
        params = SamplingParams(n=1, temperature=0.0, max_tokens=1, logprobs=0, skip_reading_prefix_cache=True)
        prompts = [ids[:n] for n in range(1, len(ids) + 1)]
        outs = self._generate(prompts * len(members), params, [m for m in members for _ in prompts])
        peaks = [_tokens_and_logprobs(o.outputs[0])[1][0] for o in outs]
        return {m: peaks[i * len(prompts) : (i + 1) * len(prompts)] for i, m in enumerate(members)}

    # ---- sharing the card with the trainer --------------------------------------------------------

    def sleep(self) -> None:
        """On a GPU with ``rollout.sleep_during_training``: vLLM's sleep level 1 (KV freed, weights offloaded)."""
        if self.cuda and self.rollout.sleep_during_training and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        """Map a sleeping engine's memory back, first releasing what the trainer's allocator caches."""
        if self.asleep:
            release_cached_memory()
            self.llm.wake_up()
            self.asleep = False
            self.check_due = True  # an adapter can stop applying after a wake (vLLM issue 53888)

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


def _tokens_and_logprobs(completion: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """An engine row's sampled tokens and the log-prob of each."""
    ids = tuple(completion.token_ids)
    return ids, tuple(float(pos[t].logprob) for t, pos in zip(ids, completion.logprobs or []))


def row_seed(seed: int, row: int) -> int:
    """Row ``row``'s sampling seed in a call seeded ``seed`` (vLLM seeds each request's generator)."""
    return (seed * 1_000_003 + row) % (2**31 - 1)
