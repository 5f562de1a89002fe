"""MinAtar Seaquest as one tensor program over N copies, rule for rule the ``minatar`` package's game.

The player steers a two-cell submarine (front and back, so its heading shows) over rows 0..8
and fires bullets forward, one every 5 steps at most. Enemy fish and enemy submarines enter
at the left or right edge of a random row 1..8 and cross it; a struck enemy is removed and
gives +1. Enemy submarines fire a bullet every 11 steps in their own direction. Divers enter
the same way; moving onto one takes it on board (6 at most, shown by a gauge on row 9). The
oxygen gauge (row 9) drains by 1 each step below the surface. Coming up to row 0 with a diver
on board restores the oxygen and lets one diver off; with all 6 on board every diver leaves,
the remaining oxygen pays ``oxygen * 10 // 200`` and the diver count drops to -1 (the
package's rule: after a full load the submarine may surface without divers). Each surfacing
raises the difficulty (ramping): enemies spawn one step sooner (down to every step) and, every
second time, move one step sooner (down to every third step). The episode ends when an enemy,
an enemy bullet or an empty oxygen tank meets the player, or when the player surfaces with no
diver on board. Enemies and divers mark their previous cell on the trail channel.

Entities with a variable count live in fixed slots with an ``alive`` mask, kept in the order of
the package's lists (oldest first: the package appends and removes, never reorders), because
that order decides which enemy a bullet strikes and which diver is taken when several share a
cell. The package walks its lists one entity at a time; here each walk is one tensor program
that ranks the entities sharing a cell in the walk's order. The slots hold every reachable
case: at most 2 friendly bullets (shots at least 5 steps apart, a bullet leaves the board
within 9 steps), at most 2 divers (one every 30 steps, gone within 60 steps), at most 30
enemies (at most one spawn a step, an enemy leaves the board within 30 steps at the fastest
speed). Enemy bullets
never interact with each other, so two boolean maps (moving left, moving right) hold them
exactly.

Draw columns (``step_draws = 5``): an enemy spawn (the package's ``_spawn_enemy``) reads its
direction from column 0 (``rand() < 1/2`` heads right), its kind from column 1 (``rand() < 1/3``
is a submarine) and its row from column 2 (``randint(1, 9)``); a diver spawn (``_spawn_diver``)
reads its direction from column 3 and its row from column 4. A step that spawns nothing leaves
its columns unused. A (re)start draws nothing (``reset_draws = 0``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from pglab.contracts import check_tensor
from pglab.envs.minatar.base import CELLS, GRID, choose, pick, spread, uniform_below, uniform_int
from pglab.errors import CheckpointError

MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
MAX_DIVERS = 6
BULLET_SLOTS = 3  # at most 2 friendly bullets are in play (see the module docstring)
DIVER_SLOTS = 3  # at most 2 divers are in play
ENEMY_SLOTS = 32  # at most 30 fish and submarines together are in play

# Field name -> (slots, dtype); slots 0 is one value per copy, -1 a [10, 10] map (row, column).
# While the game runs, int64 fields are held as int32 and maps as flat [N, 100] (cell row * 10 +
# column); the state dict holds them as listed here.
_FIELDS: dict[str, tuple[int, torch.dtype]] = {
    "oxygen": (0, torch.int64),
    "diver_count": (0, torch.int64),
    "sub_x": (0, torch.int64),
    "sub_y": (0, torch.int64),
    "sub_dx": (0, torch.int64),  # heading: -1 left, +1 right
    "enemy_spawn_speed": (0, torch.int64),
    "enemy_spawn_timer": (0, torch.int64),
    "diver_spawn_timer": (0, torch.int64),
    "move_speed": (0, torch.int64),
    "ramp_index": (0, torch.int64),
    "shot_timer": (0, torch.int64),
    "surface": (0, torch.bool),
    "bullet_x": (BULLET_SLOTS, torch.int64),
    "bullet_y": (BULLET_SLOTS, torch.int64),
    "bullet_dx": (BULLET_SLOTS, torch.int64),
    "bullet_alive": (BULLET_SLOTS, torch.bool),
    "diver_x": (DIVER_SLOTS, torch.int64),
    "diver_y": (DIVER_SLOTS, torch.int64),
    "diver_dx": (DIVER_SLOTS, torch.int64),
    "diver_timer": (DIVER_SLOTS, torch.int64),
    "diver_alive": (DIVER_SLOTS, torch.bool),
    "enemy_x": (ENEMY_SLOTS, torch.int64),
    "enemy_y": (ENEMY_SLOTS, torch.int64),
    "enemy_dx": (ENEMY_SLOTS, torch.int64),
    "enemy_timer": (ENEMY_SLOTS, torch.int64),
    "enemy_shot_timer": (ENEMY_SLOTS, torch.int64),
    "enemy_is_sub": (ENEMY_SLOTS, torch.bool),
    "enemy_alive": (ENEMY_SLOTS, torch.bool),
    "enemy_bullet_left": (-1, torch.bool),
    "enemy_bullet_right": (-1, torch.bool),
}
# The start of an episode (the package's Env.reset); unnamed fields start at zero / False.
_START = {
    "oxygen": MAX_OXYGEN,
    "sub_x": 5,
    "sub_dx": -1,
    "enemy_spawn_speed": INIT_SPAWN_SPEED,
    "enemy_spawn_timer": INIT_SPAWN_SPEED,
    "diver_spawn_timer": DIVER_SPAWN_SPEED,
    "move_speed": INIT_MOVE_INTERVAL,
    "surface": True,
}
# The slot fields of each entity group (bullets, divers, enemies), which move together.
_GROUPS = {
    group: tuple(key for key, (slots, _) in _FIELDS.items() if slots > 0 and key.startswith(f"{group}_"))
    for group in ("bullet", "diver", "enemy")
}
# The fields a restart sets: every per-copy value, the slots' alive masks, the bullet maps.
_RESET = tuple(key for key, (slots, _) in _FIELDS.items() if slots <= 0 or key.endswith("_alive"))

State = dict[str, torch.Tensor]
# The integer dtype of the running game: int32 arithmetic runs 2-4x faster than int64 on CPUs.
INT = torch.int32


def _running(dtype: torch.dtype) -> torch.dtype:
    """The dtype a field of ``dtype`` (in ``_FIELDS``) has while the game runs."""
    return INT if dtype == torch.int64 else dtype


def _on_board(x: torch.Tensor) -> torch.Tensor:
    return (x >= 0) & (x < GRID)


def _ordinal(mask: torch.Tensor) -> torch.Tensor:
    """At each set slot of ``mask`` [..., S]: 1 + the number of set slots before it."""
    return mask.cumsum(-1, dtype=torch.int32)  # int32: several times faster than int64 on CPUs


def _ordinal_from_end(mask: torch.Tensor) -> torch.Tensor:
    """At each set slot of ``mask`` [..., S]: 1 + the number of set slots after it (the total
    less those before it; two flips would copy the tensor twice)."""
    return mask.sum(-1, keepdim=True, dtype=INT) - _ordinal(mask) + 1


def _any(mask: torch.Tensor) -> torch.Tensor:
    """``mask.any(-1)`` for a contiguous ``mask`` [..., S] with S a multiple of 4, as the maximum
    of its bytes read as int32 words: bool ``any`` takes ~300 µs over [4096, 32] on this CPU
    build (one thread), the int32 ``amax`` ~30 µs."""
    return mask.view(torch.int32).amax(-1) > 0


def _any_slot(mask: torch.Tensor) -> torch.Tensor:
    """``mask.any(1)`` for a few slots in dimension 1 (an OR of the slots: ``any`` over a
    dimension that is not the last is the slowest reduction on CPUs)."""
    return functools.reduce(torch.bitwise_or, mask.unbind(1))


def _same_cell(x: torch.Tensor, y: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """[N, S, S]: slots ``i`` and ``j`` are both live and in the same cell."""
    same = (x[:, :, None] == x[:, None, :]) & (y[:, :, None] == y[:, None, :])
    return same & live[:, :, None] & live[:, None, :]


def _cell(x: torch.Tensor, y: torch.Tensor, live: torch.Tensor, absent: int) -> torch.Tensor:
    """Flat cell index (int32) of each live slot, ``absent`` (negative) for the others."""
    return pick(live, y * GRID + x, torch.full_like(x, absent, dtype=torch.int32))


def _in_cells(cells: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[N, B, S]: entity ``s`` (at ``cells`` [N, S]) is in cell ``b`` of ``targets`` [N, B]."""
    return cells[:, None, :] == targets[:, :, None]


