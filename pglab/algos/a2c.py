"""``pglab train a2c``: streaming advantage actor-critic with TD(0) targets, no rollout buffer.

Every environment step of all ``num_envs`` copies is learned from at once and then
forgotten (design note ``streaming-a2c.md``)::

    obs = env.reset(seed)
    repeat until env_steps >= total_env_steps:                     (env_steps counts transitions)
        logits, V(s) = model(obs)                                  forward
        a ~ Categorical(softmax(logits))                           sample (int32 for the env)
        obs', r, done, trunc, info = env.step(a)                   batched env step (+ autoreset)
        V(s') = model(obs') under no_grad                          bootstrap
        losses = a2c_td0_losses(...)                               pglab.losses.a2c (the note's math)
        (losses["loss"] / update_every).backward()                 gradient accumulation
        every update_every env-steps: clip_grad_norm_, optimizer.step(), one JSONL record,
                                      a checkpoint every checkpoint_every_opt_steps
        obs = obs'

Exact reuse of the bootstrap forward: inside an accumulation window the parameters do
not change, so ``model(obs')`` computed *with* gradient for the bootstrap of step t is
bit-for-bit the forward that step t+1 needs; the trainer keeps it (its detached value is
the target) instead of running the network twice. At a window's end the parameters
change, so the bootstrap there is a plain ``no_grad`` forward. ``--no-reuse-forward``
switches this off (DDP does, see :mod:`pglab.algos.a2c_distributed`).

Run directory (``--log-dir``)::

    config.json  train_log.jsonl  plots/  checkpoints/checkpoint_iter_*.pt  checkpoints/checkpoint_latest.pt

JSONL schema (frozen; ``RECORD_KEYS``; the first line is ``{"meta": {...}}`` with
``versions``, ``config``, ``run_id``, ``env``, ``num_params``). One record per optimiser
step, all values numbers:

==========================  ====================================================================
``opt_steps``               int, optimiser steps so far (the record's step)
``env_steps``               int, transitions so far, summed over environments (and ranks)
``loss``                    total loss, mean over the window's env-steps (before 1/update_every)
``loss/policy``             ``-mean(log pi(a|s) * adv)``
``loss/value``              ``value_coef * mean((target - V(s))^2)``
``loss/entropy``            ``-entropy_coef * mean(H)``
``stats/entropy``           mean policy entropy (nats)
``stats/advantage_mean``    mean TD error ``target - V(s)``
``stats/value_mean``        mean ``V(s)``
``stats/grad_norm``         gradient norm before clipping
``reward_mean``             mean reward per transition in the window
``done_rate``               fraction of transitions that terminated
``trunc_rate``              fraction of transitions that were truncated
``reset_rate``              fraction with ``done | trunc``
``episodes``                episodes finished in the window
``return/mean``             mean undiscounted return of those episodes *
``success_rate``            fraction of those episodes that terminated (PixelGoalEnv: reached the goal) *
``episode_length``          mean length of those episodes *
``dist_p10/p50/p90``        percentiles of ``info["dist"]`` at the window's last env-step
                            (only for environments that report ``dist``)
``perf/steps_per_s``        transitions per second over the window (wall clock)
``perf/iter_s``             seconds per optimiser step
``lr``                      learning rate
==========================  ====================================================================

\\* carried over from the latest window that finished an episode when none finished in
this one (0 before the first), so every record holds a number.

On an exception one record ``{"error": {"type", "message", "opt_steps", "env_steps",
"run_id"}}`` is appended and the exception propagates (exit 1). SIGINT/SIGTERM finish the
current window, save a checkpoint and exit 0.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from pglab.envs.base import EpisodeTracker
from pglab.errors import CheckpointError, ConfigError
from pglab.losses.a2c import a2c_td0_losses
from pglab.nets.pixel_cnn import PixelActorCriticCNN
from pglab.run.checkpoint import CheckpointManager, build_checkpoint, library_versions, load_checkpoint_file, load_state_dict_checked
from pglab.run.config import config_from_dict, config_to_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.progress import progress_bar
from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything
from pglab.run.signals import StopRequested
from pglab.validation import check_choice, check_device, check_int, check_non_negative, check_positive, check_range

KIND = "a2c-td0"
KINDS = (KIND, "a2c-stream-ac")
LOG_NAME = "train_log.jsonl"
RECORD_KEYS = (
    "opt_steps", "env_steps", "loss", "loss/policy", "loss/value", "loss/entropy", "stats/entropy",
    "stats/advantage_mean", "stats/value_mean", "stats/grad_norm", "reward_mean", "done_rate", "trunc_rate",
    "reset_rate", "episodes", "return/mean", "success_rate", "episode_length", "perf/steps_per_s", "perf/iter_s", "lr",
)
DIST_KEYS = ("dist_p10", "dist_p50", "dist_p90")
PIXEL_GOAL_FIELDS = ("grid_size", "cell_px", "stack_k", "frames_per_step", "max_steps", "step_cost", "alpha",
                     "goal_bonus", "tau", "k_consecutive")


@dataclass(frozen=True)
class A2CTrainConfig:
    """Streaming A2C / TD(0) (``--algo a2c``) or stream-AC(lambda) (``--algo stream-ac``)."""

    algo: Literal["a2c", "stream-ac"] = "a2c"
    """a2c: batched TD(0) A2C; stream-ac: Elsayed et al. (2024) stream-AC(lambda), one env"""
    env: str = "pglab:pixel-goal"
    """environment: pglab:pixel-goal, or gym:ID / gym:ALE/Pong-v5 (ale-py)"""
    num_envs: int = 256
    """environments stepped together (per rank)"""
    total_env_steps: int = 500_000
    """training budget in transitions, summed over environments (and ranks)"""
    update_every: int = 2
    """env-steps of gradient accumulation per optimiser step (loss scaled by 1/update_every)"""
    lr: float = 1e-3
    """Adam learning rate (a2c) or ObGD step size (stream-ac)"""
    gamma: float = 0.95
    """discount per env-step"""
    value_coef: float = 0.5
    """weight of the value loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    grad_clip: float = 0.5
    """max global gradient norm (a2c)"""
    adam_eps: float = 1e-5
    """Adam epsilon"""
    reuse_forward: bool = True
    """reuse the bootstrap forward as the next step's forward inside a window (exact)"""
    trace_lambda: float = 0.8
    """stream-ac: eligibility-trace decay lambda"""
    kappa: float = 2.0
    """stream-ac: ObGD overshooting bound kappa (actor uses 3.0 as in the paper)"""
    sparsity: float = 0.9
    """stream-ac: fraction of zeroed input weights per unit (sparse init)"""
    grid_size: int = 8
    """pixel-goal: board side in cells"""
    cell_px: int = 2
    """pixel-goal: pixels per cell"""
    stack_k: int = 1
    """pixel-goal: stacked frames per observation"""
    frames_per_step: int = 2
    """pixel-goal: frames (pixels of movement) per action"""
    max_steps: int = 32
    """pixel-goal: decisions before truncation"""
    step_cost: float = 0.01
    """pixel-goal: reward subtracted per step"""
    alpha: float = 0.1
    """pixel-goal: distance-shaping weight"""
    goal_bonus: float = 1.0
    """pixel-goal: reward on success"""
    tau: float = 0.5
    """pixel-goal: success radius in cells"""
    k_consecutive: int = 1
    """pixel-goal: consecutive steps within tau for success"""
    torso: Literal["auto", "small", "nature"] = "auto"
    """CNN torso (auto: nature for images >= 64 px)"""
    hidden: int = 0
    """width of the CNN's dense layer (0: torso default)"""
    checkpoint_every_opt_steps: int = 500
    """optimiser steps between checkpoints (and one at the end)"""
    seed: int = 0
    """seed of weights, env and action sampling"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    log_dir: Path | None = None
    """run directory (default runs/a2c/<timestamp>)"""
    resume: Path | None = None
    """continue the run in this directory (total_env_steps may grow)"""
    self_test: bool = False
    """run a tiny CPU end-to-end check, print a JSON summary, exit 0/1"""

    def __post_init__(self):
        check_choice("algo", self.algo, ("a2c", "stream-ac"))
        if not isinstance(self.env, str) or ":" not in self.env:
            raise ConfigError("env", self.env, "must look like 'pglab:pixel-goal' or 'gym:ALE/Pong-v5'")
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("total_env_steps", self.total_env_steps, minimum=1)
        if self.total_env_steps < self.num_envs:
            raise ConfigError("total_env_steps", self.total_env_steps, f"must be >= num_envs ({self.num_envs})")
        check_int("update_every", self.update_every, minimum=1)
        check_positive("lr", self.lr)
        check_range("gamma", self.gamma, 0.0, 1.0, low_inclusive=False)
        check_non_negative("value_coef", self.value_coef)
        check_non_negative("entropy_coef", self.entropy_coef)
        check_positive("grad_clip", self.grad_clip)
        check_positive("adam_eps", self.adam_eps)
        check_range("trace_lambda", self.trace_lambda, 0.0, 1.0)
        check_positive("kappa", self.kappa)
        check_range("sparsity", self.sparsity, 0.0, 1.0, high_inclusive=False)
        if self.algo == "stream-ac" and self.num_envs != 1:
            raise ConfigError("num_envs", self.num_envs, "stream-ac learns from one stream: use --num-envs 1")
        check_int("hidden", self.hidden, minimum=0)
        check_int("checkpoint_every_opt_steps", self.checkpoint_every_opt_steps, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)
        check_int("threads", self.threads, minimum=0)
        # the pixel-goal fields are validated by PixelGoalConfig itself
        if self.env == "pglab:pixel-goal":
            from pglab.envs.pixel_goal import PixelGoalConfig

            PixelGoalConfig(**self.env_kwargs())

    def env_kwargs(self) -> dict[str, Any]:
        if self.env == "pglab:pixel-goal":
            return {name: getattr(self, name) for name in PIXEL_GOAL_FIELDS}
        return {}

    @property
    def kind(self) -> str:
        return KIND if self.algo == "a2c" else "a2c-stream-ac"

    @property
    def env_steps_per_opt_step(self) -> int:
        return self.num_envs * self.update_every

    def total_opt_steps(self, world_size: int = 1) -> int:
        """Optimiser steps that cover ``total_env_steps`` (rounded up to whole windows)."""
        return math.ceil(self.total_env_steps / (self.env_steps_per_opt_step * world_size))


# Fields a resumed run may change (they do not alter the trajectory of training).
RESUMABLE_FIELDS = {"total_env_steps", "checkpoint_every_opt_steps", "device", "threads", "resume", "log_dir"}


def build_env(config: A2CTrainConfig, device: torch.device, *, seed: int):
    from pglab.envs.registry import make_env

    return make_env(config.env, config.num_envs, device=device, seed=seed, **config.env_kwargs())


def build_model(config: A2CTrainConfig, env) -> PixelActorCriticCNN:
    shape = tuple(env.observation_shape)
    if len(shape) != 3 or env.observation_dtype != torch.uint8:
        raise ConfigError("env", config.env, f"needs uint8 pixel observations [K, H, W], got {env.observation_dtype} {list(shape)}")
    if env.action_spec.kind != "discrete":
        raise ConfigError("env", config.env, "needs a discrete action space")
    return PixelActorCriticCNN(shape[0], shape[1], shape[2], int(env.action_spec.num_actions),
                               hidden=config.hidden or None, torso=config.torso)


def sample_actions(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """int64 ``[N]`` from float ``[N, A]`` logits by the Gumbel-max trick:
    ``argmax(logits + G)``, ``G = -log(-log U)``, with ``U`` from ``generator``."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-20, 1.0)))
    return torch.argmax(logits.detach() + gumbel, dim=1)




