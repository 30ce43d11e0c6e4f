"""The pilot before a seed protocol: a few steps of each candidate setting, to choose a
preset under which the mechanism is live before hours go into seeds.

Both AZR's collapse and PopuLoRA's arms race run on tasks that their matched solver *sometimes*
solves; without them the curves cannot show the contrast (docs/methodology.md). A pilot runs each
candidate for ``steps`` steps, baseline and population, on one seed, and reads from the records:

* the **band share**: valid fresh tasks with 0 < ρ < 1 out of those the matched solver attempted
  (`tasks.jsonl`; the aim: >= 20% in both runs), beside the ρ = 0 share;
* the **teacher-win share**: valid matches whose teacher won rating games, 0 < ρ < win_threshold
  (`analysis.liveness`; the aim: >= 10%);
* the **cost**: seconds per step of each run, and of the warm-up.

Candidates that share a warm-up setting share one warm-up (`experiment.adopt_warmup`), so their
rows differ only in what the candidate changes. One seed and a few steps give counts, not estimates:
the table prints the counts behind every share; the protocol then measures with intervals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from populora_nb.__main__ import _add_set, _overrides, _Parser, _say
from populora_nb.__main__ import main as cli_main
from populora_nb.analysis.liveness import liveness, played_tasks, share_interval
from populora_nb.analysis.runs import RUNS
from populora_nb.config import ExperimentConfig, load_config
from populora_nb.errors import UserInputError
from populora_nb.experiment import adopt_warmup, done_stages, run_experiment
from populora_nb.presets import PRESETS
from populora_nb.records import RunDir
from studies.new_tasks import new_task_table


def share_text(n: int, d: int, of: str = "played") -> str:
    """``12% (14/112) [8%, 20%]``: a share, its counts and its 95% Wilson interval."""
    if not d:
        return f"n/a (0 {of})"
    low, high = share_interval(n, d)
    return f"{n / d:.0%} ({n}/{d}) [{low:.0%}, {high:.0%}]"


@dataclass(frozen=True)
class Candidate:
    """One setting the pilot tries: overrides of the preset, and why it is a candidate."""

    name: str
    overrides: Mapping[str, Any]
    why: str
    warmup_from: str | None = None
    """An earlier candidate whose warm-up this one adopts although its settings would change it, so both
    start from one adapter; None: its own settings decide (`warmup_key`)."""


# Each candidate states the settings it varies, so it stays itself if the preset changes under a resumed pilot.
MIXED = {"tasks.kinds": ["code_o", "code_i"]}
SOLVER = {**MIXED, "warmup.solver": True}
COPY_ARMS = {
    "tasks.n_references": 2,
    "tasks.reject_repeats": False,
    "tasks.reject_copies": "none",
    "tasks.copies_earn_nothing": False,
    "tasks.one_task_per_program": False,
    "tasks.reference_sampling": "uniform",
    "sampling.propose_max_new_tokens": 72,
}
"""The settings the new-task and novelty arms vary, at the cpu preset's values (the control)."""
CANDIDATES: tuple[Candidate, ...] = (
    Candidate("preset", MIXED, "the cpu preset before the pilot: k = 4, code_o + code_i, the proposer warm-up"),
    Candidate("solver-warmup", SOLVER, "a solver warm-up beside the proposer warm-up (solver_warmup.py)"),
    Candidate("k8", {**SOLVER, "rl.rollouts": 8}, "8 rollouts: rho in steps of 1/8, a wider band to land in"),
    Candidate(
        "code_i-only",
        {"tasks.kinds": ["code_i"]},
        "code_i tasks only: in the first protocol they landed in 0 < rho < 1 5x as often as code_o",
    ),
    Candidate(
        "code_i-k8",
        {"tasks.kinds": ["code_i"], "rl.rollouts": 8},
        "code_i only at 8 rollouts: the one clear effect of the first pilot (29% of code_i in the band at k8)",
    ),
    Candidate(
        "small-groups",
        {**SOLVER, "rl.teacher_proposals_per_kind": 2, "rl.student_tasks_per_kind": 2},
        "teacher groups of 2 (and 2 tasks per student): half the cost per step, the same number of matches per pair",
    ),
    Candidate(
        "2T2S",
        {**SOLVER, "population.n_teachers": 2, "population.n_students": 2},
        "a 2T + 2S population: about half the population's cost per step, so more steps for the budget",
    ),
    # What makes a 135M proposer write new tasks (docs/results/cpu-pilot-new-tasks); all four share a warm-up.
    Candidate("control", COPY_ARMS, "the cpu preset: repeats and copies kept, K = 2 references (the K = 2 arm)"),
    Candidate(
        "reject-repeats",
        {**COPY_ARMS, "tasks.reject_repeats": True},
        "a repeat of a task met before is invalid (reward -1), so only a new task can earn",
    ),
    Candidate(
        "reject-reference-copies",
        {**COPY_ARMS, "tasks.reject_copies": "reference"},
        "a copy of a shown reference program is invalid (reward -1)",
    ),
    Candidate(
        "K1",
        {**COPY_ARMS, "tasks.n_references": 1},
        "one reference in the prompt: less to copy from",
        warmup_from="control",
    ),
    # Novelty pressure (docs/results/cpu-pilot-novelty): each setting alone, from the control's warm-up.
    Candidate(
        "copies-earn-nothing",
        {**COPY_ARMS, "tasks.copies_earn_nothing": True},
        "a valid task whose program is not new earns min(r, 0): only a new program can earn",
        warmup_from="control",
    ),
    Candidate(
        "one-per-program",
        {**COPY_ARMS, "tasks.one_task_per_program": True, "tasks.reference_sampling": "least_shown"},
        "the buffers keep one task per program, references drawn least-shown first: more programs to read",
        warmup_from="control",
    ),
    Candidate(
        "tokens128",
        {**COPY_ARMS, "sampling.propose_max_new_tokens": 128},
        "128 proposal tokens (the preset has 72): room to write a longer program",
        warmup_from="control",
    ),
)
"""The pilot's candidates, in the order they run (those sharing a warm-up run after the first)."""


