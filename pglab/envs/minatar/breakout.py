"""Breakout, batched: the ``minatar`` package's rules over ``N`` copies at once.

The paddle moves along the bottom row; the ball travels diagonally, reflects off the
walls, the ceiling and bricks (+1 per brick broken, at most one per two consecutive
steps: the package's ``strike`` flag), and bounces off the paddle; the episode ends when
the ball reaches the bottom row past the paddle. When the ball reaches the bottom row and
no brick is left, the three rows of bricks return. Draws: a restart takes one uniform
(``randint(2)``: the ball starts at the left or the right); a step takes none.
"""

from __future__ import annotations

import torch

from pglab.envs.minatar.base import GRID, filled, uniform_int

# (start x, dx) of the ball per randint(2) outcome: (0, dir 2 = down-right), (9, dir 3 = down-left).
_START_X = (0, 9)
_START_DX = (1, -1)
_BALL_START_Y = 3
_PADDLE_START = 4
_BRICK_ROWS = slice(1, 4)


class Breakout:
    """``N`` copies of MinAtar Breakout (see :class:`pglab.envs.minatar.base.Game`).

    The ball's direction is kept as its ``(dx, dy)`` in ``{-1, 1}^2``; the package's
    directions 0..3 are ``(-1, -1), (1, -1), (1, 1), (-1, 1)``.
    """

    name = "breakout"
    channels: tuple[str, ...] = ("paddle", "ball", "trail", "brick")
    minimal_actions: tuple[int, ...] = (0, 1, 3)
    reset_draws = 1
    step_draws = 0

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs, self.device = num_envs, device
        n = (num_envs,)
        self.ball_x, self.ball_y, self.dx, self.dy = (
            filled(n, 0, device),
            filled(n, 0, device),
            filled(n, 1, device),
            filled(n, 1, device),
        )
        self.last_x, self.last_y, self.pos = filled(n, 0, device), filled(n, 0, device), filled(n, 0, device)
        self.strike = filled(n, False, device)
        self.bricks = filled((num_envs, GRID, GRID), False, device)
        self._start_x = torch.tensor(_START_X, device=device)
        self._start_dx = torch.tensor(_START_DX, device=device)
        self._rows = torch.arange(num_envs, device=device)
        self._full_wall = filled((GRID, GRID), False, device)
        self._full_wall[_BRICK_ROWS] = True
        # Flat offsets of the paddle, ball and trail channels in an observation [C * 100].
        self._channel_offsets = torch.tensor([0, GRID * GRID, 2 * GRID * GRID], device=device)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        start = uniform_int(u[:, 0], 2)
        self.ball_x = torch.where(mask, self._start_x[start], self.ball_x)
        self.ball_y = self.ball_y.masked_fill(mask, _BALL_START_Y)
        self.dx = torch.where(mask, self._start_dx[start], self.dx)
        self.dy = self.dy.masked_fill(mask, 1)
        self.pos = self.pos.masked_fill(mask, _PADDLE_START)
        self.bricks = torch.where(mask[:, None, None], self._full_wall, self.bricks)
        self.strike = self.strike & ~mask
        self.last_x = torch.where(mask, self.ball_x, self.last_x)
        self.last_y = torch.where(mask, self.ball_y, self.last_y)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.pos = (self.pos - (action == 1).long() + (action == 3).long()).clamp_(0, GRID - 1)
        self.last_x, self.last_y = self.ball_x, self.ball_y
        new_x, new_y = self.ball_x + self.dx, self.ball_y + self.dy
        off_side = (new_x < 0) | (new_x > GRID - 1)
        new_x = new_x.clamp(0, GRID - 1)
        dx = torch.where(off_side, -self.dx, self.dx)
        # The package's chain: ceiling, else brick, else bottom row.
        ceiling = new_y < 0
        cell = new_y.clamp(0, GRID - 1) * GRID + new_x
        flat_bricks = self.bricks.view(self.num_envs, GRID * GRID)
        in_brick = ~ceiling & flat_bricks.gather(1, cell[:, None]).squeeze(1)
        breaks = in_brick & ~self.strike
        flat_bricks[self._rows, cell] = flat_bricks[self._rows, cell] & ~breaks
        bottom = ~ceiling & ~in_brick & (new_y == GRID - 1)
        refill = bottom & ~flat_bricks.any(dim=1)
        self.bricks = self.bricks | (refill[:, None, None] & self._full_wall)
        straight_back = bottom & (self.ball_x == self.pos)  # the paddle under the ball's column
        corner = bottom & ~straight_back & (new_x == self.pos)  # the paddle where the ball lands
        dy = torch.where(ceiling | breaks | straight_back | corner, -self.dy, self.dy)
        self.dx = torch.where(corner, -dx, dx)
        self.dy = dy
        self.ball_y = torch.where(ceiling, 0, torch.where(breaks | straight_back | corner, self.last_y, new_y))
        self.ball_x = new_x
        self.strike = in_brick
        terminal = bottom & ~straight_back & ~corner
        return breaks.to(torch.float32), terminal

    def observe(self) -> torch.Tensor:
        obs = torch.zeros(self.num_envs, len(self.channels), GRID * GRID, dtype=torch.bool, device=self.device)
        cells = torch.stack(
            (
                (GRID - 1) * GRID + self.pos,
                self.ball_y * GRID + self.ball_x,
                self.last_y * GRID + self.last_x,
            ),
            dim=1,
        )
        obs.view(self.num_envs, -1)[:, : 3 * GRID * GRID].scatter_(1, cells + self._channel_offsets, True)
        obs[:, 3] = self.bricks.view(self.num_envs, GRID * GRID)
        return obs.view(self.num_envs, len(self.channels), GRID, GRID)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])


_STATE = ("ball_x", "ball_y", "dx", "dy", "last_x", "last_y", "pos", "strike", "bricks")
