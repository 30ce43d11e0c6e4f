"""Small tables and one figure of what each stage of one step produced (`populora_nb.stages`), one
table per stage (the pairing also as a grid), for the notebooks that run a step by hand.

Each table is read straight from the stage's own objects, so what it shows is what the loop then
records for the same stage; nothing here computes a quantity of its own except counts and means.
Numbers are rounded to what they can show (ρ and μ, σ to 2 decimals, rewards and advantages to 3:
an advantage of −1.5e-08 is a float's rounding of 0), and a task without ρ shows `NO_RHO`.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from populora_nb.matchmaking import Match, Rating, game_rule, student_games, teacher_games
from populora_nb.policy import Sample
from populora_nb.prompts import ParseFailure
from populora_nb.stages import Attempt, Proposed
from populora_nb.tasks import Task
from populora_nb.verify import Invalid

MARK = {"correct": "✓", "wrong": "✗", "malformed": "·"}
"""How a rollout's status is drawn in `rollouts_table`: passed, failed, unparseable answer."""
NO_RHO = "–"
"""ρ of a task nobody solved this step: an invalid or unparsed proposal, or a buffer task."""


def _rho(rho: float | None) -> float | str:
    return NO_RHO if rho is None else round(rho, 2)


def _round(value: float, digits: int) -> float:
    return round(value, digits) + 0.0  # + 0.0: no "-0.0" for a tiny negative rounded away


def pairing_table(win_probabilities: dict[str, dict[str, float]], partner: dict[str, str]) -> pd.DataFrame:
    """One row per teacher: P(teacher beats student) against every student on the ratings PFSP drew
    with, and the student it was matched with (`stages.pair`'s two products)."""
    rows = [
        {"teacher": t, **{f"P(beats {s})": round(p, 3) for s, p in probs.items()}, "matched": partner.get(t)}
        for t, probs in win_probabilities.items()
    ]
    return pd.DataFrame(rows).set_index("teacher") if rows else pd.DataFrame()


def plot_pairing(win_probabilities: dict[str, dict[str, float]], partner: dict[str, str]) -> Figure:
    """The win probabilities as a teacher × student grid, the matched pair of each teacher boxed."""
    table = pd.DataFrame(win_probabilities).T  # teachers as rows, students as columns
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * max(1, table.shape[1]), 1.0 + 0.5 * max(1, table.shape[0])))
    image = ax.imshow(table.to_numpy(dtype=float), vmin=0.0, vmax=1.0, cmap="coolwarm")
    ax.set_xticks(range(table.shape[1]), list(table.columns))
    ax.set_yticks(range(table.shape[0]), list(table.index))
    for i, t in enumerate(table.index):
        for j, s in enumerate(table.columns):
            ax.text(j, i, f"{table.iloc[i, j]:.2f}", ha="center", va="center", fontsize=8)
            if partner.get(t) == s:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2.5, ec="black"))
    ax.set_title("P(teacher beats student); boxed: PFSP's pairing")
    fig.colorbar(image, ax=ax, fraction=0.05)
    fig.tight_layout()
    return fig


def _verdict(result: object) -> tuple[str, str]:
    """(verdict, reason) of a proposal's validation result, with the verifier's detail (a tasks.jsonl row's
    verdict: `dashboard.verdict`)."""
    if isinstance(result, Invalid):
        return "invalid", f"{result.reason}: {result.detail[:80]}" if result.detail else result.reason
    if isinstance(result, ParseFailure):
        return "unparsed", result.reason
    return "valid" if isinstance(result, Task) else "not validated", ""


def proposals_table(proposals: list[Proposed]) -> pd.DataFrame:
    """Every proposal: who wrote it for whom, its kind, the verifier's verdict and reason, its copy
    class, the first line of its program, and ρ once solved."""
    rows = []
    for p in proposals:
        said, reason = _verdict(p.result)
        program = (getattr(p.parsed, "program", "") or "").strip()
        row = {"proposer": p.proposer, "solver": p.solver, "kind": p.kind, "verdict": said, "reason": reason}
        first = program.splitlines()[0][:60] if program else ""
        rows.append(row | {"copy": p.copy or "", "program (first line)": first, "ρ": _rho(p.rho)})
    return pd.DataFrame(rows)


def rollouts_table(attempts: list[Attempt], proposals: list[Proposed]) -> pd.DataFrame:
    """Each solver's rollouts per task: ✓ passed, ✗ failed, · unparseable; passed of k, and ρ for a
    task proposed this step (a buffer task, drawn to fill the batch, has none)."""
    groups: dict[tuple, list[Attempt]] = defaultdict(list)
    for a in attempts:
        # a task proposed this step by its index; a buffer task by identity (its rollouts share the object)
        groups[(a.solver, a.proposed_index if a.fresh else id(a.task), a.train)].append(a)
    rows = []
    for (solver, where, train), attempts in groups.items():
        fresh, statuses = attempts[0].fresh, [a.status for a in attempts]
        row = {"solver": solver, "task": f"proposal {where}" if fresh else "buffer task", "kind": attempts[0].task.kind}
        row |= {"trained on": train, "rollouts": "".join(MARK[s] for s in statuses)}
        row |= {"passed": statuses.count("correct"), "k": len(statuses)}
        rows.append(row | {"ρ": _rho(proposals[where].rho if fresh else None)})
    return pd.DataFrame(rows)


