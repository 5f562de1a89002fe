"""What the batched A2C trainer (:mod:`pglab.algos.a2c`) and stream-AC
(:mod:`pglab.algos.stream_ac`) share: the environment factory, action sampling, the
per-window statistics behind their log records, and the evaluation loop.

Both trainers import this module; neither imports the other (``pglab train a2c``
chooses between them in :mod:`pglab.commands.a2c`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pglab.configs.a2c import A2CTrainConfig
from pglab.envs.atari import reported_episodes
from pglab.envs.base import EpisodeTracker
from pglab.run.progress import progress_bar
from pglab.validation import check_int

# The metrics of one record (metrics.csv / metrics.jsonl / TensorBoard), besides the step
# column ``opt_steps``. ``return/mean``, ``episode/success_rate`` and ``episode/length``
# are left empty in a record whose window finished no episode.
RECORD_KEYS = (
    "env_steps",
    "loss",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "stats/entropy",
    "stats/advantage_mean",
    "stats/value_mean",
    "stats/reward_mean",
    "stats/done_rate",
    "stats/trunc_rate",
    "stats/reset_rate",
    "episode/count",
    "return/mean",
    "episode/success_rate",
    "episode/length",
    "perf/steps_per_s",
    "perf/iter_s",
)
EPISODE_KEYS = ("return/mean", "episode/success_rate", "episode/length")
# Percentiles of info["dist"] at a window's last env-step (only envs that report it).
DIST_KEYS = ("stats/dist_p10", "stats/dist_p50", "stats/dist_p90")
LOG_NAME = "metrics.jsonl"


def build_env(config: A2CTrainConfig, device: torch.device, *, seed: int):
    """The batched environment of ``config`` (``config.num_envs`` copies on ``device``)."""
    from pglab.envs.registry import make_env

    return make_env(config.env, config.num_envs, device=device, seed=seed, **config.env_kwargs())


def finished_episodes(
    tracker: EpisodeTracker, reward: torch.Tensor, done: torch.Tensor, trunc: torch.Tensor, info: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The episodes that ended at this env-step: ``(returns, lengths, finished, succeeded)``,
    all ``[N]`` (returns/lengths 0 where ``finished`` is false).

    Environments that report their own episodes (:func:`pglab.envs.atari.reported_episodes`:
    Atari's whole games with the unclipped score, while ``done`` marks every lost life and
    the reward is clipped) are taken at their word, and ``succeeded`` means the game ended
    before the time limit. Otherwise ``tracker`` sums the rewards up to ``done | trunc``
    and ``succeeded = done`` (PixelGoalEnv: reached the goal)."""
    reported = reported_episodes(info)
    if reported is None:
        returns, lengths, finished = tracker.update(reward, done | trunc)
        return returns, lengths, finished, done
    returns, lengths = reported
    finished = info["episode_end"]
    return returns, lengths, finished, finished & ~trunc


