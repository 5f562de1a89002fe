"""Batched Euler-Maruyama simulation of a :class:`ContinuousTimeModel` under a policy.

All ``B`` paths advance together (no Python loop over paths or state coordinates), and
all steps of a held action in one call (``model.held_control_steps``: GHM's affine step as
one cumulative sum; a step-by-step loop for other models, ``model.held_jump_steps`` for a
model with jumps); absorption is applied once to the whole path::

    u_t     = clip(a_t)                         a_t ~ pi(.|x_t): raw Gaussian sample
    r_t     = reward_rate(x_t, u_t) * dt        (0 once absorbed)
    x'      = x_t + drift(x_t, u_t) dt + Sigma(x_t, u_t) sqrt(dt) eps_t      eps_t ~ N(0, I_w)
    x_{t+1} = jump(x_t, x', u_t, uniforms_t)    (regime switches, parts killed; x' without jumps)
    a path is absorbed at the first t with terminated(x_{t+1}); it then stays frozen

The per-step discount is ``gamma = exp(-rho dt)``, so the return of a path is
``sum_t gamma^t r_t + gamma^T V(x_T) [alive at T]`` (the last term bootstraps the
infinite-horizon problem that ``T`` truncates).

The noise can be passed in explicitly (:class:`RolloutNoise`): a parallel backend that
hands each worker its slice of the same noise reproduces the single-process result.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
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
    """Random draws for a rollout: ``state_noise [B, T, w]``, standard normals, drives the
    ``w`` Brownian motions, ``action_noise [B, T, A]`` the policy's exploration; with
    bridge absorption of whole paths also ``survival_noise [B, T]``, uniform on [0, 1): a
    path is killed in step t when it exceeds the step's survival probability; for a model
    with jumps ``jump_noise [B, T, J]``, uniform, the uniforms of ``model.jump``."""

    state_noise: torch.Tensor
    action_noise: torch.Tensor
    survival_noise: torch.Tensor | None = None
    jump_noise: torch.Tensor | None = None

    @classmethod
    def draw(
        cls,
        num_paths: int,
        num_steps: int,
        noise_dim: int,
        action_dim: int,
        generator: torch.Generator | None,
        *,
        device,
        dtype=torch.float32,
    ) -> RolloutNoise:
        # One call per tensor, path-major: path i's noise is the i-th slice whatever B is
        # split into later.
        state_noise = torch.randn((num_paths, num_steps, noise_dim), generator=generator, device=device, dtype=dtype)
        action_noise = torch.randn((num_paths, num_steps, action_dim), generator=generator, device=device, dtype=dtype)
        return cls(state_noise, action_noise)

    def with_survival(self, generator: torch.Generator | None) -> RolloutNoise:
        """The same draws plus ``survival_noise [B, T]`` (drawn after them, one call)."""
        shape = self.state_noise.shape[:2]
        uniform = torch.rand(shape, generator=generator, device=self.state_noise.device, dtype=self.state_noise.dtype)
        return dataclasses.replace(self, survival_noise=uniform)

    def with_jumps(self, generator: torch.Generator | None, jump_dim: int) -> RolloutNoise:
        """The same draws plus ``jump_noise [B, T, jump_dim]`` (drawn after them, one call)."""
        shape = (*self.state_noise.shape[:2], jump_dim)
        uniform = torch.rand(shape, generator=generator, device=self.state_noise.device, dtype=self.state_noise.dtype)
        return dataclasses.replace(self, jump_noise=uniform)

    def slice(self, start: int, stop: int) -> RolloutNoise:
        survival = None if self.survival_noise is None else self.survival_noise[start:stop]
        jumps = None if self.jump_noise is None else self.jump_noise[start:stop]
        return RolloutNoise(self.state_noise[start:stop], self.action_noise[start:stop], survival, jumps)


@dataclass
class Trajectories:
    """A batch of simulated paths (all tensors batch-major).

    Attributes:
        states: ``[B, T+1, S]``; after absorption the state stays at the absorbed value.
        actions: ``[B, T, A]`` raw policy samples (what ``log_prob`` must score); at steps
            where the path is no longer alive (mask 0) they are placeholders.
        controls: ``[B, T, A]`` the clipped controls actually applied.
        rewards: ``[B, T]`` undiscounted payout of each step (``rate * dt``), 0 once absorbed.
        masks: ``[B, T]`` 1.0 where the path was alive at the start of step t.
        dones: ``[B, T]`` bool, absorbed at or before the end of step t.
        discount: per-step discount ``exp(-rho dt)``.
        dt: time step.
        action_repeat: the policy decided at steps ``t = 0, k, 2k, ...`` and its action
            was held in between (``k = 1``: a decision every step).
        euler_states: ``[B, T, S]`` for a model with jumps: the state after each step's
            Euler-Maruyama step, before its jumps (``None`` without jumps: the states
            themselves, before absorption freezes them).
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
    euler_states: torch.Tensor | None = None

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


