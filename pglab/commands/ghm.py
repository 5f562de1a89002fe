"""``pglab train ghm``, ``pglab evaluate GHM_CHECKPOINT``, ``pglab solve ghm``."""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from pglab.errors import ConfigError
from pglab.run.config import parse_config
from pglab.validation import check_device, check_int, check_non_negative, check_positive, check_range


def train(argv: list[str]) -> int:
    """``pglab train ghm [--algo mc] [FLAGS]``: see :mod:`pglab.algos.ghm_train`."""
    from pglab.algos.ghm_train import GHMTrainConfig, train_ghm

    config = parse_config(GHMTrainConfig, argv, prog="pglab train ghm",
                          description="Train a dividend/issuance policy for the GHM cash model.")
    result = train_ghm(config)
    return 0 if result.final_rows is not None or result.interrupted or not config.final_eval else 1


@dataclass(frozen=True)
class GHMEvaluateConfig:
    checkpoint: Annotated[Path, tyro.conf.Positional]
    """GHM checkpoint file (or a run directory: its latest checkpoint)"""
    n_episodes: int = 10_000
    """simulated paths per initial cash level"""
    cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """initial cash levels"""
    tail_tolerance: float = 0.005
    """simulate until the discounted tail is below this fraction of the value"""
    dt: float | None = None
    """simulation time step (default: the run's dt)"""
    stochastic: bool = False
    """evaluate the stochastic policy instead of its deterministic mean"""
    json: bool = False
    """print the result as JSON instead of a table"""
    seed: int = 12345
    """random seed of the evaluation paths"""
    device: str = "cpu"
    """auto, cpu, cuda or cuda:N"""

    def __post_init__(self):
        check_int("n_episodes", self.n_episodes, minimum=2)
        if len(self.cash) == 0:
            raise ConfigError("cash", self.cash, "needs at least one initial cash level")
        for level in self.cash:
            check_non_negative("cash", level)
        check_range("tail_tolerance", self.tail_tolerance, 0.0, 1.0, low_inclusive=False)
        if self.dt is not None:
            check_positive("dt", self.dt)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT``: the policy's discounted payout (mean, SE) from each
    initial cash level against the finite-difference optimum."""
    import torch

    from pglab.algos.ghm_agent import agent_from_checkpoint
    from pglab.algos.ghm_eval import simulate_policy_value
    from pglab.algos.ghm_train import GHM_KINDS, fd_value_bound, format_table, reference_solution
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    config = parse_config(GHMEvaluateConfig, argv, prog="pglab evaluate")
    device = resolve_device(config.device)
    checkpoint = load_checkpoint_file(config.checkpoint, kinds=GHM_KINDS, map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    run_dir = Path(checkpoint["path"]).parent.parent
    cache = run_dir / "fd_reference.npz"
    solution = reference_solution(agent.config, agent.model, cache if cache.exists() else None)
    generator = make_generator(config.seed, device)
    if config.stochastic:
        policy_fn = lambda states: agent.policy.sample(states, generator)  # noqa: E731
    else:
        policy_fn = lambda states: agent.policy.mean_std(states)[0]  # noqa: E731
    with torch.no_grad():
        result = simulate_policy_value(
            agent.model, policy_fn, list(config.cash), num_paths=config.n_episodes,
            dt=config.dt or agent.config.dt, generator=generator, value_bound=fd_value_bound(solution),
            tail_tolerance=config.tail_tolerance, device=device,
        )
    optimum = solution.value_at(list(config.cash))
    rows = [
        {"initial_cash": float(c), "value": m, "stderr": s, "tail_bound": t, "fd_optimum": float(v),
         "pct_of_optimum": 100.0 * m / float(v)}
        for c, m, s, t, v in zip(config.cash, result.mean, result.stderr, result.tail_bound, optimum)
    ]
    if config.json:
        print(json.dumps({"checkpoint": checkpoint["path"], "kind": checkpoint["kind"], "iteration": agent.iteration,
                          "policy": "stochastic" if config.stochastic else "deterministic",
                          "simulated_time": result.simulated_time, "rows": rows}, indent=2))
    else:
        print(f"{checkpoint['path']} ({checkpoint['kind']}, iteration {agent.iteration})")
        print(format_table(rows, result.simulated_time, result.num_paths))
    return 0


@dataclass(frozen=True)
class GHMSolveConfig:
    """The finite-difference HJB reference of the GHM model."""

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
    nodes: int = 24_000
    """grid intervals (the extrapolated solution also solves on half as many)"""
    x_max: float = 6.0
    """upper end of the grid"""
    extrapolate: bool = True
    """Richardson-extrapolate two grids (the scheme is first order in h)"""
    cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """cash levels to print"""
    output: Path | None = None
    """write the solution (grid, V, controls) to this .npz and a .csv beside it"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        self.params()
        check_int("nodes", self.nodes, minimum=100)
        check_positive("x_max", self.x_max)
        for level in self.cash:
            check_range("cash", level, 0.0, self.x_max)

    def params(self):
        from pglab.envs.ghm import GHMParams

        return GHMParams(mu=self.mu, sigma=self.sigma, r=self.r, lambda_dilution=self.lambda_dilution,
                         rho=self.rho, a_L_max=self.a_L_max, a_E_max=self.a_E_max)


