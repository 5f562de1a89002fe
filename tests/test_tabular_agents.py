"""Tabular learners: action space, Q-learning and WoLF-PHC update rules, epsilon schedule, seeding."""

import numpy as np
import pytest

from pglab.algos.tabular import DiscreteActionSpace, QTableAgent, WoLFPHCAgent
from pglab.errors import ConfigError


# --- DiscreteActionSpace ---------------------------------------------------------------------
def test_action_space_defaults_span_minus_one_to_one_in_steps_of_a_tenth():
    space = DiscreteActionSpace()
    assert space.n_bins == 21 and space.bin_width == pytest.approx(0.1)
    np.testing.assert_allclose(space.deltas, np.round(np.arange(-10, 11) / 10, 12), atol=1e-12)
    for idx in range(21):
        assert space.delta_to_action(space.action_to_delta(idx)) == idx
    assert space.delta_to_action(7.3) == 20 and space.delta_to_action(-99.0) == 0  # clamped
    assert space.delta_to_action(0.04) == 10 and space.delta_to_action(0.06) == 11  # nearest bin
    assert space.delta_to_action(0.0) == 10


@pytest.mark.parametrize(
    "kwargs, field",
    [({"n_bins": 1}, "n_bins"), ({"max_delta": 0.0}, "max_delta"), ({"max_delta": float("nan")}, "max_delta")],
)
def test_action_space_rejects_bad_fields(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        DiscreteActionSpace(**kwargs)


def test_action_out_of_range_is_an_error():
    with pytest.raises(ConfigError, match=r"action: .*\(got 21\)"):
        DiscreteActionSpace().action_to_delta(21)


# --- Q-learning ------------------------------------------------------------------------------
def test_q_update_matches_hand_computation():
    agent = QTableAgent(3, alpha=0.5, gamma=0.9, epsilon=0.0, epsilon_min=0.0)
    # Q(s0, a1) = 0 -> td = 1 + 0.9 * 0 - 0 = 1, Q = 0.5
    assert agent.update("s0", 1, 1.0, "s1") == pytest.approx(1.0)
    assert agent.q_values("s0").tolist() == [0.0, 0.5, 0.0]
    # Q(s1, a2): td = 2 + 0.9 * max Q(s0) - 0 = 2 + 0.45 = 2.45, Q = 1.225
    assert agent.update("s1", 2, 2.0, "s0") == pytest.approx(2.45)
    assert agent.q_values("s1")[2] == pytest.approx(1.225)
    # Q(s0, a1) again: td = -1 + 0.9 * 1.225 - 0.5 = -0.3975, Q = 0.5 - 0.19875
    assert agent.update("s0", 1, -1.0, "s1") == pytest.approx(-0.3975)
    assert agent.q_values("s0")[1] == pytest.approx(0.30125)
    # terminated: no bootstrap. td = 3 - 0.30125
    assert agent.update("s0", 1, 3.0, "s1", terminated=True) == pytest.approx(3.0 - 0.30125)


def test_q_agent_matches_a_reference_dict_implementation_over_random_updates():
    """The dense table with its cached row maxima equals a plain dict-of-lists Q-learner."""
    rng = np.random.default_rng(0)
    agent = QTableAgent(5, alpha=0.3, gamma=0.8, epsilon=0.0, epsilon_min=0.0)
    reference: dict[int, list[float]] = {}
    for _ in range(3000):  # > 64 states forces the arrays to grow
        s, s2, a = int(rng.integers(100)), int(rng.integers(100)), int(rng.integers(5))
        r = float(rng.normal())
        reference.setdefault(s, [0.0] * 5)
        reference.setdefault(s2, [0.0] * 5)
        td_ref = r + 0.8 * max(reference[s2]) - reference[s][a]
        reference[s][a] += 0.3 * td_ref
        assert agent.update(s, a, r, s2) == pytest.approx(td_ref, abs=1e-12)
    for s, row in reference.items():
        np.testing.assert_allclose(agent.q_values(s), row, atol=1e-12)
    n = agent.n_states
    np.testing.assert_array_equal(agent.row_max[:n], agent.q[:n].max(axis=1))


def test_epsilon_schedule_is_geometric_with_a_floor():
    agent = QTableAgent(2, epsilon=1.0, epsilon_decay=0.9, epsilon_min=0.2)
    seen = []
    for _ in range(30):
        agent.update(0, 0, 0.0, 0)
        seen.append(agent.epsilon)
    expected = [max(0.2, 0.9 ** (k + 1)) for k in range(30)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)
    assert seen[-1] == 0.2


def test_q_learning_finds_the_known_optimum_of_a_deterministic_chain():
    """Chain 0-1-2-3, actions left/right, reward 1 on entering 3 (terminal), gamma 0.9.

    Q*(s, right) = 0.9^(2-s) and Q*(s, left) = 0.9 * V*(max(s-1, 0)) by value iteration.
    The agent explores epsilon-greedily from state 0 and must end with Q close to Q*.
    """
    gamma = 0.9
    v_star = {3: 0.0, 2: 1.0, 1: gamma, 0: gamma**2}
    q_star = {s: [gamma * v_star[max(s - 1, 0)], 1.0 if s == 2 else gamma * v_star[s + 1]] for s in range(3)}
    agent = QTableAgent(2, alpha=0.5, gamma=gamma, epsilon=1.0, epsilon_decay=0.999, epsilon_min=0.2, seed=3)
    for _ in range(800):
        s = 0
        for _ in range(50):
            a = agent.act(s)
            s2 = max(s - 1, 0) if a == 0 else s + 1
            agent.update(s, a, 1.0 if s2 == 3 else 0.0, s2, terminated=s2 == 3)
            if s2 == 3:
                break
            s = s2
    for s in range(3):
        np.testing.assert_allclose(agent.q_values(s), q_star[s], atol=1e-3)
        assert agent.act(s, explore=False) == 1  # move right


def test_q_policy_is_epsilon_greedy_distribution():
    agent = QTableAgent(4, epsilon=0.2, epsilon_decay=1.0, epsilon_min=0.2)
    agent.update(0, 2, 1.0, 0)
    np.testing.assert_allclose(agent.policy(0), [0.05, 0.05, 0.85, 0.05])
    np.testing.assert_allclose(agent.policy("unseen"), [0.25] * 4)


def test_unseen_state_uses_default_action_when_greedy():
    agent = QTableAgent(21, default_action=10, epsilon=0.0, epsilon_min=0.0)
    assert all(agent.act(("never", "seen")[k % 2], explore=False) == 10 for k in range(5))


def test_same_seed_same_actions_different_seed_different():
    def actions(seed):
        agent = QTableAgent(21, seed=seed, epsilon=0.5, epsilon_decay=1.0, epsilon_min=0.5)
        out = []
        for t in range(200):
            a = agent.act(t % 7)
            agent.update(t % 7, a, -abs(a - 12) / 10, (t + 1) % 7)
            out.append(a)
        return out, agent.q.copy()

    (a1, q1), (a2, q2), (a3, _) = actions(5), actions(5), actions(6)
    assert a1 == a2 and np.array_equal(q1, q2)
    assert a1 != a3


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"gamma": 1.5}, "gamma"),
        ({"epsilon": -0.1}, "epsilon"),
        ({"epsilon_decay": 0.0}, "epsilon_decay"),
        ({"default_action": 5}, "default_action"),
        ({"epsilon": 0.01, "epsilon_min": 0.05}, "epsilon_min"),
    ],
)
def test_agent_rejects_bad_hyperparameters(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        QTableAgent(3, **kwargs)


# --- WoLF-PHC --------------------------------------------------------------------------------
def test_wolf_update_matches_hand_computation():
    agent = WoLFPHCAgent(3, alpha=1.0, gamma=0.0, epsilon=0.0, epsilon_min=0.0, delta_win=0.1, delta_lose=0.4)
    # Q(s, 2) = 1 after the step. avg_pi = pi = 1/3 -> E_pi Q == E_avg Q -> winning (>=), delta 0.1.
    agent.update("s", 2, 1.0, "s")
    assert agent.last_delta == 0.1
    np.testing.assert_allclose(agent.average_policy("s"), [1 / 3] * 3)
    np.testing.assert_allclose(agent.policy("s"), [1 / 3 - 0.05, 1 / 3 - 0.05, 1 / 3 + 0.1])
    # Q(s, 0) = 2: best = 0. avg = 1/3 + (pi - 1/3)/2 = [0.30833, 0.30833, 0.38333].
    # E_pi Q = 2 * 0.28333 + 0.43333 = 1.0; E_avg Q = 2 * 0.30833 + 0.38333 = 1.0 -> winning, delta 0.1
    agent.update("s", 0, 2.0, "s")
    np.testing.assert_allclose(agent.average_policy("s"), [1 / 3 - 0.025, 1 / 3 - 0.025, 1 / 3 + 0.05])
    np.testing.assert_allclose(agent.policy("s"), [1 / 3 + 0.05, 1 / 3 - 0.1, 1 / 3 + 0.05])
    # Q(s, 1) = -5 (best still 0): E_pi Q = 2*0.38333 - 5*0.23333 + 1*0.38333 = -0.01667
    # avg (count 3) = avg + (pi - avg)/3 = [0.325, 0.26667, 0.40833]:
    # E_avg Q = 0.65 - 1.33333 + 0.40833 = -0.275 -> winning
    agent.update("s", 1, -5.0, "s")
    assert agent.last_delta == 0.1
    # Q(s, 0) = -10: best = 2. E_pi Q = -10*0.43333 - 5*0.18333 + 0.43333 < E_avg Q -> losing, delta 0.4:
    # steps = min(pi, 0.2): 0.2 from action 0, 0.18333 (all of it) from action 1.
    pi_before = agent.policy("s")
    agent.update("s", 0, -10.0, "s")
    assert agent.last_delta == 0.4
    np.testing.assert_allclose(agent.policy("s"), [pi_before[0] - 0.2, 0.0, pi_before[2] + 0.2 + pi_before[1]])


def test_wolf_policies_stay_distributions_under_random_updates():
    rng = np.random.default_rng(1)
    agent = WoLFPHCAgent(4, alpha=0.5, gamma=0.5, seed=0, delta_win=0.05, delta_lose=0.3)
    for _ in range(2000):
        s = int(rng.integers(70))
        agent.update(s, agent.act(s), float(rng.normal()), int(rng.integers(70)))
    n = agent.n_states
    for table in (agent.pi[:n], agent.avg_pi[:n]):
        assert (table >= 0).all()
        np.testing.assert_allclose(table.sum(axis=1), 1.0, atol=1e-12)


def test_wolf_acting_samples_its_policy():
    agent = WoLFPHCAgent(3, epsilon=0.0, epsilon_min=0.0, seed=0)
    agent.set_policy(0, [0.2, 0.0, 0.8])
    draws = np.bincount([agent.act(0) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(draws, [0.2, 0.0, 0.8], atol=0.03)
    assert agent.act(0, explore=False) == 2
    with pytest.raises(ConfigError, match="probs"):
        agent.set_policy(0, [0.5, 0.6, 0.0])


# --- state values (the agent API's .value) ---------------------------------------------------
def test_state_value_is_max_q_for_q_learning_and_pi_dot_q_for_wolf():
    q = QTableAgent(3, alpha=0.5, gamma=0.0, epsilon=0.0, epsilon_min=0.0)
    q.update("s", 0, -1.0, "s")  # Q(s) = [-0.5, 0, 0]
    q.update("s", 1, -2.0, "s")  # Q(s) = [-0.5, -1.0, 0]
    q.update("s", 2, -0.4, "s")  # Q(s) = [-0.5, -1.0, -0.2]
    assert q.state_value("s") == pytest.approx(-0.2)  # max_a Q(s, a)
    assert q.state_value("never seen") == 0.0
    wolf = WoLFPHCAgent(3, alpha=0.5, gamma=0.0, epsilon=0.0, epsilon_min=0.0, delta_win=0.1, delta_lose=0.2)
    wolf.set_policy("s", [0.2, 0.3, 0.5])
    wolf.q[wolf._rows["s"]] = [-0.5, -1.0, -0.2]
    # sum_a pi(s, a) Q(s, a) = 0.2 * -0.5 + 0.3 * -1.0 + 0.5 * -0.2 = -0.5
    assert wolf.state_value("s") == pytest.approx(-0.5)
    assert wolf.state_value("never seen") == 0.0
