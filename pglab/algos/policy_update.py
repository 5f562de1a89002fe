"""The PPO trainer's one interface to its update: :func:`build_policy_update`.

A :class:`PolicyUpdate` owns the optimiser and runs
:func:`pglab.algos.onpolicy.onpolicy_update` on one rollout, by one of two paths:

* **autograd** (the reference): :func:`pglab.losses.ppo.ppo_clip_loss` (or the
  REINFORCE / VPG loss) on the network's ``evaluate_actions``, ``backward()``;
* **closed form** (an accelerator, :mod:`pglab.losses.ppo_fused`): PPO's gradient written
  out in NumPy, taken only where the closed form declares that it models the run
  (:func:`pglab.losses.ppo_fused.declines`: the update hyperparameters, the network's
  layers, activations and head, the device and dtype) and ``fused_update`` is on.

:attr:`PolicyUpdate.path` says which (``"closed form"`` or ``"autograd (<reason>)"``);
the trainer prints it once per run. Either way the network's parameters live in one flat
``nn.Parameter`` (:class:`pglab.nets.flat.FlatParameters`), so ``torch.optim.Adam(fused=True)``
steps one tensor, and the gradient clip is one norm and one multiply
(``torch.nn.utils.clip_grad_norm_`` on the autograd path, its arithmetic in NumPy on the
closed form's, :func:`pglab.losses.ppo_fused.clip_flat_gradient`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
from pglab.losses.ppo_fused import ClosedFormPPO, NetViews, blas_threads, declines, hyperparameters_declined
from pglab.nets.flat import FlatParameters


class PolicyUpdate:
    """One on-policy update per call: ``update(flat_obs, flat_actions, batch, hp, generator)
    -> metrics`` (:func:`~pglab.algos.onpolicy.onpolicy_update`'s).

    Attributes:
        optimizer: the ``torch.optim.Adam`` over :attr:`parameters`' flat tensor. A
            learning-rate schedule writes its ``param_groups[0]["lr"]``; checkpoints
            store its ``state_dict()``.
        path: ``"closed form"`` or ``"autograd (<why not the closed form>)"``.
        parameters: the network's :class:`~pglab.nets.flat.FlatParameters`.
    """

    def __init__(
        self, net: nn.Module, optimizer: torch.optim.Optimizer, parameters: FlatParameters, reason: str | None
    ):
        self.net, self.optimizer, self.parameters = net, optimizer, parameters
        self.closed_form = ClosedFormPPO(net) if reason is None else None
        self.path = "closed form" if reason is None else f"autograd ({reason})"
        self._views: tuple[torch.Tensor, NetViews] | None = None  # the closed form's views, per gradient tensor

    def __call__(
        self,
        flat_obs: torch.Tensor,
        flat_actions: torch.Tensor,
        batch: OnPolicyBatch,
        hp: OnPolicyHyperparams,
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        """Improve the network on one rollout: ``flat_obs [M, ...]``, ``flat_actions [M, ...]``
        and ``batch``'s samples ``[M]``; ``hp`` may differ from the config's in covered
        fields (a scheduled ``clip_coef``). Returns the update's metrics."""
        params = [self.parameters.flat]
        if self.closed_form is None:
            evaluate_actions = self.parameters.function("evaluate_actions")

            def evaluate(index: torch.Tensor) -> Any:
                return evaluate_actions(flat_obs[index], flat_actions[index])

            return onpolicy_update(evaluate, batch, params, self.optimizer, hp, generator=generator)
        reason = hyperparameters_declined(hp)
        if reason is not None:
            raise ValueError(f"PolicyUpdate: built for the closed form, called with {reason}")
        flat = self.parameters.flat
        if flat.grad is None:  # the closed form writes into the flat gradient: one must exist
            flat.grad = torch.zeros_like(flat)
        if self._views is None or self._views[0] is not flat.grad:  # made again if something replaced it
            self._views = (flat.grad, self.closed_form.views(self.parameters.grad_view(flat.grad)))
        bound = self.closed_form.bind(flat_obs, flat_actions, batch, self._views[1], flat.grad.numpy())
        # the closed form's matrix products run on NumPy's BLAS: as many threads as torch's
        with blas_threads(torch.get_num_threads()):
            return onpolicy_update(None, batch, params, self.optimizer, hp, generator=generator, closed_form=bound)


def build_policy_update(net: nn.Module, config: Any, device: torch.device) -> PolicyUpdate:
    """The update of ``net`` for a ``PPOConfig``-like ``config`` (``update``, ``lr``,
    ``adam_eps``, ``fused_update``) on ``device``: ``net``'s parameters moved into one flat
    parameter, Adam (fused on the CPU and CUDA) over it, and the closed form where it
    models the run (``fused_update`` on), else autograd."""
    parameters = FlatParameters(net)
    optimizer = torch.optim.Adam(
        [parameters.flat], lr=config.lr, eps=config.adam_eps, fused=device.type in ("cpu", "cuda")
    )
    reason = "fused_update off" if not config.fused_update else declines(net, config.update, device)
    return PolicyUpdate(net, optimizer, parameters, reason)


__all__ = ["PolicyUpdate", "build_policy_update"]