def interpolate_uniform(table: torch.Tensor, low: float, step: float, points: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of ``table [P]``, values on the uniform grid ``low + i step``,
    at ``points [N]`` -> ``[N]``, clamped to the grid's ends (the control variates' slope
    tables: any slope keeps them unbiased, so the clamp costs only variance)."""
    num_points = table.shape[0]
    position = ((points - low) / step).clamp(0.0, num_points - 1.0)
    index = position.floor().clamp(max=num_points - 2).long()
    weight = position - index.to(position.dtype)
    # index_select, not table[index]: the same values, ~3x faster than advanced indexing on the CPU
    left, right = table.index_select(0, index), table.index_select(0, index + 1)
    return left + weight * (right - left)


class TabulatedPolicy:
    """A policy on a 1-D state, tabulated once and linearly interpolated.

    ``mean_std(x)`` of a small MLP costs two matrix products and two ``tanh`` on every
    row; a rollout or an evaluation queries it ``B x (number of decisions)`` times, which
    dominates their cost on a CPU (measured: ~90% of a GHM training rollout). For a
    1-D state the whole function fits in a table: evaluate the network once on
    ``num_points`` equally spaced states in ``[low, high]`` and interpolate linearly,
    ``mean(x) ~= (1 - w) mean(x_i) + w mean(x_{i+1})``. The interpolation error is at most
    ``h^2 / 8 max|mean''|`` (``h = (high - low) / (num_points - 1)``);
    :meth:`max_error` measures it at the cell midpoints, where it is largest. States
    outside ``[low, high]`` are sent to the network itself, so the table never
    extrapolates.

    Args:
        policy: provides ``mean_std(states [B, 1]) -> (mean [B, A], std [B, A])``.
        low, high: the tabulated range of the state.
        num_points: table size (>= 2).
    """

    def __init__(
        self, policy: SimulatorPolicy, low: float, high: float, num_points: int, *, device=None, dtype=torch.float32
    ):
        check_int("num_points", num_points, minimum=2)
        if not high > low:
            raise ValueError(f"TabulatedPolicy: high={high} must exceed low={low}")
        self.policy, self.low, self.high, self.num_points = policy, float(low), float(high), int(num_points)
        self.step = (self.high - self.low) / (self.num_points - 1)
        grid = torch.linspace(self.low, self.high, self.num_points, device=device, dtype=dtype).unsqueeze(1)
        with torch.no_grad():
            mean, std = policy.mean_std(grid)
        self.mean_table, self.std_table = mean, std  # [num_points, A]
        self.action_dim = mean.shape[1]
        # per cell i: (mean_i, std_i, mean_{i+1} - mean_i, std_{i+1} - std_i), [num_points - 1, 4A]:
        # one gather per query instead of four
        table = torch.cat([mean, std], dim=1)
        self._cells = torch.cat([table[:-1], table[1:] - table[:-1]], dim=1)
        # the mean's cells alone, for the deterministic policy (:meth:`mean`): left values and
        # differences as two contiguous [num_points - 1, A] tables (arithmetic on the strided
        # halves of one [B, 2A] gather costs ~4x more)
        self._mean_left, self._mean_diff = mean[:-1].contiguous(), (mean[1:] - mean[:-1]).contiguous()

    def _cell(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index [B], weight [B, 1])``: the table cell holding each of ``states [B, 1]``
        and the position within it (clamped to the end cells outside the table)."""
        position = (states[:, 0] - self.low) / self.step
        index = position.floor().clamp(0, self.num_points - 2).long()
        return index, (position - index.to(position.dtype)).unsqueeze(1)

    def _outside(self, states: torch.Tensor) -> torch.Tensor:
        """Indices of the ``states [B, 1]`` beyond the table, where the network answers."""
        return ((states[:, 0] < self.low) | (states[:, 0] > self.high)).nonzero().squeeze(1)

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean [B, A], std [B, A])`` at ``states [B, 1]``."""
        index, weight = self._cell(states)
        cells = self._cells.index_select(0, index)  # [B, 4A]; as _cells[index], ~3x faster on the CPU
        width = 2 * self.action_dim
        values = cells[:, :width] + weight * cells[:, width:]  # (1 - w) f_i + w f_{i+1}
        mean, std = values[:, : self.action_dim], values[:, self.action_dim :]
        outside = self._outside(states)
        if outside.numel() > 0:
            with torch.no_grad():
                exact_mean, exact_std = self.policy.mean_std(states[outside])
            mean, std = mean.index_copy(0, outside, exact_mean), std.index_copy(0, outside, exact_std)
        return mean, std

    def mean(self, states: torch.Tensor) -> torch.Tensor:
        """``mean [B, A]`` at ``states [B, 1]``: :meth:`mean_std`'s mean, bit for bit, at
        about half the cost (an evaluation of the deterministic policy needs no std)."""
        index, weight = self._cell(states)
        mean = self._mean_left.index_select(0, index) + weight * self._mean_diff.index_select(0, index)
        if states.shape[0] == 0:
            return mean
        lowest, highest = torch.aminmax(states[:, 0])
        if float(lowest) < self.low or float(highest) > self.high:  # rare: one reduction rules it out
            outside = self._outside(states)
            with torch.no_grad():
                exact_mean, _ = self.policy.mean_std(states[outside])
            mean = mean.index_copy(0, outside, exact_mean)
        return mean

    def max_error(self) -> float:
        """``max |table mean - network mean|`` over the cell midpoints (the worst case of
        linear interpolation of a smooth function)."""
        midpoints = (
            torch.arange(self.num_points - 1, dtype=self.mean_table.dtype, device=self.mean_table.device) + 0.5
        ) * self.step + self.low
        with torch.no_grad():
            exact = self.policy.mean_std(midpoints.unsqueeze(1))[0]
        return float((self.mean_std(midpoints.unsqueeze(1))[0] - exact).abs().max())


def euler_maruyama_step(
    model: ContinuousTimeModel,
    states: torch.Tensor,
    controls: torch.Tensor,
    state_noise: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step for every path: ``(next_states [B, S], reward [B])`` with
    ``reward = reward_rate(x, u) * dt`` and ``x' = x + drift(x, u) dt + Sigma(x, u) sqrt(dt)
    eps`` (``state_noise`` ``[B, w]``; the model's jumps are not applied). Differentiable."""
    reward = model.reward_rate(states, controls) * dt
    return euler_state(model, states, controls, state_noise, dt), reward


