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
from pglab.envs.atari import is_atari_spec, reported_episodes
from pglab.envs.base import EpisodeTracker, defines_success
from pglab.nets.stream import sample_actions as sample_actions  # the trainers sample here
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
SUCCESS_KEY = "episode/success_rate"
# The episode metrics that have no value (an empty cell) in a record whose window finished no episode.
EPISODE_KEYS = tuple(name for name in EPISODE_METRICS if name != "episode/count")
# Percentiles of info["dist"] at a window's last env-step (only envs that report it).
DIST_KEYS = ("stats/dist_p10", "stats/dist_p50", "stats/dist_p90")
# What the training shell adds to every record.
PERF_KEYS = (PERF_STEP_SECONDS, PERF_ENV_STEPS_PER_S)
LOG_NAME = "metrics.jsonl"


def record_keys(keys: tuple[str, ...], env) -> list[str]:
    """A trainer's record keys for ``env``: without ``episode/success_rate`` where the
    environment defines no success (:func:`pglab.envs.base.defines_success`)."""
    return [key for key in keys if key != SUCCESS_KEY or defines_success(env)]


def env_options(config: A2CTrainConfig) -> dict[str, Any]:
    """The environment factory's keyword arguments for ``config``: ``config.env_kwargs()``
    and, for stream-ac, the input pipeline of the reference code: raw (unclipped) Atari
    rewards (the learner scales them), and the time feature on Gymnasium's vector
    observations (:class:`pglab.envs.gym_adapter.GymVectorAdapter`)."""
    options = config.env_kwargs()
    if config.algo == "stream-ac" and is_atari_spec(config.env):
        options["clip_rewards"] = False
    elif config.algo == "stream-ac" and config.env.startswith("gym:"):
        options["time_feature"] = True
    return options


def build_env(config: A2CTrainConfig, device: torch.device, *, seed: int, num_envs: int | None = None):
    """The batched environment of ``config`` (``num_envs``, default ``config.num_envs``,
    copies on ``device``)."""
    from pglab.envs.registry import make_env

    copies = num_envs if num_envs is not None else config.num_envs
    assert copies is not None  # A2CTrainConfig sets num_envs
    return make_env(config.env, copies, device=device, seed=seed, **env_options(config))


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


class EnvEntry:
    """The environment's checkpoint entry: the environment's own snapshot where it takes
    one (``state_dict`` not ``None``, e.g. :class:`pglab.envs.pixel_goal.PixelGoalEnv` or
    Gymnasium's classic control: a bit-identical resume), else ``fresh`` episodes
    (ALE's emulators, MuJoCo, MinAtar's game objects)."""

    def __init__(self, env, fresh: FreshEpisodes):
        self.env, self.fresh = env, fresh
        self.snapshots = hasattr(env, "state_dict") and hasattr(env, "load_state_dict")

    def state_dict(self) -> Any:
        return self.env.state_dict() if self.snapshots else None

    def load_state_dict(self, state: Any) -> None:
        if state is None:
            self.fresh.load_state_dict({})
        else:
            self.env.load_state_dict(state)


def env_entry(env, fresh: FreshEpisodes) -> Stateful:
    """The environment's checkpoint entry (:class:`EnvEntry`)."""
    return EnvEntry(env, fresh)


