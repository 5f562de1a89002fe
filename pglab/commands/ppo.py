"""``pglab train ppo`` and ``pglab evaluate CHECKPOINT`` for ``ppo`` checkpoints."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pglab.errors import EXIT_OK, UsageError
from pglab.run.config import parse_config
from pglab.validation import check_device, check_int

EXIT_INTERRUPTED = 130


def train(argv: list[str]) -> int:
    """``pglab train ppo [--config FILE.yaml] [--env gym:CartPole-v1] [--rl-mode ppo] ...``"""
    from pglab.algos.ppo import PPOConfig, train_ppo

    config = parse_config(PPOConfig, argv, prog="pglab train ppo",
                          description="PPO / VPG+GAE / REINFORCE on a Gymnasium (gym:ID) or pglab (pglab:NAME) environment.")
    result = train_ppo(config, echo=lambda *a, **k: print(*a, **k))
    # A stop by SIGINT/SIGTERM saved a checkpoint but did not finish: exit 130 like an
    # interrupted command, so scripts can tell it apart from a completed run.
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


@dataclass(frozen=True)
class PPOEvaluateConfig:
    """Flags of ``pglab evaluate CHECKPOINT`` for a ppo checkpoint."""

    episodes: int = 10
    """episodes to run (one per environment copy)"""
    seed: int = 12_345
    """seed of the evaluation environments (held out from training's seed)"""
    stochastic: bool = False
    """sample actions instead of taking the mode/mean"""
    env: str | None = None
    """evaluate on another environment id with the same spaces (default: the training env)"""
    device: str = "cpu"
    """cpu, cuda, cuda:N or auto"""
    output: Path | None = None
    """also write the results to this JSON file"""

    def __post_init__(self):
        check_int("episodes", self.episodes, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [--episodes 10] [--seed N] [--stochastic] [--output F.json]``"""
    import torch

    from pglab.algos.ppo import KIND, agent_from_checkpoint, evaluate_agent
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device

    if not argv or argv[0].startswith("-"):
        raise UsageError("usage: pglab evaluate CHECKPOINT [--episodes N] [--seed N] [--stochastic] [--output FILE.json]")
    path, flags = argv[0], argv[1:]
    config = parse_config(PPOEvaluateConfig, flags, prog=f"pglab evaluate {path}")
    torch.set_num_threads(1)
    device = resolve_device(config.device)
    checkpoint = load_checkpoint_file(path, kinds=[KIND], map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    env_spec = config.env or agent.config.env
    result = evaluate_agent(agent, env_spec, episodes=config.episodes, seed=config.seed,
                            deterministic=not config.stochastic, device=device)
    report = {"checkpoint": checkpoint["path"], "env": env_spec, "rl_mode": agent.config.rl_mode,
              "env_steps": checkpoint["counters"].get("env_steps"), "deterministic": not config.stochastic, **result}
    print(f"{env_spec}  {report['episodes']:.0f} episodes  return {result['return/mean']:.2f} +- {result['return/std']:.2f} "
          f"(min {result['return/min']:.2f}, max {result['return/max']:.2f})  length {result['length/mean']:.1f}")
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        atomic_write_json(config.output, report)
    else:
        json.dump(report, sys.stdout)
        print()
    return EXIT_OK
