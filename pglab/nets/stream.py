"""Stream-AC(lambda)'s networks, as in the code of Elsayed, Vasan & Mahmood (2024),
"Streaming Deep Reinforcement Learning Finally Works" (trained by :mod:`pglab.algos.stream_ac`).

Separate actor and critic, each a torso followed by its head. Every linear and conv layer
gets *sparse initialisation* (:func:`sparse_init_`) and a zero bias; every hidden layer is
followed by LayerNorm without affine parameters (over all of a sample's features, as the
reference's ``F.layer_norm(x, x.size())`` on unbatched inputs) and LeakyReLU (slope 0.01).

==========  ======================================================  ========================
torso       layers (then LayerNorm + LeakyReLU after each)          default ``hidden``
==========  ======================================================  ========================
``mlp``     linear(hidden) -> linear(hidden)                        32 (discrete actions),
            (vector observations: classic control, MuJoCo)          128 (continuous)
``minatar`` conv 16 x 3x3 stride 1 -> linear(hidden)                128
            (the reference's MinAtar network; 10x10 boards)
``atari``   conv 32 x 8x8 stride 5 -> conv 64 x 4x4 stride 3        256
            -> conv 64 x 3x3 stride 2 -> linear(hidden)
            (the reference's Atari network; 84x84 frames: 256 features)
``small``   conv 16 x 3x3 pad 1 -> conv 32 x 3x3 stride 2 pad 1     128
            -> linear(hidden) (PixelGoalEnv's small boards)
``nature``  conv 32 x 8x8 stride 4 -> conv 64 x 4x4 stride 2        512 (batched A2C)
            -> conv 64 x 3x3 stride 1 -> linear(hidden)
            (Mnih et al. 2015; the batched A2C's Atari torso)
==========  ======================================================  ========================

The conv layouts are shared with the batched A2C's network (:mod:`pglab.nets.pixel_cnn`),
which finishes each layer its own way (:data:`Block`).

Heads: discrete actions take ``softmax(linear(h))`` (:class:`CategoricalHead`);
continuous actions a diagonal Gaussian with mean ``linear(h)`` and standard deviation
``softplus(linear(h))`` (:class:`GaussianHead`), whose samples are clipped to the action
bounds on the way to the environment only (the reference's ``ClipAction``); the critic is
``linear(h) -> 1``.

Inputs are normalised online (:meth:`StreamActorCritic.observe`): per input element, the
running mean and the sample variance (``m2 / (n - 1)``, 1 before two samples) of every
observation seen, ``x_hat = (x - mean) / sqrt(var + 1e-8)``, as the reference's
``NormalizeObservation``. Pixels enter as their values 0..255, boards as 0/1; the last
``raw_inputs`` elements of a vector observation (the time feature of
:mod:`pglab.envs.gym_adapter`) pass through unnormalised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from pglab.contracts import check_tensor
from pglab.errors import ConfigError

ObsKind = Literal["pixels", "board", "vector"]
TORSOS = ("mlp", "minatar", "atari", "small")
# (out_channels, kernel, stride, padding) of each torso's conv layers
CONV_LAYERS: dict[str, tuple[tuple[int, int, int, int], ...]] = {
    "minatar": ((16, 3, 1, 0),),
    "atari": ((32, 8, 5, 0), (64, 4, 3, 0), (64, 3, 2, 0)),
    "small": ((16, 3, 1, 1), (32, 3, 2, 1)),
    "nature": ((32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0)),
}
DEFAULT_HIDDEN = {"minatar": 128, "atari": 256, "small": 128, "nature": 512}
MLP_HIDDEN = {"discrete": 32, "gaussian": 128}
OBS_EPS = 1e-8


def sample_actions(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """int64 ``[N]`` from float ``[N, A]`` logits by the Gumbel-max trick:
    ``argmax(logits + G)``, ``G = -log(-log U)``, with ``U`` from ``generator``."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-20, 1.0)))
    return torch.argmax(logits.detach() + gumbel, dim=1)


