"""The Nash equilibrium of the forecasting game (:mod:`pglab.envs.forecast_game`) on a series.

The game a run trains on is played on the rows of its series: an episode starts at a date
drawn uniformly from ``1 .. len - 1 - horizon`` and plays ``horizon`` rounds; round ``t``
shows the state key of row ``t`` and pays the forecaster ``-|y_{t+1} + p - y_t - delta|``.
No action moves the series (the next state is built from the true ``y_{t+1}``), so the
expected payoff of any pair of policies of the state key is a sum over state keys, each
with its own zero-sum stage game::

    M_k[a, b] = - sum_t w_t |y_{t+1} + p_b - y_t - delta_a| / sum_t w_t   (rows t with key k)

where ``w_t`` is how many of the equally likely episodes play a round at row ``t``
(:func:`round_weights`). A pair of policies is a Nash equilibrium of the game exactly when
it is one of every stage game its states are played in, so the equilibrium is solved
state by state, and ``forecaster_value`` is unique although the strategies need not be:

* without an adversary the stage game has one column: the equilibrium forecast is the
  grid delta with the least weighted mean absolute error of the state's rows (a conditional
  median of the change, on the grid), the first such delta on a tie;
* with the adversary it is a zero-sum matrix game, solved by linear programming (one LP
  per player, scipy's HiGHS); the strategies may be mixed.

A policy's distance to the equilibrium is its *exploitability*: the equilibrium value
minus what the policy guarantees against a best-responding opponent, weighted by how
often each state is played; it is 0 exactly for an equilibrium strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pglab.configs.forecast import SimulationConfig
from pglab.data.series import ForecastSeries
from pglab.envs.forecast_game import StateEncoder, adversary_space, forecaster_space, state_at
from pglab.errors import DataError


def round_weights(n_rows: int, horizon: int) -> np.ndarray:
    """float64[n_rows]: ``w_t``, the number of episode starts ``s`` in ``1 .. n_rows - 1 -
    horizon`` whose rounds ``s .. s + horizon - 1`` include row ``t``."""
    last_start = n_rows - 1 - horizon
    if last_start < 1:
        raise DataError(f"{n_rows} rows cannot hold an episode of horizon={horizon} (needs horizon + 2 rows)")
    t = np.arange(n_rows)
    first, last = np.maximum(1, t - horizon + 1), np.minimum(last_start, t)
    return np.maximum(last - first + 1, 0).astype(np.float64)


@dataclass(frozen=True)
class StageGames:
    """The game on a series, state by state: ``keys[k]`` is played in the share
    ``shares[k]`` of all rounds, with the forecaster's payoff matrix ``payoffs[k]``
    (float64 ``[forecaster actions, adversary actions]``; one column without an adversary)."""

    keys: tuple[int, ...]
    shares: np.ndarray
    payoffs: np.ndarray


def stage_games(
    series: ForecastSeries, encoder: StateEncoder, config: SimulationConfig, *, adversary: bool
) -> StageGames:
    """The stage games of ``config``'s game on ``series`` with the state key ``encoder``,
    with the adversary's perturbations (``adversary``) or without (the realised value is
    ``y_{t+1}``)."""
    weights = round_weights(len(series), config.horizon)
    rows = np.flatnonzero(weights)
    keys_of_rows = np.array([encoder(state_at(series, int(t))) for t in rows])
    keys, index = np.unique(keys_of_rows, return_inverse=True)
    change = series.target[rows + 1] - series.target[rows]
    deltas = forecaster_space(config).deltas
    perturbations = adversary_space(config).deltas if adversary else np.zeros(1)
    losses = np.abs(change[:, None, None] + perturbations[None, None, :] - deltas[None, :, None])
    totals = np.zeros((len(keys), len(deltas), len(perturbations)))
    np.add.at(totals, index, weights[rows][:, None, None] * losses)
    mass = np.bincount(index, weights=weights[rows], minlength=len(keys))
    return StageGames(tuple(int(key) for key in keys), mass / mass.sum(), -totals / mass[:, None, None])


def solve_zero_sum(payoff: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(row strategy, column strategy, value)`` of the zero-sum game in which the row
    player receives ``payoff[i, j]`` and the column player pays it: each strategy
    guarantees its player the value against every reply. A one-column game is solved
    exactly (the first best row); otherwise by linear programming."""
    payoff = np.asarray(payoff, dtype=np.float64)
    rows, cols = payoff.shape
    if cols == 1:
        best = int(np.argmax(payoff[:, 0]))
        return np.eye(rows)[best], np.ones(1), float(payoff[best, 0])
    row, value = _maximin(payoff)
    col, _ = _maximin(-payoff.T)
    return row, col, value


