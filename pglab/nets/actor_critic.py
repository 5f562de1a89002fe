"""Actor-critic MLPs for Discrete (Categorical) and Box (diagonal Gaussian) actions.

Both follow the layout that CleanRL's ``ppo.py`` / ``ppo_continuous_action.py`` and
Stable-Baselines3's ``MlpPolicy`` use, so results compare across the three:

* separate actor and critic MLPs (no shared trunk), ``tanh`` hidden layers;
* orthogonal initialisation, gain ``sqrt(2)`` on hidden layers, ``0.01`` on the policy
  output (near-uniform / near-zero-mean initial policy), ``1`` on the value output;
* Gaussian: a state-independent learnable ``log_std`` (initially 0, sigma = 1). Samples
  are *raw* Gaussian draws; the trainer clips them to the Box bounds only when it hands
  them to the environment, so ``log pi(a|s)`` is the exact density of what was sampled.

Interface shared by both (``B`` = batch, ``obs_dim`` = flattened observation size):

* ``act(obs, generator)`` -> ``(actions, log_probs [B], values [B])``, the rollout call;
* ``evaluate_actions(obs, actions)`` -> ``(log_probs [B], entropy [B], values [B])``;
* ``value(obs)`` -> ``[B]``; ``deterministic_action(obs)`` -> the mode / mean.

Actions are ``int64 [B]`` (discrete) or ``float32 [B, action_dim]`` (continuous).
"""
from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from pglab.contracts import check_tensor
from pglab.errors import TensorContractError
from pglab.nets.mlp import FUNCTIONAL_ACTIVATIONS, build_mlp, mlp_forward

_FLOATS = (torch.float32, torch.float64)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def orthogonal_init_(mlp: nn.Sequential, output_gain: float) -> nn.Sequential:
    """Orthogonal weights, zero biases: ``sqrt(2)`` for hidden layers, ``output_gain``
    for the last ``Linear`` (CleanRL's ``layer_init`` and SB3's ``ortho_init``)."""
    linears = [m for m in mlp if isinstance(m, nn.Linear)]
    for index, layer in enumerate(linears):
        gain = output_gain if index == len(linears) - 1 else math.sqrt(2.0)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return mlp