def rewards_table(samples: list[Sample]) -> pd.DataFrame:
    """Per member and role: how many samples, their rewards counted by value, and the mean reward
    (AZR's single agent, ``agent``, is named proposer and solver; a population's members teacher and student)."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in samples:
        by[(s.member, s.group[1])].append(s.reward)
    names = {("propose", False): "teacher", ("propose", True): "proposer", ("solve", False): "student"}
    rows = []
    for (m, role), r in by.items():
        row = {"member": m, "role": names.get((role, m == "agent"), "solver"), "samples": len(r)}
        counts = ", ".join(f"{v:+g}×{n}" for v, n in sorted(Counter(r).items()))
        rows.append(row | {"rewards": counts, "mean reward": _round(sum(r) / len(r), 3)})
    return pd.DataFrame(rows)


def advantages_table(samples: list[Sample]) -> pd.DataFrame:
    """TRR++ per (member, role, kind) group: rewards and advantages, mean and spread. Advantages are
    centred within each group, so their mean is 0 wherever the rewards differ."""
    by: dict[tuple, list] = defaultdict(list)
    for s in samples:
        by[s.group].append(s)
    rows = []
    for (member, role, kind), samples in by.items():
        r = pd.Series([s.reward for s in samples])
        a = pd.Series([s.advantage for s in samples])
        row = {"member": member, "role": role, "kind": kind, "n": len(samples), "reward mean": _round(r.mean(), 3)}
        row |= {"reward sd": _round(r.std(ddof=0), 3), "advantage mean": _round(a.mean(), 3)}
        rows.append(row | {"advantage min": _round(a.min(), 3), "advantage max": _round(a.max(), 3)})
    return pd.DataFrame(rows)


def update_table(update_stats: dict[str, dict[str, float]], roster: dict[str, str]) -> pd.DataFrame:
    """Each member's update: its loss, gradient norm (before clipping), samples, and whether it was
    skipped (every advantage zero: nothing to learn from)."""
    keys = {"loss/total": "loss", "loss/pg": "pg loss", "optim/grad_norm": "grad norm", "optim/n_samples": "samples"}
    rows = []
    for member, stats in update_stats.items():
        row: dict[str, object] = {"member": member, "role": roster.get(member, "")}
        row.update({label: stats.get(key) for key, label in keys.items()})
        row["skipped"] = bool(stats.get("optim/skipped", 0.0))
        rows.append(row)
    return pd.DataFrame(rows)


def ratings_table(
    matches: list[Match],
    before: dict[str, Rating],
    after: dict[str, Rating],
    roster: dict[str, str],
    threshold: float,
) -> pd.DataFrame:
    """Every member's TrueSkill μ and σ before and after the step's matches (`stages.rate`), the games
    it won and lost (against its partner, against the reference), and the rules (`matchmaking.game_rule`,
    at the win ``threshold``) that made them."""
    won: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    rules: dict[str, Counter[str]] = defaultdict(Counter)
    for m in matches:
        for member, role, games in (
            (m.teacher, "teacher", teacher_games(m, threshold)),
            (m.student, "student", student_games(m)),
        ):
            # the rule's name (before its colon); `matchmaking.game_rule` spells out its games
            rules[member][game_rule(m, role, threshold).split(":")[0]] += 1  # type: ignore[arg-type]
            won[member] += sum(g.won for g in games)
            lost[member] += sum(not g.won for g in games)
    rows = []
    for member, old in before.items():
        new = after.get(member, old)
        row: dict[str, object] = {"member": member, "role": roster.get(member, "")}
        row |= {"μ before": _round(old.mu, 2), "μ after": _round(new.mu, 2), "Δμ": _round(new.mu - old.mu, 2)}
        row |= {"σ before": _round(old.sigma, 2), "σ after": _round(new.sigma, 2)}
        row |= {"games won": won[member], "games lost": lost[member]}
        rows.append(row | {"rules (matches)": "; ".join(f"{r} ×{n}" for r, n in rules[member].items()) or "no match"})
    return pd.DataFrame(rows)


def evolution_table(births: list[dict]) -> pd.DataFrame:
    """The evolution event: who was replaced, by which child, with which operator from which parents,
    the child's relative distance ‖ΔW_child − ΔW_parent‖ / ‖ΔW_parent‖ from each, and its inherited rating."""
    rows = []
    for b in births:
        changes = b.get("parent_changes") or [b.get("relative_change")]
        row = {k: b[k] for k in ("role", "replaced", "child", "operator")} | {"parents": ", ".join(b["parents"])}
        row |= {"distance from parents": ", ".join(f"{c:.3g}" for c in changes)}
        rows.append(row | {"μ": _round(b["mu"], 2), "σ": _round(b["sigma"], 2)})
    return pd.DataFrame(rows)
