"""What every figure in ``populora_nb.analysis`` shares: a fresh axes when the caller gives none,
the note an empty panel shows, and the one way a figure becomes a PNG.

Every plotting function in the subpackage returns a matplotlib ``Figure`` (the one its axes sit on),
so a notebook shows it inline and the report and the notebooks save it with ``save_figure``.
"""

from __future__ import annotations

from pathlib import Path

# No matplotlib.use("Agg") here: it would switch a notebook that imports this module away from
# inline figures. Saving works on every backend; matplotlib falls back to Agg without a display.
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

DPI = 110
"""Resolution of every saved PNG (the report's and the notebooks')."""


def axes_or_new(ax: Axes | None, figsize: tuple[float, float] = (6, 3.5), steps: bool = False) -> tuple[Figure, Axes]:
    """``ax`` and its Figure, or a new Figure of ``figsize`` with one axes. ``steps``: the x axis
    counts training steps, so its ticks are whole numbers."""
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    if steps:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure_of(ax), ax


def figure_of(ax: Axes) -> Figure:
    """The Figure ``ax`` is drawn on (a subfigure's parent figure included)."""
    fig = ax.get_figure(root=True)
    assert isinstance(fig, Figure), "an axes not on a figure"
    return fig


def say_empty(ax: Axes, why: str) -> None:
    """An empty panel says why inside its axes, so it is never mistaken for a flat line."""
    ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", color="0.4", fontsize=9, wrap=True)


def save_figure(fig: Figure, path: str | Path, close: bool = True) -> Path:
    """Write ``fig`` as a PNG at ``path`` (its folder created), at ``DPI`` with a tight bounding box,
    and close it unless ``close`` is False (a notebook that still shows it). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    if close:
        plt.close(fig)
    return path
