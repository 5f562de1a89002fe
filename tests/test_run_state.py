"""The shell's state registry on its own: what it captures comes back exactly, and a
checkpoint of another set-up is refused with one line naming the entry."""

import pytest
import torch

from pglab.errors import CheckpointError
from pglab.run.state import StateRegistry, Value


def _registry(width: int, seed: int = 0) -> tuple[StateRegistry, torch.nn.Linear, torch.optim.Adam, Value]:
    torch.manual_seed(seed)
    net = torch.nn.Linear(width, 2)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(1, width)).sum().backward()
    optimizer.step()
    obs = Value(torch.arange(3.0))
    registry = StateRegistry()
    registry.add(models={"net": net}, optimizers={"adam": optimizer}, state={"obs": obs}, meta={"width": width})
    return registry, net, optimizer, obs


def test_a_capture_restores_into_fresh_objects_exactly():
    registry, net, optimizer, obs = _registry(3)
    captured = registry.capture()
    fresh, fresh_net, fresh_optimizer, fresh_obs = _registry(3, seed=1)
    fresh_obs.value = torch.zeros(3)
    fresh.restore(captured)
    assert all(
        torch.equal(a, b) for a, b in zip(net.state_dict().values(), fresh_net.state_dict().values(), strict=True)
    )
    assert torch.equal(
        fresh_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    assert torch.equal(fresh_obs.value, obs.value)


def test_an_optimizer_of_other_parameters_is_a_checkpoint_error():
    registry, *_ = _registry(3)
    captured = registry.capture()
    other = StateRegistry()
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam([*net.parameters(), torch.nn.Parameter(torch.zeros(1))])  # three parameters, not two
    other.add(optimizers={"adam": adam})
    with pytest.raises(CheckpointError, match="optimizer 'adam' does not match this run's parameters"):
        other.restore(captured)


def test_a_name_registered_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        StateRegistry().add(state={"x": Value(1)}, meta={"x": 1})
