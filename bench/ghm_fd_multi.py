"""The finite-difference references of the two-state GHM models: solve times, values and grid checks.

``python bench/ghm_fd_multi.py [--quick]`` prints, for the default parameters of each model
(pglab.configs.ghm_multi):

* regimes (pglab.hjb.fd_regimes): the extrapolated reference's solve time, V* and the
  thresholds per regime, and the largest relative change of V* when the grid is doubled;
* OU profitability (pglab.hjb.fd2d): the same at mu_bar and mu_bar -+ 2 stationary
  deviations, then the relative change of V* when both steps are halved, when the mu range
  widens from 4 to 5 deviations and when x_max grows from 3 to 4.5 (at the same steps).
  ``--quick`` skips these three checks (about four minutes on one core).

V* is compared at cash 0.1, 0.25, 0.5, 1, 1.5 (and the three mu levels).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pglab.configs.ghm_multi import OUGHMParams, RegimeGHMParams
from pglab.hjb.fd2d import solve_hjb_2d_extrapolated
from pglab.hjb.fd_regimes import solve_regimes_extrapolated

CASH = np.array([0.1, 0.25, 0.5, 1.0, 1.5])


def timed(solve, *args, **kwargs):
    """``(solution, seconds)``: the process's CPU seconds (on a shared machine the
    wall-clock time depends on its load; the solvers run on one thread)."""
    start = time.process_time()
    solution = solve(*args, **kwargs)
    return solution, time.process_time() - start


def relative_change(new: np.ndarray, old: np.ndarray) -> float:
    return float(np.abs(new / old - 1.0).max())


def regimes_report() -> None:
    params = RegimeGHMParams()
    fine, seconds = timed(solve_regimes_extrapolated, params)
    coarse, coarse_seconds = timed(solve_regimes_extrapolated, params, num_nodes=fine.meta["num_nodes"] // 2)
    print(f"regimes: {params}")
    print(
        f"  grid: {fine.meta['num_nodes']} intervals on [0, {fine.meta['x_max']}] (extrapolated over half as many), "
        f"{seconds:.1f} CPU s, {fine.iterations} policy iterations, converged={fine.converged}"
    )
    for regime, thresholds in enumerate(fine.thresholds()):
        values = " ".join(f"{v:.5f}" for v in fine.value_at(CASH, regime))
        print(f"  regime {regime}: V*(c={CASH.tolist()}) = {values}; thresholds {thresholds}")
    change = max(relative_change(fine.value_at(CASH, s), coarse.value_at(CASH, s)) for s in (0, 1))
    print(f"  doubling the grid ({coarse.meta['num_nodes']} -> {fine.meta['num_nodes']}, {coarse_seconds:.1f} CPU s):")
    print(f"    largest relative change of V* {change:.2e}")


def ou_values(solution, mu: np.ndarray) -> np.ndarray:
    cash, levels = np.meshgrid(CASH, mu, indexing="ij")
    return solution.value_at(cash, levels)


def ou_report(params: OUGHMParams, mu: np.ndarray) -> object:
    fine, seconds = timed(solve_hjb_2d_extrapolated, params)
    meta = fine.meta
    print(f"ou: {params}")
    print(
        f"  grid: {meta['num_cash']} x {meta['num_mu']} intervals, cash [0, {meta['x_max']}], mu "
        f"[{fine.mu[0]:.4f}, {fine.mu[-1]:.4f}] (extrapolated, order {meta['extrapolation_order']}, "
        "over half as many), "
        f"{seconds:.1f} CPU s, {fine.iterations} policy iterations, converged={fine.converged}"
    )
    values = ou_values(fine, mu)
    thresholds = fine.thresholds()
    for j, level in enumerate(mu):
        at = {name: round(float(np.interp(level, fine.mu, curve)), 4) for name, curve in thresholds.items()}
        row = " ".join(f"{v:.5f}" for v in values[:, j])
        print(f"  mu={level:.3f}: V*(c={CASH.tolist()}) = {row}; thresholds {at}")
    return fine


def ou_checks(params: OUGHMParams, mu: np.ndarray, reference) -> None:
    base = ou_values(reference, mu)
    num_cash = reference.meta["num_cash"]
    checks = [
        ("halving both steps", dict(num_cash=2 * num_cash, num_mu=2 * reference.meta["num_mu"])),
        ("mu range 4 -> 5 deviations", dict(mu_std=5.0, num_mu=reference.meta["num_mu"] * 5 // 4)),
        ("x_max 3 -> 4.5", dict(x_max=4.5, num_cash=num_cash * 3 // 2, num_mu=reference.meta["num_mu"])),
    ]
    for name, options in checks:
        other, seconds = timed(solve_hjb_2d_extrapolated, params, **options)
        change = relative_change(ou_values(other, mu), base)
        print(f"  {name} ({options}, {seconds:.1f} CPU s): largest relative change of V* {change:.2e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the OU model's refinement checks")
    args = parser.parse_args()
    regimes_report()
    params = OUGHMParams()
    mu = params.mu_bar + params.stationary_std * np.array([-2.0, 0.0, 2.0])
    reference = ou_report(params, mu)
    if not args.quick:
        ou_checks(params, mu, reference)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
