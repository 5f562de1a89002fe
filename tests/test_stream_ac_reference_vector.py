"""``pglab train a2c --algo stream-ac --env gym:CartPole-v1 --max-episode-steps N`` against a
transcription of the reference code (``stream_ac_discrete.py``, ``time_wrapper.py``,
``sparse_init.py``, ``normalization_wrappers.py`` and ``optim.py`` of
mohmdelsayed/streaming-drl; shared pieces in ``stream_reference.py``): its MLP with
LayerNorm, its initialisation, its wrappers in the order of its ``main`` (TimeLimit,
ScaleReward, NormalizeObservation, AddTimeInfo) and its update. The reference's wrappers
see the raw CartPole observations, rewards and terminations of pglab's learner (pglab's
time feature stripped: the reference adds its own) and decide truncations themselves;
the weights must agree after every transition, episode ends and time-limit truncations
included."""

import math

import numpy as np
import pytest
import torch
from stream_reference import SPARSITY, Lockstep, NormalizeObservation, ReferenceStreamAC, ScaleReward, layer_norm
from stream_reference import sparse_init as reference_sparse_init
from torch import nn
from torch.nn import functional as F

from pglab.algos.stream_ac import StreamACLearner
from pglab.configs.a2c import A2CTrainConfig
from pglab.nets.stream import sparse_init_
from pglab.run.config import parse_flags
from pglab.run.seeding import seed_everything

CPU = torch.device("cpu")
LIMIT = 16  # --max-episode-steps: short, so that random play reaches it
TRANSITIONS = 64
HIDDEN = 32  # StreamAC's hidden_size
# The reference keeps float32 observation statistics (CartPole's float32 observations), pglab
# float64: the weights differ by rounding (at most 1e-6 here), the traces (up to 15) by up to 2e-4.
WEIGHT_ATOL, TRACE_ATOL = 1e-5, 1e-3


class Actor(nn.Module):
    """stream_ac_discrete.Actor."""

    def __init__(self, n_obs, n_actions, hidden_size):
        super().__init__()
        self.fc_layer = nn.Linear(n_obs, hidden_size)
        self.hidden_layer = nn.Linear(hidden_size, hidden_size)
        self.fc_pi = nn.Linear(hidden_size, n_actions)

    def forward(self, x):
        x = F.leaky_relu(layer_norm(self.fc_layer(x)))
        x = F.leaky_relu(layer_norm(self.hidden_layer(x)))
        return self.fc_pi(x)


class Critic(nn.Module):
    """stream_ac_discrete.Critic."""

    def __init__(self, n_obs, hidden_size):
        super().__init__()
        self.fc_layer = nn.Linear(n_obs, hidden_size)
        self.hidden_layer = nn.Linear(hidden_size, hidden_size)
        self.linear_layer = nn.Linear(hidden_size, 1)

    def forward(self, x):
        x = F.leaky_relu(layer_norm(self.fc_layer(x)))
        x = F.leaky_relu(layer_norm(self.hidden_layer(x)))
        return self.linear_layer(x)


class TimeLimit:
    """Gymnasium's TimeLimit (``gym.make(..., max_episode_steps=LIMIT)``) around a replay of
    pglab's raw transitions; ``load`` sets what the next step or reset returns."""

    def __init__(self, limit):
        self.limit, self.elapsed, self.next = limit, 0, None

    def load(self, obs, reward, terminated, reset_obs):
        self.next = (obs, reward, terminated, reset_obs)

    def step(self):
        obs, reward, terminated, _ = self.next
        self.elapsed += 1
        return obs, reward, terminated, self.elapsed >= self.limit

    def reset(self):
        self.elapsed = 0
        return self.next[3]


class AddTimeInfo:
    """time_wrapper.AddTimeInfo around the env (its time limit: the env's max_episode_steps)."""

    def __init__(self, time_limit):
        self.time_limit, self.epi_time = time_limit, -0.5

    def step(self, obs):
        obs = np.concatenate((obs, np.array([self.epi_time])))
        self.epi_time += 1.0 / self.time_limit
        return obs

    def reset(self, obs):
        self.epi_time = -0.5
        return np.concatenate((obs, np.array([self.epi_time])))


class ReferenceEnv:
    """stream_ac_discrete.main's env: TimeLimit, ScaleReward, NormalizeObservation, AddTimeInfo
    (FlattenObservation and RecordEpisodeStatistics change nothing the agent sees)."""

    def __init__(self, limit, obs_shape):
        self.inner, self.scale, self.normalize = TimeLimit(limit), ScaleReward(), NormalizeObservation(obs_shape)
        self.time = AddTimeInfo(limit)

    def step(self):
        obs, reward, terminated, truncated = self.inner.step()
        reward = self.scale(reward, terminated, truncated)
        return self.time.step(self.normalize(obs)), reward, terminated, truncated

    def reset(self):
        return self.time.reset(self.normalize(self.inner.reset()))


