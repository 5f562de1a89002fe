"""Gaussian policy for non-negative continuous controls (dividend and issuance rates)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.distributions import Normal
from torch.nn import functional as F

from pglab.contracts import check_tensor
from pglab.nets.mlp import build_mlp

_FLOATS = (torch.float32, torch.float64)


class GaussianPolicy(nn.Module):
    """``pi(.|s) = N(mu(s), diag sigma(s)^2)`` with ``mu = softplus(net(s)) - shift``
    (``shift = 0`` by default, so ``mu >= 0``).

    The network ``state -> hidden (activation) -> action_dim`` ends in a softplus so the
    mean rate is never negative. The standard deviation is either one learnable
    ``log_std`` per action (default) or the output of a second MLP
    (``state_dependent_std``); either way it is clamped to ``[min_std, max_std]``.

    Training draws *raw* Gaussian samples (:meth:`sample`) and scores them with
    :meth:`log_prob`; the environment clips them to its control bounds. Scoring the raw
    sample keeps the score-function gradient exact (the clip is part of the environment,
    not of the policy). :meth:`act` is the user-facing call and returns clipped actions.

    Args:
        state_dim, action_dim: sizes of ``s`` and ``a``.
        hidden_dims: hidden layer sizes, e.g. ``(64, 64)``.
        activation: hidden activation name (``tanh`` default).
        log_std_init: initial ``log sigma`` (0 gives sigma = 1).
        state_dependent_std: learn ``sigma(s)`` with its own MLP.
        min_std, max_std: clamp range of ``sigma``.
        action_high: optional upper bounds applied by :meth:`act` (lower bound is 0).
        mean_init: optional initial mean per action (> 0): the last layer starts with
            small weights and the bias ``softplus^{-1}(mean_init)``, so ``mu(s) ~ mean_init``
            everywhere (default: the plain initialisation, ``mu ~ softplus(0) = 0.69``).
        mean_shift: ``mu = softplus(net(s)) - mean_shift`` (per action, >= 0; default 0).
            A positive shift lets the mean go below the lower bound 0 of the control, so
            the clipped Gaussian can put most of its mass at exactly 0 (with a mean
            pinned at >= 0 it always "leaks" ``E[max(0, sigma eps)] = 0.4 sigma``).
    """

    mean_net: nn.Sequential
    std_net: nn.Sequential
    log_std: nn.Parameter
    mean_shift: torch.Tensor
    action_high: torch.Tensor

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        log_std_init: float = 0.0,
        state_dependent_std: bool = False,
        min_std: float = 1e-3,
        max_std: float = 2.0,
        action_high: Sequence[float] | None = None,
        mean_init: Sequence[float] | None = None,
        mean_shift: float | Sequence[float] = 0.0,
    ):
        super().__init__()
        if not 0 < min_std < max_std:
            raise ValueError(f"GaussianPolicy: need 0 < min_std < max_std, got min_std={min_std}, max_std={max_std}")
        self.state_dim, self.action_dim = state_dim, action_dim
        self.state_dependent_std = state_dependent_std
        self.log_std_min, self.log_std_max = math.log(min_std), math.log(max_std)
        self.mean_net = build_mlp(state_dim, hidden_dims, action_dim, activation=activation)
        shift = torch.as_tensor(mean_shift, dtype=torch.float32).expand(action_dim).clone()
        if not bool(torch.isfinite(shift).all()) or bool((shift < 0).any()):
            raise ValueError(f"GaussianPolicy: mean_shift must be finite and >= 0, got {mean_shift}")
        self.register_buffer("mean_shift", shift, persistent=False)
        if mean_init is not None:
            target = torch.as_tensor(mean_init, dtype=torch.float32)
            if target.shape != (action_dim,) or not bool((target > 0).all()):
                raise ValueError(
                    f"GaussianPolicy: mean_init must be {action_dim} positive values, got {list(mean_init)}"
                )
            with torch.no_grad():
                final = self.mean_net[-1]
                assert isinstance(final, nn.Linear)
                final.weight.mul_(0.01)
                # softplus^{-1}(m) = log(e^m - 1): the initial mean is ~m at every state
                final.bias.copy_(torch.log(torch.expm1(target + shift)))
        if state_dependent_std:
            self.std_net = build_mlp(state_dim, hidden_dims, action_dim, activation=activation)
            with torch.no_grad():
                final = self.std_net[-1]
                assert isinstance(final, nn.Linear)
                final.weight.mul_(0.01)
                final.bias.fill_(log_std_init)
        else:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        high = (
            torch.full((action_dim,), math.inf)
            if action_high is None
            else torch.as_tensor(action_high, dtype=torch.float32)
        )
        if high.shape != (action_dim,):
            raise ValueError(f"GaussianPolicy: action_high must have {action_dim} entries, got {tuple(high.shape)}")
        self.register_buffer("action_high", high, persistent=False)

    def _check_states(self, states: torch.Tensor, where: str) -> None:
        check_tensor("states", states, ("B", self.state_dim), _FLOATS, where=f"GaussianPolicy.{where}")

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, sigma)``, each ``[B, action_dim]``. Unchecked: the rollout hot path."""
        mean = F.softplus(self.mean_net(states)) - self.mean_shift
        return mean, self.std(states)

    def std(self, states: torch.Tensor) -> torch.Tensor:
        """``sigma(s)`` clamped to ``[min_std, max_std]``, ``[B, action_dim]``. Unchecked."""
        log_std = self.std_net(states) if self.state_dependent_std else self.log_std.expand(states.shape[0], -1)
        return log_std.clamp(self.log_std_min, self.log_std_max).exp()

    def forward(self, states: torch.Tensor) -> Normal:
        """The action distribution for ``states`` float ``[B, state_dim]``."""
        self._check_states(states, "forward")
        mean, std = self.mean_std(states)
        return Normal(mean, std, validate_args=False)

    def sample(self, states: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Raw (unclipped) samples ``mu + sigma * eps``, ``[B, action_dim]``."""
        mean, std = self.mean_std(states)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + std * noise

    def act(
        self, states: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Actions ``[B, action_dim]`` clipped to ``[0, action_high]``: the mean when
        ``deterministic`` else a sample."""
        self._check_states(states, "act")
        actions = self.mean_std(states)[0] if deterministic else self.sample(states, generator)
        return torch.minimum(actions.clamp_min(0.0), self.action_high.to(actions.dtype))

    def log_prob(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a|s)`` summed over action dimensions, ``[B]``."""
        self._check_states(states, "log_prob")
        check_tensor("actions", actions, (states.shape[0], self.action_dim), _FLOATS, where="GaussianPolicy.log_prob")
        mean, std = self.mean_std(states)
        return gaussian_log_prob(actions, mean, std)

    def entropy(self, states: torch.Tensor) -> torch.Tensor:
        """Differential entropy ``H[pi(.|s)]`` summed over action dimensions, ``[B]``."""
        self._check_states(states, "entropy")
        _, std = self.mean_std(states)
        return (0.5 + 0.5 * math.log(2 * math.pi) + std.log()).sum(-1)

    def evaluate_actions(self, states: torch.Tensor, actions: torch.Tensor) -> tuple[None, torch.Tensor, torch.Tensor]:
        """``(values, log_probs [B], entropy [B])``; ``values`` is ``None`` for a
        policy without a critic (kept for a uniform actor-critic interface)."""
        self._check_states(states, "evaluate_actions")
        mean, std = self.mean_std(states)
        log_probs = gaussian_log_prob(actions, mean, std)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + std.log()).sum(-1)
        return None, log_probs, entropy


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Diagonal-Gaussian log density summed over the last axis:
    ``sum_i [-(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log(2 pi)/2]``."""
    z = (actions - mean) / std
    return (-0.5 * z.pow(2) - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
