"""``pglab train a2c`` and ``pglab evaluate A2C_CHECKPOINT``.

    pglab train a2c [--algo a2c|stream-ac] [--env pglab:pixel-goal] [--num-envs N]
                    [--total-env-steps N] [--update-every 2] [--lr ..] [--resume RUN_DIR]
                    [--save-interval 500] [--self-test] ...     (``--help`` lists every field)
    pglab evaluate CHECKPOINT [--episodes 2000] [--num-envs 256] [--policy trained|random]
                    [--stochastic] [--seed 12345] [--device auto] [--output FILE]

``evaluate`` measures the policy (mean return and length; the success rate where the
environment defines success, :mod:`pglab.envs.base`) and, as its reference, a uniformly
random policy on the same episodes' starts; it writes the policy's result to ``--output``, or
to ``RUN_DIR/evaluation_<policy>.json`` when the checkpoint lies in a run directory, and
ends with the summary (``--json``: one JSON document, the result with ``random_policy`` and
``summary`` added).

Only the torch-free configs (:mod:`pglab.configs.a2c`) are imported before the flags are
parsed, so ``--help`` never imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from pglab.configs.a2c import KIND, STREAM_AC_KIND, A2CEvaluateConfig, A2CTrainConfig
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, split_json_flag
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
    as_json, argv = split_json_flag(argv)
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
    kind = trainer_kind(config)
    module_name, function_name = TRAINERS[kind].split(":")
    train_fn = getattr(importlib.import_module(module_name), function_name)
    result = train_fn(config, given=parsed.given, echo=echo_for(as_json))
    if not result["interrupted"]:
        random = random_reference(result["run_dir"], config.device)
        emit(train_summary(result, kind, random), as_json)
    return int(result["exit_code"])


REFERENCE_EPISODES = 16
"""Episodes of the random policy that ``pglab train a2c`` ends with, as its reference (one
per environment; ``pglab evaluate`` measures 2000 by default)."""


NO_RANDOM_POLICY = "no random-policy reference: the action box has an infinite bound"


def random_reference(run_dir: str, device: str) -> dict[str, Any] | None:
    """``pglab evaluate RUN_DIR --policy random --episodes 16 --num-envs 16``'s result (the
    evaluation seed): the uniformly random policy on the run's environment (``None`` in an
    unbounded action box)."""
    from pathlib import Path

    config = A2CEvaluateConfig(
        Path(run_dir), episodes=REFERENCE_EPISODES, num_envs=REFERENCE_EPISODES, policy="random", device=device
    )
    agent, _, device = load_agent(config)
    return run_policy(config, agent, "random", device)


def train_summary(result: dict[str, Any], kind: str, random: dict[str, Any] | None) -> Summary:
    """The training episodes of the last logged window in which some ended (return, success
    rate where the environment defines success; :func:`pglab.algos.a2c_common.latest`)
    beside a uniformly random policy's on a few episodes (:func:`random_reference`; no
    target: no verdict)."""
    last, run_dir = result["last"], result["run_dir"]
    figures = [Figure("mean return of the last training episodes", last.get("return/mean"), ".3f")]
    if "episode/success_rate" in last:
        figures.append(Figure("success rate", _percent(last["episode/success_rate"]), ".1f", "%"))
    return Summary(
        f"pglab train a2c ({kind}): {result['opt_steps']} optimiser steps, {result['env_steps']} transitions",
        figures,
        policy_figures(random, "random policy", f"({REFERENCE_EPISODES} episodes)"),
        notes=[
            "pglab evaluate RUN measures the trained policy and the random one on 2000 episodes",
            *([] if random is not None else [NO_RANDOM_POLICY]),
        ],
        run_dir=run_dir,
        next=evaluate_command(run_dir),
        details={key: value for key, value in result.items() if key != "last"}
        | {"last": last, "random_policy": random},
    )


def policy_figures(values: dict[str, Any] | None, who: str, note: str = "") -> list[Figure]:
    """A policy's mean return and, where the environment defines success, its success rate
    (nothing for ``None``: not measured)."""
    if values is None:
        return []
    shown = [Figure(f"{who} mean return", values["return_mean"], ".3f", note=note)]
    if "success_rate" in values:
        shown.append(Figure(f"{who} success rate", _percent(values["success_rate"]), ".1f", "%"))
    return shown


def _percent(rate: float | None) -> float | None:
    return None if rate is None else 100.0 * rate


def evaluate(argv: list[str]) -> int:
    as_json, argv = split_json_flag(argv)
    config = parse_flags(A2CEvaluateConfig, argv, prog="pglab evaluate").config
    check_output_file("output", config.output)

    import torch

    from pglab.errors import UsageError
    from pglab.run.atomic import atomic_write_json
    from pglab.run.rundir import find_run_dir

    if config.threads:
        torch.set_num_threads(config.threads)
    agent, checkpoint, device = load_agent(config)
    measured = run_policy(config, agent, config.policy, device)
    if measured is None:
        raise UsageError(f"policy: random needs a bounded action box ({agent.config.env} has an infinite bound)")
    result: dict[str, Any] = {
        **measured,
        "policy": config.policy,
        "deterministic": not config.stochastic,
        "checkpoint": checkpoint["path"],
        "opt_steps": agent.counters.get("opt_steps"),
        "env_steps": agent.counters.get("env_steps"),
        "env": agent.config.env,
    }
    random = result if config.policy == "random" else run_policy(config, agent, "random", device)
    run_dir = None
    if config.output is not None:
        atomic_write_json(config.output, result)
    else:
        with contextlib.suppress(UsageError):  # a checkpoint outside a run directory: printed only
            run_dir = find_run_dir(checkpoint["path"])
            atomic_write_json(run_dir / f"evaluation_{config.policy}.json", result)
    emit(evaluate_summary(config, result, random, run_dir), as_json)
    return 0


def load_agent(config: A2CEvaluateConfig) -> tuple[Any, dict[str, Any], Any]:
    """``(agent, checkpoint, device)``: the checkpoint ``config.checkpoint`` names, on
    ``config.device``."""
    from pglab.algos.a2c import KINDS, agent_from_checkpoint
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device

    device = resolve_device(config.device)
    checkpoint = load_checkpoint_file(config.checkpoint, kinds=KINDS, map_location=device)
    return agent_from_checkpoint(checkpoint, device=device), checkpoint, device


def run_policy(config: A2CEvaluateConfig, agent: Any, policy: str, device: Any) -> dict[str, Any] | None:
    """``evaluate_policy`` of the trained policy or of uniform random actions, on environments
    seeded with ``config.seed`` (the same episodes' starts for both); ``None`` for the random
    policy in an action box with an infinite bound (no uniform distribution there)."""
    import math

    import torch

    from pglab.algos.a2c import evaluate_policy
    from pglab.run.seeding import make_generator

    env = agent.make_env(config.num_envs, seed=config.seed, device=device)
    generator = make_generator(config.seed + 1, device)
    spec = env.action_spec
    if policy == "random" and spec.kind != "discrete":
        bounds = [*(spec.low or [math.inf]), *(spec.high or [math.inf])]
        if not all(map(math.isfinite, bounds)):
            return None

    def act(obs: torch.Tensor) -> torch.Tensor:
        if policy == "trained":
            return agent.act(obs, deterministic=not config.stochastic, generator=generator)
        if spec.kind == "discrete":
            return torch.randint(
                spec.num_actions, (env.num_envs,), generator=generator, device=device, dtype=torch.int32
            )
        low, high = (torch.tensor(bound, device=device).reshape(spec.shape) for bound in (spec.low, spec.high))
        uniform = torch.rand((env.num_envs, *spec.shape), generator=generator, device=device)
        return low + (high - low) * uniform  # uniform over the action box

    return evaluate_policy(act, env, episodes=config.episodes, desc=f"evaluate a2c ({policy})")


def evaluate_summary(
    config: A2CEvaluateConfig, result: dict[str, Any], random: dict[str, Any] | None, run_dir: Any
) -> Summary:
    """The policy's mean return and success rate beside a random policy's on the same
    episodes' starts (no target: no verdict)."""
    mode = "stochastic" if config.stochastic else "deterministic"
    return Summary(
        f"pglab evaluate {result['checkpoint']} ({result['env']}, {result['episodes']} episodes, seed {config.seed})",
        policy_figures(result, f"{config.policy} ({mode})" if config.policy == "trained" else "random"),
        policy_figures(random, "random policy"),
        notes=[] if random is not None else [NO_RANDOM_POLICY],
        run_dir=run_dir,
        details={**result, "random_policy": random},
    )
