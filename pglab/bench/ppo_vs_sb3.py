"""pglab PPO against Stable-Baselines3 PPO: same hyperparameters, same env steps, same seeds.

    python bench/ppo_vs_sb3.py                       # CartPole-v1 and Pendulum-v1, 3 seeds
    python bench/ppo_vs_sb3.py --envs CartPole-v1 --seeds 5 --steps 50000
    pglab bench ppo-vs-sb3 --output results.json

For every (environment, seed) it trains SB3 and then pglab, one after the other in this
process (interleaved, so both see the same machine load), each on ``torch`` with one
thread and the CPU, on Gymnasium's own environment implementation. SB3 steps its
``DummyVecEnv`` of single environments; ``pglab`` uses its default
``--vectorization auto``: for CartPole-v1 gymnasium's array-vectorised CartPole (its
``vector_entry_point``, made same-step by :mod:`pglab.envs.gym_adapter`), elsewhere a
``SyncVectorEnv``; ``pglab-sync`` forces the ``SyncVectorEnv`` of single environments,
the like-for-like environment loop (run only where it differs from ``pglab``). One-time
import costs (``torch._dynamo``, which the first ``torch.optim.Adam`` pulls in, ~2 s)
are paid before any timing. It reports:

* final return: the trained policy's deterministic return on ``--episodes`` held-out
  episodes (one per environment copy, seeds ``10_000 + i``), measured by one evaluator
  for both libraries; mean +- std over seeds;
* env-steps/s: training env steps divided by the wall time of model construction plus
  training (logging and checkpointing included for pglab, which writes its CSV/JSONL
  logs and checkpoints; TensorBoard is off for both); also per CPU-second of this process,
  which is less sensitive to other load on a shared machine.

Stable-Baselines3 is a dev/bench dependency (``pip install 'pglab[dev]'``).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pglab.envs.gym_adapter import _VECTOR_IMPLEMENTATIONS


@dataclass(frozen=True)
class Hyperparams:
    """One PPO setting, spelled for both libraries."""

    total_steps: int
    num_envs: int
    num_steps: int
    num_minibatches: int
    ppo_epochs: int
    lr: float
    anneal_lr: bool
    gamma: float
    gae_lambda: float
    clip_coef: float = 0.2
    entropy_coef: float = 0.0
    value_coef: float = 0.5  # SB3 vf_coef (pglab gets 2x: see run_pglab)
    max_grad_norm: float = 0.5
    hidden: tuple[int, ...] = (64, 64)


SETTINGS: dict[str, Hyperparams] = {
    # CleanRL's ppo.py defaults (pglab's defaults).
    "CartPole-v1": Hyperparams(total_steps=100_000, num_envs=4, num_steps=128, num_minibatches=4, ppo_epochs=4,
                               lr=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, entropy_coef=0.01),
    # rl-baselines3-zoo's Pendulum-v1 PPO setting without gSDE (which pglab lacks):
    # n_envs 4, n_steps 1024, batch 64, 10 epochs, lr 1e-3, gamma 0.9.
    "Pendulum-v1": Hyperparams(total_steps=100_000, num_envs=4, num_steps=1024, num_minibatches=64, ppo_epochs=10,
                               lr=1e-3, anneal_lr=False, gamma=0.9, gae_lambda=0.95, entropy_coef=0.0),
}


def evaluate_policy(env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int = 10_000) -> float:
    """Mean undiscounted return of ``episodes`` episodes, one per vector-env copy."""
    import gymnasium as gym

    env = gym.make_vec(env_id, num_envs=episodes, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        obs, rewards, terminated, truncated, _ = env.step(act(obs))
        returns += np.where(running, rewards, 0.0)
        running &= ~(terminated | truncated)
    env.close()
    return float(returns.mean())


def run_sb3(env_id: str, hp: Hyperparams, seed: int, episodes: int) -> dict[str, float]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    lr: Any = (lambda progress_remaining: hp.lr * progress_remaining) if hp.anneal_lr else hp.lr
    wall, cpu = time.perf_counter(), time.process_time()
    env = make_vec_env(env_id, n_envs=hp.num_envs, seed=seed)
    model = PPO(
        "MlpPolicy", env, learning_rate=lr, n_steps=hp.num_steps, batch_size=hp.num_envs * hp.num_steps // hp.num_minibatches,
        n_epochs=hp.ppo_epochs, gamma=hp.gamma, gae_lambda=hp.gae_lambda, clip_range=hp.clip_coef, normalize_advantage=True,
        ent_coef=hp.entropy_coef, vf_coef=hp.value_coef, max_grad_norm=hp.max_grad_norm, seed=seed, device="cpu", verbose=0,
        policy_kwargs={"net_arch": {"pi": list(hp.hidden), "vf": list(hp.hidden)}, "activation_fn": torch.nn.Tanh},
    )
    model.learn(total_timesteps=hp.total_steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steps = int(model.num_timesteps)
    final = evaluate_policy(env_id, lambda obs: model.predict(obs, deterministic=True)[0], episodes)
    env.close()
    return {"return": final, "env_steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


def run_pglab(env_id: str, hp: Hyperparams, seed: int, episodes: int, work_dir: Path, vectorization: str = "auto") -> dict[str, float]:
    from pglab.algos.ppo import PPOConfig, train_ppo
    from pglab.configs.ppo import OnPolicyHyperparams

    update = OnPolicyHyperparams(
        algo="ppo", gamma=hp.gamma, gae_lambda=hp.gae_lambda, ppo_epochs=hp.ppo_epochs,
        num_minibatches=hp.num_minibatches, clip_coef=hp.clip_coef, entropy_coef=hp.entropy_coef,
        # SB3's value loss is mean((R - V)^2); pglab's (CleanRL's) is 0.5 * mean((V - R)^2).
        # Twice the coefficient gives the same loss, hence the same gradient-norm clipping,
        # which acts on actor and critic gradients together.
        value_coef=2.0 * hp.value_coef, max_grad_norm=hp.max_grad_norm,
    )
    config = PPOConfig(
        env=f"gym:{env_id}", total_steps=hp.total_steps, num_envs=hp.num_envs, num_steps=hp.num_steps,
        lr=hp.lr, anneal_lr=hp.anneal_lr, update=update, hidden_dims=hp.hidden, seed=seed, device="cpu", threads=1,
        log_dir=work_dir / f"{env_id}-seed{seed}-{vectorization}", tensorboard=False, eval_episodes=0, log_interval=1,
        vectorization=vectorization,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    result = train_ppo(config, echo=lambda *a, **k: None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    import pglab

    agent = pglab.load_checkpoint(result.run_dir, device="cpu")
    final = evaluate_policy(env_id, lambda obs: agent.predict(obs, deterministic=True), episodes)
    steps = result.env_steps
    return {"return": final, "env_steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


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
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} +- {statistics.pstdev(values):.1f}"


def format_table(results: dict[str, dict[str, list[dict[str, float]]]]) -> str:
    header = f"{'env':<12} {'library':<10} {'seeds':>5} {'env steps':>9} {'final return':>18}  {'per seed':<34} {'steps/s':>8} {'steps/cpu-s':>11} {'speed-up':>8}"
    lines = [header, "-" * len(header)]
    for env_id, by_lib in results.items():
        sb3_sps = statistics.mean(r["steps_per_s"] for r in by_lib.get("sb3", [])) if by_lib.get("sb3") else math.nan
        for lib in LIBRARIES:
            runs = by_lib.get(lib, [])
            if not runs:
                continue
            returns = [r["return"] for r in runs]
            sps = statistics.mean(r["steps_per_s"] for r in runs)
            cpu_sps = statistics.mean(r["steps_per_cpu_s"] for r in runs)
            per_seed = " ".join(f"{v:.0f}" for v in returns)
            lines.append(f"{env_id:<12} {lib:<10} {len(runs):>5} {runs[0]['env_steps']:>9} {_mean_std(returns):>18}  {per_seed:<34} "
                         f"{sps:>8.0f} {cpu_sps:>11.0f} {sps / sb3_sps:>7.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/ppo_vs_sb3.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(SETTINGS), choices=list(SETTINGS), help="environments")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per environment and library")
    parser.add_argument("--steps", type=int, default=None, help="override total env steps (default: per-env setting)")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes of the final policy")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=list(LIBRARIES),
                        help="pglab: default vectorization (auto); pglab-sync: gymnasium's SyncVectorEnv")
    parser.add_argument("--output", type=Path, default=None, help="write all per-run numbers to this JSON file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--seeds, --episodes and --steps must be >= 1")
    torch.set_num_threads(1)  # both libraries on one thread (small MLPs run fastest so anyway)
    _warm_up(args.libraries)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    settings = {}
    with tempfile.TemporaryDirectory(prefix="pglab-bench-ppo-") as tmp:
        for env_id in args.envs:
            hp = SETTINGS[env_id] if args.steps is None else replace(SETTINGS[env_id], total_steps=args.steps)
            # Whole iterations for both: SB3 rounds up to a multiple of n_envs * n_steps,
            # pglab down, so ask both for the rounded-up count.
            batch = hp.num_envs * hp.num_steps
            hp = replace(hp, total_steps=math.ceil(hp.total_steps / batch) * batch)
            settings[env_id] = asdict(hp)
            results[env_id] = {lib: [] for lib in args.libraries}
            for seed in range(args.seeds):
                for lib in args.libraries:
                    if lib == "pglab-sync" and env_id not in _VECTOR_IMPLEMENTATIONS:
                        continue  # identical to "pglab" here
                    if lib == "sb3":
                        run = run_sb3(env_id, hp, seed, args.episodes)
                    else:
                        run = run_pglab(env_id, hp, seed, args.episodes, Path(tmp), "sync" if lib == "pglab-sync" else "auto")
                    results[env_id][lib].append({"seed": seed, **run})
                    print(f"  {env_id} {lib:<10} seed {seed}: return {run['return']:8.1f}  {run['steps_per_s']:7.0f} steps/s  "
                          f"({run['wall_s']:.1f} s)", flush=True)
    print()
    print(format_table(results))
    if args.output is not None:
        import pglab

        args.output.write_text(json.dumps({"settings": settings, "results": results, "torch": torch.__version__,
                                           "pglab": pglab.__version__}, indent=2))
    return 0
