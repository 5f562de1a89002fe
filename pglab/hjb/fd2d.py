"""Finite-difference reference of GHM with a mean-reverting profitability (two states).

The model (:class:`pglab.configs.ghm_multi.OUGHMParams`) has state ``(c, mu)``::

    dc  = (mu + r c - a_L + a_E) dt + sigma dW,    dmu = kappa (mu_bar - mu) dt + sigma_mu dZ
    corr(dW, dZ) = correlation (rho_cz below),     payout a_L - (1 + lambda) a_E

and its value solves, with ``b = mu + r c - a_L + a_E``::

    rho V = max_u [ f(u) + b V_c + kappa (mu_bar - mu) V_mu
                    + 0.5 sigma^2 V_cc + rho_cz sigma sigma_mu V_cmu + 0.5 sigma_mu^2 V_mumu ]
    V(0, mu) = 0

**Grid.** ``c_i = i h_c`` (``i = 0..N_c``, ``c <= x_max``) and ``mu_j = mu_lo + j h_mu``
(``j = 0..N_mu``) on ``[mu_lo, mu_hi] = mu_bar -+ mu_std x`` the stationary standard
deviation ``sigma_mu / sqrt(2 kappa)`` (or a given range).

**Scheme** (Kushner & Dupuis' Markov-chain approximation, the 2-D form of
:mod:`pglab.hjb.fd`). Every term is a transition rate to a neighbour ``(i + di, j + dj)``
with ``V_t - V`` as its increment:

* drifts: in cash ``b`` to ``(i +- 1, j)``, in ``mu`` ``kappa (mu_bar - mu)`` to
  ``(i, j +- 1)``, each central (``+- b / (2 h_c)``) where the diffusion's rate below
  keeps both rates non-negative and upwind (``b^+ / h_c`` up, ``b^- / h_c`` down)
  elsewhere (:func:`pglab.hjb.fd.move_rates`; ``drift_scheme="upwind"``: upwind
  everywhere, as the 1-D reference);
* the cross derivative on the diagonal neighbours: ``|a_12| / (2 h_c h_mu)`` to
  ``(i+1, j+1)`` and ``(i-1, j-1)`` when ``a_12 = rho_cz sigma sigma_mu > 0``, to ``(i+1, j-1)``
  and ``(i-1, j+1)`` when it is negative;
* the second derivatives, less the diagonal moves' share: ``sigma^2 / (2 h_c^2) -
  |a_12| / (2 h_c h_mu)`` to each cash neighbour, ``sigma_mu^2 / (2 h_mu^2) - |a_12| /
  (2 h_c h_mu)`` to each ``mu`` neighbour.

The chain's first two moments are the model's (consistency), and every rate is
non-negative -- the scheme is monotone, so it converges to the viscosity solution -- if
``|rho_cz| sigma_mu h_c <= sigma h_mu <= sigma_mu h_c / |rho_cz|``. The solver refuses a
grid outside this band; its default ``h_mu`` lies inside it for any ``|rho_cz| <= 1``
(:func:`_mu_nodes`). The cross stencil is second order (its Taylor expansion leaves
``h^2`` terms), so the central scheme is second order where no drift is upwinded.

**Boundaries.** ``c = 0`` absorbs (``V = 0``, whatever ``mu``). At both ends of the
``mu`` range the chain is reflected: a move that would leave the range is mirrored back
into it (its mu part reversed, its cash part kept; Neumann, ``V_mu = 0``, with the ghost
node ``V_{N_mu + 1} = V_{N_mu - 1}``). So the reference is the value of the profitability
reflected at ``mu_lo`` and ``mu_hi``; at the defaults, widening the range from 4 to 5
standard deviations moves ``V`` by 1.4e-4 relative within 2 deviations of ``mu_bar``
(docs/ghm-solvers.md). At ``x_max`` a move up stays at the top node (``V`` continued
flat, as the 1-D reference's top node): the bounded dividend rate makes ``V -> a_L_max /
rho`` and ``V_c -> 0`` as ``c -> infinity`` (not ``V_c = 1``, the singular-control
model's dividend region), and cash far above the dividend barrier drifts down, so
``x_max`` only needs to lie well above the barrier (3 -> 4.5 moves ``V`` at cash <= 1.5
by 2e-14).

**Solution.** Policy iteration: a sparse direct solve of the policy's linear system, then
each node's control maximises its Hamiltonian over the candidate grid of
:mod:`pglab.hjb.fd` (only the cash moves depend on the control).
:func:`solve_hjb_2d_extrapolated` Richardson-extrapolates over a grid and its half (the
default reference: 400 cash intervals on ``[0, 3]``; halving both steps moves ``V`` by
4.1e-5 relative, docs/ghm-solvers.md). With ``sigma_mu = 0`` the row ``mu_j = mu_bar`` is
the 1-D reference at ``mu_bar`` with the same drift scheme.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from scipy.interpolate import RegularGridInterpolator

from pglab.configs.ghm import FD_POINTS_PER_CONTROL
from pglab.configs.ghm_multi import OUGHMParams
from pglab.envs.ghm import GHMModel
from pglab.errors import ConfigError
from pglab.hjb.fd import (
    DRIFT_SCHEMES,
    FDSolution,
    _control_candidates,
    _improved_choice,
    _initial_choice,
    central_applies,
    move_rates,
    richardson_correction,
)
from pglab.validation import check_choice, check_int, check_positive


@dataclass
class FD2DSolution:
    """A solved HJB on a ``(cash, mu)`` grid.

    Attributes:
        cash: ``[N_c+1]`` cash nodes ``c_i = i h_c``. mu: ``[N_mu+1]`` profitability nodes.
        value: ``[N_c+1, N_mu+1]`` ``V(c_i, mu_j)`` (row ``i = 0``: the liquidation value).
        controls: ``[N_c+1, N_mu+1, A]`` the optimal controls (row 0 copies row 1).
        iterations: policy-iteration steps taken. converged: the policy stopped changing.
    """

    cash: np.ndarray
    mu: np.ndarray
    value: np.ndarray
    controls: np.ndarray
    iterations: int
    converged: bool
    control_names: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)

    def _points(self, cash, mu) -> tuple[np.ndarray, tuple[int, ...]]:
        """``[n, 2]`` states clipped to the grid's box, and the broadcast input shape."""
        cash, mu = np.broadcast_arrays(np.asarray(cash, dtype=np.float64), np.asarray(mu, dtype=np.float64))
        points = np.stack(
            [np.clip(cash, self.cash[0], self.cash[-1]).ravel(), np.clip(mu, self.mu[0], self.mu[-1]).ravel()], axis=1
        )
        return points, cash.shape

    def value_at(self, cash, mu) -> np.ndarray:
        """Bilinear interpolation of ``V`` at ``(cash, mu)`` (arrays or scalars, broadcast
        together; states beyond the grid take the value at its edge)."""
        points, shape = self._points(cash, mu)
        return RegularGridInterpolator((self.cash, self.mu), self.value)(points).reshape(shape)

    def control_at(self, cash, mu) -> np.ndarray:
        """Optimal controls ``[..., A]`` at ``(cash, mu)`` (the nearest grid node)."""
        points, shape = self._points(cash, mu)
        i = np.rint(points[:, 0] / (self.cash[1] - self.cash[0])).astype(int)
        j = np.rint((points[:, 1] - self.mu[0]) / max(self.mu[1] - self.mu[0], 1e-300)).astype(int)
        return self.controls[i, j].reshape(*shape, -1)

    def at_mu(self, index: int) -> FDSolution:
        """The cash row ``mu = mu[index]`` as a 1-D :class:`FDSolution`."""
        return FDSolution(
            grid=self.cash,
            value=self.value[:, index],
            controls=self.controls[:, index],
            iterations=self.iterations,
            converged=self.converged,
            control_names=self.control_names,
            meta={**self.meta, "mu": float(self.mu[index])},
        )

    def thresholds(self, low_fraction: float = 0.5) -> dict[str, np.ndarray]:
        """Each control's threshold (:meth:`FDSolution.thresholds`: the dividend barrier,
        the issuance region's upper end) as a function of mu: ``[N_mu+1]`` per control,
        NaN where the control is never used."""
        rows = [self.at_mu(j).thresholds(low_fraction) for j in range(len(self.mu))]
        return {
            name: np.array([np.nan if row[name] is None else row[name] for row in rows]) for name in self.control_names
        }


