"""PixelGoalEnv: a batched, pure-tensor goal-reaching task seen only through pixels.

Each of ``num_envs`` copies holds an agent and a goal on a ``grid_size x grid_size``
board. The observation is a rendered uint8 image stack ``[N, stack_k, H, W]`` with
``H = W = grid_size * cell_px``: goal cells are drawn at intensity 80, the agent at 160,
and the two add up (240) when the agent stands on the goal, so "on the goal" is visible.
Nothing but the pixels tells the policy where the goal is (it is redrawn every episode).

Actions (int32 ``[N]``): 0 = stay, 1 = up, 2 = down, 3 = left, 4 = right. Positions are
kept in pixels (the sprite is a ``cell_px`` square; goals and starts are cell-aligned).
One action is held for ``frames_per_step`` simulator frames and each frame moves the
agent one pixel (clamped at the walls), so the default ``frames_per_step = cell_px``
moves one cell per decision; smaller values give finer, slower control.

Distance and reward (per step, float32 ``[N]``)::

    dist_t   = || agent_t - goal ||_2 / cell_px             (in cells)
    on_goal  = dist_t <= tau;  streak_t = (streak_{t-1} + 1) * on_goal
    success  = streak_t >= k_consecutive                    (-> done)
    r_t      = -step_cost + alpha * (dist_{t-1} - dist_t) + goal_bonus * success

``done`` (terminated) is success; ``trunc`` (truncated) is ``steps == max_steps`` without
success. Finished copies reset in the same call (new agent and goal positions, drawn
from the environment's own generator), and ``info`` holds:

- ``"dist"`` float32 ``[N]``: ``dist_t`` of the step just taken (before any reset);
- ``"success"`` bool ``[N]`` (= done);
- ``"final_obs"`` uint8 ``[N, K, H, W]``: the last observation of a finished episode
  (the current observation where nothing finished), as in :mod:`pglab.envs.base`.

Every operation is batched over environments (no Python loop over copies), so the same
code steps 8,192 copies on a CPU or 16,384+ on a GPU. The full state (positions, streaks,
step counters, frame stack, generator) round-trips through ``state_dict`` so a trainer
can checkpoint and resume bit-identically.
"""

from __future__ import annotations

from typing import Any

import torch

from pglab.configs.a2c import PixelGoalConfig  # re-exported: the config lives torch-free
from pglab.contracts import check_tensor
from pglab.envs.base import ActionSpec, StepResult
from pglab.run.seeding import make_generator
from pglab.validation import check_int

NUM_ACTIONS = 5
GOAL_INTENSITY = 80
AGENT_INTENSITY = 160
# (dy, dx) per action: stay, up, down, left, right.
_MOVES = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))


