import pytest
import torch
from torch.distributions import Normal

from pglab.errors import TensorContractError
from pglab.nets import GaussianPolicy, ValueNetwork


@pytest.mark.parametrize("state_dependent_std", [False, True])
def test_gaussian_policy_shapes_bounds_and_log_prob(state_dependent_std):
    policy = GaussianPolicy(1, 2, (32, 32), state_dependent_std=state_dependent_std, action_high=(1.0, 1.0))
    states = torch.rand(10, 1) * 2
    dist = policy(states)
    assert dist.mean.shape == (10, 2) and dist.stddev.shape == (10, 2)
    assert (dist.mean >= 0).all()
    actions = policy.act(states)
    assert actions.shape == (10, 2) and (actions >= 0).all() and (actions <= 1).all()
    raw = policy.sample(states, torch.Generator().manual_seed(0))
    want = Normal(dist.mean, dist.stddev).log_prob(raw).sum(-1)
    torch.testing.assert_close(policy.log_prob(states, raw), want)
    torch.testing.assert_close(policy.entropy(states), Normal(dist.mean, dist.stddev).entropy().sum(-1))
    values, log_probs, entropy = policy.evaluate_actions(states, raw)
    assert values is None and log_probs.shape == (10,) and entropy.shape == (10,)


def test_gaussian_policy_gradient_flows_and_deterministic_is_mean():
    policy = GaussianPolicy(1, 2, (16,))
    states = torch.rand(5, 1)
    (-policy.log_prob(states, torch.rand(5, 2)).mean()).backward()
    for param in policy.parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all()
    a1 = policy.act(states, deterministic=True)
    torch.testing.assert_close(a1, policy(states).mean)
    torch.testing.assert_close(a1, policy.act(states, deterministic=True))


def test_gaussian_policy_std_is_clamped():
    policy = GaussianPolicy(1, 2, (8,), log_std_init=5.0, max_std=2.0, min_std=0.1)
    assert torch.allclose(policy(torch.zeros(3, 1)).stddev, torch.full((3, 2), 2.0))
    with torch.no_grad():
        policy.log_std.fill_(-10.0)
    assert torch.allclose(policy(torch.zeros(3, 1)).stddev, torch.full((3, 2), 0.1))
    with pytest.raises(ValueError, match="min_std"):
        GaussianPolicy(1, 2, (8,), min_std=1.0, max_std=0.5)


def test_gaussian_policy_mean_shift_and_mean_init():
    states = torch.rand(64, 1) * 3
    plain = GaussianPolicy(1, 2, (16,), mean_init=(0.1, 0.2))
    shifted = GaussianPolicy(1, 2, (16,), mean_init=(0.1, 0.2), mean_shift=(0.5, 1.0))
    shifted.mean_net.load_state_dict(plain.mean_net.state_dict())
    # same network output: the shifted mean is lower by exactly the shift ...
    torch.testing.assert_close(shifted.mean_std(states)[0], plain.mean_std(states)[0] - torch.tensor([0.5, 1.0]))
    # ... and a freshly initialised shifted policy still starts at mean_init
    fresh = GaussianPolicy(1, 2, (16,), mean_init=(0.1, 0.2), mean_shift=(0.5, 1.0))
    torch.testing.assert_close(fresh.mean_std(states)[0], torch.tensor([[0.1, 0.2]]).expand(64, 2), atol=0.02, rtol=0)
    with torch.no_grad():
        fresh.mean_net[-1].bias.fill_(-20.0)  # softplus ~ 0: the mean is -shift, the action 0
    assert (fresh.mean_std(states)[0] < -0.49).all()
    assert (fresh.act(states, deterministic=True) == 0).all()
    with pytest.raises(ValueError, match="mean_shift"):
        GaussianPolicy(1, 2, (8,), mean_shift=-0.1)


def test_policy_and_value_contracts():
    policy = GaussianPolicy(1, 2, (8,))
    with pytest.raises(
        TensorContractError, match=r"GaussianPolicy.act: states expected float32\|float64\[B, 1\], got float32\[4, 3\]"
    ):
        policy.act(torch.zeros(4, 3))
    with pytest.raises(TensorContractError, match="int64"):
        policy.act(torch.zeros(4, 1, dtype=torch.int64))
    value = ValueNetwork(1, (8,))
    assert value(torch.zeros(7, 1)).shape == (7,)
    with pytest.raises(TensorContractError, match="ValueNetwork.forward"):
        value(torch.zeros(7))
