"""Experiment tracking for long headless runs: TensorBoard and Weights & Biases, as TRL reports to them.

With ``run.report_to`` set, the loop sends every step's metrics (one key per member and metric,
step-wide costs once), the config, and at the end the report's figures (`log_report`) into
RUN/tensorboard/ and RUN/wandb/ (docs/running.md, "Three ways to look at a run"). The backends are
optional extras, imported only when chosen; a missing one is a one-line `UserInputError`.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from populora_nb.errors import UserInputError

STEP_WIDE = ("time/", "memory/")
"""Metric namespaces that are the same for every member of a step (logged once, without a member)."""


def trackers(report_to: str | Sequence[str]) -> tuple[str, ...]:
    """The backends ``report_to`` names, in order, without "none" (TRL's values: a name or a list)."""
    names = (report_to,) if isinstance(report_to, str) else tuple(report_to)
    return tuple(dict.fromkeys(n for n in names if n != "none"))


def step_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A step's metrics rows (one per member) as one flat mapping ``{key}/{member}``; step-wide
    keys (`STEP_WIDE`) once as ``key``. Only finite numbers: a missing rate (None) is not a zero."""
    out: dict[str, float] = {}
    for row in rows:
        member = str(row.get("member", ""))
        for key, value in row.items():
            if key in ("step", "member", "role") or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            out[key if key.startswith(STEP_WIDE) or not member else f"{key}/{member}"] = float(value)
    return out


class Tracker(AbstractContextManager["Tracker"]):
    """Every backend ``report_to`` chose, as one: `open_tracker` makes it; with "none" it does nothing."""

    def __init__(self, backends: Sequence[TensorBoard | WandB] = ()) -> None:
        self.backends = list(backends)

    def log_step(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """One step's metrics rows (`loop.run`'s, one per member)."""
        if self.backends:
            metrics = step_metrics(rows)
            for b in self.backends:
                b.log_metrics(step, metrics)

    def close(self) -> None:
        for b in self.backends:
            b.close()
        self.backends = []

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tracker(
    report_to: str | Sequence[str], log_dir: str | Path, config: Mapping[str, Any], name: str | None = None
) -> Tracker:
    """A `Tracker` writing under ``log_dir`` (a run directory, or an experiment's for its report) for
    the backends ``report_to`` names, with ``config`` logged; ``name`` defaults to the folder's."""
    log_dir = Path(log_dir)
    name = name or log_dir.name
    backends: list[TensorBoard | WandB] = []
    try:
        for backend in trackers(report_to):  # names checked by RunConfig: tensorboard or wandb
            backends.append(
                TensorBoard(log_dir / "tensorboard", config)
                if backend == "tensorboard"
                else WandB(log_dir, name, config)
            )
    except BaseException:
        Tracker(backends).close()
        raise
    return Tracker(backends)


def log_report(report_to: str | Sequence[str], experiment: str | Path, config: Mapping[str, Any]) -> int:
    """The experiment report's figures (EXP/figures/*.png) to the trackers, in a run named "report"
    under the experiment directory; returns how many were logged (0 with report_to none)."""
    experiment = Path(experiment)
    figures = sorted((experiment / "figures").glob("*.png"))
    if not trackers(report_to) or not figures:
        return 0
    images = {f"figures/{p.stem}": p for p in figures}  # each PNG as an image under figures/<file stem>
    with open_tracker(report_to, experiment, config, name="report") as tracker:
        for b in tracker.backends:
            b.log_images(0, images)
    return len(figures)


def _missing(package: str, error: ImportError) -> UserInputError:
    return UserInputError(
        f"run.report_to names {package}, which is not installed ({error.name or error}); "
        f'pip install -e ".[track]" (or pip install {package}), or set run.report_to=none'
    )


class TensorBoard:
    """Event files under ``log_dir`` through torch's SummaryWriter (torch is a dependency already;
    it needs the ``tensorboard`` package): scalars, the config as text, figures as images."""

    def __init__(self, log_dir: Path, config: Mapping[str, Any]) -> None:
        try:
            import tensorboard  # noqa: F401  (torch's writer needs it; say so before torch does)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise _missing("tensorboard", e) from None
        import yaml

        self.writer = SummaryWriter(log_dir=str(log_dir))
        # four spaces: TensorBoard's text tab renders markdown, and this keeps the YAML as code
        text = yaml.safe_dump(dict(config), sort_keys=False)
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a headless run killed at step k still has steps 0..k-1 on disk

    def log_images(self, step: int, images: Mapping[str, Path]) -> None:
        from matplotlib.image import imread

        for tag, path in images.items():
            self.writer.add_image(tag, imread(path)[..., :3], step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    """A W&B run in ``log_dir/wandb``: offline unless the user set WANDB_MODE. Its id is derived
    from the directory, so a resumed run continues the same W&B run when synced."""

    def __init__(self, log_dir: Path, name: str, config: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise _missing("wandb", e) from None
        self.wandb = wandb
        run_id = hashlib.sha1(str(log_dir.resolve()).encode()).hexdigest()[:12]
        self.run = wandb.init(
            project="populora_nb",
            name=name,
            group=log_dir.resolve().parent.name if name != "report" else log_dir.resolve().name,
            id=run_id,
            resume="allow",
            dir=str(log_dir),
            config=dict(config),
            # W&B's own variable wins: a user who set WANDB_MODE=online chose to upload
            mode=None if "WANDB_MODE" in os.environ else "offline",
        )

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def log_images(self, step: int, images: Mapping[str, Path]) -> None:
        self.run.log({tag: self.wandb.Image(str(path)) for tag, path in images.items()}, step=step)

    def close(self) -> None:
        """Finish the run, then `teardown`: `finish` can return before W&B's service closed the run's
        stream (50 ms later, the offline file still empty); `teardown` waits for every stream (and ends
        any other W&B run of this process: a run's tracker is the last to use W&B)."""
        self.run.finish()
        self.wandb.teardown()
