"""PPO / VPG+GAE / REINFORCE on any batched environment (``pglab train ppo``).

Reads like CleanRL's ``ppo.py``: a config (:class:`pglab.configs.ppo.PPOConfig`), a build
(:func:`build_training`), then a loop in visible phases (:func:`train_iterations`)

    collect rollout -> bootstrap value -> advantages -> optimise (K epochs) -> log
    (collect_rollout)                    (compute_advantages) (optimise)   (log_row)

inside the shared training shell (:class:`pglab.run.shell.TrainingRun`), which owns the
run directory, resume, device/threads/seed, logs (with the ``perf/*`` metrics),
checkpoints, SIGINT/SIGTERM and ``summary.json``. The update itself is
:func:`pglab.algos.policy_update.build_policy_update`'s, over the shared
:func:`pglab.algos.onpolicy.onpolicy_update` (the same code the Deep-PSO trainer uses),
so ``--algo reinforce_raw | vpg_gae | ppo`` switch the estimator and loss, not the loop.

Environments: ``--env gym:ID`` (any Gymnasium id with a Discrete or float Box action
space, through gymnasium's vector envs) or ``--env pglab:NAME`` (native batched envs).
Box actions are sampled from a Gaussian and clipped to the bounds when they reach the
environment; log-probabilities are of the raw sample (as in SB3 and CleanRL).

Termination vs truncation: ``done`` (terminated) stops the bootstrap; ``trunc`` (a time
limit) bootstraps from ``V(final_obs)``, the value of the pre-reset observation, and
stops the advantage recursion (see :func:`pglab.estimators.compute_gae`).

Normalisation (``--normalize-obs`` / ``--normalize-reward``): SB3's ``VecNormalize``
(:class:`pglab.envs.normalize.ObsRewardNormalizer`) sits between the environment and the
policy; the rollout stores normalised observations and rewards, episode statistics use
the raw rewards, and the observation statistics travel with the checkpoint so that
:class:`PPOAgent` (``pglab evaluate``, ``pglab.load_checkpoint(...).predict``) takes raw
observations.

Schedules: ``--lr-schedule`` and ``--clip-schedule`` (``constant`` | ``linear``: the value
times ``1 - (k - 1) / K`` in iteration ``k`` of ``K``).

Callbacks (Python API): ``train_ppo(config, callbacks=[...])`` calls ``on_step(StepInfo)``
after every vector-env step and ``on_rollout_end(RolloutInfo)`` after every rollout; a
callback returning ``False`` stops the run after the current iteration, with a checkpoint.

Exact resume: the trainer registers the network, the optimiser, its generators, the
environments, the running episodes, the episode statistics of the current metric row,
the normalisation statistics and the current observations with the shell once
(``run.track``), which checkpoints and restores them. Environments snapshot themselves
(``state_dict``, :mod:`pglab.envs.base`): pglab's native envs, Gymnasium's classic
control and toy text envs and the vectorised MuJoCo tasks
(:mod:`pglab.envs.mujoco_vector`) are captured; an environment that cannot capture its
state (Box2D, other MuJoCo envs, ``--vectorization async``, Atari) resumes from freshly
reset copies, with a warning. So on the CPU, N iterations + ``--resume`` + N more == 2N
iterations, bit for bit, when the environment is captured and the budget of the first
run was already 2N or both schedules are constant (a linear schedule is a function of
the total budget, so extending the budget changes the rest of it).
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pglab.agent import Agent, ObsSpec, check_observation, numeric_tensor
from pglab.algos.onpolicy import OnPolicyBatch
from pglab.algos.policy_update import PolicyUpdate, build_policy_update
from pglab.configs.ppo import (  # PPOConfig re-exported: pglab.algos.ppo.PPOConfig keeps working
    OnPolicyHyperparams,
    PPOConfig,
    schedule_fraction,
)
from pglab.envs.atari import evaluation_options, reported_episodes
from pglab.envs.base import ActionSpec, EpisodeTracker, checkpointed
from pglab.envs.gym_adapter import GymVectorAdapter
from pglab.envs.normalize import ObsRewardNormalizer
from pglab.envs.registry import make_env
from pglab.errors import CheckpointError, ConfigError
from pglab.estimators import compute_gae, reward_to_go
from pglab.losses.ppo_fused import blas_threads
from pglab.nets.actor_critic import (
    CategoricalActorCritic,
    GaussianActorCritic,
    GSDEActorCritic,
    NumpyRolloutStep,
    build_actor_critic,
)
from pglab.nets.nature_cnn import NatureCNNActorCritic
from pglab.report import warn_rounded_budget
from pglab.run.atomic import atomic_write_json
from pglab.run.checkpoint import load_state_dict_checked
from pglab.run.config import config_from_dict
from pglab.run.device import resolve_device
from pglab.run.episodes import EpisodeStats
from pglab.run.progress import progress_bar
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun
from pglab.run.state import Value
from pglab.validation import check_int

KIND = "ppo"

# What a resume may change besides the shell's own fields (device, threads, log_dir,
# save_interval, tensorboard): the budget, the logging cadence and the final evaluation.
# Extending total_steps with a linear schedule changes the rest of that schedule.
SPEC = TrainerSpec(
    system="ppo",
    config_class=PPOConfig,
    kinds=(KIND,),
    step_key="iteration",
    resumable=frozenset({"total_steps", "log_interval", "eval_episodes"}),
    total_steps=lambda config: config.num_iterations,
    budget_field="total_steps",
)

# Per-step rollout outputs, in the order the trainer stacks them into [N, T, ...] buffers.
ROLLOUT_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "dones", "truncs", "trunc_values", "raw_rewards")

# The networks an agent runs: actor-critic MLPs (Discrete, Box, Box with gSDE) and the Nature CNN.
PolicyNetwork = CategoricalActorCritic | GaussianActorCritic | GSDEActorCritic | NatureCNNActorCritic
MLP_NETWORKS = (CategoricalActorCritic, GaussianActorCritic, GSDEActorCritic)


# --------------------------------------------------------------------------------------
# The agent: network + what it needs to talk to the environment
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ActionInfo:
    """The action space as the network and the environment see it (checkpointed)."""

    kind: Literal["discrete", "continuous"]
    size: int
    """number of actions (discrete) or flattened action dimension (continuous)"""
    shape: tuple[int, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    @classmethod
    def from_spec(cls, spec: ActionSpec) -> ActionInfo:
        if spec.kind == "discrete":
            if spec.num_actions is None or spec.num_actions < 2:
                raise ConfigError("env", f"Discrete({spec.num_actions})", "needs at least 2 actions")
            return cls("discrete", int(spec.num_actions))
        if spec.kind == "continuous":
            size = int(np.prod(spec.shape)) if spec.shape else 1
            return cls("continuous", size, tuple(spec.shape), spec.low, spec.high)
        raise ConfigError("env", spec.kind, "unsupported action space: ppo handles Discrete and Box actions")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "size": self.size,
            "shape": list(self.shape),
            "low": None if self.low is None else list(self.low),
            "high": None if self.high is None else list(self.high),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionInfo:
        return cls(
            data["kind"],
            int(data["size"]),
            tuple(data["shape"]),
            None if data["low"] is None else tuple(data["low"]),
            None if data["high"] is None else tuple(data["high"]),
        )


class PPOAgent(Agent):
    """A trained actor-critic ready to act (the :class:`pglab.agent.Agent` API).

    - ``act(obs, deterministic=True)``: tensors ``[B, *obs_shape]`` in, environment-ready
      actions out (int64 ``[B]`` for Discrete, float ``[B, *shape]`` clipped to the Box);
    - ``predict(obs, deterministic=True)``: the same on NumPy arrays; one unbatched vector
      observation ``[obs_dim]`` gives one action (SB3's habit);
    - ``value(obs)``: the critic's ``V(s)``, float ``[B]``.

    Observations are the environment's raw ones: with ``--normalize-obs`` the agent
    applies the training run's final (frozen) statistics itself.

    Attributes: ``kind`` (``"ppo"``), ``config`` (:class:`PPOConfig`), ``device``,
    ``policy`` (the network, actor and critic: a :data:`PolicyNetwork`),
    ``action`` (:class:`ActionInfo`), ``obs_dim``, ``normalizer``
    (:class:`~pglab.envs.normalize.ObsRewardNormalizer` or ``None``).
    """

    kind = KIND

    def __init__(
        self,
        policy: PolicyNetwork,
        config: PPOConfig,
        action: ActionInfo,
        obs_dim: int,
        device: torch.device,
        normalizer: ObsRewardNormalizer | None = None,
    ):
        self.policy, self.config, self.action, self.obs_dim = policy, config, action, obs_dim
        self.device = device
        self.normalizer = normalizer
        if action.kind == "continuous":
            shape = action.shape or (action.size,)
            low = action.low if action.low is not None else (-math.inf,) * action.size
            high = action.high if action.high is not None else (math.inf,) * action.size
            self._low = torch.tensor(low, dtype=torch.float32, device=device).reshape(shape)
            self._high = torch.tensor(high, dtype=torch.float32, device=device).reshape(shape)
            self._low_array, self._high_array = self._low.cpu().numpy(), self._high.cpu().numpy()

    @property
    def obs_spec(self) -> ObsSpec:
        """What :meth:`act` and :meth:`value` read: uint8 pixels ``[B, C, H, W]`` for the
        Nature CNN, else ``[B, ...]`` rows of ``obs_dim`` finite numbers or booleans (read as
        float32)."""
        if isinstance(self.policy, NatureCNNActorCritic):
            return ObsSpec(("B", *self.policy.obs_shape), "pixels")
        return ObsSpec(None, "real", torch.float32, per_row=self.obs_dim, booleans=True)

    def checked_obs(self, obs: Any, method: str) -> torch.Tensor:
        """``obs`` checked against :attr:`obs_spec`, cast and moved to the agent's device."""
        return check_observation(obs, self.obs_spec, where=f"PPOAgent.{method}", device=self.device)

    def predict(self, obs: Any, deterministic: bool = True) -> Any:
        """:meth:`act` on a NumPy array ``[B, *obs_shape]``; one unbatched vector
        observation ``[obs_dim]`` gives one action (SB3's habit)."""
        tensor = numeric_tensor(obs, where="PPOAgent.predict", device=self.device)
        if self.obs_dim > 1 and tuple(tensor.shape) == (self.obs_dim,):  # one vector observation, unbatched
            return super().predict(tensor[None], deterministic=deterministic)[0]
        return super().predict(tensor, deterministic=deterministic)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)`` float ``[B]`` for observations ``[B, *obs_shape]`` (checked as for :meth:`act`)."""
        obs = self.checked_obs(obs, "value")
        with torch.no_grad():
            return self.policy.value(self.policy_input(obs))

    def policy_input(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations -> what the networks were trained on (normalised with the
        frozen statistics when the run normalised observations)."""
        if self.normalizer is None or not self.normalizer.normalize_obs_enabled:
            return obs
        return self.normalizer.normalize_obs(obs)

    def to_env(self, raw_actions: torch.Tensor) -> torch.Tensor:
        """Network actions -> what the environment accepts: Box actions are reshaped to
        ``[B, *shape]`` and clipped to ``[low, high]``; discrete ones pass through."""
        if self.action.kind == "discrete":
            return raw_actions
        if raw_actions.device.type == "cpu" and not raw_actions.requires_grad:
            return torch.from_numpy(self.to_env_arrays(raw_actions.numpy()))
        shaped = raw_actions.reshape(raw_actions.shape[0], *self._low.shape)
        return torch.maximum(torch.minimum(shaped, self._high), self._low)

    def to_env_arrays(self, raw_actions: np.ndarray) -> np.ndarray:
        """:meth:`to_env` on a NumPy array. NumPy's minimum/maximum on a view: the same
        values as torch's (NaN included), ~1 us each against ~4 in torch."""
        if self.action.kind == "discrete":
            return raw_actions
        array = raw_actions.reshape(raw_actions.shape[0], *self._low_array.shape)
        return np.maximum(np.minimum(array, self._high_array), self._low_array)

    def act(
        self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Environment-ready actions for ``obs [B, *obs_shape]``: the mode/mean when
        ``deterministic``, else a sample (drawn with ``generator`` when given).

        ``obs`` is a tensor (see :attr:`obs_spec`): MLP agents take rows of ``obs_dim``
        finite numbers, cast to float32 (float64 and integers included); the Nature CNN
        takes pixels 0..255 (integers, or integral floats, cast to uint8). A wrong type,
        shape or dtype, a NaN/inf or a pixel out of range raises
        :class:`~pglab.agent.ObservationError`."""
        obs = self.policy_input(self.checked_obs(obs, "act"))
        with torch.no_grad():
            raw = self.policy.deterministic_action(obs) if deterministic else self.policy.act(obs, generator)[0]
        return self.to_env(raw)


def build_agent(
    config: PPOConfig,
    obs_dim: int,
    action: ActionInfo,
    device: torch.device,
    normalizer: ObsRewardNormalizer | None = None,
    *,
    image_shape: tuple[int, int, int] | None = None,
) -> PPOAgent:
    """The agent's network: the Nature CNN for image observations (``image_shape`` given,
    see :func:`image_shape_of`), else actor and critic MLPs of ``config.hidden_dims``
    (the critic's of ``config.critic_hidden_dims`` where set)."""
    if image_shape is not None:
        if action.kind != "discrete":
            raise ConfigError("env", f"{action.kind} actions", "the Nature CNN policy needs Discrete actions")
        cnn = NatureCNNActorCritic(image_shape, action.size).to(device)
        return PPOAgent(cnn, config, action, obs_dim, device, normalizer)
    if config.use_sde and action.kind != "continuous":
        raise ConfigError("use_sde", True, "gSDE needs Box actions; this environment's actions are Discrete")
    mlp = build_actor_critic(
        obs_dim,
        action.kind,
        action.size,
        config.hidden_dims,
        activation=config.activation,
        log_std_init=config.log_std_init,
        ortho_init=config.ortho_init,
        use_sde=config.use_sde,
        critic_hidden_dims=config.critic_hidden_dims,
    ).to(device)
    assert isinstance(mlp, MLP_NETWORKS)  # the builder's three kinds
    return PPOAgent(mlp, config, action, obs_dim, device, normalizer)


def image_shape_of(env: Any) -> tuple[int, int, int] | None:
    """``(C, H, W)`` when ``env`` observes images the Nature CNN can read (uint8 ``[C, H, W]``,
    ``H, W >= 36``: Atari's ``[4, 84, 84]``), else ``None`` (flattened into the MLPs, as
    SB3's ``MlpPolicy`` would; e.g. PixelGoalEnv's 16x16 boards)."""
    shape = tuple(int(s) for s in env.observation_shape)
    if env.observation_dtype == torch.uint8 and len(shape) == 3 and min(shape[1:]) >= 36:
        return shape[0], shape[1], shape[2]
    return None


def build_normalizer(config: PPOConfig, obs_shape: tuple[int, ...]) -> ObsRewardNormalizer | None:
    """The run's :class:`ObsRewardNormalizer` (``None`` when nothing is normalised);
    the reward's discounted return uses ``normalize_gamma``, by default the update's
    ``gamma`` (as RL-Zoo does when an entry sets gamma)."""
    if not config.normalizes:
        return None
    return ObsRewardNormalizer(
        obs_shape,
        config.num_envs,
        normalize_obs=config.normalize_obs,
        normalize_reward=config.normalize_reward,
        clip_obs=config.clip_obs,
        clip_reward=config.clip_reward,
        gamma=config.update.gamma if config.normalize_gamma is None else config.normalize_gamma,
        epsilon=config.normalize_epsilon,
    )


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "auto") -> PPOAgent:
    """The :class:`PPOAgent` stored in a loaded ``ppo`` checkpoint (``pglab.load_checkpoint``):
    the network (``models["agent"]``), the spaces (``extra["action"]``, ``extra["obs_dim"]``,
    ``extra["image_shape"]``) and, for a run that normalised observations, the final
    statistics (``extra["normalizer"]``, frozen).

    ``device``: a ``torch.device`` or ``auto``/``cpu``/``cuda[:N]``."""
    device = resolve_device(device) if isinstance(device, str) else torch.device(device)
    source = checkpoint.get("path", "<memory>")
    extra = checkpoint.get("extra", {})
    try:
        config = config_from_dict(PPOConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
        action = ActionInfo.from_dict(extra["action"])
        obs_dim = int(extra["obs_dim"])
        normalizer = _stored_normalizer(config, extra["normalizer"]) if config.normalizes else None
        image_shape = extra.get("image_shape")  # None for MLP agents
        weights = checkpoint["models"]["agent"]
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {source}: not a complete ppo checkpoint (missing {exc})") from exc
    shape = None if image_shape is None else (int(image_shape[0]), int(image_shape[1]), int(image_shape[2]))
    agent = build_agent(config, obs_dim, action, device, normalizer, image_shape=shape)
    load_state_dict_checked(agent.policy, weights, name="agent", source=source)
    agent.policy.eval()
    return agent


def _stored_normalizer(config: PPOConfig, stats: dict[str, Any]) -> ObsRewardNormalizer:
    """The run's normaliser with its stored statistics, frozen: evaluation applies them and
    never updates them."""
    normalizer = build_normalizer(config, tuple(stats["obs_rms"]["mean"].shape))
    assert normalizer is not None  # the config normalises
    normalizer.load_state_dict(stats)
    normalizer.training = False
    return normalizer


# --------------------------------------------------------------------------------------
# Callbacks (Python API, SB3's BaseCallback idea without the class hierarchy)
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepInfo:
    """What ``on_step`` receives after each step of the ``num_envs`` copies (``N``).

    Tensors are the trainer's own (on its device): read them, do not modify them."""

    iteration: int
    """the iteration this rollout belongs to (1-based)"""
    rollout_step: int
    """the step within the rollout, 0 .. num_steps - 1"""
    env_steps: int
    """environment steps so far, this step included (summed over the copies)"""
    actions: torch.Tensor
    """what was sent to the environment: int64 ``[N]`` or float ``[N, *shape]`` (clipped to the Box)"""
    rewards: torch.Tensor
    """raw (unnormalised) rewards ``[N]``"""
    dones: torch.Tensor
    """bool ``[N]``: the episode terminated at this step"""
    truncs: torch.Tensor
    """bool ``[N]``: the episode was cut by a time limit at this step"""
    obs: torch.Tensor
    """the next observations ``[N, *obs_shape]`` as the policy sees them (normalised if enabled;
    reset ones where an episode ended)"""
    agent: PPOAgent


@dataclass(frozen=True)
class RolloutInfo:
    """What ``on_rollout_end`` receives once a rollout is collected (before the update)."""

    iteration: int
    env_steps: int
    """environment steps so far, this rollout included"""
    episode_returns: torch.Tensor
    """float64 ``[E]``: raw returns of the E episodes that ended in this rollout (E may be 0)"""
    episode_lengths: torch.Tensor
    """``[E]``: their lengths"""
    rollout: dict[str, torch.Tensor]
    """the batch-major ``[N, T, ...]`` buffers: ``obs``, ``actions`` (network output, unclipped),
    ``log_probs``, ``values``, ``rewards`` (what the update sees: normalised if enabled),
    ``dones``, ``truncs``"""
    agent: PPOAgent


class PPOCallback:
    """Base class (optional: any object with an ``on_step`` and/or ``on_rollout_end``
    method works). Return ``False`` to stop training: the iteration in progress is finished
    (its rollout and update), a checkpoint is saved and :func:`train_ppo` returns with
    ``interrupted`` and ``stopped_by_callback`` set; ``--resume`` continues it. Any other
    return value (``None`` included) continues."""

    def on_step(self, info: StepInfo) -> bool | None:
        return None

    def on_rollout_end(self, info: RolloutInfo) -> bool | None:
        return None


class _Callbacks:
    """The ``on_step`` / ``on_rollout_end`` hooks of the callbacks, and whether one of them
    returned ``False`` (stop after this iteration)."""

    def __init__(self, callbacks: Sequence[Any]):
        for callback in callbacks:
            if not any(callable(getattr(callback, hook, None)) for hook in ("on_step", "on_rollout_end")):
                raise ConfigError(
                    "callbacks", type(callback).__name__, "each callback needs an on_step and/or on_rollout_end method"
                )
        self.step_hooks = [c.on_step for c in callbacks if callable(getattr(c, "on_step", None))]
        self.rollout_hooks = [c.on_rollout_end for c in callbacks if callable(getattr(c, "on_rollout_end", None))]
        self.stop = False

    def on_step(self, info: StepInfo) -> None:
        self.stop |= any([hook(info) is False for hook in self.step_hooks])  # a list: every hook is called

    def on_rollout_end(self, info: RolloutInfo) -> None:
        self.stop |= any([hook(info) is False for hook in self.rollout_hooks])


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------
@dataclass
class PPORunResult:
    run_dir: Path
    iterations: int
    env_steps: int
    train_seconds: float
    """wall-clock seconds of the iterations this call ran (a resume counts its own only; the shell's ``wall_time``)"""
    evaluation: dict[str, float] | None
    interrupted: bool
    exit_code: int
    """the command's exit code: 0, or :data:`pglab.errors.EXIT_INTERRUPTED` after a stop"""
    config: PPOConfig
    """the run's configuration (a resumed run's own, with what the resume applied)"""
    stopped_by_callback: bool = False
    """a callback returned ``False`` (the run stopped early with a checkpoint; ``interrupted`` is set too)"""
    random_policy: dict[str, float] | None = None
    """:func:`random_reference` on the evaluation's episodes (``None`` where there was no evaluation)"""
    last_return: float | None = None
    """mean return of the training episodes of the last logged iteration (``None``: none ended)"""


@dataclass
class PPOTraining:
    """What a run builds once and carries from one iteration to the next (all of it
    registered with the shell, which checkpoints and restores it)."""

    env: Any
    agent: PPOAgent
    update: PolicyUpdate
    """the update and its optimiser: PPO's closed-form gradient where it models the run, else autograd"""
    action_generator: torch.Generator
    """policy sampling (on the device)"""
    minibatch_generator: torch.Generator
    """minibatch shuffles (CPU)"""
    normalizer: ObsRewardNormalizer | None
    tracker: EpisodeTracker
    """running return and length of every copy's current episode"""
    episodes: EpisodeStats
    """the episodes that ended since the last metric row"""
    obs: Value
    """the current observations ``[N, *obs_shape]``, as the policy sees them"""
    last_return: float | None = None
    """mean return of the episodes that ended in the last logged iteration (this process's)"""


@dataclass
class Rollout:
    """One rollout, batch-major ``[N, T, ...]`` (``N`` copies, ``T`` steps)."""

    obs: torch.Tensor
    actions: torch.Tensor
    """the network's actions (unclipped)"""
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    """what the update learns from (normalised if enabled)"""
    dones: torch.Tensor
    truncs: torch.Tensor
    trunc_values: torch.Tensor
    """``V(final_obs)`` where a time limit cut the episode, 0 elsewhere"""
    raw_rewards: torch.Tensor
    """the environment's rewards (the episode statistics sum these)"""
    last_value: torch.Tensor
    """``[N]``: ``V(s_T)``, the bootstrap value of the state after the rollout"""
    reported: list[tuple[torch.Tensor, torch.Tensor]]
    """per step, the ``(returns, lengths) [N]`` of the episodes the environment reports itself
    (Atari's whole games); empty for other environments"""

    def buffers(self) -> dict[str, torch.Tensor]:
        """The buffers :class:`RolloutInfo` hands to callbacks."""
        names = ("obs", "actions", "log_probs", "values", "rewards", "dones", "truncs")
        return {name: getattr(self, name) for name in names}


def train_ppo(
    config: PPOConfig,
    *,
    given: frozenset[str] | None = None,
    echo: Callable[..., None] = print,
    stop_after: int | None = None,
    callbacks: Sequence[Any] = (),
) -> PPORunResult:
    """Train (or, with ``config.resume``, continue) a run.

    Args:
        config: the run's configuration.
        given: the fields the user set on the command line or in ``--config`` (what a
            ``--resume`` applies or refuses); ``None`` (the Python API): the fields that
            differ from their defaults.
        echo: where messages for the user go (``print``-like).
        stop_after: behave as if SIGTERM arrived after this many iterations of this
            process (checkpoint, then return): the test hook for exact resume.
        callbacks: objects with ``on_step(StepInfo)`` and/or ``on_rollout_end(RolloutInfo)``
            (see :class:`PPOCallback`); one returning ``False`` stops the run cleanly.
    """
    hooks = _Callbacks(list(callbacks))  # rejects an object with neither hook before anything is built
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config = run.config
        warn_rounded_budget(
            "total_steps",
            config.total_steps,
            config.batch_size,
            config.num_iterations,
            "iterations",
            "num_envs x num_steps steps",
        )
        env = make_env(config.env, config.num_envs, device=run.device, seed=config.seed, **env_options(config))
        try:
            training = build_training(run, config, env)
            train_seconds = train_iterations(run, config, training, hooks)
        finally:
            env.close()
        evaluation = final_evaluation(run, config, training.agent)
        random_policy = None
        if evaluation is not None:
            random_policy = random_reference(
                training.agent, config.env, episodes=config.eval_episodes, seed=config.seed + 10_000, device=run.device
            )
        run.finish(
            {
                "env_steps": run.counters["env_steps"],
                **{f"eval/{key}": value for key, value in (evaluation or {}).items()},
            }
        )
    return PPORunResult(
        run_dir=run.run_dir,
        iterations=int(run.counters["iteration"]),
        env_steps=int(run.counters["env_steps"]),
        train_seconds=train_seconds,
        evaluation=evaluation,
        interrupted=run.interrupted,
        exit_code=run.exit_code,
        config=config,
        stopped_by_callback=hooks.stop,
        random_policy=random_policy,
        last_return=training.last_return,
    )


# -- build --------------------------------------------------------------------------------
def env_options(config: PPOConfig, *, vectorization: bool = True) -> dict[str, Any]:
    """:func:`~pglab.envs.registry.make_env`'s options for ``config.env``: ``env_kwargs``,
    and for a ``gym:ID`` its ``env_wrappers`` and (``vectorization``) ``vectorization``."""
    options = dict(config.env_kwargs)
    if config.env.startswith("gym:"):
        if vectorization:
            options["vectorization"] = config.vectorization
        if config.env_wrappers:
            options["wrappers"] = config.env_wrappers
    return options


def build_training(run: TrainingRun, config: PPOConfig, env: Any) -> PPOTraining:
    """The agent, its update, the generators and the rollout state, registered with the
    shell (which restores them all when the run resumes)."""
    device = run.device
    action_generator = make_generator(config.seed, device)
    minibatch_generator = make_generator(config.seed + 1)
    action = ActionInfo.from_spec(env.action_spec)
    obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
    image_shape = image_shape_of(env)
    normalizer = build_normalizer(config, tuple(env.observation_shape))
    agent = build_agent(config, obs_dim, action, device, normalizer, image_shape=image_shape)
    update = _build_update(run, config, agent.policy, device)
    first_obs = env.reset(seed=config.seed)
    if normalizer is not None:
        first_obs = normalizer.reset(first_obs)
    training = PPOTraining(
        env=env,
        agent=agent,
        update=update,
        action_generator=action_generator,
        minibatch_generator=minibatch_generator,
        normalizer=normalizer,
        tracker=EpisodeTracker(config.num_envs, device),
        episodes=EpisodeStats(device),
        obs=Value(first_obs),
    )
    run.counters.setdefault("env_steps", 0)
    run.track(
        models={"agent": agent.policy},
        optimizers={"agent": update.optimizer},
        rngs={"action": action_generator, "minibatch": minibatch_generator},
        state={
            "env": checkpointed(env),
            "tracker": training.tracker,
            "episodes": training.episodes,
            "obs": training.obs,
            **({"normalizer": normalizer} if normalizer is not None else {}),
        },
        meta={
            "action": action.to_dict(),
            "obs_dim": obs_dim,
            "image_shape": None if image_shape is None else list(image_shape),
        },
    )
    if run.checkpoint is not None:
        _continue_uncaptured_environments(run, config, training, first_obs)
        _warn_of_a_stretched_schedule(run, config)
    return training


def _build_update(run: TrainingRun, config: PPOConfig, net: PolicyNetwork, device: torch.device) -> PolicyUpdate:
    """The update and its optimiser; the run says once which path computes the gradient."""
    update = build_policy_update(net, config, device)
    run.echo(f"update: {update.path}", file=sys.stderr)
    return update


def _continue_uncaptured_environments(
    run: TrainingRun, config: PPOConfig, training: PPOTraining, first_obs: torch.Tensor
) -> None:
    """A resumed run whose environments could not capture their state (``state_dict()``
    gave ``None``, see :mod:`pglab.envs.base`) continues from the freshly reset ones: their
    observations, and no running episodes."""
    assert run.checkpoint is not None
    if run.checkpoint["extra"]["env"] is not None or run.start >= config.num_iterations:
        return  # captured, or nothing left to train
    warnings.warn(
        f"env={config.env}: its state could not be checkpointed; the resumed run continues from "
        "freshly reset environments and is not bit-identical to an uninterrupted one",
        stacklevel=3,
    )
    training.obs.value = first_obs
    training.tracker.load_state_dict(EpisodeTracker(config.num_envs, run.device).state_dict())


def _warn_of_a_stretched_schedule(run: TrainingRun, config: PPOConfig) -> None:
    """A linear lr/clip schedule is a function of the budget: a resume that changes the
    budget makes the rates jump to the new budget's schedule; say by how much."""
    assert run.checkpoint is not None
    stored_iterations = replace(config, total_steps=int(run.checkpoint["config"]["total_steps"])).num_iterations
    linear = config.lr_schedule == "linear" or config.update.clip_schedule == "linear"
    if linear and stored_iterations != config.num_iterations and run.start < config.num_iterations:
        # fraction 1 - (k-1)/K with the new K from here on: the rates jump to the new run's schedule
        before = schedule_fraction("linear", run.start, stored_iterations)
        after = schedule_fraction("linear", run.start + 1, config.num_iterations)
        warnings.warn(
            f"total_steps: the linear lr/clip schedule now spans {config.num_iterations} iterations, not "
            f"{stored_iterations}: from iteration {run.start + 1} the rates follow the new budget's schedule "
            f"and {'rise' if after > before else 'fall'} from {before:.3g} to {after:.3g} of their initial "
            "values",
            stacklevel=3,
        )


# -- the loop -----------------------------------------------------------------------------
def train_iterations(run: TrainingRun, config: PPOConfig, training: PPOTraining, hooks: _Callbacks) -> float:
    """Iterations ``run.start + 1 .. num_iterations``: rollout, bootstrap value, advantages,
    update, log (the shell saves checkpoints after each). Returns the seconds they took."""
    wall_time_at_start = float(run.counters["wall_time"])
    # NumPy's BLAS (the rollout's NumPy policy step, the closed-form update) on torch's
    # thread count: by default it starts a thread per core, and on these small products
    # waking them costs more than it saves (a 256-wide 8-copy step: ~0.2 ms on one
    # thread, ~6 ms on two on a busy machine)
    with blas_threads(torch.get_num_threads()):
        _run_iterations(run, config, training, hooks)
    if training.normalizer is not None:
        training.normalizer.training = False  # the returned agent (and the final evaluation) use frozen statistics
    return float(run.counters["wall_time"]) - wall_time_at_start


def _run_iterations(run: TrainingRun, config: PPOConfig, training: PPOTraining, hooks: _Callbacks) -> None:
    """The loop of :func:`train_iterations`."""
    for iteration in run.steps(config.num_iterations, desc=f"train ppo {config.env} --algo {config.algo}"):
        iteration_hp = apply_schedules(config, training.update.optimizer, iteration)
        # 1. collect a rollout with the current policy, 2. bootstrap value
        rollout = collect_rollout(config, training, hooks, iteration, int(run.counters["env_steps"]))
        run.counters["env_steps"] += config.num_envs * config.num_steps
        episode_returns, episode_lengths = finished_episodes(training, rollout)
        if hooks.rollout_hooks:
            ended = episode_lengths > 0
            hooks.on_rollout_end(
                RolloutInfo(
                    iteration,
                    int(run.counters["env_steps"]),
                    episode_returns[ended].double(),
                    episode_lengths[ended],
                    rollout.buffers(),
                    training.agent,
                )
            )
        # 3. advantages and value targets, 4. optimise
        advantages, returns = compute_advantages(config, rollout)
        update_metrics = optimise(training, rollout, advantages, returns, iteration_hp)
        # 5. log (the shell adds perf/* and saves checkpoints after the body)
        if iteration % config.log_interval == 0 or iteration == config.num_iterations:
            log_row(run, iteration, training, update_metrics, iteration_hp)
        if hooks.stop:
            run.request_stop()  # the shell saves a checkpoint after this iteration and ends the loop


def apply_schedules(config: PPOConfig, optimizer: torch.optim.Optimizer, iteration: int) -> OnPolicyHyperparams:
    """Set the iteration's learning rate on ``optimizer``; return its update hyperparameters
    (the clip range of a linear clip schedule)."""
    hp = config.update
    if config.lr_schedule == "linear":
        # lr_k = lr * (1 - (k - 1) / K): linear decay to 0 (CleanRL)
        optimizer.param_groups[0]["lr"] = config.lr * schedule_fraction("linear", iteration, config.num_iterations)
    if hp.clip_schedule == "constant":
        return hp
    # the same fraction for the clip range (RL-Zoo's clip_range: lin_0.2)
    return replace(hp, clip_coef=hp.clip_coef * schedule_fraction(hp.clip_schedule, iteration, config.num_iterations))


def collect_rollout(
    config: PPOConfig, training: PPOTraining, hooks: _Callbacks, iteration: int, env_steps: int
) -> Rollout:
    """1. ``num_steps`` steps of the ``num_envs`` copies with the current policy; 2. the
    value of the state after them. Per-step tensors are appended to lists and stacked once
    into batch-major ``[N, T, ...]`` buffers: one stack per field costs less than a slice
    assignment per field and step. Where :func:`array_rollout` covers the run, the same
    loop runs on NumPy arrays (:func:`collect_arrays`)."""
    # inference_mode, not just no_grad: it also skips autograd's version counters,
    # about 10% of a CPU rollout step with these small nets.
    with torch.inference_mode():
        policy_step = training.agent.policy.rollout_actor()  # actor + critic side by side, weights frozen
        if array_rollout(training, policy_step, hooks):
            return collect_arrays(config, training, policy_step)
        return collect_tensors(config, training, policy_step, hooks, iteration, env_steps)


def array_rollout(training: PPOTraining, policy_step: Any, hooks: _Callbacks) -> bool:
    """Whether the rollout runs on NumPy arrays (:func:`collect_arrays`): a NumPy rollout
    step (an MLP on the CPU, see ``ActorCritic.rollout_actor``), a Gymnasium vector env on
    the CPU and no per-step callback (which is given tensors). The buffers, the
    environment and the statistics end the same, bit for bit, as with
    :func:`collect_tensors` (``test_the_numpy_rollout_equals_the_tensor_rollout``); the
    array loop saves the tensor conversions of every layer (~10% of a 4-copy Swimmer step)."""
    env = training.env
    return (
        isinstance(policy_step, NumpyRolloutStep)
        and isinstance(env, GymVectorAdapter)
        and env.device.type == "cpu"
        and not hooks.step_hooks
    )


def collect_arrays(config: PPOConfig, training: PPOTraining, policy_step: NumpyRolloutStep) -> Rollout:
    """:func:`collect_tensors` on NumPy arrays, tensors made once per rollout."""
    agent, generator, normalizer, env = training.agent, training.action_generator, training.normalizer, training.env
    assert isinstance(env, GymVectorAdapter)  # array_rollout
    steps: dict[str, list[np.ndarray]] = {name: [] for name in ROLLOUT_FIELDS}
    keep_obs, *keep_outputs = (steps[name].append for name in ROLLOUT_FIELDS)
    obs = training.obs.value.numpy()
    no_trunc_value = np.zeros(config.num_envs, dtype=np.float32)
    for _ in range(config.num_steps):
        actions, log_probs, values = policy_step.arrays(obs, generator)
        keep_obs(obs)
        obs, raw_rewards, dones, truncs, final_obs = env.step_arrays(agent.to_env_arrays(actions))
        rewards = raw_rewards
        if normalizer is not None:  # an episode ends at either flag
            obs, rewards = normalizer.step_arrays(obs, raw_rewards, dones, truncs)
        trunc_value = no_trunc_value
        if np.count_nonzero(truncs):  # as truncation_value
            trunc_value = final_value(training, torch.from_numpy(final_obs)).numpy()
        outputs = (actions, log_probs, values, rewards, dones, truncs, trunc_value, raw_rewards)
        for keep, value in zip(keep_outputs, outputs, strict=True):
            keep(value)
    training.obs.value = torch.from_numpy(obs)
    buffers = {name: torch.from_numpy(np.stack(values, axis=1)) for name, values in steps.items()}
    return Rollout(**buffers, last_value=agent.policy.value(training.obs.value), reported=[])


def collect_tensors(
    config: PPOConfig, training: PPOTraining, policy_step: Any, hooks: _Callbacks, iteration: int, env_steps: int
) -> Rollout:
    """:func:`collect_rollout` on tensors (any device, network and environment)."""
    N, T = config.num_envs, config.num_steps
    agent, net, generator = training.agent, training.agent.policy, training.action_generator
    steps: dict[str, list[torch.Tensor]] = {name: [] for name in ROLLOUT_FIELDS}
    keep_obs, *keep_outputs = (steps[name].append for name in ROLLOUT_FIELDS)
    reported: list[tuple[torch.Tensor, torch.Tensor]] = []
    obs = training.obs.value
    no_trunc_value = torch.zeros(N, device=obs.device)
    for rollout_step in range(T):
        if isinstance(net, GSDEActorCritic) and (
            rollout_step == 0 or (config.sde_sample_freq > 0 and rollout_step % config.sde_sample_freq == 0)
        ):
            net.reset_noise(N, generator)  # gSDE: new exploration matrices
        actions, log_probs, values = policy_step(obs, generator)
        keep_obs(obs)
        env_actions = agent.to_env(actions)
        obs, rewards, raw_rewards, dones, truncs, info = env_step(training, env_actions)
        if (episodes := reported_episodes(info)) is not None:  # Atari: whole games, raw score
            reported.append(episodes)
        trunc_value = truncation_value(training, obs, truncs, info, no_trunc_value)
        outputs = (actions, log_probs, values, rewards, dones, truncs, trunc_value, raw_rewards)
        for keep, value in zip(keep_outputs, outputs, strict=True):
            keep(value)
        if hooks.step_hooks:
            done = env_steps + (rollout_step + 1) * N
            hooks.on_step(StepInfo(iteration, rollout_step, done, env_actions, raw_rewards, dones, truncs, obs, agent))
    last_value = net.value(obs)
    training.obs.value = obs
    buffers = {name: torch.stack(values, dim=1) for name, values in steps.items()}
    return Rollout(**buffers, last_value=last_value, reported=reported)


def env_step(
    training: PPOTraining, env_actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """One step of every copy: ``(obs, rewards, raw_rewards, dones, truncs, info)``, the
    observations and rewards normalised (when enabled), ``raw_rewards`` the environment's."""
    obs, rewards, dones, truncs, info = training.env.step(env_actions)
    raw_rewards = rewards
    if training.normalizer is not None:
        obs, rewards = training.normalizer.step(obs, rewards, dones, truncs)  # an episode ends at either
    return obs, rewards, raw_rewards, dones, truncs, info


def truncation_value(
    training: PPOTraining, obs: torch.Tensor, truncs: torch.Tensor, info: dict[str, Any], zeros: torch.Tensor
) -> torch.Tensor:
    """``[N]``: where a time limit cut an episode, ``V(final_obs)`` (the value of the
    pre-reset observation: its future is bootstrapped); ``zeros`` where none was cut."""
    if not any_flag(truncs):
        return zeros
    if "final_obs" not in info:
        return training.agent.policy.value(obs)
    return final_value(training, info["final_obs"])


def final_value(training: PPOTraining, final_obs: torch.Tensor) -> torch.Tensor:
    """``V(final_obs) [N]`` of raw pre-reset observations, normalised first (with this
    step's statistics, no update) where the run normalises them."""
    if training.normalizer is not None:
        final_obs = training.normalizer.normalize_obs(final_obs)
    return training.agent.policy.value(final_obs)


def any_flag(flags: torch.Tensor) -> bool:
    """``bool(flags.any())``; on the CPU through NumPy (~0.5 us against ~3 for torch's ``any``)."""
    if flags.device.type == "cpu":
        return bool(np.count_nonzero(flags.numpy()))
    return bool(flags.any())


def finished_episodes(training: PPOTraining, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """``(returns, lengths) [N, T]`` of the episodes that ended in the rollout (0 elsewhere),
    added to the row's :class:`EpisodeStats`: the environment's own statistics where it
    reports them (Atari: whole games, not the clipped per-life rewards), else the sums of
    the raw rewards (the returns the user cares about, not the normalised ones)."""
    if rollout.reported:
        returns, lengths = (torch.stack(column, dim=1) for column in zip(*rollout.reported, strict=True))
    else:
        returns, lengths = training.tracker.update_rollout(rollout.raw_rewards, rollout.dones | rollout.truncs)
    training.episodes.add(returns, lengths)
    return returns, lengths


def compute_advantages(config: PPOConfig, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """3. ``(advantages, returns) [N, T]``: the update's advantages and the critic's targets."""
    gamma = config.update.gamma
    if config.algo == "reinforce_raw":
        # Monte Carlo reward-to-go within the rollout, no critic anywhere.
        returns = reward_to_go(rollout.rewards, rollout.dones | rollout.truncs, gamma)
        return returns, returns
    # V(s'_t): the next row's value, the final observation's value at a time limit,
    # last_value after the final step.
    next_values = torch.cat([rollout.values[:, 1:], rollout.last_value[:, None]], dim=1)
    next_values = torch.where(rollout.truncs, rollout.trunc_values, next_values)
    return compute_gae(
        rollout.rewards,
        rollout.values,
        rollout.dones,
        rollout.truncs,
        rollout.last_value,
        gamma,
        config.update.gae_lambda,
        next_values=next_values,
    )


def optimise(
    training: PPOTraining,
    rollout: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    iteration_hp: OnPolicyHyperparams,
) -> dict[str, torch.Tensor]:
    """4. K epochs of minibatches (ppo) or one step (vpg_gae, reinforce_raw) on the rollout;
    returns the update's metrics (``loss/*``, ``stats/*``)."""
    num_samples = rollout.obs.shape[0] * rollout.obs.shape[1]
    flat_obs = rollout.obs.reshape(num_samples, *rollout.obs.shape[2:])
    flat_actions = rollout.actions.reshape(num_samples, *rollout.actions.shape[2:])
    batch = OnPolicyBatch(
        rollout.log_probs.reshape(-1), advantages.reshape(-1), returns.reshape(-1), rollout.values.reshape(-1)
    )
    update_metrics = training.update(flat_obs, flat_actions, batch, iteration_hp, training.minibatch_generator)
    return update_metrics


def log_row(
    run: TrainingRun,
    iteration: int,
    training: PPOTraining,
    update_metrics: dict[str, torch.Tensor],
    iteration_hp: OnPolicyHyperparams,
) -> None:
    """5. One metric row (the episodes since the previous row, the update's metrics, the
    schedules' values; the shell adds ``perf/*``), and the progress bar's return and KL."""
    schedules = {"stats/lr": training.update.optimizer.param_groups[0]["lr"]}
    if run.config.update.clip_schedule != "constant":
        schedules["stats/clip_coef"] = iteration_hp.clip_coef
    row = {"env_steps": run.counters["env_steps"], **training.episodes.metrics(), **update_metrics, **schedules}
    logged = run.log(iteration, row)
    training.episodes.reset()
    mean_return = logged["return/mean"]
    if not math.isnan(mean_return):
        training.last_return = mean_return
    run.set_postfix(
        ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
        kl=f"{logged.get('stats/approx_kl', 0.0):.4f}",
    )


def final_evaluation(run: TrainingRun, config: PPOConfig, agent: PPOAgent) -> dict[str, float] | None:
    """The deterministic policy on ``eval_episodes`` held-out seeds, written to
    ``evaluation.json`` (``None``: no evaluation asked for, or the run was stopped)."""
    if config.eval_episodes <= 0 or run.interrupted:
        return None
    evaluation = evaluate_agent(
        agent, config.env, episodes=config.eval_episodes, seed=config.seed + 10_000, device=run.device
    )
    counters = {"iteration": int(run.counters["iteration"]), "env_steps": int(run.counters["env_steps"])}
    atomic_write_json(run.run_dir / "evaluation.json", {**counters, **evaluation})
    return evaluation


def describe_returns(evaluation: dict[str, float]) -> str:
    """``return MEAN ± S.E. s.e. (std STD, min MIN, max MAX)`` of an :func:`evaluate_agent`
    result: the ± is the standard error of the mean."""
    spread = "" if math.isnan(evaluation["return/sem"]) else f" ± {evaluation['return/sem']:.2f} s.e."
    return (
        f"return {evaluation['return/mean']:.2f}{spread} (std {evaluation['return/std']:.2f}, "
        f"min {evaluation['return/min']:.2f}, max {evaluation['return/max']:.2f})"
    )


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------
class UniformRandomAgent:
    """Uniformly random actions in an agent's action space: the reference its returns are
    judged against (:func:`random_reference`). Discrete actions uniformly over the actions,
    Box actions uniformly in ``[low, high]``."""

    def __init__(self, agent: PPOAgent):
        self.config, self.action, self.obs_dim = agent.config, agent.action, agent.obs_dim

    def act(self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None):
        count = obs.shape[0]
        if self.action.kind == "discrete":
            return torch.randint(self.action.size, (count,), generator=generator, device=obs.device)
        assert self.action.low is not None and self.action.high is not None  # random_reference checks
        low, high = (
            torch.tensor(b, dtype=torch.float32, device=obs.device) for b in (self.action.low, self.action.high)
        )
        shape = (count, *self.action.shape)
        uniform = torch.rand(shape, generator=generator, device=obs.device)
        return low.reshape(self.action.shape) + (high - low).reshape(self.action.shape) * uniform


def random_reference(
    agent: PPOAgent, env_spec: str, *, episodes: int, seed: int, device: torch.device | str = "cpu"
) -> dict[str, float] | None:
    """:func:`evaluate_agent` of :class:`UniformRandomAgent` on the same episodes (same env
    seed); ``None`` for a Box action space with an infinite bound (no uniform distribution)."""
    action = agent.action
    if action.kind == "continuous" and not all(
        math.isfinite(b) for b in (*(action.low or [math.inf]), *(action.high or [math.inf]))
    ):
        return None
    random_agent: Any = UniformRandomAgent(agent)
    return evaluate_agent(random_agent, env_spec, episodes=episodes, seed=seed, device=device)


def evaluate_agent(
    agent: PPOAgent,
    env_spec: str,
    *,
    episodes: int = 10,
    seed: int = 12_345,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    max_episode_steps: int = 100_000,
) -> dict[str, float]:
    """Return statistics of ``episodes`` episodes, one per environment copy (so short
    episodes are not over-represented). Episodes still running after
    ``max_episode_steps`` steps are cut off and counted with their return so far.

    A progress bar counts finished episodes.

    Returns: ``episodes``, ``return/mean``, ``return/std`` (the returns' population standard
    deviation, as every ``return/std`` metric), ``return/sem`` (the standard error of the
    mean, the sample standard deviation over ``sqrt(episodes)``; NaN for one episode),
    ``return/min``, ``return/max``, ``length/mean``.
    """
    check_int("episodes", episodes, minimum=1)
    # The training run's environment options (its wrappers, env_kwargs), and for Atari whole
    # games with raw rewards, so the summed rewards are the game score.
    options = {**env_options(replace(agent.config, env=env_spec), vectorization=False), **evaluation_options(env_spec)}
    env = make_env(env_spec, episodes, device=device, seed=seed, **options)
    bar = progress_bar(episodes, desc=f"evaluate ppo {env_spec}", unit="episode")
    try:
        obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
        if ActionInfo.from_spec(env.action_spec) != agent.action or obs_dim != agent.obs_dim:
            raise ConfigError("env", env_spec, "has other action/observation spaces than the checkpoint's environment")
        generator = make_generator(seed, device)
        obs = env.reset(seed=seed)
        returns = torch.zeros(episodes, dtype=torch.float64, device=device)
        lengths = torch.zeros(episodes, dtype=torch.int64, device=device)
        running = torch.ones(episodes, dtype=torch.bool, device=device)
        finished = 0
        for _ in range(max_episode_steps):
            actions = agent.act(obs, deterministic=deterministic, generator=generator)
            obs, rewards, dones, truncs, _ = env.step(actions)
            returns += torch.where(running, rewards.double(), torch.zeros_like(returns))
            lengths += running.long()
            running &= ~(dones | truncs)
            still_running = int(running.sum())  # the one host sync per step (it decides the loop)
            bar.update(episodes - still_running - finished)
            finished = episodes - still_running
            if still_running == 0:
                break
    finally:
        bar.close()
        env.close()
    return {
        "episodes": float(episodes),
        "return/mean": float(returns.mean()),
        "return/std": float(returns.std(unbiased=False)),
        "return/sem": float(returns.std(unbiased=True)) / math.sqrt(episodes) if episodes > 1 else math.nan,
        "return/min": float(returns.min()),
        "return/max": float(returns.max()),
        "length/mean": float(lengths.double().mean()),
    }