class WindowStats:
    """Device-side sums over one optimiser-step window (no host sync per env-step)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.carry = {"return/mean": 0.0, "success_rate": 0.0, "episode_length": 0.0}
        self.reset()

    def reset(self) -> None:
        zero = lambda: torch.zeros((), dtype=torch.float64, device=self.device)  # noqa: E731
        self.losses: dict[str, torch.Tensor] = {}
        self.sums = {name: zero() for name in ("reward", "done", "trunc", "episodes", "return", "success", "length")}
        self.transitions = 0
        self.env_steps = 0
        self.dist: torch.Tensor | None = None

    def add(self, losses: dict[str, torch.Tensor], reward, done, trunc, episode_returns, episode_lengths, dist) -> None:
        for name, value in losses.items():
            value = value.detach().to(torch.float64)
            self.losses[name] = self.losses[name] + value if name in self.losses else value
        finished = done | trunc
        self.sums["reward"] += reward.sum()
        self.sums["done"] += done.sum()
        self.sums["trunc"] += trunc.sum()
        self.sums["episodes"] += finished.sum()
        self.sums["return"] += episode_returns.sum()
        self.sums["success"] += done.sum()
        self.sums["length"] += episode_lengths.sum()
        self.transitions += reward.numel()
        self.env_steps += 1
        self.dist = dist

    def summary(self) -> dict[str, float]:
        """One host sync: the window's metrics as floats."""
        keys = list(self.losses) + list(self.sums)
        stacked = torch.stack([*self.losses.values(), *self.sums.values()]).tolist()
        values = dict(zip(keys, stacked))
        out = {name: values[name] / max(self.env_steps, 1) for name in self.losses}
        n = max(self.transitions, 1)
        out["reward_mean"] = values["reward"] / n
        out["done_rate"] = values["done"] / n
        out["trunc_rate"] = values["trunc"] / n
        out["reset_rate"] = (values["done"] + values["trunc"]) / n
        episodes = values["episodes"]
        out["episodes"] = episodes
        if episodes > 0:
            self.carry = {"return/mean": values["return"] / episodes, "success_rate": values["success"] / episodes,
                          "episode_length": values["length"] / episodes}
        out.update(self.carry)
        if self.dist is not None:
            quantiles = torch.quantile(self.dist.to(torch.float32), torch.tensor([0.1, 0.5, 0.9], device=self.dist.device)).tolist()
            out.update(dict(zip(DIST_KEYS, quantiles)))
        return out


