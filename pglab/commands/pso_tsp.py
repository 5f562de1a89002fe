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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pglab.configs.pso_tsp import (  # torch-free: `--help` stays fast
    PSOTSPEnvConfig,
    PSOTSPEvalConfig,
    PSOTSPTrainConfig,
)
from pglab.errors import UsageError
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, run_dir_of, split_json_flag
from pglab.validation import check_new_run_dir, check_output_file

if TYPE_CHECKING:
    import numpy as np
    import torch

    from pglab.algos.pso_tsp import PSOTSPAgent


def train(argv: list[str]) -> int:
    """``pglab train pso-tsp [FLAGS]``; 0, or 130 after SIGINT/SIGTERM (checkpoint saved)."""
    from pglab.run.config import parse_flags

    as_json, argv = split_json_flag(argv)
    parsed = parse_flags(
        PSOTSPTrainConfig,
        argv,
        prog="pglab train pso-tsp",
        description="Learn a PSO controller for the TSP (Deep-PSO): per-particle (swarm_es) or per-edge "
        "(edge_policy) coefficients.",
    )
    check_new_run_dir(parsed.config)
    from pglab.algos.pso_tsp import train_pso_tsp

    result = train_pso_tsp(parsed.config, given=parsed.given, echo=echo_for(as_json))
    if not result.interrupted:
        emit(train_summary(result), as_json)
    return result.exit_code


def train_summary(result: Any) -> Summary:
    """The last training batch's tour lengths; the reference is what the run measured: the
    tuned constant (swarm_es) and classic PSO on the validation instances (where validated).
    The gap to the optimal tour is ``pglab evaluate RUN``'s."""
    import json

    metrics = result.last_metrics
    figures = []
    if "tour_length/mean" in metrics:
        figures.append(Figure("mean tour length (last training batch)", metrics["tour_length/mean"], ".4f"))
    if "tour_length/best" in metrics:
        figures.append(Figure("best tour per instance", metrics["tour_length/best"], ".4f"))
    reference = []
    if "tour_length/base" in metrics:
        reference.append(Figure("tuned constant PSO, best tour per instance", metrics["tour_length/base"], ".4f"))
    summary = json.loads((result.run_dir / "summary.json").read_text())
    for key, label in (("eval/improvement_pct", "classic"), ("eval/improvement_vs_tuned_pct", "tuned constant")):
        if key in summary:
            reference.append(
                Figure(f"shorter than {label} PSO on the validation instances by", summary[key], "+.2f", "%")
            )
    return Summary(
        f"pglab train pso-tsp: {result.iterations} iterations",
        figures,
        reference,
        notes=["the gap to the optimal tour: pglab evaluate RUN"],
        run_dir=result.run_dir,
        next=evaluate_command(result.run_dir),
        details={"run_dir": str(result.run_dir), "iterations": result.iterations, "last": metrics, **summary},
    )


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


def size_overrides(config: PSOTSPEvalConfig) -> dict[str, int]:
    """The swarm settings given on the command line (``--num-cities``, ``--n-particles``,
    ``--pso-iterations``), which replace the checkpoint's (or the defaults)."""
    names = ("num_cities", "n_particles", "pso_iterations")
    return {name: getattr(config, name) for name in names if getattr(config, name) is not None}


def run_tuning(config: PSOTSPEvalConfig, *, echo=print) -> dict:
    """``--tune N``: random search of the constant (w, c1, c2) on the training distribution."""
    import torch

    from pglab.algos.pso_tsp import TUNE_SEED_OFFSET, tune_constant_coefficients
    from pglab.run.atomic import atomic_write_json
    from pglab.run.device import resolve_device

    device = resolve_device(config.device)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    env_config = dataclasses.replace(PSOTSPTrainConfig().env, **size_overrides(config))
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
    assert config.output is not None  # PSOTSPEvalConfig: --tune needs --output
    atomic_write_json(config.output, tuned)
    echo(
        f"TSP{env_config.num_cities}: best of {config.tune} constant (w, c1, c2) on {config.episodes} + "
        f"{2 * config.episodes} training instances: w={tuned['w']:.4f} c1={tuned['c1']:.4f} c2={tuned['c2']:.4f}, "
        f"{100 * (1 - tuned['score']):+.2f} % vs classic on the second stage ({tuned['seconds']:.0f} s, "
        f"{tuned['cpu_seconds']:.0f} s CPU) -> {config.output}"
    )
    return tuned


CLASSIC = (0.7298, 1.49618, 1.49618)  # Clerc & Kennedy's constriction coefficients (w, c1, c2)


