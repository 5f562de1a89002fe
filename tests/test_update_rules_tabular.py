"""The tabular update rules against references written out in the test.

* Q-learning: ``Q(s,a) += alpha (r + gamma max_a' Q(s',a') (1 - terminated) - Q(s,a))``,
  checked step by step against a dict-of-lists learner;
* WoLF-PHC (Bowling & Veloso 2002, Table 2): Q step, then ``C(s) += 1``, the running
  average policy, the win/lose test ``pi . Q >= avg_pi . Q``, the ``delta_win`` /
  ``delta_lose`` step, and the clipped move of probability onto ``argmax Q``; checked
  against a plain-Python learner;
* RARL and the loops: which agent learns in which epoch, from which reward. The
  adversary's reward is ``+|realised - forecast|``, the negative of the forecaster's, so
  the adversary minimises what the forecaster maximises; the rewards passed to
  ``update`` are recomputed here from the series, the actions taken and the action grids.
"""

import numpy as np
import pytest

from pglab.algos.tabular import QTableAgent, RADversarialTrainer, TrainingLoop, WoLFPHCAgent
from pglab.algos.tabular.loops import train_best_response
from pglab.data import ForecastSeries, load_series
from pglab.envs.forecast_game import (
    ForecastGame,
    HashStateKey,
    SimulationConfig,
    adversary_space,
    forecaster_space,
    state_at,
)


# --- references --------------------------------------------------------------------------------
class ReferenceQ:
    """Q-learning with a dict of Python lists (no caching, no NumPy)."""

    def __init__(self, n_actions, alpha, gamma):
        self.n, self.alpha, self.gamma = n_actions, alpha, gamma
        self.q = {}

    def row(self, state):
        return self.q.setdefault(state, [0.0] * self.n)

    def update(self, state, action, reward, next_state, terminated):
        row, next_row = self.row(state), self.row(next_state)
        target = reward if terminated else reward + self.gamma * max(next_row)
        td_error = target - row[action]
        row[action] += self.alpha * td_error
        return td_error


class ReferenceWoLF(ReferenceQ):
    """WoLF-PHC, Bowling & Veloso (2002) Table 2, one probability at a time."""

    def __init__(self, n_actions, alpha, gamma, delta_win, delta_lose):
        super().__init__(n_actions, alpha, gamma)
        self.delta_win, self.delta_lose = delta_win, delta_lose
        self.pi, self.avg, self.count = {}, {}, {}
        self.wins = self.losses = self.clipped = 0

    def update(self, state, action, reward, next_state, terminated):
        td_error = super().update(state, action, reward, next_state, terminated)
        n = self.n
        q = self.q[state]
        pi = self.pi.setdefault(state, [1.0 / n] * n)
        avg = self.avg.setdefault(state, [1.0 / n] * n)
        # (b) the average policy: C(s) += 1, avg += (pi - avg) / C(s)
        self.count[state] = self.count.get(state, 0) + 1
        for b in range(n):
            avg[b] += (pi[b] - avg[b]) / self.count[state]
        # (c) winning when the current policy does at least as well as the average one
        value_pi = sum(pi[b] * q[b] for b in range(n))
        value_avg = sum(avg[b] * q[b] for b in range(n))
        winning = value_pi >= value_avg
        delta = self.delta_win if winning else self.delta_lose
        self.wins += winning
        self.losses += not winning
        # (d) move delta / (n - 1) from every other action to argmax Q, never below 0
        best = max(range(n), key=lambda b: (q[b], -b))  # the first maximum
        moved = 0.0
        for b in range(n):
            if b != best:
                step = min(pi[b], delta / (n - 1))
                self.clipped += step < delta / (n - 1)
                pi[b] -= step
                moved += step
        pi[best] += moved
        return td_error, delta


def random_transitions(seed, n, n_states, n_actions, p_terminal):
    rng = np.random.default_rng(seed)
    keys = list(range(n_states - 3)) + ["a", "b", "c"]  # int and str keys, as the tables allow
    for _ in range(n):
        yield (
            keys[rng.integers(n_states)],
            int(rng.integers(n_actions)),
            float(rng.normal()),
            keys[rng.integers(n_states)],
            bool(rng.random() < p_terminal),
        )


