"""build_policy_update: the closed-form PPO update never diverges from autograd's.

For every field of OnPolicyHyperparams (enumerated with dataclasses.fields, so a new field
without a case here fails), the field is set off its default and either

* the closed form declares it does not model that value: the update takes autograd and
  its path names the field; or
* the closed-form update and the autograd update, run from the same float64 network on
  the same samples and minibatch stream, end at the same weights and metrics (to 1e-10),
  and the value reaches the update (the result differs from the default's), except for
  the fields the trainer alone reads (gamma, gae_lambda, clip_schedule), where the update
  is exactly the default's.

Then the same for the network options a PPO config has (activation, gSDE) and the
trainer's one line saying which path a run takes.
"""

import copy
import dataclasses

import pytest
import torch

from pglab.algos.onpolicy import OnPolicyBatch
from pglab.algos.policy_update import build_policy_update
from pglab.configs.ppo import ACTIVATIONS, OnPolicyHyperparams, PPOConfig
from pglab.losses import ppo_fused
from pglab.nets.actor_critic import CategoricalActorCritic, GaussianActorCritic, build_actor_critic

CPU = torch.device("cpu")

NON_DEFAULT = {
    "algo": "vpg_gae",
    "gamma": 0.9,
    "gae_lambda": 0.5,
    "ppo_epochs": 2,
    "num_minibatches": 3,
    "minibatch_size": 16,
    "clip_coef": 0.1,
    "clip_schedule": "linear",
    "value_clip_coef": 0.1,
    "value_coef": 1.3,
    "entropy_coef": 0.1,
    "max_grad_norm": 0.05,
    "target_kl": 0.05,
    "kl_stop": "minibatch",
    "normalize_advantages": False,
}
"""A value off the default for every field of OnPolicyHyperparams."""

TOGETHER_WITH = {"kl_stop": {"target_kl": 0.05}}
"""Fields that act only together with another one set: the case sets both, and its
baseline is the other one alone (so the field itself must change the update)."""

READ_BY_THE_TRAINER = {"gamma", "gae_lambda", "clip_schedule"}
"""Fields the update does not read (advantages, returns and the scheduled clip_coef come
in already made): its result must not change with them."""

FIELDS = [field.name for field in dataclasses.fields(OnPolicyHyperparams)]


def test_the_table_has_a_case_for_every_update_hyperparameter():
    assert set(NON_DEFAULT) == set(FIELDS)
    for name, value in NON_DEFAULT.items():
        assert value != getattr(OnPolicyHyperparams(), name), name
    # ... and the closed form's declaration names every field too (a field it does not
    # name is not modelled: every value of it takes autograd)
    assert set(ppo_fused.HYPERPARAMETERS) | set(ppo_fused.HYPERPARAMETER_VALUES) == set(FIELDS)


def _net(head: str) -> torch.nn.Module:
    torch.manual_seed(0)
    net = CategoricalActorCritic(5, 3, (16, 12)) if head == "categorical" else GaussianActorCritic(5, 2, (16, 12))
    return net.double()


