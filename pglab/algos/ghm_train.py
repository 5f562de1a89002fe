"""``pglab train ghm``: train a policy for the GHM cash model and judge it against the
finite-difference optimum.

The trainer runs inside the shared training shell (:mod:`pglab.run.shell`), which owns
the run directory, resume, device/threads/seed, metrics.csv/.jsonl/TensorBoard,
checkpoints, SIGINT/SIGTERM and summary.json. What is left here reads top to bottom::

    reference   FD solution of the HJB (V*, optimal controls, thresholds)
    for iteration in 1..n_iterations:
        schedules (lr, std clamp, decision interval) at this iteration
        metrics = solver.train_step()          # rollout -> advantages -> updates
        log (metrics.*)                        every log_interval
        plot + quick value check vs V*         every eval_interval (eval.csv, eval.jsonl)
    final evaluation: the deterministic policy's value at eval_cash (>= 10,000 paths,
    simulated until the tail bound is < eval_tail_tolerance) against V*

Run directory (``--log-dir``, default ``runs/ghm-<algo>-<YYYYmmdd-HHMMSS>``)::

    config.json  metrics.csv  metrics.jsonl  eval.csv  eval.jsonl  summary.json
    evaluation.json  evaluation.csv  fd_reference.npz  tensorboard/
    plots/policy_value_iter_*.png  checkpoints/checkpoint_iter_*.pt  checkpoint_latest.pt

What ``--resume RUN`` guarantees (on the CPU, same machine and thread count):

* **Same budget: exact.** A run stopped (SIGINT/SIGTERM, a kill after a checkpoint) and
  resumed with the same ``n_iterations`` ends bit for bit where one uninterrupted run
  ends: ``N`` iterations + resume to ``2N`` equals ``2N`` iterations in one go, when
  the first part was started with ``--n_iterations 2N`` (weights, optimiser moments,
  RNG streams, counters and the metric rows are restored or truncated to the checkpoint).
* **Extended (or shortened) budget: exact when no schedule depends on it.** A schedule
  whose value at iteration ``i`` is a function of ``(i - 1) / (n_iterations - 1)``
  (``lr_final_fraction < 1``, ``final_max_std``, ``final_action_repeat``:
  :func:`pglab.configs.ghm.budget_schedules`) follows the new budget from the checkpoint
  on, so ``N`` + resume with ``--n_iterations 2N`` then differs from ``2N`` in one go; the
  resume says so in a one-line note and goes on. With constant schedules
  (``--lr_final_fraction 1``, no ``final_max_std``/``final_action_repeat``) the decay
  factor is exactly 1.0 and ``N`` + resume to ``2N`` equals ``2N`` bit for bit.
* Logging, evaluation, checkpoint cadence, device, threads and the simulator backend may
  change on resume without changing the training trajectory (bit-identical rollouts on
  every backend); any other field is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pglab.algos.actor_critic import ActorCritic
from pglab.algos.ghm_eval import PolicyValue, simulate_policy_value
from pglab.algos.ghm_refine import (
    PATHS_PER_TRAJECTORY,
    RefinablePolicy,
    RegimeRule,
    Rule,
    SearchSimulation,
    Thresholds,
    cash_line,
    refine_thresholds,
)
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.algos.pathwise import PathwisePolicyGradient
from pglab.configs.ghm import (
    GHM_KINDS,
    RESUMABLE_FIELDS,
    SOLVER_DEFAULTS,
    GHMTrainConfig,
    budget_schedules,
    evaluation_bytes,
    final_eval_dt,
    rollout_bytes,
    rollout_floats_per_step,
)
from pglab.envs.dynamics import ContinuousTimeModel, EvaluationPoint
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.ghm import GHMModel as OneStateGHM  # isinstance checks (a test may substitute GHMModel)
from pglab.envs.ghm_credit_line import GHMCreditLineModel
from pglab.envs.ghm_divisions import GHMDivisionsModel
from pglab.envs.ghm_ou import OUGHMModel
from pglab.envs.ghm_regimes import RegimeGHMModel
from pglab.envs.simulator import TrajectorySimulator
from pglab.errors import ConfigError
from pglab.hjb.fd import FDSolution, solve_hjb_1d
from pglab.hjb.reference import FDReference, ValueReference, as_reference
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.atomic import atomic_write_json, atomic_write_text
from pglab.run.ghm_plots import PolicyPlotData
from pglab.run.logger import MetricsLogger
from pglab.run.rundir import default_run_dir
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun

__all__ = [
    "GHM_KINDS",
    "GHMParams",
    "GHMRunResult",
    "GHMTrainConfig",
    "RESUMABLE_FIELDS",
    "SOLVER_DEFAULTS",
    "SPEC",
    "action_repeat_at",
    "build_model",
    "build_networks",
    "build_simulator",
    "build_solver",
    "check_fd_grid",
    "check_rollout_memory",
    "evaluate_against_reference",
    "fd_value_bound",
    "format_table",
    "policy_plot_data",
    "reference_solution",
    "train_ghm",
]

ThresholdModel = GHMModel | RegimeGHMModel | OUGHMModel
"""the models whose policy ``--refine_thresholds`` fits (:data:`pglab.configs.ghm.REFINABLE_MODELS`)"""

SPEC = TrainerSpec(
    system="ghm",
    config_class=GHMTrainConfig,
    kinds=GHM_KINDS,
    kind_of=lambda config: config.kind,
    step_key="iteration",
    resumable=RESUMABLE_FIELDS,
    total_steps=lambda config: config.n_iterations,
    budget_field="n_iterations",
    # A run made before these fields existed resumes the way it was trained: the policy
    # network in every rollout step, the policy-evaluation HJB residual at visited states.
    stored_defaults={
        "policy_table_points": 0,
        "hjb_residual": "policy",
        "hjb_c_min": None,
        "model": "ghm",
        "control_variate": "none",
        "critic_boundary": "none",
        "absorption": "grid",
        "refine_thresholds": False,
    },
)


def build_model(config: GHMTrainConfig) -> ContinuousTimeModel:
    """The model a config trains on (``--model`` with its parameters). Everything built
    from a train config (training, the agent API, ``pglab evaluate``, sweeps) builds it
    here. Its state is ``model.state_from_cash(cash)``: cash for GHM, liquidity ``cash +
    credit_limit`` for the credit line; the divisions' cash ``[B, N]``, ``(cash, regime)`` and
    ``(cash, mu)`` for the models with two states."""
    # the classes are looked up when called (a test may substitute this module's GHMModel)
    models: dict[str, Callable[[Any], ContinuousTimeModel]] = {
        "ghm": GHMModel,
        "credit-line": GHMCreditLineModel,
        "divisions": lambda params: GHMDivisionsModel([params] * config.divisions),
        "regimes": RegimeGHMModel,
        "ou": OUGHMModel,
    }
    return models[config.model](config.model_params())


def build_networks(
    config: GHMTrainConfig, model: ContinuousTimeModel, device: torch.device
) -> tuple[GaussianPolicy, ValueNetwork | None]:
    """The policy (a :class:`RefinablePolicy` with ``refine_thresholds``) and (unless
    ``no_baseline``) the value network of a config."""
    refinable = {} if model.regimes is None else {"regimes": model.regimes.count, "regime_coordinate": 1}
    policy = (RefinablePolicy if config.refine_thresholds else GaussianPolicy)(
        model.state_dim,
        model.action_dim,
        config.policy_hidden_dims,
        activation=config.activation,
        log_std_init=config.log_std_init,
        state_dependent_std=config.state_dependent_std,
        min_std=config.min_std,
        max_std=config.max_std,
        action_high=model.control.high,
        mean_init=[max(config.initial_rate_fraction * high, 1e-3) for high in model.control.high],
        mean_shift=[config.mean_shift_fraction * high for high in model.control.high],
        **(refinable if config.refine_thresholds else {}),
    ).to(device)
    layer = boundary_layer_width(model) if config.critic_boundary == "hard" else None
    baseline = (
        None
        if config.no_baseline
        else ValueNetwork(
            model.state_dim, config.baseline_hidden_dims, activation=config.activation, boundary_layer=layer
        ).to(device)
    )
    return policy, baseline


def boundary_layer_width(model: ContinuousTimeModel) -> float:
    """Width ``l = s(0)^2 / (2 max_u b(0, u))`` of the value's boundary layer at the
    liquidation point (state 0), from the model: with the cash pushed up at the largest
    drift, ``0.5 s^2 V'' + b V' = 0`` has the solution ``1 - exp(-x / l)`` there (GHM:
    ``sigma^2 / (2 (mu + a_E_max)) = 0.018``). A :class:`ConfigError` naming
    ``critic_boundary`` when no control moves the cash up at 0 (no such layer)."""
    import itertools

    zero = torch.zeros(1, 1, dtype=torch.float64)
    corners = [
        torch.tensor([corner], dtype=torch.float64)
        for corner in itertools.product(*zip(model.control.low, model.control.high, strict=False))
    ]
    drift = max(float(model.drift(zero, corner)[0, 0]) for corner in corners)
    volatility = max(float(model.diffusion(zero, corner)[0, 0]) for corner in corners)
    if not drift > 0 or not volatility > 0:
        raise ConfigError(
            "critic_boundary",
            "hard",
            f"needs a positive drift and volatility at the liquidation point "
            f"(largest drift {drift:g}, volatility {volatility:g}); use --critic_boundary none",
        )
    return volatility**2 / (2.0 * drift)


def build_simulator(config: GHMTrainConfig, model: ContinuousTimeModel) -> TrajectorySimulator:
    """The training rollouts' simulator: batched in this process, or spread over workers."""
    assert config.action_repeat is not None and config.absorption is not None  # set by GHMTrainConfig
    if config.simulator == "batched":
        return TrajectorySimulator(
            model, config.dt, config.T, action_repeat=config.action_repeat, absorption=config.absorption
        )
    from pglab.envs.parallel import ParallelTrajectorySimulator

    return ParallelTrajectorySimulator(
        model,
        config.dt,
        config.T,
        action_repeat=config.action_repeat,
        backend=config.simulator,
        n_workers=config.n_workers,
        ray_address=config.ray_address,
        absorption=config.absorption,
    )


