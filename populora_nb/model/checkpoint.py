"""The population on disk: whole-population checkpoints, and one member as a peft LoRA adapter.

A checkpoint directory (``Population.save``) holds ``factors.safetensors`` (every adapted module's
stacked ``A`` and ``Bᵀ``, one row per slot of the bank), ``optimizers.safetensors`` (each member's
AdamW state, keys ``{member}.{param index}.{field}``) and ``population.json`` (base, LoRA config
and the member records), members keyed by their names. Two earlier layouts are refused in one line
naming the commit that retired them (`RETIRED_POPULATION`, `RETIRED_ADAPTER`).

A lone adapter (the warm-up's, a member exported or pushed to a rollout engine) is a peft LoRA
adapter (`write_peft_adapter`), which ``peft.PeftModel.from_pretrained`` loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from populora_nb.config import LoRAConfig
from populora_nb.errors import CorruptRunError, UserInputError, one_line
from populora_nb.lowrank import LoRAFactors, LoRAPair

PEFT_PREFIX = "base_model.model."
"""How peft names a causal LM's modules (adapter_model.safetensors keys, a peft model's modules)."""

ADAPTER_FILE, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"
"""A peft adapter directory's tensors and config (what `write_peft_adapter` writes)."""

LEGACY_ADAPTER = "factors.safetensors"
"""The retired lone-adapter file (keys ``{module}.A`` / ``{module}.B``): refused, see `RETIRED_ADAPTER`."""

RETIRED_POPULATION = (
    "a population checkpoint in the numbered-member layout (integer ids and next_id in population.json, "
    "names in names.json), retired in commit d2ebfef (#15); load it with that commit's code"
)
RETIRED_ADAPTER = (
    f"a lone adapter in the {LEGACY_ADAPTER} layout (keys {{module}}.A/.B), retired in commit 78e6802 for peft's "
    f"{ADAPTER_FILE}; load it with that commit's code"
)


@dataclass
class SavedPopulation:
    """Everything a population checkpoint holds, as plain data."""

    base: str
    """The base model's name (for the error when the factors do not fit another base)."""
    lora: LoRAConfig
    members: list[dict[str, Any]]
    """Member records (``adapters.Member`` fields) in slot order; ids and parents are names."""
    stacks: dict[str, Tensor]
    """``{module}.A`` (N, r, d_in) and ``{module}.Bt`` (N, r, d_out) for every adapted module."""
    optimizer_states: dict[str, dict[str, Tensor]]
    """member name -> its flat AdamW state ``{param index}.{exp_avg|exp_avg_sq|step}``."""


def write_population(directory: str | Path, saved: SavedPopulation) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.cpu() for k, v in saved.stacks.items()}, directory / "factors.safetensors")
    optim = {f"{m}.{k}": v.cpu() for m, state in saved.optimizer_states.items() for k, v in state.items()}
    save_file(optim, directory / "optimizers.safetensors")
    meta = {"base": saved.base, "lora": asdict(saved.lora), "members": saved.members}  # tuples: JSON lists
    (directory / "population.json").write_text(json.dumps(meta, indent=1))
    return directory


def read_population(directory: str | Path, device: str = "cpu") -> SavedPopulation:
    """A checkpoint (module docstring); factors load on the CPU, optimizer states on ``device``."""
    directory = Path(directory)
    meta = read_file(directory / "population.json")
    if "next_id" in meta:
        raise UserInputError(f"{directory} holds {RETIRED_POPULATION}")
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["lora"].items()}
    lora = LoRAConfig(**fields)
    stacks = read_file(directory / "factors.safetensors")
    states: dict[str, dict[str, Tensor]] = {}
    for key, value in read_file(directory / "optimizers.safetensors", device=device).items():
        member, param, field = key.rsplit(".", 2)  # a name may hold dots; the last two parts never do
        states.setdefault(member, {})[f"{param}.{field}"] = value
    return SavedPopulation(meta["base"], lora, meta["members"], stacks, states)


def write_peft_adapter(
    directory: str | Path,
    factors: LoRAFactors,
    lora: LoRAConfig,
    base_name: str,
    record: Mapping[str, Any],
    dtype: torch.dtype | None = None,
) -> Path:
    """``factors`` as a peft LoRA adapter that ``peft.PeftModel.from_pretrained`` loads, plus ``record``
    as populora_member.json. ``dtype``: on disk (None: the factors' own; the vLLM engine gets its own
    dtype, half the bytes at bf16)."""
    from peft import LoraConfig  # peft writes its own config so any peft version can read it

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, pair in factors.items():
        tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = pair.A.to(dtype or pair.A.dtype).contiguous().cpu()
        tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = pair.B.to(dtype or pair.B.dtype).contiguous().cpu()
    save_file(tensors, directory / ADAPTER_FILE, metadata={"format": "pt"})
    LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft annotates int; a float alpha works
        target_modules=list(lora.target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_name,
    ).save_pretrained(str(directory))
    (directory / "populora_member.json").write_text(json.dumps(dict(record), indent=1))
    return directory


def load_member_factors(directory: str | Path) -> tuple[LoRAFactors, dict]:
    """Factors and adapter_config of a peft LoRA adapter directory (alpha/r returned, not applied)."""
    directory = Path(directory)
    config = read_file(directory / ADAPTER_CONFIG)
    tensors = read_file(directory / ADAPTER_FILE)
    names = sorted({k[len(PEFT_PREFIX) :].rsplit(".lora_", 1)[0] for k in tensors})
    factors = {
        n: LoRAPair(tensors[f"{PEFT_PREFIX}{n}.lora_A.weight"], tensors[f"{PEFT_PREFIX}{n}.lora_B.weight"])
        for n in names
    }
    return factors, config


def read_adapter(directory: str | Path, lora: LoRAConfig, base_name: str) -> LoRAFactors:
    """The peft adapter in ``directory``, refused in one line when missing, retired, or trained with
    another model, rank or alpha."""
    directory = Path(directory)
    want: dict[str, Any] = {"rank": lora.rank, "alpha": float(lora.alpha), "model": base_name}
    if not (directory / ADAPTER_FILE).is_file():
        if (directory / LEGACY_ADAPTER).is_file():
            raise UserInputError(f"{directory} holds {RETIRED_ADAPTER}")
        raise UserInputError(f"{directory}: no adapter there (no {ADAPTER_FILE}, nor a retired {LEGACY_ADAPTER})")
    factors, config = load_member_factors(directory)
    keys = {"rank": "r", "alpha": "lora_alpha", "model": "base_model_name_or_path"}
    theirs = {ours: config.get(key) for ours, key in keys.items()}
    theirs["alpha"] = float(theirs["alpha"]) if theirs["alpha"] is not None else None
    wrong = {k: (theirs[k], v) for k, v in want.items() if theirs[k] != v}
    if wrong:
        raise UserInputError(f"{directory} holds an adapter trained with other settings (theirs, ours): {wrong}")
    return factors


def read_file(path: Path, device: str = "cpu") -> Any:
    """A saved .safetensors or JSON file; a damaged one raises one line naming it (safetensors' names none)."""
    try:
        return load_file(path, device=device) if path.suffix == ".safetensors" else json.loads(path.read_text())
    except (OSError, ValueError, SafetensorError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptRunError(
            f"{path} does not load ({one_line(e)})", "restore it, or load another checkpoint"
        ) from None
