"""pglab's ``--zoo`` PPO against RL-Zoo's own SB3 PPO, both trained from the same entry of
rl_zoo3's ``hyperparams/ppo.yml``: final returns, per seed and over seeds.

    python bench/ppo_zoo_returns.py                      # Swimmer-v4, InvertedDoublePendulum-v4; seeds 11-13; 500k
    python bench/ppo_zoo_returns.py --envs Swimmer-v4 --seeds 11 --steps 8192 --episodes 2
    python bench/ppo_zoo_returns.py --runs runs.jsonl --record results/ppo-zoo-returns.json

For every environment and seed it trains SB3 (the ``PPO`` that rl_zoo3's
``ExperimentManager`` builds from the entry: its envs, ``VecNormalize``, schedules and
policy) and then pglab (``pglab.configs.zoo.zoo_config``: what ``pglab train ppo --zoo
ENV_ID`` runs), one after the other in this process, each on one torch thread and the
CPU. Both train for the same number of env steps: ``--steps`` (default: 500,000, or the
entry's ``n_timesteps`` where smaller) rounded up to whole rollouts, as SB3 rounds.

Both final policies are scored by one evaluator: the deterministic action on
``--episodes`` episodes (one per copy of a Gymnasium ``SyncVectorEnv``, seeds ``10_000 +
i``), observations normalised with the run's frozen statistics (SB3's
``VecNormalize.normalize_obs``; pglab's agent applies its stored normaliser itself).
Per seed: the mean return and its standard error over the episodes; per library: the
mean over seeds and its standard error over seeds. pglab "holds" on an environment when
its mean is at least SB3's minus one standard error of the difference,
``sqrt(se_pglab^2 + se_sb3^2)``.

``--runs FILE.jsonl`` keeps one line per finished run (returns, CPU and wall seconds, the
1-minute load average, the commit) and skips the runs already in it, so a long
comparison can be run in parts. The JSON summary goes to stdout; ``--record PATH`` also
writes it as a results record (see ``tools/results_tables.py``).

Needs rl_zoo3 and Stable-Baselines3 (``pip install 'pglab[zoo]'``) and MuJoCo.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pglab.bench import nan_as_none, results_tables

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ENVS = ("Swimmer-v4", "InvertedDoublePendulum-v4")
DEFAULT_SEEDS = (11, 12, 13)
LIBRARIES = ("sb3", "pglab")
EVAL_SEED = 10_000


def zoo_settings(env_id: str, steps: int) -> Any:
    """The entry's :class:`~pglab.configs.ppo.PPOConfig`, its budget ``min(steps, n_timesteps)``
    rounded up to whole rollouts."""
    from pglab.configs.zoo import zoo_config

    config = zoo_config(env_id)
    total = min(steps, config.total_steps)
    return replace(config, total_steps=math.ceil(total / config.batch_size) * config.batch_size)


def episode_returns(env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int) -> list[float]:
    """The undiscounted return of ``episodes`` episodes of ``act(obs) -> actions``, one per
    copy of a ``SyncVectorEnv`` (seeds ``EVAL_SEED + i``): the speed bench's evaluator."""
    from pglab.bench.ppo_vs_sb3 import episode_returns as returns_of

    return returns_of(env_id, act, episodes, seed=EVAL_SEED)


def train_sb3(env_id: str, steps: int, seed: int, folder: Path) -> Callable[[np.ndarray], np.ndarray]:
    """RL-Zoo's SB3 PPO for ``env_id`` trained for ``steps``; returns its deterministic
    policy on raw observations (normalised with the frozen ``VecNormalize`` statistics)."""
    from rl_zoo3.exp_manager import ExperimentManager

    manager = ExperimentManager(
        argparse.Namespace(),
        "ppo",
        env_id,
        str(folder),
        n_timesteps=steps,
        eval_freq=-1,
        verbose=0,
        seed=seed,
        device="cpu",
        log_interval=-2,
    )
    with contextlib.redirect_stdout(sys.stderr):  # RL-Zoo prints what it reads: keep stdout for the JSON
        model, _ = manager.setup_experiment()
        model.learn(total_timesteps=steps)
    normalizer = model.get_vec_normalize_env()

    def act(obs: np.ndarray) -> np.ndarray:
        seen = normalizer.normalize_obs(obs) if normalizer is not None and normalizer.norm_obs else obs
        return model.predict(seen, deterministic=True)[0]

    return act


