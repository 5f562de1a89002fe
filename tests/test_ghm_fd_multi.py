"""Finite-difference references of the two-state GHM models: switching financing conditions
(pglab.hjb.fd_regimes) and a mean-reverting profitability (pglab.hjb.fd2d), checked against
the 1-D reference in their limits, for monotonicity and for grid convergence."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest

from pglab.configs.ghm import CreditLineParams, FirmTerms, GHMParams
from pglab.configs.ghm_multi import OUGHMParams, RegimeGHMParams
from pglab.envs.ghm import GHMModel
from pglab.errors import ConfigError
from pglab.hjb.fd import solve_hjb_1d
from pglab.hjb.fd2d import solve_hjb_2d, solve_hjb_2d_extrapolated
from pglab.hjb.fd_regimes import solve_regimes

# Small grids and 5 x 5 control candidates: the limits below hold on any grid and candidate
# set, node by node, when both sides share them.
X_MAX = 2.0
NODES = 200
PPC = 5


def one_d(params: GHMParams, **options):
    return solve_hjb_1d(GHMModel(params), x_max=X_MAX, num_nodes=NODES, points_per_control=PPC, **options)


# -- parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, field, value",
    [
        (RegimeGHMParams, "q10", -0.1),
        (RegimeGHMParams, "lambda_dilution_1", math.nan),
        (RegimeGHMParams, "rho", 0.05),
        (RegimeGHMParams, "initial_regime_1_probability", 1.5),
        (OUGHMParams, "kappa", 0.0),
        (OUGHMParams, "correlation", -1.2),
        (OUGHMParams, "sigma_mu", -0.01),
    ],
)
def test_bad_parameters_name_their_field(model, field, value):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        model(**{field: value})


@pytest.mark.parametrize("model", [GHMParams, CreditLineParams, RegimeGHMParams, OUGHMParams])
@pytest.mark.parametrize(
    "fields, named",
    [
        ({"rho": 0.05}, "rho"),  # rho <= r: the value is unbounded
        ({"r": math.inf}, "r"),
        ({"a_L_max": -1.0}, "a_L_max"),
        ({"a_E_max": -0.5}, "a_E_max"),
        ({"initial_cash_low": -0.3}, "initial_cash_low"),  # below every model's liquidation point
        ({"initial_cash_low": 1.0, "initial_cash_high": 0.5}, "initial_cash_high"),
    ],
)
def test_every_model_checks_the_shared_terms(model, fields, named):
    """The rates, control bounds and initial cash are FirmTerms' fields, checked the same way
    in every model."""
    with pytest.raises(ConfigError, match=f"^{named}:"):
        model(**fields)
    assert set(FirmTerms().terms()) <= {f.name for f in dataclasses.fields(model)}


def test_regime_and_frozen_models_carry_the_shared_fields():
    params = RegimeGHMParams(mu_1=0.03, sigma_1=0.25, lambda_dilution_1=0.4, r=0.02, a_E_max=2.0)
    bad = params.regime(1)
    assert (bad.mu, bad.sigma, bad.lambda_dilution, bad.r, bad.a_E_max) == (0.03, 0.25, 0.4, 0.02, 2.0)
    assert params.regime(0).mu == params.mu_0
    ou = OUGHMParams(sigma_mu=0.1, kappa=2.0, initial_mu_spread=2.0)
    assert ou.stationary_std == pytest.approx(0.05)
    assert ou.initial_mu_range() == pytest.approx((ou.mu_bar - 0.1, ou.mu_bar + 0.1))
    assert ou.frozen(0.3).mu == 0.3


# -- switching regimes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        RegimeGHMParams(q01=0.0, q10=0.0),  # no switching: two 1-D problems
        RegimeGHMParams(mu_1=0.1, sigma_1=0.2, lambda_dilution_1=0.1, q01=0.3, q10=0.7),  # identical regimes
    ],
    ids=["no-switching", "identical-regimes"],
)
def test_regimes_reduce_to_the_1d_reference(params):
    solution = solve_regimes(params, x_max=X_MAX, num_nodes=NODES, points_per_control=PPC)
    assert solution.converged
    for regime in (0, 1):
        reference = one_d(params.regime(regime))
        np.testing.assert_allclose(solution.regimes[regime].value, reference.value, rtol=0, atol=1e-10)
        np.testing.assert_array_equal(solution.regimes[regime].controls, reference.controls)
        assert solution.thresholds()[regime] == reference.thresholds()


def test_absorbing_bad_regime_is_its_1d_problem_and_bounds_the_good_one():
    """q10 = 0: regime 1 never ends, so V_1 is regime 1's 1-D value; regime 0 may fall
    into it, so V_1 < V_0 < regime 0's 1-D value at every cash level > 0."""
    params = RegimeGHMParams(q01=0.5, q10=0.0)
    solution = solve_regimes(params, x_max=X_MAX, num_nodes=NODES, points_per_control=PPC)
    good, bad = (one_d(params.regime(regime)).value for regime in (0, 1))
    np.testing.assert_allclose(solution.regimes[1].value, bad, rtol=0, atol=1e-10)
    value_0 = solution.regimes[0].value[1:]
    assert (value_0 > bad[1:] + 1e-3).all() and (value_0 < good[1:] - 1e-3).all()
    cash = np.array([0.1, 0.7, 1.3])
    np.testing.assert_array_equal(
        solution.value_at(cash, [0, 1, 0]),
        [solution.regimes[s].value_at(c) for s, c in zip([0, 1, 0], cash, strict=True)],
    )
    assert solution.thresholds()[1]["dividend_rate"] > solution.thresholds()[0]["dividend_rate"]  # hoard more


