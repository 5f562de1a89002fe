"""The closed-form PPO gradient (pglab.losses.ppo_fused) against autograd through
ppo_clip_loss: every parameter's gradient and every metric, for both heads, both
activations, 1-3 hidden layers, value clipping and the entropy bonus, in float32 and
float64; where it declines (gSDE, LayerNorm, other activations, other dtypes); and a short
training run with and without it. tests/test_policy_update.py holds the two paths together
for every update hyperparameter."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from pglab.algos.policy_update import build_policy_update
from pglab.algos.ppo import train_ppo
from pglab.configs.ppo import PPOConfig
from pglab.losses.ppo import ppo_clip_loss
from pglab.losses.ppo_fused import ClosedFormPPO, network_declined
from pglab.nets.actor_critic import CategoricalActorCritic, GaussianActorCritic, GSDEActorCritic
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.logger import read_metrics


def _minibatch(net, obs_dim, batch, generator):
    """``(obs, actions, old_log_probs, advantages, returns, old_values)`` in ``net``'s dtype."""
    dtype = next(net.parameters()).dtype

    def normal(*shape):
        return torch.randn(shape, generator=generator, dtype=dtype)

    obs = normal(batch, obs_dim)
    if isinstance(net, CategoricalActorCritic):
        actions = torch.randint(0, net.num_actions, (batch,), generator=generator)
    else:
        actions = normal(batch, net.action_dim)
    with torch.no_grad():
        log_probs, _, values = net.evaluate_actions(obs, actions)
    # old policy / values a little away from the current ones, so that some ratios lie
    # outside the clip range and some value moves outside the value clip range
    old_log_probs = log_probs + 0.4 * normal(batch)
    old_values = values + 0.4 * normal(batch)
    advantages = normal(batch)
    returns = values + normal(batch)
    return obs, actions, old_log_probs, advantages, returns, old_values