# --- Q-learning --------------------------------------------------------------------------------
def test_q_update_matches_the_reference_step_by_step_with_terminals():
    agent = QTableAgent(4, alpha=0.3, gamma=0.9, epsilon=0.0, epsilon_min=0.0)
    reference = ReferenceQ(4, alpha=0.3, gamma=0.9)
    terminal_with_nonzero_next = 0
    for state, action, reward, next_state, terminated in random_transitions(0, 1500, 90, 4, p_terminal=0.3):
        # a terminal whose next state has a non-zero value tells "no bootstrap" from "bootstrap"
        terminal_with_nonzero_next += terminated and abs(max(reference.row(next_state))) > 0.1
        expected = reference.update(state, action, reward, next_state, terminated)
        assert agent.update(state, action, reward, next_state, terminated) == pytest.approx(expected, abs=1e-12)
    assert terminal_with_nonzero_next > 100
    assert agent.n_states == len(reference.q) == 90  # > 64 rows: the arrays grew
    for state, row in reference.q.items():
        np.testing.assert_allclose(agent.q_values(state), row, rtol=0, atol=1e-12)
        assert agent.state_value(state) == pytest.approx(max(row), abs=1e-12)


def test_q_update_one_step_by_hand_terminal_and_not():
    agent = QTableAgent(2, alpha=0.5, gamma=0.8, epsilon=0.0, epsilon_min=0.0)
    agent.load_state_dict(
        {
            "epsilon": 0.0,
            "entries": [
                {"state": "s", "q": [1.0, 3.0]},  # max_a Q(s, .) = 3
                {"state": "x", "q": [2.0, -1.0]},
            ],
        }
    )  # max_a Q(x, .) = 2
    # non-terminal: td = 1 + 0.8 * 3 - (-1) = 4.4 -- uses s' = "s", not x's own max 2
    assert agent.update("x", 1, 1.0, "s") == pytest.approx(4.4)
    assert agent.q_values("x").tolist() == pytest.approx([2.0, -1.0 + 0.5 * 4.4])
    # terminal: td = 1 - 2 = -1 -- no gamma * max Q(s') however large it is
    assert agent.update("x", 0, 1.0, "s", terminated=True) == pytest.approx(-1.0)
    assert agent.q_values("x").tolist() == pytest.approx([1.5, 1.2])
    assert agent.q_values("s").tolist() == [1.0, 3.0]  # only Q(s, a) moves


def test_q_learning_reaches_the_optimal_values_of_a_chain_with_reset():
    """States 0, 1, 2; left/right; stepping right from 2 earns 1, terminates, and the
    stream resets to state 0 (the next key of a terminal step is the next episode's first).

    Q*(s, right) = gamma^(2 - s), Q*(s, left) = gamma V*(max(s - 1, 0)). Bootstrapping the
    terminal step would add gamma V*(0) to Q(2, right); ignoring gamma would make every
    right-move worth 1; bootstrapping from Q(s, .) instead of Q(s', .) would break both.
    """
    gamma = 0.9
    v_star = [gamma**2, gamma, 1.0]
    q_star = [[gamma * v_star[max(s - 1, 0)], v_star[s]] for s in range(3)]
    agent = QTableAgent(2, alpha=0.5, gamma=gamma, epsilon=1.0, epsilon_decay=0.999, epsilon_min=0.3, seed=0)
    state = 0
    for _ in range(4000):
        action = agent.act(state)
        goal = state == 2 and action == 1
        next_state = 0 if goal else (max(state - 1, 0) if action == 0 else state + 1)
        agent.update(state, action, float(goal), next_state, terminated=goal)
        state = next_state
    for s in range(3):
        np.testing.assert_allclose(agent.q_values(s), q_star[s], rtol=0, atol=1e-4)


# --- WoLF-PHC ----------------------------------------------------------------------------------
def test_wolf_update_matches_the_reference_step_by_step():
    """Both branches (win, lose) and the clipping at 0 happen many times in this sequence."""
    kwargs = dict(alpha=0.5, gamma=0.8, delta_win=0.05, delta_lose=0.3)
    agent = WoLFPHCAgent(3, epsilon=0.0, epsilon_min=0.0, **kwargs)
    reference = ReferenceWoLF(3, **kwargs)
    for state, action, reward, next_state, terminated in random_transitions(1, 600, 8, 3, p_terminal=0.2):
        td_error, delta = reference.update(state, action, reward, next_state, terminated)
        assert agent.update(state, action, reward, next_state, terminated) == pytest.approx(td_error, abs=1e-12)
        assert agent.last_delta == delta
        np.testing.assert_allclose(agent.policy(state), reference.pi[state], rtol=0, atol=1e-12)
        np.testing.assert_allclose(agent.average_policy(state), reference.avg[state], rtol=0, atol=1e-12)
    assert reference.wins > 50 and reference.losses > 50 and reference.clipped > 50
    for state in reference.q:
        np.testing.assert_allclose(agent.q_values(state), reference.q[state], rtol=0, atol=1e-12)
        assert agent.counts[agent._rows[state]] == reference.count.get(state, 0)


