"""Pathwise (reparameterised) policy gradient on a known continuous-time model.

The policy is deterministic, ``u = clip(mu_theta(x))``, and the only randomness is the
Brownian noise, drawn before the rollout. The discounted payout of a path is then a
differentiable function of theta, and autograd through the simulated dynamics gives

    grad J = E[ grad_theta ( sum_t gamma^t w_t r_t + gamma^T w_T V_psi(x_T) ) ]

with the same noise held fixed (the reparameterisation trick). Two places where the
Euler scheme is not differentiable are smoothed so that the gradient is finite and is
the gradient of a well-defined objective:

* **clipping** ``u = clip(mu, low, high)``: hard clipping has zero derivative outside
  the box, so a rate pushed below 0 never comes back. Training uses the smooth clip
  ``soft_clip(mu) = low + softplus(k (mu - low)) / k - softplus(k (mu - high)) / k``
  with sharpness ``k = clip_sharpness / (high - low)``; it differs from the hard clip
  by at most ``ln 2 / k`` and only near the bounds, and evaluation uses the hard clip.
* **absorption**: the hard rule (dead once ``x' <= 0``) is a step function of the path,
  so its derivative is 0 almost everywhere and the gradient would never see the cost
  of liquidation. Each step instead multiplies the path's weight ``w`` by the model's
  ``step_survival`` probability (GHM: the Brownian-bridge probability of not touching 0
  between grid times, ``1 - exp(-2 c c' / (sigma^2 dt))``), which falls continuously to
  0 as ``c' -> 0``. ``w_t`` is the probability of being alive at ``t`` given the grid
  values, so the weighted payout is an unbiased estimate of the continuously monitored
  problem's payout, and it is differentiable almost surely.

The critic ``V_psi`` bootstraps the truncated horizon; it is regressed on the weighted
reward-to-go ``G_t = r_t + gamma s_t G_{t+1}`` (``s_t`` the step survival, ``G_T = V(x_T)``)
over states alive on the grid, computed with the shared estimator ``reward_to_go``
(fractional ``dones = 1 - s_t``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pglab.algos.mc_pg import control_kinds
from pglab.algos.onpolicy import explained_variance, gradient_step
from pglab.envs.simulator import TrajectorySimulator, euler_state
from pglab.estimators import discounted_return, reward_to_go
from pglab.losses.reinforce import value_regression_loss
from pglab.nets import GaussianPolicy, ValueNetwork


def soft_clip(values: torch.Tensor, low: torch.Tensor, high: torch.Tensor, sharpness: float) -> torch.Tensor:
    """Smooth ``clip(values, low, high)`` (per last-axis entry): ``low + softplus(k (v -
    low)) / k - softplus(k (v - high)) / k`` with ``k = sharpness / (high - low)``. Within
    ``ln 2 / k`` of the hard clip; its derivative ``sigmoid(k (v - low)) - sigmoid(k (v -
    high))`` is positive everywhere, so a rate outside the box still feels the gradient."""
    scale = sharpness / (high - low).clamp_min(1e-12)
    return low + F.softplus(scale * (values - low)) / scale - F.softplus(scale * (values - high)) / scale


class PathwisePolicyGradient:
    """Pathwise policy gradient with a Monte Carlo-regressed critic.

    Args:
        policy: a :class:`GaussianPolicy`; only its mean is used (the policy is
            deterministic), so its standard deviation is not trained.
        simulator: provides the model, ``dt``, ``num_steps``, ``discount`` and
            ``action_repeat`` (the policy is re-evaluated every ``action_repeat`` steps).
        critic: value network bootstrapping ``x_T`` (required: ``None`` is a ``ValueError``).
        n_trajectories: paths per iteration.
        lr_policy, lr_critic: Adam learning rates.
        max_grad_norm: gradient-norm clip for both networks.
        clip_sharpness: ``k * (high - low)`` of :func:`soft_clip`.
        critic_steps: critic gradient steps per iteration, each on ``critic_samples``
            (state, reward-to-go) pairs drawn uniformly from the alive steps.
        generator: the simulation's random stream.
    """

    def __init__(
        self,
        policy: GaussianPolicy,
        simulator: TrajectorySimulator,
        critic: ValueNetwork | None,
        *,
        n_trajectories: int = 1000,
        lr_policy: float = 3e-4,
        lr_critic: float = 1e-3,
        max_grad_norm: float = 0.5,
        clip_sharpness: float = 50.0,
        critic_steps: int = 4,
        critic_samples: int = 25_000,
        generator: torch.Generator | None = None,
    ):
        if critic is None:
            raise ValueError(
                "PathwisePolicyGradient needs a critic to bootstrap the truncated horizon "
                "(no_baseline is not supported)"
            )
        self.policy, self.simulator, self.critic = policy, simulator, critic
        self.model = simulator.model
        self.n_trajectories = n_trajectories
        self.max_grad_norm = max_grad_norm
        self.clip_sharpness = clip_sharpness
        self.critic_steps = critic_steps
        self.critic_samples = critic_samples
        self.generator = generator
        self.policy_optimizer = torch.optim.Adam(policy.parameters(), lr=lr_policy)
        self.critic_optimizer = torch.optim.Adam(critic.parameters(), lr=lr_critic)

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        # "baseline" keeps the checkpoint layout of every GHM solver the same.
        return {"policy": self.policy_optimizer, "baseline": self.critic_optimizer}

    def _step(self, loss: torch.Tensor, module: nn.Module, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        return gradient_step(loss, module.parameters(), optimizer, self.max_grad_norm)

    def rollout(
        self, initial_states: torch.Tensor, state_noise: torch.Tensor, jump_noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable rollout of the deterministic, softly clipped policy.

        Args:
            initial_states: ``[B, S]``. state_noise: standard normals ``[B, T, w]``.
            jump_noise: uniforms ``[B, T, J]`` of the model's jumps (its regime switches;
                ``None`` for a model without, ``J = model.jump_dim(bridge=False)``).

        Returns:
            ``(states [B, T+1, S], rewards [B, T], survival [B, T])``: ``rewards`` are
            ``reward_rate * dt`` (not yet weighted), ``survival`` the per-step survival
            probabilities; a path stays where it was once its weight is 0. For a model of
            ``K > 1`` independently absorbed parts, ``rewards`` and ``survival`` are each
            part's, ``[B, T, K]``, and a part is frozen by the model once its weight is 0.
        """
        model, simulator = self.model, self.simulator
        low, high = model.control.bounds(initial_states)
        state = initial_states
        alive = (~model.terminated(state)).unsqueeze(1).expand(-1, model.num_parts)  # [B, K]
        states, rewards, survivals = [state], [], []
        for t in range(simulator.num_steps):
            if t % simulator.action_repeat == 0:
                mean = self.policy.mean_std(state)[0]
                control = soft_clip(mean, low, high, self.clip_sharpness)
            next_state = euler_state(model, state, control, state_noise[:, t], simulator.dt)
            rewards.append(model.reward_rate_parts(state, control) * simulator.dt)
            if jump_noise is not None:
                next_state = model.jump(state, next_state, control, jump_noise[:, t], simulator.dt, bridge=False)
            survival = model.part_survival(state, next_state, control, simulator.dt) * alive.to(state.dtype)
            survivals.append(survival)
            alive = alive & (survival > 0)
            state = torch.where(alive.any(1, keepdim=True), next_state, state)
            states.append(state)
        rewards_out, survival_out = torch.stack(rewards, 1), torch.stack(survivals, 1)
        if model.num_parts == 1:
            rewards_out, survival_out = rewards_out[:, :, 0], survival_out[:, :, 0]
        return torch.stack(states, 1), rewards_out, survival_out

    def per_part(self, estimate, rewards: torch.Tensor, dones: torch.Tensor, bootstrap: torch.Tensor, *extra):
        """``estimate(rewards, dones, discount, bootstrap, *extra)`` of a model of several
        parts: each part's rewards ``[B, T, K]`` with its own survival, the path's
        bootstrap value (and ``extra`` ``[B, T]`` values) shared evenly among the ``K``
        parts, the parts' results summed (``[B]`` or ``[B, T]``). One part: ``estimate``
        itself. The even share is exact for the rewards; for the value of the state at the
        horizon (and TD's values) it weights each part's survival alike, which is exact
        when the parts are worth the same."""
        if rewards.dim() == 2:
            return estimate(rewards, dones, self.simulator.discount, bootstrap, *extra)
        num_paths, num_steps, num_parts = rewards.shape

        def flat(values: torch.Tensor) -> torch.Tensor:  # [B, T, K] -> [B K, T]
            return values.permute(0, 2, 1).reshape(num_paths * num_parts, num_steps)

        shared = [value.repeat_interleave(num_parts, dim=0) / num_parts for value in extra]
        out = estimate(
            flat(rewards),
            flat(dones),
            self.simulator.discount,
            bootstrap.repeat_interleave(num_parts) / num_parts,
            *shared,
        )
        return out.view(num_paths, num_parts, *out.shape[1:]).sum(1)

    def critic_targets(
        self, flat_states: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, bootstrap: torch.Tensor
    ) -> torch.Tensor:
        """Regression targets of the critic, ``[B, T]`` (all inputs detached): the weighted
        Monte Carlo reward-to-go ``G_t = r_t + gamma s_t G_{t+1}``, ``G_T = V(x_T)`` (each
        part's, summed: :meth:`per_part`)."""
        return self.per_part(reward_to_go, rewards, dones, bootstrap)

    def critic_loss(self, states: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """The critic's loss on a batch of (state ``[N, S]``, target ``[N]``) pairs."""
        return value_regression_loss(self.critic(states), targets)

    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration; returns metrics as 0-d tensors (no host sync here)."""
        initial, state_noise, jump_noise = self.draw()
        # -- policy: ascend the weighted payout, differentiated through the dynamics -------
        jumps = () if jump_noise is None else (jump_noise,)
        states, rewards, survival = self.rollout(initial, state_noise, *jumps)
        dones = 1.0 - survival  # fractional terminations: 1 - P(survive step t)
        bootstrap = self.critic(states[:, -1])
        payout = self.per_part(discounted_return, rewards, dones, bootstrap)  # [B]
        policy_grad_norm = self._step(-payout.mean(), self.policy, self.policy_optimizer)
        # -- critic: regression on states alive on the grid -------------------------------
        batch = _CriticBatch(states[:, :-1].detach(), rewards.detach(), dones.detach(), bootstrap.detach(), survival)
        critic_metrics, diagnosed = self.update_critic(batch)
        return self.diagnostics(batch, diagnosed, payout.detach(), policy_grad_norm, critic_metrics)

    def draw(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The iteration's draws from the generator, in this order: initial states ``[B, S]``,
        Brownian increments ``[B, T, w]`` and (a model with jumps) their uniforms ``[B, T, J]``."""
        model, num_steps, size = self.model, self.simulator.num_steps, self.n_trajectories
        initial = model.initial_states(size, self.generator, device=self.device)
        state_noise = torch.randn((size, num_steps, model.noise_dim), generator=self.generator, device=self.device)
        jump_dim = model.jump_dim(bridge=False)
        if jump_dim == 0:
            return initial, state_noise, None
        jumps = torch.rand((size, num_steps, jump_dim), generator=self.generator, device=self.device)
        return initial, state_noise, jumps

    def update_critic(self, batch: _CriticBatch) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``critic_steps`` Adam steps, each on a disjoint uniform subsample of the (state,
        target) pairs alive on the grid; returns the losses, gradient norm and explained
        variance, and the states of the first subsample."""
        critic, model = self.critic, self.model
        with torch.no_grad():
            flat_states = batch.states.reshape(-1, model.state_dim)
            targets = self.critic_targets(flat_states, batch.rewards, batch.dones, batch.bootstrap).reshape(-1)
            flat_index = batch.alive_before().reshape(-1).nonzero().squeeze(1)
            # critic_steps disjoint uniform subsamples of the alive pairs
            chunk = max(1, min(self.critic_samples, flat_index.numel() // self.critic_steps))
            order = torch.randperm(flat_index.numel(), generator=self.generator, device=self.device)
            draws = [flat_index[order[step * chunk : (step + 1) * chunk]] for step in range(self.critic_steps)]
            critic_explained_variance = explained_variance(critic(flat_states[draws[0]]), targets[draws[0]])
        for draw in draws:
            critic_out = self.critic_loss(flat_states[draw], targets[draw])
            critic_grad_norm = self._step(critic_out["loss"], critic, self.critic_optimizer)
        metrics = {name: value for name, value in critic_out.items() if name.startswith("loss/")}
        metrics["stats/grad_norm/baseline"] = critic_grad_norm
        metrics["value/explained_variance"] = critic_explained_variance
        return metrics, flat_states[draws[0][:4096]]

    def diagnostics(
        self,
        batch: _CriticBatch,
        states: torch.Tensor,
        payout: torch.Tensor,
        policy_grad_norm: torch.Tensor,
        critic_metrics: dict[str, torch.Tensor],
    ) -> dict[str, torch.Tensor]:
        """The metrics: the critic's losses (``critic_metrics``: ``loss/value``, reported as
        ``loss/baseline``, and the actor-critic's residual), the iteration's payouts, episode
        lengths, termination rate, the deterministic policy's mean rates at ``states``, the
        gradient norms, the critic's explained variance and the learning rates."""
        with torch.no_grad():
            low, high = self.model.control.bounds(states)
            controls = torch.maximum(torch.minimum(self.policy.mean_std(states)[0], high), low)
            dividends, issuance = control_kinds(controls)
            alive_before = batch.alive_before()
            survived = batch.survival.prod(1)  # [B] or [B, K]
            termination = 1.0 - survived.mean() if survived.dim() == 1 else (1.0 - survived).prod(1).mean()
            losses = {name: value for name, value in critic_metrics.items() if name.startswith("loss/")}
            return {
                **{name: value for name, value in losses.items() if name != "loss/value"},
                "loss/policy": -payout.mean(),
                "loss/baseline": losses["loss/value"],
                "return/mean": payout.mean(),
                "return/std": payout.std(),
                "return/min": payout.min(),
                "return/max": payout.max(),
                "episode/length": alive_before.sum(1).float().mean(),
                "stats/termination_rate": termination,
                "policy/mean_action_L": dividends.mean(),
                "policy/mean_action_E": issuance.mean(),
                "stats/grad_norm/policy": policy_grad_norm,
                "stats/grad_norm/baseline": critic_metrics["stats/grad_norm/baseline"],
                "value/explained_variance": critic_metrics["value/explained_variance"],
                "stats/lr/policy": torch.tensor(self.policy_optimizer.param_groups[0]["lr"]),
                "stats/lr/baseline": torch.tensor(self.critic_optimizer.param_groups[0]["lr"]),
                "stats/alive_steps": alive_before.sum().float(),
            }


@dataclass
class _CriticBatch:
    """A pathwise rollout, detached for the critic: ``states [B, T, S]`` at the start of each
    step, ``rewards``, fractional ``dones`` and ``survival`` (``[B, T]``, or ``[B, T, K]`` for
    a model of several parts) and the bootstrap values ``[B]``."""

    states: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    bootstrap: torch.Tensor
    survival: torch.Tensor

    def alive_before(self) -> torch.Tensor:
        """bool ``[B, T]``: the path (some part of it) has weight > 0 at the start of step t."""
        survival = self.survival.detach()
        weights = torch.cat([torch.ones_like(survival[:, :1]), survival[:, :-1]], 1).cumprod(1) > 0
        return weights if weights.dim() == 2 else weights.any(2)
