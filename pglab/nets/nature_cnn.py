"""The Nature CNN (Mnih et al. 2015) as a discrete actor-critic, as in CleanRL's ``ppo_atari.py``.

::

    obs uint8 [B, 4, 84, 84] -> / 255
      -> conv 32 x 8x8 stride 4 -> ReLU      [B, 32, 20, 20]
      -> conv 64 x 4x4 stride 2 -> ReLU      [B, 64, 9, 9]
      -> conv 64 x 3x3 stride 1 -> ReLU      [B, 64, 7, 7]
      -> flatten -> linear 512 -> ReLU       [B, 512]      (the shared trunk)
      -> policy head: linear A  (logits)     [B, A]
      -> value head:  linear 1  (V(s))       [B]

One trunk for both heads (CleanRL, SB3's ``CnnPolicy``): the value loss shapes the
features the policy reads, which is why Atari PPO weights it by ``vf_coef = 0.5``.
Orthogonal initialisation with zero biases: gain ``sqrt(2)`` in the trunk, ``0.01`` on the
policy head (a near-uniform first policy), ``1`` on the value head.

The interface is :class:`pglab.nets.actor_critic.CategoricalActorCritic`'s, so the PPO
trainer and agent use either network unchanged: ``act``, ``rollout_actor``,
``evaluate_actions``, ``value``, ``deterministic_action``, ``check_obs``, ``obs_dim``.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from pglab.contracts import check_tensor
from pglab.errors import TensorContractError


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


Layer = TypeVar("Layer", nn.Conv2d, nn.Linear)


def _orthogonal(layer: Layer, gain: float) -> Layer:
    """CleanRL's ``layer_init``: orthogonal weights of ``gain``, zero bias."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def nature_trunk(in_channels: int, height: int, width: int, features: int = 512) -> nn.Sequential:
    """The three conv layers and the dense layer of the Nature DQN, ReLU after each,
    orthogonally initialised (gain ``sqrt(2)``). Input float ``[B, C, H, W]`` in [0, 1],
    output ``[B, features]``. Images must be at least 36x36 (the conv stack's receptive field)."""
    out_h = _conv_out(_conv_out(_conv_out(height, 8, 4), 4, 2), 3, 1)
    out_w = _conv_out(_conv_out(_conv_out(width, 8, 4), 4, 2), 3, 1)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"nature_trunk: images {height}x{width} are smaller than the 36x36 the Nature CNN needs")
    gain = math.sqrt(2.0)
    return nn.Sequential(
        _orthogonal(nn.Conv2d(in_channels, 32, 8, stride=4), gain),
        nn.ReLU(),
        _orthogonal(nn.Conv2d(32, 64, 4, stride=2), gain),
        nn.ReLU(),
        _orthogonal(nn.Conv2d(64, 64, 3, stride=1), gain),
        nn.ReLU(),
        nn.Flatten(),
        _orthogonal(nn.Linear(64 * out_h * out_w, features), gain),
        nn.ReLU(),
    )


class NatureCNNActorCritic(nn.Module):
    """``pi(a|s) = softmax(policy_head(trunk(s)))``, ``V(s) = value_head(trunk(s))``.

    Args:
        obs_shape: ``(C, H, W)`` of the uint8 observations (Atari: ``(4, 84, 84)``).
        num_actions: ``A``, at least 2.
        features: width of the trunk's dense layer (512 in the paper).
    """

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int, *, features: int = 512):
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"NatureCNNActorCritic: obs_shape must be (C, H, W), got {obs_shape}")
        if num_actions < 2:
            raise ValueError(f"NatureCNNActorCritic: num_actions must be >= 2, got {num_actions}")
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.obs_dim = math.prod(self.obs_shape)
        self.num_actions = int(num_actions)
        channels, height, width = self.obs_shape
        self.trunk = nature_trunk(channels, height, width, features=features)
        self.policy_head = _orthogonal(nn.Linear(features, self.num_actions), 0.01)
        self.value_head = _orthogonal(nn.Linear(features, 1), 1.0)

    def check_obs(self, obs: torch.Tensor, where: str) -> None:
        """Contract at the user-facing entry points: uint8 ``[B, C, H, W]``."""
        name = f"{type(self).__name__}.{where}"
        check_tensor("obs", obs, None, where=name)
        if tuple(obs.shape[1:]) != self.obs_shape or obs.dim() != 4:
            raise TensorContractError(
                f"{name}: obs expected [B, {', '.join(map(str, self.obs_shape))}], got {list(obs.shape)}"
            )
        if obs.dtype != torch.uint8:
            raise TensorContractError(f"{name}: obs expected uint8 pixels (0..255), got {obs.dtype}")

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """uint8 ``[B, C, H, W]`` -> float32 ``[B, features]`` (pixels scaled to [0, 1] first)."""
        return self.trunk(obs.to(torch.float32) * (1.0 / 255.0))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)``, float32 ``[B]``."""
        return self.value_head(self.features(obs)).squeeze(-1)

    def _sample(self, logits: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``a ~ softmax(logits)``: ``(actions int64 [B], log_probs [B])``."""
        log_pi = F.log_softmax(logits, dim=-1)
        # Inverse-CDF sampling, a = #{k : F(k) < u}, u ~ U[0, 1), as CategoricalActorCritic
        # does (one generator draw per row); the clamp guards F(A-1) rounding below u.
        uniform = torch.rand((logits.shape[0], 1), generator=generator, device=logits.device, dtype=log_pi.dtype)
        actions = (log_pi.exp().cumsum(-1) < uniform).sum(-1, keepdim=True).clamp_max(self.num_actions - 1)
        return actions.squeeze(-1), log_pi.gather(-1, actions).squeeze(-1)

    def act(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``a ~ pi(.|s)``: ``(actions int64 [B], log_probs [B], values [B])``, one
        trunk pass for both heads. Unchecked: the rollout's hot path."""
        hidden = self.features(obs)
        actions, log_probs = self._sample(self.policy_head(hidden), generator)
        return actions, log_probs, self.value_head(hidden).squeeze(-1)

    def rollout_actor(self):
        """The rollout's step function (the MLPs fuse their two networks here; with a
        shared trunk :meth:`act` already runs it once)."""
        return self.act

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H[pi(.|s)] [B], V(s) [B])`` for stored ``actions`` int ``[B]``."""
        hidden = self.features(obs)
        log_pi = F.log_softmax(self.policy_head(hidden), dim=-1)
        log_probs = log_pi.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_pi.exp() * log_pi).sum(-1)  # H = -sum_a pi(a) log pi(a)
        return log_probs, entropy, self.value_head(hidden).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The most probable action, int64 ``[B]``."""
        return self.policy_head(self.features(obs)).argmax(-1)