@dataclass
class HeldOut:
    """What every method of an evaluation runs on: the held-out instances (the same seeded
    set for all), their float64 distance matrices, the swarm settings, the learned agent
    (if a checkpoint was given) and the tuned constant (if ``--tuned`` was given)."""

    device: torch.device
    env_config: PSOTSPEnvConfig
    agent: PSOTSPAgent | None
    tuned: dict | None
    coords: torch.Tensor  # [N, n, 2]
    dists: list[np.ndarray]  # N float64 [n, n]
    dist64: torch.Tensor  # [N, n, n] float64, on device


def prepare_held_out(config: PSOTSPEvalConfig, *, echo=print) -> HeldOut:
    """Load the checkpoint and ``--tuned`` file, apply the size overrides and draw the
    held-out instances (``--seed``)."""
    import numpy as np
    import torch

    from pglab.algos.pso_tsp import agent_from_checkpoint
    from pglab.envs.pso_tsp import random_instances
    from pglab.envs.tsp_solvers import distance_matrix
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device
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
    overrides = size_overrides(config)
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
    coords = random_instances(config.episodes, env_config.num_cities, make_generator(config.seed, device), device)
    dists = [distance_matrix(c) for c in coords.cpu().double().numpy()]
    return HeldOut(device, env_config, agent, tuned, coords, dists, torch.as_tensor(np.stack(dists), device=device))


class Methods:
    """Runs and times the methods on the held-out set; each row holds the tour lengths
    (float64, recomputed from the tours, so gaps to the optimum are exact), wall and CPU
    seconds."""

    def __init__(self, config: PSOTSPEvalConfig, held_out: HeldOut):
        from pglab.run.progress import progress_bar

        self.config, self.held_out = config, held_out
        self.rows: list[dict] = []
        self.bar = progress_bar(
            self.count(),
            desc=f"evaluate pso-tsp (TSP{held_out.env_config.num_cities}, {config.episodes} instances)",
            unit="method",
        )

    def count(self) -> int:
        """How many rows :func:`run_methods` makes (the progress bar's total)."""
        config, held_out = self.config, self.held_out
        tuned, agent = held_out.tuned is not None, held_out.agent is not None
        swarms = 3 + int(tuned) + (1 + int(self.sampled) if agent else 0)
        equal_time = 1 + int(tuned) if agent and config.equal_time else 0
        return int(config.optimal) + swarms * (2 if config.local_search == "2opt" else 1) + 2 + equal_time

    @property
    def sampled(self) -> bool:
        """The agent has sampled coefficients (an edge policy)."""
        return self.held_out.agent is not None and self.held_out.agent.config.controller == "edge_policy"

    def lengths_of(self, tours: torch.Tensor) -> np.ndarray:
        import numpy as np

        from pglab.envs.tsp_solvers import tour_length

        dists = self.held_out.dists
        return np.array([tour_length(d, t) for d, t in zip(dists, tours.cpu().numpy(), strict=False)])

    def record(self, name: str, lengths: np.ndarray, wall: float, cpu: float, **extra) -> dict:
        row = {"method": name, "lengths": lengths, "seconds": wall, "cpu_seconds": cpu, **extra}
        self.rows.append(row)
        self.bar.update(1)
        return row

    def swarm(self, name: str, policy, env_config: PSOTSPEnvConfig | None = None) -> dict:
        """A greedy swarm on the held-out instances with the evaluation's swarm seed (the
        same initial swarms for every method at the same settings)."""
        import torch

        from pglab.algos.pso_tsp import run_swarm
        from pglab.envs.pso_tsp import PSOTSPEnv
        from pglab.run.seeding import make_generator

        device, env_config = self.held_out.device, env_config or self.held_out.env_config
        tick, cpu = time.perf_counter(), time.process_time()
        env = PSOTSPEnv(env_config, device, make_generator(self.config.swarm_seed, device), decode="greedy")
        with torch.no_grad():
            run_swarm(env, self.held_out.coords, policy)
        assert env.state is not None  # run_swarm reset it
        tours = env.state.best_tour
        wall, cpu = time.perf_counter() - tick, time.process_time() - cpu
        row = self.record(name, self.lengths_of(tours), wall, cpu, pso_iterations=env_config.pso_iterations)
        row["tours"] = tours
        return row

    def constant(self, w: float, c1: float, c2: float):
        """The policy of constant-coefficient PSO."""
        from pglab.envs.pso_tsp import fixed_coefficients

        device = self.held_out.device
        return lambda s: fixed_coefficients(tuple(s.position.shape), w, c1, c2, device=device)

    def warm_up(self) -> None:
        """Untimed: one PSO iteration on the held-out instances with each kind of policy the
        evaluation times (the learned one, deterministic and sampled; constant coefficients;
        random coefficients). A policy's first swarm in a process pays one-time costs (first
        calls, allocations at this batch size) that would otherwise be charged to whichever
        method runs it first. The warm-up draws from generators of its own: the timed rows'
        random numbers are those of an evaluation without it."""
        import torch

        from pglab.algos.pso_tsp import run_swarm
        from pglab.envs.pso_tsp import PSOTSPEnv, random_coefficients
        from pglab.run.seeding import make_generator

        held_out, device = self.held_out, self.held_out.device
        short = dataclasses.replace(held_out.env_config, pso_iterations=1)
        generator = make_generator(0, device)
        policies = [
            self.constant(*CLASSIC),
            lambda s: random_coefficients(tuple(s.position.shape), generator, device=device),
        ]
        agent = held_out.agent
        if agent is not None:
            policies.append(lambda s: agent.act(s, deterministic=True))
            if self.sampled:
                policies.append(lambda s: agent.act(s, deterministic=False, generator=generator))
        with torch.no_grad():
            for policy in policies:
                env = PSOTSPEnv(short, device, make_generator(0, device), decode="greedy")
                run_swarm(env, held_out.coords, policy)


