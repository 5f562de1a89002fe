"""The closed-form PPO gradient (pglab.losses.ppo_fused) against autograd through
ppo_clip_loss: every parameter's gradient and every metric, for both heads, both
activations, 1-3 hidden layers, value clipping and the entropy bonus; where it declines
(gSDE, LayerNorm, other activations); and a short training run with and without it."""
import dataclasses

import pytest
import torch
from torch import nn

from pglab.algos.ppo import train_ppo
from pglab.configs.ppo import PPOConfig
from pglab.losses.ppo import ppo_clip_loss
from pglab.losses.ppo_fused import fused_ppo_gradient
from pglab.nets.actor_critic import CategoricalActorCritic, GaussianActorCritic, GSDEActorCritic
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config


def _minibatch(net, obs_dim, batch, generator):
    obs = torch.randn(batch, obs_dim, generator=generator)
    if isinstance(net, CategoricalActorCritic):
        actions = torch.randint(0, net.num_actions, (batch,), generator=generator)
    else:
        actions = torch.randn(batch, net.action_dim, generator=generator)
    with torch.no_grad():
        log_probs, _, values = net.evaluate_actions(obs, actions)
    # old policy / values a little away from the current ones, so that some ratios lie
    # outside the clip range and some value moves outside the value clip range
    old_log_probs = log_probs + 0.4 * torch.randn(batch, generator=generator)
    old_values = values + 0.4 * torch.randn(batch, generator=generator)
    advantages = torch.randn(batch, generator=generator)
    returns = values + torch.randn(batch, generator=generator)
    return obs, actions, old_log_probs, advantages, returns, old_values


@pytest.mark.parametrize("head", ["categorical", "gaussian"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("hidden_dims", [(7,), (16, 12), (8, 8, 8)])
@pytest.mark.parametrize(("value_clip_coef", "entropy_coef"), [(None, 0.0), (0.2, 0.05)])
def test_closed_form_gradient_equals_autograd(head, activation, hidden_dims, value_clip_coef, entropy_coef):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    if head == "categorical":
        net = CategoricalActorCritic(5, 3, hidden_dims, activation=activation)
    else:
        net = GaussianActorCritic(5, 2, hidden_dims, activation=activation, log_std_init=-0.3)
    obs, actions, old_log_probs, advantages, returns, old_values = _minibatch(net, 5, 96, generator)
    settings = dict(clip_coef=0.2, value_clip_coef=value_clip_coef, value_coef=0.7, entropy_coef=entropy_coef)

    log_probs, entropy, values = net.evaluate_actions(obs, actions)
    reference = ppo_clip_loss(log_probs, old_log_probs, advantages, values, returns, entropy=entropy, old_values=old_values,
                              **settings)
    net.zero_grad(set_to_none=True)
    reference["loss"].backward()
    expected = {name: p.grad.clone() for name, p in net.named_parameters()}
    assert 0 < float(reference["stats/clipfrac"]) < 1  # both branches of the clipped surrogate are exercised

    net.zero_grad(set_to_none=True)
    closed_form = fused_ppo_gradient(net)
    assert closed_form is not None
    metrics = closed_form(obs, actions, old_log_probs, advantages, returns, old_values, **settings)
    for name, p in net.named_parameters():
        scale = expected[name].abs().max().clamp_min(1e-6)
        assert torch.allclose(p.grad, expected[name], atol=2e-6 * float(scale), rtol=1e-4), name
    for key, value in reference.items():
        assert torch.allclose(metrics[key], value.detach(), atol=1e-6, rtol=1e-5), key
        assert not metrics[key].requires_grad


def test_closed_form_declines_networks_it_does_not_cover():
    assert fused_ppo_gradient(GSDEActorCritic(3, 1, (8,))) is None
    assert fused_ppo_gradient(CategoricalActorCritic(3, 2, (8,), activation="elu")) is None
    layer_norm = CategoricalActorCritic(3, 2, (8,))
    layer_norm.actor = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 2))
    assert fused_ppo_gradient(layer_norm) is None
    extra = GaussianActorCritic(3, 1, (8,))
    extra.temperature = nn.Parameter(torch.ones(()))  # a parameter the closed form would leave without a gradient
    assert fused_ppo_gradient(extra) is None


@pytest.mark.parametrize("env", ["gym:CartPole-v1", "gym:Pendulum-v1"])
def test_training_with_the_closed_form_follows_autograd(tmp_path, env):
    # Same seed, same random streams: the two runs differ only by float rounding in the
    # gradients, so after 4 iterations (16 Adam steps) the weights still agree closely.
    config = make_config(PPOConfig, env=env, num_envs=2, num_steps=32, total_steps=2 * 32 * 4, num_minibatches=2, ppo_epochs=2,
                         hidden_dims=(16, 16), entropy_coef=0.01, value_clip_coef=0.2, tensorboard=False, eval_episodes=0,
                         log_dir=tmp_path / "fused")
    fused = train_ppo(config, echo=lambda *a, **k: None)
    plain = train_ppo(dataclasses.replace(config, fused_update=False, log_dir=tmp_path / "autograd"), echo=lambda *a, **k: None)
    fused_weights, plain_weights = (load_checkpoint_file(run.run_dir)["models"]["agent"] for run in (fused, plain))
    for name, weight in plain_weights.items():
        assert torch.allclose(fused_weights[name], weight, atol=2e-5, rtol=1e-4), name
    # ... and they are two different computations (not the autograd path twice)
    assert any(not torch.equal(fused_weights[name], weight) for name, weight in plain_weights.items())


@pytest.mark.parametrize("max_norm", [0.05, 1e3])
def test_clip_grad_norm_is_torchs_clip_grad_norm(max_norm):
    from pglab.algos.onpolicy import clip_grad_norm

    torch.manual_seed(0)
    ours, theirs = ([nn.Parameter(torch.zeros(shape)) for shape in ((4, 3), (3,), (2, 5))] for _ in range(2))
    for a, b in zip(ours, theirs):
        a.grad = torch.randn(a.shape) * 3
        b.grad = a.grad.clone()
    norm = clip_grad_norm(ours, max_norm)
    expected = nn.utils.clip_grad_norm_(theirs, max_norm)
    assert torch.equal(norm, expected)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs))
    clipped = float(torch.linalg.vector_norm(torch.stack([a.grad.norm() for a in ours])))
    assert clipped == pytest.approx(min(max_norm, float(expected)), rel=1e-5)  # clipped only when over max_norm
