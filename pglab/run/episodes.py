"""Episode statistics between two metric rows: the one aggregator every trainer uses.

The trainer adds the episodes that ended (from :class:`pglab.envs.base.EpisodeTracker` or
the environment's own report); the shell-logged row gets

- ``episode/count``: episodes that ended since the previous row;
- ``return/mean``, ``return/std``: their undiscounted return (population std);
- ``episode/length``: their mean length in environment steps;
- ``episode/success_rate``: the fraction that succeeded, for trainers that say what
  success is (e.g. reached the goal before the time limit).

The sums stay on the device as float64 0-d tensors (no host sync until the row is
logged). In an interval in which no episode ended, the means are 0/0 = NaN, which the
logger writes as "no value" (an empty CSV cell), never a stale number.
"""

from __future__ import annotations

import torch

from pglab.contracts import check_tensor

EPISODE_METRICS = ("episode/count", "return/mean", "return/std", "episode/length", "episode/success_rate")


class EpisodeStats:
    """Sums over the episodes that ended since the last :meth:`reset` (a checkpointable
    :class:`pglab.run.state.Stateful`)."""

    NAMES = ("count", "return_sum", "return_sq_sum", "length_sum", "success_sum", "success_count")

    def __init__(self, device: torch.device | str, *, success: bool = False):
        self.device = torch.device(device)
        self.success = success
        self.sums = {name: torch.zeros((), dtype=torch.float64, device=self.device) for name in self.NAMES}

    def add(
        self,
        returns: torch.Tensor,
        lengths: torch.Tensor,
        finished: torch.Tensor | None = None,
        succeeded: torch.Tensor | None = None,
    ) -> None:
        """Add episodes: ``returns``, ``lengths`` of any shape (``[N]`` or ``[N, T]``), zero
        where no episode ended; ``finished`` (default ``lengths > 0``) marks the ends and
        ``succeeded`` (same shape; required when built with ``success=True``) which of
        them count as successes."""
        shape = tuple(returns.shape)
        check_tensor("lengths", lengths, shape, where="EpisodeStats.add")
        ended = lengths > 0 if finished is None else finished
        self.sums["count"] += ended.sum()
        self.sums["return_sum"] += torch.where(ended, returns.double(), 0.0).sum()
        self.sums["return_sq_sum"] += torch.where(ended, returns.double().pow(2), 0.0).sum()
        self.sums["length_sum"] += torch.where(ended, lengths.double(), 0.0).sum()
        if self.success:
            if succeeded is None:
                raise ValueError("EpisodeStats.add: built with success=True, so succeeded is required")
            self.sums["success_sum"] += (succeeded & ended).sum()
            self.sums["success_count"] += ended.sum()

    def metrics(self) -> dict[str, torch.Tensor]:
        """The row's episode metrics (module docstring); ``episode/success_rate`` only when
        successes were reported."""
        count = self.sums["count"]
        mean = self.sums["return_sum"] / count
        out = {
            "episode/count": count.clone(),
            "return/mean": mean,
            "return/std": (self.sums["return_sq_sum"] / count - mean.pow(2)).clamp_min(0).sqrt(),
            "episode/length": self.sums["length_sum"] / count,
        }
        if self.success:
            out["episode/success_rate"] = self.sums["success_sum"] / self.sums["success_count"]
        return out

    def reset(self) -> None:
        for value in self.sums.values():
            value.zero_()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: value.cpu().clone() for name, value in self.sums.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.sums = {name: state[name].to(self.device, torch.float64) for name in self.NAMES}