# -- the discretisation ---------------------------------------------------------------------------


def _cross_coefficient(params: OUGHMParams) -> float:
    """``a_12 = rho_cz sigma sigma_mu``, the covariance rate of cash and profitability."""
    return params.correlation * params.sigma * params.sigma_mu


def _mu_nodes(params: OUGHMParams, h_cash: float, width: float, num_mu: int | None) -> int:
    """``num_mu``, or the default: the even count (so that the coarse grid of
    :func:`solve_hjb_2d_extrapolated` halves it exactly) whose step is at most
    ``h_c sigma_mu / (sigma t)``, ``t = (1 + |rho_cz|) / 2``, at least 2.

    ``t`` places the step inside the monotone band ``|rho_cz| <= t <= 1 / |rho_cz|``, at
    its low end's side: the diagonal moves then take ``|rho_cz| t`` of the cash
    diffusion's rate and ``|rho_cz| / t`` of the profitability's, and the cash drift, the
    larger one, stays central for ``|b| h_c <= (1 - |rho_cz| t) sigma^2``."""
    if num_mu is not None:
        check_int("num_mu", num_mu, minimum=2)
        return num_mu
    if params.sigma_mu == 0 or params.sigma == 0:
        raise ConfigError("num_mu", num_mu, "give it (and mu_range) when sigma_mu or sigma is 0")
    t = (1 + abs(params.correlation)) / 2
    return max(2, 2 * math.ceil(width * params.sigma * t / (2 * h_cash * params.sigma_mu) - 1e-9))