def build_solver(
    config: GHMTrainConfig,
    policy: GaussianPolicy,
    baseline: ValueNetwork | None,
    simulator: TrajectorySimulator,
    generator: torch.Generator | None,
) -> MonteCarloPolicyGradient | PathwisePolicyGradient:
    """The solver behind ``--algo`` (each provides ``train_step``, ``optimizers``)."""
    assert config.n_trajectories is not None and config.lr_policy is not None  # set by GHMTrainConfig
    assert config.baseline_steps is not None and config.score_samples is not None
    assert config.lr_baseline is not None
    if config.algo == "mc":
        assert config.control_variate is not None  # set by GHMTrainConfig
        return MonteCarloPolicyGradient(
            policy,
            simulator,
            baseline,
            n_trajectories=config.n_trajectories,
            lr_policy=config.lr_policy,
            lr_baseline=config.lr_baseline,
            max_grad_norm=config.max_grad_norm,
            advantage=config.advantage,
            advantage_normalization=config.advantage_normalization,
            terminal_value=config.terminal_value,
            baseline_steps=config.baseline_steps,
            score_samples=config.score_samples,
            policy_steps=config.policy_steps,
            rollout_table_points=config.policy_table_points,
            advantage_steps=int(round(config.advantage_horizon / config.dt)),
            control_variate=config.control_variate,
            generator=generator,
        )
    # pathwise and actor-critic share the differentiable rollout and the critic's settings
    pathwise: dict[str, Any] = dict(
        n_trajectories=config.n_trajectories,
        lr_policy=config.lr_policy,
        lr_critic=config.lr_baseline,
        max_grad_norm=config.max_grad_norm,
        clip_sharpness=config.clip_sharpness,
        critic_steps=config.baseline_steps,
        critic_samples=config.score_samples or 10**9,
        generator=generator,
    )
    if config.algo == "pathwise":
        return PathwisePolicyGradient(policy, simulator, baseline, **pathwise)
    if config.algo == "actor-critic":
        return ActorCritic(
            policy,
            simulator,
            baseline,
            **pathwise,
            gae_lambda=config.gae_lambda,
            hjb_weight=config.hjb_weight,
            hjb_samples=config.hjb_samples,
            hjb_residual=config.hjb_residual,
            hjb_interval=config.hjb_interval(),
        )
    raise ConfigError("algo", config.algo, "unknown solver")


def model_reference(config: GHMTrainConfig, model: ContinuousTimeModel, cache: Path | None = None) -> ValueReference:
    """The exact optimum of the config's model (its ``reference`` hook on ``[0, fd_x_max]``
    with ``fd_nodes`` intervals), cached as ``fd_reference.npz`` (its ``to_arrays``)."""
    if cache is not None and cache.exists():
        with np.load(cache) as stored:
            return model.reference_from_arrays({name: stored[name] for name in stored.files})
    reference = model.reference(x_max=config.fd_x_max, num_nodes=config.fd_nodes)
    if cache is not None:
        tmp = cache.with_name(f".{cache.stem}.tmp.npz")
        arrays: dict[str, Any] = reference.to_arrays()
        np.savez(tmp, **arrays)
        tmp.replace(cache)
    return reference


def reference_solution(config: GHMTrainConfig, model: ContinuousTimeModel, cache: Path | None = None) -> FDSolution:
    """The FD optimum of a one-state model (:func:`model_reference`'s solution)."""
    reference = model_reference(config, model, cache)
    if not isinstance(reference, FDReference):
        raise ConfigError("model", config.model, "has more than one state: its reference is not a 1-D FD solution")
    return reference.solution