@pytest.mark.parametrize("head", ["categorical", "gaussian"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("hidden_dims", [(7,), (16, 12), (8, 8, 8)])
@pytest.mark.parametrize(("value_clip_coef", "entropy_coef"), [(None, 0.0), (0.2, 0.05)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closed_form_gradient_equals_autograd(head, activation, hidden_dims, value_clip_coef, entropy_coef, dtype):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    if head == "categorical":
        net = CategoricalActorCritic(5, 3, hidden_dims, activation=activation)
    else:
        net = GaussianActorCritic(5, 2, hidden_dims, activation=activation, log_std_init=-0.3)
    net = net.to(dtype)
    obs, actions, old_log_probs, advantages, returns, old_values = _minibatch(net, 5, 96, generator)
    tolerance = 2e-6 if dtype == torch.float32 else 1e-12
    settings = dict(clip_coef=0.2, value_clip_coef=value_clip_coef, value_coef=0.7, entropy_coef=entropy_coef)

    log_probs, entropy, values = net.evaluate_actions(obs, actions)
    reference = ppo_clip_loss(
        log_probs, old_log_probs, advantages, values, returns, entropy=entropy, old_values=old_values, **settings
    )
    net.zero_grad(set_to_none=True)
    reference["loss"].backward()
    expected = {name: p.grad.clone() for name, p in net.named_parameters()}
    assert 0 < float(reference["stats/clipfrac"]) < 1  # both branches of the clipped surrogate are exercised

    net.zero_grad(set_to_none=True)
    closed_form = ClosedFormPPO(net)
    terms = closed_form.gradient(obs, actions, old_log_probs, advantages, returns, old_values, **settings)
    settings.pop("value_clip_coef")
    metrics = closed_form.summarize([terms], **settings)
    for name, p in net.named_parameters():
        scale = expected[name].abs().max().clamp_min(1e-6)
        assert p.grad.dtype == dtype
        assert torch.allclose(p.grad, expected[name], atol=tolerance * float(scale), rtol=50 * tolerance), name
    for key, value in reference.items():
        assert torch.allclose(metrics[key].to(dtype), value.detach(), atol=tolerance, rtol=5 * tolerance), key
        assert not metrics[key].requires_grad


def test_closed_form_declines_networks_it_does_not_cover():
    assert network_declined(GSDEActorCritic(3, 1, (8,))).startswith("use_sde=True:")
    from pglab.nets.nature_cnn import NatureCNNActorCritic

    assert network_declined(NatureCNNActorCritic((4, 84, 84), 3)) == (
        "NatureCNNActorCritic: the closed form models CategoricalActorCritic, GaussianActorCritic"
    )
    for activation in ("elu", "silu", "gelu"):
        net = CategoricalActorCritic(3, 2, (8,), activation=activation)
        assert network_declined(net) == f"activation={activation}: the closed form models tanh, relu"
        with pytest.raises(ValueError, match=f"activation={activation}"):
            ClosedFormPPO(net)
    layer_norm = CategoricalActorCritic(3, 2, (8,))
    layer_norm.actor = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 2))
    assert network_declined(layer_norm).startswith("actor:")
    extra = GaussianActorCritic(3, 1, (8,))
    extra.temperature = nn.Parameter(torch.ones(()))  # a parameter the closed form would leave without a gradient
    assert "a parameter outside" in network_declined(extra)
    assert network_declined(CategoricalActorCritic(3, 2, (8,)).to(torch.bfloat16)).startswith("dtype")
    assert network_declined(CategoricalActorCritic(3, 2, (8,)), torch.device("cuda")).startswith("device=cuda")
    for covered in (CategoricalActorCritic(3, 2, (8,), activation="relu"), GaussianActorCritic(3, 2, (8, 8))):
        assert network_declined(covered) is None and network_declined(covered.double()) is None


@pytest.mark.parametrize("env", ["gym:CartPole-v1", "gym:Pendulum-v1"])
def test_training_with_the_closed_form_follows_autograd(tmp_path, env):
    # Same seed, same random streams: the two runs differ only by float rounding in the
    # gradients, so after 4 iterations (16 Adam steps) the weights still agree closely.
    config = make_config(
        PPOConfig,
        env=env,
        num_envs=2,
        num_steps=32,
        total_steps=2 * 32 * 4,
        num_minibatches=2,
        ppo_epochs=2,
        hidden_dims=(16, 16),
        entropy_coef=0.01,
        value_clip_coef=0.2,
        lr=3e-3,
        clip_coef=0.05,
        tensorboard=False,
        eval_episodes=0,
        log_dir=tmp_path / "fused",
    )
    fused = train_ppo(config, echo=lambda *a, **k: None)
    plain = train_ppo(
        dataclasses.replace(config, fused_update=False, log_dir=tmp_path / "autograd"), echo=lambda *a, **k: None
    )
    fused_weights, plain_weights = (load_checkpoint_file(run.run_dir)["models"]["agent"] for run in (fused, plain))
    for name, weight in plain_weights.items():
        assert torch.allclose(fused_weights[name], weight, atol=2e-5, rtol=1e-4), name
    # ... and they are two different computations (not the autograd path twice)
    assert any(not torch.equal(fused_weights[name], weight) for name, weight in plain_weights.items())
    # the logged loss metrics: made once per update from the kept terms, the same numbers
    # as the mean over minibatches of ppo_clip_loss's (equal-size minibatches here)
    fused_log, plain_log = read_metrics(fused.run_dir), read_metrics(plain.run_dir)
    for column in (
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "stats/entropy",
        "stats/approx_kl",
        "stats/clipfrac",
        "stats/grad_norm",
    ):
        assert np.allclose(fused_log[column], plain_log[column], rtol=2e-3, atol=1e-6), column
    if env == "gym:Pendulum-v1":  # (CartPole's policy moves too little in 4 iterations to clip)
        assert fused_log["stats/clipfrac"].max() > 0


def test_summarize_over_minibatches_averages_the_minibatches():
    # Two minibatches of different sizes: the summary is the mean over minibatches of the
    # one-minibatch metrics (what ppo_clip_loss gives on each), as the autograd path logs.
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(3)
    settings = dict(clip_coef=0.2, value_clip_coef=0.3, value_coef=0.5, entropy_coef=0.01)
    for net in (CategoricalActorCritic(4, 3, (8,)), GaussianActorCritic(4, 2, (8,))):
        closed_form = ClosedFormPPO(net)
        terms, singles, sizes = [], [], (40, 24)
        for size in sizes:
            minibatch = _minibatch(net, 4, size, generator)
            terms.append(closed_form.gradient(*minibatch, **settings))
            log_probs, entropy, values = net.evaluate_actions(minibatch[0], minibatch[1])
            singles.append(
                ppo_clip_loss(
                    log_probs,
                    minibatch[2],
                    minibatch[3],
                    values,
                    minibatch[4],
                    entropy=entropy,
                    old_values=minibatch[5],
                    **settings,
                )
            )
            with torch.no_grad():  # as an optimiser step would: the next minibatch sees other weights
                for p in net.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=generator))
        summary = closed_form.summarize(terms, clip_coef=0.2, value_coef=0.5, entropy_coef=0.01)
        for key, value in summary.items():
            expected = sum(single[key].detach() for single in singles) / len(singles)
            assert torch.allclose(value, expected, atol=1e-6, rtol=1e-5), (type(net).__name__, key)


def _update_both_ways(net, obs, actions, batch, hp, *, lr):
    """The update of ``build_policy_update`` on copies of ``net``, by autograd and by the
    closed form, from the same minibatch stream: ``{"autograd" | "closed_form": (model, metrics)}``."""
    import copy

    results = {}
    for name in ("autograd", "closed_form"):
        model = copy.deepcopy(net)
        config = dataclasses.replace(PPOConfig(), lr=lr, update=hp, fused_update=name == "closed_form")
        update = build_policy_update(model, config, torch.device("cpu"))
        assert (update.path == "closed form") == (name == "closed_form")
        results[name] = (model, update(obs, actions, batch, hp, torch.Generator().manual_seed(1)))
    return results


