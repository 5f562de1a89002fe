"""``pglab train a2c --algo stream-ac --env minatar:breakout`` with no other flags against a
transcription of the reference code (``stream_ac_discrete_minatar.py``, ``optim.py`` and
``normalization_wrappers.py`` of mohmdelsayed/streaming-drl; shared pieces in
``stream_reference.py``), with the reference's own defaults: its network on unbatched
channel-last boards, its observation and reward statistics in NumPy, its ObGD descending the
negated objectives. Both see the same boards, actions and rewards from pglab's learner; the
weights must agree after every transition, episode ends included."""

import copy

import pytest
import torch
from stream_reference import Lockstep, NormalizeObservation, ReferenceStreamAC, ScaleReward, layer_norm
from torch import nn

from pglab.algos.stream_ac import StreamACLearner
from pglab.configs.a2c import A2CTrainConfig
from pglab.run.seeding import seed_everything

CPU = torch.device("cpu")
HIDDEN = 128  # stream_ac_discrete_minatar.py's hidden_size


class LayerNormalization(nn.Module):
    def forward(self, x):
        return layer_norm(x)


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


def reference_agent(model) -> ReferenceStreamAC:
    """stream_ac_discrete_minatar.StreamAC: its networks take channel-last boards."""
    policy = reference_network(model.actor_torso, model.policy_head.logits)
    value = reference_network(model.critic_torso, model.value_head)
    return ReferenceStreamAC(policy, value, inputs=lambda x: torch.moveaxis(x, -1, 0))


def board(obs: torch.Tensor):
    """pglab's bool [1, C, 10, 10] board as the package's channel-last [10, 10, C]."""
    return obs[0].permute(1, 2, 0).numpy()


def test_minatar_defaults_update_as_the_reference_code():
    config = A2CTrainConfig(algo="stream-ac", env="minatar:breakout", device="cpu", seed=4)
    seed_everything(config.seed)
    learner = StreamACLearner(config, CPU, {"opt_steps": 0})
    reference = reference_agent(learner.model)
    normalize, scale = NormalizeObservation(board(learner.obs.value).shape), ScaleReward()
    s = normalize(board(learner.obs.value))
    ends, rewards, scaled = [], [], []

    def feed(action, result):
        nonlocal s
        next_obs, reward, done, trunc, info = result
        finished = bool(done | trunc)
        ends.append(finished)
        rewards.append(float(reward) != 0.0)
        s_prime = normalize(board(info["final_obs"] if finished else next_obs))
        r = scale(float(reward), bool(done), bool(trunc))
        scaled.append(r)
        reference.update_params(s, action, r, s_prime, finished)
        s = normalize(board(next_obs)) if finished else s_prime

    run = Lockstep(learner, feed)
    initial = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(34):
        learner.transition()
        run.assert_agree(reference)
    # the script holds rewards before and after an episode end (the reward trace restarts)
    # and ends between transitions (the traces restart)
    assert rewards.index(True) < ends.index(True, rewards.index(True)) < len(rewards) - 1 - rewards[::-1].index(True)
    assert not ends[-1]
    assert run.scaled == pytest.approx(scaled, rel=1e-9)
    moved = [float((p.detach() - q).abs().max()) for p, q in zip(learner.model.parameters(), initial, strict=True)]
    assert max(moved) > 1e-3
    run.assert_traces_agree(reference)
