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
``env_steps`` in the log counts transitions of all ranks. Rank 0 runs inside the training
shell (:mod:`pglab.run.shell`): it owns the run directory, the logs and the checkpoints;
the other ranks resolve the same ``--resume`` (``pglab.run.shell.resolve_resume``) and only
compute. A stop request on any rank stops every rank after the same optimiser step.
``--resume`` restores weights, optimiser, counters and rank 0's environment; the other
ranks start fresh episodes (so a resumed DDP run is not bit-identical).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from pglab.algos.a2c import A2CTrainer
    from pglab.configs.a2c import A2CTrainConfig
    from pglab.run.shell import TrainerSpec

# (config, counters) -> this rank's trainer, on its device, wrapped in DDP
BuildTrainer = Callable[["A2CTrainConfig", dict[str, Any]], "A2CTrainer"]


def _device_for(local_rank: int, requested: str) -> torch.device:
    if requested != "cpu" and torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def distributed_spec(world_size: int):
    """The a2c trainer spec with the budget counted in optimiser steps of ``world_size`` ranks."""
    from pglab.algos.a2c import SPEC

    return dataclasses.replace(SPEC, total_steps=lambda c: c.total_opt_steps(world_size))


def any_rank_stops(requested: bool, device: torch.device) -> bool:
    """Whether any rank was asked to stop (every rank must leave the loop together)."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if requested else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def _trainer_builder(rank: int, world_size: int, local_rank: int) -> BuildTrainer:
    from torch.nn.parallel import DistributedDataParallel

    from pglab.algos.a2c import A2CTrainer

    def build(config: A2CTrainConfig, counters: dict[str, Any]) -> A2CTrainer:
        device = _device_for(local_rank, config.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)

        def wrap(module: torch.nn.Module) -> torch.nn.Module:
            return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)

        return A2CTrainer(config, device=device, counters=counters, rank=rank, world_size=world_size, wrap_model=wrap)

    return build


def _train_rank0(
    spec: TrainerSpec, config: A2CTrainConfig, given: frozenset[str] | None, build: BuildTrainer, world_size: int
) -> tuple[dict[str, Any], A2CTrainer]:
    """Rank 0: the training shell's run (run directory, logs, checkpoints) around the trainer."""
    from pglab.algos.a2c_common import episode_summary, run_result
    from pglab.run.shell import TrainingRun

    with TrainingRun(spec, config, given=given) as run:
        trainer = build(run.config, run.counters)
        run.track(**trainer.tracked(), info=trainer.info())
        last = trainer.train(
            run,
            no_sync=trainer.train_model.no_sync,
            any_rank_stops=lambda requested: any_rank_stops(requested, trainer.device),
        )
        run.finish({**episode_summary(last), "world_size": world_size})
    return run_result(run, last), trainer


def _train_other_rank(
    spec: TrainerSpec, config: A2CTrainConfig, given: frozenset[str] | None, build: BuildTrainer
) -> tuple[dict[str, Any], A2CTrainer]:
    """Ranks > 0: the same merged config and checkpoint as rank 0 (the shell's
    ``resolve_resume`` and ``StateRegistry``), no files of their own; only compute."""
    from pglab.run.seeding import seed_everything
    from pglab.run.shell import resolve_resume
    from pglab.run.signals import StopRequested
    from pglab.run.state import StateRegistry

    run_config, checkpoint, _ = resolve_resume(spec, config, given)
    if run_config.threads:
        torch.set_num_threads(run_config.threads)
    seed_everything(run_config.seed)
    counters: dict[str, Any] = dict(checkpoint["counters"]) if checkpoint is not None else {}
    trainer = build(run_config, counters)
    registry = StateRegistry()
    registry.add(**trainer.tracked())
    if checkpoint is not None:
        registry.restore(checkpoint)
    total = run_config.total_opt_steps(trainer.world_size)
    interrupted = False
    with StopRequested() as stop:
        try:
            for opt_step in range(counters["opt_steps"] + 1, total + 1):
                trainer.window(trainer.train_model.no_sync)
                trainer.stats.reset()
                if opt_step < total and any_rank_stops(stop.requested, trainer.device):
                    interrupted = True
                    break
        finally:
            trainer.env.close()
    result = {"opt_steps": counters["opt_steps"], "env_steps": counters["env_steps"], "interrupted": interrupted}
    return result, trainer


