"""The shared on-policy update on a two-armed bandit with a known better arm."""

import math

import pytest
import torch
from torch import nn

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, minibatch_indices, onpolicy_update
from pglab.errors import ConfigError


class Bandit(nn.Module):
    def __init__(self):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(2))
        self.value = nn.Parameter(torch.zeros(1))


def bandit_batch(model, n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        dist = torch.distributions.Categorical(logits=model.logits)
        actions = torch.multinomial(dist.probs, n, replacement=True, generator=g)
        rewards = torch.where(actions == 1, 1.0, 0.0) + 0.1 * torch.randn(n, generator=g)
        old_log_probs = dist.log_prob(actions)
        values = model.value.expand(n).clone()
    batch = OnPolicyBatch(old_log_probs, rewards - values, rewards, values)

    def evaluate(index):
        d = torch.distributions.Categorical(logits=model.logits)
        return d.log_prob(actions[index]), d.entropy().expand(len(index)), model.value.expand(len(index))

    return batch, evaluate


@pytest.mark.parametrize(("mode", "iterations"), [("reinforce_raw", 20), ("vpg_gae", 20), ("ppo", 4)])
def test_updates_learn_the_better_arm_and_its_value(mode, iterations):
    """Arm 1 pays 1, arm 0 pays 0 (+ noise). From pi(1) = 0.5, a few batches bring
    pi(1) above 0.95, and the critic (vpg_gae, ppo) to pi(1), the expected reward."""
    model = Bandit()
    hp = OnPolicyHyperparams(algo=mode, ppo_epochs=4, num_minibatches=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for k in range(iterations):
        batch, evaluate = bandit_batch(model, seed=k)
        metrics = onpolicy_update(
            evaluate, batch, model.parameters(), optimizer, hp, generator=torch.Generator().manual_seed(k)
        )
        assert metrics["stats/epochs"].item() == (4 if mode == "ppo" else 1)
    better = torch.softmax(model.logits, 0)[1].item()
    assert better > 0.95
    if mode == "reinforce_raw":
        assert model.value.item() == 0.0  # no critic: its parameter never moves
    else:
        assert abs(model.value.item() - better) < 0.15


def test_kl_early_stop_and_config_validation():
    """The batch is on-policy, so the first epoch of one full-batch minibatch has
    ratio 1 and KL exactly 0; the second epoch's KL is positive. A tiny target_kl
    therefore stops after exactly 2 epochs, with the parameters of a 2-epoch run."""
    runs = {}
    for name, epochs, target in (("stopped", 50, 1e-12), ("two", 2, None), ("full", 50, None), ("loose", 50, 10.0)):
        model = Bandit()
        batch, evaluate = bandit_batch(model)
        hp = OnPolicyHyperparams(ppo_epochs=epochs, num_minibatches=1, target_kl=target)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
        runs[name] = (model, onpolicy_update(evaluate, batch, model.parameters(), optimizer, hp))
    assert runs["stopped"][1]["stats/epochs"].item() == 2
    assert torch.equal(runs["stopped"][0].logits, runs["two"][0].logits)
    assert torch.equal(runs["stopped"][0].value, runs["two"][0].value)
    assert runs["full"][1]["stats/epochs"].item() == 50 and runs["loose"][1]["stats/epochs"].item() == 50
    with pytest.raises(ConfigError, match=r"algo: .*\(got 'a2c'\)"):
        OnPolicyHyperparams(algo="a2c")
    with pytest.raises(ConfigError, match=r"gae_lambda: .*\(got 1.5\)"):
        OnPolicyHyperparams(gae_lambda=1.5)


@pytest.mark.parametrize(("size", "num_minibatches"), [(10, 4), (256, 4), (7, 7), (5, 8), (131, 8)])
def test_every_sample_is_used_exactly_once_per_epoch(size, num_minibatches):
    """The evaluate callback records which samples each minibatch scores: over one epoch
    every index appears exactly once (the remainder is not dropped), there are
    min(num_minibatches, size) minibatches and their sizes differ by at most one."""
    seen: list[torch.Tensor] = []
    logits = nn.Parameter(torch.zeros(2))

    def evaluate(index):
        seen.append(index.clone())
        d = torch.distributions.Categorical(logits=logits)
        actions = index % 2
        return d.log_prob(actions), d.entropy().expand(len(index)), logits.sum().expand(len(index)) * 0.0

    advantages = torch.linspace(-1.0, 1.0, size)
    batch = OnPolicyBatch(torch.full((size,), -math.log(2.0)), advantages, advantages.clone(), torch.zeros(size))
    hp = OnPolicyHyperparams(ppo_epochs=1, num_minibatches=num_minibatches, normalize_advantages=False)
    onpolicy_update(
        evaluate, batch, [logits], torch.optim.SGD([logits], lr=0.01), hp, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(size))
    sizes = [len(index) for index in seen]
    assert len(sizes) == min(num_minibatches, size) and max(sizes) - min(sizes) <= 1


def test_minibatches_are_consecutive_slices_of_the_shuffled_order():
    """When the batch divides, the minibatches are exactly the equal slices of the
    permutation drawn from the generator: the minibatches (and so the results) of the
    update before the remainder fix."""
    order = torch.randperm(12, generator=torch.Generator().manual_seed(5))
    parts = minibatch_indices(order, 4)
    assert [p.tolist() for p in parts] == [order[i : i + 3].tolist() for i in range(0, 12, 3)]
    assert [len(p) for p in minibatch_indices(order, 5)] == [3, 3, 2, 2, 2]


@pytest.mark.parametrize(
    "options",
    [{"fused": True}, {"foreach": False}, {"foreach": True, "weight_decay": 0.1, "maximize": True}, {"amsgrad": True}],
)
def test_optimizer_step_equals_adams_own_step_bit_for_bit(options):
    """``optimizer_step``'s functional Adam on the optimiser's state: the same parameters and
    the same ``state_dict`` as ``Adam.step`` after every step (a changed lr included)."""
    from pglab.algos.onpolicy import optimizer_step

    generator = torch.Generator().manual_seed(0)
    start = torch.randn(300, generator=generator)
    grads = [torch.randn(300, generator=generator) for _ in range(6)]
    params = [nn.Parameter(start.clone()) for _ in range(2)]
    optimizers = [torch.optim.Adam([p], lr=1e-2, eps=1e-5, **options) for p in params]
    for t, grad in enumerate(grads):
        for param, optimizer, step in zip(params, optimizers, (optimizer_step, torch.optim.Adam.step), strict=True):
            optimizer.param_groups[0]["lr"] = 1e-2 / (t + 1)
            param.grad = grad.clone()
            step(optimizer)
        assert torch.equal(params[0], params[1]), t
        ours, theirs = (optimizer.state_dict() for optimizer in optimizers)
        assert ours["param_groups"] == theirs["param_groups"]
        for key, value in theirs["state"][0].items():
            assert torch.equal(ours["state"][0][key], value) and ours["state"][0][key].dtype == value.dtype, (t, key)
    assert not torch.equal(params[0], start)