class ActorCritic(nn.Module, abc.ABC):
    """Common part: the critic ``V(s)`` and input flattening/contract checks."""

    def __init__(self, obs_dim: int, hidden_dims: Sequence[int], activation: str):
        super().__init__()
        self.obs_dim = int(obs_dim)
        self.critic = orthogonal_init_(build_mlp(self.obs_dim, hidden_dims, 1, activation=activation), 1.0)

    def _flat(self, obs: torch.Tensor) -> torch.Tensor:
        # [B, *obs_shape] of any numeric dtype -> float32 [B, obs_dim]
        flat = obs.reshape(obs.shape[0], -1)
        return flat if flat.dtype in _FLOATS else flat.float()

    def check_obs(self, obs: torch.Tensor, where: str) -> None:
        """Contract at the user-facing entry points: ``[B, *obs_shape]`` with ``obs_dim`` numbers per row."""
        name = f"{type(self).__name__}.{where}"
        check_tensor("obs", obs, None, where=name)
        if obs.dim() < 2 or obs[0].numel() != self.obs_dim:
            raise TensorContractError(f"{name}: obs expected [B, ...] with {self.obs_dim} numbers per row, got {list(obs.shape)}")

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)``, float ``[B]``."""
        return mlp_forward(self.critic, self._flat(obs)).squeeze(-1)

    @abc.abstractmethod
    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, log_probs [B])`` drawn from the policy head's output ``[B, A]``."""

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``a ~ pi(.|s)``: ``(actions, log_probs [B], values [B])``.
        Unchecked: this is the per-step hot path of the rollout."""
        flat = self._flat(obs)
        actions, log_probs = self._sample(mlp_forward(self.actor, flat), generator)
        return actions, log_probs, mlp_forward(self.critic, flat).squeeze(-1)

    def rollout_actor(self):
        """``act`` for one rollout with frozen weights: ``step(obs, generator) -> (actions,
        log_probs, values)``, the same distribution as :meth:`act`.

        Actor and critic are evaluated as one MLP whose layers are the two networks'
        layers side by side (first layer: weights stacked; later layers: block-diagonal),
        so a step costs 3 matrix products instead of 6 and one Python-level forward
        instead of two: ~40% of a CartPole rollout step's network time at 4 copies. The
        weights are copied when this is called: build a new one after every update.
        Falls back to :meth:`act` when the two MLPs are not plain ``Linear``/activation
        stacks of equal depth (e.g. with LayerNorm). Results agree with :meth:`act` to
        float rounding (a wider matrix product may sum in another order).
        """
        layers = _side_by_side(self.actor, self.critic)
        if layers is None:
            return self.act
        head_size = [m for m in self.actor if isinstance(m, nn.Linear)][-1].out_features

        def step(obs: torch.Tensor, generator: torch.Generator | None = None):
            out = self._flat(obs)
            for weight, bias, activation in layers:
                out = F.linear(out, weight, bias)
                if activation is not None:
                    out = activation(out)
            actions, log_probs = self._sample(out[:, :head_size], generator)
            return actions, log_probs, out[:, head_size]

        return step


def _side_by_side(actor: nn.Sequential, critic: nn.Sequential):
    """``[(weight, bias, activation)]`` of the joint MLP ``x -> [actor(x), critic(x)]``, or ``None``."""

    def plan(mlp: nn.Sequential):
        steps: list[list] = []
        for layer in mlp:
            if type(layer) is nn.Linear:
                steps.append([layer, None])
            elif type(layer) in FUNCTIONAL_ACTIVATIONS and steps and steps[-1][1] is None:
                steps[-1][1] = type(layer)
            else:
                return None
        return steps

    actor_plan, critic_plan = plan(actor), plan(critic)
    if actor_plan is None or critic_plan is None or len(actor_plan) != len(critic_plan):
        return None
    if [a for _, a in actor_plan] != [a for _, a in critic_plan]:
        return None
    layers = []
    with torch.no_grad():
        for index, ((actor_layer, activation), (critic_layer, _)) in enumerate(zip(actor_plan, critic_plan)):
            if index == 0:
                weight = torch.cat([actor_layer.weight, critic_layer.weight])
            else:
                weight = torch.block_diag(actor_layer.weight, critic_layer.weight)
            bias = torch.cat([actor_layer.bias, critic_layer.bias])
            layers.append((weight.detach().clone(), bias.detach().clone(), FUNCTIONAL_ACTIVATIONS[activation] if activation else None))
    return layers


class CategoricalActorCritic(ActorCritic):
    """``pi(a|s) = softmax(logits(s))`` over ``num_actions`` discrete actions."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_dims: Sequence[int] = (64, 64), *, activation: str = "tanh"):
        super().__init__(obs_dim, hidden_dims, activation)
        if num_actions < 2:
            raise ValueError(f"CategoricalActorCritic: num_actions must be >= 2, got {num_actions}")
        self.num_actions = int(num_actions)
        self.actor = orthogonal_init_(build_mlp(self.obs_dim, hidden_dims, self.num_actions, activation=activation), 0.01)

    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``a ~ softmax(logits)``: ``(actions int64 [B], log_probs [B])``."""
        log_pi = F.log_softmax(head, dim=-1)
        # Inverse-CDF sampling, a = #{k : F(k) < u} with u ~ U[0, 1): three cheap ops
        # instead of torch.multinomial's much larger per-call overhead on small batches.
        # The clamp guards against F(K-1) rounding to just below u.
        uniform = torch.rand((head.shape[0], 1), generator=generator, device=head.device, dtype=log_pi.dtype)
        actions = (log_pi.exp().cumsum(-1) < uniform).sum(-1, keepdim=True).clamp_max(self.num_actions - 1)
        return actions.squeeze(-1), log_pi.gather(-1, actions).squeeze(-1)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H[pi(.|s)] [B], V(s) [B])`` for stored ``actions`` int ``[B]``."""
        flat = self._flat(obs)
        log_pi = F.log_softmax(mlp_forward(self.actor, flat), dim=-1)
        log_probs = log_pi.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_pi.exp() * log_pi).sum(-1)  # H = -sum_a pi(a) log pi(a)
        return log_probs, entropy, mlp_forward(self.critic, flat).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The most probable action, int64 ``[B]``."""
        return mlp_forward(self.actor, self._flat(obs)).argmax(-1)


class GaussianActorCritic(ActorCritic):
    """``pi(a|s) = N(mu(s), diag(sigma^2))`` with a state-independent ``log sigma``.

    Args:
        obs_dim: flattened observation size. action_dim: size of the action vector.
        hidden_dims, activation: MLP layout of actor and critic.
        log_std_init: initial ``log sigma`` for every action dimension.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        log_std_init: float = 0.0,
    ):
        super().__init__(obs_dim, hidden_dims, activation)
        self.action_dim = int(action_dim)
        self.actor = orthogonal_init_(build_mlp(self.obs_dim, hidden_dims, self.action_dim, activation=activation), 0.01)
        self.log_std = nn.Parameter(torch.full((self.action_dim,), float(log_std_init)))

    def _log_prob(self, actions: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        # log N(a; mu, sigma) = sum_i [-(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log sqrt(2 pi)]
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _LOG_SQRT_2PI).sum(-1)

    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw ``a = mu + sigma * eps``: ``(actions [B, action_dim], log_probs [B])``."""
        noise = torch.randn(head.shape, generator=generator, device=head.device, dtype=head.dtype)
        actions = head + self.log_std.exp() * noise
        return actions, self._log_prob(actions, head)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H [B], V(s) [B])``; ``H = sum_i (1/2 + log sqrt(2 pi) + log sigma_i)``."""
        flat = self._flat(obs)
        mean = mlp_forward(self.actor, flat)
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(mean.shape[0])
        return self._log_prob(actions, mean), entropy, mlp_forward(self.critic, flat).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``mu(s)``, float ``[B, action_dim]`` (unclipped)."""
        return mlp_forward(self.actor, self._flat(obs))


def build_actor_critic(
    obs_dim: int,
    action_kind: str,
    action_size: int,
    hidden_dims: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    log_std_init: float = 0.0,
) -> ActorCritic:
    """``action_kind="discrete"`` with ``action_size`` actions, or ``"continuous"`` with
    an ``action_size``-dimensional Box."""
    if action_kind == "discrete":
        return CategoricalActorCritic(obs_dim, action_size, hidden_dims, activation=activation)
    if action_kind == "continuous":
        return GaussianActorCritic(obs_dim, action_size, hidden_dims, activation=activation, log_std_init=log_std_init)
    raise ValueError(f"build_actor_critic: action_kind must be 'discrete' or 'continuous', got {action_kind!r}")
