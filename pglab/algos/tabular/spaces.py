"""Discretised action spaces for tabular learners."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pglab.errors import ConfigError
from pglab.validation import check_int, check_positive


@dataclass(frozen=True)
class DiscreteActionSpace:
    """``n_bins`` evenly spaced deltas covering ``[-max_delta, max_delta]``.

    With the defaults, 21 bins span [-1.0, 1.0] in steps of 0.1 (units of the target
    series, e.g. percentage points of unemployment). Action ``n_bins // 2`` is delta 0
    when ``n_bins`` is odd.
    """

    n_bins: int = 21
    """number of actions (>= 2)"""
    max_delta: float = 1.0
    """largest absolute delta, in units of the forecast target"""

    def __post_init__(self):
        check_int("n_bins", self.n_bins, minimum=2)
        check_positive("max_delta", self.max_delta)

    @property
    def n(self) -> int:
        return self.n_bins

    @property
    def bin_width(self) -> float:
        """``2 * max_delta / (n_bins - 1)``."""
        return 2.0 * self.max_delta / (self.n_bins - 1)

    @property
    def deltas(self) -> np.ndarray:
        """float64[n_bins]: the delta of every action, ascending."""
        return -self.max_delta + np.arange(self.n_bins) * self.bin_width

    def action_to_delta(self, idx: int) -> float:
        """``-max_delta + idx * bin_width``."""
        if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)) or not 0 <= idx < self.n_bins:
            raise ConfigError("action", idx, f"must be an integer in [0, {self.n_bins - 1}]")
        return -self.max_delta + int(idx) * self.bin_width

    def delta_to_action(self, delta: float) -> int:
        """Nearest bin of ``delta`` clamped to ``[-max_delta, max_delta]``."""
        if not math.isfinite(delta):
            raise ConfigError("delta", delta, "must be a finite number")
        clamped = min(max(float(delta), -self.max_delta), self.max_delta)
        # floor(x + 0.5) rather than round(): Python's round() sends .5 to the even
        # neighbour, which would make the mapping depend on the bin's parity.
        return int(min(self.n_bins - 1, math.floor((clamped + self.max_delta) / self.bin_width + 0.5)))

    def to_dict(self) -> dict:
        return {"n_bins": self.n_bins, "max_delta": self.max_delta}
