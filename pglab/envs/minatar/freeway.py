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

from pglab.envs.minatar.base import CELLS, GRID, draw, filled, uniform_below, uniform_int

PLAYER_SPEED = 3
TIME_LIMIT = 2500
CARS = 8
CHICKEN_X = 4
_CHICKEN_MOVES = (0, 0, -1, 0, 1, 0)  # per action n l u r d f
_TOP, _BOTTOM = 0, GRID - 1


class Freeway:
    """``N`` copies of MinAtar Freeway (see :class:`pglab.envs.minatar.base.Game`).

    Car ``i`` drives in row ``i + 1`` in direction ``car_dx`` (+1 right, -1 left),
    one cell every ``car_period`` steps: the package's signed speed ``car[3]`` is
    ``car_dx * car_period``, its countdown ``car[2]`` is ``car_timer``.
    """

    name = "freeway"
    channels: tuple[str, ...] = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_actions: tuple[int, ...] = (0, 2, 4)
    reset_draws = 2 * CARS
    step_draws = 2 * CARS

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs, self.device = num_envs, device
        cars, n = (num_envs, CARS), (num_envs,)
        self.car_x, self.car_timer = filled(cars, 0, device), filled(cars, 0, device)
        self.car_dx, self.car_period = filled(cars, 1, device), filled(cars, 1, device)
        self.pos, self.move_timer = filled(n, _BOTTOM, device), filled(n, 0, device)
        self.terminate_timer = filled(n, 0, device)
        self._moves = torch.tensor(_CHICKEN_MOVES, device=device)
        self._car_base = CELLS + torch.arange(1, CARS + 1, device=device) * GRID  # car i: channel 1, row i + 1
        self._cells = filled((num_envs, 1 + 2 * CARS), 0, device)
        self._shown = filled((num_envs, 1 + 2 * CARS), True, device)

    def _draw_cars(self, redraw: torch.Tensor, u: torch.Tensor) -> None:
        """New speeds for the cars of the copies in ``redraw``: periods from columns 0..7,
        directions from columns 8..15."""
        redraw = redraw[:, None]
        self.car_period = torch.where(redraw, 1 + uniform_int(u[:, :CARS], 5), self.car_period)
        self.car_timer = torch.where(redraw, self.car_period, self.car_timer)
        self.car_dx = torch.where(redraw, 1 - 2 * uniform_below(u[:, CARS:], 0.5).long(), self.car_dx)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        self._draw_cars(mask, u)
        self.car_x = self.car_x.masked_fill(mask[:, None], 0)
        self.pos = self.pos.masked_fill(mask, _BOTTOM)
        self.move_timer = self.move_timer.masked_fill(mask, PLAYER_SPEED)
        self.terminate_timer = self.terminate_timer.masked_fill(mask, TIME_LIMIT)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ready = self.move_timer == 0
        delta = self._moves[action] * ready
        self.move_timer = torch.where(delta != 0, PLAYER_SPEED, self.move_timer)
        pos = (self.pos + delta).clamp_(_TOP, _BOTTOM)
        win = pos == _TOP
        self._draw_cars(win, u)
        pos = pos.masked_fill(win, _BOTTOM)
        self.pos = pos.masked_fill(self._move_cars(pos), _BOTTOM)
        self.move_timer = (self.move_timer - 1).clamp_(min=0)
        self.terminate_timer = self.terminate_timer - 1
        return win.to(torch.float32), self.terminate_timer < 0

    def _move_cars(self, pos: torch.Tensor) -> torch.Tensor:
        """Advance the cars; returns whether a car met the chicken (only the car in the
        chicken's row can, before or after its move)."""
        moving = self.car_timer == 0
        old_x = self.car_x
        self.car_x = (old_x + self.car_dx * moving).remainder_(GRID)
        self.car_timer = torch.where(moving, self.car_period, self.car_timer - 1)
        # The car in the chicken's row 1..8; at the bottom (row 9) the chicken meets none, and
        # the last car's "hit" would put it back where it is.
        lane = (pos - 1).clamp_(max=CARS - 1)[:, None]
        met = (old_x.gather(1, lane) == CHICKEN_X) | (self.car_x.gather(1, lane) == CHICKEN_X)
        return met.squeeze(1)

    def observe(self) -> torch.Tensor:
        cells = self._cells  # [N, 17]: the chicken, the cars, their trails
        torch.add(self.pos * GRID, CHICKEN_X, out=cells[:, 0])
        torch.add(self.car_x, self._car_base, out=cells[:, 1 : 1 + CARS])
        trails = cells[:, 1 + CARS :]  # channel speedK = 1 + K, behind the car
        torch.add((self.car_x - self.car_dx).remainder_(GRID), self.car_period, alpha=CELLS, out=trails)
        trails += self._car_base
        return draw(len(self.channels), cells, self._shown)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])


_STATE = ("car_x", "car_timer", "car_dx", "car_period", "pos", "move_timer", "terminate_timer")
