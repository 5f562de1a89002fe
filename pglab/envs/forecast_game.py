"""The forecasting game: a forecaster predicts ``y_{t+1}``, an optional adversary perturbs it.

Each round t of an episode:

1. the state is ``ForecastState(value=y_t, exogenous=x_t, t, change=y_t - y_{t-1})``;
2. the forecaster picks action ``a`` from its :class:`DiscreteActionSpace`; its forecast
   is ``y_t + delta(a)``;
3. the adversary (if any) picks a perturbation ``p`` from its own space
   (``[-adversary_max, adversary_max]``), seeing the same state but not the forecast
   (simultaneous moves);
4. realised = ``y_{t+1} + p``; forecaster reward ``-|realised - forecast|``, adversary
   reward ``+|realised - forecast|`` (zero-sum).

The next state is built from the true ``y_{t+1}``: the adversary corrupts what the
forecaster is scored against, not the history it reads. An episode is ``horizon``
consecutive rounds starting at a random date drawn from the game's seed.

The action spaces are defined here, with the game, so that the game needs nothing from
the learners (``pglab.algos.tabular`` builds on this module, never the reverse).

State keys map a continuous state to a Q-table row:

* ``hash`` -- fixed-width buckets: 50 x 50 buckets of the level mod 100 (width 2.0)
  and of the exogenous value (width 0.2, offset 5);
* ``scaled`` -- quantile buckets of the recent change ``y_t - y_{t-1}`` and of ``x_t``,
  with edges fitted on the training window only (no look-ahead).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from pglab.configs.forecast import SimulationConfig
from pglab.data.series import ForecastSeries
from pglab.errors import ConfigError, DataError
from pglab.validation import check_int, check_positive


# --- action spaces ---------------------------------------------------------------------------
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


def forecaster_space(config: SimulationConfig) -> DiscreteActionSpace:
    """The forecaster's actions: ``n_bins`` deltas in ``[-max_delta, max_delta]``."""
    return DiscreteActionSpace(config.n_bins, config.max_delta)


def adversary_space(config: SimulationConfig) -> DiscreteActionSpace:
    """The adversary's actions: ``adversary_bins`` perturbations in ``[-adversary_max, adversary_max]``."""
    return DiscreteActionSpace(config.adversary_bins, config.adversary_max)


@dataclass(frozen=True)
class ForecastState:
    """What the players see at date ``t``: the level, the driver and the last change."""

    value: float
    exogenous: float
    t: int
    change: float = 0.0


def _state_hash(state: ForecastState, n_buckets: int = 50) -> int:
    """Fixed-width buckets of the level mod 100 and of the exogenous value (up to 50 x 50 = 2500 keys)."""
    v_bucket = int((state.value % 100) / 2) % n_buckets
    e_bucket = int((state.exogenous + 5) * 5) % n_buckets
    return v_bucket * n_buckets + e_bucket


# --- state keys ------------------------------------------------------------------------------
class StateEncoder(Protocol):
    def __call__(self, state: ForecastState) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class HashStateKey:
    """``_state_hash`` with ``n_buckets`` per dimension."""

    n_buckets: int = 50

    def __call__(self, state: ForecastState) -> int:
        return _state_hash(state, self.n_buckets)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "hash", "n_buckets": self.n_buckets}


@dataclass(frozen=True)
class ScaledStateKey:
    """Quantile buckets of the recent change and of the driver.

    ``key = bucket(change; change_edges) * n + bucket(exogenous; exogenous_edges)`` where
    each edge list holds the ``n - 1`` interior quantiles (1/n, ..., (n-1)/n) of the
    training window, so every bucket holds about the same number of training rows
    whatever the series' units.
    """

    change_edges: tuple[float, ...]
    exogenous_edges: tuple[float, ...]

    @property
    def n_buckets(self) -> int:
        return len(self.change_edges) + 1

    @classmethod
    def fit(cls, series: ForecastSeries, n_buckets: int) -> ScaledStateKey:
        change = np.diff(series.target)
        if change.size == 0:
            raise DataError(f"series {series.name}: at least 2 rows are needed to fit the 'scaled' state key")
        levels = np.arange(1, n_buckets) / n_buckets
        return cls(
            tuple(np.quantile(change, levels).tolist()), tuple(np.quantile(series.exogenous[1:], levels).tolist())
        )

    def __call__(self, state: ForecastState) -> int:
        # bisect_right: a value equal to an edge goes to the upper bucket. (Pure-Python
        # bisect on a short tuple is ~20x cheaper than np.searchsorted on a scalar.)
        change_bucket = bisect_right(self.change_edges, state.change)
        exogenous_bucket = bisect_right(self.exogenous_edges, state.exogenous)
        return change_bucket * self.n_buckets + exogenous_bucket

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "scaled",
            "change_edges": list(self.change_edges),
            "exogenous_edges": list(self.exogenous_edges),
        }


