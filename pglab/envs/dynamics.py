"""The pluggable interface of a controlled continuous-time model with any number of states.

A model is a controlled diffusion with Markov regime switches, a payout stream and an
absorbing set::

    dX_t = drift(X_t, u_t) dt + diffusion_matrix(X_t, u_t) dW_t     W: w independent Brownian motions
    J(x) = E[ integral_0^tau exp(-rho t) reward_rate(X_t, u_t) dt | X_0 = x ]
    tau  = first time X_t is in the absorbing set (``terminated``)

with controls ``u`` in a box (:class:`ControlSpec`). Everything pglab needs to simulate
it (:class:`pglab.envs.simulator.TrajectorySimulator`), train on it and compare it with
an exact reference (the model's ``reference``: :mod:`pglab.hjb.fd` for one state) comes
from these methods; a new model is one small subclass (docs/ghm-models.md).

Shapes. All methods take and return tensors with a leading batch axis: states ``[B, d]``,
controls ``[B, A]``, Brownian increments ``[B, w]``. They must be pure tensor expressions
(no Python loop over the batch or over the state's coordinates) and differentiable in
states and controls where the model is smooth, so the pathwise solver can backpropagate
through them. :meth:`ContinuousTimeModel.check_outputs` checks the shapes and dtypes of
what a model returns (the simulators call it once per rollout).

Noise. The default is diagonal: ``w = d`` and coordinate ``i`` is driven by its own
Brownian motion with volatility ``diffusion(x, u)[:, i]`` (``[B, d]``); the 1-D models are
this case, and their step is ``x + drift dt + diffusion sqrt(dt) eps``. A model with
correlated noise sets ``diagonal_noise = False``, ``noise_dim = w`` and implements
``diffusion_matrix`` ``[B, d, w]``; the step then adds ``diffusion_matrix @ eps sqrt(dt)``
(:meth:`ContinuousTimeModel.shock`, one batched matrix product).

Regimes. A finite-state Markov chain (``regimes``, :class:`MarkovRegimes`) is one
coordinate of the state holding the regime's index ``0, 1, ..., K-1`` as a float; it has
no drift and no diffusion (its row of the diffusion matrix is 0), and the model's other
methods read the regime from the state. Between two grid times the simulators draw the
next regime from the chain's transition matrix ``expm(Q dt)`` (exact at grid times) with
one uniform per path and step: the :meth:`ContinuousTimeModel.jump` hook, applied after
the Euler-Maruyama step::

    x'     = x + drift(x, u) dt + shock(x, u, sqrt(dt) eps)       (Euler-Maruyama)
    x_next = jump(x, x', u, uniforms)                             (regime switch; parts killed)

Absorption. ``terminated`` marks the absorbing set: a path that enters it earns nothing
more and stays where it is. With ``absorption="bridge"`` a path is also absorbed inside a
step with probability ``1 - step_survival`` (GHM: the Brownian-bridge probability of
touching 0 between the grid times). A model may instead consist of ``num_parts > 1``
independently absorbed parts (N divisions of a firm, each liquidated when its own cash
runs out): its dynamics freeze a part whose state is terminal and stop that part's payout
(``reward_rate_parts``), ``terminated`` is "every part is", and with bridge absorption the
:meth:`ContinuousTimeModel.jump` hook kills each part between the grid times with
probability ``1 - part_survival`` (one uniform per part and step) through the model's
``liquidate_parts``. The uniforms of a step are ordered: the parts' (bridge absorption
only), then the regime's.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pglab.contracts import check_tensor

if TYPE_CHECKING:  # pglab.hjb imports this module
    from pglab.hjb.reference import ValueReference

_FLOATS = (torch.float32, torch.float64)


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


@dataclass(frozen=True)
class MarkovRegimes:
    """A continuous-time Markov chain on ``K`` regimes, held in one state coordinate.

    Attributes:
        coordinate: the index of the state coordinate holding the regime ``0..K-1`` (a float).
        rates: ``K x K`` switching intensities, ``rates[i][j]`` from regime ``i`` to ``j``
            (``i != j``; the diagonal must be 0, the generator's diagonal is implied).
    """

    coordinate: int
    rates: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        count = len(self.rates)
        if count < 2 or any(len(row) != count for row in self.rates):
            raise ValueError(f"MarkovRegimes: rates must be a K x K matrix with K >= 2, got {self.rates}")
        for i, row in enumerate(self.rates):
            for j, rate in enumerate(row):
                if not (rate >= 0.0 and rate < float("inf")) or (i == j and rate != 0.0):
                    raise ValueError(f"MarkovRegimes: rates[{i}][{j}] = {rate} (finite, >= 0, 0 on the diagonal)")

    @property
    def count(self) -> int:
        return len(self.rates)

    def transition_matrix(self, dt: float, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``P = expm(Q dt)``, ``[K, K]``: ``P[i, j]`` is the probability of being in regime
        ``j`` at ``t + dt`` given regime ``i`` at ``t`` (any number of switches in between)."""
        rates = torch.tensor(self.rates, dtype=torch.float64)
        generator = rates - torch.diag(rates.sum(1))
        return torch.linalg.matrix_exp(generator * dt).to(dtype)

    def switch(self, states: torch.Tensor, uniforms: torch.Tensor, dt: float) -> torch.Tensor:
        """The regime at the next grid time for every path, ``[B, d]``: the regime coordinate
        of ``states`` redrawn from row ``P[regime]`` by inversion with ``uniforms [B]`` (the
        first ``j`` whose cumulative probability exceeds the uniform)."""
        current = states[:, self.coordinate].long()
        cumulative = _cumulative_transitions(self, dt, states.dtype, states.device)  # [K, K]
        drawn = (uniforms.unsqueeze(1) >= cumulative.index_select(0, current)).sum(1).clamp(max=self.count - 1)
        regime = drawn.to(states.dtype).unsqueeze(1)
        column = torch.arange(states.shape[1], device=states.device) == self.coordinate
        return torch.where(column, regime, states)


@functools.lru_cache(maxsize=64)
def _cumulative_transitions(
    regimes: MarkovRegimes, dt: float, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``cumsum(P, 1)`` of :meth:`MarkovRegimes.transition_matrix`, computed once per chain,
    step, dtype and device (a matrix exponential at every step of every rollout cost more
    than the switch itself); callers only read it."""
    return regimes.transition_matrix(dt, dtype=dtype).to(device).cumsum(1)


@dataclass(frozen=True)
class EvaluationPoint:
    """An initial state at which a trained policy is judged against the reference.

    Attributes:
        label: names the point in metric names and tables (``c0.25``: cash 0.25).
        state: the model's state, ``d`` floats.
        cash: for a one-state cash model, the initial cash (its table reports cash, which
            may differ from the state: the credit line's state is cash + credit_limit).
    """

    label: str
    state: tuple[float, ...]
    cash: float | None = None


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
    #: coordinate ``i`` driven by its own Brownian motion (``diffusion``); ``False``: a
    #: diffusion matrix ``[B, d, noise_dim]`` (``diffusion_matrix``)
    diagonal_noise: bool = True
    #: the Markov regime component (``None``: no regimes)
    regimes: MarkovRegimes | None = None
    #: independently absorbed parts (1: a path is absorbed as a whole)
    num_parts: int = 1
    #: the coordinates in the units of the one-state reference's grid (cash, for the GHM
    #: models): the evaluation levels, the FD grid's length and collocation intervals apply to them
    cash_coordinates: tuple[int, ...] = (0,)

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def action_dim(self) -> int:
        return self.control.dim

    @property
    def noise_dim(self) -> int:
        """``w``, the independent Brownian motions (the state's dimension for diagonal noise)."""
        return self.state_dim

    @abc.abstractmethod
    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """``mu(x, u)``, ``[B, d]``."""

    def diffusion(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """Diagonal volatility ``sigma(x, u)``, ``[B, d]`` (models with diagonal noise)."""
        raise NotImplementedError(
            f"{type(self).__name__}: a model with diagonal noise implements diffusion (volatility [B, d]); one with "
            "correlated noise sets diagonal_noise = False, noise_dim and diffusion_matrix ([B, d, w])"
        )

    def diffusion_matrix(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """``Sigma(x, u)``, ``[B, d, w]``: ``dX = ... + Sigma dW``. For diagonal noise the
        diagonal matrix of :meth:`diffusion`."""
        return torch.diag_embed(self.diffusion(states, controls))

    def shock(self, states: torch.Tensor, controls: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``Sigma(x, u) noise``, ``[B, d]``, for Brownian increments ``noise [B, w]``:
        ``diffusion * noise`` for diagonal noise (no matrix is formed), else one batched
        matrix product."""
        if self.diagonal_noise:
            return self.diffusion(states, controls) * noise
        return torch.bmm(self.diffusion_matrix(states, controls), noise.unsqueeze(2)).squeeze(2)

    @abc.abstractmethod
    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """Payout per unit time, ``[B]``; a step of length ``dt`` earns ``rate * dt``."""

    def reward_rate_parts(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        """The payout rate of each part, ``[B, num_parts]``; they sum to :meth:`reward_rate`."""
        return self.reward_rate(states, controls).unsqueeze(1)

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

    def part_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """:meth:`step_survival` of each part, ``[B, num_parts]`` (the path's own for one part)."""
        return self.step_survival(states, next_states, controls, dt).unsqueeze(1)

    def liquidate_parts(self, states: torch.Tensor, killed: torch.Tensor) -> torch.Tensor:
        """``states [B, d]`` with the parts ``killed [B, num_parts]`` (bool) absorbed: a model
        with several parts marks them terminal in the state (its dynamics then freeze them)."""
        raise NotImplementedError(f"{type(self).__name__} has num_parts={self.num_parts} but no liquidate_parts")

    def jump_dim(self, *, bridge: bool) -> int:
        """Uniforms per path and step that :meth:`jump` consumes (0: the model has no jumps):
        one per part under bridge absorption when there are several parts, one for the regime."""
        parts = self.num_parts if bridge and self.num_parts > 1 else 0
        return parts + (1 if self.regimes is not None else 0)

    def jump(
        self,
        states: torch.Tensor,
        next_states: torch.Tensor,
        controls: torch.Tensor,
        uniforms: torch.Tensor,
        dt: float,
        *,
        bridge: bool,
    ) -> torch.Tensor:
        """The state after a step's jumps, ``[B, d]``: ``next_states`` (the Euler-Maruyama step
        from ``states``) with the parts killed between the grid times (``bridge``, several
        parts: part ``k`` when ``uniforms[:, k] >= part_survival[:, k]``) and the regime
        redrawn (:meth:`MarkovRegimes.switch`, the last uniform). ``uniforms [B, jump_dim]``."""
        column = 0
        if bridge and self.num_parts > 1:
            survival = self.part_survival(states, next_states, controls, dt)
            next_states = self.liquidate_parts(next_states, uniforms[:, : self.num_parts] >= survival)
            column = self.num_parts
        if self.regimes is not None:
            next_states = self.regimes.switch(next_states, uniforms[:, column], dt)
        return next_states

    def held_control_steps(
        self, states: torch.Tensor, controls: torch.Tensor, state_noise: torch.Tensor, dt: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` Euler-Maruyama steps with the controls held, ignoring absorption and jumps.

        Args:
            states: ``[B, d]`` at the start of the interval.
            controls: ``[B, A]`` applied at every step of the interval.
            state_noise: ``[B, n, w]`` standard normals ``eps_j`` of the ``n`` steps.
            dt: time step.

        Returns:
            ``(path [B, n, d], rewards [B, n])``: ``path[:, j]`` is the state after step
            ``j``, ``x_{j+1} = x_j + drift(x_j, u) dt + shock(x_j, u, sqrt(dt) eps_j)``,
            and ``rewards[:, j] = reward_rate(x_j, u) dt``. The simulator applies the
            absorption (and its freezing of the state) afterwards.

        This default takes the steps one by one. A model whose held-control step is
        affine in the state overrides it with one batched expression for all ``n``
        steps (GHM: :meth:`pglab.envs.ghm.GHMModel.held_control_steps`)."""
        sqrt_dt = dt**0.5
        path, rewards, state = [], [], states
        for step in range(state_noise.shape[1]):
            rewards.append(self.reward_rate(state, controls) * dt)
            shock = self.shock(state, controls, sqrt_dt * state_noise[:, step])
            state = state + self.drift(state, controls) * dt + shock
            path.append(state)
        return torch.stack(path, dim=1), torch.stack(rewards, dim=1)

    def held_jump_steps(
        self,
        states: torch.Tensor,
        controls: torch.Tensor,
        state_noise: torch.Tensor,
        jump_noise: torch.Tensor,
        dt: float,
        *,
        bridge: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`held_control_steps` with the model's jumps after every step (``jump_noise
        [B, n, jump_dim]`` uniforms): ``(path [B, n, d], rewards [B, n], euler [B, n, d])``,
        ``euler[:, j]`` the state after step ``j``'s Euler-Maruyama step, before its jumps
        (what a control variate of the Brownian increments needs)."""
        sqrt_dt = dt**0.5
        path, rewards, euler, state = [], [], [], states
        for step in range(state_noise.shape[1]):
            rewards.append(self.reward_rate(state, controls) * dt)
            shock = self.shock(state, controls, sqrt_dt * state_noise[:, step])
            moved = state + self.drift(state, controls) * dt + shock
            euler.append(moved)
            state = self.jump(state, moved, controls, jump_noise[:, step], dt, bridge=bridge)
            path.append(state)
        return torch.stack(path, dim=1), torch.stack(rewards, dim=1), torch.stack(euler, dim=1)

    def initial_states(
        self,
        num_paths: int,
        generator: torch.Generator | None = None,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Initial states, uniform on ``[initial_low, initial_high]`` (default: the
        state box), ``[num_paths, d]``."""
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

    # -- what a trainer compares the learned policy with -------------------------------------

    def evaluation_points(self, levels: Sequence[float]) -> list[EvaluationPoint]:
        """The initial states of the final table for the user's ``levels`` (``eval_cash``):
        by default every coordinate at each level."""
        return [EvaluationPoint(f"x{level:g}", (float(level),) * self.state_dim) for level in levels]

    def reference(self, *, x_max: float, num_nodes: int) -> ValueReference:
        """The exact optimum ``V*`` (:class:`pglab.hjb.reference.ValueReference`): for one
        state the Richardson-extrapolated FD solution on ``[0, x_max]`` with ``num_nodes``
        intervals (:func:`pglab.hjb.fd.solve_hjb_1d_extrapolated`). A model with more states
        overrides it with its own exact solution."""
        if self.state_dim != 1:
            raise NotImplementedError(f"{type(self).__name__} has {self.state_dim} states: it overrides reference")
        from pglab.hjb.fd import solve_hjb_1d_extrapolated
        from pglab.hjb.reference import FDReference

        return FDReference(solve_hjb_1d_extrapolated(self, x_max=x_max, num_nodes=num_nodes))

    def grid_check_models(self) -> list[ContinuousTimeModel]:
        """The one-state models whose finite-difference grid a trainer checks before it starts
        (the problems the reference solves; the GHM models: their barrier must lie inside the
        grid). None by default."""
        return []

    def reference_from_arrays(self, arrays: Mapping[str, Any]) -> ValueReference:
        """The reference stored by ``reference(...).to_arrays()`` (a run's ``fd_reference.npz``)."""
        from pglab.hjb.reference import FDReference

        return FDReference.from_arrays(arrays, self.control.names)

    def state_from_cash(self, cash):
        """The model's state for the user's coordinates (cash, for the GHM models): the
        coordinates themselves, unless the model shifts its state (the credit line's is
        liquidity, cash + credit_limit)."""
        return cash

    def cash_from_state(self, states):
        """The user's coordinates of model states: the inverse of :meth:`state_from_cash`."""
        return states

    def check_batch(self, states: torch.Tensor, controls: torch.Tensor | None = None, where: str = "") -> None:
        """Contract check used at the simulator boundary."""
        dims: dict[str, int] = {}
        check_tensor("states", states, ("B", self.state_dim), _FLOATS, dims=dims, where=where)
        if controls is not None:
            check_tensor("controls", controls, ("B", self.action_dim), _FLOATS, dims=dims, where=where)

    def check_outputs(self, states: torch.Tensor, dt: float, where: str = "") -> None:
        """Contract check of the model's methods on (the first two of) ``states [B, d]``
        with the control box's lower corner: drift ``[B, d]``, diffusion ``[B, d]`` (diagonal)
        or diffusion matrix ``[B, d, w]``, reward rates ``[B]`` and ``[B, num_parts]``,
        ``terminated`` bool ``[B]``, and the state after the jumps ``[B, d]``. A
        :class:`~pglab.errors.TensorContractError` names the method whose output is wrong."""
        self.check_batch(states, where=where)
        states = states[:2].detach()
        low, _ = self.control.bounds(states)
        controls = low.expand(states.shape[0], -1)
        name = type(self).__name__
        dims = {"B": states.shape[0]}
        with torch.no_grad():
            drift = self.drift(states, controls)
            check_tensor(f"{name}.drift", drift, ("B", self.state_dim), _FLOATS, dims=dims, where=where)
            if self.diagonal_noise:
                volatility = self.diffusion(states, controls)
                check_tensor(f"{name}.diffusion", volatility, ("B", self.state_dim), _FLOATS, dims=dims, where=where)
            matrix = self.diffusion_matrix(states, controls)
            shape = ("B", self.state_dim, self.noise_dim)
            check_tensor(f"{name}.diffusion_matrix", matrix, shape, _FLOATS, dims=dims, where=where)
            rate = self.reward_rate(states, controls)
            check_tensor(f"{name}.reward_rate", rate, ("B",), _FLOATS, dims=dims, where=where)
            parts = self.reward_rate_parts(states, controls)
            check_tensor(f"{name}.reward_rate_parts", parts, ("B", self.num_parts), _FLOATS, dims=dims, where=where)
            check_tensor(f"{name}.terminated", self.terminated(states), ("B",), torch.bool, dims=dims, where=where)
            for bridge in (False, True):
                uniforms = torch.full((states.shape[0], self.jump_dim(bridge=bridge)), 0.5, dtype=states.dtype)
                jumped = self.jump(states, states, controls, uniforms.to(states.device), dt, bridge=bridge)
                check_tensor(f"{name}.jump", jumped, ("B", self.state_dim), _FLOATS, dims=dims, where=where)

    def describe(self) -> dict:
        """A JSON-ready description (for logs and checkpoints)."""
        return {
            "model": type(self).__name__,
            "state_names": list(self.state_names),
            "control": list(self.control.names),
        }
