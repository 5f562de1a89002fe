"""``pglab train ppo`` and ``pglab evaluate CHECKPOINT`` for ``ppo`` checkpoints.

Flags are parsed from the torch-free configs in :mod:`pglab.configs.ppo` before anything
imports torch, so ``--help`` (and a flag error) answers at once.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import Any

from pglab.configs.ppo import PPOConfig, PPOEvaluateConfig  # noqa: F401  (PPOEvaluateConfig: re-exported)
from pglab.errors import EXIT_OK, ConfigError, UsageError
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, run_dir_of, split_json_flag
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


START_FLAGS = ("--zoo", "--zoo-file", "--defaults")
"""Flags that choose where a run's settings start (read before the config's own flags)."""


def split_start_flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Take ``--zoo ENV_ID``, ``--zoo-file PATH`` and ``--defaults NAME`` (or ``--flag=value``,
    ``--zoo_file``) out of ``argv``: ``({"zoo": ..., ...}, the other arguments)``."""
    found: dict[str, str] = {}
    rest: list[str] = []
    iterator = iter(argv)
    for arg in iterator:
        name, eq, value = arg.partition("=")
        flag = name.replace("_", "-")
        if flag not in START_FLAGS:
            rest.append(arg)
            continue
        if not eq:
            value = next(iterator, "")
            if not value or value.startswith("--"):
                raise UsageError(f"{flag[2:].replace('-', '_')}: {flag} needs a value")
        found[flag[2:].replace("-", "_")] = value
    return found, rest


def start_config(start: dict[str, str]) -> tuple[PPOConfig | None, frozenset[str]]:
    """The config a run starts from (``None``: the dataclass's CleanRL defaults) and the
    fields a zoo entry set (dotted, as ``given`` names them): ``--defaults``' set, then the
    ``--zoo`` entry (which implies ``--defaults sb3``)."""
    from pglab.configs.ppo import DEFAULT_SETS
    from pglab.run.config import make_config, unprefixed_fields

    defaults = start.get("defaults", "sb3" if "zoo" in start else "cleanrl")
    if defaults not in DEFAULT_SETS:
        raise ConfigError("defaults", defaults, f"must be one of {', '.join(DEFAULT_SETS)}")
    if "zoo" not in start:
        if "zoo_file" in start:
            raise ConfigError("zoo_file", start["zoo_file"], "reads the entry that --zoo ENV_ID names; give --zoo too")
        return (make_config(PPOConfig, **DEFAULT_SETS[defaults]) if DEFAULT_SETS[defaults] else None), frozenset()
    if defaults != "sb3":
        raise ConfigError("defaults", defaults, "--zoo entries leave SB3's defaults unset: they need --defaults sb3")
    from pglab.configs.zoo import as_zoo_error, zoo_fields

    translation = zoo_fields(start["zoo"], start.get("zoo_file"))
    print(f"zoo: {start['zoo']} from entry {translation.entry!r}", file=sys.stderr)
    try:
        config = make_config(PPOConfig, **{**DEFAULT_SETS["sb3"], **translation.fields})
    except ConfigError as exc:
        raise as_zoo_error(exc, translation) from exc
    dotted = unprefixed_fields(PPOConfig)
    return config, frozenset(dotted.get(name, name) for name in translation.fields)


def one_minibatch_rule(config: PPOConfig, given: frozenset[str]) -> PPOConfig:
    """``--num-minibatches`` given (flag or ``--config``) over a ``minibatch_size`` that a
    default set or zoo entry set: the given one counts; both given is an error."""
    if "update.num_minibatches" not in given or config.update.minibatch_size is None:
        return config
    if "update.minibatch_size" in given:
        raise ConfigError(
            "minibatch_size", config.update.minibatch_size, "give --minibatch-size or --num-minibatches, not both"
        )
    return replace(config, update=replace(config.update, minibatch_size=None))


def train(argv: list[str]) -> int:
    """``pglab train ppo [--zoo ENV_ID [--zoo-file F.yml]] [--defaults cleanrl|sb3]
    [--config FILE.yaml] [--env gym:CartPole-v1] [--algo ppo] ...``

    Returns the run's exit code: 0, or 130 (:data:`pglab.errors.EXIT_INTERRUPTED`) when
    SIGINT/SIGTERM stopped it after saving a checkpoint."""
    as_json, argv = split_json_flag(argv)
    config, given = train_config(argv)
    check_new_run_dir(config)
    from pglab.envs.wrappers import load_wrappers

    load_wrappers(config.env_wrappers)  # an import error is a one-line usage error, before anything is created
    from pglab.algos.ppo import train_ppo

    result = train_ppo(config, given=given, echo=echo_for(as_json))
    if not result.interrupted:
        emit(train_summary(result), as_json)
    return result.exit_code