def make_state_encoder(config: SimulationConfig, training: ForecastSeries) -> StateEncoder:
    """The configured state key, fitted on ``training`` where it needs fitting."""
    if config.state_key == "hash":
        return HashStateKey(config.hash_buckets)
    return ScaledStateKey.fit(training, config.scaled_buckets)


def encoder_from_dict(payload: dict[str, Any]) -> StateEncoder:
    """Inverse of ``encoder.to_dict()`` (used when a saved forecaster is reloaded)."""
    try:
        if payload["kind"] == "hash":
            return HashStateKey(int(payload["n_buckets"]))
        if payload["kind"] == "scaled":
            change, exogenous = (
                tuple(map(float, payload["change_edges"])),
                tuple(map(float, payload["exogenous_edges"])),
            )
            if len(change) != len(exogenous):
                raise ValueError("edge lists differ in length")
            return ScaledStateKey(change, exogenous)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError("state_encoder", payload, f"malformed ({exc})") from exc
    raise ConfigError("state_encoder", payload, "kind must be 'hash' or 'scaled'")


def state_at(series: ForecastSeries, t: int) -> ForecastState:
    """The state at row ``t`` (``change`` is 0 at the first row, which has no past)."""
    change = float(series.target[t] - series.target[t - 1]) if t > 0 else 0.0
    return ForecastState(float(series.target[t]), float(series.exogenous[t]), t, change)


# --- the game --------------------------------------------------------------------------------
class Player(Protocol):
    def act(self, state_key: Any, explore: bool = True) -> int: ...


class Transition(NamedTuple):
    """One round. ``reward`` is the forecaster's; the adversary's is ``-reward``.

    (A NamedTuple rather than a frozen dataclass: one is built per round, and a frozen
    dataclass's ``__init__`` costs several times more.)
    """

    state: ForecastState
    action: int
    reward: float
    next_state: ForecastState
    state_key: int
    next_state_key: int
    forecast: float
    realised: float
    adversary_action: int | None = None


@dataclass
class ForecastGame:
    """One episode of the forecasting game on ``series``.

    Args:
        config: the game settings.
        seed: picks the episode's start date.
        series: the data (a training window in backtests).
        encoder: the state key; default ``make_state_encoder(config, series)``.
    """

    config: SimulationConfig
    seed: int
    series: ForecastSeries
    encoder: StateEncoder | None = None
    start: int = field(init=False)

    def __post_init__(self):
        if self.encoder is None:
            self.encoder = make_state_encoder(self.config, self.series)
        # Rounds t = start .. start + horizon - 1 each need y_{t+1}; start >= 1 so that
        # every state has a previous change.
        last_start = len(self.series) - 1 - self.config.horizon
        if last_start < 1:
            raise DataError(
                f"series {self.series.name}: {len(self.series)} rows cannot hold an episode of horizon="
                f"{self.config.horizon} (needs horizon + 2 rows); lower --horizon or widen the window"
            )
        self.start = int(np.random.default_rng(self.seed).integers(1, last_start + 1))

    def run(
        self,
        forecaster: Player,
        adversary: Player | None = None,
        *,
        explore: bool = True,
        adversary_explore: bool | None = None,
    ) -> list[Transition]:
        """Play ``horizon`` rounds; return the trajectory log (no learning happens here)."""
        forecaster_deltas = forecaster_space(self.config).deltas
        adversary_deltas = adversary_space(self.config).deltas
        adversary_explore = explore if adversary_explore is None else adversary_explore
        encoder = self.encoder
        assert encoder is not None  # __post_init__ fitted it
        logs: list[Transition] = []
        state = state_at(self.series, self.start)
        key = encoder(state)
        for t in range(self.start, self.start + self.config.horizon):
            action = forecaster.act(key, explore)
            forecast = state.value + forecaster_deltas[action]
            adversary_action = adversary.act(key, adversary_explore) if adversary is not None else None
            perturbation = adversary_deltas[adversary_action] if adversary is not None else 0.0
            realised = float(self.series.target[t + 1] + perturbation)
            reward = -abs(realised - forecast)  # forecaster: -|realised - forecast|
            next_state = state_at(self.series, t + 1)
            next_key = encoder(next_state)
            logs.append(
                Transition(
                    state, action, reward, next_state, key, next_key, float(forecast), realised, adversary_action
                )
            )
            state, key = next_state, next_key
        return logs