def run_worker(
    rank: int,
    world_size: int,
    config_dict: dict[str, Any],
    init_method: str,
    local_rank: int | None = None,
    given: list[str] | None = None,
    on_result: Any = None,
) -> dict[str, Any]:
    """Train on one rank (called by torchrun's ``main`` or by ``torch.multiprocessing``).

    ``config_dict`` is the config as given (``resume`` may be set); ``given`` the fields
    the user set (``None``: every non-default field, as in the Python API);
    ``on_result(result)``, if given, runs once every rank has finished, before the
    process group is torn down.
    """
    import torch.distributed as dist

    from pglab.configs.a2c import A2CTrainConfig
    from pglab.errors import ConfigError
    from pglab.run.config import config_from_dict

    config = config_from_dict(A2CTrainConfig, config_dict)
    if config.algo != "a2c":
        raise ConfigError("algo", config.algo, "distributed training supports --algo a2c only")
    spec = distributed_spec(world_size)
    given_fields = frozenset(given) if given is not None else None
    local_rank = rank if local_rank is None else local_rank
    dist.init_process_group(
        "nccl" if _device_for(local_rank, config.device).type == "cuda" else "gloo",
        init_method=init_method,
        rank=rank,
        world_size=world_size,
    )
    try:
        build = _trainer_builder(rank, world_size, local_rank)
        if rank == 0:
            result, trainer = _train_rank0(spec, config, given_fields, build, world_size)
        else:
            result, trainer = _train_other_rank(spec, config, given_fields, build)
        result["params"] = [p.detach().cpu().clone() for p in trainer.model.parameters()]
        # A clean gloo shutdown: no rank tears its pairs down while another is still using them
        # (rank 0 writes the final checkpoint after its last all-reduce), and the DDP reducer,
        # which holds gloo work objects, is freed before the group is. Without both, a loaded
        # machine occasionally saw a rank abort at exit ("terminate called without an active
        # exception").
        del trainer
        gc.collect()
        dist.barrier()
        if on_result is not None:
            on_result(result)
        return result
    finally:
        dist.destroy_process_group()


def _spawn_target(
    rank: int, world_size: int, config_dict: dict[str, Any], init_method: str, out_dir: str, given: list[str] | None
) -> None:
    def save(result: dict[str, Any]) -> None:
        torch.save(
            {
                "params": result["params"],
                "env_steps": result["env_steps"],
                "opt_steps": result["opt_steps"],
                "interrupted": result["interrupted"],
            },
            Path(out_dir) / f"rank{rank}.pt",
        )

    run_worker(rank, world_size, config_dict, init_method, given=given, on_result=save)


def spawn_local(
    world_size: int, config_dict: dict[str, Any], init_file: str, out_dir: str, given: list[str] | None = None
) -> None:
    """Run ``world_size`` CPU ranks with gloo through ``torch.multiprocessing`` (tests).

    Each rank writes ``OUT_DIR/rank{r}.pt`` once every rank has finished, before the gloo
    group is torn down. A rank killed by a signal *after* all of them have written (gloo's
    teardown aborted once on a loaded CI machine) is reported as a warning, not an
    error: the training it ran is complete and saved. Any other failure raises.
    """
    import multiprocessing
    import warnings

    import torch.multiprocessing as mp

    outputs = [Path(out_dir) / f"rank{rank}.pt" for rank in range(world_size)]
    for output in outputs:
        output.unlink(missing_ok=True)
    # forkserver forks the ranks from a server process that has imported torch and this
    # module once (spawn imported them afresh in every rank: ~7 s of CPU each)
    start_method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    if start_method == "forkserver":
        multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", __name__])
    try:
        mp.start_processes(
            _spawn_target,
            args=(world_size, config_dict, f"file://{init_file}", out_dir, given),
            nprocs=world_size,
            join=True,
            start_method=start_method,
        )
    except mp.ProcessExitedException as exc:
        if exc.signal_name is None or not all(output.exists() for output in outputs):
            raise
        warnings.warn(
            f"spawn_local: {exc} after every rank had saved its result (gloo teardown)", RuntimeWarning, stacklevel=2
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point under ``torchrun`` (reads RANK, WORLD_SIZE, LOCAL_RANK); returns the exit code."""
    from pglab.configs.a2c import A2CTrainConfig
    from pglab.run.config import config_to_dict, parse_flags

    parsed = parse_flags(
        A2CTrainConfig, sys.argv[1:] if argv is None else argv, prog="torchrun -m pglab.algos.a2c_distributed"
    )
    config = parsed.config
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    result = run_worker(rank, world_size, config_to_dict(config), "env://", local_rank, given=sorted(parsed.given))
    if rank == 0:
        print({k: v for k, v in result.items() if k not in ("params", "last")})
        return int(result["exit_code"])
    return 0


if __name__ == "__main__":  # pragma: no cover - torchrun entry
    from pglab.errors import PglabError

    try:
        raise SystemExit(main())
    except PglabError as exc:
        print(f"pglab: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