# The check of fd_x_max (check_fd_grid): its grid step (state units; coarse, as it compares
# two solutions on the same step, and cheap: policy-iteration solves of ~600 and ~1,200
# nodes), and how much the FD value at the evaluated states may change when the grid is
# made twice as long before the grid's end counts as shaping the solution (relative).
GRID_CHECK_STEP = 0.01
GRID_CHECK_VALUE_TOLERANCE = 0.005
_GRID_CHECKS: dict[tuple, tuple[tuple[float | None, float | None], float]] = {}


def _fd_on_two_grids(
    model: GHMModel, x_max: float, states: tuple[float, ...]
) -> tuple[tuple[float | None, float | None], float]:
    """The FD dividend barriers (state) on ``[0, x_max]`` and on ``[0, 2 x_max]``, one step
    :data:`GRID_CHECK_STEP`, and the largest relative change of ``V`` at ``states`` between
    the two (remembered per model class, parameters, grid end and states: a sweep or a
    test suite checks each calibration once per process)."""
    key = (type(model), model.params, x_max, states)
    if key not in _GRID_CHECKS:
        nodes = max(int(round(x_max / GRID_CHECK_STEP)), 10)
        short, long = (
            solve_hjb_1d(model, x_max=end, num_nodes=count) for end, count in ((x_max, nodes), (2 * x_max, 2 * nodes))
        )
        values = short.value_at(states), long.value_at(states)
        change = float(np.max(np.abs(values[0] - values[1]) / np.maximum(np.abs(values[1]), 1e-12)))
        _GRID_CHECKS[key] = (short.thresholds()["dividend_rate"], long.thresholds()["dividend_rate"]), change
    return _GRID_CHECKS[key]


def check_fd_grid(config: GHMTrainConfig, model: ContinuousTimeModel) -> None:
    """Refuse a calibration whose FD reference is shaped by the grid's end: a
    :class:`ConfigError` naming ``fd_x_max`` with the barrier, before anything is written.

    The FD grid ends at ``fd_x_max`` with a reflecting boundary. When the dividend barrier
    lies beyond it, or the reflection otherwise matters (a large ``sigma``, ``rho`` close to
    ``r``), the "optimum" is an artefact of the grid. So solve on the grid and on one twice
    as long (same coarse step) and require the same barrier and, at the evaluated cash
    levels and the top of the plotted range, the same value within 0.5% -- for each of the
    one-state GHM models the model's reference is built from (``grid_check_models``: the
    model itself, each distinct division, each regime without switching, the profitability
    frozen at the evaluated levels)."""
    for component in model.grid_check_models():
        assert isinstance(component, OneStateGHM)  # every --model lists one-state GHM models
        _check_fd_grid_1d(config, component)


def _check_fd_grid_1d(config: GHMTrainConfig, model: GHMModel) -> None:
    """:func:`check_fd_grid` for one one-state GHM model."""
    if model.params.a_L_max <= 0:  # no dividends, no barrier
        return
    step, x_max = GRID_CHECK_STEP, float(config.fd_x_max)
    states = tuple(
        sorted(
            {min(float(model.state_from_cash(cash)), x_max) for cash in config.eval_cash}
            | {min(plot_high(model), x_max)}
        )
    )
    (on_grid, on_longer), change = _fd_on_two_grids(model, x_max, states)
    if on_longer is None or on_longer >= x_max - 3 * step:
        where = "no dividend barrier" if on_longer is None else f"its dividend barrier at state {on_longer:.3g}"
        raise ConfigError(
            "fd_x_max",
            config.fd_x_max,
            f"the FD reference on [0, 2 fd_x_max] = [0, {2 * x_max:g}] has "
            f"{where}: the barrier lies beyond the grid, so the FD optimum is not the model's; raise "
            "fd_x_max (or the problem is ill-posed for these parameters)",
        )
    if on_grid is None or abs(on_grid - on_longer) > 3 * step or change > GRID_CHECK_VALUE_TOLERANCE:
        raise ConfigError(
            "fd_x_max",
            config.fd_x_max,
            f"the FD solution depends on the grid's end: its dividend barrier "
            f"is at state {on_grid if on_grid is None else f'{on_grid:.3g}'} on [0, {x_max:g}] and "
            f"{on_longer:.3g} on [0, {2 * x_max:g}], its value changes by {100 * change:.2g}% at the "
            f"evaluated states; raise fd_x_max to {2 * x_max:g} or more",
        )


# The calibrations the mc defaults were chosen and checked on (docs/ghm.md, "The
# defaults on six calibrations they were not chosen on"): each model parameter's range over
# those nine calibrations, and the highest FD dividend barrier relative to the initial-cash
# range. Outside them the defaults are untested, not wrong: train_ghm warns, naming the field
# (inside them they are tested, not always right: lambda 0.3 missed 98% on two seeds).
CHECKED_RANGES: dict[str, tuple[float, float]] = {
    "mu": (0.1, 0.15),
    "sigma": (0.15, 0.4),
    "r": (0.03, 0.05),
    "lambda_dilution": (0.1, 0.4),
    "rho": (0.06, 0.12),
    "a_L_max": (1.0, 1.0),
    "a_E_max": (1.0, 1.0),
    "initial_cash_low": (0.0, 0.0),
    "initial_cash_high": (2.0, 2.0),
}
CHECKED_BARRIER_FRACTION = 0.7  # FD barrier 1.32 (1.35 on the check's coarse grid) with initial cash on [0, 2]


def calibration_warnings(config: GHMTrainConfig, model: GHMModel) -> list[str]:
    """One line per model parameter of ``config`` outside :data:`CHECKED_RANGES` (and when
    the FD dividend barrier lies high in the initial-cash range, where few training paths
    start above it); empty inside the range the mc defaults were checked on."""
    params = config.params
    lines = []
    for name, (low, high) in CHECKED_RANGES.items():
        value = getattr(params, name)
        if not low <= value <= high:
            checked = f"{low:g}" if low == high else f"[{low:g}, {high:g}]"
            lines.append(
                f"pglab: warning: {name}={value:g} is outside the calibrations the defaults were checked on "
                f"({name} {checked}); compare the final table with the FD optimum (exact %) before trusting it"
            )
    (barrier, _), _ = _fd_on_two_grids(model, float(config.fd_x_max), (0.0,))
    span = params.initial_cash_high - params.initial_cash_low
    if (
        barrier is not None
        and span > 0
        and (model.cash_from_state(barrier) - params.initial_cash_low) > CHECKED_BARRIER_FRACTION * span
    ):
        lines.append(
            f"pglab: warning: initial_cash_high={params.initial_cash_high:g}: the FD dividend barrier "
            f"({float(model.cash_from_state(barrier)):.3g}) lies in the top third of the initial-cash range, where "
            "few paths start above it; raise initial_cash_high to about "
            f"{2 * float(model.cash_from_state(barrier)):.2g}"
        )
    return lines