def _maximin(payoff: np.ndarray) -> tuple[np.ndarray, float]:
    """The row player's maximin strategy and its guaranteed payoff: maximise ``v`` subject
    to ``x . payoff[:, j] >= v`` for every column ``j``, ``x`` a distribution."""
    from scipy.optimize import linprog

    rows, cols = payoff.shape
    objective = np.zeros(rows + 1)
    objective[-1] = -1.0  # maximise v
    upper = np.hstack([-payoff.T, np.ones((cols, 1))])  # v - x . payoff[:, j] <= 0
    total = np.hstack([np.ones((1, rows)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * rows + [(None, None)]
    solution = linprog(objective, A_ub=upper, b_ub=np.zeros(cols), A_eq=total, b_eq=[1.0], bounds=bounds)
    if not solution.success:  # a finite zero-sum game always has a value: a solver failure is a bug
        raise RuntimeError(f"the stage game's linear program failed: {solution.message}")
    strategy = np.clip(solution.x[:rows], 0.0, None)
    strategy /= strategy.sum()
    return strategy, float((strategy @ payoff).min())


@dataclass(frozen=True)
class Equilibrium:
    """A Nash equilibrium of the game on a series (see the module docstring).

    Attributes:
        games: the stage games it solves.
        forecaster: float64 ``[states, forecaster actions]``, the forecaster's strategy per state.
        adversary: float64 ``[states, adversary actions]`` (one column without an adversary).
        values: float64 ``[states]``, the forecaster's equilibrium payoff per state.
    """

    games: StageGames
    forecaster: np.ndarray
    adversary: np.ndarray
    values: np.ndarray

    @property
    def value(self) -> float:
        """The forecaster's expected payoff per round: minus the equilibrium's mean absolute error."""
        return float(self.games.shares @ self.values)

    def guaranteed(self, actions: dict[int, int]) -> float:
        """What the pure forecasting rule ``actions`` (state key -> action) earns per round
        against an opponent that best responds in every state (without an adversary: what
        it earns)."""
        payoffs = self.games.payoffs
        worst = [payoffs[k, actions[key]].min() for k, key in enumerate(self.games.keys)]
        return float(self.games.shares @ np.asarray(worst))

    def exploitability(self, actions: dict[int, int]) -> float:
        """``value - guaranteed(actions)`` (>= 0): the rule's distance to the equilibrium."""
        return self.value - self.guaranteed(actions)

    def at_equilibrium(self, actions: dict[int, int]) -> int:
        """How many states the rule plays an equilibrium action in (one that guarantees the
        state's value)."""
        payoffs = self.games.payoffs
        return sum(
            bool(payoffs[k, actions[key]].min() >= self.values[k] - 1e-12) for k, key in enumerate(self.games.keys)
        )


def forecast_equilibrium(
    series: ForecastSeries, encoder: StateEncoder, config: SimulationConfig, *, adversary: bool
) -> Equilibrium:
    """The Nash equilibrium of ``config``'s game on ``series`` (the rows a run trains on),
    with the adversary or without."""
    games = stage_games(series, encoder, config, adversary=adversary)
    solved = [solve_zero_sum(payoff) for payoff in games.payoffs]
    return Equilibrium(
        games,
        np.array([row for row, _, _ in solved]),
        np.array([col for _, col, _ in solved]),
        np.array([value for _, _, value in solved]),
    )
