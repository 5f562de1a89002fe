"""Transcriptions of the reference code of Elsayed, Vasan & Mahmood (2024)
(mohmdelsayed/streaming-drl) shared by the stream-AC comparisons
(``test_stream_ac_reference.py``: ``stream_ac_discrete_minatar.py``;
``test_stream_ac_reference_vector.py``: ``stream_ac_discrete.py``), and :class:`Lockstep`,
which runs pglab's learner and a reference agent on the same transitions.

The pieces shared by both scripts: ``normalization_wrappers.py``'s ``SampleMeanStd``,
``NormalizeObservation`` and ``ScaleReward``, ``optim.py``'s ``ObGD`` and ``StreamAC``'s
``update_params``, with the scripts' argparse defaults. NumPy arithmetic keeps the
reference's dtypes (float32 observations keep float32 statistics)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical
from torch.nn import functional as F

# the argparse defaults of stream_ac_discrete.py and stream_ac_discrete_minatar.py
GAMMA, LAMBDA, LR, ENTROPY, KAPPA_POLICY, KAPPA_VALUE = 0.99, 0.8, 1.0, 0.01, 3.0, 2.0
SPARSITY = 0.9  # initialize_weights


class SampleMeanStd:
    """normalization_wrappers.SampleMeanStd."""

    def __init__(self, shape=()):
        self.mean = np.zeros(shape, "float64")
        self.var = np.ones(shape, "float64")
        self.p = np.ones(shape, "float64")
        self.count = 0

    def update(self, x):
        if self.count == 0:
            self.mean = x
            self.p = np.zeros_like(x)
        sample, count = x * 1.0, self.count + 1
        mean = self.mean + (sample - self.mean) / count
        self.p = self.p + (sample - self.mean) * (sample - mean)
        self.var = 1 if count < 2 else self.p / (count - 1)
        self.mean, self.count = mean, count


class NormalizeObservation:
    """normalization_wrappers.NormalizeObservation (epsilon 1e-8) on one observation."""

    def __init__(self, shape):
        self.obs_stats = SampleMeanStd(shape)

    def __call__(self, obs):
        batch = np.array([obs])
        self.obs_stats.update(batch)
        return ((batch - self.obs_stats.mean) / np.sqrt(self.obs_stats.var + 1e-8))[0]


class ScaleReward:
    """normalization_wrappers.ScaleReward (gamma 0.99, epsilon 1e-8) on one reward."""

    def __init__(self):
        self.reward_stats, self.reward_trace = SampleMeanStd(), np.zeros(1)

    def __call__(self, reward, terminated, truncated):
        rews = np.array([reward])
        term = terminated or truncated
        self.reward_trace = self.reward_trace * GAMMA * (1 - term) + rews
        self.reward_stats.update(self.reward_trace)
        return (rews / np.sqrt(self.reward_stats.var + 1e-8))[0]


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


def sparse_init(tensor, sparsity):
    """sparse_init.sparse_init (type 'uniform')."""
    fan_out, fan_in = tensor.shape[0], tensor[0].numel()
    num_zeros = int(math.ceil(sparsity * fan_in))
    with torch.no_grad():
        tensor.uniform_(-math.sqrt(1.0 / fan_in), math.sqrt(1.0 / fan_in))
        for row in range(fan_out):
            zero_indices = torch.randperm(fan_in)[:num_zeros]
            tensor[row].reshape(fan_in)[zero_indices] = 0
    return tensor


def layer_norm(x):
    """The scripts' LayerNorm of an unbatched input: over all its elements, no affine parameters."""
    return F.layer_norm(x, x.size())


class ReferenceStreamAC:
    """StreamAC's pi, v and update_params (the same in both scripts) around the networks
    ``policy`` (action preferences) and ``value``; ``inputs`` turns the float32 state
    tensor into what the networks take."""

    def __init__(self, policy: nn.Module, value: nn.Module, inputs: Callable[[torch.Tensor], torch.Tensor]):
        self.policy_net, self.value_net, self.inputs = policy, value, inputs
        self.optimizer_policy = ObGD(policy.parameters(), KAPPA_POLICY)
        self.optimizer_value = ObGD(value.parameters(), KAPPA_VALUE)

    def pi(self, x):
        return F.softmax(self.policy_net(self.inputs(x)), dim=-1)

    def v(self, x):
        return self.value_net(self.inputs(x))

    def update_params(self, s, a, r, s_prime, done):
        done_mask = 0 if done else 1
        s, a, r = torch.tensor(np.array(s), dtype=torch.float), torch.tensor(np.array(a)), torch.tensor(np.array(r))
        s_prime = torch.tensor(np.array(s_prime), dtype=torch.float)
        v_s, v_prime = self.v(s), self.v(s_prime)
        delta = r + GAMMA * v_prime * torch.tensor(np.array(done_mask), dtype=torch.float) - v_s
        dist = Categorical(self.pi(s))
        log_prob_pi = -(dist.log_prob(a)).sum()
        entropy_pi = -ENTROPY * dist.entropy().sum() * torch.sign(delta).item()
        (-v_s).backward()
        (log_prob_pi + entropy_pi).backward()
        self.optimizer_policy.step(delta.item(), reset=done)
        self.optimizer_value.step(delta.item(), reset=done)


class Lockstep:
    """pglab's stream-AC learner (:class:`pglab.algos.stream_ac.StreamACLearner`) with a
    reference agent on the same transitions: the learner's sampled actions are kept in
    ``actions``, each of its environment steps goes on to ``feed(action, step_result)``
    (which steps the reference), and its scaled rewards are kept in ``scaled``."""

    def __init__(self, learner: Any, feed: Callable[[int, Any], None]):
        self.learner, self.actions, self.scaled = learner, [], []
        sample, step, scale = learner.model.policy_head.sample, learner.env.step, learner.scaler.__call__

        def sampling(params, generator):
            self.actions.append(sample(params, generator))
            return self.actions[-1]

        def stepping(env_action):
            result = step(env_action)
            feed(int(self.actions[-1]), result)
            return result

        def scaling(reward, finished):
            self.scaled.append(scale(reward, finished))
            return self.scaled[-1]

        learner.model.policy_head.sample, learner.env.step, learner.scaler = sampling, stepping, scaling

    def assert_agree(self, reference: ReferenceStreamAC, atol: float = 1e-6) -> None:
        """The networks' weights agree (pglab's in its actor/critic parameter order) to
        ``rtol = 1e-4`` and ``atol``."""
        model = self.learner.model
        for mine, theirs in (
            (model.actor_parameters(), reference.policy_net),
            (model.critic_parameters(), reference.value_net),
        ):
            for got, expected in zip(mine, theirs.parameters(), strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=atol)

    def assert_traces_agree(self, reference: ReferenceStreamAC, atol: float = 1e-6) -> None:
        """The eligibility traces agree likewise; pglab's are the reference's negated (pglab
        traces the ascended objective)."""
        pairs = ((self.learner.actor, reference.optimizer_policy), (self.learner.critic, reference.optimizer_value))
        for mine, theirs in pairs:
            for got, expected in zip(mine.traces, theirs.traces, strict=True):
                torch.testing.assert_close(got, -expected, rtol=1e-4, atol=atol)
