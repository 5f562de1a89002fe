"""Batched Euler-Maruyama simulation of a :class:`ContinuousTimeModel` under a policy.

All ``B`` paths advance together, one tensor operation per time step (no Python loop
over paths)::

    u_t     = clip(a_t)                         a_t ~ pi(.|x_t): raw Gaussian sample
    r_t     = reward_rate(x_t, u_t) * dt        (0 once absorbed)
    x_{t+1} = x_t + drift(x_t, u_t) dt + diffusion(x_t, u_t) sqrt(dt) eps_t
    a path is absorbed at the first t with terminated(x_{t+1}); it then stays frozen

The per-step discount is ``gamma = exp(-rho dt)``, so the return of a path is
``sum_t gamma^t r_t + gamma^T V(x_T) [alive at T]`` (the last term bootstraps the
infinite-horizon problem that ``T`` truncates).

The noise can be passed in explicitly (:class:`RolloutNoise`): a parallel backend that
hands each worker its slice of the same noise reproduces the single-process result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from pglab.contracts import check_tensor
from pglab.envs.dynamics import ContinuousTimeModel
from pglab.estimators import discounted_return
from pglab.validation import check_int, check_positive


class SimulatorPolicy(Protocol):
    """What the simulator needs from a policy (``GaussianPolicy`` provides it)."""

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass
class RolloutNoise:
    """Standard-normal draws for a rollout: ``state_noise [B, T, S]`` drives the
    Brownian increments, ``action_noise [B, T, A]`` the policy's exploration."""

    state_noise: torch.Tensor
    action_noise: torch.Tensor

    @classmethod
    def draw(cls, num_paths: int, num_steps: int, state_dim: int, action_dim: int,
             generator: torch.Generator | None, *, device, dtype=torch.float32) -> "RolloutNoise":
        # One call per tensor, path-major: path i's noise is the i-th slice whatever B is
        # split into later.
        state_noise = torch.randn((num_paths, num_steps, state_dim), generator=generator, device=device, dtype=dtype)
        action_noise = torch.randn((num_paths, num_steps, action_dim), generator=generator, device=device, dtype=dtype)
        return cls(state_noise, action_noise)

    def slice(self, start: int, stop: int) -> "RolloutNoise":
        return RolloutNoise(self.state_noise[start:stop], self.action_noise[start:stop])


