"""WoLF-PHC against known equilibria: the Bowling & Veloso (2002) result.

In self-play on matching pennies and rock-paper-scissors the *current* policies of
WoLF-PHC approach the unique mixed Nash equilibrium, while plain policy hill climbing
(delta_win == delta_lose) keeps cycling around it.
"""
import numpy as np
import pytest

from pglab.algos.tabular import WoLFPHCAgent
from pglab.envs.matrix_games import coordination, make_game, matching_pennies, rock_paper_scissors, self_play
from pglab.errors import ConfigError

# Q must track the opponent faster than the policies move (alpha >> delta), as in the paper.
SETTINGS = {
    # wolf_below / phc_above: bounds on the mean distance over the last quarter of play
    # (RPS has 6 free coordinates, so its sampling-noise floor is higher).
    "matching_pennies": dict(alpha=0.1, delta_win=0.0005, steps=10000, start=([0.9, 0.1], [0.2, 0.8]), wolf_below=0.2, phc_above=0.4),
    "rock_paper_scissors": dict(alpha=0.2, delta_win=0.0005, steps=10000, start=([0.8, 0.1, 0.1], [0.1, 0.1, 0.8]),
                                wolf_below=0.3, phc_above=0.45),
}


def play(name, delta_lose_ratio, seed=1):
    game, cfg = make_game(name), SETTINGS[name]
    agents = []
    for k, start in enumerate(cfg["start"]):
        agent = WoLFPHCAgent(len(start), alpha=cfg["alpha"], gamma=0.0, epsilon=0.05, epsilon_decay=1.0, epsilon_min=0.05,
                             delta_win=cfg["delta_win"], delta_lose=delta_lose_ratio * cfg["delta_win"], seed=seed + k)
        agent.set_policy(0, start)
        agents.append(agent)
    return self_play(game, *agents, n_steps=cfg["steps"], record_every=100)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matching_pennies", "rock_paper_scissors"])
def test_wolf_converges_to_mixed_nash_while_phc_cycles(name):
    wolf, phc = play(name, 4.0), play(name, 1.0)
    last = slice(3 * len(wolf["nash_distance"]) // 4, None)
    wolf_tail, phc_tail = wolf["nash_distance"][last], phc["nash_distance"][last]
    assert wolf["nash_distance"][0] > 0.5  # started far from the equilibrium
    assert wolf_tail.mean() < SETTINGS[name]["wolf_below"], wolf_tail.mean()
    assert phc_tail.mean() > SETTINGS[name]["phc_above"], phc_tail.mean()
    assert wolf_tail.mean() < 0.5 * phc_tail.mean()


def test_equilibria_make_every_action_indifferent():
    """At the mixed equilibrium each pure action earns the same against the opponent's mix."""
    for game in (matching_pennies(), rock_paper_scissors()):
        np.testing.assert_allclose(game.row_payoff @ game.nash_col, 0.0, atol=1e-12)
        np.testing.assert_allclose(game.nash_row @ game.col_payoff, 0.0, atol=1e-12)
        assert game.expected_payoffs(game.nash_row, game.nash_col) == pytest.approx((0.0, 0.0))
        assert game.nash_distance(game.nash_row, game.nash_col) == 0.0


def test_coordination_learners_settle_on_the_same_pure_equilibrium():
    game = coordination()
    kwargs = dict(alpha=0.2, gamma=0.0, epsilon=0.05, epsilon_decay=1.0, epsilon_min=0.05, delta_win=0.01, delta_lose=0.04)
    row, col = WoLFPHCAgent(2, seed=3, **kwargs), WoLFPHCAgent(2, seed=4, **kwargs)
    out = self_play(game, row, col, n_steps=3000, record_every=100)
    assert "nash_distance" not in out
    r, c = out["row_policy"][-1], out["col_policy"][-1]
    assert r.max() > 0.95 and c.max() > 0.95 and r.argmax() == c.argmax()


def test_unknown_game_is_a_config_error():
    with pytest.raises(ConfigError, match="game='chess'"):
        make_game("chess")
