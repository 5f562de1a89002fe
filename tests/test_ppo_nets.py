"""Actor-critic networks and the PPO update on problems with a known better action."""

import math

import pytest
import torch

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
from pglab.errors import TensorContractError
from pglab.estimators import compute_gae, reward_to_go
from pglab.nets.actor_critic import CategoricalActorCritic, GaussianActorCritic, build_actor_critic


def test_categorical_log_prob_entropy_and_sampling_match_torch_distributions():
    net = CategoricalActorCritic(5, 3, (16,))
    obs = torch.randn(7, 5)
    logits = net.actor(obs)
    reference = torch.distributions.Categorical(logits=logits)
    actions = torch.tensor([0, 1, 2, 2, 1, 0, 1])
    log_probs, entropy, values = net.evaluate_actions(obs, actions)
    torch.testing.assert_close(log_probs, reference.log_prob(actions))
    torch.testing.assert_close(entropy, reference.entropy())
    torch.testing.assert_close(values, net.critic(obs).squeeze(-1))
    # act(): the returned log-prob is that of the returned action; frequencies follow pi.
    many = obs[:1].expand(20_000, 5)
    sampled, sampled_log_probs, _ = net.act(many, torch.Generator().manual_seed(0))
    torch.testing.assert_close(sampled_log_probs, torch.log_softmax(logits[0], -1)[sampled])
    frequencies = torch.bincount(sampled, minlength=3).double() / 20_000
    assert torch.allclose(frequencies, reference.probs[0].double(), atol=0.015)
    assert torch.equal(net.deterministic_action(obs), logits.argmax(-1))


