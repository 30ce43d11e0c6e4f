"""What every figure in ``populora_nb.analysis`` shares: a fresh axes when the caller gives none,
a line with its band, the legend or the note an empty panel shows, and the one way a figure becomes
a PNG. Every plotting function returns its ``Figure``: a notebook shows it with ``display(png_image(fig))``
and the report saves it with ``save_figure``.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

# No matplotlib.use("Agg") here: it would switch a notebook that imports this module away from
# inline figures. Saving works on every backend; matplotlib falls back to Agg without a display.
import matplotlib.pyplot as plt
from IPython.display import Image
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

DPI = 110
"""Resolution of every saved PNG (the report's and the notebooks')."""


def axes_or_new(ax: Axes | None, figsize: tuple[float, float] = (6, 3.5), steps: bool = False) -> tuple[Figure, Axes]:
    """``ax`` and its Figure, or a new Figure of ``figsize`` with one axes. ``steps``: the x axis
    counts training steps, so its ticks are whole numbers."""
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    if steps:
        whole_ticks(ax.xaxis)
    return figure_of(ax), ax


def whole_ticks(axis: Axis) -> None:
    """Ticks at whole numbers only, for an axis that counts (steps, programs drawn). ``min_n_ticks=1``:
    with the default 2, an axis spanning less than two whole numbers (an empty panel's −0.05…0.05, a
    run of one step) falls back to fractional ticks."""
    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def figure_of(ax: Axes) -> Figure:
    """The Figure ``ax`` is drawn on (a subfigure's parent figure included)."""
    fig = ax.get_figure(root=True)
    assert isinstance(fig, Figure), "an axes not on a figure"
    return fig


def say_empty(ax: Axes, why: str, fontsize: float = 9) -> None:
    """An empty panel says why inside its axes, so it is never mistaken for a flat line."""
    ax.text(
        0.5,
        0.5,
        fit(ax, why, fontsize),
        transform=ax.transAxes,
        ha="center",
        va="center",
        color="0.4",
        fontsize=fontsize,
    )


def say_missing(ax: Axes, names: list[str], why: str, fontsize: float = 7) -> None:
    """The series of a panel that have no point, named inside the panel (lower right), instead of a
    legend entry with no line beside it."""
    if names:
        note = f"no data for {', '.join(names)}: {why}"
        ax.text(
            0.98,
            0.03,
            fit(ax, note, fontsize),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            color="0.4",
            fontsize=fontsize,
        )


def fit(ax: Axes, text: str, fontsize: float) -> str:
    """``text`` wrapped to the width of ``ax`` (matplotlib's own ``wrap`` wraps at the figure's edge,
    so a note in a narrow panel runs into its neighbour)."""
    width_pt = ax.get_position().width * figure_of(ax).get_figwidth() * 72
    chars = max(12, int(0.9 * width_pt / (0.55 * fontsize)))  # an average glyph is about 0.55 em wide
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def finish(ax: Axes, drawn: bool, why_empty: str, **legend: Any) -> None:
    """A legend (``legend``: its keywords) when something was drawn, else the note why nothing was."""
    if drawn:
        ax.legend(**legend)
    else:
        say_empty(ax, why_empty)


def line_band(
    ax: Axes, x: object, mean: object, lo: object, hi: object, *fmt: str, alpha: float = 0.2, **kw: object
) -> Line2D:
    """``mean`` over ``x`` as a line (``fmt``, ``kw``: ``ax.plot``'s) with the ``lo``–``hi`` band in its colour."""
    (line,) = ax.plot(x, mean, *fmt, **kw)  # type: ignore[arg-type]
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=alpha, lw=0)  # type: ignore[arg-type]
    return line


def png_bytes(fig: Figure) -> bytes:
    """``fig`` as PNG bytes at its own dpi (the live views' in-place images), cropped to what is drawn:
    a suptitle above the axes (``y > 1``) is kept, not cut off."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def png_image(fig: Figure) -> Image:
    """``fig`` as a displayable PNG: ``display(png_image(fig))`` draws it in any notebook. A ``Figure``
    made directly (not through pyplot, so that redrawing a live view does not pile figures up in
    pyplot) has no inline display of its own: until something selects the inline backend, IPython
    shows such a figure as its text repr ``<Figure size ... with N Axes>``."""
    return Image(data=png_bytes(fig), format="png")


def save_figure(fig: Figure, path: str | Path, close: bool = True) -> Path:
    """Write ``fig`` as a PNG at ``path`` (its folder created), at ``DPI`` with a tight bounding box,
    and close it unless ``close`` is False (a notebook that still shows it). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    if close:
        plt.close(fig)
    return path
