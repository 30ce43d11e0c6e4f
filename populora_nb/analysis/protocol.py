"""The seed protocol: baseline and population over several seeds, every headline series with its
uncertainty (PopuLoRA compares single-agent self-play with the population; a claim about the two is
only as good as its spread over seeds).

Input: experiment directories (``python -m populora_nb experiment``), one per seed, each holding
``baseline/`` and ``population/`` run directories of the same config except ``run.seed``.

Per run and step, a series value is the mean over the members that logged it (``plots.step_mean``).
Across seeds, at each step: the mean and a 95% t-interval of the per-seed values (Student's t with
n − 1 degrees of freedom; n = seeds that logged the step; no interval from one seed). The headline
comparison takes each run's mean over its last ``window`` logged steps (one number per seed and
run) and reports baseline, population and the difference population − baseline with a Welch 95%
interval. With 3 seeds an interval is wide: that is the honest size of what 3 seeds can show.

Headline series (all from ``metrics.jsonl``; see `stages.member_metrics`):
  teacher/valid_rate     share of proposals the verifier accepted
  student/solve_rate     rho of fresh, matched proposals (not buffer tasks)
  reward/propose_mean    the proposer's (teacher's) mean reward
  lengths/propose_chars  characters per proposal (a response-length proxy)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from populora_nb.records import RunDir

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEADLINE: Mapping[str, str] = {
    "teacher/valid_rate": "valid-proposal rate",
    "student/solve_rate": "fresh-task solve rate ρ",
    "reward/propose_mean": "proposer reward",
    "lengths/propose_chars": "proposal length (chars)",
}
RUNS = ("baseline", "population")


@dataclass(frozen=True)
class Band:
    """A series across seeds: per step, the mean and its 95% t-interval (NaN where < 2 seeds)."""

    key: str
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_seeds: np.ndarray


@dataclass(frozen=True)
class Comparison:
    """One headline series, end-of-run means per seed for both runs and their difference."""

    key: str
    baseline: tuple[float, ...]
    population: tuple[float, ...]
    difference: float
    """mean(population) − mean(baseline)"""
    low: float
    high: float
    """Welch 95% interval of the difference (NaN with fewer than 2 seeds in either run)."""

    @property
    def separated(self) -> bool:
        """The interval excludes 0: the runs differ beyond what the seeds' spread explains."""
        return not math.isnan(self.low) and (self.low > 0 or self.high < 0)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t with ``dof`` (real, > 0) degrees of freedom, by bisection on its
    CDF (1 − ½ I_{dof/(dof+t²)}(dof/2, ½) for t > 0). Kept here so the protocol needs no scipy."""
    if not 0.5 <= p < 1.0 or dof <= 0:
        raise ValueError(f"need 0.5 <= p < 1 and dof > 0, got p={p}, dof={dof}")
    lo, hi = 0.0, 1.0
    while 1.0 - 0.5 * _betainc(dof / 2, 0.5, dof / (dof + hi * hi)) < p:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 1.0 - 0.5 * _betainc(dof / 2, 0.5, dof / (dof + mid * mid)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def run_series(run_dir: str | Path, key: str) -> dict[int, float]:
    """step -> the mean of ``key`` over the members that logged it at that step."""
    by_step: dict[int, list[float]] = {}
    for r in RunDir(Path(run_dir)).read("metrics"):
        if r.get(key) is not None:
            by_step.setdefault(int(r["step"]), []).append(float(r[key]))
    return {s: float(np.mean(v)) for s, v in sorted(by_step.items())}


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of a Student-t interval for the mean; low = high = NaN for n < 2."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean()) if len(x) else math.nan
    if len(x) < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + level / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean(b) − mean(a), low, high): Welch's interval for a difference of means with unequal
    variances; NaN bounds when either side has fewer than 2 values. Zero variance on both sides
    gives a zero-width interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(y.mean() - x.mean()) if len(x) and len(y) else math.nan
    if len(x) < 2 or len(y) < 2:
        return d, math.nan, math.nan
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(vx + vy)
    if se == 0.0:
        return d, d, d
    dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = t_quantile(0.5 + level / 2, dof) * se
    return d, d - half, d + half


def band(run_dirs: Sequence[str | Path], key: str) -> Band:
    """``key`` across seeds (one run directory per seed): per step mean and 95% t-interval."""
    per_seed = [run_series(d, key) for d in run_dirs]
    steps = sorted({s for series in per_seed for s in series})
    rows = [t_interval([series[s] for series in per_seed if s in series]) for s in steps]
    n = [sum(s in series for series in per_seed) for s in steps]
    arr = np.asarray(rows, dtype=float).reshape(len(steps), 3)
    return Band(key, np.asarray(steps), arr[:, 0], arr[:, 1], arr[:, 2], np.asarray(n))


def end_value(run_dir: str | Path, key: str, window: int = 5) -> float:
    """A run's mean of ``key`` over its last ``window`` logged steps (NaN if it never logged it)."""
    series = run_series(run_dir, key)
    values = [series[s] for s in sorted(series)[-window:]]
    return float(np.mean(values)) if values else math.nan


