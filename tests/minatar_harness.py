"""Step-for-step comparison of a batched MinAtar game with the ``minatar`` package.

:func:`run_equivalence` steps a :class:`pglab.envs.minatar.base.MinAtarEnv` around a game
and ``N`` package environments side by side, with the same random actions. Each package
environment's ``numpy.random.RandomState`` (the sticky-action draw and the game's own) is
replaced by :class:`ServedUniforms`, which answers every call with the uniforms the
batched environment drew for that copy (a twin generator replays the env's documented
draws), converted as the batched games convert them. Observations, final observations,
rewards, terminations and truncations must agree at every step.

Usage for any game: ``run_equivalence(Breakout, "breakout", num_envs=4, steps=500)``.
A game whose step draws are not consumed in column order (some draws skipped while later
ones happen) names, in ``draw_sites``, the first column of each package function that
draws (e.g. ``{"_spawn_enemy": 0, "_spawn_diver": 3}``); without it the draws of a reset
or a step are served in column order.

Rules that random play rarely reaches (a full wall cleared, late difficulty levels) are
reached with ``start``: a function ``start(packages, env, rng)`` that puts each package
environment and the batched game into the same mid-game state (drawn from the numpy
``RandomState`` ``rng``) right after the first reset.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import minatar
import numpy as np
import torch

from pglab.envs.minatar.base import ACTION_LETTERS, Game, MinAtarEnv, uniform_int


class ServedUniforms:
    """Stands in for ``numpy.random.RandomState`` in one package environment."""

    def __init__(self, draw_sites: Mapping[str, int] | None = None):
        self.draw_sites = draw_sites
        self.sticky: float | None = None
        self.columns = np.zeros(0)
        self._frame: Any = None
        self._next = 0

    def serve(self, sticky: float | None, columns: np.ndarray) -> None:
        """The uniforms of this copy for the next package call (``act`` or ``reset``)."""
        self.sticky, self.columns, self._frame, self._next = sticky, columns, None, 0

    def _take(self, count: int) -> np.ndarray:
        caller = sys._getframe(2)  # the package function that called rand / randint
        if caller.f_globals.get("__name__") == "minatar.environment":
            assert self.sticky is not None and count == 1, "sticky draw outside a step"
            value, self.sticky = self.sticky, None
            return np.array([value])
        if self.draw_sites is not None and caller is not self._frame:
            name = caller.f_code.co_name
            assert name in self.draw_sites, f"the package draws in {name}, which draw_sites does not place"
            self._frame, self._next = caller, self.draw_sites[name]
        start, self._next = self._next, self._next + count
        assert self._next <= len(self.columns), f"the package drew past column {len(self.columns)}"
        return self.columns[start : self._next]

    def rand(self, *size: int) -> Any:
        values = self._take(int(np.prod(size)) if size else 1)
        return values.reshape(size) if size else float(values[0])

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        if high is None:
            low, high = 0, low
        values = self._take(1 if size is None else size)
        drawn = uniform_int(torch.from_numpy(values.astype(np.float32)), high - low).numpy() + low
        return int(drawn[0]) if size is None else drawn


def package_obs(packages: list[Any]) -> torch.Tensor:
    """The package environments' states, channel-first: bool ``[N, C, 10, 10]``."""
    return torch.from_numpy(np.stack([p.state().transpose(2, 0, 1) for p in packages]))


def _expect_equal(what: str, step: int, got: torch.Tensor, expected: torch.Tensor) -> None:
    if torch.equal(got, expected):
        return
    differs = (got != expected).reshape(len(got), -1).any(dim=1).nonzero().flatten().tolist()
    copy = differs[0]
    where = f"step {step}: {what} differs in copies {differs}"
    if got.dim() == 1:
        raise AssertionError(f"{where}: got {got[copy].item()}, expected {expected[copy].item()} in copy {copy}")
    channel = int((got[copy] != expected[copy]).flatten(1).any(dim=1).nonzero()[0])
    raise AssertionError(
        f"{where}; copy {copy} channel {channel}: got\n{got[copy, channel].int()}\nexpected\n"
        f"{expected[copy, channel].int()}"
    )