def reference_agent(model) -> ReferenceStreamAC:
    """StreamAC(n_obs=5, n_actions=2) holding copies of pglab's weights."""
    actor, critic = Actor(5, 2, HIDDEN), Critic(5, HIDDEN)
    pairs = (
        (actor.fc_layer, model.actor_torso[0]),
        (actor.hidden_layer, model.actor_torso[3]),
        (actor.fc_pi, model.policy_head.logits),
        (critic.fc_layer, model.critic_torso[0]),
        (critic.hidden_layer, model.critic_torso[3]),
        (critic.linear_layer, model.value_head),
    )
    for theirs, mine in pairs:
        theirs.load_state_dict(mine.state_dict())
    return ReferenceStreamAC(actor, critic, inputs=lambda x: x)


def raw(obs: torch.Tensor) -> np.ndarray:
    """CartPole's own observation: pglab's [1, 5] row without its time feature."""
    return obs[0, :4].numpy()


@pytest.fixture(scope="module")
def lockstep():
    """Both agents through TRANSITIONS transitions; the weights compared after each. The
    learner's config comes from ``pglab train a2c``'s flags."""
    flags = ["--algo", "stream-ac", "--env", "gym:CartPole-v1", "--max-episode-steps", str(LIMIT)]
    config = parse_flags(A2CTrainConfig, [*flags, "--seed", "3", "--device", "cpu"], prog="pglab train a2c").config
    seed_everything(config.seed)
    learner = StreamACLearner(config, CPU, {"opt_steps": 0})
    reference, env = reference_agent(learner.model), ReferenceEnv(LIMIT, (4,))
    log = {"pglab": [], "reference": [], "rewards": []}
    env.inner.load(None, None, None, raw(learner.obs.value))
    s = env.reset()

    def feed(action, result):
        nonlocal s
        next_obs, reward, done, trunc, info = result
        finished = bool(done | trunc)
        env.inner.load(raw(info["final_obs"] if finished else next_obs), float(reward), bool(done), raw(next_obs))
        s_prime, r, terminated, truncated = env.step()
        log["pglab"].append((bool(done), bool(trunc)))
        log["reference"].append((terminated, truncated))
        log["rewards"].append(r)
        reference.update_params(s, action, r, s_prime, terminated or truncated)
        s = env.reset() if terminated or truncated else s_prime

    run = Lockstep(learner, feed)
    initial = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(TRANSITIONS):
        learner.transition()
        run.assert_agree(reference, WEIGHT_ATOL)
    return learner, reference, run, log, initial


def test_cartpole_updates_as_the_reference_code(lockstep):
    learner, reference, run, log, initial = lockstep
    ends = log["pglab"]
    assert ends == log["reference"]  # pglab's truncations come where the reference's TimeLimit puts them
    # the run holds a termination and a truncation, each followed by more transitions
    assert any(done for done, _ in ends[:-1]) and any(trunc for _, trunc in ends[:-1])
    assert run.scaled == pytest.approx(log["rewards"], rel=1e-9)
    moved = [float((p.detach() - q).abs().max()) for p, q in zip(learner.model.parameters(), initial, strict=True)]
    assert max(moved) > 1e-3
    run.assert_traces_agree(reference, TRACE_ATOL)


def test_cartpole_network_initialises_as_the_reference_code(lockstep):
    """Every layer of pglab's network: sparse_init's draws (bit for bit from one torch
    seed), ceil(0.9 fan_in) zeros per unit, zero biases; the MLP's shape is the reference's."""
    model = lockstep[0].model
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    shapes = [tuple(layer.weight.shape) for layer in layers]
    assert sorted(shapes) == sorted(
        [(HIDDEN, 5), (HIDDEN, HIDDEN), (2, HIDDEN), (HIDDEN, 5), (HIDDEN, HIDDEN), (1, HIDDEN)]
    )
    assert [type(m).__name__ for m in model.actor_torso] == ["Linear", "LayerNorm", "LeakyReLU"] * 2
    for shape in set(shapes):
        torch.manual_seed(11)
        expected = reference_sparse_init(torch.empty(shape), SPARSITY)
        torch.manual_seed(11)
        got = torch.empty(shape)
        sparse_init_(got, SPARSITY)
        assert torch.equal(got, expected)
    initial = dict(zip((name for name, _ in model.named_parameters()), lockstep[4], strict=True))
    for name, layer in model.named_modules():
        if isinstance(layer, nn.Linear):
            weight, fan_in = initial[f"{name}.weight"], layer.weight.shape[1]
            zeros = torch.full((weight.shape[0],), math.ceil(SPARSITY * fan_in))
            assert torch.equal((weight == 0).sum(dim=1), zeros)
            assert float(weight.abs().max()) <= math.sqrt(1.0 / fan_in)
            assert not initial[f"{name}.bias"].any()
