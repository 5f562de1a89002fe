"""``pglab plot RUN_DIR``: learning curves from a run's metrics log."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import tyro

from pglab.run.config import parse_config
from pglab.validation import check_int, check_output_path, check_path_fields


@dataclasses.dataclass(frozen=True)
class PlotConfig:
    run_dir: Annotated[Path, tyro.conf.Positional]
    """run directory holding metrics.csv or a *.jsonl log"""
    keys: tuple[str, ...] = ()
    """metrics to plot (default: all numeric columns, at most 12)"""
    x: str | None = None
    """x-axis column (default: env_steps, iteration or opt_steps, whichever exists)"""
    output: Path | None = None
    """PNG to write (default RUN_DIR/plots/learning_curves.png)"""
    smooth: int = 1
    """moving-average window, in records"""

    def __post_init__(self):
        check_path_fields(self)
        check_int("smooth", self.smooth, minimum=1)


def plot(argv: list[str]) -> int:
    from pglab.run.plots import plot_learning_curves

    config = parse_config(PlotConfig, argv, prog="pglab plot")
    check_output_path("output", config.output)
    path = plot_learning_curves(
        config.run_dir, keys=config.keys or None, x=config.x, output=config.output, smooth=config.smooth
    )
    print(path)
    return 0
