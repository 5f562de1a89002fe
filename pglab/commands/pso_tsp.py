"""``pglab train pso-tsp``, ``pglab evaluate pso-tsp`` and ``pglab evaluate CHECKPOINT``.

The evaluation runs every method on the same seeded held-out instances (and, for the
swarm methods, the same initial swarms: one env seed), at equal swarm size and PSO
iterations, all decoding greedily, and reports mean tour length and gap to the optimum::

    learned            the checkpoint's controller (swarm_es) or its Gaussian mean (edge_policy)
    learned (sampled)  edge_policy only: coefficients sampled
    classic PSO        w = 0.7298, c1 = c2 = 1.49618 everywhere
    tuned PSO          the constant (w, c1, c2) of a --tune search (--tuned FILE)
    random PSO         w ~ U(0.5, 1), c1, c2 ~ U(0, 2.99) per particle/edge/iteration
    ..., equal time    classic / tuned PSO with the learned controller's extra CPU time as iterations
    ... + 2-opt        --local-search 2opt: each swarm's best tour improved by batched 2-opt
    nearest neighbour, nearest neighbour + 2-opt
    optimal            Held–Karp (exact) for n <= held_karp_max_n, else LKH-3 (elkai)

Every row reports wall and CPU milliseconds per instance; "vs classic" / "vs tuned" are
paired per instance, ``100 (L_ref - L) / L_ref``, mean +- standard error.
``--tune N`` replaces the evaluation by the random search of the constant coefficients on
training instances and writes its result for ``--tuned``.
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

    parsed = parse_flags(
        PSOTSPTrainConfig,
        argv,
        prog="pglab train pso-tsp",
        description="Learn a PSO controller for the TSP (Deep-PSO): per-particle (swarm_es) or per-edge (edge_policy) coefficients.",
    )
    from pglab.algos.pso_tsp import train_pso_tsp

    result = train_pso_tsp(parsed.config, given=parsed.given)
    metrics = result.last_metrics
    if metrics and "tour_length/mean" in metrics:
        print(
            f"iteration {result.iterations}: mean tour {metrics['tour_length/mean']:.4f}, "
            f"best per instance {metrics['tour_length/best']:.4f}"
        )
    elif metrics:  # swarm_es: the controller and its base constant on the last ES batch
        print(
            f"iteration {result.iterations}: best per instance {metrics['tour_length/best']:.4f} "
            f"(tuned constant: {metrics['tour_length/base']:.4f})"
        )
    print(f"run directory: {result.run_dir}")
    return result.exit_code


def load_tuned(path: Path) -> dict:
    """A ``--tune`` result: ``{"w", "c1", "c2", "num_cities", ...}``; a one-line error if malformed."""
    import json

    from pglab.errors import DataError

    try:
        tuned = json.loads(Path(path).read_text())
        _ = [float(tuned[key]) for key in ("w", "c1", "c2")]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"tuned: {path} is not a --tune result with w, c1, c2 ({exc})") from exc
    return tuned


def run_tuning(config: PSOTSPEvalConfig, *, echo=print) -> dict:
    """``--tune N``: random search of the constant (w, c1, c2) on the training distribution."""
    import torch

    from pglab.algos.pso_tsp import TUNE_SEED_OFFSET, tune_constant_coefficients
    from pglab.run.atomic import atomic_write_json
    from pglab.run.device import resolve_device

    device = resolve_device(config.device)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    env_config = PSOTSPTrainConfig().env
    overrides = {
        name: getattr(config, name)
        for name in ("num_cities", "n_particles", "pso_iterations")
        if getattr(config, name) is not None
    }
    env_config = dataclasses.replace(env_config, **overrides)
    tick, cpu = time.perf_counter(), time.process_time()
    # Tuning instances come from their own stream (seed + TUNE_SEED_OFFSET): never the
    # held-out set that an evaluation with the same --seed draws.
    tuned = tune_constant_coefficients(
        env_config,
        candidates=config.tune,
        instances=config.episodes,
        seed=TUNE_SEED_OFFSET + config.seed,
        device=device,
    )
    tuned.update(seconds=time.perf_counter() - tick, cpu_seconds=time.process_time() - cpu)
    atomic_write_json(config.output, tuned)
    echo(
        f"TSP{env_config.num_cities}: best of {config.tune} constant (w, c1, c2) on {config.episodes} + "
        f"{2 * config.episodes} training instances: w={tuned['w']:.4f} c1={tuned['c1']:.4f} c2={tuned['c2']:.4f}, "
        f"{100 * (1 - tuned['score']):+.2f} % vs classic on the second stage ({tuned['seconds']:.0f} s, "
        f"{tuned['cpu_seconds']:.0f} s CPU) -> {config.output}"
    )
    return tuned


def run_evaluation(config: PSOTSPEvalConfig, *, echo=print) -> list[dict]:
    """Every method on the held-out set; returns the table rows (also printed)."""
    if config.tune:
        return [run_tuning(config, echo=echo)]
    import numpy as np
    import torch

    from pglab.algos.pso_tsp import agent_from_checkpoint, run_swarm
    from pglab.envs.pso_tsp import PSOTSPEnv, fixed_coefficients, random_coefficients, random_instances, two_opt_batch
    from pglab.envs.tsp_solvers import distance_matrix, nearest_neighbour_tour, reference_tour, tour_length
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
        agent = agent_from_checkpoint(
            load_checkpoint_file(config.checkpoint, kinds=["pso-tsp"], map_location=device), device
        )
        train_config = agent.config
    overrides = {
        name: getattr(config, name)
        for name in ("num_cities", "n_particles", "pso_iterations")
        if getattr(config, name) is not None
    }
    if agent is not None and "num_cities" in overrides and overrides["num_cities"] != train_config.env.num_cities:
        raise UsageError(
            f"num_cities: the checkpoint was trained on n={train_config.env.num_cities}; "
            f"the network's edge dimension is fixed by n and k (got {overrides['num_cities']})"
        )
    env_config = dataclasses.replace(train_config.env, **overrides)
    if agent is not None:
        agent.pso_iterations = env_config.pso_iterations  # its progress feature t / T, at this T
    tuned = load_tuned(config.tuned) if config.tuned is not None else None
    if tuned is not None and tuned.get("num_cities") not in (None, env_config.num_cities):
        echo(
            f"note: {config.tuned} was tuned on TSP{tuned['num_cities']}, evaluated here on TSP{env_config.num_cities}",
            file=sys.stderr,
        )
    n, T = env_config.num_cities, env_config.pso_iterations
    coords = random_instances(config.episodes, n, make_generator(config.seed, device), device)
    dists = [distance_matrix(c) for c in coords.cpu().double().numpy()]
    dist64 = torch.as_tensor(np.stack(dists), device=device)
    rows: list[dict] = []
    sampled = agent is not None and agent.config.controller == "edge_policy"
    swarms = 3 + int(tuned is not None) + (1 + int(sampled) if agent is not None else 0)
    methods = (
        int(config.optimal)
        + swarms * (2 if config.local_search == "2opt" else 1)
        + 2
        + (1 + int(tuned is not None) if agent is not None and config.equal_time else 0)
    )
    bar = progress_bar(methods, desc=f"evaluate pso-tsp (TSP{n}, {config.episodes} instances)", unit="method")

    def lengths_of(tours: torch.Tensor) -> np.ndarray:
        # Lengths recomputed in float64 from the tours, so gaps to the optimum are exact.
        return np.array([tour_length(d, t) for d, t in zip(dists, tours.cpu().numpy(), strict=False)])

    def record(name: str, lengths, wall: float, cpu: float, **extra) -> dict:
        row = {"method": name, "lengths": lengths, "seconds": wall, "cpu_seconds": cpu, **extra}
        rows.append(row)
        bar.update(1)
        return row

    def swarm(name: str, policy, env_cfg=env_config) -> dict:
        tick, cpu = time.perf_counter(), time.process_time()
        env = PSOTSPEnv(env_cfg, device, make_generator(config.swarm_seed, device), decode="greedy")
        with torch.no_grad():
            run_swarm(env, coords, policy)
        tours = env.state.best_tour
        row = record(
            name,
            lengths_of(tours),
            time.perf_counter() - tick,
            time.process_time() - cpu,
            pso_iterations=env_cfg.pso_iterations,
        )
        row["tours"] = tours
        return row

    def constant(w: float, c1: float, c2: float):
        return lambda s: fixed_coefficients(tuple(s.position.shape), w, c1, c2, device=device)

    # Warm-up (untimed): the first swarm of a process pays torch's one-time costs, which
    # would otherwise be charged to whichever method runs first.
    with torch.no_grad():
        warm = PSOTSPEnv(
            dataclasses.replace(env_config, pso_iterations=2), device, make_generator(0, device), decode="greedy"
        )
        run_swarm(warm, coords[:1], agent.act if agent is not None else constant(0.7298, 1.49618, 1.49618))

    try:
        optimal = None
        if config.optimal:
            tick, cpu = time.perf_counter(), time.process_time()
            refs = [reference_tour(d, held_karp_max_n=config.held_karp_max_n) for d in dists]
            optimal = np.array([r.length for r in refs])
            record(f"optimal ({refs[0].method})", optimal, time.perf_counter() - tick, time.process_time() - cpu)
        swarm_rows = []
        learned = None
        if agent is not None:
            kind = "controller" if not sampled else "mean coefficients"
            learned = swarm(f"learned PSO ({kind})", lambda s: agent.act(s, deterministic=True))
            swarm_rows.append(learned)
            if sampled:
                policy_generator = make_generator(config.swarm_seed + 1, device)
                swarm_rows.append(
                    swarm(
                        "learned PSO (sampled coefficients)",
                        lambda s: agent.act(s, deterministic=False, generator=policy_generator),
                    )
                )
        classic = swarm("classic PSO (w=0.7298, c=1.49618)", constant(0.7298, 1.49618, 1.49618))
        swarm_rows.append(classic)
        tuned_row = None
        if tuned is not None:
            tuned_name = f"tuned PSO (w={tuned['w']:.3f}, c1={tuned['c1']:.3f}, c2={tuned['c2']:.3f})"
            tuned_row = swarm(tuned_name, constant(tuned["w"], tuned["c1"], tuned["c2"]))
            swarm_rows.append(tuned_row)
        coefficient_generator = make_generator(config.swarm_seed + 2, device)
        swarm_rows.append(
            swarm(
                "random-coefficient PSO",
                lambda s: random_coefficients(tuple(s.position.shape), coefficient_generator, device=device),
            )
        )
        if learned is not None and config.equal_time:
            # The learned controller's extra CPU time, spent by the constant swarms on more
            # iterations (CPU time, not wall time: the ratio is stable on a loaded machine).
            longer = max(T, round(T * learned["cpu_seconds"] / max(classic["cpu_seconds"], 1e-9)))
            longer_config = dataclasses.replace(env_config, pso_iterations=longer)
            swarm(f"classic PSO, equal time ({longer} iterations)", constant(0.7298, 1.49618, 1.49618), longer_config)
            if tuned is not None:
                swarm(
                    f"tuned PSO, equal time ({longer} iterations)",
                    constant(tuned["w"], tuned["c1"], tuned["c2"]),
                    longer_config,
                )
        if config.local_search == "2opt":
            for row in list(swarm_rows):
                tick, cpu = time.perf_counter(), time.process_time()
                improved = two_opt_batch(dist64, row["tours"])
                record(
                    f"{row['method']} + 2-opt",
                    lengths_of(improved),
                    row["seconds"] + time.perf_counter() - tick,
                    row["cpu_seconds"] + time.process_time() - cpu,
                )

        tick, cpu = time.perf_counter(), time.process_time()
        nn_tours = torch.as_tensor(np.stack([nearest_neighbour_tour(d) for d in dists]), device=device)
        nn_wall, nn_cpu = time.perf_counter() - tick, time.process_time() - cpu
        record("nearest neighbour", lengths_of(nn_tours), nn_wall, nn_cpu)
        tick, cpu = time.perf_counter(), time.process_time()
        two_opt_tours = two_opt_batch(dist64, nn_tours)
        record(
            "nearest neighbour + 2-opt",
            lengths_of(two_opt_tours),
            nn_wall + time.perf_counter() - tick,
            nn_cpu + time.process_time() - cpu,
        )
    finally:
        bar.close()

    def paired(reference: np.ndarray, lengths: np.ndarray) -> tuple[float, float]:
        """100 (L_ref - L) / L_ref per instance: its mean and standard error."""
        gain = 100.0 * (reference - lengths) / reference
        return float(gain.mean()), (float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("nan"))

    episodes = config.episodes
    table = []
    for row in rows:
        entry = {
            "method": row["method"],
            "mean_length": float(row["lengths"].mean()),
            "std_length": float(row["lengths"].std()),
            "seconds": float(row["seconds"]),
            "cpu_seconds": float(row["cpu_seconds"]),
            "ms_per_instance": 1000.0 * float(row["seconds"]) / episodes,
            "cpu_ms_per_instance": 1000.0 * float(row["cpu_seconds"]) / episodes,
        }
        if "pso_iterations" in row:
            entry["pso_iterations"] = row["pso_iterations"]
        if optimal is not None:
            gap = 100.0 * (row["lengths"] / optimal - 1.0)
            entry["gap_pct"] = float(gap.mean())
            entry["gap_se"] = float(gap.std(ddof=1) / np.sqrt(len(gap))) if len(gap) > 1 else float("nan")
        # Paired over instances: 100 (L_classic - L) / L_classic, its standard error and win rate.
        entry["vs_classic_pct"], entry["vs_classic_se"] = paired(classic["lengths"], row["lengths"])
        entry["shorter_than_classic"] = float((row["lengths"] < classic["lengths"] - 1e-9).mean())
        if tuned_row is not None:
            entry["vs_tuned_pct"], entry["vs_tuned_se"] = paired(tuned_row["lengths"], row["lengths"])
        table.append(entry)
    echo(
        f"TSP{n}: {episodes} held-out instances (seed {config.seed}), {env_config.n_particles} particles, "
        f"{T} PSO iterations, k={env_config.k}, greedy decode; times per instance (wall / CPU ms)"
    )
    versus_tuned = tuned_row is not None
    header = f"{'method':<46} {'mean length':>11} {'gap %':>13} {'vs classic %':>15}"
    echo(header + (f" {'vs tuned %':>15}" if versus_tuned else "") + f" {'shorter':>8} {'wall ms':>8} {'CPU ms':>8}")
    for entry in table:
        gap = f"{entry['gap_pct']:6.2f} +- {entry['gap_se']:.2f}" if "gap_pct" in entry else f"{'-':>13}"
        line = f"{entry['method']:<46} {entry['mean_length']:>11.4f} {gap:>13} "
        line += f"{entry['vs_classic_pct']:+6.2f} +- {entry['vs_classic_se']:.2f}"
        if versus_tuned:
            line += f" {entry['vs_tuned_pct']:+6.2f} +- {entry['vs_tuned_se']:.2f}"
        line += f" {entry['shorter_than_classic']:>8.0%} {entry['ms_per_instance']:>8.2f} {entry['cpu_ms_per_instance']:>8.2f}"
        echo(line)
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        per_instance = {row["method"]: row["lengths"].tolist() for row in rows}
        atomic_write_json(
            config.output,
            {
                "config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(config).items()},
                "num_cities": n,
                "n_particles": env_config.n_particles,
                "pso_iterations": T,
                "tuned": tuned,
                "rows": table,
                "lengths": per_instance,
            },
        )
    return table


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate pso-tsp [FLAGS]``."""
    from pglab.run.config import parse_config

    config = parse_config(
        PSOTSPEvalConfig,
        argv,
        prog="pglab evaluate pso-tsp",
        description="Learned vs classic/tuned/random PSO, nearest neighbour (+2-opt) and optimal tours, "
        "with wall/CPU time per instance and an equal-time comparison; --tune N searches the constant PSO.",
    )
    run_evaluation(config)
    return 0


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]``: ``argv[0]`` is the checkpoint."""
    if not argv:
        print("usage: pglab evaluate CHECKPOINT [FLAGS]", file=sys.stderr)
        return 2
    return evaluate(["--checkpoint", argv[0], *argv[1:]])
