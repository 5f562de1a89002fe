"""The on-policy update shared by every policy-gradient trainer that collects a batch.

``algo``:

* ``reinforce_raw`` — one gradient step on ``-(R - mean R) * log pi``: Monte Carlo
  returns with a batch-mean baseline, no critic.
* ``vpg_gae`` — one gradient step on the policy-gradient loss with GAE advantages plus
  ``value_coef *`` the critic's regression loss and the entropy bonus.
* ``ppo`` — ``ppo_epochs`` passes over shuffled minibatches of the same batch (every
  sample once per pass: ``num_minibatches`` of sizes that differ by at most one, or
  slices of ``minibatch_size``) with the clipped surrogate
  (:func:`pglab.losses.ppo.ppo_clip_loss`), optional KL early stop (``kl_stop``).

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
from torch.optim.adam import adam

# The hyperparameters are a torch-free config (``pglab train ppo --help`` reads them
# without torch); re-exported here, where the update that uses them lives.
from pglab.configs.ppo import OnPolicyHyperparams, RLMode
from pglab.contracts import check_tensor
from pglab.estimators import normalize_advantages
from pglab.losses.ppo import ppo_clip_loss

__all__ = [
    "ClosedFormGradient",
    "Evaluate",
    "OnPolicyBatch",
    "OnPolicyHyperparams",
    "RLMode",
    "clip_and_step",
    "explained_variance",
    "gradient_step",
    "minibatch_indices",
    "onpolicy_update",
    "optimizer_step",
]

Evaluate = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class ClosedFormGradient(Protocol):
    """A closed-form PPO gradient bound to one rollout's samples
    (:class:`pglab.losses.ppo_fused.BoundPPOGradient`)."""

    def gradient(self, index: torch.Tensor, hp: OnPolicyHyperparams) -> Any:
        """Write the gradient of the PPO loss on the minibatch ``index [m]`` (normalising its
        advantages when ``hp.normalize_advantages``) into the parameters' gradient tensor;
        return its per-sample loss terms."""

    def clip_gradient(self, max_norm: float) -> float:
        """Clip the gradient as ``torch.nn.utils.clip_grad_norm_`` does; return the pre-clip norm."""

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
    params = list(params)
    # optimizer.zero_grad(set_to_none=True) without its profiler bookkeeping, which
    # costs more than the assignments themselves with a dozen small tensors.
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None
    loss.backward()
    return clip_and_step(params, optimizer, max_grad_norm)


def clip_and_step(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, max_grad_norm: float) -> torch.Tensor:
    """Clip the gradients' global 2-norm to ``max_grad_norm`` (``torch.nn.utils.clip_grad_norm_``:
    ``g *= min(1, max_norm / (||g|| + 1e-6))``), take the optimiser step; returns the
    pre-clip norm (0-d, detached)."""
    grad_norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer_step(optimizer)
    return grad_norm.detach()


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``. For a ``torch.optim.Adam`` over one parameter (pglab's flat
    parameter, :class:`pglab.nets.flat.FlatParameters`) whose state the first step has made,
    the public functional ``torch.optim.adam.adam`` on that state with the group's options:
    the same kernel on the same tensors, so the same numbers and the same ``state_dict``,
    without ``Optimizer.step``'s Python around it (its hooks, profiler record, grad-mode
    switch and state bookkeeping): 50 against 130 us per step at 9k parameters, 175
    against 265 at 142k (fused, one CPU thread). pglab registers no optimiser hooks."""
    group = optimizer.param_groups[0]
    params = group["params"]
    state = optimizer.state.get(params[0]) if len(params) == 1 else None
    simple = type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1 and not group["amsgrad"]
    if not (simple and state and params[0].grad is not None):
        optimizer.step()
        return
    with torch.no_grad():
        adam(
            params,
            [params[0].grad],
            [state["exp_avg"]],
            [state["exp_avg_sq"]],
            [],
            [state["step"]],
            foreach=group["foreach"],
            capturable=group["capturable"],
            differentiable=group["differentiable"],
            fused=group["fused"],
            grad_scale=None,
            found_inf=None,
            has_complex=torch.is_complex(params[0]),
            decoupled_weight_decay=group["decoupled_weight_decay"],
            amsgrad=False,
            beta1=group["betas"][0],
            beta2=group["betas"][1],
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
        )


