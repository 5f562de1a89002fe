"""Tabular learners: epsilon-greedy Q-learning and WoLF-PHC (Bowling & Veloso, 2002).

Both store their tables as dense NumPy arrays over the states seen so far: a dict maps a
state key (an ``int`` or ``str``) to a row, and ``q[row]`` is a float64 vector over the
actions. Rows are added on first update; the arrays grow by doubling, so an update costs
O(1) amortised and never touches a per-entry Python object.

Interface shared by both agents::

    agent.act(state_key, explore=True) -> int
    agent.update(state_key, action, reward, next_state_key, terminated=False) -> float  (TD error)
    agent.policy(state_key) -> float64[n_actions]
    agent.state_value(state_key) -> float   (max_a Q for Q-learning, pi . Q for WoLF-PHC)
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from pglab.envs.forecast_game import DiscreteActionSpace
from pglab.errors import ConfigError
from pglab.validation import check_int, check_range

StateKey = Hashable  # int or str (JSON-serialisable)

_INITIAL_ROWS = 64


def _as_space(action_space: DiscreteActionSpace | int) -> DiscreteActionSpace:
    if isinstance(action_space, DiscreteActionSpace):
        return action_space
    if isinstance(action_space, bool) or not isinstance(action_space, (int, np.integer)):
        raise ConfigError("action_space", action_space, "must be a DiscreteActionSpace or a number of actions")
    return DiscreteActionSpace(n_bins=int(action_space))


class QTableAgent:
    """Tabular Q-learning with epsilon-greedy exploration.

    Update (one transition ``s, a, r, s'``)::

        TD_error = r + gamma * max_a' Q(s', a') - Q(s, a)     (no bootstrap if terminated)
        Q(s, a) += alpha * TD_error
        epsilon  = max(epsilon_min, epsilon * epsilon_decay)

    Args:
        action_space: a :class:`DiscreteActionSpace` or a number of actions.
        alpha: learning rate in (0, 1].
        gamma: discount factor in [0, 1].
        epsilon: initial exploration probability in [0, 1].
        epsilon_decay: per-update multiplier of epsilon in (0, 1].
        epsilon_min: floor of epsilon in [0, epsilon].
        seed: seed of the agent's own ``numpy.random.Generator`` (exploration, ties).
        default_action: greedy action in a state never updated (``None``: uniform
            random). Forecasters use the zero-delta bin, i.e. the random-walk forecast.
    """

    algorithm = "q"

    def __init__(
        self,
        action_space: DiscreteActionSpace | int,
        *,
        alpha: float = 0.1,
        gamma: float = 0.95,
        epsilon: float = 1.0,
        epsilon_decay: float = 0.995,
        epsilon_min: float = 0.05,
        seed: int = 0,
        default_action: int | None = None,
    ):
        self.action_space = _as_space(action_space)
        check_range("alpha", alpha, 0.0, 1.0, low_inclusive=False)
        check_range("gamma", gamma, 0.0, 1.0)
        check_range("epsilon", epsilon, 0.0, 1.0)
        check_range("epsilon_decay", epsilon_decay, 0.0, 1.0, low_inclusive=False)
        check_range("epsilon_min", epsilon_min, 0.0, 1.0)
        if epsilon_min > epsilon:
            raise ConfigError("epsilon_min", epsilon_min, f"must be <= epsilon={epsilon} (it is epsilon's floor)")
        check_int("seed", seed, minimum=0)
        if default_action is not None:
            check_int("default_action", default_action, minimum=0)
            if default_action >= self.action_space.n:
                raise ConfigError("default_action", default_action, f"must be < n_actions={self.action_space.n}")
        self.alpha, self.gamma = float(alpha), float(gamma)
        self.epsilon, self.epsilon_decay, self.epsilon_min = float(epsilon), float(epsilon_decay), float(epsilon_min)
        self.seed = seed
        self.default_action = default_action
        self.n_actions = self.action_space.n
        self.rng = np.random.default_rng(seed)
        self.n_updates = 0
        self._rows: dict[StateKey, int] = {}
        self._keys: list[StateKey] = []
        self.q = np.zeros((_INITIAL_ROWS, self.n_actions))
        self.row_max = np.zeros(_INITIAL_ROWS)

    # --- table storage -------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self._keys)

    @property
    def state_keys(self) -> list[StateKey]:
        return list(self._keys)

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.q.shape[0]
        self.q = np.concatenate([self.q, np.zeros((extra, self.n_actions))])
        self.row_max = np.concatenate([self.row_max, np.zeros(extra)])

    def _row(self, key: StateKey) -> int:
        row = self._rows.get(key)
        if row is None:
            if not isinstance(key, (int, str)) or isinstance(key, bool):
                raise ConfigError("state_key", key, "must be an int or a str (they are stored in JSON)")
            row = len(self._keys)
            if row == self.q.shape[0]:
                self._grow(2 * row)
            self._rows[key] = row
            self._keys.append(key)
        return row

    def q_values(self, state_key: StateKey) -> np.ndarray:
        """float64[n_actions]: a copy of Q(s, .) (zeros for an unseen state)."""
        row = self._rows.get(state_key)
        return np.zeros(self.n_actions) if row is None else self.q[row].copy()

    # --- acting ---------------------------------------------------------------------
    def _greedy(self, values: np.ndarray) -> int:
        best = values.argmax()
        is_max = values == values[best]
        if np.count_nonzero(is_max) == 1:
            return int(best)
        # Ties are broken at random: always taking the first maximum would bias an
        # untrained table towards action 0 (the most negative delta).
        return int(self.rng.choice(np.flatnonzero(is_max)))

    def act(self, state_key: StateKey, explore: bool = True) -> int:
        """An action for ``state_key``: epsilon-greedy if ``explore``, else greedy."""
        if explore and self.rng.random() < self.epsilon:
            return int(self.rng.integers(self.n_actions))
        row = self._rows.get(state_key)
        if row is None:
            return self.default_action if self.default_action is not None else int(self.rng.integers(self.n_actions))
        return self._greedy(self.q[row])

    def policy(self, state_key: StateKey) -> np.ndarray:
        """float64[n_actions]: the epsilon-greedy action distribution in ``state_key``."""
        row = self._rows.get(state_key)
        probs = np.full(self.n_actions, self.epsilon / self.n_actions)
        if row is None:
            return np.full(self.n_actions, 1.0 / self.n_actions)
        values = self.q[row]
        best = values == values.max()
        probs[best] += (1.0 - self.epsilon) / best.sum()
        return probs

    def state_value(self, state_key: StateKey) -> float:
        """``V(s) = max_a Q(s, a)``: the value of ``s`` under the greedy policy (0, the
        table's initial value, for a state never updated)."""
        row = self._rows.get(state_key)
        return 0.0 if row is None else float(self.q[row].max())

    # --- learning -------------------------------------------------------------------
    def update(
        self, state_key: StateKey, action: int, reward: float, next_state_key: StateKey, terminated: bool = False
    ) -> float:
        """One Q-learning step; returns the TD error (before the step)."""
        rows = self._rows
        row = rows.get(state_key)
        if row is None:
            row = self._row(state_key)
        next_row = rows.get(next_state_key)
        if next_row is None:
            next_row = self._row(next_state_key)
        q, row_max = self.q, self.row_max  # fetched after _row: a new state may reallocate
        old = q.item(row, action)
        # row_max caches max_a Q(s, a) per row, so the bootstrap costs one lookup
        # instead of a NumPy reduction (the dominant cost of a tabular update).
        bootstrap = 0.0 if terminated else self.gamma * row_max.item(next_row)
        td_error = reward + bootstrap - old  # r + gamma max_a' Q(s', a') - Q(s, a)
        new = old + self.alpha * td_error
        q[row, action] = new
        if new >= row_max.item(row):
            row_max[row] = new
        elif old == row_max.item(row):  # the maximum itself went down: recompute the row
            row_max[row] = q[row].max()
        epsilon = self.epsilon * self.epsilon_decay
        self.epsilon = epsilon if epsilon > self.epsilon_min else self.epsilon_min
        self.n_updates += 1
        return float(td_error)

    # --- state: checkpoints and pglab.algos.tabular.serialization -------------------
    def hyperparameters(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "gamma": self.gamma,
            "epsilon_decay": self.epsilon_decay,
            "epsilon_min": self.epsilon_min,
            "seed": self.seed,
            "default_action": self.default_action,
        }

    def row_entry(self, row: int) -> dict[str, Any]:
        return {"q": self.q[row].tolist()}

    def load_row_entry(self, row: int, entry: dict[str, Any]) -> None:
        self.q[row] = entry["q"]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue learning bit-identically (JSON-ready): epsilon,
        the update count, the RNG state and the table's entries (the hyperparameters
        come from the constructor)."""
        return {
            "epsilon": self.epsilon,
            "n_updates": self.n_updates,
            "rng": self.rng.bit_generator.state,
            "entries": [{"state": key, **self.row_entry(row)} for row, key in enumerate(self._keys)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into an agent built with the same action space."""
        check_range("epsilon", state["epsilon"], 0.0, 1.0)
        self.epsilon = float(state["epsilon"])
        self.n_updates = int(state.get("n_updates", 0))
        if state.get("rng") is not None:
            self.rng.bit_generator.state = state["rng"]
        self._rows, self._keys = {}, []
        self.q = np.zeros((max(_INITIAL_ROWS, len(state["entries"])), self.n_actions))
        self.row_max = np.zeros(self.q.shape[0])
        self._reset_arrays(self.q.shape[0])
        for entry in state["entries"]:
            key = entry["state"]
            if key in self._rows:
                raise ConfigError("entries", key, "state appears twice")
            self.load_row_entry(self._row(key), entry)
        self.row_max[: self.n_states] = self.q[: self.n_states].max(axis=1)

    def _reset_arrays(self, capacity: int) -> None:
        """Hook: reallocate subclass arrays to ``capacity`` rows."""


class WoLFPHCAgent(QTableAgent):
    """Win-or-Learn-Fast policy hill climbing (Bowling & Veloso, 2002, Table 2).

    Keeps, per state, a mixed policy ``pi`` (acted on) and its running average
    ``avg_pi``. After each Q-learning step in state s::

        C(s) += 1
        avg_pi(s, .) += (pi(s, .) - avg_pi(s, .)) / C(s)
        delta = delta_win  if  sum_a pi(s,a) Q(s,a) >= sum_a avg_pi(s,a) Q(s,a)  else delta_lose
        for a != argmax Q(s, .):  step_a = min(pi(s,a), delta / (n - 1));  pi(s,a) -= step_a
        pi(s, argmax Q) += sum of the steps

    The ``min`` keeps ``pi`` a distribution without renormalising; while no probability
    hits 0 it is exactly "+delta to the best, -delta/(n-1) to the rest".
    ``delta_win == delta_lose`` is plain PHC, which cycles in matching pennies.

    Acting: with probability epsilon a uniform action, else a sample from ``pi(s)``;
    ``explore=False`` returns the mode of ``pi(s)``.
    """

    algorithm = "wolf"

    def __init__(
        self,
        action_space: DiscreteActionSpace | int,
        *,
        delta_win: float = 0.01,
        delta_lose: float = 0.04,
        **kwargs: Any,
    ):
        check_range("delta_win", delta_win, 0.0, 1.0, low_inclusive=False)
        check_range("delta_lose", delta_lose, 0.0, 1.0, low_inclusive=False)
        self.delta_win, self.delta_lose = float(delta_win), float(delta_lose)
        super().__init__(action_space, **kwargs)
        self.pi = np.full((_INITIAL_ROWS, self.n_actions), 1.0 / self.n_actions)
        self.avg_pi = self.pi.copy()
        self.counts = np.zeros(_INITIAL_ROWS, dtype=np.int64)
        self.last_delta = 0.0

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.q.shape[0]
        super()._grow(capacity)
        uniform = np.full((extra, self.n_actions), 1.0 / self.n_actions)
        self.pi = np.concatenate([self.pi, uniform])
        self.avg_pi = np.concatenate([self.avg_pi, uniform])
        self.counts = np.concatenate([self.counts, np.zeros(extra, dtype=np.int64)])

    def _reset_arrays(self, capacity: int) -> None:
        self.pi = np.full((capacity, self.n_actions), 1.0 / self.n_actions)
        self.avg_pi = self.pi.copy()
        self.counts = np.zeros(capacity, dtype=np.int64)

    def policy(self, state_key: StateKey) -> np.ndarray:
        """float64[n_actions]: the current mixed policy pi(s) (uniform if unseen)."""
        row = self._rows.get(state_key)
        return np.full(self.n_actions, 1.0 / self.n_actions) if row is None else self.pi[row].copy()

    def average_policy(self, state_key: StateKey) -> np.ndarray:
        """float64[n_actions]: the visit-weighted average policy avg_pi(s)."""
        row = self._rows.get(state_key)
        return np.full(self.n_actions, 1.0 / self.n_actions) if row is None else self.avg_pi[row].copy()

    def act(self, state_key: StateKey, explore: bool = True) -> int:
        row = self._rows.get(state_key)
        if not explore:
            if row is None:
                return (
                    self.default_action if self.default_action is not None else int(self.rng.integers(self.n_actions))
                )
            return self._greedy(self.pi[row])
        if self.rng.random() < self.epsilon or row is None:
            return int(self.rng.integers(self.n_actions))
        # Inverse-CDF sampling: one uniform draw, ~10x cheaper than Generator.choice(p=...).
        cdf = np.cumsum(self.pi[row])
        return min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), self.n_actions - 1)

    def state_value(self, state_key: StateKey) -> float:
        """``V(s) = sum_a pi(s, a) Q(s, a)``: the expected Q under the current mixed
        policy (the policy WoLF-PHC acts on; 0 for a state never updated)."""
        row = self._rows.get(state_key)
        return 0.0 if row is None else float(self.pi[row].dot(self.q[row]))

    def set_policy(self, state_key: StateKey, probs: np.ndarray) -> None:
        """Start ``pi(s)`` (and ``avg_pi(s)``) from ``probs`` instead of uniform (experiments)."""
        probs = np.asarray(probs, dtype=np.float64)
        if probs.shape != (self.n_actions,) or (probs < 0).any() or abs(probs.sum() - 1.0) > 1e-9:
            raise ConfigError("probs", probs.tolist(), f"must be a distribution over {self.n_actions} actions")
        row = self._row(state_key)
        self.pi[row] = probs
        self.avg_pi[row] = probs

    def update(
        self, state_key: StateKey, action: int, reward: float, next_state_key: StateKey, terminated: bool = False
    ) -> float:
        td_error = super().update(state_key, action, reward, next_state_key, terminated)
        row = self._rows[state_key]
        q, pi, avg = self.q[row], self.pi[row], self.avg_pi[row]
        count = self.counts.item(row) + 1
        self.counts[row] = count
        avg += (pi - avg) / count  # running mean of the policies played
        winning = pi.dot(q) >= avg.dot(q)
        delta = self.delta_win if winning else self.delta_lose
        self.last_delta = delta
        best = q.argmax()
        steps = np.minimum(pi, delta / (self.n_actions - 1))
        steps[best] = 0.0
        pi -= steps
        pi[best] += steps.sum()
        return td_error

    def hyperparameters(self) -> dict[str, Any]:
        return {**super().hyperparameters(), "delta_win": self.delta_win, "delta_lose": self.delta_lose}

    def row_entry(self, row: int) -> dict[str, Any]:
        return {
            "q": self.q[row].tolist(),
            "pi": self.pi[row].tolist(),
            "avg_pi": self.avg_pi[row].tolist(),
            "count": int(self.counts[row]),
        }

    def load_row_entry(self, row: int, entry: dict[str, Any]) -> None:
        self.q[row] = entry["q"]
        self.pi[row] = entry["pi"]
        self.avg_pi[row] = entry["avg_pi"]
        self.counts[row] = entry["count"]
