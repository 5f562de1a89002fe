"""PixelActorCriticCNN: one convolutional torso, a policy head and a value head.

Input: uint8 frame stacks ``[N, K, H, W]`` (pixels in 0..255, scaled to [0, 1] inside).
Output: ``(logits float32 [N, A], values float32 [N])``.

Two torsos, picked from the image size (or forced with ``torso=``):

- ``"small"`` (images < 64 px, e.g. PixelGoalEnv's 16x16): conv3x3(16) -> conv3x3/2(32)
  -> linear(hidden=128). Keeps full resolution in the first layer because a sprite can be a
  2x2 patch that a stride-4 layer would alias.
- ``"nature"`` (Atari's 84x84): the DQN torso of Mnih et al. (2015), conv8x8/4(32) ->
  conv4x4/2(64) -> conv3x3/1(64) -> linear(512), as in CleanRL's Atari PPO/A2C.

Orthogonal initialisation (gain sqrt 2 in the torso, 0.01 for the policy head so the
initial policy is near-uniform, 1 for the value head), as in CleanRL / SB3.

:class:`StreamActorCritic` is stream-AC(lambda)'s network (Elsayed et al. 2024, trained by
:mod:`pglab.algos.stream_ac`): separate actor and critic torsos with LayerNorm (no affine)
before every LeakyReLU, sparse initialisation, and running per-pixel observation
statistics. It lives here, beside the batched trainer's network, so that the agent loader
(:mod:`pglab.algos.a2c`) rebuilds either without importing the other trainer.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from pglab.contracts import check_tensor


def _init(layer: nn.Conv2d | nn.Linear, gain: float) -> nn.Conv2d | nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None  # every layer here has a bias
    nn.init.zeros_(layer.bias)
    return layer


def _conv_out(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class PixelActorCriticCNN(nn.Module):
    """Actor-critic network on pixel stacks.

    Args:
        in_channels: stacked frames ``K``.
        height, width: image size in pixels.
        num_actions: ``A``.
        hidden: width of the fully connected layer (default 128 small / 512 nature).
        torso: ``"small"``, ``"nature"`` or ``"auto"`` (nature for images >= 64 px).
    """

    def __init__(
        self,
        in_channels: int,
        height: int,
        width: int,
        num_actions: int,
        *,
        hidden: int | None = None,
        torso: Literal["auto", "small", "nature"] = "auto",
    ):
        super().__init__()
        if torso == "auto":
            torso = "nature" if min(height, width) >= 64 else "small"
        self.in_channels, self.height, self.width, self.num_actions = in_channels, height, width, num_actions
        self.torso_name = torso
        gain = math.sqrt(2.0)
        if torso == "small":
            hidden = hidden or 128
            h, w = _conv_out(_conv_out(height, 3, 1, 1), 3, 2, 1), _conv_out(_conv_out(width, 3, 1, 1), 3, 2, 1)
            self.torso = nn.Sequential(
                _init(nn.Conv2d(in_channels, 16, 3, stride=1, padding=1), gain),
                nn.ReLU(),
                _init(nn.Conv2d(16, 32, 3, stride=2, padding=1), gain),
                nn.ReLU(),
                nn.Flatten(),
                _init(nn.Linear(32 * h * w, hidden), gain),
                nn.ReLU(),
            )
        elif torso == "nature":
            hidden = hidden or 512
            h = _conv_out(_conv_out(_conv_out(height, 8, 4), 4, 2), 3, 1)
            w = _conv_out(_conv_out(_conv_out(width, 8, 4), 4, 2), 3, 1)
            if h < 1 or w < 1:
                raise ValueError(f"PixelActorCriticCNN: images {height}x{width} are too small for the nature torso")
            self.torso = nn.Sequential(
                _init(nn.Conv2d(in_channels, 32, 8, stride=4), gain),
                nn.ReLU(),
                _init(nn.Conv2d(32, 64, 4, stride=2), gain),
                nn.ReLU(),
                _init(nn.Conv2d(64, 64, 3, stride=1), gain),
                nn.ReLU(),
                nn.Flatten(),
                _init(nn.Linear(64 * h * w, hidden), gain),
                nn.ReLU(),
            )
        else:
            raise ValueError(f"PixelActorCriticCNN: torso={torso!r}, expected 'auto', 'small' or 'nature'")
        self.hidden = hidden
        self.policy_head = _init(nn.Linear(hidden, num_actions), 0.01)
        self.value_head = _init(nn.Linear(hidden, 1), 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 ``[N, K, H, W]`` -> ``(logits float32 [N, A], values float32 [N])``."""
        check_tensor(
            "obs", obs, (None, self.in_channels, self.height, self.width), torch.uint8, where="PixelActorCriticCNN"
        )
        features = self.torso(obs.to(torch.float32) * (1.0 / 255.0))
        return self.policy_head(features), self.value_head(features).squeeze(1)

    def architecture(self) -> dict[str, int | str]:
        """Constructor arguments, stored in checkpoints to rebuild the network."""
        return {
            "in_channels": self.in_channels,
            "height": self.height,
            "width": self.width,
            "num_actions": self.num_actions,
            "hidden": self.hidden,
            "torso": self.torso_name,
        }


