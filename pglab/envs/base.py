"""The batched-environment interface shared by pglab's simulators and adapters.

A batched environment steps ``num_envs`` copies at once and resets finished copies
automatically, in the same call (Gymnasium's ``SAME_STEP`` autoreset)::

    obs = env.reset(seed=0)                        # [N, *obs_shape]
    obs, reward, done, trunc, info = env.step(actions)
    # reward float32 [N]; done (terminated) and trunc (truncated) bool [N]
    # where done | trunc, obs is already the first observation of the next episode and
    # info["final_obs"][i] is the last observation of the finished one.

``done`` means the episode ended (nothing to bootstrap); ``trunc`` means it was cut off
(a time limit) and its continuation could be bootstrapped from ``final_obs``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

StepResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


@dataclass(frozen=True)
class ActionSpec:
    """What a batched environment accepts.

    ``kind="discrete"``: integer actions ``[N]`` in ``[0, num_actions)``, of ``dtype``.
    ``kind="continuous"``: float actions ``[N, *shape]`` within ``[low, high]``.
    """

    kind: Literal["discrete", "continuous"]
    num_actions: int | None = None
    shape: tuple[int, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    dtype: torch.dtype = torch.int64


@runtime_checkable
class BatchedEnv(Protocol):
    num_envs: int
    device: torch.device
    observation_shape: tuple[int, ...]
    observation_dtype: torch.dtype
    action_spec: ActionSpec

    def reset(self, seed: int | None = None) -> torch.Tensor: ...

    def step(self, actions: torch.Tensor) -> StepResult: ...

    def close(self) -> None: ...


class EpisodeTracker:
    """Running per-environment return and length, kept on the device (no host sync).

    ``update(reward, done | trunc)`` returns the returns and lengths of the episodes that
    just finished, as full ``[N]`` tensors plus a ``finished`` mask; the trainer reduces
    them (e.g. sums over a logging window) and syncs only when it logs.
    """

    def __init__(self, num_envs: int, device: torch.device | str):
        self.returns = torch.zeros(num_envs, dtype=torch.float32, device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.int64, device=device)

    def update(self, rewards: torch.Tensor, finished: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.returns += rewards.to(self.returns.dtype)
        self.lengths += 1
        episode_returns = torch.where(finished, self.returns, torch.zeros_like(self.returns))
        episode_lengths = torch.where(finished, self.lengths, torch.zeros_like(self.lengths))
        self.returns = torch.where(finished, torch.zeros_like(self.returns), self.returns)
        self.lengths = torch.where(finished, torch.zeros_like(self.lengths), self.lengths)
        return episode_returns, episode_lengths, finished

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"returns": self.returns.clone(), "lengths": self.lengths.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.returns = state["returns"].to(self.returns.device)
        self.lengths = state["lengths"].to(self.lengths.device)
