"""Running observation and reward normalisation, the way SB3's ``VecNormalize`` does it.

Two pieces, both plain arithmetic (no environment wrapper: the trainer calls them between
``env.step`` and the policy, so the raw rewards stay available for episode statistics):

* :class:`RunningMeanStd` -- mean and (population) variance of a stream of batches,
  merged with the parallel-variance formula of Chan et al. (SB3's ``RunningMeanStd``):

      delta = mean_b - mean,  n' = n + n_b
      mean' = mean + delta * n_b / n'
      var'  = (var * n + var_b * n_b + delta^2 * n * n_b / n') / n'

  It starts from ``mean = 0, var = 1, count = 1e-4`` (SB3's ``epsilon``), so the first
  batch dominates and the variance is never 0/0.
* :class:`ObsRewardNormalizer` -- ``VecNormalize``'s step logic:

      obs_norm  = clip((obs - mean_obs) / sqrt(var_obs + eps), -clip_obs, clip_obs)
      R_t       = gamma * R_{t-1} + r_t      (per env copy; R = 0 after an episode end)
      r_norm    = clip(r_t / sqrt(var_R + eps), -clip_reward, clip_reward)

  The reward is divided by the standard deviation of the *discounted return* ``R`` (not
  of the reward) and is not centred. While ``training`` the statistics are updated with
  every step's raw observations (before normalising them) and returns; the evaluation
  side (:meth:`ObsRewardNormalizer.normalize_obs`) only applies the frozen statistics.

The arithmetic is NumPy float64 on the host, as in SB3: a vector step normalises a few
dozen numbers, where each NumPy operation costs ~1 us and each torch operation ~5-10 us
(measured: the torch version added ~0.45 ms to a 16-copy Acrobot step of ~1.1 ms).
Tensors go in and come back (float32 observations, rewards in their dtype) on the
caller's device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from pglab.contracts import check_tensor


def _host(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy view (CPU) or copy (other devices) of ``tensor``."""
    if tensor.device.type == "cpu" and not tensor.requires_grad:
        return tensor.numpy()  # a step's tensors: one call instead of three
    return tensor.detach().cpu().numpy()


