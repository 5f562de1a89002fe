"""Freeway, batched: the ``minatar`` package's rules over ``N`` copies at once.

The chicken starts at the bottom row (9) of column 4 and moves up or down at most once
every three steps; reaching the top row gives +1, puts it back at the bottom and redraws
the car speeds. Eight cars, one per row 1..8, drive left or right, one cell every 1..5
steps (their speed), wrapping around; a car on the chicken's cell sends it back to the
bottom. The episode ends after 2,500 steps (it terminates at the 2,501st).

Draws: a restart and a step take the same 16 uniforms, used only when cars are
(re)drawn: columns 0..7 the speeds (``randint(1, 6, 8)``), columns 8..15 the directions
(``sign(rand(8) - 0.5)``: below 0.5 to the left, else to the right; the package's speed 0
at exactly 0.5 does not exist here).
"""

from __future__ import annotations

import torch

from pglab.envs.minatar.base import GRID, filled, uniform_below, uniform_int

PLAYER_SPEED = 3
TIME_LIMIT = 2500
CARS = 8
CHICKEN_X = 4
_CELLS = GRID * GRID


class Freeway:
    """``N`` copies of MinAtar Freeway (see :class:`pglab.envs.minatar.base.Game`).

    Car ``i`` drives in row ``i + 1``; ``car_speed`` is the package's signed speed
    ``car[3]`` and ``car_timer`` its countdown ``car[2]``.
    """

    name = "freeway"
    channels: tuple[str, ...] = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_actions: tuple[int, ...] = (0, 2, 4)
    reset_draws = 2 * CARS
    step_draws = 2 * CARS

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs, self.device = num_envs, device
        cars, n = (num_envs, CARS), (num_envs,)
        self.car_x, self.car_timer, self.car_speed = (
            filled(cars, 0, device),
            filled(cars, 0, device),
            filled(cars, 1, device),
        )
        self.pos, self.move_timer, self.terminate_timer = (
            filled(n, GRID - 1, device),
            filled(n, 0, device),
            filled(n, 0, device),
        )
        self._car_rows = torch.arange(1, CARS + 1, device=device)
        self._car_cells = self._car_rows * GRID  # row offsets of the cars within a channel

    def _draw_speeds(self, u: torch.Tensor) -> torch.Tensor:
        speeds = 1 + uniform_int(u[:, :CARS], 5)
        return torch.where(uniform_below(u[:, CARS:], 0.5), -speeds, speeds)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        speeds = self._draw_speeds(u)
        cars = mask[:, None]
        self.car_x = self.car_x.masked_fill(cars, 0)
        self.car_speed = torch.where(cars, speeds, self.car_speed)
        self.car_timer = torch.where(cars, speeds.abs(), self.car_timer)
        self.pos = self.pos.masked_fill(mask, GRID - 1)
        self.move_timer = self.move_timer.masked_fill(mask, PLAYER_SPEED)
        self.terminate_timer = self.terminate_timer.masked_fill(mask, TIME_LIMIT)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ready = self.move_timer == 0
        up, down = ready & (action == 2), ready & (action == 4)
        self.move_timer = torch.where(up | down, PLAYER_SPEED, self.move_timer)
        pos = (self.pos - up.long() + down.long()).clamp_(0, GRID - 1)
        win = pos == 0
        self._redraw_speeds(win, u)
        pos = torch.where(win, GRID - 1, pos)
        self.pos = torch.where(self._move_cars(pos), GRID - 1, pos)
        self.move_timer = self.move_timer - (self.move_timer > 0).long()
        self.terminate_timer = self.terminate_timer - 1
        return win.to(torch.float32), self.terminate_timer < 0

    def _redraw_speeds(self, win: torch.Tensor, u: torch.Tensor) -> None:
        speeds = self._draw_speeds(u)
        self.car_speed = torch.where(win[:, None], speeds, self.car_speed)
        self.car_timer = torch.where(win[:, None], speeds.abs(), self.car_timer)

    def _move_cars(self, pos: torch.Tensor) -> torch.Tensor:
        """Advance the cars; returns whether a car met the chicken (only the car in the
        chicken's row can, before or after its move)."""
        in_row = self._car_rows == pos[:, None]
        moving = self.car_timer == 0
        moved_x = (self.car_x + torch.where(self.car_speed > 0, 1, -1)).remainder_(GRID)
        hit = in_row & ((self.car_x == CHICKEN_X) | (moving & (moved_x == CHICKEN_X)))
        self.car_x = torch.where(moving, moved_x, self.car_x)
        self.car_timer = torch.where(moving, self.car_speed.abs(), self.car_timer - 1)
        return hit.any(dim=1)

    def observe(self) -> torch.Tensor:
        back_x = (self.car_x - torch.where(self.car_speed > 0, 1, -1)).remainder_(GRID)
        cells = torch.cat(
            (
                (self.pos * GRID + CHICKEN_X)[:, None],
                _CELLS + self._car_cells + self.car_x,
                (1 + self.car_speed.abs()) * _CELLS + self._car_cells + back_x,
            ),
            dim=1,
        )
        obs = torch.zeros(self.num_envs, len(self.channels) * _CELLS, dtype=torch.bool, device=self.device)
        obs.scatter_(1, cells, True)
        return obs.view(self.num_envs, len(self.channels), GRID, GRID)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])


_STATE = ("car_x", "car_timer", "car_speed", "pos", "move_timer", "terminate_timer")