def action_repeat_at(config: GHMTrainConfig, progress: float) -> int:
    """The decision interval (in steps) at training progress ``progress`` in [0, 1]:
    ``round(k0 * (k1 / k0) ** progress)``, geometric from ``action_repeat`` to
    ``final_action_repeat`` (constant when that is unset)."""
    assert config.action_repeat is not None  # set by GHMTrainConfig
    if config.final_action_repeat is None:
        return config.action_repeat
    ratio = config.final_action_repeat / config.action_repeat
    return max(1, int(round(config.action_repeat * ratio**progress)))


def deterministic_policy_fn(policy: GaussianPolicy):
    return lambda states: policy.mean_std(states)[0]


def fd_value_bound(solution: FDSolution):
    """``V*`` of a one-state FD solution as a torch function ``[B, 1] -> [B]``: an upper
    bound of any policy's value (:meth:`pglab.hjb.reference.FDReference.value_bound`)."""
    return FDReference(solution).value_bound()


def fd_value_slope(solution: FDSolution):
    """``V*'`` as a torch function ``[B, 1] -> [B]`` (central differences on the FD grid,
    linearly interpolated; 0 beyond the grid): the evaluation's control-variate coefficient."""
    slope = FDReference(solution).value_slope()
    return lambda states: slope(states)[:, 0]


def point_fields(point: EvaluationPoint) -> dict[str, Any]:
    """How a table row names its initial state: ``initial_cash`` for a one-state cash model
    (cash, not the state: the credit line's state is cash + L), else ``label`` and
    ``initial_state``."""
    if point.cash is not None:
        return {"initial_cash": point.cash}
    return {"label": point.label, "initial_state": list(point.state)}


def row_label(row: dict[str, Any]) -> str:
    """The label of a table row (:func:`point_fields`), as metric names use it: ``c0.25``."""
    return str(row["label"]) if "label" in row else f"c{row['initial_cash']:g}"


def evaluate_against_reference(
    policy: GaussianPolicy,
    model: ContinuousTimeModel,
    reference: ValueReference | FDSolution,
    cash_levels: Sequence[float],
    *,
    num_paths: int,
    dt: float,
    seed: int,
    tail_tolerance: float,
    device: torch.device,
    progress: str | None = None,
    table_points: int = 0,
    stochastic: bool = False,
    control_variate: bool = True,
    absorption: str = "grid",
) -> tuple[PolicyValue, list[dict[str, Any]]]:
    """The policy's simulated value from each of the model's evaluation points for
    ``cash_levels`` (``model.evaluation_points``) against ``V*``.

    For a one-state model cash levels are mapped to the model's state
    (``model.state_from_cash``: liquidity ``cash + credit_limit`` for the credit line) for
    the simulation and the reference lookup, and the rows report the initial cash; for a
    model with more states the rows report each point's label and state. The deterministic
    policy (its mean) by default, a sample at every step if ``stochastic``. ``progress``:
    label of a progress bar over the simulated steps; ``table_points``: read the
    deterministic policy of a one-state model from a table of that many states, see
    :func:`simulate_policy_value` (a refined policy's threshold rule is applied directly).
    ``control_variate``: subtract the Brownian noise with ``grad V*`` as its coefficient
    (unbiased; a several-fold smaller standard error for a near-optimal policy)."""
    reference = as_reference(reference)
    generator = make_generator(seed, device)
    points = model.evaluation_points(cash_levels)
    states = [point.state for point in points]
    if isinstance(policy, RefinablePolicy) and policy.thresholds is not None:
        table_points = 0  # a threshold rule is cheap to apply and has no table error
    if stochastic:
        policy_fn, table_points = (lambda x: policy.sample(x, generator)), 0
    else:
        policy_fn = deterministic_policy_fn(policy)
    with torch.no_grad():
        result = simulate_policy_value(
            model,
            policy_fn,
            states,
            num_paths=num_paths,
            dt=dt,
            generator=generator,
            value_bound=reference.value_bound(),
            tail_tolerance=tail_tolerance,
            device=device,
            progress=progress,
            table_points=table_points,
            value_slope=reference.value_slope() if control_variate else None,
            absorption=absorption,
        )
    optimum = reference.value_at(np.asarray(states, dtype=np.float64))
    rows = []
    for point, value, stderr, tail, best in zip(
        points, result.mean, result.stderr, result.tail_bound, optimum, strict=False
    ):
        rows.append(
            {
                **point_fields(point),
                "value": value,
                "stderr": stderr,
                "tail_bound": tail,
                "fd_optimum": float(best),
                "pct_of_optimum": 100.0 * value / float(best),
            }
        )
    return result, rows


def exact_policy_value(
    policy: GaussianPolicy,
    model: ContinuousTimeModel,
    reference: ValueReference | FDSolution,
    cash_levels: Sequence[float],
) -> list[dict[str, Any]] | None:
    """The deterministic policy's value at the evaluation points of ``cash_levels`` with
    neither Monte Carlo noise nor time step, where the reference can compute it (``None``
    where it cannot): for one state the FD evaluation of the continuously applied policy
    (its mean clipped to the control box) on the reference's grid
    (:func:`pglab.hjb.fd.evaluate_policy_1d`, one tridiagonal solve on each of two grids,
    ~20 ms), against ``V*``. One row per point: its :func:`point_fields`, ``exact_value``,
    ``exact_pct_of_optimum``."""
    reference = as_reference(reference)
    device = next(policy.parameters()).device

    def controls(states):
        points = torch.as_tensor(states, dtype=torch.float32, device=device)
        with torch.no_grad():
            mean = policy.mean_std(points.unsqueeze(1) if points.dim() == 1 else points)[0]
            return model.control.clip(mean).double().cpu().numpy()

    points = model.evaluation_points(cash_levels)
    states = np.asarray([point.state for point in points], dtype=np.float64)
    values = reference.policy_value(model, controls, states)
    if values is None:
        return None
    optimum = reference.value_at(states)
    return [
        {
            **point_fields(point),
            "exact_value": float(value),
            "exact_pct_of_optimum": 100.0 * float(value) / float(best),
        }
        for point, value, best in zip(points, values, optimum, strict=False)
    ]


def thresholds_in_cash(model: GHMModel, thresholds: dict[str, float | None]) -> dict[str, float | None]:
    """Thresholds found on the model's state (the FD grid, a policy plot's axis) in cash."""
    return {name: None if state is None else float(model.cash_from_state(state)) for name, state in thresholds.items()}


def state_label(model: GHMModel) -> str:
    """The policy figure's x-axis label: the model's state, and how it relates to cash."""
    if model.state_names == ("cash",):
        return "cash c"
    return f"{model.state_names[0]} = cash + {-model.params.liquidation_cash:g}"


def plot_high(model: ThresholdModel) -> float:
    """Upper end of the policy plots' state axis: the state of ``initial_cash_high``, at least 2."""
    return max(float(model.state_from_cash(model.params.initial_cash_high)), 2.0)