def test_wolf_losing_step_by_hand():
    """pi = (0.8, 0.2), avg = (0.5, 0.5) after C = 1 visit; reward 1 for action 1 (alpha 1, gamma 0).

    Q = (0, 1). C = 2: avg = (0.5, 0.5) + ((0.8, 0.2) - (0.5, 0.5)) / 2 = (0.65, 0.35).
    pi . Q = 0.2 < avg . Q = 0.35: losing, so delta_lose = 0.3 moves from action 0 to 1.
    """
    agent = WoLFPHCAgent(2, alpha=1.0, gamma=0.0, epsilon=0.0, epsilon_min=0.0, delta_win=0.1, delta_lose=0.3)
    row = agent._row("s")
    agent.pi[row], agent.avg_pi[row], agent.counts[row] = [0.8, 0.2], [0.5, 0.5], 1
    agent.update("s", 1, 1.0, "s")
    assert agent.last_delta == 0.3
    np.testing.assert_allclose(agent.average_policy("s"), [0.65, 0.35], rtol=0, atol=1e-15)
    np.testing.assert_allclose(agent.policy("s"), [0.5, 0.5], rtol=0, atol=1e-15)
    # Same again: Q = (0, 1), C = 3, avg = (0.65, 0.35) + ((0.5, 0.5) - (0.65, 0.35)) / 3 = (0.6, 0.4);
    # pi . Q = 0.5 >= avg . Q = 0.4: winning, delta_win = 0.1 moves from action 0 to 1.
    agent.update("s", 1, 1.0, "s")
    assert agent.last_delta == 0.1
    np.testing.assert_allclose(agent.average_policy("s"), [0.6, 0.4], rtol=0, atol=1e-15)
    np.testing.assert_allclose(agent.policy("s"), [0.4, 0.6], rtol=0, atol=1e-15)


def test_wolf_step_never_takes_more_than_an_action_holds():
    """delta / (n - 1) = 0.2 but pi(s, 0) = 0.05: only 0.05 moves from it (the projection)."""
    agent = WoLFPHCAgent(3, alpha=1.0, gamma=0.0, epsilon=0.0, epsilon_min=0.0, delta_win=0.4, delta_lose=0.4)
    agent.set_policy("s", [0.05, 0.35, 0.6])
    agent.update("s", 2, 1.0, "s")  # Q = (0, 0, 1): best = 2
    np.testing.assert_allclose(agent.policy("s"), [0.0, 0.15, 0.85], rtol=0, atol=1e-15)