def _check_monotone(params: OUGHMParams, h_cash: float, h_mu: float, width: float) -> None:
    """Refuse (naming ``num_mu``) a grid on which the cross-derivative stencil has a
    negative rate."""
    cross = abs(_cross_coefficient(params)) / (h_cash * h_mu)
    cash_rate, mu_rate = params.sigma**2 / h_cash**2, params.sigma_mu**2 / h_mu**2
    if cross > (1 + 1e-12) * min(cash_rate, mu_rate):
        ratio = width * params.sigma / (h_cash * params.sigma_mu)  # num_mu at which sigma h_mu = sigma_mu h_c
        fewest = math.ceil(ratio * abs(params.correlation) - 1e-9)
        most = math.floor(ratio / abs(params.correlation) + 1e-9)
        raise ConfigError(
            "num_mu",
            round(width / h_mu),
            f"must lie in [{max(fewest, 2)}, {most}] (the scheme is monotone only if |correlation| sigma_mu h_c "
            "<= sigma h_mu <= sigma_mu h_c / |correlation|)",
        )


def _neighbours(num_cash: int, num_mu: int, di: int, dj: int) -> np.ndarray:
    """Index ``[n]`` of each interior node's neighbour ``(i + di, j + dj)`` (nodes ``(i, j)``,
    ``i = 1..N_c``, ``j = 0..N_mu``, flattened ``(i - 1) (N_mu + 1) + j``), ``-1`` at
    ``c = 0``. Beyond the mu range the move is mirrored (``j = -1`` -> ``1``, ``N_mu + 1`` ->
    ``N_mu - 1``: the increment's mu part reflected, its cash part kept); beyond ``x_max``
    it stops at ``N_c`` (the 1-D reference's reflecting top node)."""
    i, j = np.meshgrid(np.arange(1, num_cash + 1), np.arange(num_mu + 1), indexing="ij")
    i2 = np.minimum(i + di, num_cash).ravel()
    j2 = (j + dj).ravel()
    j2 = np.where(j2 < 0, -j2, np.where(j2 > num_mu, 2 * num_mu - j2, j2))
    return np.where(i2 == 0, -1, (i2 - 1) * (num_mu + 1) + j2)


