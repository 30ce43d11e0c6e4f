"""Synthetic run directories in the loop's record format, for a demo without a model and for tests.

``write_synthetic_experiment(dir)`` writes ``dir/baseline`` and ``dir/population``; each holds
``tasks.jsonl`` (the columns `frames.load_tasks` reads), ``metrics.jsonl`` (per step and proposer:
``teacher/valid_rate``, ``student/solve_rate``), ``probe.jsonl`` (`synthetic_probe_rows`) and a stub
``config.yaml`` (``agent``, ``preset: synthetic``, ``seed``, ``steps``; not one ``RunDir.load_config``
reads). Nothing here runs a model: it shows how the analysis reads before a real run exists, and is
a fixture with a known answer for the tests. A figure drawn from it should say its data is made up.

Programs are random but well-formed Python at a chosen nesting level; outputs are literals of a
plausible type, NOT what the program returns (nothing is executed). Two scripted trajectories mimic
the paper's picture:

  baseline    one ``agent``; program level falls to 0 (``return a``) while its solve rate rises to
              about 1 and its inputs converge on one type: a collapse.
  population  ``n_teachers`` teachers ``T0..``; program levels climb, solve rates oscillate around
              one half, and every teacher keeps drawing new input types: an arms race.
As in a real run, a code_f task's program is not its proposer's: it is drawn from the run's buffer.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import yaml

from populora_nb.analysis.runs import RUNS

SEED_PROGRAM = "def f(a):\n    return a"
"""AZR's identity seed, the first program in every buffer."""
_LITERALS = {
    "int": lambda rng: rng.randint(-20, 99),
    "str": lambda rng: rng.choice(["Hello world", "abc", "racecar", "a b c", "xyz"]),
    "list[int]": lambda rng: [rng.randint(0, 9) for _ in range(rng.randint(1, 5))],
    "list[str]": lambda rng: [rng.choice("abcde") for _ in range(rng.randint(1, 4))],
    "dict": lambda rng: {rng.choice("abcde"): rng.randint(0, 9) for _ in range(rng.randint(1, 3))},
    "float": lambda rng: round(rng.uniform(-5, 5), 2),
    "bool": lambda rng: rng.random() < 0.5,
    "tuple": lambda rng: (rng.randint(0, 9), rng.choice("ab")),
}
"""A random literal of each type a synthetic program's I/O may have, in the order the runs add them."""
_TYPES = tuple(_LITERALS)


def _literal(rng: random.Random, kind: str) -> str:
    return repr(_LITERALS[kind](rng))


def _block(rng: random.Random, level: int, indent: int, names: list[str]) -> list[str]:
    """A few statements; ``level`` bounds nesting, each nested block one level shallower."""
    pad = "    " * indent
    lines = []
    for _ in range(rng.randint(1, 1 + level)):
        var = f"v{len(names)}"
        choice = rng.randrange(4) if level > 0 else 0
        if choice == 0:
            lines.append(f"{pad}{var} = {rng.choice(names)} * {rng.randint(2, 9)}")
            names.append(var)
        elif choice == 1:
            lines.append(f"{pad}for {var} in range({rng.randint(2, 9)}):")
            names.append(var)
            lines += _block(rng, level - 1, indent + 1, names)
        elif choice == 2:
            lines.append(f"{pad}if {rng.choice(names)} > {rng.randint(0, 9)}:")
            lines += _block(rng, level - 1, indent + 1, names)
        else:
            lines.append(f"{pad}while {rng.choice(names)} < {rng.randint(5, 50)}:")
            lines += _block(rng, level - 1, indent + 1, names)
            lines.append(f"{pad}    break")
    return lines


def random_program(rng: random.Random, level: int) -> str:
    """``def f(a): return a`` at level 0; deeper, longer and with more variables as level grows."""
    if level <= 0:
        return SEED_PROGRAM
    names = ["a"]
    body = _block(rng, level, 1, names)
    return "def f(a):\n" + "\n".join(body) + f"\n    return {rng.choice(names)}"