def sparse_init_(weight: torch.Tensor, sparsity: float, generator: torch.Generator | None = None) -> None:
    """The reference's ``sparse_init``: weights uniform in ``+-sqrt(1 / fan_in)``, then
    ``ceil(sparsity * fan_in)`` inputs of every output unit (row, or output channel) set to 0."""
    fan_out, fan_in = weight.shape[0], weight[0].numel()
    bound = math.sqrt(1.0 / fan_in)
    zeros = int(math.ceil(sparsity * fan_in))
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)
        flat = weight.view(fan_out, fan_in)
        for unit in range(fan_out):  # init only; per unit so every unit keeps the same count
            flat[unit, torch.randperm(fan_in, generator=generator)[:zeros]] = 0.0


def _sparse(layer: nn.Linear | nn.Conv2d, sparsity: float) -> nn.Linear | nn.Conv2d:
    sparse_init_(layer.weight, sparsity)
    assert layer.bias is not None  # every layer here has a bias
    nn.init.zeros_(layer.bias)
    return layer


def _normed(layer: nn.Module, shape: list[int]) -> list[nn.Module]:
    return [layer, nn.LayerNorm(shape, elementwise_affine=False), nn.LeakyReLU()]


Block = Callable[[nn.Linear | nn.Conv2d, list[int]], list[nn.Module]]
"""``block(layer, output_shape)`` -> the modules that follow a freshly built layer of a conv torso
(its initialisation included), e.g. ``[layer, LayerNorm, LeakyReLU]``"""


def stream_block(sparsity: float) -> Block:
    """The reference's layer: sparse init, then a LayerNorm without affine parameters and a LeakyReLU."""
    return lambda layer, shape: _normed(_sparse(layer, sparsity), shape)


def build_torso(
    name: str, obs_shape: tuple[int, ...], hidden: int, sparsity: float, block: Block | None = None
) -> nn.Sequential:
    """The torso ``name`` (module docstring) for inputs ``[N, *obs_shape]``; output ``[N, hidden]``.
    A conv torso's layers are finished by ``block`` (default: :func:`stream_block`)."""
    if name == "mlp":
        (width,) = obs_shape
        first, second = nn.Linear(width, hidden), nn.Linear(hidden, hidden)
        return nn.Sequential(
            *_normed(_sparse(first, sparsity), [hidden]), *_normed(_sparse(second, sparsity), [hidden])
        )
    block = block or stream_block(sparsity)
    channels, height, width = obs_shape
    layers: list[nn.Module] = []
    for out, kernel, stride, padding in CONV_LAYERS[name]:
        height, width = (height + 2 * padding - kernel) // stride + 1, (width + 2 * padding - kernel) // stride + 1
        if min(height, width) < 1:
            raise ConfigError("torso", name, f"needs larger images than {list(obs_shape)}")
        conv = nn.Conv2d(channels, out, kernel, stride=stride, padding=padding)
        layers += block(conv, [out, height, width])
        channels = out
    dense = nn.Linear(channels * height * width, hidden)
    return nn.Sequential(*layers, nn.Flatten(), *block(dense, [hidden]))


