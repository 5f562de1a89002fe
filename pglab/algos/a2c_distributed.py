"""Multi-process streaming A2C with ``torch.distributed`` (DDP): each rank steps its own
environments, gradients are all-reduced once per optimiser step.

    torchrun --nproc_per_node 8 -m pglab.algos.a2c_distributed --num-envs 16384 \\
        --total-env-steps 500000000 --log-dir runs/a2c-ddp

Backend: NCCL when the ranks have GPUs (rank r uses ``cuda:LOCAL_RANK``), gloo on CPUs.
Every rank builds the same network from the same seed (DDP also broadcasts rank 0's
weights at wrap time), and a different environment / action-noise stream (seed +
1000 * rank). The gradient accumulation of one window runs under ``no_sync()`` except
for its last env-step, so there is exactly one all-reduce per optimiser step; the
bootstrap-forward reuse is off (a second forward with gradient before the previous
backward would trigger DDP's reducer early). DDP averages gradients over ranks, so the
update is the mean over all ``world_size * num_envs * update_every`` transitions.
``env_steps`` in the log counts transitions of all ranks; only rank 0 writes the log and
checkpoints. ``--resume`` restores weights, optimiser, counters and rank 0's environment;
the other ranks start fresh episodes (so a resumed DDP run is not bit-identical).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch


def _device_for(local_rank: int, requested: str) -> torch.device:
    if requested != "cpu" and torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_worker(rank: int, world_size: int, config_dict: dict[str, Any], init_method: str, local_rank: int | None = None,
               resumed_checkpoint_path: str | None = None) -> dict[str, Any]:
    """Train on one rank (called by torchrun's ``main`` or by ``torch.multiprocessing``)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from pglab.algos.a2c import A2CTrainConfig, A2CTrainer
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.config import config_from_dict

    config = config_from_dict(A2CTrainConfig, config_dict)
    local_rank = rank if local_rank is None else local_rank
    device = _device_for(local_rank, config.device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    try:
        checkpoint = load_checkpoint_file(resumed_checkpoint_path) if resumed_checkpoint_path else None
        wrap = lambda module: DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)  # noqa: E731
        trainer = A2CTrainer(config, run_dir=Path(config_dict["log_dir"]), checkpoint=checkpoint, rank=rank,
                             world_size=world_size, device=device, wrap_model=wrap)
        result = trainer.train(resumed=checkpoint is not None, no_sync=trainer.train_model.no_sync)
        result["params"] = [p.detach().cpu().clone() for p in trainer.model.parameters()]
        return result
    finally:
        dist.destroy_process_group()


def _spawn_target(rank: int, world_size: int, config_dict: dict[str, Any], init_method: str, out_dir: str) -> None:
    result = run_worker(rank, world_size, config_dict, init_method)
    torch.save({"params": result["params"], "env_steps": result["env_steps"], "opt_steps": result["opt_steps"]},
               Path(out_dir) / f"rank{rank}.pt")


def spawn_local(world_size: int, config_dict: dict[str, Any], init_file: str, out_dir: str) -> None:
    """Run ``world_size`` CPU ranks with gloo through ``torch.multiprocessing`` (tests)."""
    import torch.multiprocessing as mp

    mp.spawn(_spawn_target, args=(world_size, config_dict, f"file://{init_file}", out_dir), nprocs=world_size, join=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point under ``torchrun`` (reads RANK, WORLD_SIZE, LOCAL_RANK)."""
    import sys

    from pglab.algos.a2c import A2CTrainConfig, resolve_resume, run_dir_of
    from pglab.run.config import config_to_dict, parse_config
    from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config

    config = parse_config(A2CTrainConfig, sys.argv[1:] if argv is None else argv, prog="torchrun -m pglab.algos.a2c_distributed")
    if config.algo != "a2c":
        from pglab.errors import ConfigError

        raise ConfigError("algo", config.algo, "distributed training supports --algo a2c only")
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    config, checkpoint = resolve_resume(config)
    if checkpoint is not None:
        run_dir = run_dir_of(checkpoint)
    else:
        run_dir = Path(config.log_dir or default_run_dir("a2c-ddp"))
        if rank == 0:
            create_run_dir(run_dir)
            write_run_config(run_dir, {**config_to_dict(config), "world_size": world_size}, kind=config.kind)
    config_dict = config_to_dict(dataclasses.replace(config, resume=None, log_dir=run_dir))
    result = run_worker(rank, world_size, config_dict, "env://", local_rank,
                        resumed_checkpoint_path=checkpoint["path"] if checkpoint else None)
    if rank == 0:
        print({k: v for k, v in result.items() if k not in ("params", "last")})
    return 0


if __name__ == "__main__":  # pragma: no cover - torchrun entry
    raise SystemExit(main())
