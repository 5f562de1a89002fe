"""Actor-critic for a known continuous-time model: a TD(lambda) critic (optionally with
an HJB-residual term) and a pathwise actor.

The design note's "actor-critic" row: the policy update is pathwise (or REINFORCE), the
value update mixes Monte Carlo, TD and the HJB equation. Here, per iteration:

1. roll out the deterministic, softly clipped policy with fixed Brownian noise (the
   same differentiable rollout and Brownian-bridge survival as
   :mod:`pglab.algos.pathwise`);
2. **actor**: ascend ``sum_t gamma^t w_t r_t + gamma^T w_T V_psi(x_T)`` by autograd
   through the dynamics;
3. **critic**: TD(lambda) targets from the shared GAE estimator, with fractional
   terminations ``d_t = 1 - s_t`` (``s_t`` the step survival)::

       delta_t = r_t + gamma s_t V(x_{t+1}) - V(x_t)
       A_t     = delta_t + gamma lam s_t A_{t+1},     target_t = A_t + V(x_t)

   ``lam = 1`` gives the Monte Carlo reward-to-go of the pathwise solver, ``lam = 0``
   one-step TD; with ``dt = 0.01`` a step is short, so the useful ``lam`` is close to 1
   (the TD horizon ``dt / (1 - gamma lam)`` is 2 time units at ``lam = 0.995``);
4. optionally (``hjb_weight > 0``) add the squared residual of the policy-evaluation
   HJB equation at the sampled states, with ``u = pi(x)`` (detached)::

       rho V(x) = f(x, u) + b(x, u) V'(x) + 0.5 s(x, u)^2 V''(x)

   (``f`` reward rate, ``b`` drift, ``s`` diffusion; ``V'``, ``V''`` by autograd): the
   note's "MC + TD + HJB" critic, which ties the critic's derivatives, and so the
   actor's bootstrap gradient, to the model.
"""
from __future__ import annotations

import torch

from pglab.algos.pathwise import PathwisePolicyGradient
from pglab.envs.dynamics import ContinuousTimeModel
from pglab.estimators import compute_gae
from pglab.hjb.residual import hamiltonian
from pglab.losses.reinforce import value_regression_loss


def policy_hjb_residual(model: ContinuousTimeModel, value_fn, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
    """Residual of the policy-evaluation HJB equation of a 1-D model, ``[B]``:
    ``rho V - H(x, u)`` with the validator's :func:`~pglab.hjb.residual.hamiltonian` and
    ``V'``, ``V''`` by autograd, kept differentiable in the value network's parameters
    (the validator's :func:`~pglab.hjb.residual.value_derivatives` detaches them)."""
    if states.shape[1] != 1:
        raise ValueError(f"policy_hjb_residual: 1-D states expected, got states of shape {tuple(states.shape)}")
    states = states.detach().requires_grad_(True)
    values = value_fn(states)
    (first,) = torch.autograd.grad(values.sum(), states, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), states, create_graph=True)
    return model.discount_rate * values - hamiltonian(model, states, controls, first[:, 0], second[:, 0])


class ActorCritic(PathwisePolicyGradient):
    """TD(lambda) + optional HJB critic with a pathwise actor.

    Args (beyond :class:`PathwisePolicyGradient`'s):
        gae_lambda: lambda of the critic's TD(lambda) targets.
        hjb_weight: weight of the mean squared HJB residual in the critic loss (0: off).
        hjb_samples: states of each critic batch at which the residual is evaluated.
    """

    def __init__(self, *args, gae_lambda: float = 0.995, hjb_weight: float = 0.0, hjb_samples: int = 4096, **kwargs):
        super().__init__(*args, **kwargs)
        self.gae_lambda = gae_lambda
        self.hjb_weight = hjb_weight
        self.hjb_samples = hjb_samples

    def critic_targets(self, flat_states: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor,
                       bootstrap: torch.Tensor) -> torch.Tensor:
        """TD(lambda) targets ``A_t + V(x_t)`` from the shared GAE estimator, ``[B, T]``."""
        values = self.critic(flat_states).view(rewards.shape)
        _, targets = compute_gae(rewards, values, dones, None, bootstrap, self.simulator.discount, self.gae_lambda)
        return targets

    def critic_loss(self, states: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """TD(lambda) regression plus ``hjb_weight`` times the mean squared policy HJB residual."""
        out = value_regression_loss(self.critic(states), targets)
        if self.hjb_weight > 0:
            # a uniform subsample (the batch is a random draw): the double backward pass of
            # the residual costs ~10x a plain value regression per state
            subset = states[: self.hjb_samples]
            with torch.no_grad():
                controls = self.model.control.clip(self.policy.mean_std(subset)[0])
            hjb_loss = policy_hjb_residual(self.model, self.critic, subset, controls).pow(2).mean()
            out = {**out, "loss": out["loss"] + self.hjb_weight * hjb_loss, "loss/hjb_residual": hjb_loss.detach()}
        return out