# --- the loops: who learns from what ---------------------------------------------------------
class Recording(QTableAgent):
    """A Q-learner that records its act() and update() calls."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.acts, self.updates = [], []

    def act(self, state_key, explore=True):
        action = super().act(state_key, explore)
        self.acts.append((state_key, explore, action))
        return action

    def update(self, state_key, action, reward, next_state_key, terminated=False):
        self.updates.append((state_key, action, reward, next_state_key, terminated))
        return super().update(state_key, action, reward, next_state_key, terminated)


GAME = SimulationConfig(horizon=5, n_bins=9, max_delta=0.4, adversary_bins=5, adversary_max=0.3, state_key="hash")


def expected_rounds(config, series, encoder, seed, forecaster_acts, adversary_acts):
    """Per round: (key, next key, forecaster action, adversary action, forecaster reward)."""
    start = ForecastGame(config, seed, series, encoder).start
    rounds = []
    for k, t in enumerate(range(start, start + config.horizon)):
        action, perturbation = forecaster_acts[k][2], adversary_acts[k][2]
        forecast = series.target[t] + forecaster_space(config).deltas[action]
        realised = series.target[t + 1] + adversary_space(config).deltas[perturbation]
        rounds.append(
            (
                encoder(state_at(series, t)),
                encoder(state_at(series, t + 1)),
                action,
                perturbation,
                -abs(realised - forecast),
            )
        )
    return rounds


def test_rarl_learner_gets_its_own_reward_and_the_other_player_is_frozen():
    """Forecaster blocks: the forecaster learns from -|err| while the adversary plays greedily;
    adversary blocks: the adversary learns from +|err| while the forecaster plays greedily."""
    series = load_series("synthetic", seed=2, n_rows=40)
    encoder = HashStateKey(10)
    forecaster = Recording(forecaster_space(GAME), gamma=0.5, seed=0)
    adversary = Recording(adversary_space(GAME), gamma=0.5, seed=1)
    trainer = RADversarialTrainer(GAME, alternation_schedule=2, total_epochs=8, seed=3)
    trainer.run(forecaster, adversary, series=series, encoder=encoder)
    h = GAME.horizon
    forecaster_updates, adversary_updates = iter(forecaster.updates), iter(adversary.updates)
    for epoch in range(8):
        acts_f, acts_a = forecaster.acts[epoch * h : (epoch + 1) * h], adversary.acts[epoch * h : (epoch + 1) * h]
        learner_is_forecaster = (epoch // 2) % 2 == 0
        assert [explore for _, explore, _ in acts_f] == [learner_is_forecaster] * h
        assert [explore for _, explore, _ in acts_a] == [not learner_is_forecaster] * h
        for key, next_key, action, perturbation, reward in expected_rounds(
            GAME, series, encoder, 3 + epoch, acts_f, acts_a
        ):
            if learner_is_forecaster:
                got = next(forecaster_updates)
                assert got[:2] == (key, action) and got[3:] == (next_key, False)
                assert got[2] == pytest.approx(reward, abs=1e-12)
            else:
                got = next(adversary_updates)
                assert got[:2] == (key, perturbation) and got[3:] == (next_key, False)
                assert got[2] == pytest.approx(-reward, abs=1e-12) and got[2] >= 0.0
    assert next(forecaster_updates, None) is None and next(adversary_updates, None) is None
    assert len(forecaster.updates) == len(adversary.updates) == 4 * h


def test_training_loop_with_an_adversary_gives_it_the_negated_reward():
    series = load_series("synthetic", seed=4, n_rows=40)
    encoder = HashStateKey(10)
    forecaster = Recording(forecaster_space(GAME), gamma=0.5, seed=0)
    adversary = Recording(adversary_space(GAME), gamma=0.5, seed=1)
    TrainingLoop(GAME, n_episodes=3, seed=7).run(forecaster, adversary, series=series, encoder=encoder)
    h = GAME.horizon
    for episode in range(3):
        window = slice(episode * h, (episode + 1) * h)
        rounds = expected_rounds(GAME, series, encoder, 7 + episode, forecaster.acts[window], adversary.acts[window])
        for (key, next_key, action, perturbation, reward), f_update, a_update in zip(
            rounds, forecaster.updates[window], adversary.updates[window], strict=False
        ):
            assert f_update[:2] == (key, action) and f_update[3:] == (next_key, False)
            assert f_update[2] == pytest.approx(reward, abs=1e-12)
            assert a_update[:2] == (key, perturbation) and a_update[3:] == (next_key, False)
            assert a_update[2] == pytest.approx(-reward, abs=1e-12)
    assert len(forecaster.updates) == len(adversary.updates) == 3 * h


def test_best_response_adversary_learns_to_push_against_a_frozen_forecaster():
    """y rises 0.5 a step and the frozen forecaster always says "no change" (delta 0):
    the error is |0.5 + p| = 0.5 + p, so with gamma 0 the adversary's Q(a) -> 0.5 + p_a and
    its best perturbation is p = +0.25 (the top bin). An adversary that maximised -|err|
    would learn Q(a) = -(0.5 + p_a) and choose p = -0.25. One state key (1 bucket), so
    every round updates the same row."""
    n = 40
    series = ForecastSeries(np.arange(n) * 0.5 + 3.0, np.sin(np.arange(n)), tuple(f"t{i}" for i in range(n)), "ramp")
    config = SimulationConfig(horizon=10, state_key="hash")
    frozen = QTableAgent(forecaster_space(config), default_action=forecaster_space(config).delta_to_action(0.0))
    adversary = QTableAgent(
        adversary_space(config), alpha=0.5, gamma=0.0, epsilon=1.0, epsilon_decay=0.99, epsilon_min=0.1, seed=0
    )
    history = train_best_response(
        frozen, adversary, config, series=series, encoder=HashStateKey(1), episodes=150, seed=0
    )
    assert frozen.n_updates == 0 and frozen.n_states == 0
    assert adversary.state_keys == [0]
    np.testing.assert_allclose(adversary.q_values(0), 0.5 + adversary_space(config).deltas, rtol=0, atol=1e-4)
    assert adversary.act(0, explore=False) == config.adversary_bins - 1
    # history: the mean error the adversary caused per episode. Exploring uniformly at first:
    # E|0.5 + p| = 0.5; at the end 90% greedy: 0.9 * 0.75 + 0.1 * 0.5 = 0.725.
    assert history[0] < 0.6 and np.mean(history[-20:]) == pytest.approx(0.725, abs=0.02)