def run_methods(config: PSOTSPEvalConfig, held_out: HeldOut) -> tuple[list[dict], dict[str, Any]]:
    """Every method on the held-out set. Returns the rows and the reference rows/lengths
    the table is judged against: ``{"optimal": lengths or None, "classic": row, "tuned":
    row or None}``."""
    methods = Methods(config, held_out)
    methods.warm_up()
    try:
        optimal = optimal_lengths(methods) if config.optimal else None
        swarm_rows, classic, tuned_row = swarm_methods(methods)
        if held_out.agent is not None and config.equal_time:
            equal_time_methods(methods, learned=swarm_rows[0], classic=classic)
        if config.local_search == "2opt":
            two_opt_methods(methods, swarm_rows)
        nearest_neighbour_methods(methods)
    finally:
        methods.bar.close()
    return methods.rows, {"optimal": optimal, "classic": classic, "tuned": tuned_row}


def optimal_lengths(methods: Methods) -> np.ndarray:
    """The optimal row: Held–Karp for n <= held_karp_max_n, else LKH-3 (elkai)."""
    import numpy as np

    from pglab.envs.tsp_solvers import reference_tour

    tick, cpu = time.perf_counter(), time.process_time()
    refs = [reference_tour(d, held_karp_max_n=methods.config.held_karp_max_n) for d in methods.held_out.dists]
    optimal = np.array([r.length for r in refs])
    methods.record(f"optimal ({refs[0].method})", optimal, time.perf_counter() - tick, time.process_time() - cpu)
    return optimal


def swarm_methods(methods: Methods) -> tuple[list[dict], dict, dict | None]:
    """The learned (mean, and sampled for an edge policy), classic, tuned and random PSO
    rows; returns ``(swarm rows, classic row, tuned row or None)``."""
    from pglab.envs.pso_tsp import random_coefficients
    from pglab.run.seeding import make_generator

    config, held_out = methods.config, methods.held_out
    device, agent, tuned = held_out.device, held_out.agent, held_out.tuned
    rows = []
    if agent is not None:
        kind = "mean coefficients" if methods.sampled else "controller"
        rows.append(methods.swarm(f"learned PSO ({kind})", lambda s: agent.act(s, deterministic=True)))
        if methods.sampled:
            policy_generator = make_generator(config.swarm_seed + 1, device)
            rows.append(
                methods.swarm(
                    "learned PSO (sampled coefficients)",
                    lambda s: agent.act(s, deterministic=False, generator=policy_generator),
                )
            )
    classic = methods.swarm("classic PSO (w=0.7298, c=1.49618)", methods.constant(*CLASSIC))
    rows.append(classic)
    tuned_row = None
    if tuned is not None:
        tuned_name = f"tuned PSO (w={tuned['w']:.3f}, c1={tuned['c1']:.3f}, c2={tuned['c2']:.3f})"
        tuned_row = methods.swarm(tuned_name, methods.constant(tuned["w"], tuned["c1"], tuned["c2"]))
        rows.append(tuned_row)
    coefficient_generator = make_generator(config.swarm_seed + 2, device)
    rows.append(
        methods.swarm(
            "random-coefficient PSO",
            lambda s: random_coefficients(tuple(s.position.shape), coefficient_generator, device=device),
        )
    )
    return rows, classic, tuned_row