def compare(
    experiments: Sequence[str | Path], keys: Sequence[str] = tuple(HEADLINE), window: int = 5
) -> list[Comparison]:
    """Baseline vs population over the seeds (one experiment directory each), per headline key."""
    out = []
    for key in keys:
        values = {
            run: [end_value(Path(e) / run, key, window) for e in experiments if (Path(e) / run).is_dir()]
            for run in RUNS
        }
        values = {run: [v for v in vs if not math.isnan(v)] for run, vs in values.items()}
        d, low, high = welch_interval(values["baseline"], values["population"])
        out.append(Comparison(key, tuple(values["baseline"]), tuple(values["population"]), d, low, high))
    return out


def comparison_table(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Rows for a report: each series' baseline and population means (± half the 95% interval)
    over seeds, and the difference with its Welch interval."""

    def mean_pm(values: Sequence[float]) -> str:
        """The mean over seeds ± half its 95% t-interval."""
        m, low, high = t_interval(values)
        if math.isnan(m):
            return "n/a"
        return f"{m:.3f}" if math.isnan(low) else f"{m:.3f} ± {(high - low) / 2:.3f}"

    rows = [
        [
            "series",
            "seeds (baseline / population)",
            "baseline",
            "population",
            "population − baseline [95% CI]",
            "separated?",
        ]
    ]
    for c in comparisons:
        diff = (
            "n/a"
            if math.isnan(c.difference)
            else (f"{c.difference:+.3f}" + ("" if math.isnan(c.low) else f" [{c.low:+.3f}, {c.high:+.3f}]"))
        )
        rows.append(
            [
                HEADLINE.get(c.key, c.key),
                f"{len(c.baseline)} / {len(c.population)}",
                mean_pm(c.baseline),
                mean_pm(c.population),
                diff,
                "yes" if c.separated else "no",
            ]
        )
    return rows


def plot_seed_band(experiments: Sequence[str | Path], key: str, ax: Axes | None = None) -> Figure:
    """``key`` over steps for baseline and population across seeds: the mean line and its 95%
    t-interval band (no band where fewer than 2 seeds logged a step). Returns the Figure."""
    from populora_nb.analysis.figures import axes_or_new, say_empty

    fig, ax = axes_or_new(ax, steps=True)
    drawn = False
    for run, color in zip(RUNS, ("tab:gray", "tab:red")):
        dirs = [Path(e) / run for e in experiments if (Path(e) / run / "metrics.jsonl").exists()]
        b = band(dirs, key)
        if not len(b.steps):
            continue
        drawn = True
        ax.plot(b.steps, b.mean, color=color, marker="o", ms=3, label=f"{run} (n = {len(dirs)} seeds)")
        ax.fill_between(b.steps, b.low, b.high, color=color, alpha=0.2, lw=0)
    ax.set(xlabel="step", ylabel=HEADLINE.get(key, key), title=f"{HEADLINE.get(key, key)}: mean over seeds, 95% band")
    if drawn:
        ax.legend(fontsize=8)
    else:
        say_empty(ax, f"no run logged {key}")
    fig.tight_layout()
    return fig


def write_seed_report(experiments: Sequence[str | Path], out_dir: str | Path, window: int = 5) -> Path:
    """``out_dir/seeds.md`` with the comparison table and one band figure per headline series
    (``out_dir/seeds_<series>.png``); returns the markdown path."""
    from populora_nb.analysis.figures import save_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = comparison_table(compare(experiments, window=window))
    lines = [
        f"# Seed protocol: {len(experiments)} experiments",
        "",
        f"End-of-run value: each run's mean over its last {window} logged steps; ± is half the 95% t-interval "
        "over seeds; the difference has a Welch 95% interval. 'separated' means the interval excludes 0.",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|" + "---|" * len(rows[0]),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    for key in HEADLINE:
        name = "seeds_" + key.replace("/", "_") + ".png"
        save_figure(plot_seed_band(experiments, key), out / name)
        lines += ["", f"![{HEADLINE[key]}]({name})"]
    path = out / "seeds.md"
    path.write_text("\n".join(lines) + "\n")
    return path
