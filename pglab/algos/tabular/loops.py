"""Training loops of the forecasting game: plain, robust-adversarial (RARL), and online feedback.

Each loop can stop and restart at an episode (epoch) boundary: the per-episode history
lives in the loop object, the game of episode ``i`` is seeded with ``seed + i``, and the
agents carry their own RNG, so ``run(0, N)`` then ``run(N, 2N)`` equals ``run(0, 2N)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pglab.algos.tabular.agents import QTableAgent
from pglab.data.series import ForecastSeries
from pglab.envs.forecast_game import (
    ForecastGame,
    ForecastState,
    HashStateKey,
    SimulationConfig,
    StateEncoder,
    Transition,
    make_state_encoder,
)
from pglab.errors import ConfigError
from pglab.validation import check_int

EpisodeCallback = Callable[[int, dict[str, float]], None]


def _adversary_action(transition: Transition) -> int:
    """The adversary's action of a round the adversary played."""
    if transition.adversary_action is None:
        raise ValueError("a transition without an adversary action cannot train the adversary")
    return transition.adversary_action


def _episode_stats(logs: list, td_errors: list[float]) -> dict[str, float]:
    rewards = np.fromiter((tr.reward for tr in logs), dtype=np.float64, count=len(logs))
    return {
        "reward/mean": float(rewards.mean()),
        "stats/abs_td_error": float(np.mean(np.abs(td_errors))) if td_errors else 0.0,
    }


