"""Finite-difference reference of GHM with switching financing conditions.

The model (:class:`pglab.configs.ghm_multi.RegimeGHMParams`) has state ``(cash, s)``
with a two-state Markov regime ``s``; its value solves one HJB per regime, coupled by
the switches::

    rho V_s = max_u [ f_s(u) + b_s(c, u) V_s' + 0.5 sigma_s^2 V_s'' ] + q_s (V_{1-s} - V_s)
    V_s(0) = 0                                   (q_0 = q01, q_1 = q10)

Each regime is discretised as the 1-D reference (:mod:`pglab.hjb.fd`): the upwind
Markov-chain scheme on ``c_i = i h``, ``i = 0..N``, absorbing at ``c = 0`` and reflecting
at ``x_max``, with the same candidate grid of controls. The switch is one more transition
of the chain, from node ``(i, s)`` to ``(i, 1 - s)`` at rate ``q_s``, so the scheme stays
monotone (an M-matrix) and converges to the viscosity solution as ``h -> 0``.

Policy iteration alternates

* policy evaluation: the ``2N`` unknowns ordered ``(V_{0,1}, V_{1,1}, V_{0,2}, ...)``
  form a banded system with two bands on each side (each regime's tridiagonal system of
  :func:`pglab.hjb.fd._policy_bands`, interleaved, plus the switching rates), solved
  directly;
* policy improvement: the switching term does not depend on the control, so each
  regime's control maximises that regime's own Hamiltonian given the coupled value
  (:func:`pglab.hjb.fd._hamiltonian`),

until the policy stops changing. With ``q01 = q10 = 0`` it is two independent 1-D
solves; with identical regimes it is the 1-D solution whatever the intensities.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.linalg import solve_banded

from pglab.configs.ghm import FD_POINTS_PER_CONTROL
from pglab.configs.ghm_multi import REGIMES, RegimeGHMParams
from pglab.envs.ghm import GHMModel
from pglab.hjb.fd import (
    FDSolution,
    _coefficients,
    _control_candidates,
    _hamiltonian,
    _improved_choice,
    _initial_choice,
    _policy_bands,
    extrapolate,
)
from pglab.validation import check_int, check_positive


@dataclass
class RegimeFDSolution:
    """The solved coupled HJB: one :class:`~pglab.hjb.fd.FDSolution` per regime on a
    shared cash grid (value, optimal controls, thresholds of that regime)."""

    regimes: tuple[FDSolution, ...]
    iterations: int
    converged: bool
    meta: dict = field(default_factory=dict)

    @property
    def grid(self) -> np.ndarray:
        """The cash grid ``[N+1]`` shared by the regimes."""
        return self.regimes[0].grid

    def value_at(self, cash, regime) -> np.ndarray:
        """``V_s(c)`` at ``cash`` in ``regime`` (each an array or a scalar, broadcast
        together; linear interpolation in cash as :meth:`FDSolution.value_at`)."""
        cash, regime = np.broadcast_arrays(np.asarray(cash, dtype=np.float64), _regime_array(regime))
        values = np.stack([solution.value_at(cash) for solution in self.regimes])
        return np.take_along_axis(values, regime[None], axis=0)[0]

    def control_at(self, cash, regime) -> np.ndarray:
        """Optimal controls ``[n, A]`` at ``n`` states (cash at the nearest grid node)."""
        cash, regime = np.broadcast_arrays(np.atleast_1d(np.asarray(cash, dtype=np.float64)), _regime_array(regime))
        controls = np.stack([solution.control_at(cash) for solution in self.regimes])  # [S, n, A]
        return controls[regime, np.arange(cash.shape[0])]

    def thresholds(self, low_fraction: float = 0.5) -> tuple[dict[str, float | None], ...]:
        """Each regime's thresholds (:meth:`FDSolution.thresholds`): its dividend barrier
        and the upper end of its issuance region."""
        return tuple(solution.thresholds(low_fraction) for solution in self.regimes)


def _regime_array(regime) -> np.ndarray:
    regime = np.asarray(regime)
    if not np.isin(regime, REGIMES).all():
        raise ValueError(f"regime must be 0 or 1, got {regime!r}")
    return regime.astype(np.int64)


def _coupled_bands(bands: list[np.ndarray], rhs: list[np.ndarray], switch_rates: tuple[float, ...]):
    """Interleave two regimes' tridiagonal systems (``[3, N]`` bands and ``[N]`` right-hand
    sides, :func:`_policy_bands`) into the coupled system on ``(V_{0,1}, V_{1,1}, V_{0,2},
    ...)``: ``[5, 2N]`` bands in ``solve_banded((2, 2))`` layout and ``[2N]`` right side.
    Regime ``s`` leaves at rate ``q_s`` for the other regime at the same cash."""
    num = rhs[0].shape[0]
    banded = np.zeros((5, 2 * num))
    for regime in REGIMES:
        columns = slice(regime, None, 2)
        banded[0, columns] = bands[regime][0]  # V_{s,i+1} in the row of V_{s,i}
        banded[2, columns] = bands[regime][1] + switch_rates[regime]
        banded[4, columns] = bands[regime][2]  # V_{s,i-1} in the row of V_{s,i}
    banded[1, 1::2] = -switch_rates[0]  # V_{1,i} in the row of V_{0,i}
    banded[3, 0::2] = -switch_rates[1]  # V_{0,i} in the row of V_{1,i}
    return banded, np.stack(rhs, axis=1).reshape(-1)


def _evaluate_coupled(rewards, lowers, uppers, rho, boundaries, switch_rates) -> np.ndarray:
    """The value ``[2, N]`` of one policy per regime: rates ``[2, N]`` each."""
    bands, rhs = zip(
        *(_policy_bands(rewards[s], lowers[s], uppers[s], rho, boundaries[s]) for s in REGIMES), strict=True
    )
    banded, right = _coupled_bands(list(bands), list(rhs), switch_rates)
    return solve_banded((2, 2), banded, right).reshape(-1, 2).T


def _regime_solution(model, grid, value_inner, boundary, controls, iterations, converged, meta) -> FDSolution:
    """One regime's part of the coupled solution as an :class:`FDSolution` (node 0 holds
    the boundary value and copies node 1's control, as in :func:`solve_hjb_1d`)."""
    return FDSolution(
        grid=grid,
        value=np.concatenate([[boundary], value_inner]),
        controls=np.concatenate([controls[:1], controls], axis=0),
        iterations=iterations,
        converged=converged,
        control_names=tuple(model.control.names),
        meta=dict(meta),
    )


