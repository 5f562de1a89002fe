"""``pglab train a2c`` and ``pglab evaluate A2C_CHECKPOINT``.

    pglab train a2c [--algo a2c|stream-ac] [--env pglab:pixel-goal] [--num-envs 256]
                    [--total-env-steps N] [--update-every 2] [--lr ..] [--resume RUN_DIR]
                    [--self-test] ...            (``--help`` lists every field)
    pglab evaluate CHECKPOINT [--episodes 2000] [--num-envs 256] [--policy trained|random]
                    [--stochastic] [--seed 12345] [--device cpu]

``evaluate`` prints one JSON object (success rate, mean return and length) and writes it
to ``RUN_DIR/evaluation.json`` when the checkpoint lies in a run directory.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import tyro

from pglab.run.config import parse_config
from pglab.validation import check_device, check_int


def train(argv: list[str]) -> int:
    from pglab.algos.a2c import A2CTrainConfig, self_test, train_a2c

    config = parse_config(A2CTrainConfig, argv, prog="pglab train a2c",
                          description="Streaming A2C / TD(0) on batched pixel environments (no rollout buffer).")
    if config.self_test:
        return self_test()
    result = train_a2c(config, echo=print)
    print(json.dumps({k: v for k, v in result.items() if k != "last"} | {"last": result["last"]}, default=str))
    return 0


@dataclasses.dataclass(frozen=True)
class A2CEvalConfig:
    checkpoint: Annotated[Path, tyro.conf.Positional]
    """checkpoint file or run directory"""
    episodes: int = 2000
    """episodes to average over"""
    num_envs: int = 256
    """environments stepped together"""
    policy: Literal["trained", "random"] = "trained"
    """trained: the checkpoint's policy; random: uniform actions (a baseline)"""
    stochastic: bool = False
    """sample actions instead of taking the argmax"""
    seed: int = 12345
    """seed of the evaluation environments (differs from training seeds)"""
    device: str = "cpu"
    """auto | cpu | cuda"""

    def __post_init__(self):
        check_int("episodes", self.episodes, minimum=1)
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)


def evaluate(argv: list[str]) -> int:
    import torch

    from pglab.algos.a2c import KINDS, agent_from_checkpoint, evaluate_policy, run_dir_of
    from pglab.run.atomic import atomic_write_json
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    config = parse_config(A2CEvalConfig, argv, prog="pglab evaluate")
    device = resolve_device(config.device)
    checkpoint = load_checkpoint_file(config.checkpoint, kinds=KINDS, map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    env = agent.make_env(config.num_envs, seed=config.seed, device=device)
    generator = make_generator(config.seed + 1, device)
    num_actions = int(env.action_spec.num_actions)
    if config.policy == "random":
        act = lambda obs: torch.randint(num_actions, (env.num_envs,), generator=generator, device=device, dtype=torch.int32)  # noqa: E731
    elif hasattr(agent.policy, "act_batch"):
        act = lambda obs: agent.policy.act_batch(obs, deterministic=not config.stochastic, generator=generator)  # noqa: E731
    else:
        act = lambda obs: agent.act(obs, deterministic=not config.stochastic, generator=generator)  # noqa: E731
    result = evaluate_policy(act, env, episodes=config.episodes)
    result.update({"policy": config.policy, "deterministic": not config.stochastic, "checkpoint": checkpoint["path"],
                   "opt_steps": agent.counters.get("opt_steps"), "env_steps": agent.counters.get("env_steps"),
                   "env": agent.config.env})
    print(json.dumps(result))
    run_dir = run_dir_of(checkpoint)
    if (run_dir / "config.json").exists():
        atomic_write_json(run_dir / f"evaluation_{config.policy}.json", result)
    sys.stdout.flush()
    return 0