def format_table(rows: list[dict[str, Any]], simulated_time: float, num_paths: int, *, dt: float | None = None) -> str:
    """The final table: one row per initial state (cash for a one-state model, else the
    point's label, its state listed below the table)."""
    step = "" if dt is None else f" in steps of dt={dt:g}"
    labelled = any("label" in row for row in rows)
    width = max([6] + [len(str(row.get("label", ""))) for row in rows])
    first = f"{'state':<{width}}" if labelled else f"{'cash':>6}"
    lines = [
        f"Deterministic policy vs finite-difference optimum ({num_paths} paths per row, simulated to "
        f"t={simulated_time:.1f}{step})",
        f"{first} {'value':>9} {'+-SE':>7} {'V* (FD)':>9} {'% of V*':>8} {'tail<=':>8} {'exact %':>8}",
    ]
    for row in rows:
        exact = f"{row['exact_pct_of_optimum']:>7.2f}%" if "exact_pct_of_optimum" in row else f"{'-':>8}"
        name = f"{row['label']:<{width}}" if labelled else f"{row['initial_cash']:>6.2f}"
        lines.append(
            f"{name} {row['value']:>9.4f} {row['stderr']:>7.4f} {row['fd_optimum']:>9.4f} "
            f"{row['pct_of_optimum']:>7.2f}% {row['tail_bound']:>8.4f} {exact}"
        )
    if labelled:
        lines += [f"{row['label']}: state {', '.join(f'{x:g}' for x in row['initial_state'])}" for row in rows]
    lines.append(
        "exact %: the same policy applied continuously, valued by FD policy evaluation (no Monte Carlo noise, no dt)"
    )
    return "\n".join(lines)


def policy_plot_data(
    policy: GaussianPolicy,
    baseline: ValueNetwork | None,
    model: GHMModel,
    high: float,
    device: torch.device,
    points: int = 201,
) -> PolicyPlotData:
    """What the policy/value figure shows on ``points`` cash levels in ``[0, high]``: the
    deterministic policy's applied rates (its mean clipped to the control box, as the
    simulator applies it), the pre-clip mean, the std, the learned value and the net payout
    rate ``a_L - (1 + lambda) a_E`` of the applied rates."""
    states = torch.linspace(0.0, high, points, device=device).unsqueeze(1)
    with torch.no_grad():
        mean, std = policy.mean_std(states)
        low, top = model.control.bounds(states)
        rates = torch.maximum(torch.minimum(mean, top.to(mean.dtype)), low.to(mean.dtype))
        values = baseline(states) if baseline is not None else None
    rates_np = rates.cpu().numpy()
    lam = model.params.lambda_dilution
    return PolicyPlotData(
        states=states[:, 0].cpu().numpy(),
        rates=rates_np,
        pre_clip_means=mean.cpu().numpy(),
        std=std.cpu().numpy(),
        values=None if values is None else values.cpu().numpy(),
        payout=rates_np[:, 0] - (1 + lam) * rates_np[:, 1],
        control_names=tuple(model.control.names),
        state_label=state_label(model),
    )


def device_memory_bytes(device: torch.device) -> int | None:
    """Physical memory of ``device`` (the GPU's, or the machine's RAM for the CPU), or
    ``None`` when it cannot be read."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def check_rollout_memory(config: GHMTrainConfig, device: torch.device) -> None:
    """Refuse, before anything is allocated or written, a run whose tensors cannot fit in
    ``device``'s memory: a :class:`ConfigError` naming ``n_trajectories`` (or
    ``eval_paths``)."""
    memory = device_memory_bytes(device)
    if memory is None:
        return
    assert config.n_trajectories is not None  # set by GHMTrainConfig
    num_steps = int(round(config.T / config.dt))
    rollout = rollout_bytes(config.n_trajectories, config.T, config.dt, config.model_dims())
    if rollout > memory:
        raise ConfigError(
            "n_trajectories",
            config.n_trajectories,
            f"one iteration's rollout needs at least {rollout / 2**30:,.1f} GiB ({num_steps} steps x "
            f"{rollout_floats_per_step(config.model_dims())} float32 per path), more than the "
            f"{memory / 2**30:,.1f} GiB of "
            f"{device.type}; use fewer paths",
        )
    evaluation = evaluation_bytes(config.eval_paths, len(config.eval_cash))
    if evaluation > memory:
        raise ConfigError(
            "eval_paths",
            config.eval_paths,
            f"the final evaluation needs at least {evaluation / 2**30:,.1f} GiB, more than the "
            f"{memory / 2**30:,.1f} GiB of {device.type}; use fewer paths",
        )


@dataclass
class GHMRunResult:
    """What :func:`train_ghm` returns.

    Attributes:
        run_dir: the run directory. iterations: iterations done (across resumes).
        final_rows: the final evaluation's rows (``None`` if it did not run).
        interrupted: stopped by SIGINT/SIGTERM before the budget was done.
        exit_code: 0, or :data:`pglab.errors.EXIT_INTERRUPTED` after a stop.
        config: the config the run used (merged with the stored one on ``--resume``).
    """

    run_dir: Path
    iterations: int
    final_rows: list[dict[str, float]] | None
    interrupted: bool
    exit_code: int = 0
    config: GHMTrainConfig | None = None


def _note_budget_change(run: TrainingRun, echo: Callable[..., None]) -> None:
    """On a resume that changes ``n_iterations`` while a schedule depends on it, say that
    the rest of the run follows the new budget's schedule (see the module docstring)."""
    if run.checkpoint is None:
        return
    before, after = run.checkpoint["config"].get("n_iterations"), run.config.n_iterations
    schedules = budget_schedules(run.config)
    if before == after or not schedules:
        return
    echo(
        f"pglab: note: n_iterations: {before} -> {after} changes the schedules {', '.join(schedules)} from iteration "
        f"{run.start + 1} on (they are functions of n_iterations), so this run will differ from one uninterrupted "
        f"{after}-iteration run; constant schedules (--lr_final_fraction 1 --final_max_std None, no "
        "final_action_repeat/td_final_fraction) extend exactly",
        file=sys.stderr,
    )


def check_start(run: TrainingRun, echo: Callable[..., None]) -> None:
    """Refuse a run that cannot work before anything is built (the shell then removes the
    directory a fresh run created): rollouts too large for the device and, for a fresh run,
    an FD reference shaped by its grid's end. Warn about a calibration the mc defaults were
    not checked on, and about a resumed budget that changes a schedule."""
    config = run.config
    check_rollout_memory(config, run.device)
    if not run.resumed:  # a resumed run was checked when it started
        model = build_model(config)
        check_fd_grid(config, model)
        if config.algo == "mc" and isinstance(model, OneStateGHM) and config.model == "ghm":
            for line in calibration_warnings(config, model):
                echo(line, file=sys.stderr)
    _note_budget_change(run, echo)


