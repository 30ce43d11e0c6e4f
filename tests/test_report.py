"""The experiment report (populora_nb.analysis.report) built from synthetic experiments: what its
figures look like to a reader."""

import matplotlib

matplotlib.use("Agg")  # noqa: E402  (tests draw off-screen)

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from populora_nb.analysis import report
from populora_nb.config import load_config, save_config
from studies.synthetic import write_synthetic_experiment


def _report_figures(tmp_path: Path, n_steps: int, monkeypatch) -> dict[str, Figure]:
    """Every figure `make_figures` saves for a synthetic experiment of ``n_steps``, kept open."""
    exp = write_synthetic_experiment(tmp_path / "exp", n_steps=n_steps, matches=True)
    for agent in ("baseline", "population"):  # a loadable config: the report reads the task kinds from it
        save_config(load_config("tiny", {"run.agent": agent, "run.steps": n_steps}), exp / agent / "config.yaml")
    figures: dict[str, Figure] = {}
    save = report.save_figure

    def keep_open(fig: Figure, path: Path, close: bool = True) -> Path:
        figures[Path(path).name] = fig
        return save(fig, path, close=False)

    monkeypatch.setattr(report, "save_figure", keep_open)
    report.make_figures(exp)
    return figures


# 3 steps: a step axis spanning two whole numbers (matplotlib's default ticks 0, 0.5, 1, ...); 24: the
# probe's events every 5 steps (it ticked 2.5, 7.5, ...); both: panels with no data (synthetic runs log
# no solve rate per kind) whose axes span −0.05…0.05
@pytest.mark.slow  # two reports, ~15 s each
@pytest.mark.parametrize("n_steps", [3, 24])
def test_every_step_axis_of_the_report_ticks_whole_steps(tmp_path, monkeypatch, n_steps):
    figures = _report_figures(tmp_path, n_steps, monkeypatch)
    assert {"solve_rates.png", "difficulty_probe.png", "complexity.png", "coverage.png", "ratings.png"} <= set(figures)
    counted = 0
    for name, fig in figures.items():
        fig.canvas.draw()
        for ax in fig.axes:
            label = ax.get_xlabel()
            if "step" not in label and "drawn (n)" not in label:  # step axes, and coverage's count of draws
                continue
            low, high = sorted(ax.get_xlim())
            ticks = [t for t in ax.get_xticks() if low - 1e-9 <= t <= high + 1e-9]
            assert ticks, f"{name} · {ax.get_title()}: no tick on its {label} axis"
            assert all(float(t).is_integer() for t in ticks), f"{name} · {ax.get_title()}: {label} ticks {ticks}"
            counted += 1
    assert counted >= 15  # every panel of the list above, not a few
    plt.close("all")


def test_a_three_step_report_names_the_checks_it_cannot_judge_and_never_says_every_check_passed(tmp_path):
    """A `smoke`-length run (3 steps) holds fewer than 4 step blocks: its report's mechanism section
    says "too few to judge" for the share checks, not "Every check passed"."""
    exp = write_synthetic_experiment(tmp_path / "exp", n_steps=3, matches=True)
    for agent in ("baseline", "population"):
        save_config(load_config("tiny", {"run.agent": agent, "run.steps": 3}), exp / agent / "config.yaml")
    live = next(s for s in report.sections(exp) if s.title == "Is the mechanism live?")
    assert "Every check passed" not in live.text
    assert "Too few to judge: new programs, new programs, last window, band" in live.text
    assert "distinct programs" in live.text and "**Baseline**" in live.text
