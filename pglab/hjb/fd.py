"""Finite-difference solution of a 1-D HJB equation by policy iteration.

For a :class:`~pglab.envs.dynamics.ContinuousTimeModel` with one state ``x`` the value
function solves::

    rho V(x) = max_u [ f(x, u) + b(x, u) V'(x) + 0.5 s(x, u)^2 V''(x) ]   on (0, x_max]
    V(0) = terminal value (0 for GHM)

(``f`` reward rate, ``b`` drift, ``s`` volatility). We use the upwind scheme of the
Markov-chain approximation (Kushner & Dupuis): on the grid ``x_i = i h``

    rho V_i = f_i + b_i^+ (V_{i+1} - V_i)/h - b_i^- (V_i - V_{i-1})/h
                  + 0.5 s_i^2 (V_{i+1} - 2 V_i + V_{i-1})/h^2

which is monotone (an M-matrix), so it converges to the viscosity solution as ``h -> 0``.
``drift_scheme="central"`` replaces the upwind drift by the central ``b_i (V_{i+1} -
V_{i-1}) / (2h)`` wherever the diffusion keeps that monotone (:func:`move_rates`).
At ``x_max`` the boundary is reflecting (``V_{N+1} = V_N``): choose ``x_max`` far beyond
the region of interest. Policy iteration alternates a tridiagonal solve (policy
evaluation) with a node-wise maximisation over a candidate set of controls (policy
improvement) until the policy stops changing.

The candidate set is a uniform grid over each control's box (both ends included). For
models whose Hamiltonian is linear in the controls (GHM) the maximum over the box is at
an end, except at the single kink where the upwinded drift changes sign; the grid's
interior points cover that case to within the grid spacing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.linalg import solve_banded

from pglab.configs.ghm import FD_POINTS_PER_CONTROL
from pglab.envs.dynamics import ContinuousTimeModel
from pglab.validation import check_choice, check_int, check_positive


@dataclass
class FDSolution:
    """A solved HJB on a grid.

    Attributes:
        grid: ``[N+1]`` states ``x_i = i h`` (NumPy float64).
        value: ``[N+1]`` ``V_i``.
        controls: ``[N+1, A]`` the optimal control at each node (node 0 copies node 1).
        iterations: policy-iteration steps taken. converged: the policy stopped changing.
    """

    grid: np.ndarray
    value: np.ndarray
    controls: np.ndarray
    iterations: int
    converged: bool
    control_names: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)

    @property
    def step(self) -> float:
        return float(self.grid[1] - self.grid[0])

    def value_at(self, states) -> np.ndarray:
        """Linear interpolation of ``V`` (states beyond ``x_max`` take ``V(x_max)``)."""
        return np.interp(np.asarray(states, dtype=np.float64), self.grid, self.value)

    def control_at(self, states) -> np.ndarray:
        """Optimal controls at ``states`` (nearest grid node), ``[len(states), A]``."""
        index = np.clip(np.rint(np.asarray(states, dtype=np.float64) / self.step).astype(int), 0, len(self.grid) - 1)
        return self.controls[index]

    def derivatives(self) -> tuple[np.ndarray, np.ndarray]:
        """Central finite differences ``(V', V'')`` at interior nodes, ``[N+1]`` each
        (one-sided at the ends)."""
        h = self.step
        first = np.gradient(self.value, h)
        second = np.zeros_like(self.value)
        second[1:-1] = (self.value[2:] - 2 * self.value[1:-1] + self.value[:-2]) / h**2
        second[0], second[-1] = second[1], second[-2]
        return first, second

    def thresholds(self, low_fraction: float = 0.5) -> dict[str, float | None]:
        """For each control, the lowest state where it is at least ``low_fraction`` of
        its maximum (the dividend barrier), and for controls used only at low states the
        highest such state (the issuance region's upper end). ``None`` if never used."""
        out: dict[str, float | None] = {}
        for j, name in enumerate(self.control_names or [f"u{j}" for j in range(self.controls.shape[1])]):
            column = self.controls[1:, j]
            top = column.max()
            if top <= 0:
                out[name] = None
                continue
            on = column >= low_fraction * top
            states = self.grid[1:][on]
            # A control switched on at high states has a lower threshold; one used near
            # zero (issuance) ends at an upper threshold.
            out[name] = float(states.min()) if on[-1] else float(states.max())
        return out


def _control_candidates(model: ContinuousTimeModel, points_per_control: int) -> np.ndarray:
    axes = [
        np.linspace(lo, hi, points_per_control if hi > lo else 1)
        for lo, hi in zip(model.control.low, model.control.high, strict=False)
    ]
    return np.array(list(itertools.product(*axes)), dtype=np.float64)


DRIFT_SCHEMES = ("upwind", "central")
"""How a drift enters the transition rates (:func:`move_rates`)."""


def move_rates(drift, diffusion_rate, h: float, drift_scheme: str = "upwind") -> tuple[np.ndarray, np.ndarray]:
    """Rates ``(down, up)`` of the chain's moves to a coordinate's two neighbours at
    distance ``h``: the diffusion's ``diffusion_rate`` (``s^2 / (2 h^2)``, NumPy arrays or
    floats) on each side plus the drift's.

    upwind: ``b^+ / h`` up, ``b^- / h`` down -- first order in ``h``. central: ``+- b / (2 h)``
    where that leaves both rates non-negative (``|b| h <= s^2``), upwind elsewhere -- second
    order where the diffusion dominates at the grid's scale. Both keep every rate >= 0, so
    the scheme stays monotone."""
    drift = np.asarray(drift, dtype=np.float64)
    down = diffusion_rate + np.maximum(-drift, 0.0) / h
    up = diffusion_rate + np.maximum(drift, 0.0) / h
    if drift_scheme == "upwind":
        return down, up
    half = drift / (2 * h)
    central = central_applies(drift, diffusion_rate, h)
    return np.where(central, diffusion_rate - half, down), np.where(central, diffusion_rate + half, up)


def central_applies(drift, diffusion_rate, h: float) -> np.ndarray:
    """Where :func:`move_rates`' central scheme keeps both rates non-negative:
    ``diffusion_rate >= |drift| / (2 h)``."""
    return np.asarray(diffusion_rate >= np.abs(np.asarray(drift, dtype=np.float64)) / (2 * h))


def _node_coefficients(
    model: ContinuousTimeModel, states: torch.Tensor, controls: torch.Tensor, h: float, drift_scheme: str = "upwind"
):
    """Reward and the scheme's lower and upper transition rates (:func:`move_rates`) at
    ``states [N, 1]`` under ``controls [N, A]`` (float64): three arrays ``[N]``."""
    drift = model.drift(states, controls)[:, 0].numpy()
    vol = model.diffusion(states, controls)[:, 0].numpy()
    lower, upper = move_rates(drift, 0.5 * vol**2 / h**2, h, drift_scheme)
    return model.reward_rate(states, controls).numpy(), lower, upper


def _coefficients(
    model: ContinuousTimeModel, grid: np.ndarray, candidates: np.ndarray, h: float, drift_scheme: str = "upwind"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reward, lower and upper transition rates for every (node, candidate):
    arrays ``[K, N]`` for the interior nodes ``1..N``."""
    states = torch.as_tensor(grid[1:], dtype=torch.float64).unsqueeze(1)  # [N, 1]
    num_nodes = states.shape[0]
    per_candidate = [
        _node_coefficients(
            model, states, torch.as_tensor(candidate, dtype=torch.float64).expand(num_nodes, -1), h, drift_scheme
        )
        for candidate in candidates
    ]
    rewards, lowers, uppers = zip(*per_candidate, strict=False)
    return np.stack(rewards), np.stack(lowers), np.stack(uppers)


def _policy_bands(reward, lower, upper, rho, boundary_value):
    """The banded matrix ``[3, N]`` (scipy's ``solve_banded((1, 1))`` layout) and right-hand
    side ``[N]`` of ``(rho + l + u) V_i - l V_{i-1} - u V_{i+1} = f_i`` for nodes 1..N with
    ``V_0 = boundary_value`` and a reflecting top node (``V_{N+1} = V_N``)."""
    num = reward.shape[0]
    diagonal = rho + lower + upper
    diagonal[-1] -= upper[-1]  # reflecting: V_{N+1} = V_N
    rhs = reward.copy()
    rhs[0] += lower[0] * boundary_value
    banded = np.zeros((3, num))
    banded[0, 1:] = -upper[:-1]  # super-diagonal
    banded[1] = diagonal
    banded[2, :-1] = -lower[1:]  # sub-diagonal
    return banded, rhs


def _evaluate_policy(reward, lower, upper, rho, boundary_value):
    """The value of one policy on nodes 1..N: the solution of :func:`_policy_bands`' system."""
    return solve_banded((1, 1), *_policy_bands(reward, lower, upper, rho, boundary_value))


def _hamiltonian(reward, lower, upper, value_inner, boundary_value):
    """``f + l (V_{i-1} - V_i) + u (V_{i+1} - V_i)`` at nodes 1..N for every candidate:
    ``[K, N]`` from rates ``[K, N]`` and ``value_inner [N]`` (reflecting top node)."""
    below = np.concatenate([[boundary_value], value_inner[:-1]])
    above = np.concatenate([value_inner[1:], value_inner[-1:]])
    return reward + lower * (below - value_inner) + upper * (above - value_inner)


def _improved_choice(best, best_value, current_value, choice):
    """Policy improvement's update of the candidate index per node: ``best`` where its
    Hamiltonian ``best_value`` beats the current choice's ``current_value`` by more than
    a relative 1e-12, else the current ``choice`` (ties keep it, so the iteration cannot
    cycle)."""
    improved = best_value > current_value + 1e-12 * (1.0 + np.abs(current_value))
    return np.where(improved, best, choice)


def _initial_choice(candidates: np.ndarray) -> int:
    """Policy iteration's starting candidate: the one closest to the origin (GHM: pay
    nothing, issue nothing), whose value is finite, which policy iteration needs."""
    return int(np.argmin(np.abs(candidates).sum(1)))


def solve_hjb_1d(
    model: ContinuousTimeModel,
    *,
    x_max: float = 30.0,
    num_nodes: int = 30_000,
    points_per_control: int = FD_POINTS_PER_CONTROL,
    max_iterations: int = 200,
    drift_scheme: str = "upwind",
) -> FDSolution:
    """Solve the model's HJB on ``[0, x_max]`` with ``num_nodes`` intervals.

    Returns the value, the optimal controls and convergence information. Cost: each
    policy iteration is one tridiagonal solve plus ``K`` candidate evaluations per node.
    ``drift_scheme``: upwind (the module docstring's scheme, first order) or central
    where monotone (:func:`move_rates`, second order where the diffusion dominates).
    """
    if model.state_dim != 1:
        raise ValueError(f"solve_hjb_1d: needs a 1-D state, got state_dim={model.state_dim}")
    check_positive("x_max", x_max)
    check_int("num_nodes", num_nodes, minimum=10)
    check_int("points_per_control", points_per_control, minimum=2)
    check_choice("drift_scheme", drift_scheme, DRIFT_SCHEMES)
    grid = np.linspace(0.0, x_max, num_nodes + 1)
    h = grid[1] - grid[0]
    rho = model.discount_rate
    candidates = _control_candidates(model, points_per_control)
    reward, lower, upper = _coefficients(model, grid, candidates, h, drift_scheme)
    boundary = float(model.terminal_value(torch.zeros(1, 1, dtype=torch.float64))[0])
    nodes = np.arange(num_nodes)
    choice = np.full(num_nodes, _initial_choice(candidates))
    value_inner = np.zeros(num_nodes)
    converged = False
    iteration = 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 - the count is the solution's `iterations`
        value_inner = _evaluate_policy(reward[choice, nodes], lower[choice, nodes], upper[choice, nodes], rho, boundary)
        hamiltonian = _hamiltonian(reward, lower, upper, value_inner, boundary)  # [K, N]
        best = hamiltonian.argmax(axis=0)
        new_choice = _improved_choice(best, hamiltonian[best, nodes], hamiltonian[choice, nodes], choice)
        if np.array_equal(new_choice, choice):
            converged = True
            break
        choice = new_choice
    value = np.concatenate([[boundary], value_inner])
    controls = candidates[choice]
    controls = np.concatenate([controls[:1], controls], axis=0)
    return FDSolution(
        grid=grid,
        value=value,
        controls=controls,
        iterations=iteration,
        converged=converged,
        control_names=tuple(model.control.names),
        meta={
            "x_max": x_max,
            "num_nodes": num_nodes,
            "points_per_control": points_per_control,
            "h": h,
            "drift_scheme": drift_scheme,
        },
    )


def evaluate_policy_1d(
    model: ContinuousTimeModel,
    policy: Callable[[np.ndarray], np.ndarray],
    *,
    x_max: float = 6.0,
    num_nodes: int = 12_000,
) -> FDSolution:
    """The value of a fixed feedback policy ``u(x)``: the same upwind scheme as
    :func:`solve_hjb_1d` without the maximisation, i.e. one tridiagonal solve of
    ``rho V = f(x, u(x)) + b(x, u(x)) V' + 0.5 s(x, u(x))^2 V''`` with ``V(0)`` the
    terminal value, Richardson-extrapolated over ``h`` and ``2h``.

    It is the value of the continuously applied policy, free of Monte Carlo noise and of
    the time step: for a 1-D model the exact counterpart of a simulated evaluation
    (:func:`pglab.algos.ghm_eval.simulate_policy_value`, which applies the policy every
    ``dt`` and monitors absorption at grid times).

    Args:
        policy: controls ``[N, A]`` (clipped to the box by the caller) at states ``[N]``
            (NumPy float64, the grid's interior nodes).
    """
    if model.state_dim != 1:
        raise ValueError(f"evaluate_policy_1d: needs a 1-D state, got state_dim={model.state_dim}")
    check_positive("x_max", x_max)
    check_int("num_nodes", num_nodes, minimum=10)
    boundary = float(model.terminal_value(torch.zeros(1, 1, dtype=torch.float64))[0])

    def solve(nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        grid = np.linspace(0.0, x_max, nodes + 1)
        controls = np.asarray(policy(grid[1:]), dtype=np.float64).reshape(nodes, -1)
        states = torch.as_tensor(grid[1:], dtype=torch.float64).unsqueeze(1)
        reward, lower, upper = _node_coefficients(model, states, torch.as_tensor(controls), grid[1] - grid[0])
        value = np.concatenate([[boundary], _evaluate_policy(reward, lower, upper, model.discount_rate, boundary)])
        return grid, value, np.concatenate([controls[:1], controls], axis=0)

    grid, fine, controls = solve(num_nodes)
    coarse_grid, coarse, _ = solve(num_nodes // 2)
    correction = richardson_correction(fine, np.interp(grid, coarse_grid, coarse))
    return FDSolution(
        grid=grid,
        value=fine + correction,
        controls=controls,
        iterations=1,
        converged=True,
        control_names=tuple(model.control.names),
        meta={
            "x_max": x_max,
            "num_nodes": num_nodes,
            "extrapolated": True,
            "extrapolation_change": float(np.abs(correction).max()),
        },
    )


def solve_hjb_1d_extrapolated(
    model: ContinuousTimeModel,
    *,
    x_max: float = 6.0,
    num_nodes: int = 24_000,
    points_per_control: int = FD_POINTS_PER_CONTROL,
) -> FDSolution:
    """Richardson-extrapolated reference: ``V = 2 V_h - V_2h``.

    The upwind scheme converges at first order in ``h`` (measured: halving ``h`` halves
    the change), so the extrapolation removes the leading error term. Controls are those
    of the fine grid; ``meta["extrapolation_change"]`` is the largest correction applied
    (an estimate of the fine grid's own error).
    """
    fine = solve_hjb_1d(model, x_max=x_max, num_nodes=num_nodes, points_per_control=points_per_control)
    coarse = solve_hjb_1d(model, x_max=x_max, num_nodes=num_nodes // 2, points_per_control=points_per_control)
    return extrapolate(fine, coarse)


def richardson_correction(value, coarse_value, order: int = 1) -> np.ndarray:
    """``(V_h - V_2h) / (2^order - 1)`` (the coarse solution given at the fine nodes):
    added to ``V_h`` it is the Richardson extrapolation of a scheme of that order in
    ``h``, ``2 V_h - V_2h`` for first order."""
    return (value - coarse_value) / (2**order - 1)


def extrapolate(fine: FDSolution, coarse: FDSolution) -> FDSolution:
    """``fine`` with its value Richardson-extrapolated against ``coarse`` (in place):
    ``V = 2 V_h - V_2h``, ``meta["extrapolation_change"]`` the largest correction, converged
    only if both solves converged."""
    correction = richardson_correction(fine.value, coarse.value_at(fine.grid))
    fine.value = fine.value + correction
    fine.meta.update(
        {
            "extrapolated": True,
            "extrapolation_change": float(np.abs(correction).max()),
            "converged_coarse": coarse.converged,
        }
    )
    fine.converged = fine.converged and coarse.converged
    return fine
