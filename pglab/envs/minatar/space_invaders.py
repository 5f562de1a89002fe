"""MinAtar Space Invaders as one tensor program over N copies, rule for rule the ``minatar`` package's game.

The player moves a cannon along the bottom row and fires bullets upward, one every 5 steps at
most. A block of 4 x 6 aliens marches sideways; when one reaches the edge it is heading to,
the whole block steps down one row and turns. The block moves once every
``min(aliens left, move interval)`` steps, so it speeds up as it thins out. Every 10 steps the
alien nearest the cannon (by column distance, the left one on a tie, the lowest in its column)
drops a bullet that falls one row a step. A struck alien is removed and gives +1. A cleared
wave is replaced by a new block; with ramping each new wave moves one step sooner (the move
interval goes from 12 down to 6). The episode ends when an alien or an alien's bullet reaches
the cannon, or when the block steps down while an alien is on the bottom row. Two channels
show the block's heading (left or right) at every alien.

Aliens and both kinds of bullets live in boolean maps, as in the package: flat ``[N, 100]``
(cell ``row * 10 + column``) while the game runs, so that every move is a roll, a pad or a
bitwise op over the last, contiguous dimension; ``state_dict`` holds them as ``[N, 10, 10]``.
The game draws no random numbers (``reset_draws = step_draws = 0``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pglab.contracts import check_tensor
from pglab.envs.minatar.base import CELLS, GRID, choose, spread
from pglab.errors import CheckpointError

SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
FASTEST_MOVE_INTERVAL = 6

# Field name -> (is a [10, 10] map, dtype).
_FIELDS: dict[str, tuple[bool, torch.dtype]] = {
    "pos": (False, torch.int64),
    "alien_map": (True, torch.bool),
    "friendly_bullets": (True, torch.bool),
    "enemy_bullets": (True, torch.bool),
    "alien_dir": (False, torch.int64),
    "move_interval": (False, torch.int64),
    "alien_move_timer": (False, torch.int64),
    "alien_shot_timer": (False, torch.int64),
    "ramp_index": (False, torch.int64),
    "shot_timer": (False, torch.int64),
}
# The start of an episode (the package's Env.reset); unnamed fields start at zero / False.
_START = {
    "pos": 5,
    "alien_dir": -1,
    "move_interval": ENEMY_MOVE_INTERVAL,
    "alien_move_timer": ENEMY_MOVE_INTERVAL,
    "alien_shot_timer": ENEMY_SHOT_INTERVAL,
}

State = dict[str, torch.Tensor]
BOTTOM = CELLS - GRID  # the first cell of the bottom row


def _wave(device: torch.device) -> torch.Tensor:
    """A fresh block of aliens: rows 0..3, columns 2..7, flat [100]."""
    block = torch.zeros(GRID, GRID, dtype=torch.bool, device=device)
    block[0:4, 2:8] = True
    return block.view(CELLS)


def _fire_scores(device: torch.device) -> torch.Tensor:
    """int32 [10, 100]: for the cannon in column ``p``, the rank of each cell in the package's
    search for the alien that fires, highest first: the nearest column (the left one on a tie),
    the lowest row in it. Every score is positive, and ``score % 10`` is the row and
    ``9 - score // 10 % 10`` the column of the cell."""
    cell = torch.arange(CELLS, device=device)
    row, column = cell.div(GRID, rounding_mode="floor"), cell % GRID
    distance = (column[None, :] - torch.arange(GRID, device=device)[:, None]).abs()
    return (((GRID - distance) * GRID + (GRID - 1 - column)) * GRID + row).to(torch.int32)