@dataclass
class RunFacts:
    """What one run's records say: the band counts, the teacher's wins (population), the cost."""

    played: int = 0
    """Valid fresh tasks the matched solver attempted (rho recorded)."""
    in_band: int = 0
    """... with 0 < rho < 1."""
    at_zero: int = 0
    """... with rho = 0 (no solver rollout passed)."""
    valid: int = 0
    proposals: int = 0
    valid_matches: int | None = None
    teacher_wins: int | None = None
    """Valid matches in which the teacher won most of its rated games (ρ < ½ on a contested task)."""
    steps: int = 0
    seconds_per_step: float = float("nan")

    @property
    def band_share(self) -> float:
        return self.in_band / self.played if self.played else float("nan")

    @property
    def zero_share(self) -> float:
        return self.at_zero / self.played if self.played else float("nan")

    @property
    def win_share(self) -> float | None:
        if self.valid_matches is None or self.teacher_wins is None:
            return None
        return self.teacher_wins / self.valid_matches if self.valid_matches else float("nan")


def run_facts(run_dir: str | Path) -> RunFacts:
    """One run's band counts, teacher wins and seconds per step; empty facts for a run not made."""
    if not Path(run_dir).is_dir():
        return RunFacts()
    rd = RunDir(Path(run_dir))
    tasks = rd.read("tasks")
    played = played_tasks(tasks)
    facts = RunFacts(
        played=len(played),
        in_band=sum(0 < t["solve_rate"] < 1 for t in played),
        at_zero=sum(t["solve_rate"] == 0 for t in played),
        valid=sum(bool(t.get("valid")) for t in tasks),
        proposals=len(tasks),
    )
    per_step: dict[int, float] = {}
    for row in rd.read("metrics"):
        if row.get("time/step_s") is not None:
            per_step.setdefault(row["step"], row["time/step_s"])  # one value per step, on every member's row
    facts.steps = len(per_step)
    if per_step:
        facts.seconds_per_step = sum(per_step.values()) / len(per_step)
    if rd.has("matches"):
        live = liveness(rd.path)
        # Matches the teacher won most of its rated games in (`analysis.liveness`), not the band share.
        majority = sum(p.teacher_won > p.rollouts / 2 for p in live.played)
        facts.valid_matches, facts.teacher_wins = live.valid_matches, majority
    return facts