def _task(
    rng: random.Random,
    step: int,
    proposer: str,
    level: int,
    types: list[str],
    solve_rate: float,
    valid: bool,
    buffer: list[str],
) -> dict:
    """One task row. A code_f task's program is drawn from ``buffer`` (the seed and earlier valid
    code_o/code_i programs), as ``stages.propose`` hands one to the proposer; a valid code_o/code_i
    program joins the buffer."""
    kind = rng.choice(["code_o", "code_i", "code_f"])
    n_pairs = 10 if kind == "code_f" else 1
    arg_type = rng.choice(types)
    out_type = arg_type if level <= 0 else rng.choice(types)
    inputs = [_literal(rng, arg_type) for _ in range(n_pairs)]
    program = rng.choice(buffer) if kind == "code_f" else random_program(rng, level)
    if valid and kind != "code_f":
        buffer.append(program)
    return {
        "step": step,
        "proposer": proposer,
        "kind": kind,
        "program": program,
        "inputs": inputs,
        "outputs": [_literal(rng, out_type) for _ in inputs] if valid else [],
        "message": "synthetic" if kind == "code_f" else "",
        "valid": valid,
        "reason": None if valid else "error",
        "solver": "S0" if valid else None,
        "solve_rate": round(solve_rate * 8) / 8 if valid else None,
    }  # k = 8 rollouts


def write_synthetic_run(
    run_dir: str | Path,
    agent: str,
    n_steps: int = 30,
    seed: int = 0,
    n_teachers: int = 4,
    tasks_per_step: int = 4,
    matches: bool = False,
) -> Path:
    """Write ``config.yaml``, ``metrics.jsonl`` and ``tasks.jsonl`` for one synthetic run of ``agent``
    (``baseline``: a scripted collapse; ``population``: a scripted arms race) over ``n_steps``.
    ``matches`` (population only): students ``S0..`` solve the tasks in turn, and the run also gets
    ``matches.jsonl``, TrueSkill-like ratings of every member and a ``lineage.jsonl`` birth every 10
    steps, drawn from a separate random stream (the tasks are the same either way)."""
    if agent not in RUNS:
        raise ValueError(f"agent must be 'baseline' or 'population', got {agent!r}")
    rng = random.Random(seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    proposers = ["agent"] if agent == "baseline" else [f"T{i}" for i in range(n_teachers)]
    tasks, metrics = [], []
    buffer = [SEED_PROGRAM]
    for step in range(n_steps):
        progress = step / max(1, n_steps - 1)
        for i, proposer in enumerate(proposers):
            if agent == "baseline":
                level = round(4 * (1 - progress) + rng.uniform(-0.5, 0.5))
                rho = min(1.0, 0.45 + 0.6 * progress + rng.uniform(-0.1, 0.1))
                types = list(_TYPES[: max(1, round(4 * (1 - progress)))])
            else:
                level = round(1 + 3 * progress + rng.uniform(-0.5, 0.5))
                rho = 0.5 + 0.3 * math.sin(step / 3 + i) + rng.uniform(-0.1, 0.1)
                types = list(_TYPES[: 2 + round(6 * progress)])
            rows = [
                _task(rng, step, proposer, level, types, max(0.0, rho), rng.random() > 0.2, buffer)
                for _ in range(tasks_per_step)
            ]
            tasks += rows
            valid = [r for r in rows if r["valid"]]
            row = {"step": step, "member": proposer, "role": "agent" if agent == "baseline" else "teacher"}
            row["teacher/valid_rate"] = len(valid) / len(rows)
            row["student/solve_rate"] = sum(r["solve_rate"] for r in valid) / max(1, len(valid))
            metrics.append(row)
    if matches and agent == "population":
        _add_matches(tasks, metrics, run_dir, n_teachers, random.Random(seed + 7919))
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump({"agent": agent, "preset": "synthetic", "seed": seed, "steps": n_steps})
    )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run_dir / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    probe = synthetic_probe_rows(agent, proposers, n_steps, random.Random(f"{seed}:probe"))
    (run_dir / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probe))
    return run_dir


