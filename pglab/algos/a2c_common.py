"""What the batched A2C trainer (:mod:`pglab.algos.a2c`) and stream-AC
(:mod:`pglab.algos.stream_ac`) share: the environment factory and its checkpoint entry,
action sampling, the per-window statistics behind their log records, and the evaluation
loop.

Both trainers import this module; neither imports the other (``pglab train a2c``
chooses between them in :mod:`pglab.commands.a2c`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from pglab.configs.a2c import A2CTrainConfig
from pglab.envs.atari import reported_episodes
from pglab.envs.base import EpisodeTracker
from pglab.run.episodes import EPISODE_METRICS, EpisodeStats
from pglab.run.progress import progress_bar
from pglab.run.shell import PERF_ENV_STEPS_PER_S, PERF_STEP_SECONDS, TrainingRun
from pglab.run.state import Stateful, Value
from pglab.validation import check_int

# The metrics of one record (metrics.csv / metrics.jsonl / TensorBoard) both trainers
# write, besides the step column ``opt_steps``; the episode metrics are those of
# :class:`pglab.run.episodes.EpisodeStats`.
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
    *EPISODE_METRICS,
)
# The episode metrics that have no value (an empty cell) in a record whose window finished no episode.
EPISODE_KEYS = tuple(name for name in EPISODE_METRICS if name != "episode/count")
# Percentiles of info["dist"] at a window's last env-step (only envs that report it).
DIST_KEYS = ("stats/dist_p10", "stats/dist_p50", "stats/dist_p90")
# What the training shell adds to every record.
PERF_KEYS = (PERF_STEP_SECONDS, PERF_ENV_STEPS_PER_S)
LOG_NAME = "metrics.jsonl"


def build_env(config: A2CTrainConfig, device: torch.device, *, seed: int):
    """The batched environment of ``config`` (``config.num_envs`` copies on ``device``)."""
    from pglab.envs.registry import make_env

    return make_env(config.env, config.num_envs, device=device, seed=seed, **config.env_kwargs())


class FreshEpisodes:
    """The checkpoint entry of an environment that cannot snapshot itself (Gymnasium,
    ALE's emulators): it stores nothing, and a resume starts new episodes, ``env.reset``
    seeded with ``seed()`` (called at the resume, so it may read the restored counters),
    with a fresh episode tracker. Such a run resumes statistically equivalent, not bit
    for bit.

    Register it after ``obs`` and ``tracker`` (the shell restores in registration order),
    so that the fresh episodes replace what those entries restored.
    """

    def __init__(self, env, obs: Value, tracker: EpisodeTracker, seed: Callable[[], int]):
        self.env, self.obs, self.tracker, self.seed = env, obs, tracker, seed

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.obs.value = self.env.reset(seed=self.seed()).clone()
        self.tracker.load_state_dict(
            {"returns": torch.zeros_like(self.tracker.returns), "lengths": torch.zeros_like(self.tracker.lengths)}
        )


def env_entry(env, fresh: FreshEpisodes) -> Stateful:
    """The environment's checkpoint entry: the environment itself where it snapshots its
    own state (``state_dict`` / ``load_state_dict``, e.g. :class:`pglab.envs.pixel_goal.PixelGoalEnv`:
    a bit-identical resume), else ``fresh``."""
    return env if hasattr(env, "state_dict") and hasattr(env, "load_state_dict") else fresh


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
    """Device-side sums over one logging window (no host sync per env-step), a
    checkpointable :class:`pglab.run.state.Stateful`.

    Per env-step scalars (losses, statistics, step sizes) are averaged over the window's
    env-steps; reward, termination and truncation over its transitions; the episodes that
    ended go to :attr:`episodes`, the run's :class:`pglab.run.episodes.EpisodeStats`
    (success: :func:`finished_episodes`'s ``succeeded``).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.episodes = EpisodeStats(device, success=True)
        self.reset()

    def reset(self) -> None:
        self.means: dict[str, torch.Tensor] = {}
        self.sums = {
            name: torch.zeros((), dtype=torch.float64, device=self.device) for name in ("reward", "done", "trunc")
        }
        self.transitions = 0
        self.env_steps = 0
        self.dist: torch.Tensor | None = None
        self.episodes.reset()

    def add(
        self,
        scalars: Mapping[str, torch.Tensor],
        reward: torch.Tensor,
        done: torch.Tensor,
        trunc: torch.Tensor,
        episode_returns: torch.Tensor,
        episode_lengths: torch.Tensor,
        dist: torch.Tensor | None,
        finished: torch.Tensor | None = None,
        succeeded: torch.Tensor | None = None,
    ) -> None:
        """One env-step: 0-d ``scalars`` to average, reward/done/trunc ``[N]``, the returns
        and lengths of the episodes that ended (zero elsewhere) ``[N]``, ``info["dist"]`` or
        ``None``; which episodes ended and succeeded ``[N]`` (default ``done | trunc`` and
        ``done``; :func:`finished_episodes` gives all four)."""
        for name, value in scalars.items():
            value = value.detach().to(torch.float64)
            self.means[name] = self.means[name] + value if name in self.means else value
        self.sums["reward"] += reward.sum()
        self.sums["done"] += done.sum()
        self.sums["trunc"] += trunc.sum()
        self.episodes.add(
            episode_returns,
            episode_lengths,
            done | trunc if finished is None else finished,
            done if succeeded is None else succeeded,
        )
        self.transitions += reward.numel()
        self.env_steps += 1
        self.dist = dist

    def summary(self, extra: Mapping[str, torch.Tensor] | None = None) -> dict[str, float]:
        """The window's metrics in one host sync (``extra``: further 0-d tensors of the
        record, synced with them). Episode metrics are NaN (no value) when no episode ended."""
        transitions = max(self.transitions, 1)
        rows: dict[str, torch.Tensor] = {name: value / max(self.env_steps, 1) for name, value in self.means.items()}
        rows["stats/reward_mean"] = self.sums["reward"] / transitions
        rows["stats/done_rate"] = self.sums["done"] / transitions
        rows["stats/trunc_rate"] = self.sums["trunc"] / transitions
        rows["stats/reset_rate"] = (self.sums["done"] + self.sums["trunc"]) / transitions
        rows.update(self.episodes.metrics())
        if self.dist is not None:
            levels = torch.tensor([0.1, 0.5, 0.9], device=self.dist.device)
            rows.update(zip(DIST_KEYS, torch.quantile(self.dist.to(torch.float32), levels), strict=True))
        rows.update(extra or {})
        values = torch.stack([value.to(self.device, torch.float64) for value in rows.values()]).tolist()
        return dict(zip(rows, values, strict=True))

    def state_dict(self) -> dict[str, Any]:
        return {
            "means": {name: value.cpu().clone() for name, value in self.means.items()},
            "sums": {name: value.cpu().clone() for name, value in self.sums.items()},
            "transitions": self.transitions,
            "env_steps": self.env_steps,
            "dist": None if self.dist is None else self.dist.cpu().clone(),
            "episodes": self.episodes.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.means = {name: value.to(self.device) for name, value in state["means"].items()}
        self.sums = {name: value.to(self.device) for name, value in state["sums"].items()}
        self.transitions, self.env_steps = int(state["transitions"]), int(state["env_steps"])
        self.dist = None if state["dist"] is None else state["dist"].to(self.device)
        self.episodes.load_state_dict(state["episodes"])


def episode_summary(record: Mapping[str, float]) -> dict[str, float]:
    """The episode metrics of a logged record, for ``summary.json``."""
    return {key: value for key, value in record.items() if key in EPISODE_METRICS}


def run_result(run: TrainingRun, last: dict[str, float]) -> dict[str, Any]:
    """What ``train_a2c`` / ``train_stream_ac`` return: ``{"run_dir", "opt_steps",
    "env_steps", "interrupted", "exit_code", "last"}`` (``last``: the last logged record)."""
    return {
        "run_dir": str(run.run_dir),
        "opt_steps": int(run.counters["opt_steps"]),
        "env_steps": int(run.counters["env_steps"]),
        "interrupted": run.interrupted,
        "exit_code": run.exit_code,
        "last": last,
    }


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