def sparse_init_(weight: torch.Tensor, sparsity: float, generator: torch.Generator | None = None) -> None:
    """LeCun-uniform weights with ``round(sparsity * fan_in)`` inputs of every output unit zeroed."""
    fan_out = weight.shape[0]
    fan_in = weight[0].numel()
    bound = math.sqrt(1.0 / fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)
        zeros = int(round(sparsity * fan_in))
        flat = weight.view(fan_out, fan_in)
        for unit in range(fan_out):  # init only; per-unit so every unit keeps the same count
            flat[unit, torch.randperm(fan_in, generator=generator)[:zeros]] = 0.0


class _Torso(nn.Module):
    def __init__(self, in_channels: int, height: int, width: int, hidden: int, sparsity: float):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        h, w = (height - 1) // 2 + 1, (width - 1) // 2 + 1
        self.norm1 = nn.LayerNorm([16, height, width], elementwise_affine=False)
        self.norm2 = nn.LayerNorm([32, h, w], elementwise_affine=False)
        self.dense = nn.Linear(32 * h * w, hidden)
        self.norm3 = nn.LayerNorm(hidden, elementwise_affine=False)
        for layer in (self.conv1, self.conv2, self.dense):
            sparse_init_(layer.weight, sparsity)
            assert layer.bias is not None  # every layer here has a bias
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.leaky_relu
        x = act(self.norm1(self.conv1(x)))
        x = act(self.norm2(self.conv2(x)))
        return act(self.norm3(self.dense(x.flatten(1))))


class StreamActorCritic(nn.Module):
    """Separate actor and critic (sparse init, LayerNorm) with running observation
    statistics. ``forward(obs uint8 [N, K, H, W]) -> (logits [N, A], values [N])``."""

    # running per-pixel statistics of the observations (buffers: they travel with state_dict)
    obs_count: torch.Tensor
    obs_mean: torch.Tensor
    obs_m2: torch.Tensor

    def __init__(
        self,
        in_channels: int,
        height: int,
        width: int,
        num_actions: int,
        hidden: int = 128,
        sparsity: float = 0.9,
        *,
        torso: type[nn.Module] | None = None,
    ):
        super().__init__()
        self.arch = {
            "in_channels": in_channels,
            "height": height,
            "width": width,
            "num_actions": num_actions,
            "hidden": hidden,
            "sparsity": sparsity,
        }
        torso = torso or _Torso  # a subclass passes its own (the Nature stack for 84x84 frames)
        self.actor_torso = torso(in_channels, height, width, hidden, sparsity)
        self.critic_torso = torso(in_channels, height, width, hidden, sparsity)
        self.policy_head = nn.Linear(hidden, num_actions)
        self.value_head = nn.Linear(hidden, 1)
        for layer in (self.policy_head, self.value_head):
            sparse_init_(layer.weight, sparsity)
            nn.init.zeros_(layer.bias)
        shape = (in_channels, height, width)
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("obs_mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("obs_m2", torch.zeros(shape, dtype=torch.float64))

    def architecture(self) -> dict[str, Any]:
        """Constructor arguments, stored in checkpoints to rebuild the network."""
        return dict(self.arch)

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor_torso.parameters(), *self.policy_head.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        return [*self.critic_torso.parameters(), *self.value_head.parameters()]

    @torch.no_grad()
    def observe(self, obs: torch.Tensor) -> None:
        """Welford update of the per-pixel statistics with a batch ``[N, K, H, W]``."""
        for sample in obs.to(torch.float64) / 255.0:
            self.obs_count += 1
            delta = sample - self.obs_mean
            self.obs_mean += delta / self.obs_count
            self.obs_m2 += delta * (sample - self.obs_mean)

    def normalise(self, obs: torch.Tensor) -> torch.Tensor:
        check_tensor("obs", obs, (None, *self.obs_mean.shape), torch.uint8, where="StreamActorCritic")
        variance = self.obs_m2 / self.obs_count.clamp_min(2.0) if self.obs_count > 1 else torch.ones_like(self.obs_m2)
        scaled = (obs.to(torch.float64) / 255.0 - self.obs_mean) / (variance + 1e-8).sqrt()
        return scaled.to(torch.float32)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.normalise(obs)
        return self.policy_head(self.actor_torso(x)), self.value_head(self.critic_torso(x)).squeeze(1)