def _append(s: State, group: str, put: torch.Tensor, values: dict[str, torch.Tensor | int]) -> None:
    """Add one entity to ``group`` in the copies where ``put`` [N] holds, after the live ones.

    Live slots are a prefix in list order (see :meth:`Seaquest._compact`), so the new entity
    lands at index ``count`` and stays last in the list, as the package's ``list += [...]``.
    """
    alive = s[f"{group}_alive"]
    slot = torch.arange(alive.shape[1], device=alive.device)
    into = put[:, None] & (slot == alive.sum(1, keepdim=True))
    s[f"{group}_alive"] = alive | into
    for key, value in values.items():
        fill = value[:, None] if isinstance(value, torch.Tensor) else value
        old = s[f"{group}_{key}"]
        if old.dtype == torch.bool:  # a bool field is given as a tensor [N], spread to the slots
            assert isinstance(value, torch.Tensor)
            s[f"{group}_{key}"] = choose(into, spread(value, old.shape[1]), old)
        else:
            s[f"{group}_{key}"] = pick(into, fill, old)


def _paint(index: torch.Tensor, mask: torch.Tensor, cells: int) -> torch.Tensor:
    """Boolean [N, cells] with the flat cells ``index`` [N, S] set where ``mask`` holds.

    Masked-out entities go to one extra cell, cut off afterwards. ``scatter_`` from a source
    tensor takes ~2.5x less time than from a scalar value on this CPU build (one thread)."""
    canvas = torch.zeros(index.shape[0], cells + 1, dtype=torch.bool, device=index.device)
    at = pick(mask, index, torch.full_like(index, cells)).long()
    return canvas.scatter_(1, at, torch.ones_like(mask))[:, :cells]