def onpolicy_update(
    evaluate: Evaluate | None,
    batch: OnPolicyBatch,
    params: Iterable[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    hp: OnPolicyHyperparams,
    *,
    generator: torch.Generator | None = None,
    closed_form: ClosedFormGradient | None = None,
) -> dict[str, torch.Tensor]:
    """Improve the policy (and critic) on one batch; return mean diagnostics as tensors.

    ``evaluate(indices)`` re-runs the current networks on the flat samples ``indices``:
    ``(log_probs [m], entropy [m], values [m])`` with gradients to ``params``.
    ``closed_form`` (PPO only; optional) replaces ``evaluate`` + :func:`ppo_clip_loss` +
    ``backward`` + the clip: its ``gradient(index, hp)`` writes the loss's gradient on the
    minibatch ``index`` into the gradients of ``params`` and returns the loss's per-sample
    terms, ``clip_gradient(max_norm)`` clips it, and ``summarize(terms, hp)`` makes the
    loss metrics from the terms of the whole update (sample-weighted means;
    :mod:`pglab.losses.ppo_fused`).

    Metrics (tensors on the batch's device; the trainer syncs when it logs):
    ``loss/policy``, ``loss/value``, ``loss/entropy``, ``stats/entropy``,
    ``stats/approx_kl``, ``stats/clipfrac``, ``stats/grad_norm``, ``stats/epochs``,
    ``stats/explained_variance``.
    """
    params = [p for p in params if p.requires_grad]
    if hp.algo in ("reinforce_raw", "vpg_gae"):
        assert evaluate is not None, f"onpolicy_update: algo={hp.algo} needs evaluate"
        metrics, epochs = _mean_metrics([_single_step(evaluate, batch, params, optimizer, hp)]), 1
    elif closed_form is not None:
        metrics, epochs = _ppo_closed_form(closed_form, batch, optimizer, hp, generator)
    else:
        assert evaluate is not None, "onpolicy_update: PPO needs evaluate or closed_form"
        metrics, epochs = _ppo_autograd(evaluate, batch, params, optimizer, hp, generator)
    metrics["stats/epochs"] = torch.tensor(float(epochs), device=batch.old_log_probs.device)
    metrics["stats/explained_variance"] = explained_variance(batch.old_values, batch.returns)
    return metrics


def _single_step(
    evaluate: Evaluate,
    batch: OnPolicyBatch,
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    hp: OnPolicyHyperparams,
) -> dict[str, torch.Tensor]:
    """reinforce_raw and vpg_gae: one gradient step on the whole batch; its metrics."""
    log_probs, entropy, values = evaluate(torch.arange(batch.size, device=batch.old_log_probs.device))
    # reinforce_raw: R - mean(R), the batch-mean baseline of plain REINFORCE; no critic.
    advantages = batch.returns - batch.returns.mean() if hp.algo == "reinforce_raw" else batch.advantages
    if hp.normalize_advantages:
        advantages = normalize_advantages(advantages)
    policy_loss = -(advantages.detach() * log_probs).mean()
    mean_entropy = entropy.mean()
    if hp.algo == "vpg_gae":
        value_loss = 0.5 * (values - batch.returns).pow(2).mean()
    else:
        value_loss = torch.zeros((), device=batch.old_log_probs.device)
    loss = policy_loss + hp.value_coef * value_loss - hp.entropy_coef * mean_entropy
    grad_norm = gradient_step(loss, params, optimizer, hp.max_grad_norm)
    return {
        "loss/policy": policy_loss.detach(),
        "loss/value": value_loss.detach(),
        "loss/entropy": (-hp.entropy_coef * mean_entropy).detach(),
        "stats/entropy": mean_entropy.detach(),
        "stats/grad_norm": grad_norm,
    }


MinibatchLoss = Callable[[torch.Tensor], torch.Tensor]
"""Evaluate the loss (and, for the closed form, its gradient) on the minibatch ``index``;
return its approximate KL (0-d), before any step is taken."""


def _ppo_epochs(
    minibatch_loss: MinibatchLoss,
    take_step: Callable[[], None],
    epoch_kl: Callable[[], torch.Tensor],
    size: int,
    device: torch.device,
    hp: OnPolicyHyperparams,
    generator: torch.Generator | None,
) -> int:
    """PPO's schedule: ``ppo_epochs`` passes, each over the minibatches of a fresh shuffle
    (:func:`minibatch_indices`); per minibatch ``minibatch_loss(index)`` then ``take_step()``.
    With ``target_kl`` the update stops early, by ``kl_stop``'s rule: ``epoch`` once a
    pass's mean approximate KL (``epoch_kl()``, after the pass) exceeds ``target_kl``;
    ``minibatch`` (SB3's) once a minibatch's approximate KL, before its step, exceeds
    ``1.5 * target_kl``: that step is not taken. Returns the passes begun."""
    epochs = 0
    threshold = 1.5 * hp.target_kl if hp.target_kl is not None and hp.kl_stop == "minibatch" else None
    for _ in range(hp.ppo_epochs):
        order = torch.randperm(size, generator=generator, device="cpu").to(device)
        epochs += 1
        for index in minibatch_indices(order, hp.num_minibatches, hp.minibatch_size):
            kl = minibatch_loss(index)
            # one host sync per minibatch, only when the user asked for SB3's rule
            if threshold is not None and float(kl) > threshold:
                return epochs
            take_step()
        # KL early stop: one host sync per epoch, only when the user asked for it.
        if hp.target_kl is not None and hp.kl_stop == "epoch" and float(epoch_kl()) > hp.target_kl:
            break
    return epochs


def _ppo_autograd(
    evaluate: Evaluate,
    batch: OnPolicyBatch,
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    hp: OnPolicyHyperparams,
    generator: torch.Generator | None,
) -> tuple[dict[str, torch.Tensor], int]:
    """PPO through :func:`ppo_clip_loss` and autograd: the mean metrics of the minibatches
    evaluated (the gradient norm's of the steps taken), and the passes begun."""
    records: list[dict[str, torch.Tensor]] = []
    grad_norms: list[torch.Tensor] = []
    losses: list[torch.Tensor] = []
    epoch_start = [0]

    def minibatch_loss(index: torch.Tensor) -> torch.Tensor:
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
        losses[:] = [out.pop("loss")]
        records.append(out)
        return out["stats/approx_kl"]

    def take_step() -> None:
        grad_norms.append(gradient_step(losses.pop(), params, optimizer, hp.max_grad_norm))

    def epoch_kl() -> torch.Tensor:
        kl = torch.stack([record["stats/approx_kl"] for record in records[epoch_start[0] :]]).mean()
        epoch_start[0] = len(records)
        return kl

    device = batch.old_log_probs.device
    epochs = _ppo_epochs(minibatch_loss, take_step, epoch_kl, batch.size, device, hp, generator)
    metrics = _mean_metrics(records)
    # the mean pre-clip norm of the steps taken (0 when SB3's KL rule stopped the update before its first)
    metrics["stats/grad_norm"] = (
        torch.stack(grad_norms).float().mean() if grad_norms else torch.zeros((), device=device)
    )
    return metrics, epochs


def _mean_metrics(records: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Each metric's mean over ``records``. The 0-d tensors are kept and averaged once at
    the end: no per-minibatch arithmetic (each tiny op costs microseconds of dispatch on
    the CPU) and no host sync."""
    return {key: torch.stack([record[key] for record in records]).float().mean() for key in records[0]}


def _ppo_closed_form(
    closed_form: ClosedFormGradient,
    batch: OnPolicyBatch,
    optimizer: torch.optim.Optimizer,
    hp: OnPolicyHyperparams,
    generator: torch.Generator | None,
) -> tuple[dict[str, torch.Tensor], int]:
    """PPO through the closed-form gradient: the metrics are made once per update from the
    kept per-sample terms (``summarize``), not per step; returns them and the passes begun."""
    terms: list[Any] = []
    grad_norms: list[float] = []
    epoch_start = [0]
    per_minibatch = hp.target_kl is not None and hp.kl_stop == "minibatch"

    def minibatch_loss(index: torch.Tensor) -> torch.Tensor:
        terms.append(closed_form.gradient(index, hp))
        # the minibatch's KL only where SB3's rule reads it (summarize costs more than a step)
        return closed_form.summarize(terms[-1:], hp)["stats/approx_kl"] if per_minibatch else _NO_KL

    def take_step() -> None:
        grad_norms.append(closed_form.clip_gradient(hp.max_grad_norm))
        optimizer_step(optimizer)

    def epoch_kl() -> torch.Tensor:
        kl = closed_form.summarize(terms[epoch_start[0] :], hp)["stats/approx_kl"]
        epoch_start[0] = len(terms)
        return kl

    epochs = _ppo_epochs(minibatch_loss, take_step, epoch_kl, batch.size, batch.old_log_probs.device, hp, generator)
    summary = closed_form.summarize(terms, hp)
    summary.pop("loss")
    summary["stats/grad_norm"] = torch.tensor(grad_norms).mean() if grad_norms else torch.zeros(())
    return {key: value.float() for key, value in summary.items()}, epochs


_NO_KL = torch.zeros(())
"""What the closed form's minibatch step reports as its KL where no rule reads it."""


def minibatch_indices(
    order: torch.Tensor, num_minibatches: int, minibatch_size: int | None = None
) -> tuple[torch.Tensor, ...]:
    """Split a permutation ``order [M]`` into consecutive views that together hold every
    sample once: ``minibatch_size`` samples each, the last one shorter where it does not
    divide ``M`` (SB3's ``batch_size``); without ``minibatch_size``, ``min(num_minibatches,
    M)`` views whose sizes differ by at most one (``torch.tensor_split``)."""
    if minibatch_size is not None:
        return torch.split(order, minibatch_size)
    return torch.tensor_split(order, min(num_minibatches, order.shape[0]))


def explained_variance(predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``1 - Var[y - y_hat] / Var[y]`` (1 is perfect, 0 no better than a constant)."""
    variance = targets.var()
    return torch.where(variance > 0, 1.0 - (targets - predicted).var() / variance, torch.zeros_like(variance))