class PixelGoalEnv:
    """Batched pixel goal-reaching environment (see the module docstring).

    Args:
        num_envs: number of copies ``N``.
        config: a :class:`PixelGoalConfig`.
        device: where all state lives.
        seed: seed of the environment's private generator.
    """

    defines_success = True  # success = reaching the goal (info["success"], = done)

    def __init__(
        self, num_envs: int, config: PixelGoalConfig | None = None, *, device: torch.device | str = "cpu", seed: int = 0
    ):
        check_int("num_envs", num_envs, minimum=1)
        self.config = config or PixelGoalConfig()
        self.num_envs = num_envs
        self.device = torch.device(device)
        size = self.config.image_size
        self.observation_shape = (self.config.stack_k, size, size)
        self.observation_dtype = torch.uint8
        self.action_spec = ActionSpec(kind="discrete", num_actions=NUM_ACTIONS, dtype=torch.int32)
        self.generator = make_generator(seed, self.device)
        self._moves = torch.tensor(_MOVES, dtype=torch.int64, device=self.device)  # [A, 2]
        self._pixels = torch.arange(size, device=self.device)  # [H], for the broadcast renderer
        self._max_position = size - self.config.cell_px
        n = num_envs
        self.agent = torch.zeros(n, 2, dtype=torch.int64, device=self.device)
        self.goal = torch.zeros(n, 2, dtype=torch.int64, device=self.device)
        self.dist = torch.zeros(n, dtype=torch.float32, device=self.device)
        self.streak = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.steps = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.frames = torch.zeros(n, *self.observation_shape, dtype=torch.uint8, device=self.device)

    # -- rendering -------------------------------------------------------------------
    def render(self, agent: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """uint8 ``[M, H, W]`` images of agents/goals given as top-left pixel positions,
        int64 ``[M, 2]`` (row, col)."""
        return self._sprite(agent) * AGENT_INTENSITY + self._sprite(goal) * GOAL_INTENSITY

    def _sprite(self, position: torch.Tensor) -> torch.Tensor:
        # square masks by broadcasting: rows [M, H, 1] & cols [M, 1, W] -> [M, H, W]
        offset = self._pixels - position.unsqueeze(2)  # [M, 2, H]
        inside = (offset >= 0) & (offset < self.config.cell_px)
        return (inside[:, 0].unsqueeze(2) & inside[:, 1].unsqueeze(1)).to(torch.uint8)

    def _distance(self, agent: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return (agent - goal).to(torch.float32).pow(2).sum(dim=1).sqrt() / self.config.cell_px

    def _draw_positions(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` (agent, goal) pixel positions, uniform over ordered pairs of
        distinct cells."""
        cells = self.config.grid_size**2
        grid, px = self.config.grid_size, self.config.cell_px
        goal_index = torch.randint(cells, (count,), generator=self.generator, device=self.device)
        offset = torch.randint(cells - 1, (count,), generator=self.generator, device=self.device)
        agent_index = (goal_index + 1 + offset) % cells  # never equal to goal_index

        def as_rc(index: torch.Tensor) -> torch.Tensor:  # cell index -> top-left pixel (row, col)
            return torch.stack((index // grid, index % grid), dim=1) * px

        return as_rc(agent_index), as_rc(goal_index)

    # -- BatchedEnv API --------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every copy; returns uint8 ``[N, K, H, W]`` (a view of the env's buffer:
        clone it if you keep it across ``step`` calls)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self.agent, self.goal = self._draw_positions(self.num_envs)
        self.dist = self._distance(self.agent, self.goal)
        self.streak.zero_()
        self.steps.zero_()
        self.frames = self.render(self.agent, self.goal).unsqueeze(1).expand(-1, self.config.stack_k, -1, -1).clone()
        return self.frames

    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every copy by one decision.

        Args:
            actions: int32 ``[N]`` in ``[0, 5)`` on the env's device (no implicit cast).

        Returns:
            ``(obs uint8 [N, K, H, W], reward float32 [N], done bool [N], trunc bool [N], info)``.
        """
        cfg = self.config
        check_tensor("actions", actions, (self.num_envs,), torch.int32, self.device, where="PixelGoalEnv.step")
        # Move: frames_per_step frames of one pixel each, clamped at the walls (clamping
        # after each frame equals clamping once, since every move is axis-aligned).
        delta = self._moves[actions.long()] * cfg.frames_per_step
        agent = (self.agent + delta).clamp_(0, self._max_position)
        dist = self._distance(agent, self.goal)
        on_goal = dist <= cfg.tau
        streak = (self.streak + 1) * on_goal
        steps = self.steps + 1
        done = streak >= cfg.k_consecutive
        trunc = (steps >= cfg.max_steps) & ~done
        # r_t = -step_cost + alpha (dist_{t-1} - dist_t) + goal_bonus * success
        reward = -cfg.step_cost + cfg.alpha * (self.dist - dist) + cfg.goal_bonus * done.to(torch.float32)

        # Frame stack of the step just taken (the last observation if it finished).
        newest = self.render(agent, self.goal).unsqueeze(1)
        final_frames = torch.cat((self.frames[:, 1:], newest), dim=1)

        # Same-step autoreset of finished copies, batched with torch.where.
        finished = done | trunc
        fresh_agent, fresh_goal = self._draw_positions(self.num_envs)
        keep = ~finished.unsqueeze(1)
        self.agent = torch.where(keep, agent, fresh_agent)
        self.goal = torch.where(keep, self.goal, fresh_goal)
        self.dist = torch.where(finished, self._distance(self.agent, self.goal), dist)
        self.streak = torch.where(finished, torch.zeros_like(streak), streak)
        self.steps = torch.where(finished, torch.zeros_like(steps), steps)
        fresh_frames = self.render(self.agent, self.goal).unsqueeze(1).expand(-1, cfg.stack_k, -1, -1)
        self.frames = torch.where(finished.view(-1, 1, 1, 1), fresh_frames, final_frames)
        info: dict[str, Any] = {"dist": dist, "success": done, "final_obs": final_frames}
        return self.frames, reward, done, trunc, info

    def close(self) -> None:
        pass

    # -- checkpointing ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (tensors only)."""
        return {
            "agent": self.agent.clone(),
            "goal": self.goal.clone(),
            "dist": self.dist.clone(),
            "streak": self.streak.clone(),
            "steps": self.steps.clone(),
            "frames": self.frames.clone(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("agent", "goal", "dist", "streak", "steps", "frames"):
            current = getattr(self, name)
            value = state[name]
            if tuple(value.shape) != tuple(current.shape):
                from pglab.errors import CheckpointError

                raise CheckpointError(
                    f"PixelGoalEnv state {name}: shape {tuple(value.shape)} does not match {tuple(current.shape)}"
                )
            setattr(self, name, value.to(self.device))
        self.generator.set_state(state["generator"])


def make_pixel_goal_env(
    num_envs: int, *, device: torch.device | str = "cpu", seed: int = 0, **kwargs: Any
) -> PixelGoalEnv:
    """Registry factory for ``pglab:pixel-goal``; ``kwargs`` are :class:`PixelGoalConfig` fields."""
    from pglab.errors import ConfigError

    known = set(PixelGoalConfig.__dataclass_fields__)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(
            f"env_kwargs.{unknown[0]}",
            kwargs[unknown[0]],
            f"unknown PixelGoalEnv field; known: {', '.join(sorted(known))}",
        )
    return PixelGoalEnv(num_envs, PixelGoalConfig(**kwargs), device=device, seed=seed)