def euler_state(
    model: ContinuousTimeModel, states: torch.Tensor, controls: torch.Tensor, state_noise: torch.Tensor, dt: float
) -> torch.Tensor:
    """``x + drift(x, u) dt + Sigma(x, u) sqrt(dt) eps``, ``[B, S]`` (:func:`euler_maruyama_step`'s state)."""
    return states + model.drift(states, controls) * dt + model.shock(states, controls, math.sqrt(dt) * state_noise)


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
        absorption: ``"grid"``: a path is absorbed when its state at a grid time is terminal
            (the Euler chain); ``"bridge"``: also, in each step, with probability
            ``1 - model.step_survival`` (GHM: the Brownian-bridge probability of touching 0
            between the two grid times), i.e. the continuously monitored model that the FD
            reference solves. The grid-monitored chain survives excursions below 0 between
            grid times, which at ``sigma sqrt(dt) = 0.035`` moves the learned issuance point
            by several hundredths. A model of several independently absorbed parts
            (``model.num_parts > 1``) kills its parts itself, in ``model.jump``.
    """

    def __init__(
        self, model: ContinuousTimeModel, dt: float, horizon: float, *, action_repeat: int = 1, absorption: str = "grid"
    ):
        check_positive("dt", dt)
        check_positive("T", horizon)
        num_steps = int(round(horizon / dt))
        check_int("T/dt", num_steps, minimum=1)
        check_int("action_repeat", action_repeat, minimum=1)
        self.action_repeat = int(action_repeat)
        if absorption not in ("grid", "bridge"):
            raise ValueError(f"TrajectorySimulator: absorption must be 'grid' or 'bridge', got {absorption!r}")
        self.absorption = absorption
        self.model = model
        self.dt = float(dt)
        self.horizon = float(horizon)
        self.num_steps = num_steps
        self.discount = math.exp(-model.discount_rate * dt)
        # bridge absorption of whole paths (survival_noise); a model of several parts kills them in its jumps
        self.path_bridge = absorption == "bridge" and model.num_parts == 1
        self.jump_dim = model.jump_dim(bridge=absorption == "bridge")

    # -- lifetime: nothing to release here; a simulator with workers stops them in close()
    def close(self) -> None:
        """Release what the simulator holds (nothing for the batched one)."""

    def __enter__(self) -> TrajectorySimulator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def draw_noise(
        self, num_paths: int, generator: torch.Generator | None, *, device, dtype=torch.float32
    ) -> RolloutNoise:
        """The rollout's draws from ``generator``, in this order: the Brownian increments
        ``[B, T, w]``, the exploration noise ``[B, T, A]``, the path survival uniforms
        ``[B, T]`` (bridge absorption of whole paths) and the jump uniforms ``[B, T, J]``
        (a model with jumps)."""
        noise = RolloutNoise.draw(
            num_paths,
            self.num_steps,
            self.model.noise_dim,
            self.model.action_dim,
            generator,
            device=device,
            dtype=dtype,
        )
        if self.path_bridge:
            noise = noise.with_survival(generator)
        return noise.with_jumps(generator, self.jump_dim) if self.jump_dim > 0 else noise

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
        self.model.check_outputs(initial_states, self.dt, where="TrajectorySimulator.rollout")
        if noise is None:
            noise = self.draw_noise(
                initial_states.shape[0], generator, device=initial_states.device, dtype=initial_states.dtype
            )
        else:
            self._check_noise(noise, initial_states)
        held = self._held_decisions(policy, initial_states, noise, deterministic)
        masks, dones, states = self._absorb(initial_states, held, noise)
        return Trajectories(
            states=torch.cat([initial_states.unsqueeze(1), states], dim=1),
            actions=torch.cat(held.actions, dim=1),
            controls=torch.cat(held.controls, dim=1),
            rewards=torch.cat(held.rewards, dim=1) * masks,
            masks=masks,
            dones=dones,
            discount=self.discount,
            dt=self.dt,
            action_repeat=self.action_repeat,
            euler_states=torch.cat(held.euler, dim=1) if held.euler else None,
        )

    def _check_noise(self, noise: RolloutNoise, initial_states: torch.Tensor) -> None:
        """Explicit noise must have the rollout's shapes and dtype (and the survival draws
        for ``absorption="bridge"``)."""
        model, num_steps, dtype = self.model, self.num_steps, initial_states.dtype
        dims = {"B": initial_states.shape[0]}
        check_tensor(
            "state_noise", noise.state_noise, ("B", num_steps, model.noise_dim), dtype, dims=dims, where="rollout"
        )
        check_tensor(
            "action_noise",
            noise.action_noise,
            ("B", num_steps, model.action_dim),
            dtype,
            dims=dims,
            where="rollout",
        )
        if self.path_bridge:
            if noise.survival_noise is None:
                raise ValueError(
                    "rollout: absorption='bridge' needs noise.survival_noise [B, T] (RolloutNoise.with_survival)"
                )
            check_tensor("survival_noise", noise.survival_noise, ("B", num_steps), dtype, dims=dims, where="rollout")
        if self.jump_dim > 0:
            if noise.jump_noise is None:
                raise ValueError(
                    f"rollout: {type(model).__name__} jumps: it needs noise.jump_noise [B, T, {self.jump_dim}] "
                    "(RolloutNoise.with_jumps)"
                )
            shape = ("B", num_steps, self.jump_dim)
            check_tensor("jump_noise", noise.jump_noise, shape, dtype, dims=dims, where="rollout")

    def _held_decisions(
        self, policy: SimulatorPolicy, initial_states: torch.Tensor, noise: RolloutNoise, deterministic: bool
    ) -> _HeldSteps:
        """The dynamics, before absorption: one pass per decision interval ``[start, stop)``,
        in which the policy acts once and the model advances all held steps in one batched
        call (``held_control_steps``).

        Absorption does not feed back into the dynamics (it only freezes a path), so
        :meth:`_absorb` applies it once, to the whole ``[B, T]`` path. A path absorbed inside
        an interval restarts the next interval from that interval's start state: what it then
        simulates is masked out, and its decisions stay inside the policy's usual range."""
        model, num_paths = self.model, initial_states.shape[0]
        low, high = model.control.bounds(initial_states)
        held = _HeldSteps(alive_at_start=~model.terminated(initial_states))  # [B]
        state, alive = initial_states, held.alive_at_start
        for start in range(0, self.num_steps, self.action_repeat):
            stop = min(start + self.action_repeat, self.num_steps)
            steps = stop - start
            mean, std = policy.mean_std(state)
            action = mean if deterministic else mean + std * noise.action_noise[:, start]
            control = torch.maximum(torch.minimum(action, high), low)
            if noise.jump_noise is None or self.jump_dim == 0:
                path, reward = model.held_control_steps(
                    state, control, noise.state_noise[:, start:stop], self.dt
                )  # [B, n, S], [B, n]
            else:
                path, reward, euler = model.held_jump_steps(
                    state,
                    control,
                    noise.state_noise[:, start:stop],
                    noise.jump_noise[:, start:stop],
                    self.dt,
                    bridge=self.absorption == "bridge",
                )
                held.euler.append(euler)
            held.paths.append(path)
            held.rewards.append(reward)
            held.actions.append(action.unsqueeze(1).expand(-1, steps, -1))
            held.controls.append(control.unsqueeze(1).expand(-1, steps, -1))
            alive = alive & ~model.terminated(path.reshape(num_paths * steps, -1)).view(num_paths, steps).any(1)
            state = torch.where(alive.unsqueeze(1), path[:, -1], state)
        return held

    def _absorb(
        self, initial_states: torch.Tensor, held: _HeldSteps, noise: RolloutNoise
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Absorption, once for all steps: ``(masks [B, T], dones [B, T], states [B, T, S])``,
        the states after each step frozen where the path was absorbed."""
        model, num_steps = self.model, self.num_steps
        num_paths = initial_states.shape[0]
        path = torch.cat(held.paths, dim=1)  # [B, T, S]: state after each step, before absorption
        terminated = model.terminated(path.reshape(num_paths * num_steps, -1)).view(num_paths, num_steps)
        if self.path_bridge:
            assert noise.survival_noise is not None  # drawn or checked with the noise
            # killed inside step t with probability 1 - survival(x_t -> x_{t+1}) (continuous monitoring)
            before = torch.cat([initial_states.unsqueeze(1), path[:, :-1]], dim=1).reshape(num_paths * num_steps, -1)
            controls_flat = torch.cat(held.controls, dim=1).reshape(num_paths * num_steps, -1)
            survival = model.step_survival(before, path.reshape(num_paths * num_steps, -1), controls_flat, self.dt)
            terminated = terminated | (noise.survival_noise >= survival.view(num_paths, num_steps))
        alive_at_start = held.alive_at_start
        # done_t: absorbed at or before the end of step t (or at the start)
        dones = (torch.cumsum(terminated, dim=1) > 0) | ~alive_at_start.unsqueeze(1)
        # mask_t: alive at the start of step t = not done by the end of step t-1
        masks = torch.cat([alive_at_start.unsqueeze(1), ~dones[:, :-1]], dim=1).to(initial_states.dtype)
        # An absorbed path stays where it was absorbed: the state after step t is the state
        # after the path's last step taken alive (the initial state if there was none).
        moved = masks.sum(1, keepdim=True).long()  # [B, 1], steps taken alive (a prefix)
        steps = torch.arange(num_steps, device=initial_states.device).unsqueeze(0)
        frozen = path.gather(1, torch.minimum(steps, moved - 1).clamp_min(0).unsqueeze(2).expand(-1, -1, path.shape[2]))
        states = torch.where((moved > 0).unsqueeze(2), frozen, initial_states.unsqueeze(1))
        return masks, dones, states


@dataclass
class _HeldSteps:
    """A rollout's dynamics before absorption, one entry per decision interval: the states
    after each held step ``[B, n, S]``, their rewards ``[B, n]``, the raw actions and
    applied controls repeated over the interval ``[B, n, A]``, and for a model with jumps
    the states after each Euler-Maruyama step before its jumps ``[B, n, S]``."""

    alive_at_start: torch.Tensor
    euler: list[torch.Tensor] = field(default_factory=list)
    paths: list[torch.Tensor] = field(default_factory=list)
    rewards: list[torch.Tensor] = field(default_factory=list)
    actions: list[torch.Tensor] = field(default_factory=list)
    controls: list[torch.Tensor] = field(default_factory=list)
