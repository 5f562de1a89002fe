"""Q-table JSON files: exact round trip, atomic writes, rejection of malformed or mismatched files."""

import json

import numpy as np
import pytest

from pglab.algos.tabular import DiscreteActionSpace, QTableAgent, WoLFPHCAgent, load_q_table, save_q_table
from pglab.errors import CheckpointError


def trained(agent_cls, **kwargs):
    agent = agent_cls(DiscreteActionSpace(7, 0.5), seed=4, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(500):
        s = int(rng.integers(20))
        agent.update(s, agent.act(s), float(rng.normal()), int(rng.integers(20)))
    return agent


@pytest.mark.parametrize("agent_cls", [QTableAgent, WoLFPHCAgent])
def test_round_trip_is_exact_and_learning_continues_identically(tmp_path, agent_cls):
    agent = trained(agent_cls)
    path = save_q_table(agent, tmp_path / "agent.json", metadata={"note": "x"})
    loaded = load_q_table(path)
    assert type(loaded) is agent_cls and loaded.epsilon == agent.epsilon
    assert loaded.action_space == agent.action_space and loaded.state_keys == agent.state_keys
    n = agent.n_states
    np.testing.assert_array_equal(loaded.q[:n], agent.q[:n])
    if agent_cls is WoLFPHCAgent:
        np.testing.assert_array_equal(loaded.pi[:n], agent.pi[:n])
        np.testing.assert_array_equal(loaded.avg_pi[:n], agent.avg_pi[:n])
        np.testing.assert_array_equal(loaded.counts[:n], agent.counts[:n])
    # Same RNG state and tables: the next 300 steps are bit-identical.
    for t in range(300):
        s = t % 25
        a1, a2 = agent.act(s), loaded.act(s)
        assert a1 == a2
        assert agent.update(s, a1, -0.1 * a1, (s + 3) % 25) == loaded.update(s, a2, -0.1 * a2, (s + 3) % 25)
    assert not list(tmp_path.glob(".*tmp*"))  # the atomic writer left no temporary behind


def write(tmp_path, payload):
    path = tmp_path / "bad.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


@pytest.fixture
def good_payload(tmp_path):
    path = save_q_table(trained(WoLFPHCAgent), tmp_path / "good.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.update(format="something-else"), "not a pglab Q-table"),
        (lambda p: p.update(format_version=99), "format_version=99"),
        (lambda p: p.pop("entries"), "missing required entry 'entries'"),
        (lambda p: p.update(algorithm="dqn"), "algorithm='dqn'"),
        (lambda p: p["entries"][0].update(q=[0.0] * 3), r"entries\[0\].q must be a list of 7"),
        (lambda p: p["entries"][0]["q"].__setitem__(0, "x"), "not a finite number"),
        (lambda p: p["entries"][1].update(state=p["entries"][0]["state"]), "appears twice"),
        (lambda p: p["entries"][0].update(pi=[0.5] * 7), "not a probability distribution"),
        (lambda p: p["entries"][0].pop("avg_pi"), "lacks 'avg_pi'"),
        (lambda p: p["entries"][0].update(state=[1, 2]), "must be an int or a string"),
        (lambda p: p["action_space"].update(n_bins=1), "invalid parameters"),
        (lambda p: p["hyperparameters"].update(alpha=-1), r"invalid parameters: alpha: .*\(got -1"),
        (lambda p: p.update(epsilon=2.0), r"epsilon: .*\(got 2.0\)"),
    ],
)
def test_malformed_tables_are_rejected_with_a_clear_message(tmp_path, good_payload, mutate, message):
    mutate(good_payload)
    with pytest.raises(CheckpointError, match=message):
        load_q_table(write(tmp_path, good_payload))


def test_truncated_non_json_nan_and_missing_files_are_rejected(tmp_path, good_payload):
    text = json.dumps(good_payload)
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_q_table(write(tmp_path, text[: len(text) // 2]))
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_q_table(write(tmp_path, text.replace(str(good_payload["entries"][0]["q"][0]), "NaN", 1)))
    with pytest.raises(CheckpointError, match="no such file"):
        load_q_table(tmp_path / "missing.json")


def test_mismatched_algorithm_or_action_space_is_rejected(tmp_path):
    path = save_q_table(trained(QTableAgent), tmp_path / "q.json")
    with pytest.raises(CheckpointError, match="expected 'wolf'"):
        load_q_table(path, expected_algorithm="wolf")
    with pytest.raises(CheckpointError, match="does not match the configured"):
        load_q_table(path, expected_action_space=DiscreteActionSpace())
    assert load_q_table(path, expected_algorithm="q", expected_action_space=DiscreteActionSpace(7, 0.5)).n_states > 0
