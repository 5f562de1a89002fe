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

from pglab.envs.minatar.base import CELLS, GRID, draw, filled, uniform_below, uniform_int

RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
SLOTS = 8
_START = 5  # the player's start column and row
_PLAYER_MOVES = ((0, 0), (-1, 0), (0, -1), (1, 0), (0, 1), (0, 0))  # (dx, dy) per action n l u r d f
_PLAYER, _ENEMY, _TRAIL, _GOLD = 0, 1, 2, 3


class Asterix:
    """``N`` copies of MinAtar Asterix (see :class:`pglab.envs.minatar.base.Game`).

    Entity slot ``i`` lives in row ``i + 1``: ``present``, its column ``entity_x``, its
    direction ``entity_dx`` (+1 right: the package's ``lr``; -1 left) and ``gold``.
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
        self.present, self.gold = filled(slots, False, device), filled(slots, False, device)
        self.entity_x, self.entity_dx = filled(slots, 0, device), filled(slots, 1, device)
        self.spawn_speed, self.spawn_timer = filled(n, INIT_SPAWN_SPEED, device), filled(n, INIT_SPAWN_SPEED, device)
        self.move_speed, self.move_timer = filled(n, INIT_MOVE_INTERVAL, device), filled(n, INIT_MOVE_INTERVAL, device)
        self.ramp_timer, self.ramp_index = filled(n, RAMP_INTERVAL, device), filled(n, 0, device)
        self._moves = torch.tensor(_PLAYER_MOVES, device=device)
        self._slots = torch.arange(SLOTS, device=device)
        # _slot_bases[c, i]: the first cell of slot i's row in channel c
        self._slot_bases = torch.arange(len(self.channels), device=device)[:, None] * CELLS + (self._slots + 1) * GRID
        self._cells = filled((num_envs, 1 + 2 * SLOTS), 0, device)
        self._shown = filled((num_envs, 1 + 2 * SLOTS), True, device)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        self.player_x = self.player_x.masked_fill(mask, _START)
        self.player_y = self.player_y.masked_fill(mask, _START)
        self.present = self.present.masked_fill(mask[:, None], False)
        self.spawn_speed = self.spawn_speed.masked_fill(mask, INIT_SPAWN_SPEED)
        self.spawn_timer = self.spawn_timer.masked_fill(mask, INIT_SPAWN_SPEED)
        self.move_speed = self.move_speed.masked_fill(mask, INIT_MOVE_INTERVAL)
        self.move_timer = self.move_timer.masked_fill(mask, INIT_MOVE_INTERVAL)
        self.ramp_timer = self.ramp_timer.masked_fill(mask, RAMP_INTERVAL)
        self.ramp_index = self.ramp_index.masked_fill(mask, 0)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        spawn = self.spawn_timer == 0
        self._spawn(spawn, u)
        self.spawn_timer = torch.where(spawn, self.spawn_speed, self.spawn_timer) - 1
        move = self._moves[action]
        self.player_x = (self.player_x + move[:, 0]).clamp_(0, GRID - 1)
        self.player_y = (self.player_y + move[:, 1]).clamp_(1, SLOTS)
        collected, hit = self._collide()
        moving = self.move_timer == 0
        self.move_timer = torch.where(moving, self.move_speed, self.move_timer) - 1
        moves = moving[:, None] & self.present
        self.entity_x = self.entity_x + self.entity_dx * moves
        self.present = self.present & ~(moves & ((self.entity_x < 0) | (self.entity_x > GRID - 1)))
        # Again after the move (where nothing moved, the gold is gone and the enemy was met).
        collected_after, hit_after = self._collide()
        if self.ramping:
            self._ramp()
        return (collected | collected_after).to(torch.float32), hit | hit_after

    def _spawn(self, spawn: torch.Tensor, u: torch.Tensor) -> None:
        """An entity in the ``randint(free)``-th free slot of each copy in ``spawn``."""
        free = ~self.present
        count = free.sum(dim=1)
        rank = uniform_int(u[:, 2], count.clamp(min=1))
        slot = (free.cumsum(dim=1) > rank[:, None]).to(torch.uint8).argmax(dim=1)
        placed = (self._slots == slot[:, None]) & (spawn & (count > 0))[:, None]
        right = uniform_below(u[:, 0], 1 / 2)[:, None]
        self.present = self.present | placed
        self.entity_x = torch.where(placed, torch.where(right, 0, GRID - 1), self.entity_x)
        self.entity_dx = torch.where(placed, torch.where(right, 1, -1), self.entity_dx)
        self.gold = torch.where(placed, uniform_below(u[:, 1], 1 / 3)[:, None], self.gold)

    def _collide(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The entity in the player's row, if on the player's cell: gold is collected
        (returned first, and removed), an enemy is hit (returned second)."""
        slot = (self.player_y - 1)[:, None]
        met = self.present.gather(1, slot) & (self.entity_x.gather(1, slot) == self.player_x[:, None])
        gold = self.gold.gather(1, slot)
        self.present = self.present.scatter(1, slot, self.present.gather(1, slot) & ~(met & gold))
        return (met & gold).squeeze(1), (met & ~gold).squeeze(1)

    def _ramp(self) -> None:
        active = (self.spawn_speed > 1) | (self.move_speed > 1)
        waiting = self.ramp_timer >= 0
        bump = active & ~waiting
        self.ramp_timer = torch.where(bump, RAMP_INTERVAL, self.ramp_timer - (active & waiting).long())
        self.move_speed = self.move_speed - (bump & (self.move_speed > 1) & (self.ramp_index % 2 == 1)).long()
        self.spawn_speed = self.spawn_speed - (bump & (self.spawn_speed > 1)).long()
        self.ramp_index = self.ramp_index + bump.long()

    def observe(self) -> torch.Tensor:
        cells, shown = self._cells, self._shown  # [N, 17]: the player, the entities, their trails
        x = self.entity_x.clamp(0, GRID - 1)  # an entity that left the board is absent
        back_x = x - self.entity_dx
        trail_x = back_x.clamp(0, GRID - 1)
        torch.add(self.player_x, self.player_y, alpha=GRID, out=cells[:, 0])
        entities = cells[:, 1 : 1 + SLOTS]
        torch.where(self.gold, self._slot_bases[_GOLD], self._slot_bases[_ENEMY], out=entities)
        entities += x
        torch.add(trail_x, self._slot_bases[_TRAIL], out=cells[:, 1 + SLOTS :])
        shown[:, 1 : 1 + SLOTS] = self.present
        torch.logical_and(self.present, trail_x == back_x, out=shown[:, 1 + SLOTS :])
        return draw(len(self.channels), cells, shown)

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
    "entity_dx",
    "gold",
    "spawn_speed",
    "spawn_timer",
    "move_speed",
    "move_timer",
    "ramp_timer",
    "ramp_index",
)
