"""Discounted returns and reward-to-go with termination masks.

Notation (Spinning Up's): ``r_t`` reward of step t, ``d_t`` = 1 if the episode terminated
at the end of step t, ``gamma`` the per-step discount. For a continuous-time model with
discount rate ``rho`` and step ``dt``, ``gamma = exp(-rho * dt)``, so that
``gamma**t = exp(-rho * t * dt)``.
"""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS, check_discount, check_flags, check_rewards


def _not_done(dones: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return 1.0 - dones.to(like.dtype)


def discount_powers(num_steps: int, discount: float, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """``[gamma**0, ..., gamma**(T-1)]``, shape ``[T]``, computed in float64 then cast
    (a float32 cumulative product drifts by ~1e-5 over thousands of steps)."""
    exponents = torch.arange(num_steps, dtype=torch.float64, device=device)
    return torch.as_tensor(discount, dtype=torch.float64, device=device).pow(exponents).to(dtype)


def reward_to_go(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    discount: float,
    bootstrap_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """Discounted reward-to-go ``G_t`` for every step.

    ``G_t = r_t + gamma * (1 - d_t) * G_{t+1}`` with ``G_T = bootstrap_value``
    (the value of the state after the last step, for paths that were truncated, not
    terminated; zero when ``None``).

    Args:
        rewards: float ``[B, T]``.
        dones: bool or 0/1 ``[B, T]``; ``d_t`` = episode terminated after step t. For a
            path absorbed at step k, ``d_t`` should be 1 for every ``t >= k`` (and
            ``r_t`` = 0 for ``t > k``) so nothing after absorption is credited.
        discount: per-step discount ``gamma`` in [0, 1].
        bootstrap_value: float ``[B]`` or ``None``.

    Returns:
        float ``[B, T]``, same dtype as ``rewards``.
    """
    where = "reward_to_go"
    dims: dict[str, int] = {}
    check_rewards(where, rewards, dims)
    check_flags(where, "dones", dones, dims)
    check_discount(where, "discount", discount)
    not_done = _not_done(dones, rewards)
    running = torch.zeros_like(rewards[:, 0])
    if bootstrap_value is not None:
        check_tensor("bootstrap_value", bootstrap_value, ("B",), FLOATS, dims=dims, where=where)
        running = bootstrap_value.to(rewards.dtype)
    returns = torch.empty_like(rewards)
    # A reverse scan over time, vectorised over paths: T small kernels instead of one
    # cumulative sum of gamma**-t terms, which overflows for long horizons.
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, t] + discount * not_done[:, t] * running
        returns[:, t] = running
    return returns


def discounted_return(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    discount: float,
    bootstrap_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole path's discounted return ``G_0``, without a time loop.

    ``G_0 = sum_t gamma**t * alive_t * r_t + gamma**T * alive_T * V_boot`` where
    ``alive_t = prod_{s<t} (1 - d_s)``. Equal to ``reward_to_go(...)[:, 0]``.

    Args / returns: as :func:`reward_to_go`, but returns float ``[B]``.
    """
    where = "discounted_return"
    dims: dict[str, int] = {}
    check_rewards(where, rewards, dims)
    check_flags(where, "dones", dones, dims)
    check_discount(where, "discount", discount)
    num_steps = rewards.shape[1]
    not_done = _not_done(dones, rewards)
    # alive_t: 1 for t = 0, then the running product of (1 - d_s) for s < t.
    alive = torch.cumprod(torch.cat([torch.ones_like(not_done[:, :1]), not_done], dim=1), dim=1)
    powers = discount_powers(num_steps + 1, discount, device=rewards.device, dtype=rewards.dtype)
    total = (rewards * alive[:, :-1] * powers[:-1]).sum(dim=1)
    if bootstrap_value is not None:
        check_tensor("bootstrap_value", bootstrap_value, ("B",), FLOATS, dims=dims, where=where)
        total = total + powers[-1] * alive[:, -1] * bootstrap_value.to(rewards.dtype)
    return total


def normalize_advantages(
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)`` over the valid entries.

    Args:
        advantages: float tensor of any shape.
        mask: optional bool/0-1 tensor of the same shape; entries where it is 0 are
            excluded from the statistics and set to 0 in the result (so they contribute
            nothing to a loss).
        eps: added to the standard deviation (Bessel-corrected, as ``Tensor.std``).
    """
    check_tensor("advantages", advantages, None, FLOATS, where="normalize_advantages")
    if mask is None:
        if advantages.numel() < 2:
            return advantages - advantages.mean()
        return (advantages - advantages.mean()) / (advantages.std() + eps)
    check_tensor("mask", mask, tuple(advantages.shape), where="normalize_advantages")
    weights = mask.to(advantages.dtype)
    count = weights.sum()
    mean = (advantages * weights).sum() / count.clamp_min(1.0)
    centred = (advantages - mean) * weights
    variance = centred.pow(2).sum() / (count - 1.0).clamp_min(1.0)
    return centred / (variance.sqrt() + eps)