@dataclass
class TrainingLoop:
    """Episodes of the game; after each, the agents learn from its logged transitions.

    Episode ``i``: ``ForecastGame(config, seed + i, series).run(forecaster, adversary)``,
    then for every transition ``forecaster.update(s, a, r, s')`` and, with an adversary,
    ``adversary.update(s, a_adv, -r, s')``. Because the forecaster's action does not
    move the state (the series is given), playing the episode first and learning after it
    changes nothing but the order of random draws.
    """

    config: SimulationConfig
    n_episodes: int = 500
    seed: int = 42
    rewards_history: list[float] = field(default_factory=list)
    td_history: list[float] = field(default_factory=list)

    def __post_init__(self):
        check_int("n_episodes", self.n_episodes, minimum=1)
        check_int("seed", self.seed, minimum=0)

    def run(
        self,
        forecaster: QTableAgent,
        adversary: QTableAgent | None = None,
        *,
        series: ForecastSeries,
        encoder: StateEncoder | None = None,
        start: int | None = None,
        stop: int | None = None,
        on_episode: EpisodeCallback | None = None,
    ) -> dict[str, Any]:
        """Train episodes ``start..stop-1`` (default: continue to ``n_episodes``); return the summary."""
        start = len(self.rewards_history) if start is None else start
        stop = self.n_episodes if stop is None else stop
        if start != len(self.rewards_history):
            raise ConfigError("start", start, f"must equal the episodes already run ({len(self.rewards_history)})")
        encoder = encoder if encoder is not None else make_state_encoder(self.config, series)
        for episode in range(start, stop):
            stats = self.episode(forecaster, adversary, series=series, encoder=encoder)
            if on_episode is not None:
                on_episode(episode, stats)
        return self.summary(forecaster)

    def episode(
        self,
        forecaster: QTableAgent,
        adversary: QTableAgent | None = None,
        *,
        series: ForecastSeries,
        encoder: StateEncoder,
    ) -> dict[str, float]:
        """Play the next episode (number ``len(rewards_history)``), learn from it, return its metrics."""
        game = ForecastGame(self.config, self.seed + len(self.rewards_history), series, encoder)
        logs = game.run(forecaster, adversary)
        td_errors = []
        for tr in logs:
            td_errors.append(forecaster.update(tr.state_key, tr.action, tr.reward, tr.next_state_key))
            if adversary is not None:
                adversary.update(tr.state_key, _adversary_action(tr), -tr.reward, tr.next_state_key)
        stats = _episode_stats(logs, td_errors)
        self.rewards_history.append(stats["reward/mean"])
        self.td_history.extend(abs(td) for td in td_errors)
        self.td_history = self.td_history[-100:]
        return {**stats, "stats/epsilon": forecaster.epsilon}

    def summary(self, forecaster: QTableAgent) -> dict[str, Any]:
        return {
            "n_episodes": len(self.rewards_history),
            "final_epsilon": forecaster.epsilon,
            "mean_reward_last_50": float(np.mean(self.rewards_history[-50:])) if self.rewards_history else float("nan"),
            "mean_td_error_last_100": float(np.mean(self.td_history)) if self.td_history else float("nan"),
            "rewards_history": list(self.rewards_history),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"rewards_history": list(self.rewards_history), "td_history": list(self.td_history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rewards_history = [float(v) for v in state["rewards_history"]]
        self.td_history = [float(v) for v in state["td_history"]]


@dataclass
class RADversarialTrainer:
    """Robust adversarial training: forecaster and adversary learn in alternating blocks.

    Epoch ``e`` plays one episode (seed ``seed + e``). During epochs with
    ``(e // alternation_schedule) % 2 == 0`` the forecaster learns against a frozen
    adversary that plays greedily; in the other blocks the adversary learns (reward
    ``+|realised - forecast|``) against a frozen, greedy forecaster. A frozen agent's
    table and epsilon do not change.
    """

    config: SimulationConfig
    alternation_schedule: int = 10
    total_epochs: int = 100
    seed: int = 42
    epoch_results: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self):
        check_int("alternation_schedule", self.alternation_schedule, minimum=1)
        check_int("total_epochs", self.total_epochs, minimum=1)
        check_int("seed", self.seed, minimum=0)

    def phase(self, epoch: int) -> str:
        return "forecaster" if (epoch // self.alternation_schedule) % 2 == 0 else "adversary"

    def run(
        self,
        forecaster: QTableAgent,
        adversary: QTableAgent,
        *,
        series: ForecastSeries,
        encoder: StateEncoder | None = None,
        stop: int | None = None,
        on_episode: EpisodeCallback | None = None,
    ) -> dict[str, Any]:
        """Train epochs ``len(epoch_results)..stop-1`` (default: to ``total_epochs``); return the summary."""
        stop = self.total_epochs if stop is None else stop
        encoder = encoder if encoder is not None else make_state_encoder(self.config, series)
        for epoch in range(len(self.epoch_results), stop):
            stats = self.episode(forecaster, adversary, series=series, encoder=encoder)
            if on_episode is not None:
                on_episode(epoch, stats)
        return self.summary()

    def episode(
        self, forecaster: QTableAgent, adversary: QTableAgent, *, series: ForecastSeries, encoder: StateEncoder
    ) -> dict[str, float]:
        """Play the next epoch (number ``len(epoch_results)``): the player whose block it is
        learns; return the epoch's metrics."""
        epoch = len(self.epoch_results)
        training = self.phase(epoch)
        game = ForecastGame(self.config, self.seed + epoch, series, encoder)
        learner_is_forecaster = training == "forecaster"
        logs = game.run(
            forecaster, adversary, explore=learner_is_forecaster, adversary_explore=not learner_is_forecaster
        )
        td_errors = [
            forecaster.update(tr.state_key, tr.action, tr.reward, tr.next_state_key)
            if learner_is_forecaster
            else adversary.update(tr.state_key, _adversary_action(tr), -tr.reward, tr.next_state_key)
            for tr in logs
        ]
        stats = _episode_stats(logs, td_errors)
        self.epoch_results.append({"epoch": epoch, "training": training, "mean_reward": stats["reward/mean"]})
        return {
            **stats,
            "stats/training_forecaster": float(learner_is_forecaster),
            "stats/epsilon": forecaster.epsilon,
            "stats/adversary_epsilon": adversary.epsilon,
        }

    def summary(self) -> dict[str, Any]:
        return {
            "total_epochs": len(self.epoch_results),
            "alternation_schedule": self.alternation_schedule,
            "epoch_results": [dict(r) for r in self.epoch_results],
        }

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_results": [dict(r) for r in self.epoch_results]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch_results = [dict(r) for r in state["epoch_results"]]


@dataclass
class IterativeFeedbackLoop:
    """Online learning from realised outcomes (out-of-sample, during a backtest).

    Each pair ``(state, forecast, realised)`` becomes the transition
    ``(key(state), delta_to_action(forecast - state.value), -|realised - forecast|,
    key(next state))``. The next state of a pair is the state of the pair after it, so
    the newest pair is held back until its successor arrives (its Q-target needs
    ``max_a Q(s', a)``); nothing is ever learned from a value not yet realised.
    """

    encoder: StateEncoder = field(default_factory=HashStateKey)
    pending: tuple[ForecastState, float, float] | None = None

    def update_from_realized(
        self, agent: QTableAgent, realized_pairs: list[tuple[ForecastState, float, float]]
    ) -> dict[str, Any]:
        queue = ([self.pending] if self.pending is not None else []) + list(realized_pairs)
        rewards, td_errors = [], []
        for (state, forecast, realised), (next_state, _, _) in zip(queue[:-1], queue[1:], strict=False):
            reward = -abs(realised - forecast)
            action = agent.action_space.delta_to_action(forecast - state.value)
            td_errors.append(agent.update(self.encoder(state), action, reward, self.encoder(next_state)))
            rewards.append(reward)
        self.pending = queue[-1] if queue else None
        return {
            "n_updates": len(td_errors),
            "mean_reward": float(np.mean(rewards)) if rewards else float("nan"),
            "mean_abs_td_error": float(np.mean(np.abs(td_errors))) if td_errors else float("nan"),
        }


def train_best_response(
    forecaster: QTableAgent,
    adversary: QTableAgent,
    config: SimulationConfig,
    *,
    series: ForecastSeries,
    encoder: StateEncoder,
    episodes: int,
    seed: int = 0,
) -> list[float]:
    """Train ``adversary`` against a frozen, greedy ``forecaster``; return per-episode mean rewards.

    The adversary's final greedy policy approximates a best response, so the forecaster's
    error against it measures how exploitable the forecaster is (its worst case within the
    adversary's bounds), independently of which adversary it was trained with.
    """
    check_int("episodes", episodes, minimum=1)
    history = []
    for episode in range(episodes):
        logs = ForecastGame(config, seed + episode, series, encoder).run(
            forecaster, adversary, explore=False, adversary_explore=True
        )
        for tr in logs:
            adversary.update(tr.state_key, _adversary_action(tr), -tr.reward, tr.next_state_key)
        history.append(float(np.mean([-tr.reward for tr in logs])))
    return history