class Seaquest:
    """N copies of MinAtar Seaquest (the protocol of ``pglab.envs.minatar``), all state in tensors."""

    name = "seaquest"
    channels = (
        "sub_front",
        "sub_back",
        "friendly_bullet",
        "trail",
        "enemy_bullet",
        "enemy_fish",
        "enemy_sub",
        "oxygen_guage",
        "diver_guage",
        "diver",
    )
    minimal_actions = (0, 1, 2, 3, 4, 5)
    reset_draws = 0
    step_draws = 5

    def __init__(self, num_envs: int, *, device: torch.device, ramping: bool = True) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.ramping = ramping
        self._start: State = {}
        for key, (slots, dtype) in _FIELDS.items():
            shape = (num_envs,) + ((CELLS,) if slots < 0 else (slots,) if slots else ())
            self._start[key] = torch.full(shape, _START.get(key, 0), dtype=_running(dtype), device=self.device)
        self._state = {key: value.clone() for key, value in self._start.items()}
        slot = torch.arange(BULLET_SLOTS, device=self.device)
        self._newer_bullet = slot[None, :] > slot[:, None]  # [b, c]: bullet c was fired after bullet b
        column = torch.arange(CELLS, device=self.device) % GRID
        # Cells a bullet moving left (right) can reach from the same row: all but the last (first) column.
        self._reached = {
            heading: edge[None, :].expand(num_envs, -1).contiguous()
            for heading, edge in ((-1, column < GRID - 1), (1, column > 0))
        }

    def reset(self, mask: torch.Tensor, u: torch.Tensor) -> None:
        """Start a new episode in the copies where ``mask`` [N] holds (no draws).

        Entity slots are emptied; their other fields are read only while the slot is alive.
        """
        check_tensor("mask", mask, (self.num_envs,), torch.bool, where="Seaquest.reset")
        check_tensor("u", u, (self.num_envs, self.reset_draws), where="Seaquest.reset")
        state = dict(self._state)
        for key in _RESET:
            old, start = state[key], self._start[key]
            if old.dim() == 1:  # one value a copy: `where` costs little over [N]
                state[key] = torch.where(mask, start, old)
            else:  # a bool map or alive mask
                state[key] = choose(spread(mask, old.shape[1]), start, old)
        self._state = state

    def step(self, action: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance every copy one step, phase by phase as the package's ``act``.

        The package moves the submarines, then the enemy bullets, then the fish. Their moves do
        not interact, so all enemies move at once; only the friendly bullets they take are
        settled in the package's order (submarines first).
        """
        check_tensor("action", action, (self.num_envs,), torch.int64, where="Seaquest.step")
        check_tensor("u", u, (self.num_envs, self.step_draws), where="Seaquest.step")
        s = dict(self._state)
        s["terminal"] = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._spawn(s, u)
        self._act(s, action)
        reward = self._friendly_bullets(s)
        self._divers(s)
        subs = s["enemy_alive"] & s["enemy_is_sub"]  # they fire, even those removed in this step
        exposed = self._move_enemies(s)
        reward = reward + self._bullets_strike(s, exposed & s["enemy_is_sub"])
        self._subs_fire(s, subs)
        self._enemy_bullets(s)
        reward = reward + self._bullets_strike(s, exposed & ~s["enemy_is_sub"])
        reward = reward + self._timers_and_surface(s)
        terminal = s.pop("terminal")
        self._compact(s)
        self._state = s
        return reward.to(torch.float32), terminal

    def _spawn(self, s: State, u: torch.Tensor) -> None:
        """Spawn an enemy and a diver where their timers are up, from the step's draw columns."""
        enemy_due = s["enemy_spawn_timer"] == 0
        right, is_sub = uniform_below(u[:, 0], 1 / 2), uniform_below(u[:, 1], 1 / 3)
        row, dx = (1 + uniform_int(u[:, 2], 8)).to(INT), right.to(INT) * 2 - 1
        clash = s["enemy_alive"] & (s["enemy_y"] == row[:, None]) & (s["enemy_dx"] != dx[:, None])
        values: dict[str, torch.Tensor | int] = {
            "x": (GRID - 1) * (~right).to(INT),
            "y": row,
            "dx": dx,
            "timer": s["move_speed"],
            "shot_timer": ENEMY_SHOT_INTERVAL,
            "is_sub": is_sub,
        }
        _append(s, "enemy", enemy_due & ~clash.any(1), values)
        s["enemy_spawn_timer"] = torch.where(enemy_due, s["enemy_spawn_speed"], s["enemy_spawn_timer"])

        diver_due = s["diver_spawn_timer"] == 0
        right, row = uniform_below(u[:, 3], 1 / 2), (1 + uniform_int(u[:, 4], 8)).to(INT)
        values = {"x": (GRID - 1) * (~right).to(INT), "y": row, "dx": right.to(INT) * 2 - 1}
        _append(s, "diver", diver_due, {**values, "timer": DIVER_MOVE_INTERVAL})
        s["diver_spawn_timer"] = torch.where(diver_due, DIVER_SPAWN_SPEED, s["diver_spawn_timer"])

    def _act(self, s: State, action: torch.Tensor) -> None:
        """Fire (when the gun has cooled down) or move the submarine; actions 'n','l','u','r','d','f'."""
        fire = (action == 5) & (s["shot_timer"] == 0)
        _append(s, "bullet", fire, {"x": s["sub_x"], "y": s["sub_y"], "dx": s["sub_dx"]})
        s["shot_timer"] = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        left, up, right, down = (action == 1), (action == 2), (action == 3), (action == 4)
        x, y = s["sub_x"], s["sub_y"]
        s["sub_x"] = torch.where(left, (x - 1).clamp(min=0), torch.where(right, (x + 1).clamp(max=GRID - 1), x))
        s["sub_y"] = torch.where(up, (y - 1).clamp(min=0), torch.where(down, (y + 1).clamp(max=GRID - 2), y))
        s["sub_dx"] = torch.where(left, -1, torch.where(right, 1, s["sub_dx"]))

    def _friendly_bullets(self, s: State) -> torch.Tensor:
        """Move the player's bullets; each strikes an enemy in its new cell.

        The package walks the bullets newest first, each taking the first fish (list order),
        else the first submarine, left in its cell: the k-th bullet of a cell in that walk takes
        the k-th enemy of the cell in that search order.
        """
        live, y = s["bullet_alive"], s["bullet_y"]
        x = pick(live, s["bullet_x"] + s["bullet_dx"], s["bullet_x"])
        inside = live & _on_board(x)
        walked_before = (_same_cell(x, y, inside) & self._newer_bullet).sum(2, keepdim=True, dtype=INT)
        targets, alive, is_sub = _cell(x, y, inside, -2), s["enemy_alive"], s["enemy_is_sub"]
        fish = _in_cells(_cell(s["enemy_x"], s["enemy_y"], alive & ~is_sub, -1), targets)
        subs = _in_cells(_cell(s["enemy_x"], s["enemy_y"], alive & is_sub, -1), targets)
        place = pick(subs, fish.sum(2, keepdim=True, dtype=INT) + _ordinal(subs), _ordinal(fish))
        victim = (fish | subs) & (place == walked_before + 1)
        hit = _any(victim)
        s["bullet_x"], s["bullet_alive"] = x, inside & ~hit
        s["enemy_alive"] = alive & ~_any_slot(victim)
        return hit.sum(1)

    def _divers(self, s: State) -> None:
        """Move the divers; one in the player's cell (before or after moving) boards while there is room.

        The package walks the divers newest first, so a diver boards when the divers after it
        that reach the player, plus those on board, leave room.
        """
        live, x, y, timer = s["diver_alive"], s["diver_x"], s["diver_y"], s["diver_timer"]
        sub_x, sub_y = s["sub_x"][:, None], s["sub_y"][:, None]
        moved = x + s["diver_dx"]
        on_sub = (x == sub_x) & (y == sub_y)
        reaches = live & (on_sub | ((timer == 0) & (moved == sub_x) & (y == sub_y)))
        boards = reaches & (s["diver_count"][:, None] + _ordinal_from_end(reaches) <= MAX_DIVERS)
        stays = live & ~(boards & on_sub)
        moving = stays & (timer == 0)
        s["diver_timer"] = pick(moving, DIVER_MOVE_INTERVAL, timer - stays.to(INT))
        s["diver_x"] = pick(moving, moved, x)
        s["diver_alive"] = live & ~boards & ~(moving & ~_on_board(moved))
        s["diver_count"] = s["diver_count"] + boards.sum(1, dtype=INT)

    def _move_enemies(self, s: State) -> torch.Tensor:
        """Move the fish and submarines; they end the game in the player's cell (before or after
        moving) or leave the board. Returns the enemies that moved to a cell of the board other
        than the player's: a friendly bullet there strikes them."""
        alive, x, y, timer = s["enemy_alive"], s["enemy_x"], s["enemy_y"], s["enemy_timer"]
        sub_x, sub_y = s["sub_x"][:, None], s["sub_y"][:, None]
        caught = _any(alive & (x == sub_x) & (y == sub_y))
        moving = alive & (timer == 0)
        s["enemy_timer"] = pick(moving, s["move_speed"][:, None], timer - alive.to(INT))
        x = pick(moving, x + s["enemy_dx"], x)
        gone = moving & ~_on_board(x)
        rams = moving & ~gone & (x == sub_x) & (y == sub_y)
        s["terminal"] = s["terminal"] | caught | _any(rams)
        s["enemy_x"], s["enemy_alive"] = x, alive & ~gone
        return moving & ~gone & ~rams

    def _bullets_strike(self, s: State, exposed: torch.Tensor) -> torch.Tensor:
        """Settle the friendly bullets in the cells that the ``exposed`` enemies moved to.

        The package walks the enemies newest first and each takes the first bullet (list order)
        left in its cell: the k-th bullet of a cell (list order) takes the k-th newest enemy there.
        """
        live, bullet_x, bullet_y = s["bullet_alive"], s["bullet_x"], s["bullet_y"]
        older_here = (_same_cell(bullet_x, bullet_y, live) & self._newer_bullet.T).sum(2, keepdim=True, dtype=INT)
        here = _in_cells(_cell(s["enemy_x"], s["enemy_y"], exposed, -1), _cell(bullet_x, bullet_y, live, -2))
        victim = here & (_ordinal_from_end(here) == older_here + 1)
        hit = _any(victim)
        s["bullet_alive"] = live & ~hit
        s["enemy_alive"] = s["enemy_alive"] & ~_any_slot(victim)
        return hit.sum(1)

    def _subs_fire(self, s: State, subs: torch.Tensor) -> None:
        """Each submarine of this step (removed ones too) whose shot timer is up fires from its cell."""
        shot = s["enemy_shot_timer"]
        fire = subs & (shot == 0)
        s["enemy_shot_timer"] = pick(fire, ENEMY_SHOT_INTERVAL, shot - subs.to(INT))
        fire = fire & _on_board(s["enemy_x"])  # a shot from off the board leaves it at once
        # One canvas for both maps: cells 0..99 the bullets heading left, 100..199 those heading right.
        cell = s["enemy_y"] * GRID + s["enemy_x"] + CELLS * (s["enemy_dx"] > 0).to(INT)
        new = _paint(cell, fire, 2 * CELLS)
        s["enemy_bullet_left"] = s["enemy_bullet_left"] | new[:, :CELLS]
        s["enemy_bullet_right"] = s["enemy_bullet_right"] | new[:, CELLS:]

    def _enemy_bullets(self, s: State) -> None:
        """Move the enemy bullets one cell; one in the player's cell before or after ends the game."""
        player = (s["sub_y"] * GRID + s["sub_x"]).long()[:, None]
        left, right = s["enemy_bullet_left"], s["enemy_bullet_right"]
        caught = (left | right).gather(1, player)[:, 0]
        # A shift of the flat maps by one cell, less the cells that came from the next row.
        left = F.pad(left[:, 1:], (0, 1)) & self._reached[-1]
        right = F.pad(right[:, :-1], (1, 0)) & self._reached[1]
        caught = caught | (left | right).gather(1, player)[:, 0]
        s["enemy_bullet_left"], s["enemy_bullet_right"] = left, right
        s["terminal"] = s["terminal"] | caught

    def _timers_and_surface(self, s: State) -> torch.Tensor:
        """Count the timers down, drain oxygen below the surface, and surface on row 0."""
        for key in ("enemy_spawn_timer", "diver_spawn_timer", "shot_timer"):
            s[key] = torch.where(s[key] > 0, s[key] - 1, s[key])
        oxygen, count = s["oxygen"], s["diver_count"]
        below = s["sub_y"] > 0
        arriving = ~below & ~s["surface"]
        surfaces = arriving & (count != 0)
        s["terminal"] = s["terminal"] | (oxygen <= 0) | (arriving & (count == 0))
        full = surfaces & (count == MAX_DIVERS)
        reward = torch.where(full, torch.div(oxygen * 10, MAX_OXYGEN, rounding_mode="floor"), 0)
        count = torch.where(full, 0, count)
        s["diver_count"] = torch.where(surfaces, count - 1, count)
        s["oxygen"] = torch.where(below, oxygen - 1, torch.where(surfaces, MAX_OXYGEN, oxygen))
        s["surface"] = torch.where(below, False, s["surface"] | surfaces)
        if self.ramping:
            self._ramp(s, surfaces)
        return reward

    @staticmethod
    def _ramp(s: State, surfaces: torch.Tensor) -> None:
        """Raise the difficulty at a surfacing: spawn sooner, and every second time move sooner."""
        spawn, move, index = s["enemy_spawn_speed"], s["move_speed"], s["ramp_index"]
        ramps = surfaces & ((spawn > 1) | (move > 2))
        s["move_speed"] = torch.where(ramps & (move > 2) & (index % 2 == 1), move - 1, move)
        s["enemy_spawn_speed"] = torch.where(ramps & (spawn > 1), spawn - 1, spawn)
        s["ramp_index"] = torch.where(ramps, index + 1, index)

    @staticmethod
    def _compact(s: State) -> None:
        """Move the live entities of each group to the front, keeping their (list) order."""
        for group, keys in _GROUPS.items():
            order = torch.argsort((~s[f"{group}_alive"]).to(torch.uint8), dim=1, stable=True)
            for key in keys:
                s[key] = s[key].gather(1, order)

    def observe(self) -> torch.Tensor:
        """Boolean [N, 10, 10, 10] frames, channel first, as the package's ``state()``."""
        s, c = self._state, self.channels.index

        def flat(x: torch.Tensor, y: torch.Tensor, channel: torch.Tensor | int) -> torch.Tensor:
            return channel * CELLS + y * GRID + x

        everyone = torch.ones_like(s["surface"])[:, None]
        trail_x = {g: s[f"{g}_x"] - s[f"{g}_dx"] for g in ("enemy", "diver")}
        enemy_channel = pick(s["enemy_is_sub"], c("enemy_sub"), torch.full_like(s["enemy_x"], c("enemy_fish")))
        parts = [
            (flat(s["sub_x"], s["sub_y"], c("sub_front"))[:, None], everyone),
            (flat(s["sub_x"] - s["sub_dx"], s["sub_y"], c("sub_back"))[:, None], everyone),
            (flat(s["bullet_x"], s["bullet_y"], c("friendly_bullet")), s["bullet_alive"]),
            (flat(s["enemy_x"], s["enemy_y"], enemy_channel), s["enemy_alive"]),
            (flat(s["diver_x"], s["diver_y"], c("diver")), s["diver_alive"]),
        ]
        for g in ("enemy", "diver"):
            parts.append((flat(trail_x[g], s[f"{g}_y"], c("trail")), s[f"{g}_alive"] & _on_board(trail_x[g])))
        index = torch.cat([p[0] for p in parts], 1)
        frames = _paint(index, torch.cat([p[1] for p in parts], 1), len(self.channels) * CELLS)
        frames = frames.view(-1, len(self.channels), GRID, GRID)
        bullets = s["enemy_bullet_left"] | s["enemy_bullet_right"]
        frames[:, c("enemy_bullet")] = bullets.view(-1, GRID, GRID)
        column = torch.arange(GRID, device=self.device)
        oxygen_cells = torch.div(s["oxygen"].clamp(min=0) * GRID, MAX_OXYGEN, rounding_mode="floor")
        frames[:, c("oxygen_guage"), GRID - 1] = column[None, :] < oxygen_cells[:, None]
        gauge = (column[None, :] >= GRID - 1 - s["diver_count"][:, None]) & (column[None, :] < GRID - 1)
        frames[:, c("diver_guage"), GRID - 1] = gauge
        return frames

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every field of every copy (copies of the tensors), in the shapes and dtypes of ``_FIELDS``."""
        return {key: value.to(_FIELDS[key][1], copy=True).view(self._shape(key)) for key, value in self._state.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the fields saved by :meth:`state_dict`."""
        odd = sorted(set(_FIELDS) ^ set(state))
        if odd:
            raise CheckpointError(f"Seaquest state: field {odd[0]!r} is missing or unknown")
        loaded = {}
        for key, current in self._state.items():
            check_tensor(key, state[key], self._shape(key), _FIELDS[key][1], where="Seaquest.load_state_dict")
            loaded[key] = state[key].to(self.device).reshape(current.shape).to(current.dtype, copy=True)
        self._state = loaded

    def _shape(self, key: str) -> tuple[int, ...]:
        """The shape of field ``key`` in a state dict."""
        slots = _FIELDS[key][0]
        return (self.num_envs,) + ((GRID, GRID) if slots < 0 else (slots,) if slots else ())
