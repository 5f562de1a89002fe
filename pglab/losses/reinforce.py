"""REINFORCE (score-function) policy loss and the baseline's regression loss."""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS


def reinforce_loss(
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    masks: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``L = -(1/B) * sum_b sum_t m_bt * log pi(a_bt | s_bt) * A_bt``.

    Its gradient is the REINFORCE estimate of ``-grad J``. Summing over time (not
    averaging) keeps the estimator unbiased for the undiscounted-sum form of the
    policy-gradient theorem; dividing by ``B`` averages over paths.

    Args:
        log_probs: float ``[B, T]`` with gradient.
        advantages: float ``[B, T]`` (per step, e.g. ``G_t - V(s_t)``) or ``[B]`` (one
            per path, e.g. ``R(s_0) - V(s_0)``, broadcast over time). Detached here.
        masks: bool/0-1 ``[B, T]``: 1 for steps taken while the path was alive.
    """
    where = "reinforce_loss"
    dims: dict[str, int] = {}
    check_tensor("log_probs", log_probs, ("B", "T"), FLOATS, dims=dims, where=where)
    if advantages.dim() == 1:
        check_tensor("advantages", advantages, ("B",), FLOATS, dims=dims, where=where)
        advantages = advantages.unsqueeze(1)
    else:
        check_tensor("advantages", advantages, ("B", "T"), FLOATS, dims=dims, where=where)
    weights = advantages.detach()
    if masks is not None:
        check_tensor("masks", masks, ("B", "T"), dims=dims, where=where)
        weights = weights * masks.to(log_probs.dtype)
    loss = -(log_probs * weights).sum() / log_probs.shape[0]
    return {"loss": loss, "loss/policy": loss.detach()}


def value_regression_loss(
    predicted: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Mean squared error ``mean (V(s) - y)^2`` over valid entries; targets detached.

    Args:
        predicted: float ``[...]`` with gradient. targets: same shape.
        mask: optional bool/0-1 of the same shape (entries with 0 are ignored).
    """
    where = "value_regression_loss"
    check_tensor("predicted", predicted, None, FLOATS, where=where)
    check_tensor("targets", targets, tuple(predicted.shape), FLOATS, where=where)
    error = (predicted - targets.detach()).pow(2)
    if mask is None:
        loss = error.mean()
    else:
        check_tensor("mask", mask, tuple(predicted.shape), where=where)
        weights = mask.to(error.dtype)
        loss = (error * weights).sum() / weights.sum().clamp_min(1.0)
    return {"loss": loss, "loss/value": loss.detach()}
