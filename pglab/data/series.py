"""The container every data source returns: a target series and its exogenous driver."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pglab.errors import DataError


@dataclass(frozen=True)
class ForecastSeries:
    """Aligned observations ``y_t`` (target) and ``x_t`` (exogenous driver), t = 0..T-1.

    Attributes:
        target: float64[T], the series to forecast (e.g. unemployment, percent).
        exogenous: float64[T], the driver observed at the same dates.
        dates: T date labels (ISO strings, or "t0", "t1"... for synthetic data).
        name: a label for reports, e.g. ``macrodata:unemp~realgdp_growth``.
    """

    target: np.ndarray
    exogenous: np.ndarray
    dates: tuple[str, ...]
    name: str

    def __post_init__(self):
        target = np.asarray(self.target, dtype=np.float64)
        exogenous = np.asarray(self.exogenous, dtype=np.float64)
        if target.ndim != 1 or exogenous.shape != target.shape or len(self.dates) != target.shape[0]:
            raise DataError(
                f"series {self.name}: target float64[T], exogenous float64[T] and T dates expected, "
                f"got target{list(target.shape)}, exogenous{list(exogenous.shape)}, {len(self.dates)} dates"
            )
        if target.shape[0] == 0:
            raise DataError(f"series {self.name}: no observations")
        for label, values in (("target", target), ("exogenous", exogenous)):
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise DataError(f"series {self.name}: {label} is not finite at {self.dates[bad[0]]} (row {bad[0]})")
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "exogenous", exogenous)
        object.__setattr__(self, "dates", tuple(str(d) for d in self.dates))

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def slice(self, start: int, stop: int) -> ForecastSeries:
        """Rows ``start:stop`` (a training window)."""
        return ForecastSeries(self.target[start:stop], self.exogenous[start:stop], self.dates[start:stop], self.name)

    def require_length(self, minimum: int, what: str) -> None:
        if len(self) < minimum:
            raise DataError(f"series {self.name}: {len(self)} rows, but {what} needs at least {minimum}")
