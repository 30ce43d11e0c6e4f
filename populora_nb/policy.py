"""What the algorithm needs from a model (`Policy`), and the plain data that crosses that line: a
completion with the token ids it was sampled as, and a sample to learn from.

The stages generate and update only through this protocol, so the algorithm imports no model code:
`populora_nb.model.policy.LoRAPolicy` implements it on a real model, a scripted policy in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from populora_nb.lowrank import LoRAFactors

PROBE_SOLVER = "probe-solver"
"""The difficulty probe's frozen solver's member id (`populora_nb.probe`): a population slot holding
the starting adapter, never trained, never rated, not one of the loop's members (`LoRAPolicy.members`
leaves it out). Named here, below the model, because the policy makes the slot."""

TokenIds = tuple[tuple[int, ...], tuple[int, ...]]
"""(prompt ids, completion ids) exactly as sampled, the stop token included when it stopped."""


@dataclass(frozen=True)
class Completion:
    """What a policy generated for one prompt. A model's completion carries the token ids it was
    sampled as, so the policy gradient scores exactly those tokens (decoding and re-tokenising a
    text need not give them back). A plain string, e.g. a scripted completion, has none: the
    trainer then scores its tokenisation."""

    text: str
    token_ids: TokenIds | None = None


def as_completion(generated: str | Completion) -> Completion:
    return generated if isinstance(generated, Completion) else Completion(generated)


@dataclass(frozen=True)
class Sample:
    """One completion to learn from: the rendered prompt, what the member wrote, its advantage."""

    member: str
    prompt: str
    completion: str
    reward: float
    group: tuple
    advantage: float = 0.0
    token_ids: TokenIds | None = None
    """As sampled (see `Completion`); None: score the tokenisation of prompt + completion."""


class Policy(Protocol):
    """What the loop needs from a model (`populora_nb.model.policy.LoRAPolicy`; a scripted policy in
    tests): mixed-member generation, one member's update, checkpoints, and, only when evolution is
    on, a member's LoRA factors and the replacement of a member by a child."""

    @property
    def tokenizer(self) -> Any:
        """The base model's tokenizer (prompts are rendered with its chat template)."""
        ...

    def generate(
        self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int, seed: int
    ) -> Sequence[str | Completion]:
        """One completion per (member, prompt) row, sampled with that member's adapter."""
        ...

    def update_members(self, samples: Mapping[str, Sequence[Sample]]) -> dict[str, dict[str, float]]:
        """One policy-gradient step of each member's adapter on its own samples; each member's statistics."""
        ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...

    def factors(self, name: str) -> LoRAFactors: ...

    def replace(
        self,
        old: str,
        new: str,
        factors: LoRAFactors,
        parents: Sequence[str],
        operator: str,
        step: int,
        inherit_optimizer_from: str | None = None,
    ) -> None:
        """Member `old` leaves; child `new` takes its place with `factors` (evolution)."""
        ...