@dataclass
class Trajectories:
    """A batch of simulated paths (all tensors batch-major).

    Attributes:
        states: ``[B, T+1, S]``; after absorption the state stays at the absorbed value.
        actions: ``[B, T, A]`` raw policy samples (what ``log_prob`` must score).
        controls: ``[B, T, A]`` the clipped controls actually applied.
        rewards: ``[B, T]`` undiscounted payout of each step (``rate * dt``), 0 once absorbed.
        masks: ``[B, T]`` 1.0 where the path was alive at the start of step t.
        dones: ``[B, T]`` bool, absorbed at or before the end of step t.
        discount: per-step discount ``exp(-rho dt)``.
        dt: time step.
        action_repeat: the policy decided at steps ``t = 0, k, 2k, ...`` and its action
            was held in between (``k = 1``: a decision every step).
    """

    states: torch.Tensor
    actions: torch.Tensor
    controls: torch.Tensor
    rewards: torch.Tensor
    masks: torch.Tensor
    dones: torch.Tensor
    discount: float
    dt: float
    action_repeat: int = 1

    @property
    def decision_masks(self) -> torch.Tensor:
        """``[B, T]`` 1.0 at the alive steps where the policy drew a new action: the
        (state, action) pairs a score-function gradient must score."""
        steps = torch.arange(self.num_steps, device=self.masks.device)
        return self.masks * (steps % self.action_repeat == 0).to(self.masks.dtype)

    @property
    def num_paths(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def alive_at_end(self) -> torch.Tensor:
        """bool ``[B]``: truncated (not absorbed) by the horizon."""
        return ~self.dones[:, -1]

    @property
    def final_states(self) -> torch.Tensor:
        return self.states[:, -1]

    def returns(self, bootstrap_value: torch.Tensor | None = None) -> torch.Tensor:
        """Discounted return of every path from ``t = 0``, ``[B]``; ``bootstrap_value``
        ``[B]`` is ``V(x_T)`` (used only for paths alive at ``T``)."""
        return discounted_return(self.rewards, self.dones, self.discount, bootstrap_value)


def euler_maruyama_step(
    model: ContinuousTimeModel,
    states: torch.Tensor,
    controls: torch.Tensor,
    state_noise: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step for every path: ``(next_states [B, S], reward [B])`` with
    ``reward = reward_rate(x, u) * dt`` and
    ``x' = x + drift(x, u) dt + diffusion(x, u) sqrt(dt) eps``. Differentiable."""
    reward = model.reward_rate(states, controls) * dt
    next_states = states + model.drift(states, controls) * dt + model.diffusion(states, controls) * (math.sqrt(dt) * state_noise)
    return next_states, reward


class TrajectorySimulator:
    """Simulate all paths of a batch at once.

    Args:
        model: the continuous-time model.
        dt: time step. horizon: simulated time ``T`` (``T / dt`` steps, rounded).
        action_repeat: the policy draws a new action every ``action_repeat`` steps and
            holds it in between (the dynamics still advance every ``dt``). Holding the
            exploration noise for ``k`` steps multiplies its effect on the return by ``k``
            while the score term stays one draw, so the score-function gradient's
            signal-to-noise ratio grows with ``k`` (it decays like ``sqrt(dt)`` as
            ``dt -> 0`` when the policy re-draws every step), and the rollout queries the
            policy ``k`` times less often.
    """

    def __init__(self, model: ContinuousTimeModel, dt: float, horizon: float, *, action_repeat: int = 1):
        check_positive("dt", dt)
        check_positive("T", horizon)
        num_steps = int(round(horizon / dt))
        check_int("T/dt", num_steps, minimum=1)
        check_int("action_repeat", action_repeat, minimum=1)
        self.action_repeat = int(action_repeat)
        self.model = model
        self.dt = float(dt)
        self.horizon = float(horizon)
        self.num_steps = num_steps
        self.discount = math.exp(-model.discount_rate * dt)

    def draw_noise(self, num_paths: int, generator: torch.Generator | None, *, device, dtype=torch.float32) -> RolloutNoise:
        return RolloutNoise.draw(num_paths, self.num_steps, self.model.state_dim, self.model.action_dim,
                                 generator, device=device, dtype=dtype)

    def rollout(
        self,
        policy: SimulatorPolicy,
        initial_states: torch.Tensor,
        generator: torch.Generator | None = None,
        *,
        noise: RolloutNoise | None = None,
        deterministic: bool = False,
    ) -> Trajectories:
        """Simulate ``B = len(initial_states)`` paths for ``T / dt`` steps.

        Args:
            policy: provides ``mean_std(states)``.
            initial_states: float ``[B, S]``.
            generator: source of the noise when ``noise`` is not given.
            noise: explicit standard-normal draws (see :class:`RolloutNoise`).
            deterministic: apply the policy mean (no exploration noise).

        Gradients flow through the simulation unless the caller disables them
        (the Monte Carlo trainer rolls out under ``torch.no_grad()``).
        """
        model = self.model
        model.check_batch(initial_states, where="TrajectorySimulator.rollout")
        num_paths, num_steps = initial_states.shape[0], self.num_steps
        device, dtype = initial_states.device, initial_states.dtype
        if noise is None:
            noise = self.draw_noise(num_paths, generator, device=device, dtype=dtype)
        else:
            dims = {"B": num_paths}
            check_tensor("state_noise", noise.state_noise, ("B", num_steps, model.state_dim), dtype, dims=dims, where="rollout")
            check_tensor("action_noise", noise.action_noise, ("B", num_steps, model.action_dim), dtype, dims=dims, where="rollout")
        low, high = model.control.bounds(initial_states)

        states_seq, actions_seq, controls_seq, rewards_seq, alive_seq = [initial_states], [], [], [], []
        state = initial_states
        alive = ~model.terminated(state)
        for t in range(num_steps):
            if t % self.action_repeat == 0:  # a decision step; otherwise hold the action
                mean, std = policy.mean_std(state)
                action = mean if deterministic else mean + std * noise.action_noise[:, t]
            control = torch.maximum(torch.minimum(action, high), low)
            next_state, reward = euler_maruyama_step(model, state, control, noise.state_noise[:, t], self.dt)
            alive_f = alive.to(dtype)
            # Absorbed paths stay where they were absorbed and earn nothing.
            state = torch.where(alive.unsqueeze(1), next_state, state)
            actions_seq.append(action)
            controls_seq.append(control)
            rewards_seq.append(reward * alive_f)
            alive_seq.append(alive_f)
            alive = alive & ~model.terminated(state)
            states_seq.append(state)
        masks = torch.stack(alive_seq, dim=1)
        # done_t: not alive at the start of step t+1, i.e. absorbed by the end of step t.
        dones = torch.cat([masks[:, 1:], alive.to(dtype).unsqueeze(1)], dim=1) == 0
        return Trajectories(
            states=torch.stack(states_seq, dim=1),
            actions=torch.stack(actions_seq, dim=1),
            controls=torch.stack(controls_seq, dim=1),
            rewards=torch.stack(rewards_seq, dim=1),
            masks=masks,
            dones=dones,
            discount=self.discount,
            dt=self.dt,
            action_repeat=self.action_repeat,
        )
