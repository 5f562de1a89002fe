"""``pglab solve ghm-credit-line``: the FD optimum of the GHM firm with a credit line,
next to the same firm without one, and the HJB residual of both FD solutions."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from pglab.run.config import parse_config
from pglab.validation import check_int, check_positive, check_range


@dataclass(frozen=True)
class CreditLineSolveConfig:
    """The finite-difference HJB reference of :mod:`pglab.envs.ghm_credit_line`."""

    mu: float = 0.1
    """cash-flow drift"""
    sigma: float = 0.2
    """cash-flow volatility"""
    r: float = 0.05
    """interest rate on cash"""
    lambda_dilution: float = 0.1
    """proportional equity-issuance cost"""
    rho: float = 0.1
    """discount rate (must exceed r)"""
    a_L_max: float = 1.0
    """maximal dividend rate"""
    a_E_max: float = 1.0
    """maximal issuance rate"""
    credit_limit: float = 0.25
    """size of the credit line (cash may fall to -credit_limit)"""
    credit_spread: float = 0.05
    """extra interest on the drawn balance"""
    nodes: int = 24_000
    """grid intervals (the extrapolated solution also solves on half as many)"""
    x_max: float = 6.0
    """upper end of the grid in liquidity x = cash + credit_limit"""
    cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """cash levels to print"""
    c_min: float = 0.1
    """residual statistics on liquidity in [c_min, 2 + credit_limit] (the boundary layer lies below)"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        self.params()
        check_int("nodes", self.nodes, minimum=100)
        check_positive("x_max", self.x_max)
        check_positive("c_min", self.c_min)
        for level in self.cash:
            check_range("cash", level, -self.credit_limit, self.x_max - self.credit_limit)

    def params(self):
        from pglab.envs.ghm_credit_line import CreditLineParams

        return CreditLineParams(mu=self.mu, sigma=self.sigma, r=self.r, lambda_dilution=self.lambda_dilution, rho=self.rho,
                                a_L_max=self.a_L_max, a_E_max=self.a_E_max, credit_limit=self.credit_limit,
                                credit_spread=self.credit_spread)


def solve(argv: list[str]) -> int:
    """``pglab solve ghm-credit-line``: value, thresholds (in cash) and FD residual, with and
    without the line."""
    from pglab.envs.ghm import GHMModel, GHMParams
    from pglab.envs.ghm_credit_line import GHMCreditLineModel
    from pglab.hjb.fd import solve_hjb_1d_extrapolated
    from pglab.hjb.residual import HJBResidualValidator

    config = parse_config(CreditLineSolveConfig, argv, prog="pglab solve ghm-credit-line")
    params = config.params()
    line = GHMCreditLineModel(params)
    plain = GHMModel(GHMParams(mu=params.mu, sigma=params.sigma, r=params.r, lambda_dilution=params.lambda_dilution,
                               rho=params.rho, a_L_max=params.a_L_max, a_E_max=params.a_E_max))
    limit = params.credit_limit
    results = {}
    for name, model, shift in (("credit_line", line, limit), ("ghm", plain, 0.0)):
        solution = solve_hjb_1d_extrapolated(model, x_max=config.x_max, num_nodes=config.nodes)
        c_max = min(2.0 + shift, config.x_max)
        report = HJBResidualValidator(model, reference=solution, c_min=config.c_min, c_max=c_max).validate_solution(solution)
        cash = [c for c in config.cash if c + shift >= 0.0]
        results[name] = {
            "converged": solution.converged,
            "values": {str(c): float(v) for c, v in zip(cash, solution.value_at([c + shift for c in cash]))},
            # thresholds in cash, c = x - credit_limit
            "thresholds": {k: (None if v is None else v - shift) for k, v in solution.thresholds().items()},
            "residual": dataclasses.asdict(report.residual_optimal),
            "residual_interval_state": [config.c_min, c_max],
        }
    payload = {"params": dataclasses.asdict(params), "nodes": config.nodes, "x_max": config.x_max, **results}
    if config.json:
        print(json.dumps(payload, indent=2))
        return 0
    print(f"GHM with a credit line of {limit:g} (spread {params.credit_spread:g}) vs without, by finite differences "
          f"({config.nodes} intervals on [0, {config.x_max}], Richardson-extrapolated)")
    print(f"{'cash':>6} {'V line':>9} {'V GHM':>9}")
    for c in config.cash:
        key = str(c)
        with_line = results["credit_line"]["values"].get(key)
        without = results["ghm"]["values"].get(key)
        fmt = lambda v: f"{v:>9.4f}" if v is not None else f"{'-':>9}"  # noqa: E731
        print(f"{c:>6.2f} {fmt(with_line)} {fmt(without)}")
    for name in ("credit_line", "ghm"):
        thresholds, residual = results[name]["thresholds"], results[name]["residual"]
        dividend, issuance = thresholds.get("dividend_rate"), thresholds.get("issuance_rate")
        print(f"{name}: dividend barrier at cash {dividend if dividend is None else f'{dividend:.4f}'}, issuance below "
              f"cash {issuance if issuance is None else f'{issuance:.4f}'}; FD residual max {residual['max']:.1e} "
              f"RMS {residual['rms']:.1e} on state in [{config.c_min:g}, {results[name]['residual_interval_state'][1]:g}]")
    return 0