class CategoricalHead(nn.Module):
    """``pi(.|s) = softmax(W h + b)``; parameters ``(logits [N, A],)``."""

    def __init__(self, hidden: int, num_actions: int, sparsity: float):
        super().__init__()
        self.logits = _sparse(nn.Linear(hidden, num_actions), sparsity)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.logits(features),)

    def sample(self, params: tuple[torch.Tensor, ...], generator: torch.Generator) -> torch.Tensor:
        return sample_actions(params[0], generator)

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return params[0].argmax(dim=1)

    def log_prob(self, params: tuple[torch.Tensor, ...], actions: torch.Tensor) -> torch.Tensor:
        log_pi = torch.log_softmax(params[0], dim=1)
        return log_pi.gather(1, actions.long().unsqueeze(1)).squeeze(1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        log_pi = torch.log_softmax(params[0], dim=1)
        return -(log_pi.exp() * log_pi).sum(dim=1)


class GaussianHead(nn.Module):
    """``pi(.|s) = N(mu, diag(sigma^2))``, ``mu = W_mu h + b_mu``, ``sigma = softplus(W_s h + b_s)``;
    parameters ``(mu [N, D], sigma [N, D])``. Log-probabilities and entropies sum over the D
    action dimensions."""

    def __init__(self, hidden: int, action_dim: int, sparsity: float):
        super().__init__()
        self.mean = _sparse(nn.Linear(hidden, action_dim), sparsity)
        self.std = _sparse(nn.Linear(hidden, action_dim), sparsity)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.mean(features), F.softplus(self.std(features))

    def sample(self, params: tuple[torch.Tensor, ...], generator: torch.Generator) -> torch.Tensor:
        mean, std = (p.detach() for p in params)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + std * noise

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return params[0]

    def _normal(self, params: tuple[torch.Tensor, ...]) -> torch.distributions.Normal:
        return torch.distributions.Normal(params[0], params[1], validate_args=False)

    def log_prob(self, params: tuple[torch.Tensor, ...], actions: torch.Tensor) -> torch.Tensor:
        return self._normal(params).log_prob(actions).sum(dim=1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._normal(params).entropy().sum(dim=1)


class StreamActorCritic(nn.Module):
    """Separate actor and critic (module docstring) with running input statistics.

    ``forward(obs [N, *obs_shape]) -> (policy parameters, values [N])``; ``obs`` is uint8
    (pixels), bool or float32 (boards) or float32 (vectors). :meth:`architecture` holds the
    constructor arguments: ``StreamActorCritic(**arch)`` rebuilds the network.
    """

    # running statistics of the normalised inputs (buffers: they travel with state_dict)
    obs_count: torch.Tensor
    obs_mean: torch.Tensor
    obs_m2: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(
        self,
        obs_shape: list[int] | tuple[int, ...],
        obs_kind: ObsKind,
        torso: str,
        action: Literal["discrete", "gaussian"],
        num_actions: int,
        hidden: int,
        sparsity: float = 0.9,
        raw_inputs: int = 0,
        action_low: list[float] | None = None,
        action_high: list[float] | None = None,
    ):
        super().__init__()
        obs_shape = tuple(int(s) for s in obs_shape)
        self.arch: dict[str, Any] = {
            "obs_shape": list(obs_shape),
            "obs_kind": obs_kind,
            "torso": torso,
            "action": action,
            "num_actions": num_actions,
            "hidden": hidden,
            "sparsity": sparsity,
            "raw_inputs": raw_inputs,
            "action_low": action_low,
            "action_high": action_high,
        }
        self.obs_shape, self.obs_kind, self.raw_inputs = obs_shape, obs_kind, raw_inputs
        self.actor_torso = build_torso(torso, obs_shape, hidden, sparsity)
        self.critic_torso = build_torso(torso, obs_shape, hidden, sparsity)
        head = CategoricalHead if action == "discrete" else GaussianHead
        self.policy_head: CategoricalHead | GaussianHead = head(hidden, num_actions, sparsity)
        self.value_head = _sparse(nn.Linear(hidden, 1), sparsity)
        stats_shape = (obs_shape[0] - raw_inputs, *obs_shape[1:])
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("obs_mean", torch.zeros(stats_shape, dtype=torch.float64))
        self.register_buffer("obs_m2", torch.zeros(stats_shape, dtype=torch.float64))
        low = action_low if action_low is not None else [-math.inf] * num_actions
        high = action_high if action_high is not None else [math.inf] * num_actions
        self.register_buffer("action_low", torch.tensor(low, dtype=torch.float32), persistent=False)
        self.register_buffer("action_high", torch.tensor(high, dtype=torch.float32), persistent=False)

    def architecture(self) -> dict[str, Any]:
        """Constructor arguments, stored in checkpoints to rebuild the network."""
        return dict(self.arch)

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor_torso.parameters(), *self.policy_head.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        return [*self.critic_torso.parameters(), *self.value_head.parameters()]

    def _checked(self, obs: torch.Tensor) -> torch.Tensor:
        numbers = (torch.float32, torch.uint8, torch.int32, torch.int64)
        dtypes: dict[str, tuple[torch.dtype, ...]] = {
            "pixels": (torch.uint8,),
            "board": (torch.bool, torch.float32),
            "vector": numbers,
        }
        check_tensor("obs", obs, (None, *self.obs_shape), dtypes[self.obs_kind], where="StreamActorCritic")
        return obs.to(torch.float64)

    @torch.no_grad()
    def observe(self, obs: torch.Tensor) -> None:
        """Welford update of the input statistics with a batch ``[N, *obs_shape]``."""
        for sample in self._checked(obs)[:, : self.obs_mean.shape[0]]:
            self.obs_count += 1
            delta = sample - self.obs_mean
            self.obs_mean += delta / self.obs_count
            self.obs_m2 += delta * (sample - self.obs_mean)

    def normalise(self, obs: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / sqrt(var + 1e-8)`` per input element, float32 (raw inputs appended as they are)."""
        x = self._checked(obs)
        count = self.obs_count
        variance = self.obs_m2 / (count - 1) if count >= 2 else torch.ones_like(self.obs_m2)
        head = (x[:, : self.obs_mean.shape[0]] - self.obs_mean) / (variance + OBS_EPS).sqrt()
        return torch.cat([head, x[:, self.obs_mean.shape[0] :]], dim=1).to(torch.float32)

    def forward(self, obs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        x = self.normalise(obs)
        return self.policy_head(self.actor_torso(x)), self.value_head(self.critic_torso(x)).squeeze(1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic alone: ``V(s)`` ``[N]``."""
        return self.value_head(self.critic_torso(self.normalise(obs))).squeeze(1)

    def env_action(self, actions: torch.Tensor) -> torch.Tensor:
        """What the environment gets: int32 indices, or the Gaussian's sample clipped to the action bounds."""
        if isinstance(self.policy_head, CategoricalHead):
            return actions.to(torch.int32)
        return torch.clamp(actions, self.action_low, self.action_high)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool, generator: torch.Generator) -> torch.Tensor:
        """Environment actions: the most probable action (the Gaussian's mean) or a sample."""
        params, _ = self(obs)
        head = self.policy_head
        return self.env_action(head.mode(params) if deterministic else head.sample(params, generator))


def build_stream_actor_critic(
    obs_shape: tuple[int, ...],
    obs_dtype: torch.dtype,
    action_spec: Any,
    *,
    torso: str = "auto",
    hidden: int = 0,
    sparsity: float = 0.9,
    raw_inputs: int = 0,
) -> StreamActorCritic:
    """Stream-AC's network for an environment's observations (``obs_shape``, ``obs_dtype``)
    and :class:`pglab.envs.base.ActionSpec`. ``torso="auto"``: ``mlp`` for vectors,
    ``minatar`` for 10x10 boards, ``atari`` for images of 64 px and more, ``small`` below;
    ``hidden=0``: the torso's default (module docstring)."""
    kind: ObsKind = "vector" if len(obs_shape) == 1 else "pixels" if obs_dtype == torch.uint8 else "board"
    if len(obs_shape) not in (1, 3):
        raise ConfigError("env", list(obs_shape), "stream-ac takes vectors [D] or images [C, H, W]")
    if kind == "vector" and torso not in ("auto", "mlp"):
        raise ConfigError("torso", torso, "vector observations take the MLP: leave --torso auto")
    if kind == "vector":
        torso = "mlp"
    elif torso == "auto":
        torso = "minatar" if tuple(obs_shape[1:]) == (10, 10) else "atari" if min(obs_shape[1:]) >= 64 else "small"
    discrete = action_spec.kind == "discrete"
    if not discrete and len(action_spec.shape) != 1:
        raise ConfigError("env", f"actions of shape {list(action_spec.shape)}", "stream-ac takes action vectors [D]")
    action: Literal["discrete", "gaussian"] = "discrete" if discrete else "gaussian"
    width = hidden or (MLP_HIDDEN[action] if torso == "mlp" else DEFAULT_HIDDEN[torso])
    return StreamActorCritic(
        list(obs_shape),
        kind,
        torso,
        action,
        int(action_spec.num_actions) if discrete else math.prod(action_spec.shape),
        width,
        sparsity,
        raw_inputs,
        None if discrete else list(action_spec.low),
        None if discrete else list(action_spec.high),
    )
