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

Success: an environment whose episodes can succeed (reach a goal) says so with a true
``defines_success`` attribute and reports ``info["success"]`` bool ``[N]`` at every step
(the copies whose episode ended in success); :func:`defines_success` is what trainers
and evaluations ask. Elsewhere (CartPole, Pendulum, MinAtar, Atari) there is no success
and no success rate.

Checkpoints: ``env.state_dict()`` returns the simulation state (tensors, arrays, generator
states) and ``env.load_state_dict(state)`` puts it back into an environment built from
the same config, so that a resumed run continues bit for bit. An environment that cannot
capture its state returns ``None`` (and ``load_state_dict(None)`` leaves it as it is), and
one without the two methods counts as such (:func:`checkpointed`); a trainer resumed from
such a checkpoint starts from freshly reset environments and says so.
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

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


def defines_success(env: Any) -> bool:
    """Whether ``env`` defines success (see the module docstring): its ``defines_success``."""
    return bool(getattr(env, "defines_success", False))


class _CapturesNothing:
    """The checkpointed state of an environment without ``state_dict``: nothing."""

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: None) -> None:
        pass


def checkpointed(env: Any) -> Any:
    """What a trainer registers to checkpoint ``env``: the environment itself, or, for one
    without ``state_dict`` / ``load_state_dict``, a stand-in that captures nothing (so a
    resumed run starts from freshly reset copies, as for any uncaptured state)."""
    if callable(getattr(env, "state_dict", None)) and callable(getattr(env, "load_state_dict", None)):
        return env
    return _CapturesNothing()


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

    def update_rollout(self, rewards: torch.Tensor, finished: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`update` for a whole rollout at once: ``rewards``, ``finished`` ``[N, T]``.

        Returns ``(episode_returns, episode_lengths)`` ``[N, T]``: nonzero only at the
        steps where an episode finished. A handful of tensor ops per rollout instead of
        five per step: the return of an episode ending at ``t`` is a difference of the
        row's cumulative rewards since the previous finish (plus the carried-in partial
        return for the first episode of the rollout), summed in float64.
        """
        num_envs, horizon = rewards.shape
        steps = torch.arange(horizon, device=rewards.device)
        cumulative = torch.cumsum(rewards.double(), dim=1)
        # last[n, t]: the latest step <= t at which env n finished an episode (-1: none)
        last = torch.where(finished, steps, torch.full_like(steps, -1)).cummax(dim=1).values
        previous = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)  # latest finish < t
        carried = previous < 0
        base = torch.where(carried, -self.returns.double()[:, None], cumulative.gather(1, previous.clamp_min(0)))
        episode_returns = torch.where(finished, cumulative - base, torch.zeros_like(cumulative)).to(self.returns.dtype)
        lengths = torch.where(carried, steps + 1 + self.lengths[:, None], steps - previous)
        episode_lengths = torch.where(finished, lengths, torch.zeros_like(lengths))
        # Carry the unfinished tail of every row into the next rollout.
        final_last = last[:, -1]
        ended = final_last >= 0
        tail = cumulative[:, -1] - cumulative.gather(1, final_last.clamp_min(0)[:, None]).squeeze(1)
        self.returns = torch.where(ended, tail, self.returns.double() + cumulative[:, -1]).to(self.returns.dtype)
        self.lengths = torch.where(ended, horizon - 1 - final_last, self.lengths + horizon)
        return episode_returns, episode_lengths

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"returns": self.returns.clone(), "lengths": self.lengths.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.returns = state["returns"].to(self.returns.device)
        self.lengths = state["lengths"].to(self.lengths.device)