def solve(argv: list[str]) -> int:
    """``pglab solve ghm``: optimal value, controls and thresholds by finite differences."""
    from pglab.envs.ghm import GHMModel
    from pglab.hjb.fd import solve_hjb_1d, solve_hjb_1d_extrapolated
    from pglab.run.atomic import atomic_write_text

    config = parse_config(GHMSolveConfig, argv, prog="pglab solve ghm")
    model = GHMModel(config.params())
    solver = solve_hjb_1d_extrapolated if config.extrapolate else solve_hjb_1d
    solution = solver(model, x_max=config.x_max, num_nodes=config.nodes)
    values = solution.value_at(list(config.cash))
    controls = solution.control_at(list(config.cash))
    thresholds = solution.thresholds()
    payload = {
        "params": dataclasses.asdict(config.params()), "nodes": config.nodes, "x_max": config.x_max,
        "extrapolated": config.extrapolate, "converged": solution.converged, "iterations": solution.iterations,
        "thresholds": thresholds,
        "rows": [{"cash": float(c), "value": float(v), "dividend_rate": float(u[0]), "issuance_rate": float(u[1])}
                 for c, v, u in zip(config.cash, values, controls)],
    }
    if config.output is not None:
        output = config.output.with_suffix(".npz")
        output.parent.mkdir(parents=True, exist_ok=True)
        temporary = output.with_name(f".{output.stem}.tmp.npz")
        np.savez(temporary, grid=solution.grid, value=solution.value, controls=solution.controls)
        temporary.replace(output)
        lines = ["cash,value,dividend_rate,issuance_rate"] + [
            f"{x:.6g},{v:.8g},{u[0]:.6g},{u[1]:.6g}" for x, v, u in zip(solution.grid, solution.value, solution.controls)]
        atomic_write_text(output.with_suffix(".csv"), "\n".join(lines) + "\n")
        payload["output"] = str(output)
    if config.json:
        print(json.dumps(payload, indent=2))
        return 0
    print(f"GHM HJB by finite differences ({config.nodes} intervals on [0, {config.x_max}]"
          f"{', Richardson-extrapolated' if config.extrapolate else ''}; policy iteration "
          f"{'converged' if solution.converged else 'NOT converged'} in {solution.iterations} steps)")
    print(f"{'cash':>6} {'V*':>9} {'a_L*':>6} {'a_E*':>6}")
    for row in payload["rows"]:
        print(f"{row['cash']:>6.2f} {row['value']:>9.4f} {row['dividend_rate']:>6.2f} {row['issuance_rate']:>6.2f}")
    dividend, issuance = thresholds.get("dividend_rate"), thresholds.get("issuance_rate")
    print(f"dividend barrier: {dividend if dividend is None else f'{dividend:.4f}'}; "
          f"issuance below: {issuance if issuance is None else f'{issuance:.4f}'}")
    if config.output is not None:
        print(f"wrote {payload['output']}", file=sys.stderr)
    return 0