def sample_actions(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """int64 ``[N]`` from float ``[N, A]`` logits by the Gumbel-max trick:
    ``argmax(logits + G)``, ``G = -log(-log U)``, with ``U`` from ``generator``."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-20, 1.0)))
    return torch.argmax(logits.detach() + gumbel, dim=1)


class WindowStats:
    """Device-side sums over one logging window (no host sync per env-step)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        zero = lambda: torch.zeros((), dtype=torch.float64, device=self.device)  # noqa: E731
        self.losses: dict[str, torch.Tensor] = {}
        self.sums = {name: zero() for name in ("reward", "done", "trunc", "episodes", "return", "success", "length")}
        self.transitions = 0
        self.env_steps = 0
        self.dist: torch.Tensor | None = None

    def add(
        self,
        losses: dict[str, torch.Tensor],
        reward,
        done,
        trunc,
        episode_returns,
        episode_lengths,
        dist,
        finished: torch.Tensor | None = None,
        succeeded: torch.Tensor | None = None,
    ) -> None:
        """One env-step: losses (scalars), reward/done/trunc ``[N]``, the returns and lengths
        of the episodes that ended (zero elsewhere) ``[N]``, ``info["dist"]`` or ``None``;
        which episodes ended and succeeded ``[N]`` (default ``done | trunc`` and ``done``;
        :func:`finished_episodes` gives all four)."""
        for name, value in losses.items():
            value = value.detach().to(torch.float64)
            self.losses[name] = self.losses[name] + value if name in self.losses else value
        finished = done | trunc if finished is None else finished
        succeeded = done if succeeded is None else succeeded
        self.sums["reward"] += reward.sum()
        self.sums["done"] += done.sum()
        self.sums["trunc"] += trunc.sum()
        self.sums["episodes"] += finished.sum()
        self.sums["return"] += episode_returns.sum()
        self.sums["success"] += succeeded.sum()
        self.sums["length"] += episode_lengths.sum()
        self.transitions += reward.numel()
        self.env_steps += 1
        self.dist = dist

    def summary(self) -> dict[str, float | None]:
        """One host sync: the window's metrics (losses averaged over its env-steps, rates
        over its transitions, episode metrics over the episodes that ended in it)."""
        keys = list(self.losses) + list(self.sums)
        stacked = torch.stack([*self.losses.values(), *self.sums.values()]).tolist()
        values = dict(zip(keys, stacked, strict=False))
        out: dict[str, float | None] = {name: values[name] / max(self.env_steps, 1) for name in self.losses}
        n = max(self.transitions, 1)
        out["stats/reward_mean"] = values["reward"] / n
        out["stats/done_rate"] = values["done"] / n
        out["stats/trunc_rate"] = values["trunc"] / n
        out["stats/reset_rate"] = (values["done"] + values["trunc"]) / n
        episodes = values["episodes"]
        out["episode/count"] = episodes
        if episodes > 0:
            out["return/mean"] = values["return"] / episodes
            out["episode/success_rate"] = values["success"] / episodes  # terminated = reached the goal
            out["episode/length"] = values["length"] / episodes
        else:  # no episode ended in this window: no value (an empty cell), never a stale one
            out.update(dict.fromkeys(EPISODE_KEYS))
        if self.dist is not None:
            quantiles = torch.quantile(
                self.dist.to(torch.float32), torch.tensor([0.1, 0.5, 0.9], device=self.dist.device)
            ).tolist()
            out.update(dict(zip(DIST_KEYS, quantiles, strict=False)))
        return out


def error_record(exc: BaseException, counters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The ``{"error": ...}`` line appended to metrics.jsonl when training fails."""
    return {"error": {"type": type(exc).__name__, "message": str(exc), **counters, **extra}}


def present(values: dict[str, float]) -> dict[str, float]:
    """A logged record without its empty fields (NaN: no value in that interval)."""
    return {key: value for key, value in values.items() if not math.isnan(value)}


def format_postfix(record: dict[str, float]) -> dict[str, str]:
    """Progress-bar postfix of a logged record (``-`` where no episode ended)."""

    def fmt(key: str, spec: str) -> str:
        value = record.get(key, math.nan)
        return "-" if value is None or math.isnan(value) else format(value, spec)

    return {"ret": fmt("return/mean", ".3f"), "succ": fmt("episode/success_rate", ".2f")}


@torch.no_grad()
def evaluate_policy(
    act, env, *, episodes: int, max_env_steps: int = 100_000, desc: str = "evaluate a2c"
) -> dict[str, float]:
    """Run ``act(obs) -> int32 [N]`` until ``episodes`` episodes are counted; success rate
    (fraction terminated), mean return and length.

    Each environment copy ``i`` contributes its *first* ``m_i`` episodes, with the quotas
    ``m_i`` summing to ``episodes`` (``episodes // N``, one more for the first
    ``episodes % N`` copies). Counting the first episodes to finish across all copies
    instead would over-represent short episodes (quick successes) whenever ``episodes`` is
    not much larger than ``N``.
    """
    check_int("episodes", episodes, minimum=1)
    num_envs = env.num_envs
    tracker = EpisodeTracker(num_envs, env.device)
    quota = torch.full((num_envs,), episodes // num_envs, dtype=torch.long, device=env.device)
    quota[: episodes % num_envs] += 1
    taken = torch.zeros(num_envs, dtype=torch.long, device=env.device)
    obs = env.reset()
    returns: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    successes: list[torch.Tensor] = []
    count = 0
    bar = progress_bar(episodes, desc=desc, unit="ep")
    try:
        for _ in range(max_env_steps):
            obs, reward, done, trunc, info = env.step(act(obs))
            episode_returns, episode_lengths, finished, succeeded = finished_episodes(
                tracker, reward, done, trunc, info
            )
            counted = finished & (taken < quota)
            taken += finished.long()
            returns.append(episode_returns[counted])
            lengths.append(episode_lengths[counted])
            successes.append(succeeded[counted])
            now = int(torch.minimum(taken, quota).sum())
            bar.update(now - count)
            count = now
            if count >= episodes:
                break
    finally:
        bar.close()
    all_returns = torch.cat(returns)[:episodes].to(torch.float64)
    all_lengths = torch.cat(lengths)[:episodes].to(torch.float64)
    all_success = torch.cat(successes)[:episodes].to(torch.float64)
    n = int(all_returns.numel())
    if n == 0:
        return {"episodes": 0, "success_rate": float("nan"), "return_mean": float("nan"), "length_mean": float("nan")}
    return {
        "episodes": n,
        "success_rate": float(all_success.mean()),
        "return_mean": float(all_returns.mean()),
        "return_std": float(all_returns.std()) if n > 1 else 0.0,
        "length_mean": float(all_lengths.mean()),
        "success_stderr": float(all_success.std() / math.sqrt(n)) if n > 1 else 0.0,
    }
