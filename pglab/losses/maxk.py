"""Max@K policy-gradient loss: REINFORCE with the unbiased best-of-k sample weights."""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS
from pglab.estimators.maxk import VarianceReduction, maxk_gradient_weights, maxk_reward_estimate


def maxk_policy_loss(
    log_likelihood: torch.Tensor,
    rewards: torch.Tensor,
    k: int,
    *,
    variance_reduction: VarianceReduction = "none",
    stable_sort: bool = True,
) -> dict[str, torch.Tensor]:
    """``L = -(1/B) * sum_b sum_i w_bi * log p(x_bi)`` with ``w = maxk_gradient_weights``.

    The weights are computed from the rewards under ``no_grad`` and detached
    (stop-gradient: they play the role of advantages), so ``grad L`` is minus an unbiased
    estimate of ``grad E[max of k rewards]`` per instance, averaged over the batch. The
    n samples of one instance are *summed* (the weights already carry the 1/C(n, k)
    normalisation), the B instances averaged.

    Args:
        log_likelihood: float ``[B, n]`` with gradient: log-probability of each sampled
            solution (sum over its decoding steps), B instances x n samples.
        rewards: float ``[B, n]``, larger is better (``-tour_length`` for the TSP).
        k: subset size, ``1 <= k <= n``.
        variance_reduction: ``"none"``, ``"sample_loo"`` (n > k) or ``"subloo"`` (k >= 2).
        stable_sort: deterministic tie order in the weight computation.

    Returns:
        ``{"loss", "loss/policy", "stats/rho_hat", "stats/max_reward",
        "stats/mean_reward", "stats/weight_abs_mean"}``; every entry but ``"loss"``
        is detached.
    """
    where = "maxk_policy_loss"
    dims: dict[str, int] = {}
    check_tensor("log_likelihood", log_likelihood, ("B", "n"), FLOATS, dims=dims, where=where)
    check_tensor("rewards", rewards, ("B", "n"), FLOATS, dims=dims, where=where)
    with torch.no_grad():
        weights = maxk_gradient_weights(
            rewards.detach(), k, variance_reduction=variance_reduction, stable_sort=stable_sort
        ).to(log_likelihood.dtype)
        rho_hat = maxk_reward_estimate(rewards.detach(), k, stable_sort=stable_sort)
    loss = -(weights.detach() * log_likelihood).sum(dim=-1).mean()
    return {
        "loss": loss,
        "loss/policy": loss.detach(),
        "stats/rho_hat": rho_hat.mean(),
        "stats/max_reward": rewards.detach().max(dim=-1).values.mean(),
        "stats/mean_reward": rewards.detach().mean(),
        "stats/weight_abs_mean": weights.abs().mean(),
    }
