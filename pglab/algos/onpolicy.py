"""The on-policy update shared by every policy-gradient trainer that collects a batch.

``algo`` (the PSO design note's names):

* ``reinforce_raw`` — one gradient step on ``-(R - mean R) * log pi``: Monte Carlo
  returns with a batch-mean baseline, no critic.
* ``vpg_gae`` — one gradient step on the policy-gradient loss with GAE advantages plus
  ``value_coef *`` the critic's regression loss and the entropy bonus.
* ``ppo`` — ``ppo_epochs`` passes over ``num_minibatches`` shuffled minibatches of the
  same batch (every sample once per pass; sizes differ by at most one) with the
  clipped surrogate (:func:`pglab.losses.ppo.ppo_clip_loss`), optional KL early stop.

The caller collects the rollout, computes advantages/returns with the shared estimators
(:func:`pglab.estimators.compute_gae`, :func:`pglab.estimators.reward_to_go`) and
supplies ``evaluate(indices)``: re-run the current networks on the flat samples
``indices`` and return ``(log_probs [M], entropy [M], values [M])``. The update does not
care whether a sample is an (env, step) pair of CartPole or a (particle, iteration) pair
of a swarm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from pglab.algos.flat_adam import FlatAdam

# The hyperparameters are a torch-free config (``pglab train ppo --help`` reads them
# without torch); re-exported here, where the update that uses them lives.
from pglab.configs.ppo import OnPolicyHyperparams, RLMode
from pglab.contracts import check_tensor
from pglab.estimators import normalize_advantages
from pglab.losses.ppo import ppo_clip_loss

__all__ = [
    "Evaluate",
    "OnPolicyBatch",
    "OnPolicyHyperparams",
    "RLMode",
    "explained_variance",
    "gradient_step",
    "minibatch_indices",
    "onpolicy_update",
]

Evaluate = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class FusedGradient(Protocol):
    """A closed-form PPO gradient bound to one rollout's samples (:mod:`pglab.losses.ppo_fused`)."""

    def gradient(self, index: torch.Tensor, hp: OnPolicyHyperparams) -> Any:
        """Set every parameter's ``.grad`` for the minibatch ``index [m]`` (normalising its
        advantages when ``hp.normalize_advantages``); return its per-sample loss terms."""

    def summarize(self, terms: list[Any], hp: OnPolicyHyperparams) -> dict[str, torch.Tensor]:
        """The loss metrics of :func:`ppo_clip_loss` over the samples of ``terms``."""


@dataclass
class OnPolicyBatch:
    """Flat samples of one rollout (every tensor ``[M]``, detached).

    ``returns`` are the critic's targets (GAE's ``A + V`` or Monte Carlo returns);
    ``advantages`` the policy-gradient weights before normalisation.
    """

    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor

    def __post_init__(self):
        dims: dict[str, int] = {}
        for name in ("old_log_probs", "advantages", "returns", "old_values"):
            check_tensor(
                name, getattr(self, name), ("M",), (torch.float32, torch.float64), dims=dims, where="OnPolicyBatch"
            )

    @property
    def size(self) -> int:
        return int(self.old_log_probs.shape[0])