def _check_static(game: type[Game], env_name: str, package: Any) -> None:
    channels = sorted(package.env.channels, key=package.env.channels.get)
    assert game.name == env_name
    assert game.channels == tuple(channels), (game.channels, channels)
    assert game.minimal_actions == tuple(package.minimal_action_set())
    assert list(package.state_shape()) == [10, 10, len(game.channels)]
    assert len(ACTION_LETTERS) == package.num_actions()


def _reset_packages(packages: list[Any], stand_ins: list[ServedUniforms], mask: np.ndarray, u: np.ndarray) -> None:
    for i in np.flatnonzero(mask):
        stand_ins[i].serve(None, u[i])
        packages[i].reset()


def _act_packages(
    packages: list[Any], stand_ins: list[ServedUniforms], actions: np.ndarray, u: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    rewards, terminals = np.zeros(len(packages), np.float32), np.zeros(len(packages), bool)
    for i, package in enumerate(packages):
        stand_ins[i].serve(float(u[i, 0]), u[i, 1:])
        rewards[i], terminals[i] = package.act(int(actions[i]))
    return torch.from_numpy(rewards), torch.from_numpy(terminals)


def run_equivalence(
    game: type[Game],
    env_name: str,
    *,
    num_envs: int,
    steps: int,
    seed: int = 0,
    sticky_action_prob: float = 0.1,
    full_action_set: bool = True,
    draw_sites: Mapping[str, int] | None = None,
    start: Callable[[list[Any], MinAtarEnv, np.random.RandomState], None] | None = None,
) -> dict[str, Any]:
    """Step both implementations ``steps`` times with random actions; raise
    ``AssertionError`` at the first difference. Returns what the run covered:
    ``episodes`` (finished), ``reward`` (summed) and ``max_ramp`` (the highest
    ``difficulty_ramp()`` seen, ``None`` for a game without ramping)."""
    env = MinAtarEnv(game, num_envs, seed=seed, sticky_action_prob=sticky_action_prob, full_action_set=full_action_set)
    packages = [
        minatar.Environment(env_name, sticky_action_prob=sticky_action_prob, difficulty_ramping=True)
        for _ in range(num_envs)
    ]
    stand_ins = [ServedUniforms(draw_sites) for _ in range(num_envs)]
    for package, stand_in in zip(packages, stand_ins, strict=True):
        package.random = package.env.random = stand_in
    _check_static(game, env_name, packages[0])
    twin = torch.Generator().manual_seed(seed)  # replays the env's draws (MinAtarEnv's docstring)
    action_generator = torch.Generator().manual_seed(seed + 1)
    action_set = np.arange(len(ACTION_LETTERS)) if full_action_set else np.array(game.minimal_actions)
    step_draws, reset_draws = game.step_draws, game.reset_draws
    obs = env.reset()
    u = torch.rand(num_envs, reset_draws, generator=twin).double().numpy()
    _reset_packages(packages, stand_ins, np.ones(num_envs, bool), u)
    _expect_equal("reset observation", 0, obs, package_obs(packages))
    if start is not None:
        start(packages, env, np.random.RandomState(seed))
        obs = env.game.observe()
        _expect_equal("start observation", 0, obs, package_obs(packages))
    stats: dict[str, Any] = {"episodes": 0, "reward": 0.0, "max_ramp": packages[0].env.difficulty_ramp()}
    for step in range(1, steps + 1):
        actions = torch.randint(len(action_set), (num_envs,), generator=action_generator)
        obs, reward, done, trunc, info = env.step(actions)
        u = torch.rand(num_envs, 1 + step_draws + reset_draws, generator=twin).double().numpy()
        expected_reward, expected_done = _act_packages(packages, stand_ins, action_set[actions.numpy()], u)
        _expect_equal("final observation", step, info["final_obs"], package_obs(packages))
        _expect_equal("reward", step, reward, expected_reward)
        _expect_equal("termination", step, done, expected_done)
        _expect_equal("truncation", step, trunc, torch.zeros_like(trunc))
        _reset_packages(packages, stand_ins, expected_done.numpy(), u[:, 1 + step_draws :])
        _expect_equal("observation", step, obs, package_obs(packages))
        stats["episodes"] += int(done.sum())
        stats["reward"] += float(reward.sum())
        if stats["max_ramp"] is not None:
            stats["max_ramp"] = max([stats["max_ramp"], *(p.env.difficulty_ramp() for p in packages)])
    return stats