class A2CTrainer:
    """The imperative shell: env + model + optimiser + logs + checkpoints.

    ``rank``/``world_size``/``ddp_model`` are set by :mod:`pglab.algos.a2c_distributed`;
    a single process leaves them at their defaults.
    """

    def __init__(self, config: A2CTrainConfig, *, run_dir: Path, checkpoint: dict[str, Any] | None = None,
                 rank: int = 0, world_size: int = 1, device: torch.device | None = None, wrap_model=None):
        self.config = config
        self.run_dir = run_dir
        self.rank, self.world_size = rank, world_size
        self.is_main = rank == 0
        self.device = device or resolve_device(config.device)
        if config.threads:
            torch.set_num_threads(config.threads)
        seed_everything(config.seed)
        self.env = build_env(config, self.device, seed=config.seed + 1000 * rank)
        self.model = build_model(config, self.env).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, eps=config.adam_eps)
        # DDP wraps the module after the weights are identical on every rank (same seed).
        self.train_model = wrap_model(self.model) if wrap_model is not None else self.model
        self.reuse_forward = config.reuse_forward and wrap_model is None
        self.action_generator = make_generator(config.seed + 7919 + 1000 * rank, self.device)
        self.tracker = EpisodeTracker(config.num_envs, self.device)
        self.stats = WindowStats(self.device)
        self.counters = {"env_steps": 0, "opt_steps": 0}
        self.run_id = uuid.uuid4().hex[:12]
        self.obs = self.env.reset(seed=config.seed + 1000 * rank).clone()
        if checkpoint is not None:
            self._restore(checkpoint)

    # -- checkpoints -----------------------------------------------------------------
    def _restore(self, checkpoint: dict[str, Any]) -> None:
        source = checkpoint["path"]
        load_state_dict_checked(self.model, checkpoint["models"]["model"], name="model", source=source)
        self.optimizer.load_state_dict(checkpoint["optimizers"]["adam"])
        # other DDP ranks keep their own action-noise stream (rank 0's is the one saved)
        restore_rng_state(checkpoint["rng"], {"actions": self.action_generator} if self.rank == 0 else {})
        self.counters.update({k: int(v) for k, v in checkpoint["counters"].items() if k in self.counters})
        extra = checkpoint.get("extra", {})
        self.tracker.load_state_dict(extra["tracker"])
        self.stats.carry = dict(extra.get("carry", self.stats.carry))
        if "env" in extra and hasattr(self.env, "load_state_dict") and self.rank == 0:
            self.env.load_state_dict(extra["env"])
            self.obs = self.env.frames.clone()
        else:
            # Environments without a saved state (Gymnasium/ALE) restart their episodes:
            # the resumed run is then not bit-identical, only statistically equivalent.
            self.obs = self.env.reset(seed=self.config.seed + 1000 * self.rank + self.counters["opt_steps"]).clone()
        if self.run_id and extra.get("run_id"):
            self.run_id = str(extra["run_id"])

    def checkpoint_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"tracker": self.tracker.state_dict(), "carry": dict(self.stats.carry),
                                 "run_id": self.run_id, "architecture": self.model.architecture()}
        if hasattr(self.env, "state_dict"):
            extra["env"] = self.env.state_dict()
        return build_checkpoint(
            kind=self.config.kind, config=config_to_dict(dataclasses.replace(self.config, resume=None, self_test=False)),
            counters=dict(self.counters), models={"model": self.model.state_dict()},
            optimizers={"adam": self.optimizer.state_dict()}, rng=capture_rng_state({"actions": self.action_generator}),
            extra=extra,
        )

    # -- one env-step ----------------------------------------------------------------
    def env_step(self, cached: tuple[torch.Tensor, torch.Tensor] | None, *, last_in_window: bool):
        """Act, step the env, bootstrap, backpropagate the scaled loss; returns the
        forward to reuse at the next env-step (or ``None``)."""
        cfg = self.config
        # forward: logits [N, A], V(s) [N]
        logits, values = cached if cached is not None else self.train_model(self.obs)
        # sample: a ~ Categorical(softmax(logits)), int32 for the env
        actions = sample_actions(logits, self.action_generator)
        next_obs, reward, done, trunc, info = self.env.step(actions.to(torch.int32))
        next_obs = next_obs.clone()  # the env may reuse its buffer
        # bootstrap: V(s') is a constant target
        reuse = self.reuse_forward and not last_in_window
        if reuse:
            next_logits, next_values = self.train_model(next_obs)
            v_next = next_values.detach()
            keep = (next_logits, next_values)
        else:
            with torch.no_grad():
                _, v_next = self.model(next_obs)
            keep = None
        losses = a2c_td0_losses(logits, actions, values, reward, done, trunc, v_next,
                                gamma=cfg.gamma, value_coef=cfg.value_coef, entropy_coef=cfg.entropy_coef)
        # accumulate: the window's gradient is the mean of its env-steps' gradients
        (losses["loss"] / cfg.update_every).backward()
        episode_returns, episode_lengths, _ = self.tracker.update(reward, done | trunc)
        self.stats.add(losses, reward, done, trunc, episode_returns, episode_lengths.to(torch.float64), info.get("dist"))
        self.counters["env_steps"] += cfg.num_envs * self.world_size
        self.obs = next_obs
        return keep

    def optimizer_step(self) -> torch.Tensor:
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.counters["opt_steps"] += 1
        return grad_norm

    def window(self, no_sync=None) -> torch.Tensor:
        """``update_every`` env-steps and one optimiser step; returns the grad norm."""
        cached = None
        for index in range(self.config.update_every):
            last = index == self.config.update_every - 1
            if no_sync is not None and not last:
                with no_sync():
                    cached = self.env_step(cached, last_in_window=last)
            else:
                cached = self.env_step(cached, last_in_window=last)
        return self.optimizer_step()

    # -- the loop --------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {"versions": library_versions(), "config": config_to_dict(self.config), "run_id": self.run_id,
                "kind": self.config.kind, "env": {"observation_shape": list(self.env.observation_shape),
                                                  "num_actions": int(self.env.action_spec.num_actions)},
                "num_params": sum(p.numel() for p in self.model.parameters()), "world_size": self.world_size,
                "device": str(self.device), "record_keys": list(RECORD_KEYS)}

    def train(self, *, resumed: bool, no_sync=None, echo=print) -> dict[str, Any]:
        cfg = self.config
        total = cfg.total_opt_steps(self.world_size)
        start = self.counters["opt_steps"]
        logger = manager = None
        if self.is_main:
            logger = MetricsLogger(self.run_dir, step_key="opt_steps", csv_name=None, jsonl_name=LOG_NAME,
                                   tensorboard_dir=None, resume_step=start if resumed else None)
            logger.write_meta(self.meta())
            manager = CheckpointManager(self.run_dir / "checkpoints", keep=3)
        interrupted = False
        last_record: dict[str, float] = {}
        bar = progress_bar(total, desc=f"train a2c --algo {cfg.algo}", initial=start, unit="opt") if self.is_main else None
        try:
            with StopRequested() as stop:
                tick = time.perf_counter()
                while self.counters["opt_steps"] < total:
                    grad_norm = self.window(no_sync)
                    if self.is_main:
                        now = time.perf_counter()
                        elapsed, tick = now - tick, now
                        record = self.stats.summary()
                        record.update({"env_steps": self.counters["env_steps"], "stats/grad_norm": float(grad_norm),
                                       "perf/steps_per_s": cfg.env_steps_per_opt_step * self.world_size / max(elapsed, 1e-9),
                                       "perf/iter_s": elapsed, "lr": self.optimizer.param_groups[0]["lr"]})
                        last_record = logger.log(self.counters["opt_steps"], record)
                        bar.update(1)
                        bar.set_postfix(ret=f"{record['return/mean']:.3f}", succ=f"{record['success_rate']:.2f}")
                    self.stats.reset()
                    done = self.counters["opt_steps"] >= total
                    stop_now = stop.requested
                    if self.world_size > 1:
                        stop_now = _any_rank(stop_now, self.device)
                    if self.is_main and (done or stop_now or self.counters["opt_steps"] % cfg.checkpoint_every_opt_steps == 0):
                        manager.save(self.counters["opt_steps"], self.checkpoint_dict())
                    if stop_now and not done:
                        interrupted = True
                        if self.is_main:
                            echo(f"interrupted: checkpoint saved at opt_steps={self.counters['opt_steps']} in {self.run_dir}", file=sys.stderr)
                        break
        except Exception as exc:
            if logger is not None:
                logger.write_record({"error": {"type": type(exc).__name__, "message": str(exc), "run_id": self.run_id,
                                               "opt_steps": self.counters["opt_steps"], "env_steps": self.counters["env_steps"]}})
            raise
        finally:
            if bar is not None:
                bar.close()
            if logger is not None:
                logger.close()
            self.env.close()
        return {"run_dir": str(self.run_dir), "opt_steps": self.counters["opt_steps"], "env_steps": self.counters["env_steps"],
                "interrupted": interrupted, "last": last_record}