def equal_time_methods(methods: Methods, *, learned: dict, classic: dict) -> None:
    """Classic (and tuned) PSO given the learned controller's extra CPU time as more
    iterations (CPU time, not wall time: the ratio is stable on a loaded machine)."""
    env_config, tuned = methods.held_out.env_config, methods.held_out.tuned
    T = env_config.pso_iterations
    longer = max(T, round(T * learned["cpu_seconds"] / max(classic["cpu_seconds"], 1e-9)))
    longer_config = dataclasses.replace(env_config, pso_iterations=longer)
    methods.swarm(f"classic PSO, equal time ({longer} iterations)", methods.constant(*CLASSIC), longer_config)
    if tuned is not None:
        constant = methods.constant(tuned["w"], tuned["c1"], tuned["c2"])
        methods.swarm(f"tuned PSO, equal time ({longer} iterations)", constant, longer_config)


def two_opt_methods(methods: Methods, swarm_rows: list[dict]) -> None:
    """Each swarm's best tours improved by batched 2-opt (its time added to the swarm's)."""
    from pglab.envs.pso_tsp import two_opt_batch

    for row in swarm_rows:
        tick, cpu = time.perf_counter(), time.process_time()
        improved = two_opt_batch(methods.held_out.dist64, row["tours"])
        methods.record(
            f"{row['method']} + 2-opt",
            methods.lengths_of(improved),
            row["seconds"] + time.perf_counter() - tick,
            row["cpu_seconds"] + time.process_time() - cpu,
        )


def nearest_neighbour_methods(methods: Methods) -> None:
    """Nearest neighbour, and nearest neighbour + 2-opt."""
    import numpy as np
    import torch

    from pglab.envs.pso_tsp import two_opt_batch
    from pglab.envs.tsp_solvers import nearest_neighbour_tour

    held_out = methods.held_out
    tick, cpu = time.perf_counter(), time.process_time()
    tours = np.stack([nearest_neighbour_tour(d) for d in held_out.dists])
    nn_tours = torch.as_tensor(tours, device=held_out.device)
    nn_wall, nn_cpu = time.perf_counter() - tick, time.process_time() - cpu
    methods.record("nearest neighbour", methods.lengths_of(nn_tours), nn_wall, nn_cpu)
    tick, cpu = time.perf_counter(), time.process_time()
    two_opt_tours = two_opt_batch(held_out.dist64, nn_tours)
    methods.record(
        "nearest neighbour + 2-opt",
        methods.lengths_of(two_opt_tours),
        nn_wall + time.perf_counter() - tick,
        nn_cpu + time.process_time() - cpu,
    )


def paired(reference: np.ndarray, lengths: np.ndarray) -> tuple[float, float]:
    """100 (L_ref - L) / L_ref per instance: its mean and standard error."""
    import numpy as np

    gain = 100.0 * (reference - lengths) / reference
    return float(gain.mean()), (float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("nan"))


def table_rows(rows: list[dict], references: dict[str, Any], episodes: int) -> list[dict]:
    """The table: per method the mean length, gap to the optimum, paired gains over
    classic (and tuned) PSO with their standard errors, the win rate over classic, and
    times per instance."""
    import numpy as np

    optimal, classic, tuned_row = references["optimal"], references["classic"], references["tuned"]
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
    return table


def print_table(table: list[dict], config: PSOTSPEvalConfig, held_out: HeldOut, *, echo=print) -> None:
    env_config = held_out.env_config
    echo(
        f"TSP{env_config.num_cities}: {config.episodes} held-out instances (seed {config.seed}), "
        f"{env_config.n_particles} particles, {env_config.pso_iterations} PSO iterations, k={env_config.k}, "
        "greedy decode; times per instance (wall / CPU ms)"
    )
    versus_tuned = held_out.tuned is not None
    header = f"{'method':<46} {'mean length':>11} {'gap %':>13} {'vs classic %':>15}"
    echo(header + (f" {'vs tuned %':>15}" if versus_tuned else "") + f" {'shorter':>8} {'wall ms':>8} {'CPU ms':>8}")
    for entry in table:
        gap = f"{entry['gap_pct']:6.2f} +- {entry['gap_se']:.2f}" if "gap_pct" in entry else f"{'-':>13}"
        line = f"{entry['method']:<46} {entry['mean_length']:>11.4f} {gap:>13} "
        line += f"{entry['vs_classic_pct']:+6.2f} +- {entry['vs_classic_se']:.2f}"
        if versus_tuned:
            line += f" {entry['vs_tuned_pct']:+6.2f} +- {entry['vs_tuned_se']:.2f}"
        line += f" {entry['shorter_than_classic']:>8.0%}"
        line += f" {entry['ms_per_instance']:>8.2f} {entry['cpu_ms_per_instance']:>8.2f}"
        echo(line)