def _rollout(net: torch.nn.Module, size: int = 60):
    """Flat samples whose old log-probs and old values are off the current ones (so that
    ratios leave the clip range and value clipping binds), advantages far from standardised."""
    generator = torch.Generator().manual_seed(1)

    def normal(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    obs = normal(size, 5)
    if isinstance(net, CategoricalActorCritic):
        actions = torch.randint(0, net.num_actions, (size,), generator=generator)
    else:
        actions = normal(size, net.action_dim)
    with torch.no_grad():
        log_probs, _, values = net.evaluate_actions(obs, actions)
    batch = OnPolicyBatch(
        log_probs + 0.4 * normal(size), 1.5 + 3.0 * normal(size), values + normal(size), values + 0.4 * normal(size)
    )
    return obs, actions, batch


def _update(net: torch.nn.Module, hp: OnPolicyHyperparams, fused: bool):
    """One update of a copy of ``net`` through ``build_policy_update``: ``(path, weights, metrics)``."""
    model = copy.deepcopy(net)
    obs, actions, batch = _rollout(model)
    config = dataclasses.replace(PPOConfig(), lr=3e-3, update=hp, fused_update=fused)
    update = build_policy_update(model, config, CPU)
    metrics = update(obs, actions, batch, hp, torch.Generator().manual_seed(2))
    return update.path, {name: p.detach().clone() for name, p in model.named_parameters()}, metrics


def _assert_same(a, b, atol: float) -> None:
    (_, weights_a, metrics_a), (_, weights_b, metrics_b) = a, b
    for name, weight in weights_a.items():
        torch.testing.assert_close(weights_b[name], weight, rtol=0, atol=atol, msg=lambda m, name=name: f"{name}: {m}")
    assert metrics_a.keys() == metrics_b.keys()
    for key, value in metrics_a.items():  # the metrics are averaged in float32
        torch.testing.assert_close(metrics_b[key], value, rtol=1e-6, atol=1e-7, msg=lambda m, key=key: f"{key}: {m}")


def _distance(a, b) -> float:
    return max(float((a[1][name] - b[1][name]).abs().max()) for name in a[1])


@pytest.mark.parametrize("head", ["categorical", "gaussian"])
@pytest.mark.parametrize("field", FIELDS)
def test_every_update_hyperparameter_is_modelled_by_the_closed_form_or_routed_to_autograd(head, field):
    net = _net(head)
    baseline = OnPolicyHyperparams(**TOGETHER_WITH.get(field, {}))
    hp = dataclasses.replace(baseline, **{field: NON_DEFAULT[field]})
    default = _update(net, baseline, fused=True)
    assert default[0] == "closed form"
    reason = ppo_fused.declines(net, hp, CPU)
    if reason is not None:
        assert reason.startswith(f"{field}={NON_DEFAULT[field]}:"), reason
        path, _, metrics = _update(net, hp, fused=True)
        assert path == f"autograd ({reason})"
        assert torch.isfinite(torch.stack(list(metrics.values()))).all()
        return
    closed_form, autograd = _update(net, hp, fused=True), _update(net, hp, fused=False)
    assert closed_form[0] == "closed form" and autograd[0] == "autograd (fused_update off)"
    _assert_same(autograd, closed_form, atol=1e-10)
    if field in READ_BY_THE_TRAINER:
        _assert_same(default, closed_form, atol=0.0)
    else:  # the value reaches the update, so a closed form that ignored it would differ
        assert _distance(default, closed_form) > 1e-6, field


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation_is_modelled_by_the_closed_form_or_routed_to_autograd(activation):
    torch.manual_seed(0)
    net = build_actor_critic(5, "discrete", 3, (16,), activation=activation).double()
    hp = OnPolicyHyperparams()
    path = build_policy_update(copy.deepcopy(net), PPOConfig(activation=activation), CPU).path
    if activation not in ppo_fused.ACTIVATIONS:
        assert path == f"autograd (activation={activation}: the closed form models tanh, relu)"
        return
    assert path == "closed form"
    _assert_same(_update(net, hp, fused=False), _update(net, hp, fused=True), atol=1e-10)


def test_gsde_and_switched_off_closed_form_take_autograd():
    gsde = build_actor_critic(5, "continuous", 2, (8,), use_sde=True)
    path = build_policy_update(gsde, PPOConfig(use_sde=True), CPU).path
    reason = "use_sde=True: the closed form models a state-independent log_std, gSDE's noise is state-dependent"
    assert path == f"autograd ({reason})"
    off = build_policy_update(build_actor_critic(5, "discrete", 3), PPOConfig(fused_update=False), CPU)
    assert off.path == "autograd (fused_update off)"


def test_a_closed_form_update_refuses_hyperparameters_it_does_not_model():
    net = _net("categorical")
    obs, actions, batch = _rollout(net)
    update = build_policy_update(net, PPOConfig(), CPU)
    with pytest.raises(ValueError, match="algo=reinforce_raw: the closed form models ppo"):
        update(obs, actions, batch, OnPolicyHyperparams(algo="reinforce_raw"), None)


def test_the_optimiser_steps_one_flat_parameter_that_the_network_sees():
    net = _net("gaussian")
    update = build_policy_update(net, PPOConfig(), CPU)
    (flat,) = update.optimizer.param_groups[0]["params"]
    assert flat.numel() == sum(p.numel() for p in net.parameters())
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    obs, actions, batch = _rollout(net)
    update(obs, actions, batch, OnPolicyHyperparams(), torch.Generator().manual_seed(0))
    # every parameter moved, in place: the module's tensors are views of the flat one
    assert all(not torch.equal(before[name], p) for name, p in net.named_parameters())
    with torch.no_grad():
        flat.zero_()
    assert all(float(p.detach().abs().sum()) == 0.0 for p in net.parameters())


@pytest.mark.parametrize(("algo", "expected"), [("ppo", "closed form"), ("vpg_gae", "autograd (algo=vpg_gae:")])
def test_the_trainer_says_which_update_it_runs(tmp_path, algo, expected):
    from pglab.algos.ppo import train_ppo
    from pglab.run.config import make_config

    lines = []
    config = make_config(
        PPOConfig,
        env="gym:CartPole-v1",
        algo=algo,
        num_envs=2,
        num_steps=16,
        total_steps=32,
        hidden_dims=(8,),
        tensorboard=False,
        eval_episodes=0,
        log_dir=tmp_path / "run",
    )
    train_ppo(config, echo=lambda *args, **kwargs: lines.append(" ".join(map(str, args))))
    updates = [line for line in lines if line.startswith("update: ")]
    assert len(updates) == 1 and updates[0].startswith(f"update: {expected}"), updates


def test_a_zero_grad_between_updates_changes_nothing():
    # A callback may call optimizer.zero_grad() (the flat gradient becomes None): the
    # closed form then writes into a fresh gradient tensor, not into a stale one.
    results = []
    for zero_grad in (False, True):
        net = _net("categorical")
        update = build_policy_update(net, PPOConfig(), CPU)
        obs, actions, batch = _rollout(net)
        generator = torch.Generator().manual_seed(3)
        for _ in range(2):
            update(obs, actions, batch, OnPolicyHyperparams(), generator)
            if zero_grad:
                update.optimizer.zero_grad()
                assert update.parameters.flat.grad is None
        results.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    assert torch.equal(results[0], results[1])
