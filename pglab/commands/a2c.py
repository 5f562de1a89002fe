"""``pglab train a2c`` and ``pglab evaluate A2C_CHECKPOINT``.

    pglab train a2c [--algo a2c|stream-ac] [--env pglab:pixel-goal] [--num-envs N]
                    [--total-env-steps N] [--update-every 2] [--lr ..] [--resume RUN_DIR]
                    [--save-interval 500] [--self-test] ...     (``--help`` lists every field)
    pglab evaluate CHECKPOINT [--episodes 2000] [--num-envs 256] [--policy trained|random]
                    [--stochastic] [--seed 12345] [--device auto] [--output FILE]

``evaluate`` prints one JSON object (mean return and length; the success rate where the
environment defines success, :mod:`pglab.envs.base`) and writes it
to ``--output``, or to ``RUN_DIR/evaluation_<policy>.json`` when the checkpoint lies in a
run directory.

Only the torch-free configs (:mod:`pglab.configs.a2c`) are imported before the flags are
parsed, so ``--help`` never imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from typing import Any

from pglab.configs.a2c import KIND, STREAM_AC_KIND, A2CEvaluateConfig, A2CTrainConfig
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir, check_output_file

# The one place that chooses the trainer: checkpoint kind -> "module:function".
TRAINERS: dict[str, str] = {
    KIND: "pglab.algos.a2c:train_a2c",
    STREAM_AC_KIND: "pglab.algos.stream_ac:train_stream_ac",
}


def trainer_kind(config: A2CTrainConfig) -> str:
    """The kind of run ``config`` trains: its ``--algo``, or on ``--resume`` the stored run's
    kind (so ``--resume`` alone continues either algorithm)."""
    if config.resume is None:
        return config.kind
    from pglab.run.rundir import find_run_dir, read_run_config

    stored = read_run_config(find_run_dir(config.resume)).get("kind")
    return stored if stored in TRAINERS else config.kind  # another kind: the shell says so


def train(argv: list[str]) -> int:
    parsed = parse_flags(
        A2CTrainConfig,
        argv,
        prog="pglab train a2c",
        description="Streaming A2C / TD(0) on batched pixel environments (no rollout buffer).",
    )
    config = parsed.config
    check_new_run_dir(config)
    if config.self_test:
        from pglab.algos.a2c import self_test

        return self_test()
    module_name, function_name = TRAINERS[trainer_kind(config)].split(":")
    train_fn = getattr(importlib.import_module(module_name), function_name)
    result = train_fn(config, given=parsed.given, echo=print)
    print(json.dumps({k: v for k, v in result.items() if k != "last"} | {"last": result["last"]}, default=str))
    return int(result["exit_code"])


def evaluate(argv: list[str]) -> int:
    config = parse_flags(A2CEvaluateConfig, argv, prog="pglab evaluate").config
    check_output_file("output", config.output)

    import torch

    from pglab.algos.a2c import KINDS, agent_from_checkpoint, evaluate_policy
    from pglab.errors import UsageError
    from pglab.run.atomic import atomic_write_json
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device
    from pglab.run.rundir import find_run_dir
    from pglab.run.seeding import make_generator

    device = resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    checkpoint = load_checkpoint_file(config.checkpoint, kinds=KINDS, map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    env = agent.make_env(config.num_envs, seed=config.seed, device=device)
    generator = make_generator(config.seed + 1, device)
    spec = env.action_spec

    def act(obs: torch.Tensor) -> torch.Tensor:
        if config.policy == "trained":
            return agent.act(obs, deterministic=not config.stochastic, generator=generator)
        if spec.kind == "discrete":
            return torch.randint(
                spec.num_actions, (env.num_envs,), generator=generator, device=device, dtype=torch.int32
            )
        low, high = (torch.tensor(bound, device=device).reshape(spec.shape) for bound in (spec.low, spec.high))
        uniform = torch.rand((env.num_envs, *spec.shape), generator=generator, device=device)
        return low + (high - low) * uniform  # uniform over the action box

    result: dict[str, Any] = {
        **evaluate_policy(act, env, episodes=config.episodes, desc=f"evaluate a2c ({config.policy})"),
        "policy": config.policy,
        "deterministic": not config.stochastic,
        "checkpoint": checkpoint["path"],
        "opt_steps": agent.counters.get("opt_steps"),
        "env_steps": agent.counters.get("env_steps"),
        "env": agent.config.env,
    }
    print(json.dumps(result))
    if config.output is not None:
        atomic_write_json(config.output, result)
    else:
        with contextlib.suppress(UsageError):  # a checkpoint outside a run directory: printed only
            atomic_write_json(find_run_dir(checkpoint["path"]) / f"evaluation_{config.policy}.json", result)
    sys.stdout.flush()
    return 0
