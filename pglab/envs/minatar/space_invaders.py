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

Aliens and both kinds of bullets live in boolean [10, 10] maps (row, column), as in the package.
The game draws no random numbers (``reset_draws = step_draws = 0``).
"""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor
from pglab.envs.minatar.base import GRID
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


def _wave(device: torch.device) -> torch.Tensor:
    """A fresh block of aliens: rows 0..3, columns 2..7."""
    block = torch.zeros(GRID, GRID, dtype=torch.bool, device=device)
    block[0:4, 2:8] = True
    return block


def _select(keep_new: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``new`` where ``keep_new`` [N] holds, else ``old``, for a field of any rank."""
    return torch.where(keep_new.view(-1, *([1] * (new.dim() - 1))), new, old)


def _at(maps: torch.Tensor, row: int, column: torch.Tensor) -> torch.Tensor:
    """``maps[n, row, column[n]]`` for each copy n."""
    return maps[:, row].gather(1, column[:, None])[:, 0]


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
            shape = (num_envs, GRID, GRID) if is_map else (num_envs,)
            self._start[key] = torch.full(shape, _START.get(key, 0), dtype=dtype, device=self.device)
        self._start["alien_map"][:] = _wave(self.device)
        self._state = {key: value.clone() for key, value in self._start.items()}

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        """Start a new episode in the copies where ``mask`` [N] holds (no draws)."""
        check_tensor("mask", mask, (self.num_envs,), torch.bool, where="SpaceInvaders.reset")
        check_tensor("u", u, (self.num_envs, self.reset_draws), where="SpaceInvaders.reset")
        self._state = {key: _select(mask, self._start[key], old) for key, old in self._state.items()}

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance every copy one step, phase by phase as the package's ``act``."""
        check_tensor("action", action, (self.num_envs,), torch.int64, where="SpaceInvaders.step")
        check_tensor("u", u, (self.num_envs, self.step_draws), where="SpaceInvaders.step")
        s = dict(self._state)
        s["terminal"] = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._act(s, action)
        self._move_bullets(s)
        self._move_aliens(s)
        self._aliens_fire(s)
        kills = s["alien_map"] & s["friendly_bullets"]
        s["alien_map"], s["friendly_bullets"] = s["alien_map"] & ~kills, s["friendly_bullets"] & ~kills
        self._timers_and_wave(s)
        terminal = s.pop("terminal")
        self._state = s
        return kills.flatten(1).sum(1).to(torch.float32), terminal

    @staticmethod
    def _act(s: State, action: torch.Tensor) -> None:
        """Fire (when the gun has cooled down) or move the cannon; actions 'n','l','u','r','d','f'."""
        fire = (action == 5) & (s["shot_timer"] == 0)
        column = torch.arange(GRID, device=action.device)
        bullets = s["friendly_bullets"].clone()
        bullets[:, GRID - 1] |= fire[:, None] & (column[None, :] == s["pos"][:, None])
        s["friendly_bullets"] = bullets
        s["shot_timer"] = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        pos = s["pos"]
        s["pos"] = torch.where(
            action == 1, (pos - 1).clamp(min=0), torch.where(action == 3, (pos + 1).clamp(max=9), pos)
        )

    @staticmethod
    def _move_bullets(s: State) -> None:
        """Friendly bullets rise a row (leaving at the top), enemy bullets fall a row (leaving at the
        bottom); an enemy bullet on the cannon ends the game."""
        rows = torch.zeros_like(s["friendly_bullets"][:, :1])
        s["friendly_bullets"] = torch.cat([s["friendly_bullets"][:, 1:], rows], 1)
        s["enemy_bullets"] = torch.cat([rows, s["enemy_bullets"][:, :-1]], 1)
        s["terminal"] = s["terminal"] | _at(s["enemy_bullets"], GRID - 1, s["pos"])

    @staticmethod
    def _move_aliens(s: State) -> None:
        """Move the block when its timer is up: sideways, or down a row and turn at an edge."""
        aliens, heading = s["alien_map"], s["alien_dir"]
        s["terminal"] = s["terminal"] | _at(aliens, GRID - 1, s["pos"])
        moving = s["alien_move_timer"] == 0
        count = aliens.flatten(1).sum(1)
        s["alien_move_timer"] = torch.where(moving, count.clamp(max=s["move_interval"]), s["alien_move_timer"])
        at_edge = (aliens[:, :, 0].any(1) & (heading < 0)) | (aliens[:, :, GRID - 1].any(1) & (heading > 0))
        turns = moving & at_edge
        s["alien_dir"] = torch.where(turns, -heading, heading)
        landed = turns & aliens[:, GRID - 1].any(1)
        down = aliens.roll(1, 1)
        sideways = torch.where((heading < 0)[:, None, None], aliens.roll(-1, 2), aliens.roll(1, 2))
        aliens = torch.where(turns[:, None, None], down, torch.where(moving[:, None, None], sideways, aliens))
        s["alien_map"] = aliens
        s["terminal"] = s["terminal"] | landed | (moving & _at(aliens, GRID - 1, s["pos"]))

    @staticmethod
    def _aliens_fire(s: State) -> None:
        """When the shot timer is up, the lowest alien of the column nearest the cannon fires."""
        aliens = s["alien_map"]
        fires = s["alien_shot_timer"] == 0
        s["alien_shot_timer"] = torch.where(fires, ENEMY_SHOT_INTERVAL, s["alien_shot_timer"])
        column = torch.arange(GRID, device=aliens.device)
        # The package searches the columns by distance to the cannon, the left one first on a tie.
        rank = (column[None, :] - s["pos"][:, None]).abs() * GRID + column[None, :]
        occupied = aliens.any(1)
        nearest = torch.where(occupied, rank, GRID * GRID).argmin(1)
        in_column = aliens.gather(2, nearest[:, None, None].expand(-1, GRID, 1))[:, :, 0]
        lowest = torch.where(in_column, column[None, :], -1).amax(1)
        fires = fires & occupied.any(1)
        cell = (lowest * GRID + nearest)[:, None]
        shot = torch.zeros_like(aliens.flatten(1)).scatter(1, cell.clamp(min=0), True) & fires[:, None]
        s["enemy_bullets"] = s["enemy_bullets"] | shot.view_as(aliens)

    def _timers_and_wave(self, s: State) -> None:
        """Count the timers down; a cleared wave is replaced (faster with ramping)."""
        s["shot_timer"] = s["shot_timer"] - (s["shot_timer"] > 0).long()
        s["alien_move_timer"] = s["alien_move_timer"] - 1
        s["alien_shot_timer"] = s["alien_shot_timer"] - 1
        cleared = ~s["alien_map"].flatten(1).any(1)
        if self.ramping:
            faster = cleared & (s["move_interval"] > FASTEST_MOVE_INTERVAL)
            s["move_interval"] = s["move_interval"] - faster.long()
            s["ramp_index"] = s["ramp_index"] + faster.long()
        s["alien_map"] = s["alien_map"] | (cleared[:, None, None] & _wave(self.device))

    def observe(self) -> torch.Tensor:
        """Boolean [N, 6, 10, 10] frames, channel first, as the package's ``state()``."""
        s = self._state
        aliens, left = s["alien_map"], (s["alien_dir"] < 0)[:, None, None]
        cannon = torch.zeros_like(aliens)
        cannon[:, GRID - 1] = torch.arange(GRID, device=self.device)[None, :] == s["pos"][:, None]
        planes = [cannon, aliens, aliens & left, aliens & ~left, s["friendly_bullets"], s["enemy_bullets"]]
        return torch.stack(planes, 1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every field of every copy (copies of the tensors)."""
        return {key: value.clone() for key, value in self._state.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the fields saved by :meth:`state_dict`."""
        odd = sorted(set(_FIELDS) ^ set(state))
        if odd:
            raise CheckpointError(f"SpaceInvaders state: field {odd[0]!r} is missing or unknown")
        loaded = {}
        for key, current in self._state.items():
            check_tensor(key, state[key], tuple(current.shape), current.dtype, where="SpaceInvaders.load_state_dict")
            loaded[key] = state[key].to(self.device).clone()
        self._state = loaded