def write_table(path: Path, table: list[dict], rows: list[dict], config: PSOTSPEvalConfig, held_out: HeldOut) -> None:
    """``--output``: the config, the table and every method's per-instance lengths."""
    from pglab.run.atomic import atomic_write_json

    env_config = held_out.env_config
    atomic_write_json(
        path,
        {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(config).items()},
            "num_cities": env_config.num_cities,
            "n_particles": env_config.n_particles,
            "pso_iterations": env_config.pso_iterations,
            "tuned": held_out.tuned,
            "rows": table,
            "lengths": {row["method"]: row["lengths"].tolist() for row in rows},
        },
    )


def run_evaluation(config: PSOTSPEvalConfig, *, echo=print) -> list[dict]:
    """Every method on the held-out set; returns the table rows (also printed)."""
    if config.tune:
        return [run_tuning(config, echo=echo)]
    held_out = prepare_held_out(config, echo=echo)
    rows, references = run_methods(config, held_out)
    table = table_rows(rows, references, config.episodes)
    print_table(table, config, held_out, echo=echo)
    if config.output is not None:
        write_table(config.output, table, rows, config, held_out)
    return table


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate pso-tsp [FLAGS]``."""
    from pglab.run.config import parse_config

    as_json, argv = split_json_flag(argv)
    config = parse_config(
        PSOTSPEvalConfig,
        argv,
        prog="pglab evaluate pso-tsp",
        description="Learned vs classic/tuned/random PSO, nearest neighbour (+2-opt) and optimal tours, "
        "with wall/CPU time per instance and an equal-time comparison; --tune N searches the constant PSO.",
    )
    check_output_file("output", config.output)
    table = run_evaluation(config, echo=echo_for(as_json))
    emit(evaluate_summary(config, table), as_json)
    return 0


def evaluate_summary(config: PSOTSPEvalConfig, table: list[dict]) -> Summary:
    """The learned PSO's (else classic PSO's) mean tour and gap to the optimal tour, with
    the optimal tour and classic PSO as the references; ``--tune``: the tuned constant
    against classic PSO. No target: no verdict."""
    run_dir = run_dir_of(config.checkpoint) if config.checkpoint is not None else None
    if config.tune:
        tuned = table[0]
        return Summary(
            f"pglab evaluate pso-tsp --tune {config.tune}",
            [Figure(name, tuned[name], ".4f") for name in ("w", "c1", "c2")],
            [Figure("shorter than classic PSO by", 100 * (1 - tuned["score"]), "+.2f", "%")],
            notes=[f"written to {config.output}; evaluate with --tuned {config.output}"],
            details={"tuned": tuned},
        )
    rows = {entry["method"]: entry for entry in table}

    def first(prefix: str) -> dict | None:
        return next((entry for name, entry in rows.items() if name.startswith(prefix)), None)

    headline = first("learned PSO (") or first("classic PSO (w=")
    assert headline is not None  # every evaluation runs classic PSO
    optimal, classic = first("optimal"), first("classic PSO (w=")
    result = [Figure(f"{headline['method']} mean tour", headline["mean_length"], ".4f")]
    reference = []
    if optimal is not None:
        result.append(Figure("gap to the optimal tour", headline["gap_pct"], ".2f", "%"))
        reference.append(Figure(optimal["method"], optimal["mean_length"], ".4f"))
    if classic is not None and classic is not headline:
        result.append(Figure("shorter than classic PSO by", headline["vs_classic_pct"], "+.2f", "%"))
        if "gap_pct" in classic:
            reference.append(Figure("classic PSO gap to the optimal tour", classic["gap_pct"], ".2f", "%"))
    return Summary(
        f"pglab evaluate pso-tsp: {config.episodes} held-out instances (seed {config.seed})",
        result,
        reference,
        run_dir=run_dir,
        details={"rows": table},
    )


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]``: ``argv[0]`` is the checkpoint."""
    if not argv:
        print("usage: pglab evaluate CHECKPOINT [FLAGS]", file=sys.stderr)
        return 2
    return evaluate(["--checkpoint", argv[0], *argv[1:]])
