"""The forecasting game's Nash equilibrium, checked against the game itself: every episode
start played with every pure rule of the state key (an exact enumeration on a tiny
series), and the certificate of a zero-sum equilibrium."""

import itertools

import numpy as np
import pytest

from pglab.configs.forecast import SimulationConfig
from pglab.data.sources import synthetic_series
from pglab.envs.forecast_equilibrium import forecast_equilibrium, round_weights, solve_zero_sum
from pglab.envs.forecast_game import ForecastGame, make_state_encoder

GAME = SimulationConfig(horizon=3, n_bins=3, max_delta=0.2, adversary_bins=2, adversary_max=0.1, scaled_buckets=2)


class Rule:
    """A pure rule of the state key (a player of :class:`ForecastGame`)."""

    def __init__(self, actions: dict[int, int]):
        self.actions = actions

    def act(self, key, explore=True):
        return self.actions[key]


def played(series, encoder, forecaster: Rule, adversary: Rule | None = None) -> float:
    """The forecaster's mean reward per round over the game's episodes, one per start date
    (equally likely), played by :class:`ForecastGame` itself."""
    game = ForecastGame(GAME, 0, series, encoder)
    rewards = []
    for start in range(1, len(series) - GAME.horizon):
        game.start = start
        rewards += [transition.reward for transition in game.run(forecaster, adversary, explore=False)]
    return float(np.mean(rewards))


@pytest.fixture(scope="module")
def tiny():
    series = synthetic_series(n_rows=9, seed=3)
    return series, make_state_encoder(GAME, series)


def test_round_weights_count_the_episodes_that_play_each_row():
    n, horizon = 8, 3
    counts = np.zeros(n)
    for start in range(1, n - horizon):
        counts[start : start + horizon] += 1
    assert round_weights(n, horizon).tolist() == counts.tolist()


def test_the_equilibrium_is_the_best_pure_rule_of_the_game_by_enumeration(tiny):
    series, encoder = tiny
    equilibrium = forecast_equilibrium(series, encoder, GAME, adversary=False)
    keys = equilibrium.games.keys
    assert len(keys) > 1
    best = -np.inf
    for actions in itertools.product(range(GAME.n_bins), repeat=len(keys)):
        rule = dict(zip(keys, actions, strict=True))
        reward = played(series, encoder, Rule(rule))
        assert equilibrium.guaranteed(rule) == pytest.approx(reward, abs=1e-12)
        best = max(best, reward)
    assert equilibrium.value == pytest.approx(best, abs=1e-12)
    nash = {key: int(np.argmax(row)) for key, row in zip(keys, equilibrium.forecaster, strict=True)}
    assert equilibrium.exploitability(nash) == pytest.approx(0.0, abs=1e-12)
    assert equilibrium.at_equilibrium(nash) == len(keys)
    worst = {key: 0 for key in keys}
    assert equilibrium.exploitability(worst) == pytest.approx(best - played(series, encoder, Rule(worst)))


def test_with_the_adversary_the_stage_games_are_the_games_payoffs_and_their_equilibria_hold(tiny):
    series, encoder = tiny
    equilibrium = forecast_equilibrium(series, encoder, GAME, adversary=True)
    keys = equilibrium.games.keys
    forecasts, perturbations = {key: 2 for key in keys}, {key: 1 for key in keys}
    shares, payoffs = equilibrium.games.shares, equilibrium.games.payoffs
    expected = sum(shares[k] * payoffs[k, 2, 1] for k in range(len(keys)))
    assert expected == pytest.approx(played(series, encoder, Rule(forecasts), Rule(perturbations)), abs=1e-12)
    for payoff, row, col, value in zip(
        payoffs, equilibrium.forecaster, equilibrium.adversary, equilibrium.values, strict=True
    ):
        assert (row @ payoff).min() >= value - 1e-9  # the forecaster guarantees the value ...
        assert (payoff @ col).max() <= value + 1e-9  # ... and the adversary holds it to it
    assert -equilibrium.value > -forecast_equilibrium(series, encoder, GAME, adversary=False).value


def test_matching_pennies_has_value_zero_and_half_half_strategies():
    row, col, value = solve_zero_sum(np.array([[1.0, -1.0], [-1.0, 1.0]]))
    assert value == pytest.approx(0.0, abs=1e-9)
    assert row == pytest.approx([0.5, 0.5]) and col == pytest.approx([0.5, 0.5])
    row, col, value = solve_zero_sum(np.array([[3.0, 1.0], [4.0, 2.0]]))  # a saddle point at (1, 1)
    assert value == pytest.approx(2.0) and row == pytest.approx([0.0, 1.0]) and col == pytest.approx([0.0, 1.0])
