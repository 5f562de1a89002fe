"""``pglab train a2c --algo stream-ac --env minatar:breakout`` with no other flags against a
transcription of the reference code (``stream_ac_discrete_minatar.py``, ``optim.py`` and
``normalization_wrappers.py`` of mohmdelsayed/streaming-drl), with the reference's own
defaults written here: its network on unbatched channel-last boards, its observation and
reward statistics in NumPy, its ObGD descending the negated objectives. Both see the same
boards, actions and rewards from pglab's learner; the weights must agree after every
transition, episode ends included."""

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Categorical
from torch.nn import functional as F

from pglab.algos.stream_ac import StreamACLearner
from pglab.configs.a2c import A2CTrainConfig
from pglab.run.seeding import seed_everything

CPU = torch.device("cpu")
# stream_ac_discrete_minatar.py's argparse defaults
GAMMA, LAMBDA, LR, ENTROPY, KAPPA_POLICY, KAPPA_VALUE, HIDDEN = 0.99, 0.8, 1.0, 0.01, 3.0, 2.0, 128


class SampleMeanStd:
    """normalization_wrappers.SampleMeanStd."""

    def __init__(self, shape=()):
        self.mean, self.var, self.p, self.count = np.zeros(shape), np.ones(shape), np.ones(shape), 0

    def update(self, x):
        if self.count == 0:
            self.mean, self.p = x, np.zeros_like(x)
        count = self.count + 1
        mean = self.mean + (x - self.mean) / count
        self.p = self.p + (x - self.mean) * (x - mean)
        self.var = 1 if count < 2 else self.p / (count - 1)
        self.mean, self.count = mean, count


class ReferenceWrappers:
    """NormalizeObservation and ScaleReward (gamma 0.99, epsilon 1e-8) on one board [10, 10, C]."""

    def __init__(self, shape):
        self.obs_stats, self.reward_stats, self.trace = SampleMeanStd(shape), SampleMeanStd(), np.zeros(1)

    def observation(self, board):
        self.obs_stats.update(board * 1.0)
        return (board - self.obs_stats.mean) / np.sqrt(self.obs_stats.var + 1e-8)

    def reward(self, reward, term):
        self.trace = self.trace * GAMMA * (1 - term) + np.array([reward])
        self.reward_stats.update(self.trace)
        return (np.array([reward]) / np.sqrt(self.reward_stats.var + 1e-8))[0]


class ObGD:
    """optim.ObGD over a list of parameters (the reference's torch.optim.Optimizer, one group)."""

    def __init__(self, params, kappa):
        self.params, self.kappa = list(params), kappa
        self.traces = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, delta, reset):
        z_sum = 0.0
        for e, p in zip(self.traces, self.params, strict=True):
            e.mul_(GAMMA * LAMBDA).add_(p.grad, alpha=1.0)
            z_sum += e.abs().sum().item()
        dot_product = max(abs(delta), 1.0) * z_sum * LR * self.kappa
        step_size = LR / dot_product if dot_product > 1 else LR
        for e, p in zip(self.traces, self.params, strict=True):
            p.add_(delta * e, alpha=-step_size)
            if reset:
                e.zero_()
            p.grad = None


class LayerNormalization(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, x.size())


def reference_network(torso: nn.Sequential, head: nn.Linear) -> nn.Sequential:
    """The reference's network_policy / network_value, holding copies of pglab's weights."""
    conv, dense = copy.deepcopy(torso[0]), copy.deepcopy(torso[4])
    assert isinstance(conv, nn.Conv2d) and conv.out_channels == 16 and dense.out_features == HIDDEN
    return nn.Sequential(
        conv,
        LayerNormalization(),
        nn.LeakyReLU(),
        nn.Flatten(start_dim=0),
        dense,
        LayerNormalization(),
        nn.LeakyReLU(),
        copy.deepcopy(head),
    )


