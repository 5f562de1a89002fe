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
  policy and baseline updates), median over ``iterations``.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass

import torch

from pglab.run.config import parse_config
from pglab.validation import check_device, check_int


@dataclass(frozen=True)
class GHMRolloutBenchConfig:
    num_paths: int = 4096
    """paths of the batched rollout"""
    naive_paths: int = 8
    """paths simulated by the per-path Python loop (its rate is per step, so few suffice)"""
    train_paths: int = 1000
    """paths of the timed training iteration"""
    iterations: int = 5
    """timed training iterations (median reported)"""
    repeats: int = 3
    """repetitions of each timing (best reported)"""
    threads: int = 0
    """torch CPU threads (0: leave torch's default)"""
    device: str = "cpu"
    """auto, cpu, cuda or cuda:N"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        for name in ("num_paths", "naive_paths", "train_paths", "iterations", "repeats"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("threads", self.threads, minimum=0)
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


def main(argv: list[str]) -> int:
    from pglab.algos.ghm_train import GHMTrainConfig, build_networks, build_solver
    from pglab.envs.ghm import GHMModel
    from pglab.envs.simulator import TrajectorySimulator
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    config = parse_config(GHMRolloutBenchConfig, argv, prog="pglab bench ghm-rollout")
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    train_config = GHMTrainConfig(device=str(device), n_trajectories=config.train_paths)
    model = GHMModel(train_config.params)
    policy, baseline = build_networks(train_config, model, device)
    simulator = TrajectorySimulator(model, train_config.dt, train_config.T)  # policy queried every step
    num_steps = simulator.num_steps
    generator = make_generator(0, device)
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
                    cash += (params.mu + params.r * cash - a_L + a_E) * simulator.dt + params.sigma * sqrt_dt * float(torch.randn(()))

    batched()  # warm-up
    batched_s = _best_time(batched, config.repeats, device)
    forward_s = _best_time(forward_only, config.repeats, device)
    naive_s = _best_time(naive, 1, torch.device("cpu"))
    if device.type != "cpu":
        policy.to(device)

    solver = build_solver(train_config, policy, baseline, simulator=TrajectorySimulator(
        model, train_config.dt, train_config.T, action_repeat=train_config.action_repeat), generator=generator)
    solver.train_step()  # warm-up
    iteration_times = []
    for _ in range(config.iterations):
        _sync(device)
        start = time.perf_counter()
        solver.train_step()
        _sync(device)
        iteration_times.append(time.perf_counter() - start)

    state_steps = config.num_paths * num_steps
    result = {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "batched_state_steps_per_s": state_steps / batched_s,
        "naive_state_steps_per_s": config.naive_paths * num_steps / naive_s,
        "forward_only_state_steps_per_s": state_steps / forward_s,
        "train_iteration_s": statistics.median(iteration_times),
        "train_paths": config.train_paths,
        "action_repeat": train_config.action_repeat,
    }
    result["speedup_vs_naive"] = result["batched_state_steps_per_s"] / result["naive_state_steps_per_s"]
    result["fraction_of_forward_bound"] = result["batched_state_steps_per_s"] / result["forward_only_state_steps_per_s"]
    if config.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"GHM rollout benchmark on {device} ({result['threads']} threads), {config.num_paths} paths x {num_steps} steps")
    print(f"{'what':<38} {'state-steps/s':>14}")
    print(f"{'batched simulator, policy every step':<38} {result['batched_state_steps_per_s']:>14,.0f}")
    print(f"{'naive per-path Python loop':<38} {result['naive_state_steps_per_s']:>14,.0f}")
    print(f"{'policy forward only (compute bound)':<38} {result['forward_only_state_steps_per_s']:>14,.0f}")
    print(f"batched / naive = {result['speedup_vs_naive']:.0f}x   (target >= 50x)")
    print(f"batched / forward-only bound = {100 * result['fraction_of_forward_bound']:.0f}%   (target >= 50%)")
    print(f"one training iteration ({config.train_paths} paths x {num_steps} steps, action_repeat "
          f"{train_config.action_repeat}, rollout + both updates): {result['train_iteration_s']:.3f} s (target <= 1.5 s)")
    return 0