def returns_figures(evaluation: dict[str, float], who: str) -> list[Figure]:
    """Mean return (± its standard error) of an ``evaluate_agent`` result."""
    sem = evaluation["return/sem"]
    note = f"(± {sem:.2f} s.e., {int(evaluation['episodes'])} episodes)" if not math.isnan(sem) else ""
    return [Figure(f"{who} mean return", evaluation["return/mean"], ".2f", note=note)]


def train_summary(result: Any) -> Summary:
    """The final evaluation (deterministic) beside a random policy on the same episodes, or
    without one (``eval_episodes 0``) the last training episodes' mean return; the title names
    the run's own algorithm and environment (a resume's too)."""
    config = result.config
    title = f"pglab train ppo ({config.algo}, {config.env}): {result.iterations} iterations, {result.env_steps} steps"
    details = {
        "run_dir": str(result.run_dir),
        "iterations": result.iterations,
        "env_steps": result.env_steps,
        "evaluation": result.evaluation,
        "random_policy": result.random_policy,
    }
    if result.evaluation is None:
        return Summary(
            title,
            [Figure("mean return of the last training episodes", result.last_return, ".2f")],
            notes=["no final evaluation (eval_episodes 0): pglab evaluate RUN measures the policy and a random one"],
            run_dir=result.run_dir,
            next=evaluate_command(result.run_dir),
            details=details,
        )
    reference = [] if result.random_policy is None else returns_figures(result.random_policy, "random policy")
    return Summary(
        title,
        returns_figures(result.evaluation, "deterministic policy"),
        reference,
        notes=[] if reference else ["no random reference: the action space is unbounded"],
        run_dir=result.run_dir,
        next=evaluate_command(result.run_dir),
        details=details,
    )


def train_config(argv: list[str]) -> tuple[PPOConfig, frozenset[str]]:
    """The config ``pglab train ppo ARGV`` runs and the fields given (by flags, ``--config``
    or ``--zoo``): ``--defaults``' set < ``--zoo`` entry < ``--config`` file < flags."""
    start, rest = split_start_flags(argv)
    resumed = any(arg == "--resume" or arg.startswith("--resume=") for arg in rest)
    if start and resumed:  # a zoo entry's fields would count as given and change the stored run
        flag = next(iter(start))
        raise ConfigError(
            flag,
            start[flag],
            "chooses where a new run starts; --resume continues with the run's stored settings"
            " (give only the flags to change)",
        )
    base, zoo_given = start_config(start)  # before --help too: the help shows the defaults the run starts from
    parsed = parse_flags(
        PPOConfig,
        anneal_lr_as_schedule(rest),
        prog="pglab train ppo",
        description=DESCRIPTION,
        base=base,
    )
    return one_minibatch_rule(parsed.config, parsed.given), parsed.given | zoo_given


DESCRIPTION = """PPO / VPG+GAE / REINFORCE on a Gymnasium (gym:ID) or pglab (pglab:NAME) environment.

Where the settings start, then what overrides them (later wins):
  --defaults {cleanrl,sb3}  CleanRL's defaults (the defaults below) or Stable-Baselines3's PPO defaults
  --zoo ENV_ID              RL-Zoo's PPO entry for ENV_ID (rl_zoo3's hyperparams/ppo.yml), over --defaults sb3
  --zoo-file PATH           the RL-Zoo hyperparameter file to read the --zoo entry from
  --config FILE.yaml        settings from a YAML file
  the flags below"""


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [--episodes 10] [--seed N] [--stochastic] [--output F.json]``"""
    if not argv or argv[0].startswith("-"):
        raise UsageError(
            "usage: pglab evaluate CHECKPOINT [--episodes N] [--seed N] [--stochastic] [--output FILE.json]"
        )
    as_json, argv = split_json_flag(argv)
    path, flags = argv[0], argv[1:]
    config = parse_flags(PPOEvaluateConfig, flags, prog=f"pglab evaluate {path}").config
    check_output_file("output", config.output)

    import torch

    from pglab.algos.ppo import KIND, agent_from_checkpoint, describe_returns, evaluate_agent, random_reference
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
    random = random_reference(agent, env_spec, episodes=config.episodes, seed=config.seed, device=device)
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        atomic_write_json(config.output, report)
    mode = "stochastic" if config.stochastic else "deterministic"
    summary = Summary(
        f"pglab evaluate {checkpoint['path']} ({env_spec}, {config.episodes} episodes, seed {config.seed})",
        returns_figures(result, f"{mode} policy"),
        [] if random is None else returns_figures(random, "random policy"),
        notes=[f"{describe_returns(result)}, length {result['length/mean']:.1f}"]
        + ([] if random is not None else ["no random reference: the action space is unbounded"]),
        run_dir=run_dir_of(checkpoint["path"]),
        details={**report, "random_policy": random},
    )
    emit(summary, as_json)
    return EXIT_OK
