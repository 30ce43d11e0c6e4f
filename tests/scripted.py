"""A scripted policy: fixed completions chosen by prompt, for driving the loop without a model."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from populora_nb.policy import Sample

GOOD_PROGRAM = "```python\ndef f(x):\n    return x * 3\n```\n```input\n{n}\n```"
BAD_PROGRAM = "```python\nimport os\ndef f(x):\n    return os.getcwd()\n```\n```input\n1\n```"
DATA = Path(os.environ.get("POPULORA_DATA") or "POPULORA_DATA-is-not-set").absolute()
"""The benchmark folder the data tests read: $POPULORA_DATA, which `make test` sets to ../shared/benchmarks
when the checkout sits beside it; unset, a relative name that exists nowhere, so those tests skip."""
NO_DATA = "needs the benchmark data: set POPULORA_DATA (make test sets it when ../shared/benchmarks exists)"
VLLM_OVERRIDES = {"rollout.engine": "vllm", "lora.lr": 0.05, "rl.micro_batch": 2}
"""The config of the engine tests' shared policy over the tiny preset (conftest.vllm_policy)."""


def code_f(n: int) -> str:
    """A code_f proposal with the n distinct inputs the prompt asked for."""
    return "".join(f"```input\n{i}\n```\n" for i in range(1, n + 1)) + "```message\ncopy\n```"


class ScriptedPolicy:
    """Member T*/agent proposals alternate good and bad; solvers answer code_o correctly only when
    their member id ends in an even digit (or is 'agent', or another id such as the difficulty
    probe's solver), and answer code_i with a malformed text."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.updates: list[tuple[str, list[Sample]]] = []
        self.calls = 0

    def generate(self, member_ids: Sequence[str], prompts: Sequence[str], max_new_tokens: int, seed: int) -> list[str]:
        out = []
        for i, (m, p) in enumerate(zip(member_ids, prompts)):
            self.calls += 1
            if "Write a new Python puzzle" in p:
                out.append(GOOD_PROGRAM.format(n=i + 2) if i % 2 == 0 else BAD_PROGRAM)
            elif "Write " in p and "different inputs for f" in p:
                out.append(code_f(int(p.split("Write ")[1].split()[0])))
            elif "What does f return" in p:
                text = p.split("```input\n")[-1].split("\n")[0]  # the question, after the worked example
                # "agent" and ids that are not T<n>/S<n> (the difficulty probe's solver) answer correctly
                good = text.isdigit() and (not m[1:].isdigit() or int(m[1:]) % 2 == 0)
                out.append(f"```output\n{3 * int(text) if good else -1}\n```")
            elif "Find arguments for f" in p:
                out.append("I do not know")
            else:
                out.append("```python\ndef f(a):\n    return a\n```")
        return out

    def update_members(self, samples: Mapping[str, Sequence[Sample]]) -> dict[str, dict[str, float]]:
        out = {}
        for member_id, mine in samples.items():
            self.updates.append((member_id, list(mine)))
            out[member_id] = {"loss/total": float(sum(s.advantage * s.reward for s in mine))}
        return out

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "scripted.json").write_text(json.dumps({"calls": self.calls}))

    def load(self, path: Path) -> None:
        self.calls = json.loads((path / "scripted.json").read_text())["calls"]


class ScriptedLoRA(ScriptedPolicy):
    """Scripted completions, but checkpoints also hold a real tiny LoRA population (safetensors), and
    evolution acts on its factors."""

    def __init__(self, lora) -> None:
        super().__init__(lora.tokenizer)
        self.lora = lora

    def factors(self, name: str):
        return self.lora.factors(name)

    def replace(self, *args, **kwargs) -> None:
        self.lora.replace(*args, **kwargs)

    def save(self, path: Path) -> None:
        super().save(path)
        self.lora.save(path / "lora")

    def load(self, path: Path) -> None:
        super().load(path)
        self.lora.load(path / "lora")


def spread_members(policy, scale: float, seed: int) -> None:
    """Give every member of a LoRA policy its own random B (seeded), so members differ from step 0
    and a row routed to the wrong adapter changes the output."""
    import torch

    for i, m in enumerate(policy.members):
        g = torch.Generator().manual_seed(seed + i)
        factors = policy.factors(m)
        for pair in factors.values():
            pair.B.copy_(torch.randn(pair.B.shape, generator=g) * scale)
        policy.set_factors(m, factors)
