"""MinAtar, batched: the five games of the ``minatar`` package as tensor programs over
``N`` copies, on any device (``make_env("minatar:breakout", N, device=..., seed=...)``).

Games (one module each, the package's rules step for step, difficulty ramping included):

- ``breakout``: bounce the ball off the paddle to break three rows of bricks (+1 each);
  minimal actions no-op, left, right.
- ``freeway``: take the chicken across eight lanes of traffic (+1 per crossing); ends
  after 2,500 steps; minimal actions no-op, up, down.
- ``asterix``: collect gold (+1), avoid enemies; minimal actions no-op and the four moves.
- ``seaquest``: a submarine shoots fish and enemy submarines (+1 each), rescues divers
  and surfaces with them for oxygen; all six actions.
- ``space_invaders``: a cannon shoots a descending wave of aliens (+1 each); minimal
  actions no-op, left, right, fire.

Observations are bool ``[N, C, 10, 10]``, channel-first: channel ``c`` is the package's
``state()[:, :, c]``, in the package's channel order (each game's ``channels``).

Actions are indices into the game's minimal action set (the package's ``MinAtar/*-v1``),
or, with ``full_action_set=True``, the six actions ``n l u r d f`` (``MinAtar/*-v0``).
With probability ``sticky_action_prob`` (default 0.1, as the package) a copy repeats its
previous action instead; the previous action carries over into the next episode, as in
the package, and ``reset()`` starts it at no-op. Episodes end only by the games' own
termination (the package's Gymnasium registration sets no time limit);
``max_episode_steps`` adds a truncation.

Draws: the environment's own ``torch.Generator`` (seeded, saved in ``state_dict``)
draws all randomness as uniforms in ``[0, 1)``, one ``[N, 1 + K + R]`` block per step:
the sticky draw, the game's ``K`` step draws, the ``R`` draws restarting the copies that
finish (see :class:`pglab.envs.minatar.base.MinAtarEnv`). A game uses its columns in a
fixed order, documented in its module, and converts them as the package uses
``numpy.random.RandomState``: ``u < p`` for ``rand() < p``, ``floor(u * n)`` for
``randint(n)``; the tests drive the package with these same uniforms and compare frames,
rewards and terminations step for step.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from pglab.envs.minatar.base import Game, MinAtarEnv
from pglab.errors import ConfigError

# game name -> "module:class"
GAMES: dict[str, str] = {
    "asterix": "pglab.envs.minatar.asterix:Asterix",
    "breakout": "pglab.envs.minatar.breakout:Breakout",
    "freeway": "pglab.envs.minatar.freeway:Freeway",
    "seaquest": "pglab.envs.minatar.seaquest:Seaquest",
    "space_invaders": "pglab.envs.minatar.space_invaders:SpaceInvaders",
}
OPTIONS = ("sticky_action_prob", "ramping", "max_episode_steps", "full_action_set")


def game_class(name: str) -> type[Game]:
    """The game class of ``name`` (one of :data:`GAMES`)."""
    if name not in GAMES:
        raise ConfigError(
            "env", f"minatar:{name}", f"unknown MinAtar game; choose one of minatar:{', minatar:'.join(GAMES)}"
        )
    module_name, class_name = GAMES[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_minatar_env(
    name: str, num_envs: int, *, device: torch.device | str = "cpu", seed: int = 0, **kwargs: Any
) -> MinAtarEnv:
    """Registry factory for ``minatar:NAME``; ``kwargs`` are :class:`MinAtarEnv` options."""
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"env_kwargs.{unknown[0]}", kwargs[unknown[0]], f"unknown MinAtar option; known: {', '.join(OPTIONS)}"
        )
    return MinAtarEnv(game_class(name), num_envs, device=device, seed=seed, **kwargs)


__all__ = ["GAMES", "Game", "MinAtarEnv", "game_class", "make_minatar_env"]