def test_gaussian_log_prob_entropy_and_initial_policy_match_torch_normal():
    net = GaussianActorCritic(3, 2, (16,), log_std_init=-0.5)
    obs = torch.randn(6, 3)
    actions = torch.randn(6, 2)
    reference = torch.distributions.Normal(net.actor(obs), torch.full((2,), -0.5).exp())
    log_probs, entropy, _ = net.evaluate_actions(obs, actions)
    torch.testing.assert_close(log_probs, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    sampled, sampled_log_probs, _ = net.act(obs, torch.Generator().manual_seed(1))
    torch.testing.assert_close(sampled_log_probs, reference.log_prob(sampled).sum(-1))
    # Orthogonal init with gain 0.01 on the output: the initial mean is close to 0.
    assert net.actor(torch.randn(100, 3)).abs().max() < 0.1


def test_contracts_and_builder():
    net = build_actor_critic(4, "discrete", 2)
    with pytest.raises(TensorContractError, match="4 numbers per row"):
        net.check_obs(torch.zeros(3, 5), "predict")
    with pytest.raises(ValueError, match="action_kind"):
        build_actor_critic(4, "multi_binary", 2)


def contextual_bandit_batch(net, n, seed, reward_fn):
    """One-step episodes: obs ~ N(0, 1), reward = reward_fn(obs, action)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, net.obs_dim, generator=g)
    with torch.no_grad():
        actions, log_probs, values = net.act(obs, g)
    rewards = reward_fn(obs, actions)
    dones = torch.ones(n, 1, dtype=torch.bool)
    advantages, returns = compute_gae(rewards[:, None], values[:, None], dones, None, torch.zeros(n), 0.99, 0.95)
    batch = OnPolicyBatch(log_probs, advantages[:, 0], returns[:, 0], values)
    return obs, actions, batch


@pytest.fixture
def one_thread():
    # Small tensors: a second intra-op thread only adds contention on a busy CPU.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(("mode", "iterations"), [("reinforce_raw", 15), ("vpg_gae", 15), ("ppo", 5)])
def test_discrete_actor_critic_learns_a_state_dependent_best_action(mode, iterations, one_thread):
    """Reward 1 for the action that matches sign(obs[0]), else 0: a policy that ignores
    the observation earns 0.5. After a few updates the probability of the right action
    on held-out observations is about 0.96-0.98 (seeds 0-2); it starts at 0.5."""
    torch.manual_seed(0)
    net = CategoricalActorCritic(2, 2, (16,))
    probe = torch.randn(256, 2, generator=torch.Generator().manual_seed(9))
    best = (probe[:, 0] > 0).long()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    hp = OnPolicyHyperparams(algo=mode, ppo_epochs=2, num_minibatches=2)
    for k in range(iterations):
        obs, actions, batch = contextual_bandit_batch(net, 256, k, lambda o, a: (a == (o[:, 0] > 0).long()).float())
        onpolicy_update(
            lambda i, obs=obs, actions=actions: net.evaluate_actions(obs[i], actions[i]),
            batch,
            net.parameters(),
            optimizer,
            hp,
            generator=torch.Generator().manual_seed(k),
        )
    with torch.no_grad():
        right = torch.softmax(net.actor(probe), -1)[torch.arange(256), best]
    assert right.mean().item() > 0.9


def test_gaussian_ppo_finds_the_reward_peak_and_shrinks_sigma(one_thread):
    """reward = -(a - 1)^2, so E[r] = -(mu - 1)^2 - sigma^2: the optimum is mu = 1,
    sigma -> 0. From mu ~ 0, sigma = 1, 8 PPO iterations reach mu = 1.00 +- 0.02 and
    log sigma ~ -0.64 (seeds 0-2)."""
    torch.manual_seed(0)
    net = GaussianActorCritic(1, 1, (16,))
    probe = torch.zeros(1, 1)
    assert abs(net.deterministic_action(probe).item()) < 0.1
    optimizer = torch.optim.Adam(net.parameters(), lr=0.02)
    hp = OnPolicyHyperparams(algo="ppo", entropy_coef=0.0, ppo_epochs=2, num_minibatches=2)
    for k in range(8):
        obs, actions, batch = contextual_bandit_batch(net, 256, k, lambda o, a: -(a[:, 0] - 1.0).pow(2))
        onpolicy_update(
            lambda i, obs=obs, actions=actions: net.evaluate_actions(obs[i], actions[i]),
            batch,
            net.parameters(),
            optimizer,
            hp,
            generator=torch.Generator().manual_seed(k),
        )
    assert abs(net.deterministic_action(probe).item() - 1.0) < 0.1
    assert net.log_std.item() < -0.4


def test_gae_lambda_one_with_mid_rollout_truncation_is_segment_monte_carlo_returns():
    """lam=1: within each episode segment, A_t = G_t - V(s_t) where G_t is bootstrapped
    with V(final_obs) at a truncation and with 0 at a termination (closed form)."""
    gamma = 0.9
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, -1.0, 2.0, 0.0, 1.5]], dtype=torch.float64)
    dones = torch.tensor([[False, False, False, True, False]])
    truncs = torch.tensor([[False, True, False, False, False]])
    final_value, last_value = 7.0, -2.0
    next_values = torch.cat([values[:, 1:], torch.tensor([[last_value]], dtype=torch.float64)], 1)
    next_values[0, 1] = final_value
    adv, ret = compute_gae(
        rewards,
        values,
        dones,
        truncs,
        torch.tensor([last_value], dtype=torch.float64),
        gamma,
        1.0,
        next_values=next_values,
    )
    g1 = 2.0 + gamma * final_value
    g0 = 1.0 + gamma * g1
    g3 = 4.0
    g2 = 3.0 + gamma * g3
    g4 = 5.0 + gamma * last_value
    want = torch.tensor([[g0, g1, g2, g3, g4]], dtype=torch.float64)
    torch.testing.assert_close(ret, want)
    torch.testing.assert_close(adv, want - values)
    # lam=0: TD errors, with V(final_obs) at the truncation and no bootstrap at the end.
    adv0, _ = compute_gae(
        rewards,
        values,
        dones,
        truncs,
        torch.tensor([last_value], dtype=torch.float64),
        gamma,
        0.0,
        next_values=next_values,
    )
    td = rewards + gamma * (~dones).double() * next_values - values
    torch.testing.assert_close(adv0, td)
    assert math.isclose(float(adv0[0, 1]), 2.0 + gamma * final_value + 1.0)
    # reinforce_raw's returns: no critic at all, every episode boundary cuts the sum.
    mc = reward_to_go(rewards, dones | truncs, gamma)
    torch.testing.assert_close(
        mc, torch.tensor([[1.0 + gamma * 2.0, 2.0, 3.0 + gamma * 4.0, 4.0, 5.0]], dtype=torch.float64)
    )


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu", "gelu"])
def test_mlp_forward_is_bit_identical_to_calling_the_module(activation):
    from pglab.nets.mlp import build_mlp, mlp_forward

    torch.manual_seed(0)
    for layer_norm in (False, True):
        mlp = build_mlp(7, (32, 16), 3, activation=activation, layer_norm=layer_norm)
        inputs = torch.randn(50, 7, requires_grad=True)
        fast = mlp_forward(mlp, inputs)
        assert torch.equal(fast, mlp(inputs))
        (grad_fast,) = torch.autograd.grad(fast.sum(), inputs)
        (grad_module,) = torch.autograd.grad(mlp(inputs).sum(), inputs)
        assert torch.equal(grad_fast, grad_module)


@pytest.mark.parametrize("hidden", [(16, 8), (80, 8)])  # side by side; one network after the other (> 128 wide)
def test_rollout_actor_samples_like_act_and_snapshots_the_weights(hidden):
    torch.manual_seed(0)
    obs = torch.randn(64, 5)
    for net in (CategoricalActorCritic(5, 3, hidden), GaussianActorCritic(5, 2, hidden, log_std_init=-0.5)):
        with torch.no_grad():
            for param in net.parameters():
                param.add_(0.3 * torch.randn_like(param))  # away from the near-uniform init
        step = net.rollout_actor()
        assert step != net.act  # fused path taken
        fused = step(obs, torch.Generator().manual_seed(1))
        plain = net.act(obs, torch.Generator().manual_seed(1))
        if isinstance(net, CategoricalActorCritic):
            assert torch.equal(fused[0], plain[0])
        else:
            torch.testing.assert_close(fused[0], plain[0])
        torch.testing.assert_close(fused[1], plain[1])
        torch.testing.assert_close(fused[2], plain[2])
        # The log-probs are those of the sampled actions under evaluate_actions.
        torch.testing.assert_close(fused[1], net.evaluate_actions(obs, fused[0])[0])
        # A snapshot: later weight changes need a new rollout_actor.
        with torch.no_grad():
            net.critic[-1].bias.add_(1.0)
        torch.testing.assert_close(step(obs, torch.Generator().manual_seed(1))[2], fused[2])
        torch.testing.assert_close(net.rollout_actor()(obs, torch.Generator().manual_seed(1))[2], fused[2] + 1.0)


def test_rollout_actor_falls_back_to_act_for_other_layouts():
    net = CategoricalActorCritic(5, 3, (16,))
    from pglab.nets.mlp import build_mlp

    net.critic = build_mlp(5, (16,), 1, layer_norm=True)
    assert net.rollout_actor() == net.act


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numpy_forward_is_the_modules_forward_layer_by_layer(activation, dtype):
    # The one NumPy forward pass (the rollout step's and the closed-form gradient's)
    # against calling the torch modules: every activation on the way, not just the output.
    from pglab.nets.mlp import build_mlp, linear_stack, numpy_forward, numpy_layers

    torch.manual_seed(0)
    mlp = build_mlp(7, (32, 16), 3, activation=activation).to(dtype)
    inputs = torch.randn(50, 7, dtype=dtype)
    expected = [inputs]
    with torch.no_grad():
        out = inputs
        for index, module in enumerate(mlp):
            out = module(out)
            if not isinstance(module, torch.nn.Linear) or index == len(mlp) - 1:
                expected.append(out)
    outputs = numpy_forward(numpy_layers(linear_stack(mlp)), inputs.numpy())
    assert len(outputs) == len(expected) == 4
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}
    for array, tensor in zip(outputs, expected, strict=True):
        assert array.dtype == inputs.numpy().dtype
        torch.testing.assert_close(torch.from_numpy(array), tensor, **tolerance)


def test_linear_stack_reads_plain_stacks_only():
    from pglab.nets.mlp import build_mlp, linear_stack

    mlp = build_mlp(4, (8, 8), 2, activation="relu")
    layers = linear_stack(mlp)
    assert [(tuple(w.shape), type(a).__name__ if a is not None else None) for w, _, a in layers] == [
        ((8, 4), "ReLU"),
        ((8, 8), "ReLU"),
        ((2, 8), None),
    ]
    assert all(w is m.weight for (w, _, _), m in zip(layers, mlp[::2], strict=True))  # the parameters, not copies
    assert linear_stack(build_mlp(4, (8,), 2, layer_norm=True)) is None
    assert (
        linear_stack(torch.nn.Sequential(torch.nn.Linear(4, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, 2)))
        is None
    )
    assert linear_stack(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())) is None
    assert (
        linear_stack(
            torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        )
        is None
    )
