"""EpisodeStats against a direct computation over the episodes that ended."""

import math

import pytest
import torch

from pglab.contracts import TensorContractError
from pglab.run.episodes import EpisodeStats


def test_metrics_match_the_episodes_that_ended():
    stats = EpisodeStats("cpu", success=True)
    returns = torch.tensor([[1.0, 0.0, -3.0], [0.0, 2.5, 0.0]])
    lengths = torch.tensor([[4, 0, 7], [0, 2, 0]])
    succeeded = torch.tensor([[True, True, False], [False, True, False]])
    stats.add(returns, lengths, succeeded=succeeded)
    ended = [(1.0, 4, True), (-3.0, 7, False), (2.5, 2, True)]
    values = [r for r, _, _ in ended]
    mean = sum(values) / 3
    out = {key: float(value) for key, value in stats.metrics().items()}
    assert out["episode/count"] == 3
    assert out["return/mean"] == pytest.approx(mean)
    assert out["return/std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 3))
    assert out["episode/length"] == pytest.approx(13 / 3)
    assert out["episode/success_rate"] == pytest.approx(2 / 3)  # the un-ended True at [0, 1] does not count


def test_a_return_of_zero_at_an_episode_end_counts_and_empty_rows_are_nan():
    stats = EpisodeStats("cpu")
    stats.add(torch.tensor([0.0, 5.0]), torch.tensor([3, 0]))
    assert float(stats.metrics()["return/mean"]) == 0.0 and float(stats.metrics()["episode/count"]) == 1
    assert "episode/success_rate" not in stats.metrics()
    stats.reset()
    assert math.isnan(float(stats.metrics()["return/mean"]))
    assert float(stats.metrics()["episode/count"]) == 0


def test_state_round_trip_and_contracts():
    stats = EpisodeStats("cpu", success=True)
    stats.add(torch.tensor([2.0]), torch.tensor([5]), succeeded=torch.tensor([True]))
    other = EpisodeStats("cpu", success=True)
    other.load_state_dict(stats.state_dict())
    assert {k: float(v) for k, v in other.metrics().items()} == {k: float(v) for k, v in stats.metrics().items()}
    with pytest.raises(TensorContractError):
        stats.add(torch.zeros(3), torch.zeros(2, dtype=torch.long), succeeded=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="succeeded is required"):
        stats.add(torch.zeros(3), torch.zeros(3, dtype=torch.long))