def warmup_key(config: ExperimentConfig) -> str:
    """The settings a warm-up depends on (the model, the adapter's shape, the task kinds and prompts,
    sampling, the warm-up's own section and the seed), hashed: equal keys, interchangeable warm-ups."""
    c = config.to_dict()
    relevant = {k: c[k] for k in ("model", "lora", "tasks", "sampling", "warmup", "verifier")} | {
        "seed": c["run"]["seed"]
    }
    relevant["lora"] = {k: v for k, v in relevant["lora"].items() if k != "warmup"}
    # applied where a step marks copies (`copies.mark_copies`), never in the warm-up
    relevant["tasks"] = {k: v for k, v in relevant["tasks"].items() if k not in ("reject_copies", "reject_repeats")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class PilotRow:
    candidate: Candidate
    baseline: RunFacts
    population: RunFacts
    warmup: dict = field(default_factory=dict)
    seconds: float = 0.0
    """The candidate's own stages summed from its stages.json (an adopted warm-up counts 0; a stage resumed
    after a kill counts only the invocation that finished it), so a resumed pilot still reports each cost."""
    path: Path | None = None
    """The candidate's experiment directory, for the tables that read its records per step."""


def run_pilot(
    preset: str,
    out: str | Path,
    steps: int,
    candidates: Sequence[Candidate] = CANDIDATES,
    extra: Mapping[str, Any] | None = None,
    say: Callable[[str], None] = print,
    runs: Sequence[str] = RUNS,
) -> list[PilotRow]:
    """Each candidate as a resumable experiment directory ``out/<name>`` (warm-up, then ``runs``), then
    its facts (a run not made reads as empty). ``extra`` overrides every candidate."""
    out = Path(out)
    warmups: dict[str, Path] = {}
    names: dict[str, Path] = {}  # candidates that ran (or adopted) a warm-up, by name
    rows = []
    for cand in candidates:
        # the probe measures difficulty on a fixed scale: not what a pilot reads, and not free
        settings = {**cand.overrides, **(extra or {}), "run.steps": steps, "probe.every": 0}
        config = load_config(preset, settings)
        exp = out / cand.name
        key = warmup_key(config)
        if cand.warmup_from is not None and config.warmup.enabled and cand.warmup_from not in names:
            raise UserInputError(
                f"pilot candidate {cand.name!r} adopts {cand.warmup_from!r}'s warm-up: "
                f"run {cand.warmup_from!r} before it"
            )
        source = names.get(cand.warmup_from) if cand.warmup_from is not None else warmups.get(key)
        if config.warmup.enabled and source is not None and source != exp:
            RunDir.create(exp, config)
            adopt_warmup(exp, source)
        say(f"[pilot] {cand.name}: {cand.why}")
        run_experiment(config, exp, stages=("warmup", *runs), say=say)
        if config.warmup.enabled:
            names[cand.name] = exp
            if cand.warmup_from is None:
                warmups.setdefault(key, exp)
        report = exp / "warmup" / "report.json"
        rows.append(
            PilotRow(
                cand,
                run_facts(exp / "baseline"),
                run_facts(exp / "population"),
                json.loads(report.read_text()) if report.exists() else {},
                float(sum(stage.get("seconds", 0.0) for stage in done_stages(exp).values())),
                exp,
            )
        )
    return rows


def _intervals(f: RunFacts) -> dict[str, list[float] | None]:
    """The 95% Wilson intervals of a run's shares (None where nothing was counted), for pilot.json."""
    pairs = {"band": (f.in_band, f.played), "zero": (f.at_zero, f.played), "win": (f.teacher_wins, f.valid_matches)}
    return {f"{k}_interval": list(share_interval(n, d)) if n is not None and d else None for k, (n, d) in pairs.items()}


def pilot_table(rows: Sequence[PilotRow]) -> str:
    """The pilot's table (markdown): per candidate and run, the band and zero shares with their
    counts, the teacher-win share, the warm-up's effect and the cost."""
    lines = [
        "| candidate | run | valid / proposals | 0 < ρ < 1 | ρ = 0 "
        "| matches the teacher won most games of / valid matches | s/step | "
        "warm-up: valid rate, solve rate (held out, before → after) |",
        "|---|---|---|---|---|---|---:|---|",
    ]
    for r in rows:
        w, solver = r.warmup, r.warmup.get("solver")
        warm = (
            f"{w['before']['rate']:.2f} → {w['after']['rate']:.2f}"
            + (f"; {solver['before']['rate']:.2f} → {solver['after']['rate']:.2f}" if solver else "; no solver warm-up")
            if w
            else "none"
        )
        for run, f in (("baseline", r.baseline), ("population", r.population)):
            wins = "—" if f.win_share is None else share_text(f.teacher_wins, f.valid_matches, "valid")  # type: ignore[arg-type]
            lines.append(
                f"| {r.candidate.name if run == 'baseline' else ''} | {run} | {f.valid}/{f.proposals} | "
                f"{share_text(f.in_band, f.played)} | {share_text(f.at_zero, f.played)} | {wins} | "
                f"{f.seconds_per_step:.3g} | {warm if run == 'baseline' else ''} |"
            )
    return "\n".join(lines)


def write_pilot(rows: Sequence[PilotRow], out: str | Path, preset: str, steps: int) -> Path:
    """``pilot.md`` (the table, the candidates and why each) and ``pilot.json`` (every count) in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = [
        f"# Pilot: {len(rows)} candidates on the `{preset}` preset, {steps} steps each, one seed",
        "",
        "Each candidate is an experiment (warm-up, baseline, population); candidates with the same warm-up "
        "settings share one warm-up. Shares count valid fresh tasks the matched solver attempted (ρ recorded); "
        "teacher wins count valid matches in which the teacher won most of its rated games (ρ < ½ on a task "
        "with 0 < ρ < win_threshold: `analysis.liveness`), not the band. Brackets: the 95% "
        "Wilson interval of each share, as if its items were independent (a step's tasks share a proposer, so "
        f"the true interval is wider). One seed and {steps} steps: enough to tell a share near 5% from one "
        "near 25%, not to rank close candidates; the protocol measures with seeds. Aims (issue #31): "
        "≥ 20% of played tasks in 0 < ρ < 1 in both runs, teacher wins on ≥ 10% of valid matches.",
        "",
        pilot_table(rows),
        "",
        "## Candidates",
        "",
    ]
    md += [
        f"- **{r.candidate.name}** (`{dict(r.candidate.overrides)}`): {r.candidate.why}; {r.seconds / 60:.0f} min"
        for r in rows
    ]
    lines, numbers = new_task_table({r.candidate.name: r.path for r in rows if r.path is not None})
    if lines:
        md += [
            "",
            "## New tasks (the first candidate is the control)",
            "",
            "New valid tasks: valid proposals that are neither a copy of a shown reference or an earlier program "
            "nor a repeat of a task met before (`studies.new_tasks`). Brackets: 95% percentile bootstrap "
            "intervals resampling whole steps (a step's tasks share a proposer and its references). "
            "s/step is wall time on the machine as it was while the pilot ran.",
            "",
            *lines,
        ]
        (out / "new_tasks.json").write_text(json.dumps(numbers, indent=1, default=float) + "\n")
    (out / "pilot.md").write_text("\n".join(md) + "\n")
    facts = [
        {
            "candidate": r.candidate.name,
            "overrides": dict(r.candidate.overrides),
            "why": r.candidate.why,
            "seconds": round(r.seconds, 1),
            "warmup": r.warmup,
            **{
                run: vars(f)
                | {"band_share": f.band_share, "zero_share": f.zero_share, "win_share": f.win_share}
                | _intervals(f)
                for run, f in (("baseline", r.baseline), ("population", r.population))
            },
        }
        for r in rows
    ]
    (out / "pilot.json").write_text(
        json.dumps({"preset": preset, "steps": steps, "candidates": facts}, indent=1) + "\n"
    )
    return out / "pilot.md"


def cmd_pilot(args: argparse.Namespace) -> int:
    known = {c.name: c for c in CANDIDATES}
    unknown = [n for n in args.only or [] if n not in known]
    if unknown:
        raise UserInputError(f"unknown pilot candidates {unknown}; candidates are {', '.join(known)}")
    chosen = [known[n] for n in args.only] if args.only else list(CANDIDATES)
    table = args.table or args.out
    if args.only:  # a subset's table beside the full one, never over it
        table = table / f"only-{'-'.join(args.only)}"
    if args.table is not None and (table / "pilot.md").exists() and not args.replace_table:
        raise UserInputError(f"--table {table} already holds a pilot.md; pass --replace-table to replace it")
    preset = args.preset or "cpu"
    rows = run_pilot(preset, args.out, args.steps, chosen, _overrides(args), say=_say)
    _say(f"[pilot] {write_pilot(rows, table, preset, args.steps)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m studies.pilot", description=__doc__.split("\n\n")[0])
    p.set_defaults(func=cmd_pilot, command="pilot")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="default: cpu")
    _add_set(p, "for every candidate")
    p.add_argument("--out", type=Path, required=True, help="pilot directory, one experiment per candidate (resumable)")
    p.add_argument("--steps", type=int, default=4, help="steps of each run")
    p.add_argument("--only", nargs="*", default=None, help="candidate names (default: all); table in only-NAMES/")
    p.add_argument("--table", type=Path, default=None, help="where pilot.md and pilot.json go (default: --out)")
    p.add_argument("--replace-table", action="store_true", help="let --table replace a pilot.md already there")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m studies.pilot``: a few steps of each candidate setting, then the table."""
    return cli_main(argv, build_parser())


if __name__ == "__main__":
    sys.exit(main())
