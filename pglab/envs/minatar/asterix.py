"""Asterix, batched: the ``minatar`` package's rules over ``N`` copies at once.

The player moves in the four directions (rows 1..8). Enemies and gold enter from the
left or right edge of a free row (one of eight slots, row = slot + 1) every
``spawn_speed`` steps and move one cell every ``move_speed`` steps until they leave the
board; touching gold gives +1 (the gold disappears), touching an enemy ends the episode.
With ramping, every 102nd step (while an interval is above 1) the spawn interval
shrinks by one and, every other time, so does the move interval.

Draws: a restart takes none; a step takes three uniforms, used when an entity spawns:
column 0 its side (``rand() < 1/2``: from the left), column 1 its kind (``rand() < 1/3``:
gold), column 2 its slot among the free ones (``randint(free)``, not drawn when none is
free).
"""

from __future__ import annotations

import torch

from pglab.envs.minatar.base import GRID, filled, uniform_below, uniform_int

RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
SLOTS = 8
_START = 5  # the player's start column and row
_CELLS = GRID * GRID
_PLAYER, _ENEMY, _TRAIL, _GOLD = 0, 1, 2, 3


class Asterix:
    """``N`` copies of MinAtar Asterix (see :class:`pglab.envs.minatar.base.Game`).

    Entity slot ``i`` lives in row ``i + 1``: ``present``, its column ``entity_x``, its
    direction ``right`` (the package's ``lr``) and ``gold``.
    """

    name = "asterix"
    channels: tuple[str, ...] = ("player", "enemy", "trail", "gold")
    minimal_actions: tuple[int, ...] = (0, 1, 2, 3, 4)
    reset_draws = 0
    step_draws = 3

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs, self.device, self.ramping = num_envs, device, ramping
        n, slots = (num_envs,), (num_envs, SLOTS)
        self.player_x, self.player_y = filled(n, _START, device), filled(n, _START, device)
        self.present, self.right, self.gold = (filled(slots, False, device) for _ in range(3))
        self.entity_x = filled(slots, 0, device)
        self.spawn_speed, self.spawn_timer = filled(n, INIT_SPAWN_SPEED, device), filled(n, INIT_SPAWN_SPEED, device)
        self.move_speed, self.move_timer = filled(n, INIT_MOVE_INTERVAL, device), filled(n, INIT_MOVE_INTERVAL, device)
        self.ramp_timer, self.ramp_index = filled(n, RAMP_INTERVAL, device), filled(n, 0, device)
        self._slots = torch.arange(SLOTS, device=device)
        self._slot_cells = (self._slots + 1) * GRID  # row offsets of the slots within a channel

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        self.player_x = self.player_x.masked_fill(mask, _START)
        self.player_y = self.player_y.masked_fill(mask, _START)
        self.present = self.present & ~mask[:, None]
        self.spawn_speed = self.spawn_speed.masked_fill(mask, INIT_SPAWN_SPEED)
        self.spawn_timer = self.spawn_timer.masked_fill(mask, INIT_SPAWN_SPEED)
        self.move_speed = self.move_speed.masked_fill(mask, INIT_MOVE_INTERVAL)
        self.move_timer = self.move_timer.masked_fill(mask, INIT_MOVE_INTERVAL)
        self.ramp_timer = self.ramp_timer.masked_fill(mask, RAMP_INTERVAL)
        self.ramp_index = self.ramp_index.masked_fill(mask, 0)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        spawn = self.spawn_timer == 0
        self._spawn(spawn, u)
        self.spawn_timer = torch.where(spawn, self.spawn_speed, self.spawn_timer)
        self.player_x = (self.player_x - (action == 1).long() + (action == 3).long()).clamp_(0, GRID - 1)
        self.player_y = (self.player_y - (action == 2).long() + (action == 4).long()).clamp_(1, SLOTS)
        reward, terminal = self._collide(torch.ones_like(spawn))
        moving = self.move_timer == 0
        self.move_timer = torch.where(moving, self.move_speed, self.move_timer)
        moves = moving[:, None] & self.present
        self.entity_x = torch.where(moves, self.entity_x + torch.where(self.right, 1, -1), self.entity_x)
        self.present = self.present & ~(moves & ((self.entity_x < 0) | (self.entity_x > GRID - 1)))
        moved_reward, moved_terminal = self._collide(moving)
        self.spawn_timer = self.spawn_timer - 1
        self.move_timer = self.move_timer - 1
        if self.ramping:
            self._ramp()
        return (reward + moved_reward).to(torch.float32), terminal | moved_terminal

    def _spawn(self, spawn: torch.Tensor, u: torch.Tensor) -> None:
        """An entity in the ``randint(free)``-th free slot of each copy in ``spawn``."""
        right, gold = uniform_below(u[:, 0], 1 / 2), uniform_below(u[:, 1], 1 / 3)
        free = ~self.present
        count = free.sum(dim=1)
        rank = uniform_int(u[:, 2], count.clamp(min=1))
        slot = (free.cumsum(dim=1) > rank[:, None]).to(torch.uint8).argmax(dim=1)
        placed = (self._slots == slot[:, None]) & (spawn & (count > 0))[:, None]
        self.present = self.present | placed
        self.entity_x = torch.where(placed, torch.where(right, 0, GRID - 1)[:, None], self.entity_x)
        self.right = torch.where(placed, right[:, None], self.right)
        self.gold = torch.where(placed, gold[:, None], self.gold)

    def _collide(self, check: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Entities on the player's cell (in copies ``check``): gold is collected (the
        reward), an enemy ends the episode."""
        met = (
            check[:, None]
            & self.present
            & (self.entity_x == self.player_x[:, None])
            & (self._slots + 1 == self.player_y[:, None])
        )
        collected = met & self.gold
        self.present = self.present & ~collected
        return collected.sum(dim=1), (met & ~self.gold).any(dim=1)

    def _ramp(self) -> None:
        active = (self.spawn_speed > 1) | (self.move_speed > 1)
        waiting = self.ramp_timer >= 0
        bump = active & ~waiting
        self.ramp_timer = torch.where(bump, RAMP_INTERVAL, self.ramp_timer - (active & waiting).long())
        self.move_speed = self.move_speed - (bump & (self.move_speed > 1) & (self.ramp_index % 2 == 1)).long()
        self.spawn_speed = self.spawn_speed - (bump & (self.spawn_speed > 1)).long()
        self.ramp_index = self.ramp_index + bump.long()

    def observe(self) -> torch.Tensor:
        x = self.entity_x.clamp(0, GRID - 1)
        back_x = x - torch.where(self.right, 1, -1)
        trail = self.present & (back_x >= 0) & (back_x <= GRID - 1)
        kind = torch.where(self.gold, _GOLD, _ENEMY)
        cells = torch.cat(
            (
                (self.player_y * GRID + self.player_x)[:, None],
                kind * _CELLS + self._slot_cells + x,
                _TRAIL * _CELLS + self._slot_cells + back_x.clamp(0, GRID - 1),
            ),
            dim=1,
        )
        shown = torch.cat((torch.ones_like(self.present[:, :1]), self.present, trail), dim=1)
        obs = torch.zeros(self.num_envs, len(self.channels) * _CELLS, dtype=torch.bool, device=self.device)
        obs.scatter_(1, cells, shown)
        return obs.view(self.num_envs, len(self.channels), GRID, GRID)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])


_STATE = (
    "player_x",
    "player_y",
    "present",
    "entity_x",
    "right",
    "gold",
    "spawn_speed",
    "spawn_timer",
    "move_speed",
    "move_timer",
    "ramp_timer",
    "ramp_index",
)
