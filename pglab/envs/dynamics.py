"""The pluggable interface of a controlled continuous-time model.

A model is a controlled diffusion with a payout stream and an absorbing region::

    dX_t = drift(X_t, u_t) dt + diffusion(X_t, u_t) dW_t        (diagonal noise)
    J(x) = E[ integral_0^tau exp(-rho t) reward_rate(X_t, u_t) dt | X_0 = x ]
    tau  = first time X_t is in the absorbing region (``terminated``)

with controls ``u`` in a box (:class:`ControlSpec`). Everything pglab needs to simulate
it (:class:`pglab.envs.simulator.TrajectorySimulator`), train on it and compute its
finite-difference reference (:mod:`pglab.hjb.fd`, 1-D states) comes from these methods;
a new model is one small subclass (see :mod:`pglab.envs.ghm` and the second model in
the docs).

All methods take and return tensors with a leading batch axis: states ``[B, S]``,
controls ``[B, A]``. They must be pure tensor expressions (no Python loop over the
batch) and differentiable in states and controls where the model is smooth, so the
pathwise solver can backpropagate through them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from pglab.contracts import check_tensor


@dataclass(frozen=True)
class ControlSpec:
    """Box constraints ``low <= u <= high`` on the controls, with their names."""

    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self):
        if not (len(self.names) == len(self.low) == len(self.high)):
            raise ValueError(
                f"ControlSpec: names, low and high must have equal lengths, got {self.names}, {self.low}, {self.high}"
            )
        for name, lo, hi in zip(self.names, self.low, self.high, strict=False):
            if not lo <= hi:
                raise ValueError(f"ControlSpec: {name} has low={lo} > high={hi}")

    @property
    def dim(self) -> int:
        return len(self.names)

    def bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = torch.tensor(self.low, dtype=like.dtype, device=like.device)
        high = torch.tensor(self.high, dtype=like.dtype, device=like.device)
        return low, high

    def clip(self, actions: torch.Tensor) -> torch.Tensor:
        """Project raw actions ``[B, A]`` onto the box (what the firm can actually do)."""
        low, high = self.bounds(actions)
        return torch.maximum(torch.minimum(actions, high), low)


class ContinuousTimeModel(abc.ABC):
    """Base class of pglab's continuous-time control models. See the module docstring."""

    #: names of the state coordinates, e.g. ``("cash",)``
    state_names: tuple[str, ...]
    #: the control box
    control: ControlSpec
    #: discount rate ``rho`` (per unit time)
    discount_rate: float
    #: the region of states used for initial states, plots and the FD grid
    state_low: tuple[float, ...]
    state_high: tuple[float, ...]

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def action_dim(self) -> int:
        return self.control.dim

    @abc.abstractmethod
    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """``mu(x, u)``, ``[B, S]``."""

    @abc.abstractmethod
    def diffusion(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """Diagonal volatility ``sigma(x, u)``, ``[B, S]``."""

    @abc.abstractmethod
    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """Payout per unit time, ``[B]``; a step of length ``dt`` earns ``rate * dt``."""

    @abc.abstractmethod
    def terminated(self, states: torch.Tensor) -> torch.Tensor:
        """bool ``[B]``: the state is absorbing (no further rewards)."""

    def step_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """Probability ``[B]`` that a path moving from ``states`` to ``next_states`` over one
        step of length ``dt`` was not absorbed on the way.

        The default is the Euler scheme's hard rule (1 unless ``next_states`` is terminal):
        piecewise constant, so its derivative carries no information about the boundary.
        A model whose boundary crossing between grid times has a known law (GHM: the
        Brownian-bridge formula) overrides it with a probability that is continuous in
        both end points, which the pathwise solver differentiates."""
        return (~self.terminated(next_states)).to(states.dtype)

    def held_control_steps(
        self, states: torch.Tensor, controls: torch.Tensor, state_noise: torch.Tensor, dt: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` Euler-Maruyama steps with the controls held, ignoring absorption.

        Args:
            states: ``[B, S]`` at the start of the interval.
            controls: ``[B, A]`` applied at every step of the interval.
            state_noise: ``[B, n, S]`` standard normals ``eps_j`` of the ``n`` steps.
            dt: time step.

        Returns:
            ``(path [B, n, S], rewards [B, n])``: ``path[:, j]`` is the state after step
            ``j``, ``x_{j+1} = x_j + drift(x_j, u) dt + diffusion(x_j, u) sqrt(dt) eps_j``,
            and ``rewards[:, j] = reward_rate(x_j, u) dt``. The simulator applies the
            absorption (and its freezing of the state) afterwards.

        This default takes the steps one by one. A model whose held-control step is
        affine in the state overrides it with one batched expression for all ``n``
        steps (GHM: :meth:`pglab.envs.ghm.GHMModel.held_control_steps`)."""
        sqrt_dt = dt**0.5
        path, rewards, state = [], [], states
        for step in range(state_noise.shape[1]):
            rewards.append(self.reward_rate(state, controls) * dt)
            state = (
                state
                + self.drift(state, controls) * dt
                + self.diffusion(state, controls) * (sqrt_dt * state_noise[:, step])
            )
            path.append(state)
        return torch.stack(path, dim=1), torch.stack(rewards, dim=1)

    def initial_states(
        self,
        num_paths: int,
        generator: torch.Generator | None = None,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Initial states, uniform on ``[initial_low, initial_high]`` (default: the
        state box), ``[num_paths, S]``."""
        low = torch.tensor(self.initial_low, dtype=dtype, device=device)
        high = torch.tensor(self.initial_high, dtype=dtype, device=device)
        unit = torch.rand((num_paths, self.state_dim), generator=generator, device=device, dtype=dtype)
        return low + (high - low) * unit

    @property
    def initial_low(self) -> tuple[float, ...]:
        return self.state_low

    @property
    def initial_high(self) -> tuple[float, ...]:
        return self.state_high

    def terminal_value(self, states: torch.Tensor) -> torch.Tensor:
        """Value received on absorption (0 for liquidation at zero cash), ``[B]``."""
        return torch.zeros(states.shape[0], dtype=states.dtype, device=states.device)

    def check_batch(self, states: torch.Tensor, controls: torch.Tensor | None = None, where: str = "") -> None:
        """Contract check used at the simulator boundary."""
        dims: dict[str, int] = {}
        check_tensor("states", states, ("B", self.state_dim), (torch.float32, torch.float64), dims=dims, where=where)
        if controls is not None:
            check_tensor(
                "controls", controls, ("B", self.action_dim), (torch.float32, torch.float64), dims=dims, where=where
            )

    def describe(self) -> dict:
        """A JSON-ready description (for logs and checkpoints)."""
        return {
            "model": type(self).__name__,
            "state_names": list(self.state_names),
            "control": list(self.control.names),
        }
