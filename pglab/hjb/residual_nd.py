"""The HJB residual of a value network on a model with several states (a training loss).

For a :class:`~pglab.envs.dynamics.ContinuousTimeModel` with states ``x in R^d``, drift
``b``, diffusion matrix ``Sigma`` and, for a regime coordinate, switching intensities
``q``, the Hamiltonian of a control ``u`` given a value function ``V`` is::

    H(x, u; V) = f(x, u) + b(x, u) . grad V + 0.5 tr(Sigma Sigma^T Hess V) + sum_j q_{s j} (V(x^j) - V(x))

(``x^j``: ``x`` with the regime set to ``j``). The residuals are ``rho V - H(x, pi(x); V)``
(a policy's) and ``rho V - max_u H(x, u; V)`` (the optimum's), as for one state
(:func:`pglab.hjb.residual.hjb_residual_for_training`, which the one-state models keep).

The maximum over the control box is taken control by control: ``H(u_low) + sum_i max(0,
H(u_low + (high_i - low_i) e_i) - H(u_low))``, ``A + 1`` evaluations instead of the ``2^A``
corners (a firm of 16 divisions has 32 controls). It is exact when ``H`` is affine in each
control and has no products of two controls -- drift and payout affine in ``u``, diffusion
independent of it, as in every GHM model -- and an approximation otherwise.

Derivatives by autograd with ``create_graph=True``, so the residual is differentiable in the
network's parameters: one backward pass for the gradient, one more per diffusing coordinate
for the Hessian's rows (a coordinate with zero diffusion, the regime, needs none).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pglab.contracts import check_tensor
from pglab.envs.dynamics import ContinuousTimeModel

ValueFn = Callable[[torch.Tensor], torch.Tensor]
_FLOATS = (torch.float32, torch.float64)


def _derivative_terms(
    model: ContinuousTimeModel, value_fn: ValueFn, inputs: torch.Tensor, controls: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(V [B], grad V [B, d], 0.5 tr(Sigma Sigma^T Hess V) + jump term [B])`` at ``inputs``
    (which require grad), all in the graph. ``Sigma`` is taken at ``controls``."""
    values = value_fn(inputs)
    check_tensor("values", values, (inputs.shape[0],), _FLOATS, where="hjb_residual_nd: value_fn(states)")
    (gradient,) = torch.autograd.grad(values.sum(), inputs, create_graph=True)
    matrix = model.diffusion_matrix(inputs.detach(), controls)
    covariance = matrix @ matrix.transpose(1, 2)  # [B, d, d]
    second = torch.zeros_like(values)
    for i in range(inputs.shape[1]):
        weights = covariance[:, i, :]  # row i of Sigma Sigma^T
        if not bool((weights != 0).any()):
            continue
        (row,) = torch.autograd.grad(gradient[:, i].sum(), inputs, create_graph=True)  # d/dx (dV/dx_i)
        second = second + 0.5 * (weights * row).sum(1)
    return values, gradient, second + _regime_term(model, value_fn, inputs, values)


def _regime_term(model: ContinuousTimeModel, value_fn: ValueFn, inputs: torch.Tensor, values: torch.Tensor):
    """``sum_j q_{s j} (V(x^j) - V(x))`` for the model's regime coordinate (0 without one)."""
    regimes = model.regimes
    if regimes is None:
        return torch.zeros_like(values)
    rates = torch.tensor(regimes.rates, dtype=inputs.dtype, device=inputs.device).index_select(
        0, inputs[:, regimes.coordinate].detach().long()
    )  # [B, K]: the intensities out of each path's regime
    column = torch.arange(inputs.shape[1], device=inputs.device) == regimes.coordinate
    term = torch.zeros_like(values)
    for target in range(regimes.count):
        switched = torch.where(column, torch.full_like(inputs, float(target)), inputs)
        term = term + rates[:, target] * (value_fn(switched) - values)
    return term


def hjb_residual_nd(
    model: ContinuousTimeModel,
    value_fn: ValueFn,
    states: torch.Tensor,
    *,
    controls: torch.Tensor | None = None,
) -> torch.Tensor:
    """The HJB residual of ``value_fn`` at ``states [B, d]``, ``[B]``, differentiable in its
    parameters: with ``controls [B, A]`` the policy's, ``rho V - H(x, u; V)``; without, the
    optimum's, ``rho V - max_u H(x, u; V)`` (control by control, module docstring)."""
    check_tensor("states", states, ("B", model.state_dim), _FLOATS, where="hjb_residual_nd")
    inputs = states.detach().requires_grad_(True)
    low, high = model.control.bounds(inputs)
    base = controls if controls is not None else low.expand(inputs.shape[0], -1)
    with torch.enable_grad():
        values, gradient, rest = _derivative_terms(model, value_fn, inputs, base)

        def hamiltonian(u: torch.Tensor) -> torch.Tensor:
            state = inputs.detach()
            return model.reward_rate(state, u) + (model.drift(state, u) * gradient).sum(1) + rest

        at_base = hamiltonian(base)
        best = at_base
        if controls is None:
            for i in range(model.action_dim):
                raised = base.clone()
                raised[:, i] = high[i]
                best = best + (hamiltonian(raised) - at_base).clamp_min(0.0)
        return model.discount_rate * values - best
