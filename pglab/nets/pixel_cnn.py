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

Stream-AC(lambda)'s networks are in :mod:`pglab.nets.stream`.
"""

from __future__ import annotations

import math

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
        torso: str = "auto",
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