def _any_rank(flag: bool, device: torch.device) -> bool:
    import torch.distributed as dist

    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def resolve_resume(config: A2CTrainConfig) -> tuple[A2CTrainConfig, dict[str, Any] | None]:
    """For ``--resume DIR``: the stored config with the resumable fields overridden."""
    if config.resume is None:
        return config, None
    checkpoint = load_checkpoint_file(Path(config.resume), kinds=KINDS)
    stored = config_from_dict(A2CTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    defaults, current, saved = config_to_dict(A2CTrainConfig()), config_to_dict(config), config_to_dict(stored)
    for field in dataclasses.fields(A2CTrainConfig):
        name = field.name
        if name in RESUMABLE_FIELDS or name == "self_test":
            continue
        if current[name] != saved[name] and current[name] != defaults[name]:
            raise ConfigError(name, getattr(config, name), f"differs from the resumed run's value {saved[name]!r}; only "
                              f"{', '.join(sorted(RESUMABLE_FIELDS))} may change on --resume")
    overrides = {name: getattr(config, name) for name in RESUMABLE_FIELDS if current[name] != defaults[name]}
    merged = dataclasses.replace(stored, **overrides)
    done = int(checkpoint["counters"]["env_steps"])
    if merged.total_env_steps < done:
        raise ConfigError("total_env_steps", merged.total_env_steps, f"is below the checkpoint's env_steps {done}")
    return merged, checkpoint


def run_dir_of(checkpoint: dict[str, Any]) -> Path:
    path = Path(checkpoint["path"])
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def train_a2c(config: A2CTrainConfig, *, echo=print) -> dict[str, Any]:
    """Train (or resume) a single-process run; returns a summary dict."""
    config, checkpoint = resolve_resume(config)
    if config.algo == "stream-ac":
        from pglab.algos.stream_ac import train_stream_ac

        return train_stream_ac(config, checkpoint=checkpoint, echo=echo)
    if checkpoint is not None:
        run_dir = run_dir_of(checkpoint)
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir("a2c"))
        write_run_config(run_dir, config_to_dict(config), kind=config.kind)
    trainer = A2CTrainer(config, run_dir=run_dir, checkpoint=checkpoint)
    return trainer.train(resumed=checkpoint is not None, echo=echo)