@dataclass
class _Scheme:
    """The transitions of the chain: those fixed by the grid (mu drift, diffusion, cross
    derivative) and the pieces of the controlled cash moves."""

    fixed: list[tuple[np.ndarray, np.ndarray]]  # (neighbour [n], rate [n]) per direction
    up: np.ndarray  # cash neighbour above [n]
    down: np.ndarray  # cash neighbour below [n] (-1: absorbed)
    cash_diffusion: float  # rate of the diffusion to each cash neighbour
    base_drift: np.ndarray  # cash drift under the zero control [n]
    control_drift: np.ndarray  # the controls' part of the cash drift [K]
    reward: np.ndarray  # payout rate [K]
    h_cash: float
    drift_scheme: str
    mu_central: np.ndarray  # the mu drift is central [n] (bool)

    def central_share(self, choice: np.ndarray) -> float:
        """Share of the nodes whose drifts, cash and mu, are both central under the policy
        ``choice`` (1: the scheme is second order everywhere; 0 for the upwind scheme)."""
        if self.drift_scheme == "upwind":
            return 0.0
        cash_drift = self.base_drift + self.control_drift[choice]
        central = central_applies(cash_drift, self.cash_diffusion, self.h_cash) & self.mu_central
        return float(central.mean())

    def cash_rates(self, drift_part) -> tuple[np.ndarray, np.ndarray]:
        """Rates ``(down, up)`` of the cash moves (:func:`pglab.hjb.fd.move_rates`) when
        the controls add ``drift_part`` (a float, or ``[n]``) to the cash drift."""
        return move_rates(self.base_drift + drift_part, self.cash_diffusion, self.h_cash, self.drift_scheme)


def _diagonal_rate(params: OUGHMParams, h_cash: float, h_mu: float) -> float:
    """Rate of each diagonal move of the cross derivative, ``|a_12| / (2 h_c h_mu)``; each
    coordinate's diffusion gives up as much to its own neighbours."""
    return abs(_cross_coefficient(params)) / (2 * h_cash * h_mu)


