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

from pglab.envs.minatar.base import CELLS, GRID, draw, filled, uniform_int

# (start x, dx) of the ball per randint(2) outcome: (0, dir 2 = down-right), (9, dir 3 = down-left).
_START_X = (0, 9)
_START_DX = (1, -1)
_BALL_START_Y = 3
_PADDLE_START = 4
_PADDLE_MOVES = (0, -1, 0, 1, 0, 0)  # per action n l u r d f
_FIRST_BRICK_ROW, _BRICK_ROWS = 1, 3
_FULL_WALL = (1 << (_BRICK_ROWS * GRID)) - 1


class Breakout:
    """``N`` copies of MinAtar Breakout (see :class:`pglab.envs.minatar.base.Game`).

    The ball's direction is kept as its ``(dx, dy)`` in ``{-1, 1}^2``; the package's
    directions 0..3 are ``(-1, -1), (1, -1), (1, 1), (-1, 1)``. Bricks only ever lie in
    rows 1..3, so the wall is an int64 bit mask: bit ``10 * (row - 1) + column``.
    """

    name = "breakout"
    channels: tuple[str, ...] = ("paddle", "ball", "trail", "brick")
    minimal_actions: tuple[int, ...] = (0, 1, 3)
    reset_draws = 1
    step_draws = 0

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs, self.device = num_envs, device
        n = (num_envs,)
        self.ball_x, self.ball_y = filled(n, 0, device), filled(n, 0, device)
        self.dx, self.dy = filled(n, 1, device), filled(n, 1, device)
        self.last_x, self.last_y, self.pos = filled(n, 0, device), filled(n, 0, device), filled(n, 0, device)
        self.strike = filled(n, False, device)
        self.bricks = filled(n, 0, device)
        self._start_x = torch.tensor(_START_X, device=device)
        self._start_dx = torch.tensor(_START_DX, device=device)
        self._paddle_moves = torch.tensor(_PADDLE_MOVES, device=device)
        # Row r of the wall is bits 10r..10r+9; its cells are _row_cells[(bricks >> 10r) & 1023].
        self._row_shifts = torch.arange(0, _BRICK_ROWS * GRID, GRID, device=device)
        patterns = torch.arange(1 << GRID, device=device)[:, None]
        self._row_cells = ((patterns >> torch.arange(GRID, device=device)) & 1).bool()
        # Flat offsets of the paddle, ball and trail channels in an observation [C * 100].
        self._channel_offsets = torch.tensor([0, CELLS, 2 * CELLS], device=device)
        self._cells = filled((num_envs, 3), 0, device)
        self._shown = filled((num_envs, 3), True, device)

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        start = uniform_int(u[:, 0], 2)
        self.ball_x = torch.where(mask, self._start_x[start], self.ball_x)
        self.ball_y = self.ball_y.masked_fill(mask, _BALL_START_Y)
        self.dx = torch.where(mask, self._start_dx[start], self.dx)
        self.dy = self.dy.masked_fill(mask, 1)
        self.pos = self.pos.masked_fill(mask, _PADDLE_START)
        self.bricks = self.bricks.masked_fill(mask, _FULL_WALL)
        self.strike = self.strike & ~mask
        self.last_x = torch.where(mask, self.ball_x, self.last_x)
        self.last_y = torch.where(mask, self.ball_y, self.last_y)

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.pos = (self.pos + self._paddle_moves[action]).clamp_(0, GRID - 1)
        self.last_x, self.last_y = self.ball_x, self.ball_y
        new_x, new_y = self.ball_x + self.dx, self.ball_y + self.dy
        off_side = (new_x < 0) | (new_x > GRID - 1)
        new_x = new_x.clamp(0, GRID - 1)
        dx = torch.where(off_side, -self.dx, self.dx)
        # The package's chain: ceiling, else brick, else bottom row.
        ceiling = new_y < 0
        brick_row = new_y - _FIRST_BRICK_ROW
        in_wall = (brick_row >= 0) & (brick_row < _BRICK_ROWS)
        bit = torch.where(in_wall, brick_row * GRID + new_x, 0)
        in_brick = in_wall & ((self.bricks >> bit) & 1).bool()
        breaks = in_brick & ~self.strike
        bricks = self.bricks ^ (breaks.long() << bit)
        bottom = new_y == GRID - 1
        self.bricks = torch.where(bottom & (bricks == 0), _FULL_WALL, bricks)
        straight_back = bottom & (self.ball_x == self.pos)  # the paddle under the ball's column
        corner = bottom & ~straight_back & (new_x == self.pos)  # the paddle where the ball lands
        bounce = breaks | straight_back | corner  # back to the previous row
        self.dy = torch.where(ceiling | bounce, -self.dy, self.dy)
        self.dx = torch.where(corner, -dx, dx)
        self.ball_y = torch.where(bounce, self.last_y, new_y).clamp_(min=0)  # the ceiling: row 0
        self.ball_x = new_x
        self.strike = in_brick
        terminal = bottom & ~straight_back & ~corner
        return breaks.to(torch.float32), terminal

    def observe(self) -> torch.Tensor:
        cells = self._cells  # [N, 3]: the paddle, the ball, the trail
        torch.add(self.pos, (GRID - 1) * GRID, out=cells[:, 0])
        torch.add(self.ball_x, self.ball_y, alpha=GRID, out=cells[:, 1])
        torch.add(self.last_x, self.last_y, alpha=GRID, out=cells[:, 2])
        cells += self._channel_offsets
        obs = draw(len(self.channels), cells, self._shown)
        rows = (self.bricks[:, None] >> self._row_shifts) & ((1 << GRID) - 1)
        wall = self._row_cells.index_select(0, rows.view(-1)).view(self.num_envs, _BRICK_ROWS, GRID)
        obs[:, 3, _FIRST_BRICK_ROW : _FIRST_BRICK_ROW + _BRICK_ROWS] = wall
        return obs

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])


_STATE = ("ball_x", "ball_y", "dx", "dy", "last_x", "last_y", "pos", "strike", "bricks")
