"""Two-player matrix games with known equilibria, to validate the tabular learners.

* matching pennies -- zero-sum, unique Nash equilibrium (1/2, 1/2) for both players;
* rock-paper-scissors -- zero-sum, unique Nash equilibrium (1/3, 1/3, 1/3);
* a coordination game -- both get 1 if they match, 0 otherwise: two pure equilibria.

:func:`self_play` repeats a game between two learners (one state, ``gamma = 0`` is
natural: a repeated stage game) and records each player's policy and its distance to the
equilibrium, the experiment of Bowling & Veloso (2002): WoLF-PHC's *current* policies
converge to the mixed equilibrium, plain PHC's keep cycling around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pglab.errors import ConfigError
from pglab.validation import check_int

STATE = 0  # a repeated stage game has a single state


@dataclass(frozen=True)
class MatrixGame:
    """Payoffs ``row_payoff[i, j]`` and ``col_payoff[i, j]`` when row plays i, column plays j.

    ``nash_row``/``nash_col``: a mixed equilibrium to measure distance to (``None`` if
    the game has several and none is singled out).
    """

    name: str
    row_payoff: np.ndarray
    col_payoff: np.ndarray
    nash_row: np.ndarray | None = None
    nash_col: np.ndarray | None = None

    @property
    def n_row(self) -> int:
        return self.row_payoff.shape[0]

    @property
    def n_col(self) -> int:
        return self.row_payoff.shape[1]

    def payoffs(self, row_action: int, col_action: int) -> tuple[float, float]:
        return float(self.row_payoff[row_action, col_action]), float(self.col_payoff[row_action, col_action])

    def expected_payoffs(self, row_policy: np.ndarray, col_policy: np.ndarray) -> tuple[float, float]:
        """``pi_row^T A pi_col`` and ``pi_row^T B pi_col``."""
        return float(row_policy @ self.row_payoff @ col_policy), float(row_policy @ self.col_payoff @ col_policy)

    def nash_distance(self, row_policy: np.ndarray, col_policy: np.ndarray) -> float:
        """Euclidean distance of the joint policy ``(pi_row, pi_col)`` to the equilibrium."""
        if self.nash_row is None or self.nash_col is None:
            raise ConfigError("game", self.name, "has no single mixed equilibrium to measure distance to")
        return float(np.sqrt(np.sum((row_policy - self.nash_row) ** 2) + np.sum((col_policy - self.nash_col) ** 2)))


def matching_pennies() -> MatrixGame:
    row = np.array([[1.0, -1.0], [-1.0, 1.0]])
    half = np.full(2, 0.5)
    return MatrixGame("matching_pennies", row, -row, half, half)


def rock_paper_scissors() -> MatrixGame:
    # rows/cols: rock, paper, scissors; paper beats rock, scissors beat paper, rock beats scissors
    row = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    third = np.full(3, 1.0 / 3.0)
    return MatrixGame("rock_paper_scissors", row, -row, third, third)


def coordination() -> MatrixGame:
    both = np.eye(2)
    return MatrixGame("coordination", both, both.copy())


GAMES = {"matching_pennies": matching_pennies, "rock_paper_scissors": rock_paper_scissors, "coordination": coordination}


def make_game(name: str) -> MatrixGame:
    if name not in GAMES:
        raise ConfigError("game", name, f"must be one of {', '.join(GAMES)}")
    return GAMES[name]()


def self_play(
    game: MatrixGame, row_agent: Any, col_agent: Any, *, n_steps: int, record_every: int = 100
) -> dict[str, np.ndarray]:
    """Play ``n_steps`` rounds; both agents learn from every round.

    Returns ``steps`` int64[K], ``row_policy`` float64[K, n_row], ``col_policy``
    float64[K, n_col] (the agents' ``policy(0)`` every ``record_every`` steps) and, when
    the game has a mixed equilibrium, ``nash_distance`` float64[K].
    """
    check_int("n_steps", n_steps, minimum=1)
    check_int("record_every", record_every, minimum=1)
    steps, row_hist, col_hist = [], [], []
    for step in range(1, n_steps + 1):
        row_action, col_action = row_agent.act(STATE), col_agent.act(STATE)
        row_reward, col_reward = game.payoffs(row_action, col_action)
        row_agent.update(STATE, row_action, row_reward, STATE)
        col_agent.update(STATE, col_action, col_reward, STATE)
        if step % record_every == 0:
            steps.append(step)
            row_hist.append(row_agent.policy(STATE))
            col_hist.append(col_agent.policy(STATE))
    out = {"steps": np.asarray(steps), "row_policy": np.asarray(row_hist), "col_policy": np.asarray(col_hist)}
    if game.nash_row is not None:
        out["nash_distance"] = np.array([game.nash_distance(r, c) for r, c in zip(row_hist, col_hist, strict=False)])
    return out
