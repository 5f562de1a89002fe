"""``pglab train ghm``, ``pglab evaluate GHM_CHECKPOINT``, ``pglab solve ghm``.

Only the torch-free configs (:mod:`pglab.configs.ghm`) are imported before the command
line is parsed, so ``--help`` never imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pglab.configs.ghm import TARGET_PCT, THRESHOLD_TOLERANCE, GHMEvaluateConfig, GHMSolveConfig, GHMTrainConfig
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, run_dir_of, split_json_flag, verdict
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir, check_output_file, check_output_path

if TYPE_CHECKING:  # torch-free at import: --help never imports torch
    from pglab.algos.ghm_agent import GHMAgent

__all__ = ["GHMEvaluateConfig", "GHMSolveConfig", "GHMTrainConfig", "evaluate", "solve", "train"]


def train(argv: list[str]) -> int:
    """``pglab train ghm [--algo mc] [FLAGS]``: see :mod:`pglab.algos.ghm_train`.

    Returns the run's exit code: 0, or 130 (:data:`pglab.errors.EXIT_INTERRUPTED`) after
    SIGINT/SIGTERM (a checkpoint was saved; continue with ``--resume``)."""
    as_json, argv = split_json_flag(argv)
    parsed = parse_flags(
        GHMTrainConfig,
        argv,
        prog="pglab train ghm",
        description="Train a dividend/issuance policy for the GHM cash model.",
    )
    check_new_run_dir(parsed.config)
    from pglab.algos.ghm_train import train_ghm

    result = train_ghm(parsed.config, given=parsed.given, echo=echo_for(as_json))
    if not result.interrupted:
        algo = (result.config or parsed.config).algo  # the resumed run's, where it was resumed
        emit(train_summary(result.run_dir, algo, result.iterations), as_json)
    return result.exit_code


def train_summary(run_dir: Path, algo: str, iterations: int) -> Summary:
    """A finished run's summary, from its ``evaluation.json`` (the final evaluation) or,
    with ``--no-final-eval``, its ``summary.json``."""
    title = f"pglab train ghm ({algo}): {iterations} iterations"
    evaluation_file = run_dir / "evaluation.json"
    if not evaluation_file.exists():  # --no-final-eval: the training return only
        summary = json.loads((run_dir / "summary.json").read_text())
        return Summary(
            title,
            [Figure("mean discounted payout of the last training batch", summary.get("return/mean"))],
            notes=["no final evaluation (--no-final-eval): pglab evaluate RUN values the policy against V*"],
            run_dir=run_dir,
            next=evaluate_command(run_dir),
            details={"run_dir": str(run_dir), "iterations": iterations, "summary.json": summary},
        )
    evaluation = json.loads(evaluation_file.read_text())
    return optimum_summary(
        title,
        evaluation["rows"],
        run_dir=run_dir,
        thresholds=(evaluation.get("learned_thresholds") or {}, evaluation.get("fd_thresholds") or {}),
        next_command=evaluate_command(run_dir),
        details={"run_dir": str(run_dir), "iterations": iterations, "evaluation": evaluation},
    )


def optimum_summary(
    title: str,
    rows: list[dict[str, Any]],
    *,
    run_dir: Path | None,
    next_command: str | None,
    details: dict[str, Any],
    thresholds: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> Summary:
    """GHM's headline: the worst % of V* over the initial states (simulated, and exact where
    the policy was valued by FD), judged against the target of :data:`TARGET_PCT`; the
    learned dividend barrier and issuance point beside the FD ones, each judged by
    :func:`threshold_verdicts` where both exist."""
    worst = min(row["pct_of_optimum"] for row in rows)
    result = [Figure(f"worst % of V* over {len(rows)} initial states", worst, ".2f", "%")]
    exact = [row["exact_pct_of_optimum"] for row in rows if "exact_pct_of_optimum" in row]
    if exact:
        result.append(Figure("exact (FD policy evaluation)", min(exact), ".2f", "%"))
    reference = [Figure("V* (finite-difference optimum)", 100.0, ".0f", "%")]
    learned, fd = thresholds or ({}, {})
    if learned or fd:
        for key, name in THRESHOLDS.items():
            result.append(Figure(f"{name} (cash)", learned.get(key), ".3f"))
            reference.append(Figure(f"FD {name}", fd.get(key), ".3f"))
    target = verdict(f">= {TARGET_PCT:g}% of V* at every initial state", worst >= TARGET_PCT, f"worst {worst:.2f}%")
    return Summary(
        title,
        result,
        reference,
        verdict="; ".join([target, *threshold_verdicts(learned, fd)]),
        run_dir=run_dir,
        next=next_command,
        details=details,
    )


THRESHOLDS = {"dividend_rate": "dividend barrier", "issuance_rate": "issuance below"}
"""The thresholds a GHM evaluation reports (keys of ``learned_thresholds``/``fd_thresholds``)."""


def threshold_within_tolerance(learned: float | None, fd: float | None) -> bool | None:
    """Whether a learned threshold lies within :data:`THRESHOLD_TOLERANCE` (cash) of the FD
    one; ``None`` where either does not exist (no dividend paid, no issuance)."""
    if learned is None or fd is None:
        return None
    return abs(learned - fd) <= THRESHOLD_TOLERANCE


def threshold_verdicts(learned: dict[str, Any], fd: dict[str, Any]) -> list[str]:
    """``dividend barrier within 0.03 of FD: yes (|learned - FD| 0.012)``, one per
    threshold that both the learned policy and the FD optimum have."""
    verdicts = []
    for key, name in THRESHOLDS.items():
        within = threshold_within_tolerance(learned.get(key), fd.get(key))
        if within is not None:
            gap = abs(learned[key] - fd[key])
            verdicts.append(
                f"{name} within {THRESHOLD_TOLERANCE:g} of FD: {'yes' if within else 'no'} (|learned - FD| {gap:.3f})"
            )
    return verdicts


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT``: the policy's discounted payout (mean, SE) from each
    initial cash level against the finite-difference optimum, with a progress bar over the
    simulated steps."""
    config = parse_flags(
        GHMEvaluateConfig,
        argv,
        prog="pglab evaluate",
        description="Value of a GHM checkpoint's policy against the finite-difference optimum.",
    ).config
    check_output_file("output", config.output)
    import torch

    from pglab.algos.ghm_agent import agent_from_checkpoint
    from pglab.configs.ghm import GHM_KINDS
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device

    device = resolve_device(config.device)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    checkpoint = load_checkpoint_file(config.checkpoint, kinds=GHM_KINDS, map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    cash_levels = list(config.cash) if config.cash is not None else list(agent.config.eval_cash)
    _check_cash_levels(agent, cash_levels)
    report, table = _evaluate_agent(config, agent, checkpoint, cash_levels, device)
    _write_report(config, report, table)
    return 0


def _check_cash_levels(agent: GHMAgent, cash_levels: list[float]) -> None:
    """Each initial cash level must lie above the run's liquidation point and, at each of
    the model's evaluation points, inside 90% of its FD grid (a :class:`ConfigError` naming
    ``cash``)."""
    from pglab.errors import ConfigError

    model = agent.model
    liquidation = float(getattr(model, "liquidation_cash", 0.0))
    for cash in cash_levels:  # the run's model says where the firm is liquidated
        if cash <= liquidation:
            raise ConfigError(
                "cash",
                cash,
                f"must exceed {liquidation:g}, where the firm of this run (--model {agent.config.model}) is liquidated",
            )
        for point in model.evaluation_points([cash]):
            if max(point.state[i] for i in model.cash_coordinates) > 0.9 * agent.config.fd_x_max:
                raise ConfigError(
                    "cash",
                    cash,
                    f"lies beyond 90% of the run's FD grid (fd_x_max={agent.config.fd_x_max:g}, in the "
                    "model's state), where V* is not computed",
                )


def _evaluate_agent(
    config: GHMEvaluateConfig, agent: GHMAgent, checkpoint: dict[str, Any], cash_levels: list[float], device: Any
) -> tuple[dict[str, Any], str]:
    """Simulate the agent's policy from ``cash_levels`` against the run's FD reference (its
    cached ``fd_reference.npz``, or solved afresh). Unset options take the run's own
    final-evaluation settings, so the defaults reproduce its final table. Returns the
    report and its table."""
    from pglab.algos.ghm_train import evaluate_against_reference, exact_policy_value, format_table, model_reference
    from pglab.configs.ghm import final_eval_dt
    from pglab.errors import UsageError
    from pglab.run.rundir import find_run_dir

    try:
        cache: Path | None = find_run_dir(checkpoint["path"]) / "fd_reference.npz"
    except UsageError:  # a checkpoint outside a run directory: solve the reference afresh
        cache = None
    reference = model_reference(agent.config, agent.model, cache if cache is not None and cache.exists() else None)
    episodes = config.episodes if config.episodes is not None else agent.config.eval_paths
    tail_tolerance = config.tail_tolerance if config.tail_tolerance is not None else agent.config.eval_tail_tolerance
    seed = config.seed if config.seed is not None else agent.config.seed + 2
    dt = config.dt or final_eval_dt(agent.config)
    if dt > agent.config.dt:
        warnings.warn(
            f"dt {dt:g} is coarser than the run's training dt {agent.config.dt:g}: the simulated value's "
            "time-step error grows with dt (the exact column does not depend on it)",
            UserWarning,
            stacklevel=1,
        )
    assert agent.config.absorption is not None  # set by GHMTrainConfig
    points = len(agent.model.evaluation_points(cash_levels))
    result, rows = evaluate_against_reference(
        agent.policy,
        agent.model,
        reference,
        cash_levels,
        num_paths=episodes,
        dt=dt,
        seed=seed,
        tail_tolerance=tail_tolerance,
        device=device,
        stochastic=config.stochastic,
        table_points=agent.config.policy_table_points,
        absorption=agent.config.absorption,
        progress=f"evaluate {checkpoint['kind']} ({episodes} paths x {points} initial states)",
    )
    exact_rows = None if config.stochastic else exact_policy_value(agent.policy, agent.model, reference, cash_levels)
    if exact_rows is not None:  # the deterministic policy's exact value beside the simulated one
        for row, exact in zip(rows, exact_rows, strict=False):
            row.update(exact_value=exact["exact_value"], exact_pct_of_optimum=exact["exact_pct_of_optimum"])
    report = {
        "checkpoint": checkpoint["path"],
        "kind": checkpoint["kind"],
        "iteration": agent.iteration,
        "policy": "stochastic" if config.stochastic else "deterministic",
        "simulated_time": result.simulated_time,
        "dt": dt,
        "num_paths": episodes,
        "seed": seed,
        "tail_tolerance": tail_tolerance,
        "rows": rows,
    }
    return report, format_table(rows, result.simulated_time, result.num_paths, dt=dt)


def _write_report(config: GHMEvaluateConfig, report: dict[str, Any], table: str) -> None:
    """``--output`` (JSON), and on stdout the table and the summary, or (``--json``) the
    report with the summary as one JSON document."""
    from pglab.errors import ConfigError
    from pglab.run.atomic import atomic_write_json

    if config.output is not None:
        try:
            atomic_write_json(config.output, report)
        except OSError as error:
            raise ConfigError("output", str(config.output), f"cannot be written: {error.strerror or error}") from error
    if not config.json:
        print(table)
    if config.output is not None:
        print(f"wrote {config.output}", file=sys.stderr)
    run_dir = run_dir_of(report["checkpoint"])
    summary = optimum_summary(
        f"pglab evaluate {report['checkpoint']} ({report['kind']}, iteration {report['iteration']}, "
        f"{report['policy']} policy)",
        report["rows"],
        run_dir=run_dir,
        next_command=None,
        details=report,
    )
    emit(summary, config.json)


def solve(argv: list[str]) -> int:
    """``pglab solve ghm``: optimal value, controls and thresholds by finite differences."""
    config = parse_flags(
        GHMSolveConfig,
        argv,
        prog="pglab solve ghm",
        description="The GHM model's optimal value, controls and thresholds by finite differences.",
    ).config
    check_output_path("output", None if config.output is None else config.output.with_suffix(".npz"))
    import numpy as np

    from pglab.envs.ghm import GHMModel
    from pglab.hjb.fd import solve_hjb_1d, solve_hjb_1d_extrapolated
    from pglab.run.atomic import atomic_write_text

    model = GHMModel(config.params())
    solver = solve_hjb_1d_extrapolated if config.extrapolate else solve_hjb_1d
    solution = solver(model, x_max=config.x_max, num_nodes=config.nodes)
    values = solution.value_at(list(config.cash))
    controls = solution.control_at(list(config.cash))
    thresholds = solution.thresholds()
    payload = {
        "params": dataclasses.asdict(config.params()),
        "nodes": config.nodes,
        "x_max": config.x_max,
        "extrapolated": config.extrapolate,
        "converged": solution.converged,
        "iterations": solution.iterations,
        "thresholds": thresholds,
        "rows": [
            {"cash": float(c), "value": float(v), "dividend_rate": float(u[0]), "issuance_rate": float(u[1])}
            for c, v, u in zip(config.cash, values, controls, strict=False)
        ],
    }
    if config.output is not None:
        output = config.output.with_suffix(".npz")
        output.parent.mkdir(parents=True, exist_ok=True)
        temporary = output.with_name(f".{output.stem}.tmp.npz")
        np.savez(temporary, grid=solution.grid, value=solution.value, controls=solution.controls)
        temporary.replace(output)
        lines = ["cash,value,dividend_rate,issuance_rate"] + [
            f"{x:.6g},{v:.8g},{u[0]:.6g},{u[1]:.6g}"
            for x, v, u in zip(solution.grid, solution.value, solution.controls, strict=False)
        ]
        atomic_write_text(output.with_suffix(".csv"), "\n".join(lines) + "\n")
        payload["output"] = str(output)
    if config.json:
        print(json.dumps(payload, indent=2))
        return 0
    print(
        f"GHM HJB by finite differences ({config.nodes} intervals on [0, {config.x_max}]"
        f"{', Richardson-extrapolated' if config.extrapolate else ''}; policy iteration "
        f"{'converged' if solution.converged else 'NOT converged'} in {solution.iterations} steps)"
    )
    print(f"{'cash':>6} {'V*':>9} {'a_L*':>6} {'a_E*':>6}")
    for row in payload["rows"]:
        print(f"{row['cash']:>6.2f} {row['value']:>9.4f} {row['dividend_rate']:>6.2f} {row['issuance_rate']:>6.2f}")
    dividend, issuance = thresholds.get("dividend_rate"), thresholds.get("issuance_rate")
    print(
        f"dividend barrier: {dividend if dividend is None else f'{dividend:.4f}'}; "
        f"issuance below: {issuance if issuance is None else f'{issuance:.4f}'}"
    )
    if config.output is not None:
        print(f"wrote {payload['output']}", file=sys.stderr)
    return 0
