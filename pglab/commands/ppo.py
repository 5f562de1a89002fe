"""``pglab train ppo`` and ``pglab evaluate CHECKPOINT`` for ``ppo`` checkpoints.

Flags are parsed from the torch-free configs in :mod:`pglab.configs.ppo` before anything
imports torch, so ``--help`` (and a flag error) answers at once.
"""

from __future__ import annotations

import json
import sys

from pglab.configs.ppo import PPOConfig, PPOEvaluateConfig  # noqa: F401  (PPOEvaluateConfig: re-exported)
from pglab.errors import EXIT_OK, UsageError
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir, check_output_file


def anneal_lr_as_schedule(argv: list[str]) -> list[str]:
    """The old flags ``--anneal-lr`` / ``--no-anneal-lr`` as ``--lr-schedule linear|constant``
    (so a resume sees ``lr_schedule`` as given and applies or refuses it)."""
    spelled = {
        "--anneal-lr": "linear",
        "--no-anneal-lr": "constant",
        "--anneal_lr": "linear",
        "--no_anneal_lr": "constant",
    }
    out: list[str] = []
    for arg in argv:
        if arg in spelled:
            out += ["--lr-schedule", spelled[arg]]
        else:
            out.append(arg)
    return out


def train(argv: list[str]) -> int:
    """``pglab train ppo [--config FILE.yaml] [--env gym:CartPole-v1] [--algo ppo] ...``

    Returns the run's exit code: 0, or 130 (:data:`pglab.errors.EXIT_INTERRUPTED`) when
    SIGINT/SIGTERM stopped it after saving a checkpoint."""
    parsed = parse_flags(
        PPOConfig,
        anneal_lr_as_schedule(argv),
        prog="pglab train ppo",
        description="PPO / VPG+GAE / REINFORCE on a Gymnasium (gym:ID) or pglab (pglab:NAME) environment.",
    )
    check_new_run_dir(parsed.config)
    from pglab.algos.ppo import train_ppo

    result = train_ppo(parsed.config, given=parsed.given, echo=print)
    return result.exit_code


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [--episodes 10] [--seed N] [--stochastic] [--output F.json]``"""
    if not argv or argv[0].startswith("-"):
        raise UsageError(
            "usage: pglab evaluate CHECKPOINT [--episodes N] [--seed N] [--stochastic] [--output FILE.json]"
        )
    path, flags = argv[0], argv[1:]
    config = parse_flags(PPOEvaluateConfig, flags, prog=f"pglab evaluate {path}").config
    check_output_file("output", config.output)

    import torch

    from pglab.algos.ppo import KIND, agent_from_checkpoint, evaluate_agent
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device

    if config.threads > 0:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    checkpoint = load_checkpoint_file(path, kinds=[KIND], map_location=device)
    agent = agent_from_checkpoint(checkpoint, device=device)
    env_spec = config.env or agent.config.env
    result = evaluate_agent(
        agent, env_spec, episodes=config.episodes, seed=config.seed, deterministic=not config.stochastic, device=device
    )
    report = {
        "checkpoint": checkpoint["path"],
        "env": env_spec,
        "algo": agent.config.algo,
        "env_steps": checkpoint["counters"].get("env_steps"),
        "deterministic": not config.stochastic,
        **result,
    }
    # the summary for people on stderr, so stdout is the JSON report alone (pipe it to jq)
    print(
        f"{env_spec}  {report['episodes']:.0f} episodes  "
        f"return {result['return/mean']:.2f} +- {result['return/std']:.2f} "
        f"(min {result['return/min']:.2f}, max {result['return/max']:.2f})  length {result['length/mean']:.1f}",
        file=sys.stderr,
    )
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        atomic_write_json(config.output, report)
    else:
        json.dump(report, sys.stdout)
        print()
    return EXIT_OK