@dataclass
class GHMTraining:
    """What a run trains with (:func:`build_training`).

    Attributes:
        config: the run's config. device: where the networks live. run_dir: the run directory.
        generator: the simulation's random stream (initial states, noise, subsamples).
        model: the model trained on. simulator: the training rollouts' simulator.
        policy, baseline: the networks (``baseline`` is ``None`` for ``--no-baseline``).
        solver: the ``--algo`` solver (its ``train_step`` is one iteration).
        reference: the exact optimum ``V*`` (the model's ``reference``; a one-state model's:
            an :class:`~pglab.hjb.reference.FDReference` with the optimal controls).
        eval_logger: the quick checks' log (``eval.csv``, ``eval.jsonl``).
    """

    config: GHMTrainConfig
    device: torch.device
    run_dir: Path
    generator: torch.Generator
    model: ContinuousTimeModel
    simulator: TrajectorySimulator
    policy: GaussianPolicy
    baseline: ValueNetwork | None
    solver: MonteCarloPolicyGradient | PathwisePolicyGradient
    reference: ValueReference
    eval_logger: MetricsLogger

    def tracked(self) -> dict[str, Any]:
        """The arguments of :meth:`TrainingRun.track`: the networks, their optimisers, the
        simulation's random stream, and the model (a resume refuses a checkpoint of another).
        The schedules are functions of the iteration, so they hold no state."""
        models: dict[str, torch.nn.Module] = {"policy": self.policy}
        if self.baseline is not None:
            models["baseline"] = self.baseline
        return {
            "models": models,
            "optimizers": self.solver.optimizers(),
            "rngs": {"sim": self.generator},
            "meta": {"model": self.model.describe()},
        }


@contextlib.contextmanager
def build_training(run: TrainingRun) -> Iterator[GHMTraining]:
    """Build what a run trains with: the simulation's generator, the model, the simulator,
    the networks (their initial weights come from the seeded global RNG in this order), the
    solver, the exact reference (cached as ``fd_reference.npz``) and the quick checks' log.
    On the way out the log is closed and the simulator's workers are stopped."""
    config, device, run_dir = run.config, run.device, run.run_dir
    generator = make_generator(config.seed, device)
    model = build_model(config)
    with build_simulator(config, model) as simulator:
        policy, baseline = build_networks(config, model, device)
        solver = build_solver(config, policy, baseline, simulator, generator)
        reference = model_reference(config, model, run_dir / "fd_reference.npz")
        with MetricsLogger(
            run_dir,
            csv_name="eval.csv",
            jsonl_name="eval.jsonl",
            tensorboard_dir="tensorboard",
            resume_step=run.start if run.resumed else None,
        ) as eval_logger:
            yield GHMTraining(
                config=config,
                device=device,
                run_dir=run_dir,
                generator=generator,
                model=model,
                simulator=simulator,
                policy=policy,
                baseline=baseline,
                solver=solver,
                reference=reference,
                eval_logger=eval_logger,
            )


def apply_schedules(training: GHMTraining, iteration: int) -> None:
    """Set every schedule to its value at ``iteration``: the learning rates, the std's
    upper clamp, the decision interval and (actor-critic) the TD(lambda) weight. Each is a
    function of the iteration and the budget, so a resumed run sets the same values."""
    config, solver = training.config, training.solver
    assert config.n_iterations is not None and config.lr_final_fraction is not None  # set by GHMTrainConfig
    assert config.lr_policy is not None
    # linear decay: lr_i = lr_0 * (1 - (1 - f) * (i - 1) / (N - 1))
    progress = (iteration - 1) / max(config.n_iterations - 1, 1)
    decay = 1.0 - (1.0 - config.lr_final_fraction) * progress
    for name, optimizer in solver.optimizers().items():
        initial_lr = config.lr_policy if name == "policy" else config.lr_baseline
        assert initial_lr is not None  # set by GHMTrainConfig
        for group in optimizer.param_groups:
            group["lr"] = initial_lr * decay
    if config.final_max_std is not None:
        # geometric decay of the std's upper clamp: log sigma_max moves linearly
        start_log = min(config.log_std_init, math.log(config.max_std))
        training.policy.log_std_max = start_log + (math.log(config.final_max_std) - start_log) * progress
    training.simulator.action_repeat = action_repeat_at(config, progress)
    if isinstance(solver, ActorCritic):  # TD(lambda)'s weight: 1 -> td_final_fraction
        solver.td_weight = 1.0 - (1.0 - config.td_final_fraction) * progress


def train_steps(run: TrainingRun, training: GHMTraining) -> dict[str, float]:
    """The training loop: per iteration the schedules and one solver step; a metrics row
    every ``log_interval`` and a quick check every ``eval_interval`` iterations (and at the
    last). ``env_steps`` counts the simulated path-steps. Returns the last row's values."""
    config, simulator = training.config, training.simulator
    assert config.n_iterations is not None and config.n_trajectories is not None  # set by GHMTrainConfig
    last_values: dict[str, float] = {}
    for iteration in run.steps(config.n_iterations, desc=f"train ghm --algo {config.algo}"):
        apply_schedules(training, iteration)
        if isinstance(training.policy, RefinablePolicy):  # a resumed run trains the network on
            training.policy.thresholds = None
        metrics: dict[str, Any] = {
            **training.solver.train_step(),
            "stats/action_repeat": float(simulator.action_repeat),
        }
        run.counters["env_steps"] += config.n_trajectories * simulator.num_steps
        last = iteration == config.n_iterations
        if iteration % config.log_interval == 0 or last:
            last_values = run.log(iteration, metrics)
            run.set_postfix(
                ret=f"{last_values['return/mean']:.3f}",
                base=f"{last_values.get('loss/baseline', float('nan')):.4f}",
            )
        if last and config.refine_thresholds:  # inside the last step: its checkpoint holds the rule
            refine_policy(training)
        if iteration % config.eval_interval == 0 or last:
            quick_check(training, iteration, {"wall_time": run.elapsed, "env_steps": run.counters["env_steps"]})
    return last_values


def refine_policy(training: GHMTraining) -> None:
    """``--refine_thresholds``: replace the policy's deterministic rule by the threshold rule
    with the highest simulated value (:func:`pglab.algos.ghm_refine.refine_thresholds`; one
    per regime for ``--model regimes``, on cash alone for ``--model ou``), searched from the
    network's thresholds by the final
    table's half-max rule on ``4 n_trajectories`` paths over :func:`refine_horizon`, the
    critic valuing the paths alive at its end; its own random stream (``seed + 3``), so the
    training's is untouched."""
    config, policy, model, critic = training.config, training.policy, training.model, training.baseline
    assert isinstance(policy, RefinablePolicy) and isinstance(
        model, (OneStateGHM, RegimeGHMModel, OUGHMModel)
    )  # the config's
    assert critic is not None and config.n_trajectories is not None and config.absorption is not None
    policy.thresholds = None
    simulation = SearchSimulation(
        model=model,
        critic=critic,
        num_paths=PATHS_PER_TRAJECTORY * config.n_trajectories,
        num_steps=int(round(refine_horizon(config) / config.dt)),
        dt=config.dt,
        seed=config.seed + 3,
        bridge=config.absorption == "bridge",
        device=training.device,
    )
    policy.thresholds = refine_thresholds(simulation, network_rule(training), upper=plot_high(model))


