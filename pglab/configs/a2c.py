"""Configs of ``pglab train a2c`` and ``pglab evaluate A2C_CHECKPOINT`` (torch-free).

``pglab train a2c --help`` builds its flag list from this module alone, so it never
imports torch. :mod:`pglab.algos.a2c`, :mod:`pglab.algos.stream_ac` and
:mod:`pglab.envs.pixel_goal` import their configs from here (and re-export them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import tyro

from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_memory,
    check_non_negative,
    check_path_fields,
    check_positive,
    check_range,
    check_seed,
    check_threads,
)

KIND = "a2c-td0"
STREAM_AC_KIND = "a2c-stream-ac"
KINDS = (KIND, STREAM_AC_KIND)
PIXEL_GOAL_ENV = "pglab:pixel-goal"

# The fields each --algo sets when they are left unset (None). stream-ac: the settings of
# Elsayed, Vasan & Mahmood (2024) and their code (one stream, gamma 0.99, ObGD with alpha 1).
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "a2c": {"num_envs": 256, "gamma": 0.95, "lr": 1e-3, "optimizer": "adam"},
    "stream-ac": {"num_envs": 1, "gamma": 0.99, "lr": 1.0, "optimizer": "obgd"},
}
OPTIMIZERS = {"a2c": ("adam",), "stream-ac": ("obgd", "adaptive-obgd")}
TORSOS = {"a2c": ("auto", "small", "nature", "minatar"), "stream-ac": ("auto", "small", "minatar", "atari")}


@dataclass(frozen=True)
class PixelGoalConfig:
    """Parameters of :class:`pglab.envs.pixel_goal.PixelGoalEnv`."""

    grid_size: int = 8
    """board side in cells"""
    cell_px: int = 2
    """pixels per cell side (image side = grid_size * cell_px)"""
    stack_k: int = 1
    """frames stacked in each observation (newest last)"""
    frames_per_step: int = 2
    """simulator frames an action is held for (pixels moved per decision)"""
    max_steps: int = 32
    """decisions before an episode is truncated"""
    step_cost: float = 0.01
    """reward subtracted every step"""
    alpha: float = 0.1
    """weight of the distance-shaping term alpha * (dist_{t-1} - dist_t)"""
    goal_bonus: float = 1.0
    """reward on success"""
    tau: float = 0.5
    """success radius in cells (0.5: the agent must stand on the goal cell)"""
    k_consecutive: int = 1
    """consecutive steps within tau needed for success"""

    def __post_init__(self):
        check_int("grid_size", self.grid_size, minimum=2)
        check_int("cell_px", self.cell_px, minimum=1)
        check_int("stack_k", self.stack_k, minimum=1)
        check_int("frames_per_step", self.frames_per_step, minimum=1)
        check_int("max_steps", self.max_steps, minimum=1)
        check_non_negative("step_cost", self.step_cost)
        check_non_negative("alpha", self.alpha)
        check_non_negative("goal_bonus", self.goal_bonus)
        check_positive("tau", self.tau)
        check_int("k_consecutive", self.k_consecutive, minimum=1)

    @property
    def image_size(self) -> int:
        return self.grid_size * self.cell_px


PIXEL_GOAL_FIELDS = tuple(PixelGoalConfig.__dataclass_fields__)


def pixel_goal_step_bytes(config: PixelGoalConfig) -> int:
    """One pixel-goal observation as the network's float32 input, ``stack_k x side**2 x 4``
    bytes: a lower bound of what one environment costs per step kept for the backward pass."""
    return config.stack_k * config.image_size**2 * 4


@dataclass(frozen=True)
class A2CTrainConfig:
    """Streaming A2C / TD(0) (``--algo a2c``) or stream-AC(lambda) (``--algo stream-ac``)."""

    # Aliases (flags and stored configs): --checkpoint-every-opt-steps counts
    # optimiser steps, the unit of save_interval; the flat pixel-goal names (--grid-size)
    # map to the nested pixel_goal config (--pixel-goal.grid-size).
    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {
        "checkpoint_every_opt_steps": "save_interval",
        "checkpoint_every": "save_interval",
        "torch_threads": "threads",
        "out": "log_dir",
        "output_dir": "log_dir",
        "kappa": "kappa_value",
        **{name: f"pixel_goal.{name}" for name in PIXEL_GOAL_FIELDS},
    }

    algo: Literal["a2c", "stream-ac"] = "a2c"
    """a2c: batched TD(0) A2C; stream-ac: Elsayed et al. (2024) stream-AC(lambda), one stream"""
    env: str = PIXEL_GOAL_ENV
    """environment: pglab:pixel-goal, or gym:ID (gym:CartPole-v1, gym:MinAtar/Breakout-v1, gym:ALE/Pong-v5)"""
    num_envs: int | None = None
    """environments stepped together (per rank); default 256 for a2c, 1 for stream-ac (its only value)"""
    total_env_steps: int = 500_000
    """training budget in transitions, summed over environments (and ranks)"""
    max_episode_steps: int | None = None
    """gym:ID only: the episodes' step limit (default: the registered one, e.g. 500 for CartPole-v1)"""
    update_every: int = 2
    """a2c: env-steps of gradient accumulation per optimiser step (loss scaled by 1/update_every)"""
    optimizer: Literal["adam", "obgd", "adaptive-obgd"] | None = None
    """a2c: adam; stream-ac: obgd (default) or adaptive-obgd (ObGD with Adam-style second moments)"""
    lr: float | None = None
    """Adam learning rate (a2c, default 1e-3) or ObGD step size alpha (stream-ac, default 1.0)"""
    gamma: float | None = None
    """discount per env-step; default 0.95 for a2c, 0.99 for stream-ac"""
    value_coef: float = 0.5
    """a2c: weight of the value loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    grad_clip: float = 0.5
    """a2c: max global gradient norm"""
    adam_eps: float = 1e-5
    """a2c: Adam epsilon"""
    reuse_forward: bool = True
    """a2c: reuse the bootstrap forward as the next step's forward inside a window (exact)"""
    obs_norm: bool = False
    """a2c: normalise the network's inputs by the running mean/variance of every observation batch"""
    reward_scale: bool = False
    """a2c: divide rewards by the running std of the discounted return (one return per environment)"""
    layer_norm: bool = False
    """a2c: stream-AC's layers: sparse init (sparsity), LayerNorm + LeakyReLU after every hidden layer"""
    trace_lambda: float = 0.8
    """stream-ac: eligibility-trace decay lambda"""
    kappa_policy: float = 3.0
    """stream-ac: ObGD overshooting bound kappa of the actor"""
    kappa_value: float = 2.0
    """stream-ac: ObGD overshooting bound kappa of the critic"""
    sparsity: float = 0.9
    """stream-ac, and a2c with --layer-norm: fraction of zeroed input weights per unit (sparse init)"""
    pixel_goal: PixelGoalConfig = field(default_factory=PixelGoalConfig)
    """PixelGoalEnv parameters (--pixel-goal.grid-size ...; ignored for gym envs)"""
    torso: Literal["auto", "small", "nature", "minatar", "atari"] = "auto"
    """network torso. a2c: small, nature or minatar (auto: minatar for boards, nature for images >= 64 px);
    stream-ac: small, minatar or atari (auto: an MLP for vectors, minatar for 10x10 boards, atari for >= 64 px)"""
    hidden: int = 0
    """width of the dense layers (0: the torso's default)"""
    save_interval: int = 500
    """optimiser steps between checkpoints (plus one at the end and on SIGINT/SIGTERM); stream-ac: transitions"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    seed: int = 0
    """seed of weights, env and action sampling"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    log_dir: Path | None = None
    """run directory (default runs/a2c-<YYYYmmdd-HHMMSS>)"""
    resume: Path | None = None
    """continue the run in this directory (total_env_steps, save_interval, device, threads may change)"""
    self_test: bool = False
    """run a tiny CPU end-to-end check, print a JSON summary, exit 0/1"""

    def __post_init__(self):
        check_path_fields(self)
        check_choice("algo", self.algo, ("a2c", "stream-ac"))
        if not isinstance(self.env, str) or ":" not in self.env:
            raise ConfigError("env", self.env, "must look like 'pglab:pixel-goal' or 'gym:ALE/Pong-v5'")
        for name, value in ALGO_DEFAULTS[self.algo].items():
            if getattr(self, name) is None:  # frozen: set through object.__setattr__
                object.__setattr__(self, name, value)
        assert self.num_envs is not None and self.lr is not None and self.gamma is not None  # set above
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("total_env_steps", self.total_env_steps, minimum=1)
        if self.max_episode_steps is not None:
            check_int("max_episode_steps", self.max_episode_steps, minimum=1)
            if not self.env.startswith("gym:"):
                raise ConfigError("max_episode_steps", self.max_episode_steps, "applies to gym:ID environments only")
        check_int("update_every", self.update_every, minimum=1)
        check_choice("optimizer", self.optimizer, OPTIMIZERS[self.algo])
        check_positive("lr", self.lr)
        check_range("gamma", self.gamma, 0.0, 1.0, low_inclusive=False)
        check_non_negative("value_coef", self.value_coef)
        check_non_negative("entropy_coef", self.entropy_coef)
        check_positive("grad_clip", self.grad_clip)
        check_positive("adam_eps", self.adam_eps)
        check_range("trace_lambda", self.trace_lambda, 0.0, 1.0)
        check_positive("kappa_policy", self.kappa_policy)
        check_positive("kappa_value", self.kappa_value)
        check_range("sparsity", self.sparsity, 0.0, 1.0, high_inclusive=False)
        check_choice("torso", self.torso, TORSOS[self.algo])
        check_int("hidden", self.hidden, minimum=0)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        check_threads("threads", self.threads)
        if not isinstance(self.pixel_goal, PixelGoalConfig):
            raise ConfigError("pixel_goal", self.pixel_goal, "must be a PixelGoalConfig")
        if self.env == PIXEL_GOAL_ENV:
            self._check_memory()
        if self.resume is None:
            # Cross-field checks. On --resume the flags are only part of the config: the
            # shell re-validates the merged config (with resume=None) instead.
            if self.algo == "stream-ac" and self.num_envs != 1:
                raise ConfigError("num_envs", self.num_envs, "stream-AC runs one stream")
            if self.total_env_steps < self.num_envs:
                raise ConfigError("total_env_steps", self.total_env_steps, f"must be >= num_envs ({self.num_envs})")

    def _check_memory(self) -> None:
        """The pixel-goal observations of an accumulation window (update_every steps plus the
        bootstrap step, every environment) against the memory available now; gym envs'
        observation sizes are known only once the env is built."""
        assert self.num_envs is not None  # __post_init__ sets it first
        window = self.update_every + 1
        per_env = window * pixel_goal_step_bytes(self.pixel_goal)
        side = self.pixel_goal.image_size
        check_memory(
            "pixel_goal.grid_size", self.pixel_goal.grid_size, per_env, f"one environment's {side}x{side} images"
        )
        check_memory(
            "num_envs",
            self.num_envs,
            self.num_envs * per_env,
            f"{window} steps of {side}x{side}x{self.pixel_goal.stack_k} float32 observations per environment",
        )

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the environment factory (pixel-goal: its config fields; a
        Gymnasium id: its time limit when given)."""
        if self.env == PIXEL_GOAL_ENV:
            return {name: getattr(self.pixel_goal, name) for name in PIXEL_GOAL_FIELDS}
        if self.max_episode_steps is not None:
            return {"max_episode_steps": self.max_episode_steps}
        return {}

    @property
    def kind(self) -> str:
        """The checkpoint kind this config trains."""
        return KIND if self.algo == "a2c" else STREAM_AC_KIND

    @property
    def env_steps_per_opt_step(self) -> int:
        assert self.num_envs is not None  # __post_init__ sets it
        return self.num_envs * self.update_every

    def total_opt_steps(self, world_size: int = 1) -> int:
        """Optimiser steps that cover ``total_env_steps`` (rounded up to whole windows);
        stream-ac: one per transition."""
        if self.algo == "stream-ac":
            return self.total_env_steps
        return math.ceil(self.total_env_steps / (self.env_steps_per_opt_step * world_size))


@dataclass(frozen=True)
class A2CEvaluateConfig:
    """``pglab evaluate A2C_CHECKPOINT``: mean return and length of a policy (and its success
    rate, where the environment defines success)."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"n_episodes": "episodes", "torch_threads": "threads", "out": "output"}

    checkpoint: Annotated[Path, tyro.conf.Positional]
    """checkpoint file or run directory"""
    episodes: int = 2000
    """episodes to average over"""
    num_envs: int = 256
    """environments stepped together"""
    policy: Literal["trained", "random"] = "trained"
    """trained: the checkpoint's policy; random: uniform actions (a baseline)"""
    stochastic: bool = False
    """sample actions instead of taking the argmax"""
    seed: int = 12345
    """seed of the evaluation environments (differs from training seeds)"""
    device: str = "auto"
    """auto | cpu | cuda"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    output: Path | None = None
    """JSON file for the result (default: RUN_DIR/evaluation_<policy>.json for a checkpoint in a run directory)"""

    def __post_init__(self):
        check_path_fields(self)
        check_int("episodes", self.episodes, minimum=1)
        check_int("num_envs", self.num_envs, minimum=1)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        check_threads("threads", self.threads)
        if self.output is not None and (str(self.output).strip() == "" or Path(self.output).is_dir()):
            raise ConfigError("output", str(self.output), "must name a JSON file (not a directory)")


A2CEvalConfig = A2CEvaluateConfig  # an alias of the class
