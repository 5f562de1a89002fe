"""The shared on-policy update on a two-armed bandit with a known better arm."""
import pytest
import torch
from torch import nn

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
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


@pytest.mark.parametrize("mode", ["reinforce_raw", "vpg_gae", "ppo"])
def test_one_update_raises_probability_of_better_arm(mode):
    model = Bandit()
    before = torch.softmax(model.logits, 0)[1].item()
    batch, evaluate = bandit_batch(model)
    hp = OnPolicyHyperparams(rl_mode=mode, ppo_epochs=4, num_minibatches=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    metrics = onpolicy_update(evaluate, batch, model.parameters(), optimizer, hp, generator=torch.Generator().manual_seed(0))
    assert torch.softmax(model.logits, 0)[1].item() > before + 0.01
    assert torch.isfinite(torch.stack(list(metrics.values()))).all()
    if mode == "ppo":
        assert metrics["stats/epochs"].item() == 4 and metrics["stats/clipfrac"].item() >= 0
    if mode == "vpg_gae":
        assert model.value.item() > 0  # the critic moved toward the mean reward


def test_kl_early_stop_and_config_validation():
    model = Bandit()
    batch, evaluate = bandit_batch(model)
    hp = OnPolicyHyperparams(ppo_epochs=50, num_minibatches=1, target_kl=1e-4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
    metrics = onpolicy_update(evaluate, batch, model.parameters(), optimizer, hp)
    assert metrics["stats/epochs"].item() < 50
    with pytest.raises(ConfigError, match="rl_mode='a2c'"):
        OnPolicyHyperparams(rl_mode="a2c")
    with pytest.raises(ConfigError, match="gae_lambda=1.5"):
        OnPolicyHyperparams(gae_lambda=1.5)
