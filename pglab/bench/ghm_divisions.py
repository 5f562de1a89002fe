"""``pglab bench ghm-divisions``: time per training iteration against the number of states.

For ``--model divisions`` with ``N`` divisions (a state of ``N`` cash levels, ``2N``
controls) and the trainer's defaults otherwise, one process on one intra-op thread:

* the training rollout alone (``N = 1``: GHM's closed-form held steps; more divisions: the
  held steps one by one, each one tensor program over all paths and divisions);
* one full training iteration (``solver.train_step()``: rollout, the martingale control
  variate, advantages, the policy and baseline updates), median over ``iterations``.

``--models regimes ou`` adds a row for each two-state model, timed the same way in the same
process: its ratio to the first row (one division, which is GHM) is measured under the same
load, so it carries over to an idle machine, where GHM's iteration time is known.

The batched rollout has no Python loop over the divisions: the cost per iteration grows
with ``N`` only through the width of its tensors (and of the networks' first layer).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import torch

from pglab.run.config import parse_config
from pglab.validation import check_choice, check_device, check_int


@dataclass(frozen=True)
class GHMDivisionsBenchConfig:
    divisions: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of divisions timed"""
    models: tuple[Literal["regimes", "ou"], ...] = ()
    """two-state models timed after the divisions, one row each"""
    algo: Literal["mc", "pathwise", "actor-critic"] = "mc"
    """the solver (mc, pathwise, actor-critic), with its defaults"""
    iterations: int = 5
    """timed iterations per N (median reported), after one untimed"""
    threads: int = 1
    """torch CPU threads (the trainer's default is 1)"""
    device: str = "cpu"
    """auto, cpu, cuda or cuda:N"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        for count in self.divisions:
            check_int("divisions", count, minimum=1)
        for model in self.models:
            check_choice("models", model, ("regimes", "ou"))
        check_int("iterations", self.iterations, minimum=1)
        check_int("threads", self.threads, minimum=1)
        check_device("device", self.device)


def _median_seconds(function, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median wall-clock and CPU (this process) seconds of ``function()`` over ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def time_divisions(
    count: int, config: GHMDivisionsBenchConfig, model_name: Literal["divisions", "regimes", "ou"] = "divisions"
) -> dict[str, Any]:
    """One row: seconds of a training rollout and of a training iteration with ``count``
    divisions (or of ``model_name``, another model, whose count is ignored)."""
    from pglab.algos.ghm_train import GHMTrainConfig, build_model, build_networks, build_simulator, build_solver
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    device = resolve_device(config.device)
    if model_name == "divisions":
        train = GHMTrainConfig(algo=config.algo, model="divisions", divisions=count, device=str(device))
    else:
        train = GHMTrainConfig(algo=config.algo, model=model_name, device=str(device))
    torch.manual_seed(0)
    generator = make_generator(0, device)
    model = build_model(train)
    simulator = build_simulator(train, model)
    policy, baseline = build_networks(train, model, device)
    solver = build_solver(train, policy, baseline, simulator, generator)
    assert train.n_trajectories is not None  # set by GHMTrainConfig
    initial = model.initial_states(train.n_trajectories, generator, device=device)

    def rollout() -> None:
        with torch.no_grad():
            simulator.rollout(policy, initial, generator)

    solver.train_step()  # warm-up
    rollout_s, rollout_cpu_s = _median_seconds(rollout, config.iterations, device)
    iteration_s, iteration_cpu_s = _median_seconds(solver.train_step, config.iterations, device)
    return {
        "model": model_name,
        "divisions": count if model_name == "divisions" else None,
        "states": model.state_dim,
        "controls": model.action_dim,
        "paths": train.n_trajectories,
        "steps": simulator.num_steps,
        "rollout_s": rollout_s,
        "rollout_cpu_s": rollout_cpu_s,
        "iteration_s": iteration_s,
        "iteration_cpu_s": iteration_cpu_s,
    }


def main(argv: list[str] | None = None) -> int:
    config = parse_config(
        GHMDivisionsBenchConfig,
        sys.argv[1:] if argv is None else argv,
        prog="pglab bench ghm-divisions",
        description=__doc__.splitlines()[0],
    )
    torch.set_num_threads(config.threads)
    rows = [time_divisions(count, config) for count in config.divisions]
    rows += [time_divisions(0, config, model) for model in config.models]
    if config.json:
        print(json.dumps({"load_average": os.getloadavg(), "rows": rows}, indent=2))
        return 0
    print(f"--algo {config.algo}, {config.threads} thread(s), load average {os.getloadavg()[0]:.2f} at the end")
    print("median of the timed calls; wall-clock and this process's CPU time (steadier on a shared machine)")
    header = f"{'N':>7} {'controls':>8} {'rollout ms':>11} {'(CPU)':>7} {'iteration ms':>13} {'(CPU)':>7}"
    print(f"{header} {'CPU x first':>11}")
    for row in rows:
        print(
            f"{row['divisions'] or row['model']:>7} {row['controls']:>8} {1000 * row['rollout_s']:>11.1f} "
            f"{1000 * row['rollout_cpu_s']:>7.1f} {1000 * row['iteration_s']:>13.1f} "
            f"{1000 * row['iteration_cpu_s']:>7.1f} {row['iteration_cpu_s'] / rows[0]['iteration_cpu_s']:>11.2f}"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