def test_fast_switching_approaches_the_averaged_model():
    """q01 = q10 = q -> infinity with equal issuance costs: both values tend to GHM with
    the time-averaged drift and variance; the gap shrinks like 1 / q (on this grid 5.5e-3
    at q = 1e2, 9.9e-4 at 1e3, 1.1e-4 at 1e4, 1.2e-5 at 1e5)."""
    averaged = GHMParams(mu=0.05, sigma=math.sqrt((0.2**2 + 0.3**2) / 2))
    reference = one_d(averaged).value
    gaps = []
    for q in (1e2, 1e4):
        params = RegimeGHMParams(mu_0=0.1, mu_1=0.0, sigma_0=0.2, sigma_1=0.3, lambda_dilution_1=0.1, q01=q, q10=q)
        solution = solve_regimes(params, x_max=X_MAX, num_nodes=NODES, points_per_control=PPC)
        gaps.append(max(np.abs(solution.regimes[s].value - reference).max() for s in (0, 1)))
    assert gaps[1] < 3e-4
    assert gaps[0] > 20 * gaps[1]


# -- mean-reverting profitability ------------------------------------------------------------------


@pytest.mark.parametrize("drift_scheme", ["upwind", "central"])
def test_2d_without_profitability_noise_is_the_1d_reference(drift_scheme):
    """sigma_mu = 0: the row mu = mu_bar never moves, so it is the 1-D problem at mu_bar,
    node by node; a row below mu_bar reverts to it, so its value lies between the 1-D
    values at its own mu and at mu_bar."""
    params = OUGHMParams(sigma_mu=0.0, correlation=0.5)
    solution = solve_hjb_2d(
        params,
        x_max=X_MAX,
        num_cash=NODES,
        num_mu=10,
        mu_range=(0.0, 0.2),
        drift_scheme=drift_scheme,
        points_per_control=PPC,
    )
    middle = 5
    assert solution.mu[middle] == pytest.approx(params.mu_bar)
    reference = one_d(params.frozen(params.mu_bar), drift_scheme=drift_scheme)
    np.testing.assert_allclose(solution.value[:, middle], reference.value, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(solution.controls[:, middle], reference.controls)
    low = one_d(params.frozen(solution.mu[2]), drift_scheme=drift_scheme)
    row = solution.value[1:, 2]
    assert (row > low.value[1:] + 1e-4).all() and (row < reference.value[1:] - 1e-4).all()
    assert solution.at_mu(middle).thresholds() == reference.thresholds()


@pytest.fixture(scope="module")
def correlated_solutions():
    """The default model at three correlations on one grid (120 x 72 intervals), fine
    enough for the central scheme to hold at every node (the correlated solves start from
    the uncorrelated policy)."""
    solve = functools.partial(solve_hjb_2d, x_max=X_MAX, num_cash=120, num_mu=72, points_per_control=PPC)
    uncorrelated = solve(OUGHMParams(correlation=0.0))
    return {
        0.0: uncorrelated,
        **{corr: solve(OUGHMParams(correlation=corr), initial_policy=uncorrelated) for corr in (-0.5, 0.5)},
    }


def test_2d_value_increases_in_cash_and_profitability(correlated_solutions):
    for solution in correlated_solutions.values():
        assert solution.converged and solution.meta["central_share"] == 1.0
        assert (np.diff(solution.value, axis=0) > 0).all()
        assert (np.diff(solution.value[1:], axis=1) > 0).all()


def test_2d_correlation_orders_the_values(correlated_solutions):
    """Away from c = 0 the marginal value of cash falls with profitability (V_c,mu < 0), so
    shocks that move cash and profitability together (corr > 0) lower the value and
    opposite ones (a hedge) raise it. (In the boundary layer at c = 0, where V = 0 for
    every mu, V_c,mu > 0 and the order may turn.)"""
    away = correlated_solutions[0.0].cash >= 0.1
    negative, zero, positive = (correlated_solutions[corr].value[away] for corr in (-0.5, 0.0, 0.5))
    assert (negative > zero).all() and (zero > positive).all()


def test_2d_interpolation_and_thresholds(correlated_solutions):
    solution = correlated_solutions[0.5]
    i, j = 17, 9
    assert solution.value_at(solution.cash[i], solution.mu[j]) == pytest.approx(solution.value[i, j], abs=1e-14)
    midpoint = solution.value_at(
        (solution.cash[i] + solution.cash[i + 1]) / 2, (solution.mu[j] + solution.mu[j + 1]) / 2
    )
    assert midpoint == pytest.approx(solution.value[i : i + 2, j : j + 2].mean())
    np.testing.assert_array_equal(solution.control_at(solution.cash[i] + 1e-4, solution.mu[j]), solution.controls[i, j])
    barrier = solution.thresholds()["dividend_rate"]
    assert barrier.shape == solution.mu.shape
    assert (np.diff(barrier) <= 0).all() and barrier[0] > barrier[-1]  # more profitable firms pay out sooner


def test_2d_refuses_a_grid_outside_the_monotone_band():
    """At h_c = 1/30 the band sigma h_mu / (sigma_mu h_c) in [0.5, 2] is num_mu in [24, 96]."""
    for corr, num_mu in ((0.5, 23), (-0.5, 97)):
        with pytest.raises(
            ConfigError, match=rf"^num_mu: must lie in \[24, 96\] \(the scheme is monotone.*got {num_mu}"
        ):
            solve_hjb_2d(OUGHMParams(correlation=corr), x_max=X_MAX, num_cash=60, num_mu=num_mu)
    for num_mu in (24, 96):  # the band's ends pass
        solve_hjb_2d(OUGHMParams(correlation=0.5), x_max=X_MAX, num_cash=60, num_mu=num_mu, max_iterations=1)


def test_2d_grid_refinement():
    """Halving both steps of the extrapolated reference moves V* by < 0.1% (measured
    4.8e-5; a smaller, faster model than bench/ghm_fd_multi.py's check at the defaults)."""
    params = OUGHMParams(sigma=0.3, sigma_mu=0.1, kappa=8.0)
    spread = 2 * params.stationary_std
    cash, mu = np.meshgrid([0.1, 0.25, 0.5, 1.0], params.mu_bar + np.array([-spread, 0, spread]), indexing="ij")
    values = [
        solve_hjb_2d_extrapolated(params, x_max=1.5, num_cash=num_cash, mu_std=3.0, points_per_control=PPC).value_at(
            cash, mu
        )
        for num_cash in (200, 400)
    ]
    assert np.abs(values[1] / values[0] - 1).max() < 1e-3


@pytest.mark.parametrize("drift_scheme, order", [("central", 2), ("upwind", 1)])
def test_2d_extrapolation_combines_the_grid_and_its_half(drift_scheme, order):
    """V = V_h + (V_h - V_2h) / (2^order - 1): second order for the central scheme, first
    for upwind, the coarse grid halving both steps."""
    params = OUGHMParams()
    options = dict(x_max=X_MAX, mu_std=2.0, drift_scheme=drift_scheme, points_per_control=PPC)
    extrapolated = solve_hjb_2d_extrapolated(params, num_cash=40, num_mu=16, **options)
    fine = solve_hjb_2d(params, num_cash=40, num_mu=16, **options)
    coarse = solve_hjb_2d(params, num_cash=20, num_mu=8, **options)
    assert coarse.cash[1] == pytest.approx(2 * fine.cash[1]) and coarse.mu[1] - coarse.mu[0] == pytest.approx(
        2 * (fine.mu[1] - fine.mu[0])
    )
    cash, mu = np.meshgrid(fine.cash, fine.mu, indexing="ij")
    expected = fine.value + (fine.value - coarse.value_at(cash, mu)) / (2**order - 1)
    np.testing.assert_allclose(extrapolated.value, expected, rtol=0, atol=1e-9)
    assert extrapolated.meta["extrapolation_order"] == order