def _fixed_transitions(
    params: OUGHMParams, cash: np.ndarray, mu: np.ndarray, drift_scheme: str
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The control-free transitions (the mu drift, :func:`pglab.hjb.fd.move_rates`; the
    mu diffusion less the diagonal moves' share; the diagonal moves of the cross
    derivative; module docstring) and where the mu drift is central (``[n]`` bool)."""
    num_cash, num_mu = len(cash) - 1, len(mu) - 1
    h_cash, h_mu = cash[1] - cash[0], mu[1] - mu[0]
    mu_nodes = np.broadcast_to(mu, (num_cash, num_mu + 1)).ravel()
    mu_drift = params.kappa * (params.mu_bar - mu_nodes)
    diagonal_rate = _diagonal_rate(params, h_cash, h_mu)
    mu_diffusion = params.sigma_mu**2 / (2 * h_mu**2) - diagonal_rate
    sign = 1 if _cross_coefficient(params) >= 0 else -1
    ones = np.ones_like(mu_nodes)
    down, up = move_rates(mu_drift, mu_diffusion, h_mu, drift_scheme)
    transitions = [
        (_neighbours(num_cash, num_mu, 0, 1), up),
        (_neighbours(num_cash, num_mu, 0, -1), down),
        (_neighbours(num_cash, num_mu, 1, sign), diagonal_rate * ones),
        (_neighbours(num_cash, num_mu, -1, -sign), diagonal_rate * ones),
    ]
    return transitions, central_applies(mu_drift, mu_diffusion, h_mu)


def _scheme(
    params: OUGHMParams, cash: np.ndarray, mu: np.ndarray, candidates: np.ndarray, drift_scheme: str
) -> _Scheme:
    """The chain on the grid: GHM's cash drift and payout (:class:`GHMModel` with the
    profitability 0, plus ``mu_j``: the drift is affine in the controls and the payout
    does not depend on the state) and the control-free moves."""
    num_cash, num_mu = len(cash) - 1, len(mu) - 1
    h_cash, h_mu = cash[1] - cash[0], mu[1] - mu[0]
    model = GHMModel(params.frozen(0.0))
    with torch.no_grad():
        states = torch.as_tensor(cash[1:], dtype=torch.float64).unsqueeze(1)
        zero_control = torch.zeros(len(states), len(model.control.names), dtype=torch.float64)
        cash_drift = model.drift(states, zero_control)[:, 0].numpy()  # r c
        origin = torch.zeros(len(candidates), 1, dtype=torch.float64)
        controls = torch.as_tensor(candidates, dtype=torch.float64)
        control_drift = (model.drift(origin, controls) - model.drift(origin, torch.zeros_like(controls)))[:, 0]
        reward = model.reward_rate(origin, controls)
    fixed, mu_central = _fixed_transitions(params, cash, mu, drift_scheme)
    return _Scheme(
        fixed=fixed,
        up=_neighbours(num_cash, num_mu, 1, 0),
        down=_neighbours(num_cash, num_mu, -1, 0),
        cash_diffusion=params.sigma**2 / (2 * h_cash**2) - _diagonal_rate(params, h_cash, h_mu),
        base_drift=(cash_drift[:, None] + mu[None, :]).ravel(),
        control_drift=control_drift.numpy(),
        reward=reward.numpy(),
        h_cash=h_cash,
        drift_scheme=drift_scheme,
        mu_central=mu_central,
    )


# -- policy iteration -----------------------------------------------------------------------------


def _evaluate_policy(scheme: _Scheme, choice: np.ndarray, rho: float, boundary: float) -> np.ndarray:
    """The value ``[n]`` of the policy ``choice`` (candidate index per node): the sparse
    system ``(rho + sum_t q_t) V - sum_t q_t V_t = f + sum_{t absorbed} q_t V(0)``."""
    down_rate, up_rate = scheme.cash_rates(scheme.control_drift[choice])
    transitions = [*scheme.fixed, (scheme.up, up_rate), (scheme.down, down_rate)]
    num = choice.shape[0]
    nodes = np.arange(num)
    rhs = scheme.reward[choice].copy()
    diagonal = np.full(num, rho)
    rows, columns, entries = [nodes], [nodes], []
    for neighbour, rate in transitions:
        diagonal += rate
        inside = neighbour >= 0
        rhs[~inside] += rate[~inside] * boundary
        rows.append(nodes[inside])
        columns.append(neighbour[inside])
        entries.append(-rate[inside])
    matrix = scipy.sparse.csc_matrix(
        (np.concatenate([diagonal, *entries]), (np.concatenate(rows), np.concatenate(columns))), shape=(num, num)
    )
    return scipy.sparse.linalg.spsolve(matrix, rhs, permc_spec="MMD_AT_PLUS_A")


def _improve_policy(scheme: _Scheme, choice: np.ndarray, value: np.ndarray, boundary: float) -> np.ndarray:
    """Each node's best candidate given ``value``: only the cash moves depend on the
    control, so the Hamiltonian compared is ``f + l (V_down - V) + u (V_up - V)`` (the 1-D
    reference's, :func:`pglab.hjb.fd._hamiltonian`), candidate by candidate."""
    padded = np.append(value, boundary)  # index -1: the liquidation value
    rise, fall = padded[scheme.up] - value, padded[scheme.down] - value

    def hamiltonian(reward, drift_part) -> np.ndarray:
        down_rate, up_rate = scheme.cash_rates(drift_part)
        return reward + down_rate * fall + up_rate * rise

    best = np.zeros_like(choice)
    best_value = np.full(value.shape, -np.inf)
    for index, (reward, drift_part) in enumerate(zip(scheme.reward, scheme.control_drift, strict=True)):
        candidate = hamiltonian(reward, drift_part)
        better = candidate > best_value
        best[better], best_value[better] = index, candidate[better]
    current = hamiltonian(scheme.reward[choice], scheme.control_drift[choice])
    return _improved_choice(best, best_value, current, choice)


def _mu_grid(params: OUGHMParams, mu_std: float, mu_range: tuple[float, float] | None) -> tuple[float, float]:
    """``(mu_lo, mu_hi)``: ``mu_range``, or ``mu_bar -+ mu_std`` stationary deviations."""
    if mu_range is None:
        check_positive("mu_std", mu_std)
        half_width = mu_std * params.stationary_std
        return params.mu_bar - half_width, params.mu_bar + half_width
    low, high = (float(end) for end in mu_range)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError("mu_range", mu_range, "must be (low, high), finite, with low < high")
    return low, high


def _candidate_indices(candidates: np.ndarray, controls: np.ndarray) -> np.ndarray:
    """The index in ``candidates [K, A]`` of each row of ``controls [n, A]`` (rows taken
    from the same candidate grid)."""
    lookup = {tuple(candidate): index for index, candidate in enumerate(candidates.tolist())}
    return np.array([lookup[tuple(row)] for row in controls.tolist()], dtype=np.int64)


def _policy_iteration(scheme: _Scheme, choice: np.ndarray, rho: float, boundary: float, max_iterations: int):
    """Policy iteration from ``choice``: ``(value [n], choice [n], iterations, converged)``."""
    value, converged, iteration = np.zeros(choice.shape), False, 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 - the count is the solution's `iterations`
        value = _evaluate_policy(scheme, choice, rho, boundary)
        new_choice = _improve_policy(scheme, choice, value, boundary)
        if np.array_equal(new_choice, choice):
            converged = True
            break
        choice = new_choice
    return value, choice, iteration, converged


def solve_hjb_2d(
    params: OUGHMParams,
    *,
    x_max: float = 3.0,
    num_cash: int = 400,
    num_mu: int | None = None,
    mu_std: float = 4.0,
    mu_range: tuple[float, float] | None = None,
    drift_scheme: str = "central",
    points_per_control: int = FD_POINTS_PER_CONTROL,
    max_iterations: int = 200,
    initial_policy: FD2DSolution | None = None,
) -> FD2DSolution:
    """Solve the HJB on ``[0, x_max] x [mu_lo, mu_hi]`` with ``num_cash`` x ``num_mu``
    intervals by policy iteration (module docstring). ``num_mu`` defaults to the step
    of :func:`_mu_nodes`; the ``mu`` range to ``mu_bar -+ mu_std`` stationary standard
    deviations (``mu_range`` overrides it; needed when ``sigma_mu = 0``). ``drift_scheme``:
    central where monotone, else upwind (second order), or upwind everywhere (first
    order; :func:`pglab.hjb.fd.move_rates`). The iteration starts from
    ``initial_policy``'s controls (a solution on another grid, read at the nearest node;
    the converged policy does not depend on it) or from paying and issuing nothing."""
    check_positive("x_max", x_max)
    check_int("num_cash", num_cash, minimum=10)
    check_int("points_per_control", points_per_control, minimum=2)
    check_choice("drift_scheme", drift_scheme, DRIFT_SCHEMES)
    mu_lo, mu_hi = _mu_grid(params, mu_std, mu_range)
    cash = np.linspace(0.0, x_max, num_cash + 1)
    num_mu = _mu_nodes(params, cash[1], mu_hi - mu_lo, num_mu)
    mu = np.linspace(mu_lo, mu_hi, num_mu + 1)
    _check_monotone(params, cash[1], mu[1] - mu[0], mu_hi - mu_lo)
    model = GHMModel(params.frozen(params.mu_bar))
    candidates = _control_candidates(model, points_per_control)
    boundary = float(model.terminal_value(torch.zeros(1, 1, dtype=torch.float64))[0])
    if initial_policy is None:
        choice = np.full(num_cash * (num_mu + 1), _initial_choice(candidates))
    else:
        mesh_cash, mesh_mu = np.meshgrid(cash[1:], mu, indexing="ij")
        initial_controls = initial_policy.control_at(mesh_cash, mesh_mu).reshape(-1, candidates.shape[1])
        choice = _candidate_indices(candidates, initial_controls)
    scheme = _scheme(params, cash, mu, candidates, drift_scheme)
    value, choice, iterations, converged = _policy_iteration(scheme, choice, params.rho, boundary, max_iterations)
    controls = candidates[choice].reshape(num_cash, num_mu + 1, -1)
    meta = {"x_max": x_max, "num_cash": num_cash, "num_mu": num_mu, "h_cash": cash[1], "h_mu": mu[1] - mu[0]}
    return FD2DSolution(
        cash=cash,
        mu=mu,
        value=np.concatenate([np.full((1, num_mu + 1), boundary), value.reshape(num_cash, num_mu + 1)]),
        controls=np.concatenate([controls[:1], controls]),
        iterations=iterations,
        converged=converged,
        control_names=tuple(model.control.names),
        meta={
            **meta,
            "drift_scheme": drift_scheme,
            "central_share": scheme.central_share(choice),
            "points_per_control": points_per_control,
        },
    )


def solve_hjb_2d_extrapolated(
    params: OUGHMParams,
    *,
    x_max: float = 3.0,
    num_cash: int = 400,
    num_mu: int | None = None,
    mu_std: float = 4.0,
    mu_range: tuple[float, float] | None = None,
    drift_scheme: str = "central",
    points_per_control: int = FD_POINTS_PER_CONTROL,
) -> FD2DSolution:
    """Richardson-extrapolated reference: the solve on the grid and on the grid with both
    steps doubled (``num_cash // 2``, ``num_mu // 2``; its value bilinearly interpolated,
    its policy the start of the fine grid's iteration), combined as
    ``V_h + (V_h - V_2h) / 3`` for the central scheme (second order), ``2 V_h - V_2h`` for
    upwind (:func:`pglab.hjb.fd.richardson_correction`). Controls are the fine grid's;
    ``meta["extrapolation_change"]`` is the largest correction."""
    solve = functools.partial(
        solve_hjb_2d,
        params,
        x_max=x_max,
        mu_std=mu_std,
        mu_range=mu_range,
        drift_scheme=drift_scheme,
        points_per_control=points_per_control,
    )
    mu_lo, mu_hi = _mu_grid(params, mu_std, mu_range)
    num_mu = _mu_nodes(params, x_max / num_cash, mu_hi - mu_lo, num_mu)
    coarse = solve(num_cash=num_cash // 2, num_mu=num_mu // 2)
    fine = solve(num_cash=num_cash, num_mu=num_mu, initial_policy=coarse)
    mesh_cash, mesh_mu = np.meshgrid(fine.cash, fine.mu, indexing="ij")
    order = 2 if drift_scheme == "central" else 1
    correction = richardson_correction(fine.value, coarse.value_at(mesh_cash, mesh_mu), order)
    fine.value = fine.value + correction
    fine.meta.update(
        {
            "extrapolated": True,
            "extrapolation_order": order,
            "extrapolation_change": float(np.abs(correction).max()),
            "converged_coarse": coarse.converged,
        }
    )
    fine.converged = fine.converged and coarse.converged
    return fine


__all__ = ["FD2DSolution", "solve_hjb_2d", "solve_hjb_2d_extrapolated"]
