"""Learning-curve plots of any run directory (``pglab plot RUN_DIR``)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pglab.errors import UsageError
from pglab.run.logger import read_metrics

# The counter to put on the x axis, in order of preference.
STEP_COLUMNS = ("env_steps", "global_step", "iteration", "opt_steps", "episode", "step")

# What a panel's y axis shows, for the metrics whose name does not say its unit.
Y_LABELS = {
    "return/mean": "mean episode return",
    "episode/success_rate": "success rate (share of episodes)",
    "episode/length": "episode length (steps)",
    "stats/entropy": "policy entropy (nats)",
    "perf/env_steps_per_s": "environment steps per second",
    "perf/step_s": "seconds per step",
    "reward/mean": "mean reward",
}


def y_label(key: str, smooth: int) -> str:
    """A panel's y-axis label: what ``key`` measures, and the smoothing applied."""
    label = Y_LABELS.get(key, key)
    return label + (f"\n(mean of {smooth} records)" if smooth > 1 else "")


def _read_metrics(run_dir: str | os.PathLike) -> Any:
    """The run's metrics as a DataFrame; an empty or unreadable ``metrics.csv`` is a
    :class:`UsageError` naming the file."""
    import pandas as pd

    try:
        return read_metrics(run_dir)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as error:
        reason = "is empty" if isinstance(error, pd.errors.EmptyDataError) else "is not a readable CSV file"
        raise UsageError(f"{Path(run_dir) / 'metrics.csv'}: {reason}") from error


def plot_learning_curves(
    run_dir: str | os.PathLike,
    *,
    keys: Sequence[str] | None = None,
    x: str | None = None,
    output: str | os.PathLike | None = None,
    smooth: int = 1,
) -> Path:
    """Plot metrics of a run (``metrics.csv`` or a ``*.jsonl`` log) into one PNG.

    Args:
        keys: metric columns to plot (default: every numeric column, at most 12).
        x: x-axis column (default: the first of ``STEP_COLUMNS`` present).
        output: PNG path (default ``RUN_DIR/plots/learning_curves.png``).
        smooth: moving-average window in records.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = _read_metrics(run_dir)
    if frame.empty:
        raise UsageError(f"run directory {run_dir}: the metrics log has no records yet")
    x_column = x or next((c for c in STEP_COLUMNS if c in frame.columns), None)
    if x_column is None or x_column not in frame.columns:
        raise UsageError(f"x: not a column of the log; columns: {', '.join(frame.columns)} (got {x!r})")
    numeric = [c for c in frame.columns if c != x_column and frame[c].dtype.kind in "fiu"]
    chosen = list(keys) if keys else [c for c in numeric if c not in STEP_COLUMNS][:12]
    missing = [k for k in chosen if k not in frame.columns]
    if missing:
        raise UsageError(f"keys: not in the log; columns: {', '.join(frame.columns)} (got {missing})")
    if not chosen:
        raise UsageError(f"run directory {run_dir}: no numeric metrics to plot")
    cols = min(3, len(chosen))
    rows = math.ceil(len(chosen) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, chosen, strict=False):
        series = frame[[x_column, key]].dropna()
        values = series[key].rolling(max(1, smooth), min_periods=1).mean()
        ax.plot(series[x_column], values, lw=1.2)
        ax.set_title(key)
        ax.set_xlabel(x_column)
        ax.set_ylabel(y_label(key, smooth), fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(chosen) :]:
        ax.set_visible(False)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    return save_figure(fig, plot_target(run_dir, output), dpi=120)


def save_figure(fig, path: str | os.PathLike, *, dpi: int = 100) -> Path:
    """Write a matplotlib figure atomically (temporary file, then ``os.replace``) and close
    it; a failure leaves neither a half-written image nor the temporary file."""
    import matplotlib.pyplot as plt

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.tmp-{os.getpid()}{target.suffix or '.png'}")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return target


def plot_target(run_dir: str | os.PathLike, output: str | os.PathLike | None) -> Path:
    """Where the figure goes: ``output`` (a directory gets ``learning_curves.png`` inside
    it), or ``RUN_DIR/plots/learning_curves.png``."""
    if output is None:
        return Path(run_dir) / "plots" / "learning_curves.png"
    target = Path(output)
    if target.is_dir() or str(output).endswith(os.sep):
        return target / "learning_curves.png"
    if target.suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
        raise UsageError(
            f"output: must be a directory or an image file ending in .png, .pdf, .svg or .jpg (got {str(output)!r})"
        )
    return target
