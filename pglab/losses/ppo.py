"""PPO's clipped surrogate objective with value loss and entropy bonus."""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS


def ppo_clip_loss(
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    returns: torch.Tensor,
    *,
    entropy: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    clip_coef: float = 0.2,
    value_clip_coef: float | None = None,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
) -> dict[str, torch.Tensor]:
    """PPO-clip loss on one minibatch (Schulman et al. 2017; CleanRL's form).

    ``ratio = exp(log pi(a|s) - log pi_old(a|s))``
    ``L_pi = -mean(min(ratio * A, clip(ratio, 1-eps, 1+eps) * A))``
    ``L_V = 0.5 * mean((V - R)^2)``, or with value clipping
    ``0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2))``
    ``L = L_pi + value_coef * L_V - entropy_coef * mean(H)``

    Args:
        new_log_probs: float ``[N]`` with gradient. old_log_probs: float ``[N]``.
        advantages: float ``[N]`` (already normalised if wanted). returns: float ``[N]``.
        new_values: float ``[N]`` with gradient. old_values: float ``[N]``, needed for
            value clipping. entropy: float ``[N]`` or ``None``.

    Returns:
        ``loss``, ``loss/policy``, ``loss/value``, ``loss/entropy``, ``stats/entropy``,
        ``stats/approx_kl`` (the low-variance ``(r - 1) - log r`` estimator of
        KL(old || new)), ``stats/clipfrac`` (fraction of ratios outside the clip range).
    """
    where = "ppo_clip_loss"
    dims: dict[str, int] = {}
    for name, tensor in (
        ("new_log_probs", new_log_probs),
        ("old_log_probs", old_log_probs),
        ("advantages", advantages),
        ("new_values", new_values),
        ("returns", returns),
    ):
        check_tensor(name, tensor, ("N",), FLOATS, dims=dims, where=where)
    if not clip_coef > 0:
        raise ValueError(f"{where}: clip_coef must be > 0, got {clip_coef}")
    log_ratio = new_log_probs - old_log_probs.detach()
    ratio = log_ratio.exp()
    advantages = advantages.detach()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef) * advantages
    policy_loss = -torch.min(unclipped, clipped).mean()

    value_loss = clipped_value_loss(new_values, returns, old_values, value_clip_coef, dims=dims)

    if entropy is not None:
        check_tensor("entropy", entropy, ("N",), FLOATS, dims=dims, where=where)
        mean_entropy = entropy.mean()
    else:
        mean_entropy = torch.zeros((), dtype=new_log_probs.dtype, device=new_log_probs.device)
    entropy_loss = -entropy_coef * mean_entropy
    total = policy_loss + value_coef * value_loss + entropy_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).to(new_log_probs.dtype).mean()
    return {
        "loss": total,
        "loss/policy": policy_loss.detach(),
        "loss/value": value_loss.detach(),
        "loss/entropy": entropy_loss.detach(),
        "stats/entropy": mean_entropy.detach(),
        "stats/approx_kl": approx_kl,
        "stats/clipfrac": clipfrac,
    }


def clipped_value_loss(
    new_values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None,
    value_clip_coef: float | None,
    *,
    dims: dict[str, int] | None = None,
) -> torch.Tensor:
    """PPO's critic loss ``0.5 * mean((V - R)^2)``, or with value clipping (``value_clip_coef
    = c``) ``0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2))``: the
    pessimistic of the moved and the clipped prediction. ``new_values`` float ``[N]`` with
    gradient; ``returns``, ``old_values`` float ``[N]`` (targets, detached here)."""
    returns = returns.detach()
    if value_clip_coef is None:
        return 0.5 * (new_values - returns).pow(2).mean()
    if old_values is None:
        raise ValueError("ppo_clip_loss: value clipping needs old_values")
    check_tensor("old_values", old_values, ("N",), FLOATS, dims=dims, where="ppo_clip_loss")
    old_values = old_values.detach()
    value_clipped = old_values + (new_values - old_values).clamp(-value_clip_coef, value_clip_coef)
    return 0.5 * torch.max((new_values - returns).pow(2), (value_clipped - returns).pow(2)).mean()
