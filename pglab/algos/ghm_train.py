"""``pglab train ghm``: train a policy for the GHM cash model and judge it against the
finite-difference optimum.

The loop (the imperative shell around a solver's ``train_step``)::

    reference   FD solution of the HJB (V*, optimal controls, thresholds)
    for iteration in 1..n_iterations:
        metrics = solver.train_step()          # rollout -> advantages -> updates
        log (metrics.csv, TensorBoard)         every log_interval
        plot + quick value check vs V*         every eval_interval
        checkpoint (atomic)                    every save_interval
    final evaluation: the deterministic policy's value at eval_cash (>= 10,000 paths,
    simulated until the tail bound is < eval_tail_tolerance) against V*

Run directory (``--log_dir``)::

    config.json  metrics.csv  eval.csv  evaluation.json  evaluation.csv
    fd_reference.npz  tensorboard/  plots/policy_value_iter_*.png
    checkpoints/checkpoint_iter_*.pt  checkpoints/checkpoint_latest.pt

``--resume DIR`` continues from ``DIR/checkpoints/checkpoint_latest.pt`` exactly
(bit-identical on the CPU): ``N`` iterations + resume + ``N`` equals ``2N`` iterations.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pglab.algos.ghm_eval import PolicyValue, simulate_policy_value
from pglab.algos.actor_critic import ActorCritic
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.algos.pathwise import PathwisePolicyGradient
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.errors import ConfigError
from pglab.hjb.fd import FDSolution, solve_hjb_1d_extrapolated
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.atomic import atomic_write_json, atomic_write_text
from pglab.run.checkpoint import (
    CheckpointManager,
    build_checkpoint,
    load_checkpoint_file,
    load_state_dict_checked,
)
from pglab.run.config import config_from_dict, config_to_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.progress import progress_bar
from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything
from pglab.run.signals import StopRequested
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_int_sequence,
    check_non_negative,
    check_positive,
    check_range,
)

GHM_KINDS = ("ghm-mc", "ghm-pathwise", "ghm-actor-critic")


# Defaults that differ between solvers (a field left at None takes its solver's value).
# mc: the score-function gradient needs held actions (signal-to-noise grows with the
# decision interval) and many small steps; the pathwise gradients (pathwise, actor-critic)
# have little variance, so they take larger steps, decide every dt and need ~3x fewer
# iterations, each ~3x dearer (the backward pass runs through the whole rollout).
SOLVER_DEFAULTS: dict[str, dict[str, Any]] = {
    "mc": dict(n_iterations=1300, lr_policy=3e-4, lr_final_fraction=0.2, baseline_steps=1, score_samples=0, action_repeat=5),
    "pathwise": dict(n_iterations=350, lr_policy=1e-3, lr_final_fraction=0.2, baseline_steps=4, score_samples=25_000, action_repeat=1),
    "actor-critic": dict(n_iterations=350, lr_policy=1e-3, lr_final_fraction=0.2, baseline_steps=4, score_samples=25_000, action_repeat=1),
}


@dataclass(frozen=True)
class GHMTrainConfig:
    """Configuration of ``pglab train ghm`` (flags as in the design note)."""

    algo: Literal["mc", "pathwise", "actor-critic"] = "mc"
    """solver: Monte Carlo policy gradient (mc), pathwise, or actor-critic"""
    # -- training ----------------------------------------------------------------------
    n_iterations: int | None = None
    """training iterations (default per solver, see SOLVER_DEFAULTS: mc 1300, pathwise and
    actor-critic 350)"""
    n_trajectories: int = 1000
    """simulated paths per iteration"""
    lr_policy: float | None = None
    """policy learning rate (Adam; default mc 3e-4, pathwise/actor-critic 1e-3)"""
    lr_baseline: float = 1e-3
    """baseline / critic learning rate (Adam)"""
    lr_final_fraction: float | None = None
    """learning rates decay linearly to this fraction of their initial value by the last
    iteration (1.0: constant); the decay settles the policy, whose quality otherwise
    wanders by a few percent from one evaluation to the next"""
    max_grad_norm: float = 0.5
    """gradient-norm clip for both networks"""
    advantage: Literal["trajectory", "reward_to_go"] = "reward_to_go"
    """per-path A(x0) = R - V(x0) (the note's form) or per-step G_t - V(x_t)"""
    advantage_normalization: bool = True
    """standardise advantages over the batch"""
    no_baseline: bool = False
    """train without a baseline (plain REINFORCE, for comparison)"""
    terminal_value: Literal["critic", "none"] = "critic"
    """bootstrap paths alive at T with exp(-rho T) V(c_T) from the critic, or not"""
    baseline_steps: int | None = None
    """baseline / critic gradient steps per iteration (default mc 1, pathwise/actor-critic 4)"""
    score_samples: int | None = None
    """alive (state, action) pairs per iteration scored by the policy loss and regressed by the
    reward-to-go baseline per gradient step (uniform subsample, unbiased; 0: all ~500k);
    pathwise/actor-critic: (state, target) pairs per critic step (default mc 0, others 25,000)"""
    policy_steps: int = 4
    """policy gradient steps per iteration, each on a disjoint subsample of the batch"""
    clip_sharpness: float = 50.0
    """pathwise: sharpness k (high - low) of the smooth clip used in training (within
    ln 2 / k of the hard clip)"""
    gae_lambda: float = 0.995
    """actor-critic: lambda of the critic's TD(lambda) targets (1: Monte Carlo, 0: one-step TD)"""
    hjb_weight: float = 1.0
    """actor-critic: weight of the squared policy-evaluation HJB residual in the critic loss
    (the note's "MC + TD + HJB" critic; 0: a TD(lambda) critic alone)"""
    hjb_samples: int = 4096
    """actor-critic: states of each critic batch at which the HJB residual is evaluated"""
    # -- networks ----------------------------------------------------------------------
    policy_hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the policy"""
    baseline_hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the baseline / critic"""
    activation: Literal["tanh", "relu", "elu", "silu", "gelu"] = "tanh"
    """hidden activation"""
    state_dependent_std: bool = False
    """learn the policy's standard deviation as a function of cash"""
    log_std_init: float = -1.0
    """initial log standard deviation of the policy (-1: sigma = 0.37 of a rate of at most 1)"""
    initial_rate_fraction: float = 0.1
    """the untrained policy's mean rates as a fraction of their maxima (a cautious start that
    retains cash, as policy iteration starts from the no-payout policy; the default
    softplus(0) = 0.69 pays out and issues at once and falls into the pay-everything trap)"""
    mean_shift_fraction: float = 0.5
    """policy mean = softplus(net) - this fraction of each maximal rate: lets the mean go
    below 0 so the clipped exploration noise stops leaking dividends and issuance where
    the optimal rate is 0"""
    min_std: float = 1e-3
    """lower clamp of the policy's standard deviation"""
    max_std: float = 2.0
    """upper clamp of the policy's standard deviation"""
    final_max_std: float | None = None
    """if set, the upper clamp of the standard deviation decays geometrically from its
    initial value exp(log_std_init) to this by the last iteration (an exploration schedule)"""
    # -- simulation --------------------------------------------------------------------
    dt: float = 0.01
    """Euler-Maruyama time step"""
    T: float = 5.0
    """simulated horizon per iteration (the problem itself is infinite-horizon)"""
    action_repeat: int | None = None
    """training rollouts draw a new action every this many steps and hold it (default mc 5,
    pathwise/actor-critic 1; evaluation
    always applies the policy every dt)"""
    simulator: Literal["batched", "process", "ray"] = "batched"
    """mc: where training rollouts run: one batched process, a pool of worker processes, or
    Ray tasks (bit-identical results; see docs/ghm-parallel.md for when it pays)"""
    n_workers: int | None = None
    """workers of --simulator process|ray (default min(cpu_count, n_trajectories // 10))"""
    ray_address: str | None = None
    """--simulator ray: connect to this Ray cluster ("auto" or host:port; default: start a local one)"""
    final_action_repeat: int | None = None
    """if set, the decision interval shrinks geometrically from action_repeat to this by the
    last iteration (a long interval gives the score-function gradient its signal early on;
    the policy that is optimal for a held action acts too early, so finish near every dt)"""
    # -- GHM model ---------------------------------------------------------------------
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
    initial_cash_low: float = 0.0
    """initial cash ~ Uniform[initial_cash_low, initial_cash_high]"""
    initial_cash_high: float = 2.0
    """upper end of the initial-cash distribution"""
    # -- logging -----------------------------------------------------------------------
    log_dir: Path | None = None
    """run directory (default runs/ghm-<algo>/<timestamp>)"""
    log_interval: int = 10
    """iterations between metric rows"""
    eval_interval: int = 100
    """iterations between plots and quick value checks"""
    save_interval: int = 100
    """iterations between checkpoints (the last iteration is always saved)"""
    eval_quick_paths: int = 200
    """paths per initial cash for the quick value check during training (0: off)"""
    # -- final evaluation ----------------------------------------------------------------
    eval_cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """initial cash levels of the final table"""
    eval_paths: int = 10_000
    """paths per initial cash in the final evaluation"""
    eval_tail_tolerance: float = 0.005
    """simulate until the discounted tail is below this fraction of the value"""
    final_eval: bool = True
    """run the final evaluation after training"""
    # -- reference ---------------------------------------------------------------------
    fd_nodes: int = 24_000
    """grid intervals of the finite-difference reference"""
    fd_x_max: float = 6.0
    """upper end of the finite-difference grid"""
    # -- other -------------------------------------------------------------------------
    seed: int = 42
    """random seed (same seed + config on the CPU: bit-identical run)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""

    def __post_init__(self):
        check_choice("algo", self.algo, ("mc", "pathwise", "actor-critic"))
        # Fields left at None take the solver's default (frozen: set through object.__setattr__).
        for name, value in SOLVER_DEFAULTS[self.algo].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        check_int("n_iterations", self.n_iterations, minimum=1)
        check_int("n_trajectories", self.n_trajectories, minimum=2)
        check_positive("lr_policy", self.lr_policy)
        check_positive("lr_baseline", self.lr_baseline)
        check_range("lr_final_fraction", self.lr_final_fraction, 0.0, 1.0)
        if self.final_max_std is not None:
            check_positive("final_max_std", self.final_max_std)
            if not self.min_std < self.final_max_std:
                raise ConfigError("final_max_std", self.final_max_std, f"must exceed min_std={self.min_std}")
        check_positive("max_grad_norm", self.max_grad_norm)
        check_choice("advantage", self.advantage, ("trajectory", "reward_to_go"))
        check_choice("terminal_value", self.terminal_value, ("critic", "none"))
        check_int("baseline_steps", self.baseline_steps, minimum=1)
        check_int("score_samples", self.score_samples, minimum=0)
        check_int("policy_steps", self.policy_steps, minimum=1)
        check_positive("clip_sharpness", self.clip_sharpness)
        if self.no_baseline and self.algo != "mc":
            raise ConfigError("no_baseline", True, f"--algo {self.algo} needs its critic (no_baseline is for --algo mc)")
        check_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_non_negative("hjb_weight", self.hjb_weight)
        check_int("hjb_samples", self.hjb_samples, minimum=1)
        check_int_sequence("policy_hidden_dims", self.policy_hidden_dims)
        check_int_sequence("baseline_hidden_dims", self.baseline_hidden_dims)
        check_range("log_std_init", self.log_std_init, -20.0, 5.0)
        check_range("initial_rate_fraction", self.initial_rate_fraction, 0.0, 1.0, low_inclusive=False)
        check_range("mean_shift_fraction", self.mean_shift_fraction, 0.0, 10.0)
        check_positive("min_std", self.min_std)
        check_positive("max_std", self.max_std)
        if self.min_std >= self.max_std:
            raise ConfigError("min_std", self.min_std, f"must be < max_std={self.max_std}")
        check_positive("dt", self.dt)
        check_positive("T", self.T)
        if self.dt >= self.T:
            raise ConfigError("dt", self.dt, f"must be < T={self.T}")
        check_int("action_repeat", self.action_repeat, minimum=1)
        check_choice("simulator", self.simulator, ("batched", "process", "ray"))
        if self.simulator != "batched" and self.algo != "mc":
            raise ConfigError("simulator", self.simulator, f"--algo {self.algo} differentiates through the rollout, which "
                              "must stay in this process; parallel rollouts serve --algo mc")
        if self.n_workers is not None:
            check_int("n_workers", self.n_workers, minimum=1)
        if self.ray_address is not None and self.simulator != "ray":
            raise ConfigError("ray_address", self.ray_address, "is only used with --simulator ray")
        if self.final_action_repeat is not None:
            check_int("final_action_repeat", self.final_action_repeat, minimum=1)
            if self.final_action_repeat > self.action_repeat:
                raise ConfigError("final_action_repeat", self.final_action_repeat, f"must be <= action_repeat={self.action_repeat}")
        self.ghm_params()  # validates mu, sigma, r, rho, lambda, rates, initial cash
        for name in ("log_interval", "eval_interval", "save_interval"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_quick_paths", self.eval_quick_paths, minimum=0)
        if len(self.eval_cash) == 0:
            raise ConfigError("eval_cash", self.eval_cash, "needs at least one initial cash level")
        for cash in self.eval_cash:
            check_non_negative("eval_cash", cash)
        check_int("eval_paths", self.eval_paths, minimum=2)
        check_range("eval_tail_tolerance", self.eval_tail_tolerance, 0.0, 1.0, low_inclusive=False)
        check_int("fd_nodes", self.fd_nodes, minimum=100)
        check_positive("fd_x_max", self.fd_x_max)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)

    def ghm_params(self) -> GHMParams:
        return GHMParams(
            mu=self.mu, sigma=self.sigma, r=self.r, lambda_dilution=self.lambda_dilution, rho=self.rho,
            a_L_max=self.a_L_max, a_E_max=self.a_E_max,
            initial_cash_low=self.initial_cash_low, initial_cash_high=self.initial_cash_high,
        )

    @property
    def kind(self) -> str:
        return f"ghm-{self.algo}"


# Fields a resumed run may change. They do not alter the trajectory of training, except
# n_iterations when a schedule (lr_final_fraction < 1, final_max_std, final_action_repeat)
# is on: schedules are functions of (iteration, n_iterations), so extending a run
# stretches what is left of them. Resuming an interrupted run at the same n_iterations
# is exact.
RESUMABLE_FIELDS = {
    "n_iterations", "log_interval", "eval_interval", "save_interval", "eval_quick_paths",
    "eval_cash", "eval_paths", "eval_tail_tolerance", "final_eval", "device", "resume", "log_dir",
    "simulator", "n_workers", "ray_address",  # bit-identical rollouts whatever the backend
}


def build_networks(config: GHMTrainConfig, model: GHMModel, device: torch.device) -> tuple[GaussianPolicy, ValueNetwork | None]:
    """The policy and (unless ``no_baseline``) the value network of a config."""
    policy = GaussianPolicy(
        model.state_dim, model.action_dim, config.policy_hidden_dims, activation=config.activation,
        log_std_init=config.log_std_init, state_dependent_std=config.state_dependent_std,
        min_std=config.min_std, max_std=config.max_std, action_high=model.control.high,
        mean_init=[max(config.initial_rate_fraction * high, 1e-3) for high in model.control.high],
        mean_shift=[config.mean_shift_fraction * high for high in model.control.high],
    ).to(device)
    baseline = None if config.no_baseline else ValueNetwork(model.state_dim, config.baseline_hidden_dims, activation=config.activation).to(device)
    return policy, baseline


def build_simulator(config: GHMTrainConfig, model: GHMModel):
    """The training rollouts' simulator: batched in this process, or spread over workers."""
    if config.simulator == "batched":
        return TrajectorySimulator(model, config.dt, config.T, action_repeat=config.action_repeat)
    from pglab.envs.parallel import ParallelTrajectorySimulator

    return ParallelTrajectorySimulator(model, config.dt, config.T, action_repeat=config.action_repeat,
                                       backend=config.simulator, n_workers=config.n_workers, ray_address=config.ray_address)


def build_solver(config: GHMTrainConfig, policy, baseline, simulator, generator):
    """The solver behind ``--algo`` (each provides ``train_step``, ``optimizers``)."""
    if config.algo == "mc":
        return MonteCarloPolicyGradient(
            policy, simulator, baseline, n_trajectories=config.n_trajectories, lr_policy=config.lr_policy,
            lr_baseline=config.lr_baseline, max_grad_norm=config.max_grad_norm, advantage=config.advantage,
            advantage_normalization=config.advantage_normalization, terminal_value=config.terminal_value,
            baseline_steps=config.baseline_steps, score_samples=config.score_samples,
            policy_steps=config.policy_steps, generator=generator,
        )
    # pathwise and actor-critic share the differentiable rollout and the critic's settings
    pathwise = dict(
        n_trajectories=config.n_trajectories, lr_policy=config.lr_policy, lr_critic=config.lr_baseline,
        max_grad_norm=config.max_grad_norm, clip_sharpness=config.clip_sharpness, critic_steps=config.baseline_steps,
        critic_samples=config.score_samples or 10**9, generator=generator,
    )
    if config.algo == "pathwise":
        return PathwisePolicyGradient(policy, simulator, baseline, **pathwise)
    if config.algo == "actor-critic":
        return ActorCritic(policy, simulator, baseline, **pathwise, gae_lambda=config.gae_lambda,
                           hjb_weight=config.hjb_weight, hjb_samples=config.hjb_samples)
    raise ConfigError("algo", config.algo, "unknown solver")


def reference_solution(config: GHMTrainConfig, model: GHMModel, cache: Path | None = None) -> FDSolution:
    """The FD optimum for the config's model (cached as ``fd_reference.npz``)."""
    if cache is not None and cache.exists():
        stored = np.load(cache)
        return FDSolution(grid=stored["grid"], value=stored["value"], controls=stored["controls"],
                          iterations=int(stored["iterations"]), converged=bool(stored["converged"]),
                          control_names=tuple(model.control.names))
    solution = solve_hjb_1d_extrapolated(model, x_max=config.fd_x_max, num_nodes=config.fd_nodes)
    if cache is not None:
        tmp = cache.with_name(f".{cache.stem}.tmp.npz")
        np.savez(tmp, grid=solution.grid, value=solution.value, controls=solution.controls,
                 iterations=solution.iterations, converged=solution.converged)
        tmp.replace(cache)
    return solution


def action_repeat_at(config: GHMTrainConfig, progress: float) -> int:
    """The decision interval (in steps) at training progress ``progress`` in [0, 1]:
    ``round(k0 * (k1 / k0) ** progress)``, geometric from ``action_repeat`` to
    ``final_action_repeat`` (constant when that is unset)."""
    if config.final_action_repeat is None:
        return config.action_repeat
    ratio = config.final_action_repeat / config.action_repeat
    return max(1, int(round(config.action_repeat * ratio**progress)))


def deterministic_policy_fn(policy: GaussianPolicy):
    return lambda states: policy.mean_std(states)[0]


def fd_value_bound(solution: FDSolution):
    """``V*`` as a torch function: an upper bound of any policy's value."""
    grid = torch.as_tensor(solution.grid, dtype=torch.float32)
    values = torch.as_tensor(solution.value, dtype=torch.float32)
    step = float(solution.step)

    def bound(states: torch.Tensor) -> torch.Tensor:
        position = (states[:, 0].cpu() / step).clamp(0, len(grid) - 1)
        low = position.floor().long().clamp(max=len(grid) - 2)
        weight = position - low
        return ((1 - weight) * values[low] + weight * values[low + 1]).to(states.device, states.dtype)

    return bound


def evaluate_against_reference(
    policy: GaussianPolicy,
    model: GHMModel,
    solution: FDSolution,
    cash_levels: Sequence[float],
    *,
    num_paths: int,
    dt: float,
    seed: int,
    tail_tolerance: float,
    device: torch.device,
) -> tuple[PolicyValue, list[dict[str, float]]]:
    """The deterministic policy's simulated value at ``cash_levels`` against ``V*``."""
    generator = make_generator(seed, device)
    with torch.no_grad():
        result = simulate_policy_value(
            model, deterministic_policy_fn(policy), list(cash_levels), num_paths=num_paths, dt=dt,
            generator=generator, value_bound=fd_value_bound(solution), tail_tolerance=tail_tolerance, device=device,
        )
    optimum = solution.value_at(list(cash_levels))
    rows = []
    for cash, value, stderr, tail, best in zip(cash_levels, result.mean, result.stderr, result.tail_bound, optimum):
        rows.append({
            "initial_cash": float(cash), "value": value, "stderr": stderr, "tail_bound": tail,
            "fd_optimum": float(best), "pct_of_optimum": 100.0 * value / float(best),
        })
    return result, rows


def format_table(rows: list[dict[str, float]], simulated_time: float, num_paths: int) -> str:
    lines = [
        f"Deterministic policy vs finite-difference optimum ({num_paths} paths per row, simulated to t={simulated_time:.1f})",
        f"{'cash':>6} {'value':>9} {'+-SE':>7} {'V* (FD)':>9} {'% of V*':>8} {'tail<=':>8}",
    ]
    for row in rows:
        lines.append(
            f"{row['initial_cash']:>6.2f} {row['value']:>9.4f} {row['stderr']:>7.4f} {row['fd_optimum']:>9.4f} "
            f"{row['pct_of_optimum']:>7.2f}% {row['tail_bound']:>8.4f}"
        )
    return "\n".join(lines)


def policy_grid(policy: GaussianPolicy, baseline: ValueNetwork | None, high: float, device: torch.device, points: int = 201):
    states = torch.linspace(0.0, high, points, device=device).unsqueeze(1)
    with torch.no_grad():
        mean, std = policy.mean_std(states)
        mean = torch.minimum(mean, policy.action_high.to(mean.dtype))  # the control actually applied
        values = baseline(states) if baseline is not None else None
    to_np = lambda t: None if t is None else t.cpu().numpy()  # noqa: E731
    return to_np(states[:, 0]), to_np(mean), to_np(std), to_np(values)




@dataclass
class GHMRunResult:
    run_dir: Path
    iterations: int
    final_rows: list[dict[str, float]] | None
    interrupted: bool


def resolve_resume(config: GHMTrainConfig) -> tuple[GHMTrainConfig, dict[str, Any] | None]:
    """For ``--resume DIR``: load the latest checkpoint and check that only resumable
    fields differ from the stored config."""
    if config.resume is None:
        return config, None
    checkpoint = load_checkpoint_file(Path(config.resume), kinds=GHM_KINDS)
    stored = config_from_dict(GHMTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    current = config_to_dict(config)
    for field in dataclasses.fields(GHMTrainConfig):
        if field.name in RESUMABLE_FIELDS:
            continue
        if current[field.name] != config_to_dict(stored)[field.name] and current[field.name] != config_to_dict(GHMTrainConfig())[field.name]:
            raise ConfigError(field.name, getattr(config, field.name),
                              f"differs from the resumed run's value {getattr(stored, field.name)!r}; only {', '.join(sorted(RESUMABLE_FIELDS))} may change on --resume")
    overrides = {name: getattr(config, name) for name in RESUMABLE_FIELDS if current[name] != config_to_dict(GHMTrainConfig())[name]}
    merged = dataclasses.replace(stored, **overrides)
    if merged.n_iterations < checkpoint["counters"]["iteration"]:
        raise ConfigError("n_iterations", merged.n_iterations, f"is below the checkpoint's iteration {checkpoint['counters']['iteration']}")
    return merged, checkpoint


def train_ghm(config: GHMTrainConfig, *, echo=print) -> GHMRunResult:
    """Train (or resume) a GHM run; see the module docstring."""
    config, checkpoint = resolve_resume(config)
    device = resolve_device(config.device)
    if checkpoint is not None:
        run_dir = Path(config.resume)
        if (run_dir / "checkpoints").is_dir() is False and Path(checkpoint["path"]).parent.name == "checkpoints":
            run_dir = Path(checkpoint["path"]).parent.parent
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir(f"ghm-{config.algo}"))
    seed_everything(config.seed)
    generator = make_generator(config.seed, device)
    model = GHMModel(config.ghm_params())
    simulator = build_simulator(config, model)
    policy, baseline = build_networks(config, model, device)
    solver = build_solver(config, policy, baseline, simulator, generator)
    solution = reference_solution(config, model, run_dir / "fd_reference.npz")

    counters = {"iteration": 0, "sim_steps": 0, "wall_time": 0.0}
    if checkpoint is not None:
        source = checkpoint["path"]
        load_state_dict_checked(policy, checkpoint["models"]["policy"], name="policy", source=source)
        if baseline is not None:
            load_state_dict_checked(baseline, checkpoint["models"]["baseline"], name="baseline", source=source)
        for name, optimizer in solver.optimizers().items():
            optimizer.load_state_dict(checkpoint["optimizers"][name])
        restore_rng_state(checkpoint["rng"], {"sim": generator})
        counters.update(checkpoint["counters"])
    else:
        write_run_config(run_dir, config_to_dict(config), kind=config.kind)
    start = int(counters["iteration"])
    logger = MetricsLogger(run_dir, resume_step=start if checkpoint is not None else None)
    eval_logger = MetricsLogger(run_dir, csv_name="eval.csv", tensorboard_dir="tensorboard",
                                resume_step=start if checkpoint is not None else None)
    manager = CheckpointManager(run_dir / "checkpoints")

    def save(iteration: int) -> Path:
        models = {"policy": policy.state_dict()}
        if baseline is not None:
            models["baseline"] = baseline.state_dict()
        state = build_checkpoint(
            kind=config.kind, config=config_to_dict(dataclasses.replace(config, resume=None)), counters=dict(counters),
            models=models, optimizers={n: o.state_dict() for n, o in solver.optimizers().items()},
            rng=capture_rng_state({"sim": generator}), extra={"model": model.describe()},
        )
        return manager.save(iteration, state)

    def quick_check(iteration: int) -> None:
        states, mean, std, values = policy_grid(policy, baseline, max(config.initial_cash_high, 2.0), device)
        fd_states = solution.grid[solution.grid <= states[-1]]
        plot_kwargs = dict(
            states=states, mean_actions=mean, std_actions=std, values=values, control_names=model.control.names,
            iteration=iteration, payout=mean[:, 0] - (1 + config.lambda_dilution) * mean[:, 1],
            reference_states=fd_states, reference_values=solution.value[: len(fd_states)],
            reference_controls=solution.controls[: len(fd_states)], title=f"{config.kind} — {run_dir}",
        )
        from pglab.run.ghm_plots import plot_policy_value

        plot_policy_value(output=run_dir / "plots" / f"policy_value_iter_{iteration:06d}.png", **plot_kwargs)
        record: dict[str, float] = {
            "wall_time": counters["wall_time"], "sim_steps": counters["sim_steps"],
        }
        threshold = _threshold(states, mean[:, 0], config.a_L_max)
        if threshold is not None:
            record["policy/dividend_threshold"] = threshold
        if values is not None:
            fd_values = solution.value_at(states)
            record["value/max_abs_error_vs_fd"] = float(np.abs(values - fd_values).max())
        if config.eval_quick_paths > 0:
            _, rows = evaluate_against_reference(
                policy, model, solution, config.eval_cash, num_paths=config.eval_quick_paths, dt=config.dt,
                seed=config.seed + 1, tail_tolerance=0.02, device=device,
            )
            for row in rows:
                record[f"eval/pct_optimal_c{row['initial_cash']:g}"] = row["pct_of_optimum"]
            record["eval/pct_optimal_min"] = min(row["pct_of_optimum"] for row in rows)
        eval_logger.log(iteration, record)

    interrupted = False
    iteration = start
    bar = progress_bar(config.n_iterations, desc=f"train ghm --algo {config.algo}", initial=start, unit="iter")
    try:
        with StopRequested() as stop:
            window_start = time.perf_counter()
            for iteration in range(start + 1, config.n_iterations + 1):
                tick = time.perf_counter()
                # linear decay: lr_i = lr_0 * (1 - (1 - f) * (i - 1) / (N - 1)); a function of
                # the iteration alone, so a resumed run sets the same rates
                progress = (iteration - 1) / max(config.n_iterations - 1, 1)
                decay = 1.0 - (1.0 - config.lr_final_fraction) * progress
                for name, optimizer in solver.optimizers().items():
                    initial_lr = config.lr_policy if name == "policy" else config.lr_baseline
                    for group in optimizer.param_groups:
                        group["lr"] = initial_lr * decay
                if config.final_max_std is not None:
                    # geometric decay of the std's upper clamp: log sigma_max moves linearly
                    start_log = min(config.log_std_init, math.log(config.max_std))
                    policy.log_std_max = start_log + (math.log(config.final_max_std) - start_log) * progress
                simulator.action_repeat = action_repeat_at(config, progress)
                metrics = solver.train_step()
                metrics["train/action_repeat"] = float(simulator.action_repeat)
                elapsed = time.perf_counter() - tick
                counters["iteration"] = iteration
                counters["wall_time"] += elapsed
                counters["sim_steps"] += config.n_trajectories * simulator.num_steps
                if iteration % config.log_interval == 0 or iteration == config.n_iterations:
                    window = time.perf_counter() - window_start
                    values = logger.log(iteration, {
                        **metrics,
                        "perf/iter_s": elapsed,
                        "perf/steps_per_s": config.n_trajectories * simulator.num_steps / max(elapsed, 1e-9),
                        "perf/window_s": window,
                    })
                    window_start = time.perf_counter()
                    bar.set_postfix(ret=f"{values['return/mean']:.3f}", base=f"{values.get('loss/baseline', float('nan')):.4f}")
                last = iteration == config.n_iterations
                if iteration % config.eval_interval == 0 or last:
                    quick_check(iteration)
                if iteration % config.save_interval == 0 or last:
                    save(iteration)
                bar.update(1)
                if stop.requested:
                    save(iteration)
                    interrupted = True
                    echo(f"interrupted: checkpoint saved at iteration {iteration} in {run_dir}", file=sys.stderr)
                    break
    finally:
        bar.close()
        logger.close()
        eval_logger.close()
        if hasattr(simulator, "close"):
            simulator.close()

    rows = None
    if config.final_eval and not interrupted:
        result, rows = evaluate_against_reference(
            policy, model, solution, config.eval_cash, num_paths=config.eval_paths, dt=config.dt,
            seed=config.seed + 2, tail_tolerance=config.eval_tail_tolerance, device=device,
        )
        payload = {
            "iteration": iteration, "rows": rows, "simulated_time": result.simulated_time,
            "num_paths": result.num_paths, "fd_thresholds": solution.thresholds(),
        }
        states, mean, _, _ = policy_grid(policy, baseline, max(config.initial_cash_high, 2.0), device)
        payload["learned_thresholds"] = {
            "dividend_rate": _threshold(states, mean[:, 0], config.a_L_max),
            "issuance_rate": _upper_threshold(states, mean[:, 1], config.a_E_max),
        }
        atomic_write_json(run_dir / "evaluation.json", payload)
        header = list(rows[0])
        atomic_write_text(run_dir / "evaluation.csv", ",".join(header) + "\n" + "".join(
            ",".join(f"{row[k]:.6g}" for k in header) + "\n" for row in rows))
        echo(format_table(rows, result.simulated_time, result.num_paths))
        echo(f"dividend threshold: learned {payload['learned_thresholds']['dividend_rate']}, FD {solution.thresholds()['dividend_rate']:.3f}; "
             f"issuance below: learned {payload['learned_thresholds']['issuance_rate']}, FD {solution.thresholds()['issuance_rate']}")
        echo(f"run directory: {run_dir}")
    return GHMRunResult(run_dir=run_dir, iterations=iteration, final_rows=rows, interrupted=interrupted)


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