def _at(maps: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    """``maps[n, cell[n]]`` for each copy n of the flat maps [N, 100]."""
    return maps.gather(1, cell[:, None])[:, 0]


def _set(maps: torch.Tensor, cell: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``maps`` with ``cell[n]`` set in the copies where ``where`` holds (a gather and a scatter
    of one cell a copy: no [N, 100] mask is built)."""
    keep = maps.gather(1, cell[:, None]) | where[:, None]
    return maps.scatter(1, cell[:, None], keep)


class SpaceInvaders:
    """N copies of MinAtar Space Invaders (the protocol of ``pglab.envs.minatar``), all state in tensors."""

    name = "space_invaders"
    channels = ("cannon", "alien", "alien_left", "alien_right", "friendly_bullet", "enemy_bullet")
    minimal_actions = (0, 1, 3, 5)
    reset_draws = 0
    step_draws = 0

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.ramping = ramping
        self._start: State = {}
        for key, (is_map, dtype) in _FIELDS.items():
            shape = (num_envs, CELLS) if is_map else (num_envs,)
            self._start[key] = torch.full(shape, _START.get(key, 0), dtype=dtype, device=self.device)
        self._start["alien_map"][:] = _wave(self.device)
        self._state = {key: value.clone() for key, value in self._start.items()}
        self._fire_scores = _fire_scores(self.device)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        """Start a new episode in the copies where ``mask`` [N] holds (no draws)."""
        check_tensor("mask", mask, (self.num_envs,), torch.bool, where="SpaceInvaders.reset")
        check_tensor("u", u, (self.num_envs, self.reset_draws), where="SpaceInvaders.reset")
        cells = spread(mask, CELLS)
        self._state = {
            key: choose(cells, self._start[key], old) if _FIELDS[key][0] else torch.where(mask, self._start[key], old)
            for key, old in self._state.items()
        }

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance every copy one step, phase by phase as the package's ``act``."""
        check_tensor("action", action, (self.num_envs,), torch.int64, where="SpaceInvaders.step")
        check_tensor("u", u, (self.num_envs, self.step_draws), where="SpaceInvaders.step")
        s = dict(self._state)
        s["terminal"] = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._act(s, action)
        self._move_bullets(s)
        count = self._move_aliens(s)
        self._aliens_fire(s)
        kills = s["alien_map"] & s["friendly_bullets"]
        s["alien_map"], s["friendly_bullets"] = s["alien_map"] ^ kills, s["friendly_bullets"] ^ kills
        reward = kills.view(torch.uint8).sum(1, dtype=torch.int32)  # a sum over uint8: `bool.sum` converts first
        self._timers_and_wave(s, cleared=reward == count)  # only kills remove aliens
        terminal = s.pop("terminal")
        self._state = s
        return reward.to(torch.float32), terminal

    @staticmethod
    def _act(s: State, action: torch.Tensor) -> None:
        """Fire (when the gun has cooled down) or move the cannon; actions 'n','l','u','r','d','f'."""
        fire = (action == 5) & (s["shot_timer"] == 0)
        s["friendly_bullets"] = _set(s["friendly_bullets"], BOTTOM + s["pos"], fire)
        s["shot_timer"] = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        pos = s["pos"]
        s["pos"] = torch.where(
            action == 1, (pos - 1).clamp(min=0), torch.where(action == 3, (pos + 1).clamp(max=9), pos)
        )

    @staticmethod
    def _move_bullets(s: State) -> None:
        """Friendly bullets rise a row (leaving at the top), enemy bullets fall a row (leaving at the
        bottom); an enemy bullet on the cannon ends the game."""
        s["friendly_bullets"] = F.pad(s["friendly_bullets"][:, GRID:], (0, GRID))
        s["enemy_bullets"] = F.pad(s["enemy_bullets"][:, :BOTTOM], (GRID, 0))
        s["terminal"] = s["terminal"] | _at(s["enemy_bullets"], BOTTOM + s["pos"])

    @staticmethod
    def _move_aliens(s: State) -> torch.Tensor:
        """Move the block when its timer is up: sideways, or down a row and turn at an edge.
        Returns the number of aliens (int32 [N]).

        The block moves as rolls of the flat map: down one row is a roll by 10 cells, as the
        package's roll of the rows (the bottom row wraps to the top); sideways is a roll by one
        cell, which equals the package's roll within each row because the block moves sideways
        only while the column it would wrap around is empty. A flat roll costs ~70 µs over
        [4096, 100] on this CPU build (one thread), a roll of the last of [N, 10, 10] ~470 µs."""
        aliens, heading, cannon = s["alien_map"], s["alien_dir"], BOTTOM + s["pos"]
        s["terminal"] = s["terminal"] | _at(aliens, cannon)
        moving = s["alien_move_timer"] == 0
        count = aliens.view(torch.uint8).sum(1, dtype=torch.int32)
        s["alien_move_timer"] = torch.where(moving, count.clamp(max=s["move_interval"]), s["alien_move_timer"])
        grid = aliens.view(-1, GRID, GRID)
        at_edge = (grid[:, :, 0].any(1) & (heading < 0)) | (grid[:, :, GRID - 1].any(1) & (heading > 0))
        turns = moving & at_edge
        s["alien_dir"] = torch.where(turns, -heading, heading)
        landed = turns & aliens[:, BOTTOM:].any(1)
        sideways = choose(spread(heading < 0, CELLS), aliens.roll(-1, 1), aliens.roll(1, 1))
        moved = choose(spread(turns, CELLS), aliens.roll(GRID, 1), sideways)
        aliens = choose(spread(moving, CELLS), moved, aliens)
        s["alien_map"] = aliens
        s["terminal"] = s["terminal"] | landed | (moving & _at(aliens, cannon))
        return count

    def _aliens_fire(self, s: State) -> None:
        """When the shot timer is up, the lowest alien of the column nearest the cannon fires.

        The alien is the one of highest search score (:func:`_fire_scores`): one ``amax`` over the
        last dimension, where ``any`` over the rows and ``argmax`` take ~800 µs and ~600 µs over
        [4096, 10, 10] on this CPU build (one thread) and an int32 ``amax`` ~80 µs."""
        fires = s["alien_shot_timer"] == 0
        s["alien_shot_timer"] = torch.where(fires, ENEMY_SHOT_INTERVAL, s["alien_shot_timer"])
        scores = s["alien_map"].to(torch.int32) * self._fire_scores.index_select(0, s["pos"])
        best = scores.amax(1)  # 0: no alien left, none fires
        row, column = best % GRID, GRID - 1 - best.div(GRID, rounding_mode="floor") % GRID
        s["enemy_bullets"] = _set(s["enemy_bullets"], (row * GRID + column).long(), fires & (best > 0))

    def _timers_and_wave(self, s: State, cleared: torch.Tensor) -> None:
        """Count the timers down; a ``cleared`` wave is replaced (faster with ramping)."""
        s["shot_timer"] = s["shot_timer"] - (s["shot_timer"] > 0).long()
        s["alien_move_timer"] = s["alien_move_timer"] - 1
        s["alien_shot_timer"] = s["alien_shot_timer"] - 1
        if self.ramping:
            faster = cleared & (s["move_interval"] > FASTEST_MOVE_INTERVAL)
            s["move_interval"] = s["move_interval"] - faster.long()
            s["ramp_index"] = s["ramp_index"] + faster.long()
        s["alien_map"] = s["alien_map"] | (spread(cleared, CELLS) & self._start["alien_map"])

    def observe(self) -> torch.Tensor:
        """Boolean [N, 6, 10, 10] frames, channel first, as the package's ``state()``."""
        s = self._state
        aliens = s["alien_map"]
        left = aliens & spread(s["alien_dir"] < 0, CELLS)
        cannon = torch.zeros_like(aliens).scatter_(1, (BOTTOM + s["pos"])[:, None], True)
        planes = [cannon, aliens, left, aliens ^ left, s["friendly_bullets"], s["enemy_bullets"]]
        return torch.cat(planes, 1).view(-1, len(self.channels), GRID, GRID)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every field of every copy (copies of the tensors); maps as [N, 10, 10]."""
        return {key: value.view(self._shape(key)).clone() for key, value in self._state.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the fields saved by :meth:`state_dict`."""
        odd = sorted(set(_FIELDS) ^ set(state))
        if odd:
            raise CheckpointError(f"SpaceInvaders state: field {odd[0]!r} is missing or unknown")
        loaded = {}
        for key, current in self._state.items():
            shape = self._shape(key)
            check_tensor(key, state[key], shape, current.dtype, where="SpaceInvaders.load_state_dict")
            loaded[key] = state[key].to(self.device).reshape(current.shape).clone()
        self._state = loaded

    def _shape(self, key: str) -> tuple[int, ...]:
        """The shape of field ``key`` in a state dict."""
        return (self.num_envs, GRID, GRID) if _FIELDS[key][0] else (self.num_envs,)
