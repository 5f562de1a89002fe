"""``pglab bench ghm-rollout``: speed of the batched GHM simulator with the policy in the loop.

Prints, in one run:

* batched: ``num_paths`` paths x ``T/dt`` steps, one tensor op per step for all paths,
  the policy network queried every step (state-steps/s);
* naive: the same simulation written as a Python loop over paths and steps, one policy
  call per (path, step) (measured on ``naive_paths`` paths, scaled to steps/s), and the
  ratio batched / naive;
* forward-only bound: the policy's forward pass alone on the same batch, ``T/dt`` times
  (the compute bound of a rollout), and batched / bound;
* one full training iteration of ``pglab train ghm`` defaults (rollout + advantages +
  policy and baseline updates), median over ``iterations``;
* the training rollout (``train_paths`` paths, the default decision interval) three ways:
  step by step (one dispatched Euler step per ``dt``, the network at every decision), the
  batched held-action rollout with the network, and with the tabulated policy (the default);
* steadiness under load: the training iteration's median time on the machine as it is
  ("idle"), then with a CPU-bound process (a Python busy loop, started and stopped here)
  running beside it, and their ratio, for 1 and 2 intra-op threads (target: ratio <= 2.5
  with the default thread count). The load average is printed with the figures, since
  "idle" is only as idle as the machine.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pglab.run.config import parse_config
from pglab.validation import check_device, check_int

if TYPE_CHECKING:
    from pglab.configs.ghm import GHMTrainConfig
    from pglab.envs.ghm import GHMModel
    from pglab.nets import GaussianPolicy, ValueNetwork


@dataclass(frozen=True)
class GHMRolloutBenchConfig:
    num_paths: int = 4096
    """paths of the batched rollout"""
    naive_paths: int = 8
    """paths simulated by the per-path Python loop (its rate is per step, so few suffice)"""
    train_paths: int | None = None
    """paths of the timed training iteration (default: the trainer's, mc 500)"""
    iterations: int = 5
    """timed training iterations (median reported)"""
    repeats: int = 3
    """repetitions of each timing (best reported)"""
    threads: int = 1
    """torch CPU threads of the throughput figures (0: torch's default; 1: the trainer's default)"""
    load_threads: tuple[int, ...] = (1, 2)
    """thread counts timed idle and beside a CPU-bound process"""
    device: str = "cpu"
    """auto, cpu, cuda or cuda:N"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        for name in ("num_paths", "naive_paths", "iterations", "repeats"):
            check_int(name, getattr(self, name), minimum=1)
        if self.train_paths is not None:
            check_int("train_paths", self.train_paths, minimum=1)
        check_int("threads", self.threads, minimum=0)
        for threads in self.load_threads:
            check_int("load_threads", threads, minimum=1)
        check_device("device", self.device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_time(function, repeats: int, device: torch.device) -> float:
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        function()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def _step_by_step_rollout(simulator, policy, initial: torch.Tensor, noise) -> torch.Tensor:
    """The rollout step by step, the reference the batched held-action rollout is timed
    against: one dispatched Euler step per ``dt`` (the policy at every decision step,
    absorption after every step). Returns the final states."""
    from pglab.envs.simulator import euler_maruyama_step

    model = simulator.model
    low, high = model.control.bounds(initial)
    state, alive = initial, ~model.terminated(initial)
    for t in range(simulator.num_steps):
        if t % simulator.action_repeat == 0:
            mean, std = policy.mean_std(state)
            action = mean + std * noise.action_noise[:, t]
        control = torch.maximum(torch.minimum(action, high), low)
        next_state, _ = euler_maruyama_step(model, state, control, noise.state_noise[:, t], simulator.dt)
        state = torch.where(alive.unsqueeze(1), next_state, state)
        alive = alive & ~model.terminated(state)
    return state


def _median_iteration_s(solver, iterations: int, device: torch.device) -> float:
    solver.train_step()  # warm-up
    times = []
    for _ in range(iterations):
        _sync(device)
        start = time.perf_counter()
        solver.train_step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def steadiness_under_load(make_solver, thread_counts, iterations: int, device: torch.device) -> list[dict]:
    """Median training-iteration time per thread count, without and then with a CPU-bound
    Python process beside it (this function starts and stops that process)."""
    rows = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        solver = make_solver()
        idle = _median_iteration_s(solver, iterations, device)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)  # let the scheduler see it
            loaded = _median_iteration_s(solver, iterations, device)
        finally:
            busy.terminate()
            busy.wait()
        rows.append(
            {
                "threads": threads,
                "idle_iteration_s": idle,
                "loaded_iteration_s": loaded,
                "ratio": loaded / idle,
                "load_average_1min": os.getloadavg()[0],
            }
        )
    return rows


def main(argv: list[str]) -> int:
    from pglab.algos.ghm_train import GHMTrainConfig, build_networks
    from pglab.envs.ghm import GHMModel
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    config = parse_config(GHMRolloutBenchConfig, argv, prog="pglab bench ghm-rollout")
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    train_config = (
        GHMTrainConfig(device=str(device))
        if config.train_paths is None
        else GHMTrainConfig(device=str(device), n_trajectories=config.train_paths)
    )
    model = GHMModel(train_config.params)
    policy, baseline = build_networks(train_config, model, device)
    generator = make_generator(0, device)
    result: dict[str, Any] = {"device": str(device)}
    result.update(_batched_against_naive(config, train_config, model, policy, generator, device))
    result.update(_training_rollouts(config, train_config, model, policy, generator, device))
    result.update(_training_iterations(config, train_config, model, policy, baseline, generator, device))
    result["threads"] = torch.get_num_threads()
    result["speedup_vs_naive"] = result["batched_state_steps_per_s"] / result["naive_state_steps_per_s"]
    result["fraction_of_forward_bound"] = result["batched_state_steps_per_s"] / result["forward_only_state_steps_per_s"]
    if config.json:
        print(json.dumps(result, indent=2))
    else:
        _print_result(result, config.num_paths)
    return 0


def _batched_against_naive(
    config: GHMRolloutBenchConfig,
    train_config: GHMTrainConfig,
    model: GHMModel,
    policy: GaussianPolicy,
    generator: torch.Generator,
    device: torch.device,
) -> dict[str, Any]:
    """State-steps per second of the batched simulator (policy every step), of a per-path
    Python loop, and of the policy's forward pass alone (the compute bound)."""
    from pglab.envs.simulator import TrajectorySimulator

    simulator = TrajectorySimulator(model, train_config.dt, train_config.T)  # policy queried every step
    num_steps = simulator.num_steps
    initial = model.initial_states(config.num_paths, generator, device=device)

    def batched():
        with torch.no_grad():
            simulator.rollout(policy, initial, generator)

    def forward_only():
        with torch.no_grad():
            for _ in range(num_steps):
                policy.mean_std(initial)

    cpu_policy = policy.to("cpu") if device.type != "cpu" else policy
    naive_initial = initial[: config.naive_paths].cpu()
    params = model.params
    sqrt_dt = math.sqrt(simulator.dt)

    def naive():
        # the textbook loop: one path at a time, one policy call per step
        with torch.no_grad():
            for path in range(config.naive_paths):
                cash = float(naive_initial[path, 0])
                for _ in range(num_steps):
                    if cash <= 0:
                        break
                    mean, std = cpu_policy.mean_std(torch.tensor([[cash]]))
                    action = (mean + std * torch.randn(1, 2))[0]
                    a_L = min(max(float(action[0]), 0.0), params.a_L_max)
                    a_E = min(max(float(action[1]), 0.0), params.a_E_max)
                    cash += (params.mu + params.r * cash - a_L + a_E) * simulator.dt + params.sigma * sqrt_dt * float(
                        torch.randn(())
                    )

    batched()  # warm-up
    batched_s = _best_time(batched, config.repeats, device)
    forward_s = _best_time(forward_only, config.repeats, device)
    naive_s = _best_time(naive, 1, torch.device("cpu"))
    if device.type != "cpu":
        policy.to(device)
    state_steps = config.num_paths * num_steps
    return {
        "num_steps": num_steps,
        "batched_state_steps_per_s": state_steps / batched_s,
        "naive_state_steps_per_s": config.naive_paths * num_steps / naive_s,
        "forward_only_state_steps_per_s": state_steps / forward_s,
    }


def _training_rollouts(
    config: GHMRolloutBenchConfig,
    train_config: GHMTrainConfig,
    model: GHMModel,
    policy: GaussianPolicy,
    generator: torch.Generator,
    device: torch.device,
) -> dict[str, Any]:
    """The training rollout (``train_paths`` paths, the default decision interval) three
    ways: step by step, held steps batched with the network, and with the policy table."""
    from pglab.envs.simulator import TabulatedPolicy, TrajectorySimulator

    assert train_config.action_repeat is not None and train_config.n_trajectories is not None  # GHMTrainConfig
    simulator = TrajectorySimulator(model, train_config.dt, train_config.T, action_repeat=train_config.action_repeat)
    initial = model.initial_states(train_config.n_trajectories, generator, device=device)
    noise = simulator.draw_noise(train_config.n_trajectories, generator, device=device)
    table_points = train_config.policy_table_points or 4001
    high = model.state_low[0] + 2.0 * (model.state_high[0] - model.state_low[0])
    with torch.no_grad():
        step_by_step_s = _best_time(
            lambda: _step_by_step_rollout(simulator, policy, initial, noise), config.repeats, device
        )
        held_s = _best_time(lambda: simulator.rollout(policy, initial, noise=noise), config.repeats, device)
        table_s = _best_time(
            lambda: simulator.rollout(
                TabulatedPolicy(policy, model.state_low[0], high, table_points, device=device), initial, noise=noise
            ),
            config.repeats,
            device,
        )
    return {
        "train_paths": train_config.n_trajectories,
        "action_repeat": train_config.action_repeat,
        "rollout_step_by_step_s": step_by_step_s,
        "rollout_held_network_s": held_s,
        "rollout_held_table_s": table_s,
    }


def _training_iterations(
    config: GHMRolloutBenchConfig,
    train_config: GHMTrainConfig,
    model: GHMModel,
    policy: GaussianPolicy,
    baseline: ValueNetwork | None,
    generator: torch.Generator,
    device: torch.device,
) -> dict[str, Any]:
    """The median time of one training iteration (rollout and both updates), and its
    steadiness beside a CPU-bound process (CPU only)."""
    from pglab.algos.ghm_train import build_solver
    from pglab.envs.simulator import TrajectorySimulator

    action_repeat = train_config.action_repeat
    assert action_repeat is not None  # set by GHMTrainConfig

    def make_solver():
        simulator = TrajectorySimulator(model, train_config.dt, train_config.T, action_repeat=action_repeat)
        return build_solver(train_config, policy, baseline, simulator=simulator, generator=generator)

    iteration_s = _median_iteration_s(make_solver(), config.iterations, device)
    threads = torch.get_num_threads()
    load_rows = (
        steadiness_under_load(make_solver, config.load_threads, config.iterations, device)
        if device.type == "cpu"
        else []
    )
    torch.set_num_threads(threads)
    return {"train_iteration_s": iteration_s, "under_load": load_rows}


def _print_result(result: dict[str, Any], num_paths: int) -> None:
    """The benchmark's table, each figure with its target."""
    num_steps, train_paths, action_repeat = result["num_steps"], result["train_paths"], result["action_repeat"]
    print(
        f"GHM rollout benchmark on {result['device']} ({result['threads']} threads), {num_paths} paths x "
        f"{num_steps} steps"
    )
    print(f"{'what':<38} {'state-steps/s':>14}")
    print(f"{'batched simulator, policy every step':<38} {result['batched_state_steps_per_s']:>14,.0f}")
    print(f"{'naive per-path Python loop':<38} {result['naive_state_steps_per_s']:>14,.0f}")
    print(f"{'policy forward only (compute bound)':<38} {result['forward_only_state_steps_per_s']:>14,.0f}")
    print(f"batched / naive = {result['speedup_vs_naive']:.0f}x   (target >= 50x)")
    print(f"batched / forward-only bound = {100 * result['fraction_of_forward_bound']:.0f}%   (target >= 50%)")
    print(
        f"one training iteration ({train_paths} paths x {num_steps} steps, action_repeat "
        f"{action_repeat}, rollout + both updates): {result['train_iteration_s']:.3f} s (target <= 1.5 s)"
    )
    print(
        f"training rollout ({train_paths} paths x {num_steps} steps, action_repeat {action_repeat}): "
        f"step by step {result['rollout_step_by_step_s']:.3f} s, held steps batched "
        f"{result['rollout_held_network_s']:.3f} s, batched + policy table {result['rollout_held_table_s']:.3f} s"
    )
    for row in result["under_load"]:
        print(
            f"{row['threads']} thread(s): iteration {row['idle_iteration_s']:.3f} s idle, "
            f"{row['loaded_iteration_s']:.3f} s beside a CPU-bound process, ratio {row['ratio']:.2f} "
            f"(target <= 2.5; load average {row['load_average_1min']:.1f})"
        )
