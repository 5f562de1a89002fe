"""Actor-critic for a known continuous-time model: a TD(lambda) critic (optionally with
an HJB-residual term) and a pathwise actor.

The policy update is pathwise (or REINFORCE); the value update mixes Monte Carlo, TD and
the HJB equation. Here, per iteration:

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
4. optionally (``hjb_weight > 0``) add the mean squared HJB residual (the note's
   "MC + TD + HJB" critic; ``V'``, ``V''`` by autograd, ``f`` reward rate, ``b`` drift,
   ``s`` diffusion), either of the current policy ``u = pi(x)`` (detached)::

       R_pi  = rho V(x) - [f(x, u) + b(x, u) V'(x) + 0.5 s(x, u)^2 V''(x)]

   or of the optimal control (``hjb_residual="optimal"``, the physics-informed critic)::

       R_opt = rho V(x) - max_u [f(x, u) + b(x, u) V'(x) + 0.5 s(x, u)^2 V''(x)]

   at ``hjb_samples`` states: the batch's visited states, or (``hjb_interval`` set)
   collocation points drawn uniformly on that interval each step, so the critic is
   trained where the policy seldom goes (high cash above the barrier) as much as where
   it goes. The maximum is over the corners of the control box, exact for Hamiltonians
   affine in the controls (GHM). ``R_pi = 0`` makes ``V`` the policy's value ``V^pi``;
   ``R_opt = 0`` makes it ``V*`` whatever the policy, and the actor then bootstraps its
   horizon with the optimal continuation value.

   Why collocation starts above 0 (GHM default 0.05): near the absorbing boundary the
   value has a layer of width ``sigma^2 / (2 (mu + a_E_max)) ~ 0.02`` (``V'(0) ~ 45``)
   that a small MLP on raw cash does not represent, and penalising the residual there,
   or ``V(0) = 0``, pulls the network onto a smooth wrong solution (``V ~ c``,
   ``V' = 1``, where the maximum's kink traps the gradient). Without the boundary the
   HJB leaves one slowly varying mode free; the TD(lambda) regression on the visited
   states fixes it (see docs/ghm-validation.md for what that costs).
"""

from __future__ import annotations

from typing import Literal

import torch

from pglab.algos.pathwise import PathwisePolicyGradient
from pglab.envs.dynamics import ContinuousTimeModel
from pglab.estimators import compute_gae
from pglab.hjb.residual import control_candidates, hjb_residual_for_training
from pglab.hjb.residual_nd import hjb_residual_nd
from pglab.losses.reinforce import value_regression_loss


def policy_hjb_residual(
    model: ContinuousTimeModel, value_fn, states: torch.Tensor, controls: torch.Tensor
) -> torch.Tensor:
    """Residual of the policy-evaluation HJB equation of a 1-D model, ``[B]``:
    ``rho V - H(x, u)`` (:func:`~pglab.hjb.residual.hjb_residual_for_training`), kept
    differentiable in the value network's parameters."""
    if states.shape[1] != 1:
        raise ValueError(f"policy_hjb_residual: 1-D states expected, got states of shape {tuple(states.shape)}")
    return hjb_residual_for_training(model, value_fn, states, controls=controls)


def optimal_hjb_residual(model: ContinuousTimeModel, value_fn, states: torch.Tensor) -> torch.Tensor:
    """Residual of the optimal-control HJB equation of a 1-D model, ``[B]``: ``rho V -
    max_u H(x, u)``, the maximum over the corners of the control box (exact when ``H`` is
    affine in the controls, as GHM's; a lower bound of the maximum otherwise)."""
    if states.shape[1] != 1:
        raise ValueError(f"optimal_hjb_residual: 1-D states expected, got states of shape {tuple(states.shape)}")
    corners = control_candidates(model.control, 2, dtype=states.dtype).to(states.device)
    return hjb_residual_for_training(model, value_fn, states, candidates=corners)


