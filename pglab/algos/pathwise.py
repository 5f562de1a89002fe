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

import torch
import torch.nn.functional as F
from torch import nn

from pglab.algos.onpolicy import explained_variance, gradient_step
from pglab.envs.simulator import TrajectorySimulator, euler_maruyama_step
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
        self, initial_states: torch.Tensor, state_noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable rollout of the deterministic, softly clipped policy.

        Args:
            initial_states: ``[B, S]``. state_noise: standard normals ``[B, T, S]``.

        Returns:
            ``(states [B, T+1, S], rewards [B, T], survival [B, T])``: ``rewards`` are
            ``reward_rate * dt`` (not yet weighted), ``survival`` the per-step survival
            probabilities; a path stays where it was once its weight is 0.
        """
        model, simulator = self.model, self.simulator
        low, high = model.control.bounds(initial_states)
        state = initial_states
        alive = ~model.terminated(state)
        states, rewards, survivals = [state], [], []
        for t in range(simulator.num_steps):
            if t % simulator.action_repeat == 0:
                mean = self.policy.mean_std(state)[0]
                control = soft_clip(mean, low, high, self.clip_sharpness)
            next_state, reward = euler_maruyama_step(model, state, control, state_noise[:, t], simulator.dt)
            survival = model.step_survival(state, next_state, control, simulator.dt) * alive.to(state.dtype)
            rewards.append(reward)
            survivals.append(survival)
            alive = alive & (survival > 0)
            state = torch.where(alive.unsqueeze(1), next_state, state)
            states.append(state)
        return torch.stack(states, 1), torch.stack(rewards, 1), torch.stack(survivals, 1)

    def critic_targets(
        self, flat_states: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, bootstrap: torch.Tensor
    ) -> torch.Tensor:
        """Regression targets of the critic, ``[B, T]`` (all inputs detached): the weighted
        Monte Carlo reward-to-go ``G_t = r_t + gamma s_t G_{t+1}``, ``G_T = V(x_T)``."""
        return reward_to_go(rewards, dones, self.simulator.discount, bootstrap)

    def critic_loss(self, states: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """The critic's loss on a batch of (state ``[N, S]``, target ``[N]``) pairs."""
        return value_regression_loss(self.critic(states), targets)

    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration; returns metrics as 0-d tensors (no host sync here)."""
        policy, critic, model, simulator = self.policy, self.critic, self.model, self.simulator
        initial = model.initial_states(self.n_trajectories, self.generator, device=self.device)
        state_noise = torch.randn(
            (self.n_trajectories, simulator.num_steps, model.state_dim), generator=self.generator, device=self.device
        )

        # -- policy: ascend the weighted payout, differentiated through the dynamics -------
        states, rewards, survival = self.rollout(initial, state_noise)
        dones = 1.0 - survival  # fractional terminations: 1 - P(survive step t)
        bootstrap = critic(states[:, -1])
        payout = discounted_return(rewards, dones, simulator.discount, bootstrap)  # [B]
        policy_grad_norm = self._step(-payout.mean(), policy, self.policy_optimizer)

        # -- critic: regression on states alive on the grid -------------------------------
        with torch.no_grad():
            flat_states = states[:, :-1].detach().reshape(-1, model.state_dim)
            flat_targets = self.critic_targets(
                flat_states, rewards.detach(), dones.detach(), bootstrap.detach()
            ).reshape(-1)
            # weight w_t > 0 <=> the path is alive at the start of step t
            alive_before = torch.cat([torch.ones_like(survival[:, :1]), survival[:, :-1]], 1).cumprod(1) > 0
            flat_index = alive_before.reshape(-1).nonzero().squeeze(1)
            # critic_steps disjoint uniform subsamples of the alive pairs
            chunk = max(1, min(self.critic_samples, flat_index.numel() // self.critic_steps))
            order = torch.randperm(flat_index.numel(), generator=self.generator, device=self.device)
            draws = [flat_index[order[step * chunk : (step + 1) * chunk]] for step in range(self.critic_steps)]
            critic_explained_variance = explained_variance(critic(flat_states[draws[0]]), flat_targets[draws[0]])
        metrics: dict[str, torch.Tensor] = {}
        for draw in draws:
            critic_out = self.critic_loss(flat_states[draw], flat_targets[draw])
            critic_grad_norm = self._step(critic_out["loss"], critic, self.critic_optimizer)
        metrics.update({name: value for name, value in critic_out.items() if name.startswith("loss/")})

        with torch.no_grad():
            low, high = model.control.bounds(flat_states)
            controls = torch.maximum(torch.minimum(policy.mean_std(flat_states[draws[0][:4096]])[0], high), low)
            metrics.update(
                {
                    "loss/policy": -payout.detach().mean(),
                    "loss/baseline": metrics.pop("loss/value"),
                    "return/mean": payout.detach().mean(),
                    "return/std": payout.detach().std(),
                    "return/min": payout.detach().min(),
                    "return/max": payout.detach().max(),
                    "episode/length": alive_before.sum(1).float().mean(),
                    "stats/termination_rate": 1.0 - survival.prod(1).mean(),
                    "policy/mean_action_L": controls[:, 0].mean(),
                    "policy/mean_action_E": controls[:, 1].mean(),
                    "stats/grad_norm/policy": policy_grad_norm,
                    "stats/grad_norm/baseline": critic_grad_norm,
                    "value/explained_variance": critic_explained_variance,
                    "stats/lr/policy": torch.tensor(self.policy_optimizer.param_groups[0]["lr"]),
                    "stats/lr/baseline": torch.tensor(self.critic_optimizer.param_groups[0]["lr"]),
                    "stats/alive_steps": alive_before.sum().float(),
                }
            )
        return metrics
