"""PixelActorCriticCNN: the batched A2C's network, one convolutional torso, a policy head and a value head.

Input: uint8 frame stacks ``[N, K, H, W]`` (pixels in 0..255, scaled to [0, 1] inside), or
boards ``[N, C, H, W]`` of bool or float32 0/1 (MinAtar; cast to float32 inside).
Output: ``(logits float32 [N, A], values float32 [N])``.

Torsos (their conv layouts are :data:`pglab.nets.stream.CONV_LAYERS`), picked from the input
(or forced with ``torso=``):

- ``"small"`` (images < 64 px, e.g. PixelGoalEnv's 16x16): conv3x3(16) -> conv3x3/2(32)
  -> linear(hidden=128). Keeps full resolution in the first layer because a sprite can be a
  2x2 patch that a stride-4 layer would alias.
- ``"nature"`` (Atari's 84x84): the DQN torso of Mnih et al. (2015), conv8x8/4(32) ->
  conv4x4/2(64) -> conv3x3/1(64) -> linear(512), as in CleanRL's Atari PPO/A2C.
- ``"minatar"`` (10x10 boards): conv3x3(16) -> linear(128), the MinAtar network.

Layers: orthogonal initialisation (gain sqrt 2 in the torso, 0.01 for the policy head so the
initial policy is near-uniform, 1 for the value head) and ReLU, as in CleanRL / SB3; or, with
``layer_norm=True``, stream-AC's layers (:func:`pglab.nets.stream.stream_block`): sparse
initialisation (``sparsity``) of every layer, heads included, and LayerNorm + LeakyReLU after
every hidden layer.

``obs_norm=True`` normalises the inputs with running statistics held as buffers (so they
travel with the weights): ``clip((x - mean) / sqrt(var + 1e-8), +-10)`` per input element,
where mean and (population) variance are merged batch by batch (:meth:`observe`, the formula
of :class:`pglab.envs.normalize.RunningMeanStd`) from ``mean 0, var 1, count 1e-4``.

Stream-AC(lambda)'s networks are in :mod:`pglab.nets.stream`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pglab.contracts import check_tensor
from pglab.envs.normalize import RunningMeanStd
from pglab.nets.stream import DEFAULT_HIDDEN, build_torso, sparse_init_, stream_block


def _init(layer: nn.Conv2d | nn.Linear, gain: float) -> nn.Conv2d | nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None  # every layer here has a bias
    nn.init.zeros_(layer.bias)
    return layer


OBS_EPS = 1e-8
OBS_CLIP = 10.0


def _orthogonal_block(layer: nn.Linear | nn.Conv2d, shape: list[int]) -> list[nn.Module]:
    return [_init(layer, math.sqrt(2.0)), nn.ReLU()]


def _head(layer: nn.Linear, gain: float, sparsity: float | None) -> nn.Linear:
    """Orthogonal with ``gain``, or sparse (``sparsity`` given; stream-AC's heads)."""
    if sparsity is None:
        _init(layer, gain)
        return layer
    sparse_init_(layer.weight, sparsity)
    nn.init.zeros_(layer.bias)
    return layer


class PixelActorCriticCNN(nn.Module):
    """Actor-critic network on pixel stacks or boards (module docstring).

    Args:
        in_channels: stacked frames ``K`` (or board channels ``C``).
        height, width: image size in pixels.
        num_actions: ``A``.
        hidden: width of the fully connected layer (default 128 small and minatar / 512 nature).
        torso: ``"small"``, ``"nature"``, ``"minatar"`` or ``"auto"`` (pixels: nature for
            images >= 64 px, else small; boards: minatar for 10x10, else small).
        obs_kind: ``"pixels"`` (uint8) or ``"board"`` (bool or float32 0/1).
        layer_norm: stream-AC's layers (sparse init, LayerNorm, LeakyReLU) instead of orthogonal + ReLU.
        sparsity: fraction of zeroed inputs per unit of the sparse initialisation (``layer_norm`` only).
        obs_norm: normalise the inputs with running statistics (:meth:`observe`).
    """

    obs_mean: torch.Tensor
    obs_var: torch.Tensor
    obs_count: torch.Tensor

    def __init__(
        self,
        in_channels: int,
        height: int,
        width: int,
        num_actions: int,
        *,
        hidden: int | None = None,
        torso: str = "auto",
        obs_kind: str = "pixels",
        layer_norm: bool = False,
        sparsity: float = 0.9,
        obs_norm: bool = False,
    ):
        super().__init__()
        if obs_kind not in ("pixels", "board"):
            raise ValueError(f"PixelActorCriticCNN: obs_kind={obs_kind!r}, expected 'pixels' or 'board'")
        if torso == "auto":
            large = min(height, width) >= 64
            torso = ("nature" if large else "small") if obs_kind == "pixels" else "minatar"
        if torso not in ("small", "nature", "minatar"):
            raise ValueError(f"PixelActorCriticCNN: torso={torso!r}, expected 'auto', 'small', 'nature' or 'minatar'")
        self.in_channels, self.height, self.width, self.num_actions = in_channels, height, width, num_actions
        self.torso_name, self.obs_kind = torso, obs_kind
        self.layer_norm, self.sparsity, self.obs_norm = layer_norm, sparsity, obs_norm
        self.hidden = hidden or DEFAULT_HIDDEN[torso]
        block = stream_block(sparsity) if layer_norm else _orthogonal_block
        self.torso = build_torso(torso, (in_channels, height, width), self.hidden, sparsity, block)
        head_sparsity = sparsity if layer_norm else None
        self.policy_head = _head(nn.Linear(self.hidden, num_actions), 0.01, head_sparsity)
        self.value_head = _head(nn.Linear(self.hidden, 1), 1.0, head_sparsity)
        if obs_norm:
            shape = (in_channels, height, width)
            self.register_buffer("obs_mean", torch.zeros(shape, dtype=torch.float64))
            self.register_buffer("obs_var", torch.ones(shape, dtype=torch.float64))
            self.register_buffer("obs_count", torch.tensor(1e-4, dtype=torch.float64))

    def _inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The checked observations as the torso's float32 input (scaled, normalised)."""
        shape = (None, self.in_channels, self.height, self.width)
        dtypes = (torch.uint8,) if self.obs_kind == "pixels" else (torch.bool, torch.float32)
        check_tensor("obs", obs, shape, dtypes, where="PixelActorCriticCNN")
        x = obs.to(torch.float32)
        if self.obs_kind == "pixels":
            x = x * (1.0 / 255.0)
        if not self.obs_norm:
            return x
        mean = self.obs_mean.to(torch.float32)
        scale = (self.obs_var + OBS_EPS).rsqrt().to(torch.float32)
        return ((x - mean) * scale).clamp_(-OBS_CLIP, OBS_CLIP)

    @torch.no_grad()
    def observe(self, obs: torch.Tensor) -> None:
        """Merge a batch ``[N, C, H, W]`` (as the torso sees it before normalising) into the
        running input statistics (``obs_norm`` only)."""
        assert self.obs_norm, "observe: the network does not normalise its inputs"
        x = obs.to(torch.float64)
        if self.obs_kind == "pixels":
            x = x * (1.0 / 255.0)
        stats = RunningMeanStd(tuple(self.obs_mean.shape))
        stats.load_state_dict({"mean": self.obs_mean, "var": self.obs_var, "count": float(self.obs_count)})
        stats.update_from_moments(x.mean(0).cpu().numpy(), x.var(0, correction=0).cpu().numpy(), int(x.shape[0]))
        self.obs_mean.copy_(torch.from_numpy(stats.mean))
        self.obs_var.copy_(torch.from_numpy(stats.var))
        self.obs_count.fill_(stats.count)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, K, H, W]`` -> ``(logits float32 [N, A], values float32 [N])``."""
        features = self.torso(self._inputs(obs))
        return self.policy_head(features), self.value_head(features).squeeze(1)

    def architecture(self) -> dict[str, int | str | bool | float]:
        """Constructor arguments, stored in checkpoints to rebuild the network."""
        return {
            "in_channels": self.in_channels,
            "height": self.height,
            "width": self.width,
            "num_actions": self.num_actions,
            "hidden": self.hidden,
            "torso": self.torso_name,
            "obs_kind": self.obs_kind,
            "layer_norm": self.layer_norm,
            "sparsity": self.sparsity,
            "obs_norm": self.obs_norm,
        }