@pytest.mark.parametrize("target_kl", [None, 1e-12, 3e-2, 1e-1])
def test_onpolicy_update_with_the_closed_form_stops_at_the_same_epoch(target_kl):
    # The KL early stop reads the epoch's KL from the kept terms: the same epoch count as
    # the autograd path, and the same weights after it.
    from pglab.algos.onpolicy import OnPolicyBatch
    from pglab.configs.ppo import OnPolicyHyperparams

    torch.manual_seed(0)
    net = CategoricalActorCritic(4, 3, (16,))
    obs, actions, old_log_probs, advantages, returns, old_values = _minibatch(
        net, 4, 128, torch.Generator().manual_seed(5)
    )
    with torch.no_grad():  # on-policy: the first epoch's ratios are 1
        old_log_probs, _, old_values = net.evaluate_actions(obs, actions)
    batch = OnPolicyBatch(old_log_probs, advantages, returns, old_values)
    hp = OnPolicyHyperparams(ppo_epochs=8, num_minibatches=4, target_kl=target_kl, entropy_coef=0.01)
    results = _update_both_ways(net, obs, actions, batch, hp, lr=3e-2)
    epochs = {name: int(metrics["stats/epochs"]) for name, (_, metrics) in results.items()}
    assert epochs["autograd"] == epochs["closed_form"]
    assert epochs["autograd"] == {None: 8, 1e-12: 1, 3e-2: 2, 1e-1: 8}[target_kl]
    for (name, a), b in zip(
        results["autograd"][0].named_parameters(), results["closed_form"][0].parameters(), strict=False
    ):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), name
    for key, value in results["autograd"][1].items():
        assert torch.allclose(results["closed_form"][1][key], value, atol=1e-5, rtol=1e-3), key


def test_blas_threads_caps_numpys_blas_inside_the_block():
    from threadpoolctl import threadpool_info

    from pglab.losses.ppo_fused import blas_threads

    with blas_threads(1):
        blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
        assert blas and all(info["num_threads"] == 1 for info in blas)


@pytest.mark.parametrize("head", ["categorical", "gaussian"])
@pytest.mark.parametrize("num_minibatches", [1, 3])
@pytest.mark.parametrize("normalize_advantages", [True, False])
def test_onpolicy_update_with_the_closed_form_follows_autograd_whole_batch_or_not(
    head, num_minibatches, normalize_advantages
):
    # One minibatch per epoch takes the rollout's arrays as they are (no gather, the
    # normalised advantages made once); three take gathered, separately normalised rows.
    # Either way: autograd's weights and metrics after several epochs.
    from pglab.algos.onpolicy import OnPolicyBatch
    from pglab.configs.ppo import OnPolicyHyperparams

    torch.manual_seed(2)
    net = CategoricalActorCritic(3, 4, (16, 16)) if head == "categorical" else GaussianActorCritic(3, 2, (16, 16))
    obs, actions, old_log_probs, advantages, returns, old_values = _minibatch(
        net, 3, 96, torch.Generator().manual_seed(6)
    )
    advantages = 3.0 * advantages + 1.5  # far from normalised, so skipping the normalisation would show
    batch = OnPolicyBatch(old_log_probs, advantages, returns, old_values)
    hp = OnPolicyHyperparams(
        ppo_epochs=5, num_minibatches=num_minibatches, entropy_coef=0.01, normalize_advantages=normalize_advantages
    )
    results = _update_both_ways(net, obs, actions, batch, hp, lr=1e-2)
    for (name, a), b in zip(
        results["autograd"][0].named_parameters(), results["closed_form"][0].parameters(), strict=False
    ):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), name
    for key, value in results["autograd"][1].items():
        assert torch.allclose(results["closed_form"][1][key], value, atol=1e-5, rtol=1e-3), key


@pytest.mark.parametrize("max_norm", [0.05, 100.0, 1e3])  # the norm is ~67: clipped, and twice not
def test_the_closed_forms_clip_is_clip_grad_norm(max_norm):
    # The closed form's clip scales the flat gradient in NumPy: the arithmetic of
    # torch.nn.utils.clip_grad_norm_ (clipped only above max_norm; a NaN spreads everywhere)
    from pglab.losses.ppo_fused import clip_flat_gradient

    for poisoned in (False, True):
        grad = 3.0 * torch.randn(500, generator=torch.Generator().manual_seed(0))
        if poisoned:
            grad[7] = float("nan")
        reference = nn.Parameter(torch.zeros(500))
        reference.grad = grad.clone()
        expected = nn.utils.clip_grad_norm_([reference], max_norm)
        norm = clip_flat_gradient(grad.numpy(), max_norm)
        if poisoned:
            assert np.isnan(norm) and torch.isnan(grad).all() and torch.isnan(reference.grad).all()
            continue
        assert norm == pytest.approx(float(expected), rel=1e-6)
        torch.testing.assert_close(grad, reference.grad, rtol=1e-6, atol=1e-7)
        assert float(grad.norm()) == pytest.approx(min(max_norm, float(expected)), rel=1e-5)