def finished_episodes(
    tracker: EpisodeTracker, reward: torch.Tensor, done: torch.Tensor, trunc: torch.Tensor, info: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The episodes that ended at this env-step: ``(returns, lengths, finished, succeeded)``,
    ``[N]`` (returns/lengths 0 where ``finished`` is false); ``succeeded`` is the
    environment's ``info["success"]`` among them, ``None`` where the environment defines
    no success (:mod:`pglab.envs.base`).

    Environments that report their own episodes (:func:`pglab.envs.atari.reported_episodes`:
    Atari's whole games with the unclipped score, while ``done`` marks every lost life and
    the reward is clipped) are taken at their word. Otherwise ``tracker`` sums the rewards
    up to ``done | trunc``."""
    reported = reported_episodes(info)
    if reported is None:
        returns, lengths, finished = tracker.update(reward, done | trunc)
    else:
        returns, lengths = reported
        finished = info["episode_end"]
    success = info.get("success")
    return returns, lengths, finished, None if success is None else success & finished


class WindowStats:
    """Device-side sums over one logging window (no host sync per env-step), a
    checkpointable :class:`pglab.run.state.Stateful`.

    Per env-step scalars (losses, statistics, step sizes) are averaged over the window's
    env-steps; reward, termination and truncation over its transitions; the episodes that
    ended go to :attr:`episodes`, the run's :class:`pglab.run.episodes.EpisodeStats`
    (with a success rate where ``success``: the environment defines success).
    """

    def __init__(self, device: torch.device, *, success: bool):
        self.device = device
        self.episodes = EpisodeStats(device, success=success)
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
        ``None``; which episodes ended (default ``done | trunc``) and which of them
        succeeded ``[N]`` (``None`` where the environment defines no success);
        :func:`finished_episodes` gives all four."""
        for name, value in scalars.items():
            value = value.detach().to(torch.float64)
            self.means[name] = self.means[name] + value if name in self.means else value
        self.sums["reward"] += reward.sum()
        self.sums["done"] += done.sum()
        self.sums["trunc"] += trunc.sum()
        self.episodes.add(episode_returns, episode_lengths, done | trunc if finished is None else finished, succeeded)
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


def latest(previous: dict[str, float], row: dict[str, float]) -> dict[str, float]:
    """The last logged record ``row``; where no episode ended in its window, with the episode
    metrics of ``previous`` (the record this returned before), so that the run's summary
    reports the most recent window's episodes instead of none."""
    if row.get("episode/count", 0.0) > 0 or "return/mean" not in previous:
        return row
    return {**row, **{name: previous[name] for name in EPISODE_METRICS if name in previous}}


def present(values: dict[str, float]) -> dict[str, float]:
    """A logged record without its empty fields (NaN: no value in that interval)."""
    return {key: value for key, value in values.items() if not math.isnan(value)}


def format_postfix(record: dict[str, float]) -> dict[str, str]:
    """Progress-bar postfix of a logged record (``-`` where no episode ended)."""

    def fmt(key: str, spec: str) -> str:
        value = record.get(key, math.nan)
        return "-" if value is None or math.isnan(value) else format(value, spec)

    postfix = {"ret": fmt("return/mean", ".3f")}
    if SUCCESS_KEY in record:
        postfix["succ"] = fmt(SUCCESS_KEY, ".2f")
    return postfix


@torch.no_grad()
def evaluate_policy(
    act, env, *, episodes: int, max_env_steps: int = 100_000, desc: str = "evaluate a2c"
) -> dict[str, float]:
    """Run ``act(obs) -> actions`` until ``episodes`` episodes are counted: their mean
    return and length, and where the environment defines success
    (:func:`pglab.envs.base.defines_success`) the success rate; the key is absent elsewhere.

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
    columns: dict[str, list[torch.Tensor]] = {"returns": [], "lengths": [], "successes": []}
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
            columns["returns"].append(episode_returns[counted])
            columns["lengths"].append(episode_lengths[counted])
            if succeeded is not None:
                columns["successes"].append(succeeded[counted])
            now = int(torch.minimum(taken, quota).sum())
            bar.update(now - count)
            count = now
            if count >= episodes:
                break
    finally:
        bar.close()
    return _evaluation(columns, episodes, success=defines_success(env))


def _evaluation(columns: dict[str, list[torch.Tensor]], episodes: int, *, success: bool) -> dict[str, float]:
    """:func:`evaluate_policy`'s result from the counted episodes' columns."""

    def column(name: str) -> torch.Tensor:
        parts = columns[name]
        return torch.cat(parts)[:episodes].to(torch.float64) if parts else torch.zeros(0, dtype=torch.float64)

    returns, lengths = column("returns"), column("lengths")
    n = int(returns.numel())
    result: dict[str, float] = {
        "episodes": n,
        "return_mean": float(returns.mean()) if n else math.nan,
        "return_std": float(returns.std()) if n > 1 else 0.0,
        "length_mean": float(lengths.mean()) if n else math.nan,
    }
    if success:
        successes = column("successes")
        result["success_rate"] = float(successes.mean()) if n else math.nan
        result["success_stderr"] = float(successes.std() / math.sqrt(n)) if n > 1 else 0.0
    return result
