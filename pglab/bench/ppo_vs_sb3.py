"""pglab PPO against Stable-Baselines3 PPO on the RL-Zoo settings in ``configs/ppo/``.

    python bench/ppo_vs_sb3.py                                   # cartpole + acrobot, 3 seeds
    python bench/ppo_vs_sb3.py --configs pendulum mountaincar_continuous --seeds 3
    python bench/ppo_vs_sb3.py --configs acrobot --steps 200000 --output acrobot.json
    python bench/ppo_vs_sb3.py --configs atari_breakout --steps 98304 --episodes 30 --libraries sb3
    python bench/ppo_vs_sb3.py --configs zoo:HalfCheetah-v4 --steps 20480 --seeds 1
    python bench/ppo_vs_sb3.py --configs cartpole zoo:Swimmer-v4 --steps 20480 --seeds 2 \
        --libraries sb3 pglab --record results/ppo-speed-mujoco.json
    pglab bench ppo-vs-sb3 --configs cartpole --output results.json

Each ``configs/ppo/*.yaml`` file is loaded into a :class:`~pglab.configs.ppo.PPOConfig`
and translated back to SB3's ``PPO(...)`` arguments (:func:`sb3_kwargs`: batch_size =
rollout / num_minibatches, vf_coef = value_coef / 2, ``lin_`` schedules, ``VecNormalize``
with the algorithm's gamma when the file normalises, ``use_sde``, ``log_std_init``,
``ortho_init``), so both libraries train the same setting.

For every (environment, seed) it trains SB3 and then pglab, one after the other in this
process (interleaved, so both see the same machine load), each on ``torch`` with one
thread and the CPU, on Gymnasium's own environment implementation. SB3 steps its
``DummyVecEnv`` of single environments; ``pglab`` uses its default
``--vectorization auto``: for CartPole-v1 gymnasium's array-vectorised CartPole (its
``vector_entry_point``, made same-step by :mod:`pglab.envs.gym_adapter`), for the MuJoCo
``-v4`` tasks of :mod:`pglab.envs.mujoco_vector` their batched path (equal to gymnasium's
env step for step), elsewhere a ``SyncVectorEnv``; ``pglab-sync`` forces the ``SyncVectorEnv`` of single environments,
the like-for-like environment loop (run only where it differs from ``pglab``). One-time
import costs (``torch._dynamo``, which the first ``torch.optim.Adam`` pulls in, ~2 s)
are paid before any timing. It reports:

* final return: the trained policy's deterministic return on ``--episodes`` held-out
  episodes (one per environment copy, seeds ``10_000 + i``), measured by one evaluator
  for both libraries (observations normalised with each run's frozen statistics); mean
  +- standard error over seeds;
* Atari (``atari_breakout``): SB3 trains on RL-Zoo's pipeline (``make_atari_env`` of
  ``<Game>NoFrameskip-v4``: ``AtariWrapper`` + ``VecFrameStack(4)``, ``CnnPolicy``), pglab
  on its own (:mod:`pglab.envs.atari`: ALE's C++ preprocessing, the Nature CNN). Each
  policy is scored on the pipeline it trained on (SB3's keeps the FIRE its
  ``FireResetEnv`` presses after a lost life; see :func:`sb3_atari_env`): the game score
  of ``--episodes`` whole games with raw rewards, sampling actions (RL-Zoo evaluates
  Atari stochastically: a deterministic Breakout policy that never presses FIRE
  stalls), from seed 10,000;
* env-steps/s: training env steps divided by the wall time of model construction plus
  training (logging and checkpointing included for pglab, which writes its CSV/JSONL
  logs and checkpoints; TensorBoard is off for both); also per CPU-second of this process,
  which is less sensitive to other load on a shared machine (the speed-up column uses
  it); the 1-minute load average is recorded with every run.

``--json`` prints the summary (:func:`summary`) as JSON on stdout (the table and the
per-run lines then go to stderr); ``--record PATH`` also writes it as a results record
(``tools/results_tables.py``'s format, kind ``benchmark``: the speed-ups depend on the
machine), whose command reruns the comparison with ``--json``.

Stable-Baselines3 is a dev/bench dependency (``pip install 'pglab[dev]'``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
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
from pglab.configs.ppo import vf_coef_from_value_coef
from pglab.envs.atari import is_atari_spec
from pglab.envs.gym_adapter import _VECTOR_IMPLEMENTATIONS
from pglab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs" / "ppo"
ACTIVATIONS = {
    "tanh": torch.nn.Tanh,
    "relu": torch.nn.ReLU,
    "elu": torch.nn.ELU,
    "silu": torch.nn.SiLU,
    "gelu": torch.nn.GELU,
}
"""pglab's ``activation`` -> SB3's ``activation_fn``."""
DEFAULT_CONFIGS = ("cartpole", "acrobot")


def resolve_config(name: str) -> Path:
    """``cartpole`` -> ``configs/ppo/cartpole.yaml``; a path is taken as it is."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = CONFIG_DIR / f"{name}.yaml"
    if not candidate.exists():
        print(
            f"bench: --configs: no config {name!r} (files in {CONFIG_DIR}: "
            f"{', '.join(sorted(p.stem for p in CONFIG_DIR.glob('*.yaml')))})",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return candidate


def load_config(name: str, steps: int | None) -> Any:
    """The :class:`PPOConfig` of a ``configs/ppo`` file, or of RL-Zoo's entry for ``ID``
    when ``name`` is ``zoo:ID`` (:func:`pglab.configs.zoo.zoo_config`), budget rounded up to
    whole rollouts (SB3 rounds up, pglab down: both get the rounded-up count)."""
    from pglab.configs.ppo import PPOConfig
    from pglab.run.config import load_yaml_config

    if name.startswith("zoo:"):
        from pglab.configs.zoo import zoo_config

        config = zoo_config(name.removeprefix("zoo:"))
    else:
        config = load_yaml_config(PPOConfig, resolve_config(name))
    total = config.total_steps if steps is None else steps
    return replace(config, total_steps=math.ceil(total / config.batch_size) * config.batch_size)


def sb3_kwargs(config: Any) -> dict[str, Any]:
    """The SB3 ``PPO(...)`` arguments equivalent to a pglab config (RL-Zoo's names)."""
    hp = config.update

    def schedule(value: float, kind: str) -> Any:
        return (lambda progress_remaining: value * progress_remaining) if kind == "linear" else value

    return dict(
        learning_rate=schedule(config.lr, config.lr_schedule),
        n_steps=config.num_steps,
        batch_size=hp.minibatch_size or config.batch_size // hp.num_minibatches,
        n_epochs=hp.ppo_epochs,
        gamma=hp.gamma,
        gae_lambda=hp.gae_lambda,
        clip_range=schedule(hp.clip_coef, hp.clip_schedule),
        normalize_advantage=hp.normalize_advantages,
        ent_coef=hp.entropy_coef,
        # pglab's (CleanRL's) critic loss is 0.5 * mean((V - R)^2), SB3's mean((R - V)^2):
        # vf_coef = value_coef / 2 gives the same loss (and the same gradient-norm clipping).
        vf_coef=vf_coef_from_value_coef(hp.value_coef),
        max_grad_norm=hp.max_grad_norm,
        target_kl=hp.target_kl,
        clip_range_vf=hp.value_clip_coef,
        use_sde=config.use_sde,
        sde_sample_freq=config.sde_sample_freq,
        policy_kwargs={
            "net_arch": {"pi": list(config.hidden_dims), "vf": list(config.critic_hidden_dims or config.hidden_dims)},
            "activation_fn": ACTIVATIONS[config.activation],
            "log_std_init": config.log_std_init,
            "ortho_init": config.ortho_init,
            "optimizer_kwargs": {"eps": config.adam_eps},
        },
    )


def sb3_atari_id(env_spec: str) -> str:
    """RL-Zoo's id for an Atari game: ``gym:ALE/Breakout-v5`` -> ``BreakoutNoFrameskip-v4``
    (no sticky actions, frames skipped by SB3's wrapper, as pglab's Atari env does)."""
    from ale_py.registration import rom_id_to_name

    from pglab.envs.atari import ale_game

    game = ale_game(env_spec.removeprefix("gym:"))
    if game is None:
        raise ConfigError("env", env_spec, "is not an Atari game (gym:ALE/NAME-v5 or ale:NAME)")
    return rom_id_to_name(game) + "NoFrameskip-v4"


def sb3_atari_env(env_spec: str, num_envs: int, seed: int, *, evaluation: bool = False) -> Any:
    """RL-Zoo's Atari env for SB3: ``make_atari_env`` (``Monitor``, then ``AtariWrapper``:
    noop reset, frame skip 4 with max-pooling, episodic life, fire reset, 84x84 greyscale,
    reward clipping) and a 4-frame ``VecFrameStack``. ``evaluation``: raw rewards, and
    nothing else changed. A lost life still ends an episode there, because SB3's
    ``FireResetEnv`` presses FIRE at that reset: the policy was trained never to serve the
    ball itself. The game score comes from ``Monitor``, which sits below the wrappers and
    sees whole games (RL-Zoo reports Atari scores the same way)."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    wrapper_kwargs = {"clip_reward": False} if evaluation else None
    return VecFrameStack(
        make_atari_env(sb3_atari_id(env_spec), n_envs=num_envs, seed=seed, wrapper_kwargs=wrapper_kwargs), n_stack=4
    )


def sb3_game_scores(env: Any, act: Callable[[np.ndarray], np.ndarray], max_steps: int = 30_000) -> np.ndarray:
    """The score of each env copy's first whole game (``Monitor``'s ``info["episode"]["r"]``)
    under ``act(obs) -> actions``; NaN where no game ended within ``max_steps`` steps
    (games are cut at 108,000 frames, 27,000 steps, anyway)."""
    obs = env.reset()
    scores = np.full(env.num_envs, np.nan)
    for _ in range(max_steps):
        obs, _, _, infos = env.step(act(obs))
        for index, info in enumerate(infos):
            if "episode" in info and np.isnan(scores[index]):
                scores[index] = info["episode"]["r"]
        if not np.isnan(scores).any():
            break
    return scores


def evaluate_sb3_atari(model: Any, env_spec: str, episodes: int, seed: int = 10_000) -> float:
    """Mean game score of ``episodes`` whole games, one per env copy, actions sampled."""
    env = sb3_atari_env(env_spec, episodes, seed, evaluation=True)
    scores = sb3_game_scores(env, lambda obs: model.predict(obs, deterministic=False)[0])
    env.close()
    return float(np.nanmean(scores))


def episode_returns(
    env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int = 10_000
) -> list[float]:
    """The undiscounted return of ``episodes`` episodes of ``act(obs) -> actions``, one per
    copy of a ``SyncVectorEnv`` (seeds ``seed + i``)."""
    import gymnasium as gym

    env = gym.make_vec(
        env_id,
        num_envs=episodes,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        obs, rewards, terminated, truncated, _ = env.step(act(obs))
        returns += np.where(running, rewards, 0.0)
        running &= ~(terminated | truncated)
    env.close()
    return [float(value) for value in returns]


def evaluate_policy(env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int = 10_000) -> float:
    """Mean undiscounted return of ``episodes`` episodes, one per vector-env copy."""
    return float(np.mean(episode_returns(env_id, act, episodes, seed)))


def _run_result(final: float, steps: int, wall: float, cpu: float) -> dict[str, float]:
    """One run's row: the final return, the env steps and their rate per wall- and CPU-second."""
    return {
        "return": final,
        "env_steps": steps,
        "wall_s": wall,
        "steps_per_s": steps / wall,
        "steps_per_cpu_s": steps / cpu,
    }