def gradient_step(loss: torch.Tensor, params, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> torch.Tensor:
    """``zero_grad -> backward -> clip the gradient norm to max_grad_norm -> step``; returns
    the pre-clip gradient norm (0-d, detached). The one optimiser step of every trainer."""
    if isinstance(optimizer, FlatAdam):  # it steps on its flat .grad buffer, which backward() would not fill
        raise TypeError(
            "gradient_step: a FlatAdam steps only on gradients written into its buffers "
            "(the closed-form PPO update), not on loss.backward()'s; pass the torch optimizer"
        )
    params = list(params)
    # optimizer.zero_grad(set_to_none=True) without its profiler bookkeeping, which
    # costs more than the assignments themselves with a dozen small tensors.
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None
    loss.backward()
    return clip_and_step(params, optimizer, max_grad_norm)


def clip_and_step(
    params: list[nn.Parameter], optimizer: torch.optim.Optimizer | FlatAdam, max_grad_norm: float
) -> torch.Tensor:
    """Clip the gradients' global norm to ``max_grad_norm``, take the optimiser step;
    returns the pre-clip norm (0-d, detached). A :class:`~pglab.algos.flat_adam.FlatAdam`
    does both over its flat buffers."""
    if isinstance(optimizer, FlatAdam):
        return optimizer.clip_and_step(max_grad_norm)
    grad_norm = clip_grad_norm(params, max_grad_norm)
    optimizer.step()
    return grad_norm.detach()


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (the same arithmetic: ``g *= min(1, max_norm /
    (||g|| + 1e-6))`` with the global 2-norm), without its per-call grouping of the
    tensors by device and dtype when they all share one: ~half its cost on small networks."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or len({(g.device, g.dtype) for g in grads}) > 1:
        return nn.utils.clip_grad_norm_(params, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_max(1.0))
    return total


def onpolicy_update(
    evaluate: Evaluate,
    batch: OnPolicyBatch,
    params: Iterable[nn.Parameter],
    optimizer: torch.optim.Optimizer | FlatAdam,
    hp: OnPolicyHyperparams,
    *,
    generator: torch.Generator | None = None,
    fused_gradient: FusedGradient | None = None,
) -> dict[str, torch.Tensor]:
    """Improve the policy (and critic) on one batch; return mean diagnostics as tensors.

    ``fused_gradient`` (PPO only; optional) replaces ``evaluate`` + :func:`ppo_clip_loss` +
    ``backward``: its ``gradient(index, hp)`` sets the parameters' ``.grad`` to
    the loss's gradient on the minibatch ``index`` in closed form and returns the loss's
    per-sample terms, and ``summarize(terms, hp)`` makes the loss metrics from the terms of
    the whole update (sample-weighted means; :mod:`pglab.losses.ppo_fused`).

    Metrics (tensors on the batch's device; the trainer syncs when it logs):
    ``loss/policy``, ``loss/value``, ``loss/entropy``, ``stats/entropy``,
    ``stats/approx_kl``, ``stats/clipfrac``, ``stats/grad_norm``, ``stats/epochs``,
    ``stats/explained_variance``.
    """
    params = [p for p in params if p.requires_grad]
    size = batch.size
    device = batch.old_log_probs.device
    records: list[dict[str, torch.Tensor]] = []

    def accumulate(metrics: dict[str, torch.Tensor]) -> None:
        # Keep the 0-d tensors and average once at the end: no per-minibatch arithmetic
        # (each tiny op costs microseconds of dispatch on the CPU) and no host sync.
        records.append({key: value.detach() for key, value in metrics.items() if key != "loss"})

    if hp.algo in ("reinforce_raw", "vpg_gae"):
        indices = torch.arange(size, device=device)
        log_probs, entropy, values = evaluate(indices)
        if hp.algo == "reinforce_raw":
            # R - mean(R): the batch-mean baseline of plain REINFORCE; no critic.
            advantages = batch.returns - batch.returns.mean()
        else:
            advantages = batch.advantages
        if hp.normalize_advantages:
            advantages = normalize_advantages(advantages)
        policy_loss = -(advantages.detach() * log_probs).mean()
        mean_entropy = entropy.mean()
        value_loss = (
            0.5 * (values - batch.returns).pow(2).mean() if hp.algo == "vpg_gae" else torch.zeros((), device=device)
        )
        loss = policy_loss + hp.value_coef * value_loss - hp.entropy_coef * mean_entropy
        grad_norm = gradient_step(loss, params, optimizer, hp.max_grad_norm)
        accumulate(
            {
                "loss/policy": policy_loss,
                "loss/value": value_loss,
                "loss/entropy": -hp.entropy_coef * mean_entropy,
                "stats/entropy": mean_entropy,
                "stats/grad_norm": grad_norm,
            }
        )
        epochs_run = 1
    else:
        epochs_run = 0
        fused_terms: list[Any] = []
        grad_norms: list[torch.Tensor] = []
        for _ in range(hp.ppo_epochs):
            epoch_start = len(fused_terms)
            order = torch.randperm(size, generator=generator, device="cpu").to(device)
            epoch_kl = torch.zeros((), device=device)
            epoch_batches = 0
            # Every sample exactly once per epoch: num_minibatches consecutive slices of the
            # shuffled order, the first size % num_minibatches of them one sample longer
            # (equal slices when it divides, as before). Dropping the remainder would leave
            # some samples out of every update.
            for index in minibatch_indices(order, hp.num_minibatches):
                if fused_gradient is not None:
                    # metrics once per update from the kept terms (summarize), not per step
                    fused_terms.append(fused_gradient.gradient(index, hp))
                    grad_norms.append(clip_and_step(params, optimizer, hp.max_grad_norm))
                else:
                    advantages = batch.advantages[index]
                    if hp.normalize_advantages:
                        advantages = normalize_advantages(advantages)
                    log_probs, entropy, values = evaluate(index)
                    out = ppo_clip_loss(
                        log_probs,
                        batch.old_log_probs[index],
                        advantages,
                        values,
                        batch.returns[index],
                        entropy=entropy,
                        old_values=batch.old_values[index],
                        clip_coef=hp.clip_coef,
                        value_clip_coef=hp.value_clip_coef,
                        value_coef=hp.value_coef,
                        entropy_coef=hp.entropy_coef,
                    )
                    out["stats/grad_norm"] = gradient_step(out["loss"], params, optimizer, hp.max_grad_norm)
                    accumulate(out)
                    epoch_kl = epoch_kl + out["stats/approx_kl"]
                epoch_batches += 1
            epochs_run += 1
            # KL early stop: one host sync per epoch, only when the user asked for it.
            if hp.target_kl is not None:
                if fused_gradient is not None:
                    mean_kl = fused_gradient.summarize(fused_terms[epoch_start:], hp)["stats/approx_kl"]
                else:
                    mean_kl = epoch_kl / max(epoch_batches, 1)
                if float(mean_kl) > hp.target_kl:
                    break
        if fused_gradient is not None:
            accumulate({**fused_gradient.summarize(fused_terms, hp), "stats/grad_norm": torch.stack(grad_norms).mean()})
    metrics = {key: torch.stack([record[key] for record in records]).float().mean() for key in records[0]}
    metrics["stats/epochs"] = torch.tensor(float(epochs_run), device=device)
    metrics["stats/explained_variance"] = explained_variance(batch.old_values, batch.returns)
    return metrics


def minibatch_indices(order: torch.Tensor, num_minibatches: int) -> tuple[torch.Tensor, ...]:
    """Split a permutation ``order [M]`` into ``min(num_minibatches, M)`` consecutive views
    whose sizes differ by at most one (``torch.tensor_split``): together they hold every
    sample once."""
    return torch.tensor_split(order, min(num_minibatches, order.shape[0]))


def explained_variance(predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``1 - Var[y - y_hat] / Var[y]`` (1 is perfect, 0 no better than a constant)."""
    variance = targets.var()
    return torch.where(variance > 0, 1.0 - (targets - predicted).var() / variance, torch.zeros_like(variance))
