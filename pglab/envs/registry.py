"""Environment specs: ``gym:ID`` (any Gymnasium id, ALE ids included), ``pglab:NAME``
(a native batched simulator) or ``minatar:GAME`` (a batched MinAtar game), as accepted
by ``--env``."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from pglab.errors import ConfigError

# pglab:NAME -> "module:factory"; each factory takes (num_envs, *, device, seed, **kwargs)
# and returns a pglab.envs.base.BatchedEnv (with state_dict / load_state_dict).
NATIVE_ENVS: dict[str, str] = {
    "pixel-goal": "pglab.envs.pixel_goal:make_pixel_goal_env",
}


def make_env(spec: str, num_envs: int, *, device: torch.device | str = "cpu", seed: int = 0, **kwargs: Any):
    """Build the batched environment named by ``spec`` (``gym:CartPole-v1``,
    ``gym:ALE/Pong-v5``, ``ale:pong``, ``pglab:pixel-goal``, ``minatar:breakout``...)."""
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise ConfigError("env", spec, "must look like 'gym:CartPole-v1' or 'pglab:pixel-goal'")
    if kind == "gym":
        from pglab.envs.gym_adapter import make_gym_env

        return make_gym_env(name, num_envs, device=device, **kwargs)
    if kind == "pglab":
        if name not in NATIVE_ENVS:
            raise ConfigError(
                "env", spec, f"unknown pglab environment; choose one of {', '.join('pglab:' + n for n in NATIVE_ENVS)}"
            )
        module_name, factory = NATIVE_ENVS[name].split(":")
        return getattr(importlib.import_module(module_name), factory)(num_envs, device=device, seed=seed, **kwargs)
    if kind == "ale":  # an Atari game with the standard preprocessing (pglab.envs.atari)
        from pglab.envs.atari import make_atari_env

        return make_atari_env(name, num_envs, device=device, **kwargs)
    if kind == "minatar":  # pglab.envs.minatar: sticky_action_prob, ramping, ... as kwargs
        from pglab.envs.minatar import make_minatar_env

        return make_minatar_env(name, num_envs, device=device, seed=seed, **kwargs)
    raise ConfigError("env", spec, "prefix must be 'gym:', 'ale:' (e.g. 'ale:pong'), 'pglab:' or 'minatar:'")
