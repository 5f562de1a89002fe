"""``pglab bench ghm-parallel``: when do parallel rollouts beat the batched simulator?

Prints, in one run, the throughput (state-steps/s, best of ``repeats``) and its ratio to
the batched single-process simulator for two workloads:

* ``vectorised``: the GHM model as trained (``n_paths`` paths x ``T/dt`` steps, the
  policy deciding every ``action_repeat`` steps), where one step is a handful of tensor
  ops over all paths;
* ``per-path``: the same GHM dynamics plus an interest rate that is the root of a scalar
  equation solved path by path in Python (``newton_iterations`` Newton steps per path and
  step): the stand-in for dynamics that cannot be written as tensor operations (a
  legacy solver, a per-firm sub-model), whose cost grows with the number of paths and
  that torch's intra-op threads cannot share out;

each with the batched simulator (``TrajectorySimulator``, torch's default threads, and
again with 1 thread), the process backend with 1 and 2 workers and, with ``--ray``, the Ray backend with 2
workers on a local Ray instance. Start-up costs (the worker pool, Ray) are excluded from
the throughput and printed separately; the run also checks that every backend returned
bit-identical trajectories.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

import torch

from pglab.envs.ghm import GHMModel
from pglab.run.config import parse_config
from pglab.validation import check_int, check_positive

_FIELDS = ("states", "actions", "controls", "rewards", "masks", "dones")


@dataclass(frozen=True)
class GHMParallelBenchConfig:
    n_paths: int = 1000
    """paths of the vectorised workload (the training default)"""
    T: float = 5.0
    """horizon of the vectorised workload"""
    dt: float = 0.01
    """time step of both workloads"""
    action_repeat: int = 5
    """policy decision interval in steps (the training default)"""
    loop_paths: int = 512
    """paths of the per-path workload"""
    loop_T: float = 0.5
    """horizon of the per-path workload"""
    newton_iterations: int = 20
    """Newton steps per path and time step in the per-path workload (its cost per path)"""
    repeats: int = 3
    """repetitions of each timing (best reported)"""
    threads: int = 0
    """torch CPU threads of the main process, i.e. of the batched simulator (0: torch's default); workers use 1"""
    ray: bool = True
    """also time the Ray backend (2 workers, local Ray instance); skipped if Ray is not installed"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        for name in ("n_paths", "action_repeat", "loop_paths", "newton_iterations", "repeats"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("threads", self.threads, minimum=0)
        for name in ("T", "dt", "loop_T"):
            check_positive(name, getattr(self, name))


class PerPathRateGHMModel(GHMModel):
    """GHM whose interest rate on cash is ``y(c)``, the root of
    ``y = r + 0.02 tanh(c - 10 y)``, found path by path with scalar Newton steps.

    The drift is ``mu + y(c) c - a_L + a_E``. Each call costs ``O(B * newton_iterations)``
    Python float operations: deliberately not vectorised (a module-level class, so the
    worker processes can unpickle it).
    """

    def __init__(self, newton_iterations: int = 20):
        super().__init__()
        self.newton_iterations = newton_iterations

    def _rate(self, cash: float) -> float:
        r, y = self.params.r, self.params.r
        for _ in range(self.newton_iterations):  # fixed count: the same cost for every path
            slope = 1.0 - math.tanh(cash - 10.0 * y) ** 2
            residual = y - r - 0.02 * math.tanh(cash - 10.0 * y)
            y -= residual / (1.0 + 0.2 * slope)
        return y

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        p = self.params
        cash = states[:, 0].tolist()
        rates = torch.tensor([self._rate(c) for c in cash], dtype=states.dtype).unsqueeze(1)
        return p.mu + rates * states - controls[:, 0:1] + controls[:, 1:2]


def _measure(label: str, simulator, policy, initial: torch.Tensor, seed: int, repeats: int, *, estimate: bool):
    """``(row, trajectories)``: time to first result (start-up + one rollout), the best
    wall time of ``repeats`` rollouts (all from the same generator state) and, with
    ``estimate``, the best CPU-bound time: the main thread's CPU time plus the largest
    worker's (parallel backends; the wall time a rollout would take with a free core per
    process, which a shared machine does not give)."""

    def rollout():
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            return simulator.rollout(policy, initial, generator)

    start = time.perf_counter()
    paths = rollout()
    first_s = time.perf_counter() - start
    best_s, best_cpu_bound_s = math.inf, math.inf
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        rollout()
        wall_s, main_cpu_s = time.perf_counter() - start, time.thread_time() - start_cpu
        best_s = min(best_s, wall_s)
        best_cpu_bound_s = min(
            best_cpu_bound_s, main_cpu_s + max(getattr(simulator, "last_worker_cpu_s", None) or [0.0])
        )
    state_steps = initial.shape[0] * simulator.num_steps
    row = {
        "what": label,
        "first_rollout_s": first_s,
        "rollout_s": best_s,
        "state_steps_per_s": state_steps / best_s,
        "cpu_bound_state_steps_per_s": state_steps / best_cpu_bound_s if estimate else None,
    }
    return row, paths


def _workload(name, model, config, policy, num_paths, horizon, ray_ok) -> list[dict]:
    from pglab.envs.parallel import ParallelTrajectorySimulator
    from pglab.envs.simulator import TrajectorySimulator

    initial = model.initial_states(num_paths, torch.Generator().manual_seed(1))
    batched = TrajectorySimulator(model, config.dt, horizon, action_repeat=config.action_repeat)
    threads = torch.get_num_threads()
    row, reference = _measure("batched simulator", batched, policy, initial, 2, config.repeats, estimate=threads == 1)
    rows = [row]
    if threads > 1:  # separates torch's intra-op threads from the workers' parallelism
        torch.set_num_threads(1)
        try:
            row, paths = _measure("batched, 1 thread", batched, policy, initial, 2, config.repeats, estimate=True)
        finally:
            torch.set_num_threads(threads)
        row["identical"] = all(torch.equal(getattr(paths, f), getattr(reference, f)) for f in _FIELDS)
        rows.append(row)
    variants = [("process", 1), ("process", 2)] + ([("ray", 2)] if ray_ok else [])
    for backend, n_workers in variants:
        with ParallelTrajectorySimulator(
            model, config.dt, horizon, action_repeat=config.action_repeat, backend=backend, n_workers=n_workers
        ) as simulator:
            row, paths = _measure(
                f"{backend}, {n_workers} worker{'s' if n_workers > 1 else ''}",
                simulator,
                policy,
                initial,
                2,
                config.repeats,
                estimate=True,
            )
        row["identical"] = all(torch.equal(getattr(paths, f), getattr(reference, f)) for f in _FIELDS)
        rows.append(row)
    single = rows[-len(variants) - 1]  # the single-threaded batched run
    for row in rows:
        row["workload"] = name
        row["paths"], row["steps"] = num_paths, batched.num_steps
        row["ratio_vs_batched"] = row["state_steps_per_s"] / rows[0]["state_steps_per_s"]
        estimate = row["cpu_bound_state_steps_per_s"]
        row["cpu_bound_ratio_vs_batched_1_thread"] = (
            None if estimate is None else estimate / single["cpu_bound_state_steps_per_s"]
        )
    return rows


def main(argv: list[str]) -> int:
    from pglab.algos.ghm_train import GHMTrainConfig, build_networks

    config = parse_config(GHMParallelBenchConfig, argv, prog="pglab bench ghm-parallel")
    if config.threads:
        torch.set_num_threads(config.threads)
    train_config = GHMTrainConfig(device="cpu")
    model = GHMModel(train_config.params)
    torch.manual_seed(0)
    policy, _ = build_networks(train_config, model, torch.device("cpu"))
    ray_ok, ray_note, ray_start_s = False, "", 0.0
    if config.ray:
        try:
            import ray
        except ImportError:
            ray_note = "Ray not installed (pglab[dist]): skipped"
        else:
            start = time.perf_counter()
            if not ray.is_initialized():
                ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            ray_start_s, ray_ok = time.perf_counter() - start, True
    try:
        rows = _workload("vectorised", model, config, policy, config.n_paths, config.T, ray_ok)
        rows += _workload(
            "per-path",
            PerPathRateGHMModel(config.newton_iterations),
            config,
            policy,
            config.loop_paths,
            config.loop_T,
            ray_ok,
        )
    finally:
        if ray_ok:
            ray.shutdown()
    result = {
        "threads_main": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        # other work on the machine takes cores from the workers: print it with the numbers
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "ray_init_s": ray_start_s if ray_ok else None,
        "rows": rows,
    }
    if config.json:
        print(json.dumps(result, indent=2))
        return 0
    load = "" if result["load_average_1min"] is None else f", load average {result['load_average_1min']:.1f}"
    print(
        f"GHM parallel rollouts on the CPU ({result['cpu_count']} cores{load}; batched simulator with "
        f"{result['threads_main']} torch threads, workers with 1), action_repeat {config.action_repeat}"
    )
    print(f"{'':<47} {'measured':>25} {'CPU-bound estimate':>27}")
    print(
        f"{'workload':<11} {'paths x steps':>13} {'what':<20} {'state-steps/s':>14} {'vs batched':>10} "
        f"{'state-steps/s':>14} {'vs 1 thread':>12} {'first rollout':>14} {'identical':>9}"
    )
    for row in rows:
        identical = {None: "-", True: "yes", False: "NO"}[row.get("identical")]
        estimate, ratio = row["cpu_bound_state_steps_per_s"], row["cpu_bound_ratio_vs_batched_1_thread"]
        print(
            f"{row['workload']:<11} {row['paths']:>5} x {row['steps']:<5} {row['what']:<20} "
            f"{row['state_steps_per_s']:>14,.0f} "
            f"{row['ratio_vs_batched']:>9.2f}x {'-' if estimate is None else f'{estimate:,.0f}':>14} "
            f"{'-' if ratio is None else f'{ratio:.2f}x':>12} {row['first_rollout_s']:>12.2f} s {identical:>9}"
        )
    print(
        "vs batched: measured throughput / the batched simulator's (torch's default threads). CPU-bound estimate: "
        "main thread's CPU time + the busiest worker's, i.e. the rate with a free core per process (the "
        "single-process runs use 1 thread), and its ratio to the 1-thread batched simulator's."
    )
    if ray_ok:
        print(f"local Ray start-up: {ray_start_s:.1f} s (not included above)")
    elif ray_note:
        print(ray_note)
    return 0