def _on(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device`` (shared memory on the CPU)."""
    tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device)


def _clip(values: np.ndarray, bound: float) -> np.ndarray:
    """``np.clip(values, -bound, bound)`` as two ufunc calls (the same values, NaN included),
    without ``np.clip``'s per-call argument handling (~3 us, twice a step)."""
    return np.minimum(np.maximum(values, -bound), bound)


SCALAR_BATCH_MAX = 7
"""the largest batch :meth:`RunningMeanStd.update` reduces in Python floats (scalar
statistics): NumPy sums fewer than 8 numbers left to right from 0, as ``sum`` does, and
8 or more in partial sums"""


class RunningMeanStd:
    """Running mean/variance of batches ``[M, *shape]`` (float64 statistics of ``shape``).

    Args:
        shape: shape of one sample (``()`` for scalars such as returns).
        epsilon: the initial pseudo-count (SB3's 1e-4).
    """

    def __init__(self, shape: tuple[int, ...] = (), *, epsilon: float = 1e-4):
        self.shape = tuple(shape)
        # statistics of scalars are Python floats: each NumPy operation on a 0-d array costs
        # ~1-2 us, a float's ~0.05 (see _update_scalars)
        self.mean: np.ndarray | float = np.zeros(shape, dtype=np.float64) if shape else 0.0
        self.var: np.ndarray | float = np.ones(shape, dtype=np.float64) if shape else 1.0
        self.count = float(epsilon)

    def update(self, batch: np.ndarray | torch.Tensor) -> None:
        """Merge the statistics of ``batch [M, *shape]`` (any float dtype) into the running ones.

        The batch's moments are NumPy's ``mean(0)`` and ``var(0)``, computed with the same
        operations in the same order but without their per-call bookkeeping (~15 us of a
        one-copy step); one sample is its own mean with variance 0, exactly as there."""
        values = _host(batch) if isinstance(batch, torch.Tensor) else np.asarray(batch)
        if values.dtype != np.float64:
            values = values.astype(np.float64)
        count = int(values.shape[0])
        if not self.shape and 1 < count <= SCALAR_BATCH_MAX:
            self._update_scalars(values.tolist())
            return
        if count == 1:
            one = values[0] if self.shape else float(values[0])
            self.update_from_moments(one, np.zeros(self.shape) if self.shape else 0.0, 1)
            return
        mean = np.add.reduce(values, axis=0, keepdims=True) / count
        centred = values - mean
        self.update_from_moments(mean[0], np.add.reduce(centred * centred, axis=0) / count, count)

    def _update_scalars(self, values: list[float]) -> None:
        """:meth:`update` for a batch of 2 to :data:`SCALAR_BATCH_MAX` scalars, in Python
        floats: the same IEEE double operations in the same order as the NumPy path, so
        the same bits (``test_scalar_statistics_in_floats_equal_numpys_bit_for_bit``).
        For a 4-copy run ~3 us a step against ~15 through 0-d arrays."""
        count = len(values)
        mean = sum(values) / count
        self.update_from_moments(mean, sum([(value - mean) * (value - mean) for value in values]) / count, count)

    def update_from_moments(self, batch_mean: Any, batch_var: Any, batch_count: int) -> None:
        """Merge a batch given by its mean, population variance and size (Chan et al.);
        arrays of :attr:`shape`, or floats for scalar statistics."""
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta * delta * (self.count * batch_count / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": torch.from_numpy(np.array(self.mean, dtype=np.float64)),
            "var": torch.from_numpy(np.array(self.var, dtype=np.float64)),
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["mean"].shape) != self.shape:
            raise ValueError(
                f"RunningMeanStd: stored statistics have shape {list(state['mean'].shape)}, expected {list(self.shape)}"
            )
        mean, var = (_host(state[key]).astype(np.float64, copy=True) for key in ("mean", "var"))
        self.mean, self.var = (mean, var) if self.shape else (float(mean), float(var))
        self.count = float(state["count"])


class ObsRewardNormalizer:
    """SB3 ``VecNormalize`` for a batched environment of ``num_envs`` copies.

    Args:
        obs_shape: shape of one observation.
        num_envs: environment copies (one discounted return each).
        normalize_obs / normalize_reward: which of the two to normalise.
        clip_obs / clip_reward: clip the normalised values to ``[-clip, clip]`` (SB3: 10).
        gamma: discount of the return whose standard deviation scales the reward
            (RL-Zoo passes the algorithm's gamma).
        epsilon: added to the variance before the square root (SB3: 1e-8).

    Usage per rollout step (training)::

        obs = normalizer.reset(env.reset(seed))                 # once
        raw = env.step(actions)
        obs, rewards = normalizer.step(raw.obs, raw.rewards, raw.dones | raw.truncs)
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_envs: int,
        *,
        normalize_obs: bool = True,
        normalize_reward: bool = True,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
    ):
        self.obs_shape, self.num_envs = tuple(obs_shape), int(num_envs)
        self.normalize_obs_enabled, self.normalize_reward_enabled = bool(normalize_obs), bool(normalize_reward)
        self.clip_obs, self.clip_reward = float(clip_obs), float(clip_reward)
        self.gamma, self.epsilon = float(gamma), float(epsilon)
        self.obs_rms = RunningMeanStd(self.obs_shape)
        self.ret_rms = RunningMeanStd(())
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        self.training = True
        """update the statistics in :meth:`reset` / :meth:`step` (False: frozen)"""

    # -- applying the statistics (never updates them) -----------------------------------
    def _normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` (float64, or any dtype it is cast to) normalised, as float32."""
        if obs.dtype != np.float64:
            obs = obs.astype(np.float64)
        scaled = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return _clip(scaled, self.clip_obs).astype(np.float32)

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """``clip((obs - mean) / sqrt(var + eps), +-clip_obs)`` as float32 ``[B, *obs_shape]``
        on ``obs``' device; ``obs`` unchanged (cast to float32 if needed) when observations
        are not normalised."""
        if not self.normalize_obs_enabled:
            return obs if obs.is_floating_point() else obs.float()
        return _on(self._normalize_obs(_host(obs)), obs.device)

    def _normalize_reward(self, rewards: np.ndarray) -> np.ndarray:
        scaled = rewards.astype(np.float64) / math.sqrt(float(self.ret_rms.var) + self.epsilon)
        return _clip(scaled, self.clip_reward).astype(rewards.dtype)

    def normalize_reward(self, rewards: torch.Tensor) -> torch.Tensor:
        """``clip(r / sqrt(var_R + eps), +-clip_reward)`` in ``rewards``' dtype (unchanged if off)."""
        if not self.normalize_reward_enabled:
            return rewards
        return _on(self._normalize_reward(_host(rewards)), rewards.device)

    # -- the environment loop ---------------------------------------------------------
    def reset(self, obs: torch.Tensor) -> torch.Tensor:
        """After ``env.reset``: zero the discounted returns, update the observation
        statistics (while training) and return the normalised observations."""
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        if self.training and self.normalize_obs_enabled:
            self.obs_rms.update(obs)
        return self.normalize_obs(obs)

    def step(
        self, obs: torch.Tensor, rewards: torch.Tensor, episode_end: torch.Tensor, truncated: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """After ``env.step``: ``obs [N, *obs_shape]`` (the next observations, reset ones
        where an episode ended), ``rewards [N]`` raw, ``episode_end [N]`` bool (terminated
        or truncated; or, with ``truncated [N]`` given, terminated, the two flags then
        ended an episode together). Returns ``(normalised obs float32, normalised rewards)``."""
        check_tensor("rewards", rewards, (self.num_envs,), None, where="ObsRewardNormalizer.step")
        if self.normalize_obs_enabled:
            obs = _on(self._observe_step(_host(obs)), obs.device)
        elif not obs.is_floating_point():
            obs = obs.float()
        if self.normalize_reward_enabled:
            rewards = _on(self._reward_step(_host(rewards)), rewards.device)
        self._restart_returns(_host(episode_end), None if truncated is None else _host(truncated))
        return obs, rewards

    def step_arrays(
        self, obs: np.ndarray, rewards: np.ndarray, episode_end: np.ndarray, truncated: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`step` on NumPy arrays, for a rollout loop that stays in NumPy: the same
        steps on the same values (observations come back float32 when normalised, as given
        otherwise)."""
        if self.normalize_obs_enabled:
            obs = self._observe_step(obs)
        if self.normalize_reward_enabled:
            rewards = self._reward_step(rewards)
        self._restart_returns(episode_end, truncated)
        return obs, rewards

    def _observe_step(self, obs: np.ndarray) -> np.ndarray:
        """Update the observation statistics (while training), then normalise ``obs``."""
        if obs.dtype != np.float64:  # one cast for the update and the normalisation
            obs = obs.astype(np.float64)
        if self.training:
            self.obs_rms.update(obs)
        return self._normalize_obs(obs)

    def _reward_step(self, rewards: np.ndarray) -> np.ndarray:
        """Add ``rewards`` to the discounted returns and update their statistics (while
        training), then scale ``rewards``."""
        if self.training:
            self.returns = self.returns * self.gamma + rewards
            self.ret_rms.update(self.returns)
        return self._normalize_reward(rewards)

    def _restart_returns(self, episode_end: np.ndarray, truncated: np.ndarray | None) -> None:
        """The return restarts with the next episode (SB3: ``returns[dones] = 0``);
        count_nonzero first, as most steps end no episode (~0.5 us against ~1.5 for the
        masked write)."""
        for flags in (episode_end,) if truncated is None else (episode_end, truncated):
            if np.count_nonzero(flags):
                self.returns[flags] = 0.0

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "obs_rms": self.obs_rms.state_dict(),
            "ret_rms": self.ret_rms.state_dict(),
            "returns": torch.from_numpy(self.returns.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.ret_rms.load_state_dict(state["ret_rms"])
        self.returns = _host(state["returns"]).astype(np.float64, copy=True)