def train_pglab(config: Any, seed: int, folder: Path) -> Callable[[np.ndarray], np.ndarray]:
    """``pglab train ppo --zoo ENV_ID`` (the same config) with ``seed``; returns the trained
    agent's deterministic policy on raw observations."""
    import pglab
    from pglab.algos.ppo import train_ppo

    run_config = replace(
        config, seed=seed, device="cpu", threads=1, log_dir=folder / "pglab", tensorboard=False, eval_episodes=0
    )
    result = train_ppo(run_config, echo=lambda *args, **kwargs: None)
    agent = pglab.load_checkpoint(result.run_dir, device="cpu")
    return lambda obs: agent.predict(obs, deterministic=True)


def one_run(library: str, env_id: str, seed: int, steps: int, episodes: int, commit: str) -> dict[str, Any]:
    """Train one library on one seed, evaluate its policy; the run's line of ``--runs``
    (``commit``: the code this process imported)."""
    config = zoo_settings(env_id, steps)
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pglab-zoo-returns-") as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        if library == "sb3":
            act = train_sb3(env_id, config.total_steps, seed, Path(tmp))
        else:
            act = train_pglab(config, seed, Path(tmp))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        returns = episode_returns(env_id, act, episodes)
    return {
        "env": env_id,
        "library": library,
        "seed": seed,
        "env_steps": config.total_steps,
        "episodes": episodes,
        "returns": returns,
        "mean": statistics.mean(returns),
        "sem": _sem(returns),
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "load_avg_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _sem(values: list[float]) -> float:
    """The standard error of the mean (sample std / sqrt(n)); NaN for one value."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def summarize(runs: list[dict[str, Any]], envs: list[str], seeds: list[int]) -> dict[str, Any]:
    """Per environment and library: the per-seed means and s.e., the mean over seeds and its
    s.e.; per environment whether pglab holds (mean >= SB3's - one s.e. of the difference)."""
    out: dict[str, Any] = {}
    for env_id in envs:
        by_library: dict[str, Any] = {}
        for library in LIBRARIES:
            rows = sorted((r for r in runs if r["env"] == env_id and r["library"] == library), key=lambda r: r["seed"])
            rows = [r for r in rows if r["seed"] in seeds]
            means = [r["mean"] for r in rows]
            by_library[library] = {
                "seeds": [r["seed"] for r in rows],
                "per_seed": means,
                "per_seed_sem": [r["sem"] for r in rows],
                "mean": statistics.mean(means) if means else math.nan,
                "sem": _sem(means),
                "cpu_s": [r["cpu_s"] for r in rows],
                "steps_per_cpu_s": statistics.mean(r["env_steps"] / r["cpu_s"] for r in rows) if rows else math.nan,
                "load_avg_1min": [r["load_avg_1min"] for r in rows],
                "commits": sorted({r["commit"] for r in rows}),
            }
        sb3, pglab = by_library["sb3"], by_library["pglab"]
        difference_sem = math.sqrt(sb3["sem"] ** 2 + pglab["sem"] ** 2)  # NaN below two seeds each
        env_steps = {r["env_steps"] for r in runs if r["env"] == env_id}
        out[env_id] = {
            **by_library,
            "env_steps": max(env_steps) if env_steps else None,
            "difference": pglab["mean"] - sb3["mean"],
            "difference_sem": difference_sem,
            "pglab_holds": None if math.isnan(difference_sem) else bool(pglab["mean"] >= sb3["mean"] - difference_sem),
        }
    return nan_as_none(out)


def read_runs(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reproduce_command(args: argparse.Namespace) -> str:
    """The command that measures ``args``' comparison from scratch (no ``--runs``, ``--record``)."""
    command = "python bench/ppo_zoo_returns.py"
    if args.envs != list(DEFAULT_ENVS):
        command += " --envs " + " ".join(args.envs)
    if args.seeds != list(DEFAULT_SEEDS):
        command += " --seeds " + " ".join(map(str, args.seeds))
    if args.steps != 500_000:
        command += f" --steps {args.steps}"
    if args.episodes != 10:
        command += f" --episodes {args.episodes}"
    return command


def write_record(path: Path, summary: dict[str, Any], command: str, runs: list[dict[str, Any]], load: float) -> None:
    """``summary`` as a results record (``tools/results_tables.py``'s fields): its wall time
    is the runs' (training and evaluation), its load average the 1-minute one when this
    invocation started (each run's is in the figures)."""
    tables = results_tables()
    envs = list(summary["envs"])

    def returns(env: str, library: str) -> str:
        """The headline's ``MEAN ± S.E.`` of one library (the mean alone where no s.e. exists)."""
        field = f"envs[{env}][{library}]"
        spread = f" ± {{{field}[sem]:.0f}}" if summary["envs"][env][library]["sem"] is not None else ""
        return f"{{{field}[mean]:.0f}}{spread}"

    headline = "; ".join(f"{env}: pglab {returns(env, 'pglab')}, SB3 {returns(env, 'sb3')}" for env in envs)
    seeds = f"{len(summary['seeds'])} seed" + ("s" if len(summary["seeds"]) != 1 else "")
    machine = tables.machine()
    machine["load_average_1min"] = load
    record = {
        "system": "REINFORCE, VPG and PPO",
        "title": f"--zoo against RL-Zoo's SB3 PPO on {' and '.join(envs)}",
        "kind": "result",
        "command": command,
        "reads": "stdout",
        "headline": f"{headline} (mean ± s.e., {seeds}, {{steps:,}} steps)",
        "docs": "ppo.md#rl-zoo-entries-against-rl-zoos-sb3",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": tables.commit(),
        "machine": machine,
        "wall_s": round(sum(run["wall_s"] for run in runs), 1),
        "figures": summary,
    }
    tables.check_record(record, path.name)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/ppo_zoo_returns.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="Gymnasium ids with a ppo.yml entry")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS), help="seeds of both libraries")
    parser.add_argument("--steps", type=int, default=500_000, help="env steps (at most the entry's n_timesteps)")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes per trained policy")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--runs", type=Path, default=None, help="JSONL of finished runs: appended, and not rerun")
    parser.add_argument("--record", type=Path, default=None, help="also write the summary as a results record")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.episodes < 2:
        parser.error("--steps must be >= 1 and --episodes >= 2 (a standard error needs two)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load, commit = os.getloadavg()[0], results_tables().commit()
    runs = read_runs(args.runs)
    for env_id in args.envs:
        for seed in args.seeds:
            for library in args.libraries:  # alternately, so both see the same machine load
                done = [r for r in runs if (r["env"], r["library"], r["seed"]) == (env_id, library, seed)]
                if done:
                    continue
                run = one_run(library, env_id, seed, args.steps, args.episodes, commit)
                runs.append(run)
                print(
                    f"{env_id} {library:<5} seed {seed}: return {run['mean']:9.1f} ± {run['sem']:.1f}  "
                    f"{run['env_steps'] / run['cpu_s']:6.0f} steps/cpu-s ({run['cpu_s']:.0f} cpu-s, "
                    f"{run['wall_s']:.0f} s, load {run['load_avg_1min'][1]:.1f})",
                    file=sys.stderr,
                    flush=True,
                )
                if args.runs is not None:
                    with args.runs.open("a") as stream:
                        stream.write(json.dumps(run) + "\n")
    summary = {
        "steps": args.steps,
        "episodes": args.episodes,
        "seeds": args.seeds,
        "envs": summarize(runs, args.envs, args.seeds),
    }
    json.dump(summary, sys.stdout, indent=2)
    print()
    if args.record is not None:
        measured = [r for r in runs if r["env"] in args.envs and r["seed"] in args.seeds]
        write_record(args.record, summary, reproduce_command(args), measured, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