# -- the agent API (pglab.load_checkpoint) ----------------------------------------------
@dataclass
class A2CAgent:
    """A trained pixel actor-critic: ``act(obs)`` -> int32 actions, ``value(obs)``."""

    policy: PixelActorCriticCNN
    config: A2CTrainConfig
    kind: str
    counters: dict[str, int]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def model(self) -> nn.Module:
        return self.policy

    @torch.no_grad()
    def act(self, obs: torch.Tensor, *, deterministic: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """uint8 ``[N, K, H, W]`` -> int32 ``[N]`` (argmax, or a sample with ``generator``)."""
        logits, _ = self.policy(obs)
        if deterministic:
            return logits.argmax(dim=1).to(torch.int32)
        return sample_actions(logits, generator or torch.Generator(device=logits.device)).to(torch.int32)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, K, H, W]`` -> float32 ``[N]``."""
        return self.policy(obs)[1]

    def make_env(self, num_envs: int, *, seed: int, device: torch.device | str = "cpu"):
        return build_env(dataclasses.replace(self.config, num_envs=num_envs, total_env_steps=max(num_envs, self.config.total_env_steps)),
                         torch.device(device), seed=seed)


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "cpu") -> A2CAgent:
    """Rebuild the agent stored in an ``a2c-*`` checkpoint (from ``load_checkpoint_file``)."""
    if checkpoint.get("kind") not in KINDS:
        raise CheckpointError(f"checkpoint {checkpoint.get('path')}: kind={checkpoint.get('kind')!r} is not an a2c checkpoint")
    config = config_from_dict(A2CTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    arch = checkpoint.get("extra", {}).get("architecture")
    if arch is None:
        raise CheckpointError(f"checkpoint {checkpoint.get('path')}: no network architecture recorded")
    if checkpoint["kind"] == "a2c-stream-ac":
        from pglab.algos.stream_ac import StreamActorCritic

        policy = StreamActorCritic(**arch)
    else:
        policy = PixelActorCriticCNN(**arch)
    load_state_dict_checked(policy, checkpoint["models"]["model"], name="model", source=str(checkpoint.get("path")))
    policy.to(device).eval()
    return A2CAgent(policy=policy, config=config, kind=checkpoint["kind"], counters=dict(checkpoint["counters"]),
                    extra={k: v for k, v in checkpoint.get("extra", {}).items() if k in ("architecture", "run_id", "obs_norm")})


@torch.no_grad()
def evaluate_policy(act, env, *, episodes: int, max_env_steps: int = 100_000) -> dict[str, float]:
    """Run ``act(obs) -> int32 [N]`` until ``episodes`` episodes finished; success rate
    (fraction terminated), mean return and length of the first ``episodes`` episodes."""
    check_int("episodes", episodes, minimum=1)
    tracker = EpisodeTracker(env.num_envs, env.device)
    obs = env.reset()
    returns: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    successes: list[torch.Tensor] = []
    count = 0
    for _ in range(max_env_steps):
        obs, reward, done, trunc, _ = env.step(act(obs))
        episode_returns, episode_lengths, finished = tracker.update(reward, done | trunc)
        returns.append(episode_returns[finished])
        lengths.append(episode_lengths[finished])
        successes.append(done[finished])
        count += int(finished.sum())
        if count >= episodes:
            break
    all_returns = torch.cat(returns)[:episodes].to(torch.float64)
    all_lengths = torch.cat(lengths)[:episodes].to(torch.float64)
    all_success = torch.cat(successes)[:episodes].to(torch.float64)
    n = int(all_returns.numel())
    if n == 0:
        return {"episodes": 0, "success_rate": float("nan"), "return_mean": float("nan"), "length_mean": float("nan")}
    return {"episodes": n, "success_rate": float(all_success.mean()), "return_mean": float(all_returns.mean()),
            "return_std": float(all_returns.std()) if n > 1 else 0.0, "length_mean": float(all_lengths.mean()),
            "success_stderr": float(all_success.std() / math.sqrt(n)) if n > 1 else 0.0}


def self_test(echo=print) -> int:
    """Tiny end-to-end check on the CPU (no GPU, no ROM): 2 optimiser steps on 8 envs.

    Passes when the losses are finite, the parameters changed, the log holds a meta line
    plus one record per optimiser step with exactly the frozen keys, and the checkpoint
    loads back into an agent. Prints one JSON summary; returns 0 or 1.
    """
    import tempfile

    checks: dict[str, bool] = {}
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        config = A2CTrainConfig(num_envs=8, total_env_steps=32, update_every=2, device="cpu", log_dir=run_dir, seed=0)
        run_dir = create_run_dir(run_dir)
        trainer = A2CTrainer(config, run_dir=run_dir)
        before = [p.detach().clone() for p in trainer.model.parameters()]
        result = trainer.train(resumed=False, echo=echo)
        after = list(trainer.model.parameters())
        checks["parameters_changed"] = any(not torch.equal(a, b) for a, b in zip(before, after))
        lines = [json.loads(line) for line in (run_dir / LOG_NAME).read_text().splitlines()]
        checks["meta_first"] = "meta" in lines[0]
        records = lines[1:]
        checks["one_record_per_opt_step"] = len(records) == config.total_opt_steps() == 2
        checks["frozen_keys"] = all(set(r) == set(RECORD_KEYS) | set(DIST_KEYS) for r in records)
        checks["finite_losses"] = all(math.isfinite(r["loss"]) for r in records)
        checks["counters_increase"] = [r["opt_steps"] for r in records] == [1, 2] and records[-1]["env_steps"] == 32
        agent = agent_from_checkpoint(load_checkpoint_file(run_dir, kinds=KINDS))
        checks["checkpoint_loads"] = agent.counters["opt_steps"] == 2
        summary = {"self_test": "pass" if all(checks.values()) else "fail", "checks": checks,
                   "opt_steps": result["opt_steps"], "env_steps": result["env_steps"],
                   "loss": records[-1]["loss"] if records else None}
    echo(json.dumps(summary))
    return 0 if all(checks.values()) else 1