class ReferenceStreamAC:
    """stream_ac_discrete_minatar.StreamAC: pi, v and update_params."""

    def __init__(self, model):
        self.policy = reference_network(model.actor_torso, model.policy_head.logits)
        self.value = reference_network(model.critic_torso, model.value_head)
        self.optimizer_policy = ObGD(self.policy.parameters(), KAPPA_POLICY)
        self.optimizer_value = ObGD(self.value.parameters(), KAPPA_VALUE)

    def pi(self, x):
        return F.softmax(self.policy(torch.moveaxis(x, -1, 0)), dim=-1)

    def v(self, x):
        return self.value(torch.moveaxis(x, -1, 0))

    def update_params(self, s, a, r, s_prime, done):
        s, s_prime = torch.tensor(s, dtype=torch.float), torch.tensor(s_prime, dtype=torch.float)
        v_s, v_prime = self.v(s), self.v(s_prime)
        delta = torch.tensor(r) + GAMMA * v_prime * (0.0 if done else 1.0) - v_s
        dist = Categorical(self.pi(s))
        log_prob_pi = -(dist.log_prob(torch.tensor(a))).sum()
        entropy_pi = -ENTROPY * dist.entropy().sum() * torch.sign(delta).item()
        (-v_s).backward()
        (log_prob_pi + entropy_pi).backward()
        self.optimizer_policy.step(delta.item(), reset=done)
        self.optimizer_value.step(delta.item(), reset=done)


def board(obs: torch.Tensor) -> np.ndarray:
    """pglab's bool [1, C, 10, 10] board as the package's channel-last [10, 10, C]."""
    return obs[0].permute(1, 2, 0).numpy()


def test_minatar_defaults_update_as_the_reference_code():
    config = A2CTrainConfig(algo="stream-ac", env="minatar:breakout", device="cpu", seed=4)
    seed_everything(config.seed)
    learner = StreamACLearner(config, CPU, {"opt_steps": 0})
    reference = ReferenceStreamAC(learner.model)
    wrappers = ReferenceWrappers(board(learner.obs.value).shape)
    s = wrappers.observation(board(learner.obs.value))
    sample, step, actions, ends = learner.model.policy_head.sample, learner.env.step, [], []
    rewards: list[bool] = []
    scaled: dict[str, list[float]] = {"pglab": [], "reference": []}
    scale = learner.scaler.__call__
    learner.scaler = lambda reward, finished: scaled["pglab"].append(scale(reward, finished)) or scaled["pglab"][-1]

    def sampling(params, generator):
        actions.append(sample(params, generator))
        return actions[-1]

    def stepping(env_action):
        nonlocal s
        result = step(env_action)
        next_obs, reward, done, trunc, info = result
        finished = bool(done | trunc)
        ends.append(finished)
        rewards.append(float(reward) != 0.0)
        s_prime = wrappers.observation(board(info["final_obs"] if finished else next_obs))
        r = wrappers.reward(float(reward), finished)
        scaled["reference"].append(r)
        reference.update_params(s, int(actions[-1]), r, s_prime, finished)
        s = wrappers.observation(board(next_obs)) if finished else s_prime
        return result

    learner.model.policy_head.sample, learner.env.step = sampling, stepping
    initial = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(34):
        learner.transition()
        for mine, theirs in (
            (learner.model.actor_parameters(), reference.policy),
            (learner.model.critic_parameters(), reference.value),
        ):
            for got, expected in zip(mine, theirs.parameters(), strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
    # the script holds rewards before and after an episode end (the reward trace restarts)
    # and ends between transitions (the traces restart)
    assert rewards.index(True) < ends.index(True, rewards.index(True)) < len(rewards) - 1 - rewards[::-1].index(True)
    assert not ends[-1]
    assert scaled["pglab"] == pytest.approx(scaled["reference"], rel=1e-9)
    moved = [float((p.detach() - q).abs().max()) for p, q in zip(learner.model.parameters(), initial, strict=True)]
    assert max(moved) > 1e-3
    for mine, theirs in ((learner.actor, reference.optimizer_policy), (learner.critic, reference.optimizer_value)):
        for got, expected in zip(mine.traces, theirs.traces, strict=True):
            torch.testing.assert_close(got, -expected, rtol=1e-4, atol=1e-6)  # pglab traces the ascended objective
