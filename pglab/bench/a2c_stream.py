"""``pglab bench a2c-stream``: where the streaming A2C trainer's time goes.

For each ``N`` (default 1,024 and 8,192 on the CPU; 1,024 / 8,192 / 16,384 on a GPU) it
times, on PixelGoalEnv with PixelActorCriticCNN:

- ``env``: ``env.step`` alone with random int32 actions;
- ``model``: the model's forward + backward + optimiser step on a fixed batch;
- ``train``: full trainer windows (env + forward + bootstrap + backward + step);

and prints transitions/s, the ratio ``train / min(env, model)`` (target >= 0.6) and the
peak memory (CUDA: ``max_memory_allocated``; CPU: the process's peak RSS).
No ``.item()`` in the timed loops: timing brackets synchronise once.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rate(fn, steps: int, num_envs: int, device: torch.device, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    _sync(device)
    return steps * num_envs / (time.perf_counter() - start)


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def bench_one(num_envs: int, device: torch.device, steps: int, update_every: int) -> dict[str, float]:
    from pglab.algos.a2c import A2CTrainConfig, A2CTrainer
    from pglab.envs.pixel_goal import make_pixel_goal_env
    from pglab.nets.pixel_cnn import PixelActorCriticCNN
    from pglab.run.seeding import seed_everything

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    env = make_pixel_goal_env(num_envs, device=device, seed=0)
    env.reset()
    generator = torch.Generator(device=device).manual_seed(0)

    def env_step():
        env.step(torch.randint(5, (num_envs,), generator=generator, device=device, dtype=torch.int32))

    env_rate = _rate(env_step, steps, num_envs, device)

    model = PixelActorCriticCNN(*env.observation_shape, 5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    obs = env.reset().clone()

    def model_step():
        logits, values = model(obs)
        (logits.logsumexp(dim=1).mean() + values.pow(2).mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model_rate = _rate(model_step, steps, num_envs, device)

    # the trainer's loop body alone (no run directory, logs or checkpoints: the shell's)
    config = A2CTrainConfig(
        num_envs=num_envs, update_every=update_every, total_env_steps=num_envs * 10**6, device=str(device)
    )
    seed_everything(config.seed)
    trainer = A2CTrainer(config, device=device)
    windows = max(1, steps // update_every)
    train_rate = _rate(trainer.window, windows, num_envs * update_every, device, warmup=1)
    return {
        "num_envs": num_envs,
        "env_steps_per_s": env_rate,
        "model_steps_per_s": model_rate,
        "train_steps_per_s": train_rate,
        "ratio": train_rate / min(env_rate, model_rate),
        "peak_mem_mb": _peak_memory_mb(device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pglab bench a2c-stream", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--num-envs", type=int, nargs="*", default=None, help="N values (default 1024 8192 [16384 on GPU])"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed env-steps per measurement")
    parser.add_argument("--update-every", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch default)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = parser.parse_args(argv)
    from pglab.run.device import resolve_device

    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = args.num_envs or ([1024, 8192, 16384] if device.type == "cuda" else [1024, 8192])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()} threads"
    print(f"a2c-stream bench on {name}, update_every={args.update_every}, {args.steps} env-steps per timing")
    header = f"{'N':>7} {'env/s':>12} {'model/s':>12} {'train/s':>12} {'train/min':>10} {'peak MiB':>9}"
    if not args.json:
        print(header)
    for n in sizes:
        row = bench_one(n, device, args.steps, args.update_every)
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{n:>7} {row['env_steps_per_s']:>12,.0f} {row['model_steps_per_s']:>12,.0f} "
                f"{row['train_steps_per_s']:>12,.0f} {row['ratio']:>10.2f} {row['peak_mem_mb']:>9,.0f}"
            )
        sys.stdout.flush()
    return 0