def synthetic_probe_rows(
    agent: str, proposers: list[str], n_steps: int, rng: random.Random, every: int = 5, prompts: int = 4
) -> list[dict]:
    """probe.jsonl rows (`populora_nb.probe`) of a scripted difficulty: the frozen solver's rate on the
    baseline's probe tasks climbs from 0.5 towards 0.9 (easier tasks), on the teachers' it falls
    towards 0.2 (harder ones); 8 rollouts per valid task, 80% valid. Its own stream of draws, so the
    tasks and metrics above do not depend on it."""
    rows = []
    for step in range(0, n_steps, every):
        progress = step / max(1, n_steps - 1)
        p = 0.5 + 0.4 * progress if agent == "baseline" else 0.5 - 0.3 * progress
        for proposer in proposers:
            for index in range(prompts):
                valid = rng.random() < 0.8
                solved = sum(rng.random() < p for _ in range(8))
                row = {"step": step, "proposer": proposer, "kind": "code_o", "solver": "probe-solver", "valid": valid}
                rows.append(row | {"solve_rate": solved / 8 if valid else None, "prompt_index": index, "rollouts": 8})
    return rows


def _add_matches(tasks: list[dict], metrics: list[dict], run_dir: Path, n: int, rng: random.Random) -> None:
    """Students S0.. in turn for each step's tasks, one match per task, ratings per member and step,
    and a birth every 10 steps (a child of the best teacher replacing the worst)."""
    students, mu = [f"S{i}" for i in range(n)], {f"{r}{i}": 25.0 for r in "TS" for i in range(n)}
    rows, births = [], []
    for step in sorted({t["step"] for t in tasks}):
        for t in (t for t in tasks if t["step"] == step):
            t["solver"] = students[(int(t["proposer"][1:]) + step) % n] if t["valid"] else None
            row = {k: t[k] for k in ("step", "kind", "valid")} | {"teacher": t["proposer"]}
            row |= {"student": t["solver"] or students[0], "rho": t["solve_rate"], "rollouts": 8}
            rows.append(row | {"contested": t["valid"] and 0 < t["solve_rate"] < 1})
        mu = {m: v + rng.gauss(0, 0.8) for m, v in mu.items()}
        metrics += [
            {"step": step, "member": s, "role": "student", "rating/mu": mu[s], "rating/sigma": 8.3 / (1 + step) ** 0.5}
            for s in students
        ]
        for m in metrics:
            if m["step"] == step and m["role"] == "teacher":
                m.update({"rating/mu": mu[m["member"]], "rating/sigma": 8.3 / (1 + step) ** 0.5})
        if step and step % 10 == 0:
            teachers = sorted((m for m in mu if m.startswith("T")), key=mu.__getitem__)
            birth = {"step": step, "birth_step": step + 1, "child": f"teacher-s{step + 1}-0", "parents": [teachers[-1]]}
            births.append(birth | {"replaced": teachers[0], "operator": "svd_structured", "role": "teacher"})
    (run_dir / "matches.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "lineage.jsonl").write_text("".join(json.dumps(b) + "\n" for b in births))


def write_synthetic_experiment(exp_dir: str | Path, n_steps: int = 30, seed: int = 0, matches: bool = False) -> Path:
    """``exp_dir/baseline`` (a collapse) and ``exp_dir/population`` (an arms race), side by side;
    ``matches``: the population with students, matches, ratings and lineage (`write_synthetic_run`)."""
    exp_dir = Path(exp_dir)
    write_synthetic_run(exp_dir / "baseline", "baseline", n_steps=n_steps, seed=seed)
    write_synthetic_run(exp_dir / "population", "population", n_steps=n_steps, seed=seed + 1, matches=matches)
    return exp_dir