def solve_regimes(
    params: RegimeGHMParams,
    *,
    x_max: float = 6.0,
    num_nodes: int = 12_000,
    points_per_control: int = FD_POINTS_PER_CONTROL,
    max_iterations: int = 200,
) -> RegimeFDSolution:
    """Solve the coupled HJB on ``[0, x_max]`` with ``num_nodes`` cash intervals by policy
    iteration (module docstring). Memory: two regimes' ``[21**2, N]`` rate arrays."""
    check_positive("x_max", x_max)
    check_int("num_nodes", num_nodes, minimum=10)
    check_int("points_per_control", points_per_control, minimum=2)
    models = [GHMModel(params.regime(regime)) for regime in REGIMES]
    grid = np.linspace(0.0, x_max, num_nodes + 1)
    h = grid[1] - grid[0]
    candidates = _control_candidates(models[0], points_per_control)
    rates = [_coefficients(model, grid, candidates, h) for model in models]  # per regime (f, l, u) [K, N]
    boundaries = [float(model.terminal_value(torch.zeros(1, 1, dtype=torch.float64))[0]) for model in models]
    switch_rates = tuple(params.switch_rate(regime) for regime in REGIMES)
    nodes = np.arange(num_nodes)
    choice = np.full((len(REGIMES), num_nodes), _initial_choice(candidates))
    value = np.zeros((len(REGIMES), num_nodes))
    converged, iteration = False, 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 - the count is the solution's `iterations`
        reward, lower, upper = (np.stack([rates[s][part][choice[s], nodes] for s in REGIMES]) for part in range(3))
        value = _evaluate_coupled(reward, lower, upper, params.rho, boundaries, switch_rates)
        new_choice = np.empty_like(choice)
        for regime in REGIMES:
            reward_all, lower_all, upper_all = rates[regime]
            hamiltonian = _hamiltonian(reward_all, lower_all, upper_all, value[regime], boundaries[regime])  # [K, N]
            best = hamiltonian.argmax(axis=0)
            current = hamiltonian[choice[regime], nodes]
            new_choice[regime] = _improved_choice(best, hamiltonian[best, nodes], current, choice[regime])
        if np.array_equal(new_choice, choice):
            converged = True
            break
        choice = new_choice
    meta = {"x_max": x_max, "num_nodes": num_nodes, "points_per_control": points_per_control, "h": h}
    regimes = tuple(
        _regime_solution(models[s], grid, value[s], boundaries[s], candidates[choice[s]], iteration, converged, meta)
        for s in REGIMES
    )
    return RegimeFDSolution(regimes=regimes, iterations=iteration, converged=converged, meta=meta)


def solve_regimes_extrapolated(
    params: RegimeGHMParams,
    *,
    x_max: float = 6.0,
    num_nodes: int = 12_000,
    points_per_control: int = FD_POINTS_PER_CONTROL,
) -> RegimeFDSolution:
    """Richardson-extrapolated reference, each regime ``V_s = 2 V_{s,h} - V_{s,2h}``
    (:func:`pglab.hjb.fd.extrapolate`; the scheme is first order in ``h``). Controls are
    the fine grid's; ``meta["extrapolation_change"]`` is the largest correction."""
    fine = solve_regimes(params, x_max=x_max, num_nodes=num_nodes, points_per_control=points_per_control)
    coarse = solve_regimes(params, x_max=x_max, num_nodes=num_nodes // 2, points_per_control=points_per_control)
    regimes = tuple(extrapolate(f, c) for f, c in zip(fine.regimes, coarse.regimes, strict=True))
    change = max(solution.meta["extrapolation_change"] for solution in regimes)
    meta = {**fine.meta, "extrapolated": True, "extrapolation_change": change, "converged_coarse": coarse.converged}
    return RegimeFDSolution(
        regimes=regimes, iterations=fine.iterations, converged=fine.converged and coarse.converged, meta=meta
    )


__all__ = ["RegimeFDSolution", "solve_regimes", "solve_regimes_extrapolated"]
