"""``pglab train pso-tsp``, ``pglab evaluate pso-tsp`` and ``pglab evaluate CHECKPOINT``.

The evaluation runs every method on the same seeded held-out instances (and, for the
swarm methods, the same initial swarms: one env seed), at equal swarm size and PSO
iterations, all decoding greedily, and reports mean tour length and gap to the optimum::

    learned (mean)     the checkpoint's policy, coefficients = Gaussian mean
    learned (sampled)  the checkpoint's policy, coefficients sampled
    classic PSO        w = 0.7298, c1 = c2 = 1.49618 everywhere
    random PSO         w ~ U(0.5, 1), c1, c2 ~ U(0, 2.99) per particle/edge/iteration
    nearest neighbour, nearest neighbour + 2-opt
    optimal            Held–Karp (exact) for n <= held_karp_max_n, else LKH-3 (elkai)
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from pglab.configs.pso_tsp import PSOTSPEvalConfig, PSOTSPTrainConfig  # torch-free: `--help` stays fast
from pglab.errors import UsageError


def train(argv: list[str]) -> int:
    """``pglab train pso-tsp [FLAGS]``; 0, or 130 after SIGINT/SIGTERM (checkpoint saved)."""
    from pglab.run.config import parse_flags

    parsed = parse_flags(PSOTSPTrainConfig, argv, prog="pglab train pso-tsp",
                         description="Learn per-particle, per-edge PSO coefficients for the TSP (Deep-PSO).")
    from pglab.algos.pso_tsp import train_pso_tsp

    result = train_pso_tsp(parsed.config, given=parsed.given)
    metrics = result.last_metrics
    if metrics:
        print(f"iteration {result.iterations}: mean tour {metrics.get('tour_length/mean', float('nan')):.4f}, "
              f"best per instance {metrics.get('tour_length/best', float('nan')):.4f}")
    print(f"run directory: {result.run_dir}")
    return result.exit_code


def run_evaluation(config: PSOTSPEvalConfig, *, echo=print) -> list[dict]:
    """Every method on the held-out set; returns the table rows (also printed)."""
    import numpy as np
    import torch

    from pglab.algos.pso_tsp import agent_from_checkpoint, run_swarm
    from pglab.envs.pso_tsp import PSOTSPEnv, fixed_coefficients, random_coefficients, random_instances
    from pglab.envs.tsp_solvers import (
        distance_matrix, nearest_neighbour_tour, reference_tour, tour_length, two_opt,
    )
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device
    from pglab.run.progress import progress_bar
    from pglab.run.seeding import make_generator

    device = resolve_device(config.device)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    agent = None
    train_config = PSOTSPTrainConfig()
    if config.checkpoint is not None:
        agent = agent_from_checkpoint(load_checkpoint_file(config.checkpoint, kinds=["pso-tsp"], map_location=device), device)
        train_config = agent.config
    overrides = {name: getattr(config, name) for name in ("num_cities", "n_particles", "pso_iterations") if getattr(config, name) is not None}
    if agent is not None and "num_cities" in overrides and overrides["num_cities"] != train_config.num_cities:
        raise UsageError(f"num_cities: the checkpoint was trained on n={train_config.num_cities}; "
                         f"the network's edge dimension is fixed by n and k (got {overrides['num_cities']})")
    env_config = dataclasses.replace(train_config.env, **overrides)
    if agent is not None:
        agent.pso_iterations = env_config.pso_iterations  # its progress feature t / T, at this T
    n = env_config.num_cities
    coords = random_instances(config.episodes, n, make_generator(config.seed, device), device)
    dists = [distance_matrix(c) for c in coords.cpu().double().numpy()]
    rows: list[dict] = []
    methods = int(config.optimal) + (2 if agent is not None else 0) + 4
    bar = progress_bar(methods, desc=f"evaluate pso-tsp (TSP{n}, {config.episodes} instances)", unit="method")

    def record(name: str, lengths, seconds: float) -> None:
        rows.append({"method": name, "lengths": lengths, "seconds": seconds})
        bar.update(1)

    def swarm(name: str, policy) -> None:
        tick = time.perf_counter()
        env = PSOTSPEnv(env_config, device, make_generator(config.swarm_seed, device), decode="greedy")
        with torch.no_grad():
            run_swarm(env, coords, policy)
        # Recompute lengths in float64 from the tours, so gaps to the optimum are exact.
        tours = env.state.best_tour.cpu().numpy()
        record(name, np.array([tour_length(d, t) for d, t in zip(dists, tours)]), time.perf_counter() - tick)

    try:
        optimal = None
        if config.optimal:
            tick = time.perf_counter()
            refs = [reference_tour(d, held_karp_max_n=config.held_karp_max_n) for d in dists]
            optimal = np.array([r.length for r in refs])
            record(f"optimal ({refs[0].method})", optimal, time.perf_counter() - tick)
        if agent is not None:
            swarm("learned PSO (mean coefficients)", lambda s: agent.act(s, deterministic=True))
            policy_generator = make_generator(config.swarm_seed + 1, device)
            swarm("learned PSO (sampled coefficients)", lambda s: agent.act(s, deterministic=False, generator=policy_generator))
        swarm("classic PSO (w=0.7298, c=1.49618)", lambda s: fixed_coefficients(tuple(s.position.shape), device=device))
        coefficient_generator = make_generator(config.swarm_seed + 2, device)
        swarm("random-coefficient PSO", lambda s: random_coefficients(tuple(s.position.shape), coefficient_generator, device=device))

        tick = time.perf_counter()
        nn_tours = [nearest_neighbour_tour(d) for d in dists]
        nn_seconds = time.perf_counter() - tick
        record("nearest neighbour", np.array([tour_length(d, t) for d, t in zip(dists, nn_tours)]), nn_seconds)
        tick = time.perf_counter()
        two_opt_tours = [two_opt(d, t) for d, t in zip(dists, nn_tours)]
        record("nearest neighbour + 2-opt", np.array([tour_length(d, t) for d, t in zip(dists, two_opt_tours)]),
               nn_seconds + time.perf_counter() - tick)
    finally:
        bar.close()

    classic = next(row["lengths"] for row in rows if row["method"].startswith("classic"))
    table = []
    for row in rows:
        entry = {"method": row["method"], "mean_length": float(row["lengths"].mean()),
                 "std_length": float(row["lengths"].std()), "seconds": float(row["seconds"])}
        if optimal is not None:
            entry["gap_pct"] = float(100.0 * (row["lengths"] / optimal - 1.0).mean())
        # Paired over instances: 100 (L_classic - L) / L_classic, its standard error and win rate.
        gain = 100.0 * (classic - row["lengths"]) / classic
        entry["vs_classic_pct"] = float(gain.mean())
        entry["vs_classic_se"] = float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("nan")
        entry["shorter_than_classic"] = float((row["lengths"] < classic - 1e-9).mean())
        table.append(entry)
    echo(f"TSP{n}: {config.episodes} held-out instances (seed {config.seed}), {env_config.n_particles} particles, "
         f"{env_config.pso_iterations} PSO iterations, k={env_config.k}, greedy decode")
    echo(f"{'method':<38} {'mean length':>11} {'gap %':>8} {'vs classic % (+-SE)':>20} {'shorter':>8} {'seconds':>8}")
    for entry in table:
        gap = f"{entry['gap_pct']:8.2f}" if "gap_pct" in entry else f"{'-':>8}"
        versus = f"{entry['vs_classic_pct']:+.2f} +- {entry['vs_classic_se']:.2f}"
        echo(f"{entry['method']:<38} {entry['mean_length']:>11.4f} {gap} {versus:>20} {entry['shorter_than_classic']:>8.0%} {entry['seconds']:>8.2f}")
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        atomic_write_json(config.output, {"config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(config).items()},
                                          "num_cities": n, "n_particles": env_config.n_particles,
                                          "pso_iterations": env_config.pso_iterations, "rows": table})
    return table


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate pso-tsp [FLAGS]``."""
    from pglab.run.config import parse_config

    config = parse_config(PSOTSPEvalConfig, argv, prog="pglab evaluate pso-tsp",
                          description="Learned vs classic/random PSO, nearest neighbour (+2-opt) and optimal tours.")
    run_evaluation(config)
    return 0


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]``: ``argv[0]`` is the checkpoint."""
    if not argv:
        print("usage: pglab evaluate CHECKPOINT [FLAGS]", file=sys.stderr)
        return 2
    return evaluate(["--checkpoint", argv[0], *argv[1:]])
