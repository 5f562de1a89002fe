"""``pglab solve ghm-credit-line``: the FD optimum of the GHM firm with a credit line,
next to the same firm without one, and the HJB residual of both FD solutions."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pglab.configs.ghm import CreditLineSolveConfig
from pglab.run.config import parse_flags

__all__ = ["CreditLineSolveConfig", "solve"]


def solve(argv: list[str]) -> int:
    """``pglab solve ghm-credit-line``: value, thresholds (in cash) and FD residual, with and
    without the line."""
    config = parse_flags(
        CreditLineSolveConfig,
        argv,
        prog="pglab solve ghm-credit-line",
        description="The GHM firm with a credit line against the same firm without one, by finite differences.",
    ).config
    from pglab.envs.ghm import GHMModel, GHMParams
    from pglab.envs.ghm_credit_line import GHMCreditLineModel
    from pglab.hjb.fd import solve_hjb_1d_extrapolated
    from pglab.hjb.residual import HJBResidualValidator

    params = config.params()
    line = GHMCreditLineModel(params)
    plain = GHMModel(
        GHMParams(
            mu=params.mu,
            sigma=params.sigma,
            r=params.r,
            lambda_dilution=params.lambda_dilution,
            rho=params.rho,
            a_L_max=params.a_L_max,
            a_E_max=params.a_E_max,
        )
    )
    limit = params.credit_limit
    results: dict[str, dict[str, Any]] = {}
    for name, model, shift in (("credit_line", line, limit), ("ghm", plain, 0.0)):
        solution = solve_hjb_1d_extrapolated(model, x_max=config.x_max, num_nodes=config.nodes)
        c_max = min(2.0 + shift, config.x_max)
        report = HJBResidualValidator(model, reference=solution, c_min=config.c_min, c_max=c_max).validate_solution(
            solution
        )
        assert report.residual_optimal is not None  # an FD solution has a value function
        cash = [c for c in config.cash if c + shift >= 0.0]
        results[name] = {
            "converged": solution.converged,
            "values": {
                str(c): float(v) for c, v in zip(cash, solution.value_at([c + shift for c in cash]), strict=False)
            },
            # thresholds in cash, c = x - credit_limit
            "thresholds": {k: (None if v is None else v - shift) for k, v in solution.thresholds().items()},
            "residual": dataclasses.asdict(report.residual_optimal),
            "residual_interval_state": [config.c_min, c_max],
        }
    payload = {"params": dataclasses.asdict(params), "nodes": config.nodes, "x_max": config.x_max, **results}
    if config.json:
        print(json.dumps(payload, indent=2))
        return 0
    print(
        f"GHM with a credit line of {limit:g} (spread {params.credit_spread:g}) vs without, by finite differences "
        f"({config.nodes} intervals on [0, {config.x_max}], Richardson-extrapolated)"
    )
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
        print(
            f"{name}: dividend barrier at cash {dividend if dividend is None else f'{dividend:.4f}'}, issuance below "
            f"cash {issuance if issuance is None else f'{issuance:.4f}'}; FD residual max {residual['max']:.1e} "
            f"RMS {residual['rms']:.1e} on state in [{config.c_min:g}, {results[name]['residual_interval_state'][1]:g}]"
        )
    return 0
