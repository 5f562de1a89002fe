"""Streaming advantage actor-critic with one-step TD targets (no rollout buffer)."""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.estimators.gae import td0_targets

_INT_ACTIONS = (torch.int32, torch.int64)


def a2c_td0_losses(
    logits: torch.Tensor,
    actions: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    done: torch.Tensor,
    trunc: torch.Tensor,
    v_next: torch.Tensor,
    *,
    gamma: float,
    value_coef: float,
    entropy_coef: float,
) -> dict[str, torch.Tensor]:
    """A2C-TD(0) losses for one batched environment step.

    ``not_done = ~(done | trunc)``; ``target = r + gamma * not_done * v_next``
    (``v_next`` is computed under ``no_grad``; after an automatic reset it is the value
    of the *new* episode's first observation, hence no bootstrap on truncation either)
    ``adv = target - V(s)``
    ``loss_policy = -mean(log pi(a|s) * adv.detach())``
    ``loss_value = value_coef * mean((target.detach() - V(s))^2)``
    ``loss_entropy = -entropy_coef * mean(H(pi(.|s)))``
    ``loss = loss_policy + loss_value + loss_entropy``

    Args (strict contracts; no implicit casts):
        logits: float32 ``[N, A]``. actions: int32/int64 ``[N]`` in ``[0, A)``.
        values: float32 ``[N]`` with gradient. rewards: float32 ``[N]``.
        done, trunc: bool ``[N]``. v_next: float32 ``[N]`` without gradient.
    """
    where = "a2c_td0_losses"
    dims: dict[str, int] = {}
    check_tensor("logits", logits, ("N", "A"), torch.float32, dims=dims, where=where)
    check_tensor("actions", actions, ("N",), _INT_ACTIONS, dims=dims, where=where)
    check_tensor("values", values, ("N",), torch.float32, dims=dims, where=where)
    check_tensor("rewards", rewards, ("N",), torch.float32, dims=dims, where=where)
    check_tensor("done", done, ("N",), torch.bool, dims=dims, where=where)
    check_tensor("trunc", trunc, ("N",), torch.bool, dims=dims, where=where)
    check_tensor("v_next", v_next, ("N",), torch.float32, dims=dims, where=where)
    if v_next.requires_grad:
        raise ValueError(f"{where}: v_next must be computed under torch.no_grad() (it is a TD target)")
    log_probs_all = torch.log_softmax(logits, dim=-1)
    target = td0_targets(rewards, v_next, done | trunc, gamma)
    advantage = target - values
    chosen = log_probs_all.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    loss_policy = -(chosen * advantage.detach()).mean()
    loss_value = value_coef * (target.detach() - values).pow(2).mean()
    entropy = -(log_probs_all.exp() * log_probs_all).sum(dim=-1).mean()
    loss_entropy = -entropy_coef * entropy
    total = loss_policy + loss_value + loss_entropy
    return {
        "loss": total,
        "loss/policy": loss_policy.detach(),
        "loss/value": loss_value.detach(),
        "loss/entropy": loss_entropy.detach(),
        "stats/entropy": entropy.detach(),
        "stats/advantage_mean": advantage.detach().mean(),
        "stats/value_mean": values.detach().mean(),
    }