def run_sb3(config: Any, seed: int, episodes: int) -> dict[str, float]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env_id = config.env.removeprefix("gym:")
    if is_atari_spec(config.env):
        return _run_sb3_atari(config, seed, episodes)
    wall, cpu = time.perf_counter(), time.process_time()
    env = make_vec_env(env_id, n_envs=config.num_envs, seed=seed)
    normalized = None
    if config.normalizes:  # RL-Zoo: VecNormalize with the algorithm's gamma (normalize_gamma where set)
        env = normalized = VecNormalize(
            env,
            norm_obs=config.normalize_obs,
            norm_reward=config.normalize_reward,
            clip_obs=config.clip_obs,
            clip_reward=config.clip_reward,
            gamma=config.update.gamma if config.normalize_gamma is None else config.normalize_gamma,
            epsilon=config.normalize_epsilon,
        )
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **sb3_kwargs(config))
    model.learn(total_timesteps=config.total_steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steps = int(model.num_timesteps)

    def act(obs: np.ndarray) -> np.ndarray:
        # normalised with the frozen statistics (no update outside training)
        seen = normalized.normalize_obs(obs) if normalized is not None and config.normalize_obs else obs
        return model.predict(seen, deterministic=True)[0]

    final = evaluate_policy(env_id, act, episodes)
    env.close()
    return _run_result(final, steps, wall, cpu)


def _run_sb3_atari(config: Any, seed: int, episodes: int) -> dict[str, float]:
    from stable_baselines3 import PPO

    wall, cpu = time.perf_counter(), time.process_time()
    env = sb3_atari_env(config.env, config.num_envs, seed)
    kwargs = sb3_kwargs(config)
    # CnnPolicy's own architecture (the Nature CNN shared by both heads, as pglab's); only
    # Adam's eps carries over from the MLP settings
    kwargs["policy_kwargs"] = {"optimizer_kwargs": {"eps": config.adam_eps}}
    for key in ("use_sde", "sde_sample_freq"):
        kwargs.pop(key)
    model = PPO("CnnPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
    model.learn(total_timesteps=config.total_steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steps = int(model.num_timesteps)
    env.close()
    final = evaluate_sb3_atari(model, config.env, episodes)
    return _run_result(final, steps, wall, cpu)


def run_pglab(config: Any, seed: int, episodes: int, work_dir: Path, vectorization: str = "auto") -> dict[str, float]:
    from pglab.algos.ppo import train_ppo

    env_id = config.env.removeprefix("gym:")
    config = replace(
        config,
        seed=seed,
        device="cpu",
        threads=1,
        log_dir=work_dir / f"{env_id}-seed{seed}-{vectorization}",
        tensorboard=False,
        eval_episodes=0,
        log_interval=1,
        vectorization=vectorization,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    result = train_ppo(config, echo=lambda *a, **k: None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    import pglab

    agent = pglab.load_checkpoint(result.run_dir, device="cpu")  # applies the stored normalisation itself
    if is_atari_spec(config.env):  # whole games, raw score, actions sampled (see the module docstring)
        from pglab.algos.ppo import evaluate_agent

        final = evaluate_agent(agent, config.env, episodes=episodes, seed=10_000, deterministic=False)["return/mean"]
    else:
        final = evaluate_policy(env_id, lambda obs: agent.predict(obs, deterministic=True), episodes)
    steps = result.env_steps
    return _run_result(final, steps, wall, cpu)


LIBRARIES = ("sb3", "pglab", "pglab-sync")


def _warm_up(libraries: list[str]) -> None:
    """Pay one-time import costs before any timing, so no run is charged for them."""
    import gymnasium  # noqa: F401
    import torch._dynamo  # noqa: F401  (imported lazily by the first torch.optim.Adam)

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    if "sb3" in libraries:
        import stable_baselines3  # noqa: F401
    import pglab.algos.ppo  # noqa: F401


def _mean_std(values: list[float]) -> str:
    """``mean +- standard error`` over seeds."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} +- {statistics.stdev(values) / math.sqrt(len(values)):.1f}"


def _ratio(speed: float, baseline: float) -> str:
    """``3.17x``, or ``-`` where SB3 did not run in this process (``--libraries pglab``)."""
    return "-" if math.isnan(baseline) else f"{speed / baseline:.2f}x"


def format_table(results: dict[str, dict[str, list[dict[str, float]]]]) -> str:
    header = (
        f"{'env':<16} {'library':<10} {'seeds':>5} {'env steps':>9} {'return (+- s.e.)':>18}  {'per seed':<34} "
        f"{'steps/s':>8} {'steps/cpu-s':>11} {'speed-up (cpu)':>14}"
    )
    lines = [header, "-" * len(header)]
    for env_id, by_lib in results.items():
        sb3_sps = (
            statistics.mean(r["steps_per_cpu_s"] for r in by_lib.get("sb3", [])) if by_lib.get("sb3") else math.nan
        )
        for lib in LIBRARIES:
            runs = by_lib.get(lib, [])
            if not runs:
                continue
            returns = [r["return"] for r in runs]
            sps = statistics.mean(r["steps_per_s"] for r in runs)
            cpu_sps = statistics.mean(r["steps_per_cpu_s"] for r in runs)
            per_seed = " ".join(f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" for v in returns)
            lines.append(
                f"{env_id:<16} {lib:<10} {len(runs):>5} {runs[0]['env_steps']:>9} {_mean_std(returns):>18}  "
                f"{per_seed:<34} {sps:>8.0f} {cpu_sps:>11.0f} {_ratio(cpu_sps, sb3_sps):>8}"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/ppo_vs_sb3.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--configs",
        nargs="+",
        default=list(DEFAULT_CONFIGS),
        help="configs/ppo file names (cartpole, acrobot, pendulum, mountaincar_continuous, lunarlander, "
        "atari_breakout), YAML paths, or zoo:ENV_ID (RL-Zoo's entry, e.g. zoo:HalfCheetah-v4)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per config and library")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed")
    parser.add_argument("--steps", type=int, default=None, help="override total env steps (default: the file's)")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes of the final policy")
    parser.add_argument(
        "--libraries",
        nargs="+",
        default=list(LIBRARIES),
        choices=list(LIBRARIES),
        help="pglab: default vectorization (auto); pglab-sync: gymnasium's SyncVectorEnv",
    )
    parser.add_argument("--output", type=Path, default=None, help="write all per-run numbers to this JSON file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (the table: stderr)")
    parser.add_argument("--record", type=Path, default=None, help="also write the summary as a results record")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--seeds, --episodes and --steps must be >= 1")
    if args.record is not None and "sb3" not in args.libraries:
        parser.error("--record needs sb3 in --libraries (the record holds speed-ups over it)")
    return args


Results = dict[str, dict[str, list[dict[str, float]]]]
"""Per environment id and library, one row per seed (:func:`_run_result`'s, with the seed and load)."""


def run_all(args: argparse.Namespace, settings: dict[str, Any]) -> Results:
    """Every (config, seed, library) run of ``args``, SB3 and pglab alternately; fills
    ``settings`` with each environment's config."""
    from pglab.run.config import config_to_dict

    results: Results = {}
    text = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="pglab-bench-ppo-") as tmp:
        for name in args.configs:
            config = load_config(name, args.steps)
            env_id = config.env.removeprefix("gym:")
            settings[env_id] = {
                "file": name if name.startswith("zoo:") else str(resolve_config(name)),
                **config_to_dict(config),
                "seed": list(range(args.first_seed, args.first_seed + args.seeds)),
            }  # the seeds run
            results[env_id] = {lib: [] for lib in args.libraries}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for lib in args.libraries:  # alternately, so both see the same machine load
                    if lib == "pglab-sync" and env_id not in _VECTOR_IMPLEMENTATIONS:
                        continue  # identical to "pglab" here
                    if lib == "sb3":
                        run = run_sb3(config, seed, args.episodes)
                    else:
                        run = run_pglab(
                            config, seed, args.episodes, Path(tmp), "sync" if lib == "pglab-sync" else "auto"
                        )
                    results[env_id][lib].append({"seed": seed, "load_avg_1min": _load_average(), **run})
                    print(
                        f"  {env_id} {lib:<10} seed {seed}: return {run['return']:8.1f}  "
                        f"{run['steps_per_s']:7.0f} steps/s  {run['steps_per_cpu_s']:7.0f} steps/cpu-s "
                        f"({run['wall_s']:.1f} s, load {_load_average():.1f})",
                        file=text,
                        flush=True,
                    )
    return results


def summary(args: argparse.Namespace, results: Results, load: dict[str, float]) -> dict[str, Any]:
    """The comparison's figures: per environment and library the mean env steps per CPU-second
    and per wall-second over the seeds, the microseconds of CPU time per env step, the mean
    return and the env steps of a run (the files' budgets or ``--steps``, rounded up to whole
    rollouts); per environment ``speedup_cpu``, pglab's steps per CPU-second over SB3's
    (``None`` where one of them did not run); the load averages before and after."""
    envs: dict[str, Any] = {}
    for env_id, by_lib in results.items():
        envs[env_id] = {}
        for lib, runs in by_lib.items():
            if not runs:
                continue
            cpu_speed = statistics.mean(run["steps_per_cpu_s"] for run in runs)
            envs[env_id][lib] = {
                "env_steps": runs[0]["env_steps"],
                "steps_per_cpu_s": cpu_speed,
                "steps_per_s": statistics.mean(run["steps_per_s"] for run in runs),
                "cpu_us_per_step": 1e6 / cpu_speed,
                "return": statistics.mean(run["return"] for run in runs),
                "runs": runs,
            }
        both = "sb3" in envs[env_id] and "pglab" in envs[env_id]
        envs[env_id]["speedup_cpu"] = (
            envs[env_id]["pglab"]["steps_per_cpu_s"] / envs[env_id]["sb3"]["steps_per_cpu_s"] if both else None
        )
    return {
        "configs": list(args.configs),
        "steps": args.steps,
        "seeds": list(range(args.first_seed, args.first_seed + args.seeds)),
        "threads": 1,
        "envs": envs,
        "load_average": load,
    }


def reproduce_command(args: argparse.Namespace) -> str:
    """The command that measures ``args``' comparison again and prints its summary (``--json``)."""
    flags = ["--configs", *args.configs, "--seeds", str(args.seeds), "--episodes", str(args.episodes)]
    if args.first_seed != 0:
        flags += ["--first-seed", str(args.first_seed)]
    if args.steps is not None:
        flags += ["--steps", str(args.steps)]
    flags += ["--libraries", *args.libraries, "--json"]
    return "python bench/ppo_vs_sb3.py " + shlex.join(flags)


def write_record(path: Path, figures: dict[str, Any], command: str, wall_s: float, machine: dict[str, Any]) -> None:
    """``figures`` as a results record: ``machine`` as measured when the comparison started
    (its 1-minute load average included), the headline the speed-ups per environment."""
    tables = results_tables()
    envs = [env for env, row in figures["envs"].items() if row["speedup_cpu"] is not None]
    speedups = ", ".join(f"{env} {{envs[{env}][speedup_cpu]:.2f}}x" for env in envs)
    seeds = f"{len(figures['seeds'])} seed" + ("s" if len(figures["seeds"]) != 1 else "")
    budget = "" if figures["steps"] is None else ", {steps:,} steps"
    record = {
        "system": "REINFORCE, VPG and PPO",
        "title": f"training speed against SB3 PPO (env steps per CPU-second) on {', '.join(envs)}",
        "kind": "benchmark",
        "command": command,
        "reads": "stdout",
        "headline": f"{speedups} SB3's env steps per CPU-second (1 thread{budget}, {seeds})",
        "docs": "ppo.md",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": tables.commit(),
        "machine": machine,
        "wall_s": round(wall_s, 1),
        "figures": figures,
    }
    tables.check_record(record, path.name)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = results_tables().machine() if args.record is not None else None
    start = time.perf_counter()
    torch.set_num_threads(1)  # both libraries on one thread (small MLPs run fastest so anyway)
    _warm_up(args.libraries)
    settings: dict[str, Any] = {}
    load = {"before": _load_average()}
    results = run_all(args, settings)
    load["after"] = _load_average()
    text = sys.stderr if args.json else sys.stdout
    print(file=text)
    print(format_table(results), file=text)
    print(f"\nload average (1 min) before/after: {load['before']:.1f} / {load['after']:.1f}", file=text)
    figures = nan_as_none(summary(args, results, load))
    if args.json:
        print(json.dumps(figures))
    if args.record is not None:
        assert machine is not None  # taken above, before the runs
        write_record(args.record, figures, reproduce_command(args), time.perf_counter() - start, machine)
    if args.output is not None:
        import pglab

        args.output.write_text(
            json.dumps(
                {
                    "settings": settings,
                    "results": results,
                    "torch": torch.__version__,
                    "pglab": pglab.__version__,
                    "load_average": load,
                },
                indent=2,
                default=str,
            )
        )
    return 0


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return math.nan