def network_rule(training: GHMTraining) -> Rule:
    """The network's own threshold rule by the half-max rule (:func:`rule_thresholds`): in
    every regime for a model with regimes."""
    policy, model, device = training.policy, training.model, training.device
    assert isinstance(model, (OneStateGHM, RegimeGHMModel, OUGHMModel))  # --refine_thresholds' models
    regimes = 1 if model.regimes is None else model.regimes.count
    rules = []
    for regime in range(regimes):
        found = rule_thresholds(model, *network_rates(policy, model, device, regime=regime))
        rules.append(Thresholds(found["dividend_rate"], found["issuance_rate"]))
    return rules[0] if model.regimes is None else RegimeRule(tuple(rules), model.regimes.coordinate)


REFINE_DISCOUNT_HORIZONS = 3.0
"""the threshold search's simulated time in units of ``1 / rho`` (:func:`refine_horizon`)"""
REFINE_MAX_TRAINING_HORIZONS = 8.0
"""and at most this many training horizons ``T``"""


def refine_horizon(config: GHMTrainConfig) -> float:
    """The threshold search's simulated time, ``min(3 / rho, 8 T)`` (30 time units at the
    default ``rho`` and ``T``, six training horizons). The critic values what lies beyond it
    with weight ``exp(-3) = 0.05`` wherever ``3 / rho <= 8 T`` (``rho >= 0.075`` at the
    default ``T``), so the critic's error moves the barrier found little. Measured on the
    critic of a 400-iteration run at the default calibration (FD barrier 0.342), the mean
    barrier found over seeds of the search: 0.370 at ``1 / rho`` (the critic's weight 0.37),
    0.352 at ``2 / rho``, 0.346 at ``3 / rho``. The bound by ``T`` keeps a run with a short
    training horizon (a quick trial, a test) from simulating far beyond it."""
    return min(REFINE_DISCOUNT_HORIZONS / config.params.rho, REFINE_MAX_TRAINING_HORIZONS * config.T)