class ActorCritic(PathwisePolicyGradient):
    """TD(lambda) + optional HJB critic with a pathwise actor.

    Args (beyond :class:`PathwisePolicyGradient`'s):
        gae_lambda: lambda of the critic's TD(lambda) targets.
        hjb_weight: weight of the mean squared HJB residual in the critic loss (0: off).
        hjb_samples: states per critic step at which the residual is evaluated.
        hjb_residual: ``"policy"`` (``rho V - H(pi)``) or ``"optimal"`` (``rho V - max_u H``).
        hjb_interval: ``(low, high)``: draw the residual's states uniformly on this cash
            interval each critic step; ``None``: the first ``hjb_samples`` states of the
            critic's batch (the visited states).
    """

    def __init__(
        self,
        *args,
        gae_lambda: float = 0.995,
        hjb_weight: float = 0.0,
        hjb_samples: int = 4096,
        hjb_residual: Literal["policy", "optimal"] = "policy",
        hjb_interval: tuple[float, float] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if hjb_residual not in ("policy", "optimal"):
            raise ValueError(f"ActorCritic: hjb_residual must be 'policy' or 'optimal', got {hjb_residual!r}")
        if hjb_interval is not None and not 0.0 <= hjb_interval[0] < hjb_interval[1]:
            raise ValueError(f"ActorCritic: hjb_interval must be (low, high) with 0 <= low < high, got {hjb_interval}")
        self.gae_lambda = gae_lambda
        # weight of the TD(lambda) regression in the critic loss; the trainer may decay it
        # (--td_final_fraction): with a hard boundary condition the residual alone pins V*,
        # and the TD targets, returns of the current policy, sit below it
        self.td_weight = 1.0
        self.hjb_weight = hjb_weight
        self.hjb_samples = hjb_samples
        self.hjb_residual = hjb_residual
        self.hjb_interval = hjb_interval

    def critic_targets(
        self, flat_states: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, bootstrap: torch.Tensor
    ) -> torch.Tensor:
        """TD(lambda) targets ``A_t + V(x_t)`` from the shared GAE estimator, ``[B, T]`` (a
        model of several parts: each part's, with ``V`` shared evenly, summed:
        :meth:`~pglab.algos.pathwise.PathwisePolicyGradient.per_part`)."""
        values = self.critic(flat_states).view(rewards.shape[:2])
        lam = self.gae_lambda

        def targets(rewards, dones, discount, bootstrap, values):
            return compute_gae(rewards, values, dones, None, bootstrap, discount, lam)[1]

        return self.per_part(targets, rewards, dones, bootstrap, values)

    def hjb_states(self, batch_states: torch.Tensor) -> torch.Tensor:
        """Where this step's HJB residual is evaluated, ``[hjb_samples, d]``: uniform draws
        (from the simulation's generator, so a seeded run stays bit-identical and resumes
        exactly) with the model's cash coordinates on ``hjb_interval``, a regime coordinate
        on its regimes and any other coordinate on the model's state box; or the first
        ``hjb_samples`` batch states (a uniform subsample: the batch is a random draw)."""
        if self.hjb_interval is None:
            return batch_states[: self.hjb_samples]
        low, high = self.hjb_interval
        unit = torch.rand(
            (self.hjb_samples, batch_states.shape[1]),
            generator=self.generator,
            device=batch_states.device,
            dtype=batch_states.dtype,
        )
        if batch_states.shape[1] == 1:
            return low + (high - low) * unit
        model = self.model
        columns = []
        for i in range(unit.shape[1]):
            if i in model.cash_coordinates:
                columns.append(low + (high - low) * unit[:, i])
            elif model.regimes is not None and i == model.regimes.coordinate:
                columns.append((unit[:, i] * model.regimes.count).floor().clamp(max=model.regimes.count - 1))
            else:
                columns.append(model.state_low[i] + (model.state_high[i] - model.state_low[i]) * unit[:, i])
        return torch.stack(columns, dim=1)

    def critic_loss(self, states: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """``td_weight`` times the TD(lambda) regression plus ``hjb_weight`` times the mean
        squared HJB residual (``loss/value``, ``loss/hjb_residual``: each before its weight)."""
        out = value_regression_loss(self.critic(states), targets)
        if self.td_weight != 1.0:
            out = {**out, "loss": self.td_weight * out["loss"]}
        if self.hjb_weight > 0:
            # the double backward pass of the residual costs ~10x a plain value regression per state
            points = self.hjb_states(states)
            controls = None
            if self.hjb_residual != "optimal":
                with torch.no_grad():
                    controls = self.model.control.clip(self.policy.mean_std(points)[0])
            if self.model.state_dim != 1:
                residual = hjb_residual_nd(self.model, self.critic, points, controls=controls)
            elif controls is None:
                residual = optimal_hjb_residual(self.model, self.critic, points)
            else:
                residual = policy_hjb_residual(self.model, self.critic, points, controls)
            hjb_loss = residual.pow(2).mean()
            out = {**out, "loss": out["loss"] + self.hjb_weight * hjb_loss, "loss/hjb_residual": hjb_loss.detach()}
        return out