def network_rates(
    policy: GaussianPolicy,
    model: ThresholdModel,
    device: torch.device,
    points: int = 201,
    *,
    regime: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``(states [P], rates [P, 2])``: the network's own deterministic rates (its mean
    clipped to the control box, a refined policy's network included) on ``points`` states
    of the policy figure's range (its own 201 by default), in ``regime`` for a model with
    regimes, any other state variable at the middle of its initial range (:func:`cash_line`)."""
    states = cash_line(model, torch.linspace(0.0, plot_high(model), points, device=device), regime)
    with torch.no_grad():
        mean = (policy.network_mean_std if isinstance(policy, RefinablePolicy) else policy.mean_std)(states)[0]
        rates = model.control.clip(mean)
    return states[:, 0].cpu().numpy(), rates.cpu().numpy()


def rule_thresholds(model: ThresholdModel, states: np.ndarray, rates: np.ndarray) -> dict[str, float | None]:
    """The dividend barrier and issuance point (state) of rates ``[P, 2]`` on ``states [P]``
    by the half-max rule (:func:`_threshold`, :func:`_upper_threshold`)."""
    return {
        "dividend_rate": _threshold(states, rates[:, 0], model.params.a_L_max),
        "issuance_rate": _upper_threshold(states, rates[:, 1], model.params.a_E_max),
    }


def quick_check(training: GHMTraining, iteration: int, counters: dict[str, Any]) -> None:
    """Log (``eval.csv``) the ``counters``, the deterministic policy's exact value where the
    reference gives one, with ``eval_quick_paths`` its simulated value, and: for a one-state
    GHM model the policy figure against the FD optimum, the learned dividend barrier and the
    value network's largest error on the figure's grid; for a model with more states the
    value network's largest error at the evaluation points."""
    config, model, reference = training.config, training.model, training.reference
    record: dict[str, Any] = dict(counters)
    if isinstance(model, OneStateGHM) and isinstance(reference, FDReference):
        record.update(_one_state_check(training, iteration))
    elif training.baseline is not None:
        points = model.evaluation_points(config.eval_cash)
        states = np.asarray([point.state for point in points], dtype=np.float64)
        with torch.no_grad():
            learned = training.baseline(torch.as_tensor(states, dtype=torch.float32, device=training.device))
        error = np.abs(learned.cpu().numpy() - reference.value_at(states))
        record["value/max_abs_error_at_eval_points"] = float(error.max())
    # the exact value of the deterministic policy: noise-free learning curves
    exact = exact_policy_value(training.policy, model, reference, config.eval_cash)
    if exact is not None:
        for row in exact:
            record[f"exact/pct_optimal_{row_label(row)}"] = row["exact_pct_of_optimum"]
        record["exact/pct_optimal_min"] = min(row["exact_pct_of_optimum"] for row in exact)
    if config.eval_quick_paths > 0:
        assert config.absorption is not None  # set by GHMTrainConfig
        _, rows = evaluate_against_reference(
            training.policy,
            model,
            reference,
            config.eval_cash,
            num_paths=config.eval_quick_paths,
            dt=config.dt,
            seed=config.seed + 1,
            tail_tolerance=0.02,
            device=training.device,
            table_points=config.policy_table_points,
            absorption=config.absorption,
        )
        for row in rows:
            record[f"eval/pct_optimal_{row_label(row)}"] = row["pct_of_optimum"]
        record["eval/pct_optimal_min"] = min(row["pct_of_optimum"] for row in rows)
    training.eval_logger.log(iteration, record)


def _one_state_check(training: GHMTraining, iteration: int) -> dict[str, Any]:
    """A one-state GHM model's quick check: the policy figure against the FD optimum, the
    learned dividend barrier and the value network's largest error on the figure's grid."""
    from pglab.run.ghm_plots import plot_policy_value

    config, model, reference = training.config, training.model, training.reference
    assert isinstance(model, OneStateGHM) and isinstance(reference, FDReference)  # quick_check's branch
    solution = reference.solution
    data = policy_plot_data(training.policy, training.baseline, model, plot_high(model), training.device)
    if config.plots:
        fd_states = solution.grid[solution.grid <= data.states[-1]]
        plot_policy_value(
            data=data,
            iteration=iteration,
            output=training.run_dir / "plots" / f"policy_value_iter_{iteration:06d}.png",
            reference_states=fd_states,
            reference_values=solution.value[: len(fd_states)],
            reference_controls=solution.controls[: len(fd_states)],
            title=f"{config.kind} — {training.run_dir}",
        )
    record: dict[str, float | None] = {}
    record["policy/dividend_threshold"] = thresholds_in_cash(
        model, {"dividend_rate": _threshold(data.states, data.rates[:, 0], model.params.a_L_max)}
    )["dividend_rate"]
    if data.values is not None:
        record["value/max_abs_error_vs_fd"] = float(np.abs(data.values - solution.value_at(data.states)).max())
    return record


def train_ghm(
    config: GHMTrainConfig,
    *,
    given: frozenset[str] | None = None,
    echo: Callable[..., None] = print,
    stop_after: int | None = None,
) -> GHMRunResult:
    """Train (or resume) a GHM run; see the module docstring for what a resume reproduces.

    Args:
        config: the run's config (``resume`` set to continue a run).
        given: the fields the user set on the command line (``None``: those that differ
            from the defaults), applied on ``--resume`` when resumable.
        echo: where messages go (``print``-like).
        stop_after: stop as if SIGTERM arrived after this many iterations (tests).
    """
    if config.resume is None and config.log_dir is None:
        config = dataclasses.replace(config, log_dir=default_run_dir(f"ghm-{config.algo}"))
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        check_start(run, echo)
        with build_training(run) as training:
            run.track(**training.tracked())
            if "env_steps" not in run.counters:  # a fresh run, or a checkpoint of an older pglab (sim_steps)
                run.counters["env_steps"] = run.counters.pop("sim_steps", 0)
            last_values = train_steps(run, training)
        # -- final evaluation ---------------------------------------------------------------
        rows = None
        summary: dict[str, Any] = {"return/mean": last_values.get("return/mean")}
        if run.config.final_eval and not run.interrupted:
            rows = final_evaluation(training, int(run.counters["iteration"]), echo)
            summary["eval/pct_optimal_min"] = min(row["pct_of_optimum"] for row in rows)
            summary["evaluation"] = rows
        run.finish(summary)
    return GHMRunResult(
        run_dir=run.run_dir,
        iterations=int(run.counters["iteration"]),
        final_rows=rows,
        interrupted=run.interrupted,
        exit_code=run.exit_code,
        config=run.config,
    )


def final_evaluation(training: GHMTraining, iteration: int, echo: Callable[..., None]) -> list[dict[str, Any]]:
    """The deterministic policy against ``V*`` at the evaluation points of ``eval_cash``
    (``eval_paths`` paths each, with a progress bar): writes ``evaluation.json`` /
    ``evaluation.csv``, prints the table (the command's summary follows it: the thresholds,
    the verdict, the run directory)."""
    config, policy, model, reference = training.config, training.policy, training.model, training.reference
    assert config.absorption is not None  # set by GHMTrainConfig
    points = len(model.evaluation_points(config.eval_cash))
    result, rows = evaluate_against_reference(
        policy,
        model,
        reference,
        config.eval_cash,
        num_paths=config.eval_paths,
        dt=final_eval_dt(config),
        seed=config.seed + 2,
        tail_tolerance=config.eval_tail_tolerance,
        device=training.device,
        progress=f"final evaluation ({config.eval_paths} paths x {points} initial states)",
        table_points=config.policy_table_points,
        absorption=config.absorption,
    )
    for row, exact in zip(rows, exact_policy_value(policy, model, reference, config.eval_cash) or [], strict=False):
        row.update(exact_value=exact["exact_value"], exact_pct_of_optimum=exact["exact_pct_of_optimum"])
    learned, fd_thresholds = final_thresholds(training)
    network = network_thresholds(training)
    payload = {
        "iteration": iteration,
        "rows": rows,
        "simulated_time": result.simulated_time,
        "num_paths": result.num_paths,
        "fd_thresholds": fd_thresholds,
        "policy_table_error": result.table_error,
        "learned_thresholds": learned,
        **({"network_thresholds": network} if network is not None else {}),
    }
    atomic_write_json(training.run_dir / "evaluation.json", payload)
    header = list(rows[0])
    atomic_write_text(
        training.run_dir / "evaluation.csv",
        ",".join(header) + "\n" + "".join(",".join(_csv_cell(row[k]) for k in header) + "\n" for row in rows),
    )
    echo(format_table(rows, result.simulated_time, result.num_paths, dt=final_eval_dt(config)))
    if result.table_error is not None:
        echo(
            f"policy read from a {config.policy_table_points}-point table (largest difference to the network: "
            f"{result.table_error:.1e})"
        )
    if network is not None:
        echo(
            f"(thresholds refined by simulation from the network's dividend threshold "
            f"{_cash_label(network['dividend_rate'])} and issuance point {_cash_label(network['issuance_rate'])}: "
            "--refine_thresholds)"
        )
    return rows


def _cash_label(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def network_thresholds(training: GHMTraining) -> dict[str, float | None] | None:
    """The network's own dividend barrier and issuance point in cash when the policy was
    refined (:func:`refine_policy`), else ``None``."""
    policy, model = training.policy, training.model
    if not (isinstance(policy, RefinablePolicy) and policy.thresholds is not None and isinstance(model, OneStateGHM)):
        return None
    points = threshold_points(model, training.reference)
    return thresholds_in_cash(model, rule_thresholds(model, *network_rates(policy, model, training.device, points)))


def threshold_points(model: GHMModel, reference: ValueReference) -> int:
    """States on ``[0, plot_high]`` at which the final thresholds are read: the FD grid's
    spacing, so that the half-max rule reads the learned policy at the resolution it reads
    the FD optimum (the policy figure's 201 states would round a barrier up by as much as
    0.01); 201 where the reference has no grid."""
    if not isinstance(reference, FDReference):
        return 201
    grid = reference.solution.grid
    return int(round(plot_high(model) / float(grid[1] - grid[0]))) + 1


def final_thresholds(training: GHMTraining) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """``(learned, FD)`` dividend barrier and issuance point in cash, for a one-state GHM
    model (the FD grid and the plot are in the state); two empty mappings otherwise."""
    model, reference = training.model, training.reference
    if not (isinstance(model, OneStateGHM) and isinstance(reference, FDReference)):
        return {}, {}
    points = threshold_points(model, reference)
    data = policy_plot_data(training.policy, training.baseline, model, plot_high(model), training.device, points)
    learned = thresholds_in_cash(model, rule_thresholds(model, data.states, data.rates))
    return learned, thresholds_in_cash(model, reference.thresholds())


def _csv_cell(value: Any) -> str:
    """A value of an ``evaluation.csv`` row: a number (6 significant digits), a label, or a
    state (its coordinates separated by spaces)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(f"{x:.6g}" for x in value)
    return f"{value:.6g}"


def _threshold(states: np.ndarray, rates: np.ndarray, rate_max: float) -> float | None:
    """Dividend barrier of a learned policy: the first state at which the rate reaches half
    its maximum (``None`` if it never does on the grid)."""
    if rate_max <= 0:
        return None
    on = np.flatnonzero(rates >= 0.5 * rate_max)
    return float(states[on[0]]) if on.size else None


def _upper_threshold(states: np.ndarray, rates: np.ndarray, rate_max: float) -> float | None:
    """Highest state up to which the rate stays at or above half its maximum."""
    on = rates >= 0.5 * rate_max
    if rate_max <= 0 or not on[0]:
        return None
    index = 0
    while index + 1 < len(on) and on[index + 1]:
        index += 1
    return float(states[index])
