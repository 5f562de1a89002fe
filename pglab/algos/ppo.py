"""PPO / VPG+GAE / REINFORCE on any batched environment (``pglab train ppo``).

Reads like CleanRL's ``ppo.py``: a config (:class:`pglab.configs.ppo.PPOConfig`), then a
loop in visible phases

    collect rollout -> bootstrap value -> advantages -> optimise (K epochs) -> log

inside the shared training shell (:class:`pglab.run.shell.TrainingRun`), which owns the
run directory, resume, device/threads/seed, logs, checkpoints, SIGINT/SIGTERM and
``summary.json``. The update itself is the shared
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

Exact resume: the checkpoint stores networks, optimiser, every RNG, the current
observations, running episode statistics, the normalisation statistics and the
environments' own state (for Gymnasium envs whose state lives in plain attributes: numpy
arrays, numbers and ``np.random.Generator``s, which covers classic control and toy text).
So on the CPU, N iterations + ``--resume`` + N more == 2N iterations, bit for bit, when
the budget of the first run was already 2N or both schedules are constant (a linear
schedule is a function of the total budget, so extending the budget changes the rest of it).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pglab.agent import Agent
from pglab.algos.onpolicy import OnPolicyBatch
from pglab.algos.policy_update import build_policy_update
from pglab.configs.ppo import (
    PPOConfig,
    schedule_fraction,
)  # PPOConfig re-exported: pglab.algos.ppo.PPOConfig keeps working
from pglab.envs.atari import evaluation_options, reported_episodes
from pglab.envs.base import ActionSpec, EpisodeTracker
from pglab.envs.normalize import ObsRewardNormalizer
from pglab.envs.registry import make_env
from pglab.errors import CheckpointError, ConfigError
from pglab.estimators import compute_gae, reward_to_go
from pglab.nets.actor_critic import ActorCritic, GSDEActorCritic, build_actor_critic
from pglab.nets.nature_cnn import NatureCNNActorCritic
from pglab.run.atomic import atomic_write_json
from pglab.run.checkpoint import build_checkpoint, load_state_dict_checked
from pglab.run.config import config_from_dict, config_to_dict
from pglab.run.device import resolve_device
from pglab.run.progress import progress_bar
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state
from pglab.run.shell import TrainerSpec, TrainingRun
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
ROLLOUT_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "dones", "truncs", "trunc_values")


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
    ``policy`` (the :class:`~pglab.nets.actor_critic.ActorCritic`, actor and critic),
    ``action`` (:class:`ActionInfo`), ``obs_dim``, ``normalizer``
    (:class:`~pglab.envs.normalize.ObsRewardNormalizer` or ``None``).
    """

    kind = KIND

    def __init__(
        self,
        policy: ActorCritic,
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

    def predict(self, obs: Any, deterministic: bool = True) -> Any:
        array = np.asarray(obs)
        if self.obs_dim > 1 and array.shape == (self.obs_dim,):  # one vector observation, unbatched
            return super().predict(array[None], deterministic=deterministic)[0]
        return super().predict(array, deterministic=deterministic)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)`` float ``[B]`` for observations ``[B, *obs_shape]``."""
        self.policy.check_obs(obs, "value")
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
        shaped = raw_actions.reshape(raw_actions.shape[0], *self._low.shape)
        return torch.maximum(torch.minimum(shaped, self._high), self._low)

    def act(
        self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Environment-ready actions for ``obs [B, *obs_shape]``: the mode/mean when
        ``deterministic``, else a sample (drawn with ``generator`` when given)."""
        self.policy.check_obs(obs, "act")
        obs = self.policy_input(obs)
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
    image_shape: tuple[int, ...] | None = None,
) -> PPOAgent:
    """The agent's network: the Nature CNN for image observations (``image_shape`` given,
    see :func:`image_shape_of`), else actor and critic MLPs of ``config.hidden_dims``."""
    if image_shape is not None:
        if action.kind != "discrete":
            raise ConfigError("env", f"{action.kind} actions", "the Nature CNN policy needs Discrete actions")
        net = NatureCNNActorCritic(tuple(image_shape), action.size).to(device)
        return PPOAgent(net, config, action, obs_dim, device, normalizer)
    if config.use_sde and action.kind != "continuous":
        raise ConfigError("use_sde", True, "gSDE needs Box actions; this environment's actions are Discrete")
    net = build_actor_critic(
        obs_dim,
        action.kind,
        action.size,
        config.hidden_dims,
        activation=config.activation,
        log_std_init=config.log_std_init,
        ortho_init=config.ortho_init,
        use_sde=config.use_sde,
    ).to(device)
    return PPOAgent(net, config, action, obs_dim, device, normalizer)


def image_shape_of(env: Any) -> tuple[int, int, int] | None:
    """``(C, H, W)`` when ``env`` observes images the Nature CNN can read (uint8 ``[C, H, W]``,
    ``H, W >= 36``: Atari's ``[4, 84, 84]``), else ``None`` (flattened into the MLPs, as
    SB3's ``MlpPolicy`` would; e.g. PixelGoalEnv's 16x16 boards)."""
    shape = tuple(int(s) for s in env.observation_shape)
    if env.observation_dtype == torch.uint8 and len(shape) == 3 and min(shape[1:]) >= 36:
        return shape  # type: ignore[return-value]
    return None


def build_normalizer(config: PPOConfig, obs_shape: tuple[int, ...]) -> ObsRewardNormalizer | None:
    """The run's :class:`ObsRewardNormalizer` (``None`` when nothing is normalised);
    the reward's discounted return uses the update's ``gamma`` (as RL-Zoo does)."""
    if not config.normalizes:
        return None
    return ObsRewardNormalizer(
        obs_shape,
        config.num_envs,
        normalize_obs=config.normalize_obs,
        normalize_reward=config.normalize_reward,
        clip_obs=config.clip_obs,
        clip_reward=config.clip_reward,
        gamma=config.update.gamma,
        epsilon=config.normalize_epsilon,
    )


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "auto") -> PPOAgent:
    """The :class:`PPOAgent` stored in a loaded ``ppo`` checkpoint (``pglab.load_checkpoint``).

    ``device``: a ``torch.device`` or ``auto``/``cpu``/``cuda[:N]``."""
    device = resolve_device(device) if isinstance(device, str) else torch.device(device)
    source = checkpoint.get("path", "<memory>")
    try:
        config = config_from_dict(PPOConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
        action = ActionInfo.from_dict(checkpoint["extra"]["action"])
        obs_dim = int(checkpoint["extra"]["obs_dim"])
        normalizer = None
        if config.normalizes:
            stats = checkpoint["extra"]["normalizer"]
            normalizer = build_normalizer(config, tuple(stats["obs_rms"]["mean"].shape))
            normalizer.load_state_dict(stats)
            normalizer.training = False  # evaluation applies the statistics, never updates them
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {source}: not a complete ppo checkpoint (missing {exc})") from exc
    image_shape = checkpoint["extra"].get("image_shape")  # absent in checkpoints of MLP agents
    agent = build_agent(
        config, obs_dim, action, device, normalizer, image_shape=None if image_shape is None else tuple(image_shape)
    )
    load_state_dict_checked(agent.policy, checkpoint["models"]["agent"], name="agent", source=source)
    agent.policy.eval()
    return agent


# --------------------------------------------------------------------------------------
# Environment snapshots (exact resume)
# --------------------------------------------------------------------------------------
# Attributes that are configuration, rendering or links, not simulation state.
_SKIP_ATTRIBUTES = {
    "env",
    "envs",
    "env_fns",
    "spec",
    "_saved_kwargs",
    "metadata",
    "_metadata",
    "render_mode",
    "_cached_spec",
    "action_space",
    "observation_space",
    "_action_space",
    "_observation_space",
    "single_action_space",
    "single_observation_space",
    "screen",
    "clock",
    "autoreset_mode",
}


def _storable(value: Any) -> Any:
    """A weights_only-loadable copy of one attribute value, or ``_SKIP``."""
    # NumPy scalars first: np.float64 is also a Python float, but pickles as a NumPy object
    # that a weights_only load refuses (LunarLander's prev_shaping).
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"ndarray": torch.from_numpy(np.asarray(value).copy()), "dtype": str(value.dtype), "scalar": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"py": value}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"ndarray": torch.from_numpy(value.copy()), "dtype": str(value.dtype)}
    if isinstance(value, np.random.Generator):
        return {"np_generator": value.bit_generator.state}
    return _SKIP


_SKIP = object()
# Physics engines whose state lives in C objects, not in plain attributes: an env holding
# one cannot be snapshotted, and restoring its other attributes onto a fresh world would
# mix two states; such runs resume from freshly reset environments (with a warning).
_OPAQUE_SIMULATORS = ("Box2D", "mujoco", "pybullet")


def _is_opaque_simulator(value: Any) -> bool:
    return type(value).__module__.split(".")[0] in _OPAQUE_SIMULATORS


def _restored(stored: dict[str, Any], current: Any) -> Any:
    if "py" in stored:
        return stored["py"]
    if "ndarray" in stored:
        array = stored["ndarray"].numpy().astype(stored["dtype"], copy=True)
        return array[()] if stored.get("scalar") else array
    state = stored["np_generator"]
    generator = (
        current
        if isinstance(current, np.random.Generator)
        else np.random.Generator(getattr(np.random, state["bit_generator"])())
    )
    generator.bit_generator.state = state
    return generator


def _state_holders(vector_env: Any) -> list[Any] | None:
    """Every object whose attributes make up the simulation state: the vector env and,
    for a ``SyncVectorEnv``, each copy's chain of wrappers. ``None`` if unreachable."""
    from gymnasium.vector import AsyncVectorEnv

    if isinstance(vector_env, AsyncVectorEnv):
        return None  # the copies live in worker processes
    holders = [vector_env]
    for copy in getattr(vector_env, "envs", []):
        layer = copy
        while layer is not None:
            holders.append(layer)
            layer = getattr(layer, "env", None)
    return holders


def capture_env_state(env: Any) -> dict[str, Any] | None:
    """A snapshot of a batched env for checkpoints (``None``: cannot be captured)."""
    if hasattr(env, "state_dict"):
        return {"native": env.state_dict()}
    holders = _state_holders(getattr(env, "env", None)) if hasattr(env, "env") else None
    if holders is None:
        return None
    layers = []
    for holder in holders:
        fields = {}
        for name, value in vars(holder).items():
            if name in _SKIP_ATTRIBUTES:
                continue
            if _is_opaque_simulator(value):
                return None
            stored = _storable(value)
            if stored is not _SKIP:
                fields[name] = stored
        layers.append({"type": type(holder).__name__, "fields": fields})
    return {"layers": layers}


def restore_env_state(env: Any, state: dict[str, Any] | None, *, source: str) -> bool:
    """Inverse of :func:`capture_env_state`; returns whether the state was restored."""
    if state is None:
        return False
    if "native" in state:
        env.load_state_dict(state["native"])
        return True
    holders = _state_holders(getattr(env, "env", None)) if hasattr(env, "env") else None
    if holders is None or len(holders) != len(state["layers"]):
        raise CheckpointError(
            f"checkpoint {source}: its environment snapshot does not match the environment built from the config"
        )
    for holder, layer in zip(holders, state["layers"], strict=False):
        if type(holder).__name__ != layer["type"]:
            raise CheckpointError(f"checkpoint {source}: environment layer {layer['type']} != {type(holder).__name__}")
        for name, stored in layer["fields"].items():
            setattr(holder, name, _restored(stored, getattr(holder, name, None)))
    return True


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------
@dataclass
class PPORunResult:
    run_dir: Path
    iterations: int
    env_steps: int
    train_seconds: float
    """wall time spent in training iterations (rollout + update), this session"""
    evaluation: dict[str, float] | None
    interrupted: bool
    exit_code: int
    """the command's exit code: 0, or :data:`pglab.errors.EXIT_INTERRUPTED` after a stop"""
    stopped_by_callback: bool = False
    """a callback returned ``False`` (the run stopped early with a checkpoint; ``interrupted`` is set too)"""


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


def _hooks(callbacks: list[Any], name: str) -> list[Callable[[Any], Any]]:
    """The bound ``name`` methods of ``callbacks``; rejects objects that have neither hook."""
    for callback in callbacks:
        if not any(callable(getattr(callback, hook, None)) for hook in ("on_step", "on_rollout_end")):
            raise ConfigError(
                "callbacks", type(callback).__name__, "each callback needs an on_step and/or on_rollout_end method"
            )
    return [getattr(callback, name) for callback in callbacks if callable(getattr(callback, name, None))]


class EpisodeWindow:
    """Statistics of the episodes finished since the last metric row, kept on the device
    (float64 0-d tensors, no host sync until the row is logged)."""

    NAMES = ("count", "return_sum", "return_sq_sum", "length_sum")

    def __init__(self, device: torch.device):
        self.sums = {name: torch.zeros((), dtype=torch.float64, device=device) for name in self.NAMES}

    def add(self, episode_returns: torch.Tensor, episode_lengths: torch.Tensor) -> None:
        """``episode_returns`` / ``episode_lengths`` ``[N, T]``: non-zero length where an
        episode ended at that step, 0 elsewhere (:meth:`EpisodeTracker.update_rollout`)."""
        finished = episode_lengths > 0
        returns = episode_returns.double()
        self.sums["count"] += finished.sum()
        self.sums["return_sum"] += returns.sum()
        self.sums["return_sq_sum"] += returns.pow(2).sum()
        self.sums["length_sum"] += episode_lengths.sum()

    def metrics(self) -> dict[str, torch.Tensor]:
        """``return/mean``, ``return/std``, ``episode/length``, ``episode/count``. In an
        interval in which no episode ended the first three are 0/0 = NaN, which the
        logger writes as "no value" (an empty CSV cell), not as a number."""
        count = self.sums["count"]
        mean = self.sums["return_sum"] / count
        return {
            "return/mean": mean,
            "return/std": (self.sums["return_sq_sum"] / count - mean.pow(2)).clamp_min(0).sqrt(),
            "episode/length": self.sums["length_sum"] / count,
            "episode/count": count,
        }

    def reset(self) -> None:
        for value in self.sums.values():
            value.zero_()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: value.cpu() for name, value in self.sums.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        device = self.sums["count"].device
        self.sums = {name: value.to(device) for name, value in state.items()}


def train_ppo(
    config: PPOConfig,
    *,
    given: frozenset[str] | None = None,
    echo: Callable[..., None] = print,
    stop_after: int | None = None,
    callbacks: list[Any] | tuple[Any, ...] = (),
) -> PPORunResult:
    """Train (or, with ``config.resume``, continue) a run.

    Args:
        config: the run's configuration.
        given: the fields the user set on the command line or in ``--config`` (what a
            ``--resume`` applies or refuses); ``None`` (the Python API): the fields that
            differ from their defaults.
        echo: where messages for the user go (``print``-like).
        stop_after: behave as if SIGTERM arrived after this many iterations of this
            session (checkpoint, then return): the test hook for exact resume.
        callbacks: objects with ``on_step(StepInfo)`` and/or ``on_rollout_end(RolloutInfo)``
            (see :class:`PPOCallback`); one returning ``False`` stops the run cleanly.
    """
    callbacks = list(callbacks)
    _hooks(callbacks, "on_step")  # rejects an object with neither hook before anything is built
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config, device = run.config, run.device
        action_generator = make_generator(config.seed, device)  # policy sampling
        minibatch_generator = make_generator(config.seed + 1)  # minibatch shuffles (CPU)
        env = make_env(
            config.env,
            config.num_envs,
            device=device,
            seed=config.seed,
            **({"vectorization": config.vectorization} if config.env.startswith("gym:") else {}),
        )
        try:
            agent, train_seconds, stopped_by_callback = _train_iterations(
                run, config, env, action_generator, minibatch_generator, callbacks
            )
        finally:
            env.close()

        # -- final evaluation of the deterministic policy on held-out seeds ---------------
        iteration, env_steps = int(run.counters["iteration"]), int(run.counters["env_steps"])
        evaluation = None
        if config.eval_episodes > 0 and not run.interrupted:
            evaluation = evaluate_agent(
                agent, config.env, episodes=config.eval_episodes, seed=config.seed + 10_000, device=device
            )
            atomic_write_json(
                run.run_dir / "evaluation.json", {"iteration": iteration, "env_steps": env_steps, **evaluation}
            )
            echo(
                f"evaluation ({config.eval_episodes} episodes, deterministic): return {evaluation['return/mean']:.2f} "
                f"+- {evaluation['return/std']:.2f}; run directory: {run.run_dir}"
            )
        run.finish({"env_steps": env_steps, **{f"eval/{key}": value for key, value in (evaluation or {}).items()}})
    return PPORunResult(
        run_dir=run.run_dir,
        iterations=iteration,
        env_steps=env_steps,
        train_seconds=train_seconds,
        evaluation=evaluation,
        interrupted=run.interrupted,
        exit_code=run.exit_code,
        stopped_by_callback=stopped_by_callback,
    )


def _train_iterations(
    run: TrainingRun,
    config: PPOConfig,
    env: Any,
    action_generator: torch.Generator,
    minibatch_generator: torch.Generator,
    callbacks: list[Any] = (),
) -> tuple[PPOAgent, float, bool]:
    """Build the agent (restoring ``run.checkpoint``) and run the iterations.

    Returns the agent, the seconds spent in iterations (rollout + update) and whether a
    callback stopped the run."""
    device = run.device
    # -- build ---------------------------------------------------------------------------
    action = ActionInfo.from_spec(env.action_spec)
    obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
    image_shape = image_shape_of(env)
    normalizer = build_normalizer(config, tuple(env.observation_shape))
    agent = build_agent(config, obs_dim, action, device, normalizer, image_shape=image_shape)
    net = agent.policy
    use_sde = isinstance(net, GSDEActorCritic)
    step_hooks, rollout_hooks = _hooks(list(callbacks), "on_step"), _hooks(list(callbacks), "on_rollout_end")
    stopped_by_callback = False
    # the update and its optimiser: PPO's closed-form gradient where it models the run, else autograd
    update = build_policy_update(net, config, device)
    optimizer = update.optimizer
    run.echo(f"update: {update.path}", file=sys.stderr)
    hp = config.update
    obs = env.reset(seed=config.seed)
    if normalizer is not None:
        obs = normalizer.reset(obs)
    tracker = EpisodeTracker(config.num_envs, device)
    window = EpisodeWindow(device)
    run.counters.setdefault("env_steps", 0)

    if run.checkpoint is not None:
        checkpoint = run.checkpoint
        source = checkpoint["path"]
        if (
            ActionInfo.from_dict(checkpoint["extra"]["action"]) != action
            or int(checkpoint["extra"]["obs_dim"]) != obs_dim
        ):
            raise CheckpointError(f"checkpoint {source}: its spaces do not match env={config.env!r}")
        load_state_dict_checked(net, checkpoint["models"]["agent"], name="agent", source=source)
        optimizer.load_state_dict(checkpoint["optimizers"]["agent"])
        restore_rng_state(checkpoint["rng"], {"action": action_generator, "minibatch": minibatch_generator})
        extra = checkpoint["extra"]
        if normalizer is not None:
            if extra.get("normalizer") is None:
                raise CheckpointError(f"checkpoint {source}: holds no normalisation statistics")
            normalizer.load_state_dict(extra["normalizer"])
        if not restore_env_state(env, extra["env_state"], source=source):
            warnings.warn(
                f"env={config.env}: its state could not be checkpointed; the resumed run continues from "
                "freshly reset environments and is not bit-identical to an uninterrupted one",
                stacklevel=2,
            )
        else:
            obs = extra["obs"].to(device)
            # Running episode returns belong to the restored episodes only.
            tracker.load_state_dict(extra["tracker"])
        window.load_state_dict(extra["window"])
        stored_iterations = replace(config, total_steps=int(checkpoint["config"]["total_steps"])).num_iterations
        linear = config.lr_schedule == "linear" or hp.clip_schedule == "linear"
        if linear and stored_iterations != config.num_iterations and run.start < config.num_iterations:
            # fraction 1 - (k-1)/K with the new K from here on: the rates jump to the new run's schedule
            before = schedule_fraction("linear", run.start, stored_iterations)
            after = schedule_fraction("linear", run.start + 1, config.num_iterations)
            warnings.warn(
                f"total_steps: the linear lr/clip schedule now spans {config.num_iterations} iterations, not "
                f"{stored_iterations}: from iteration {run.start + 1} the rates follow the new budget's schedule "
                f"and {'rise' if after > before else 'fall'} from {before:.3g} to {after:.3g} of their initial "
                "values",
                stacklevel=2,
            )
    run.logger.write_meta({"kind": KIND, "env": config.env, "algo": config.algo})

    def make_checkpoint() -> dict[str, Any]:
        return build_checkpoint(
            kind=KIND,
            config=config_to_dict(replace(config, resume=None)),
            counters=dict(run.counters),
            models={"agent": net.state_dict()},
            optimizers={"agent": optimizer.state_dict()},
            rng=capture_rng_state({"action": action_generator, "minibatch": minibatch_generator}),
            extra={
                "obs": obs.detach().cpu().clone(),
                "tracker": tracker.state_dict(),
                "window": window.state_dict(),
                "env_state": capture_env_state(env),
                "action": action.to_dict(),
                "obs_dim": obs_dim,
                "image_shape": None if image_shape is None else list(image_shape),
                "normalizer": None if normalizer is None else normalizer.state_dict(),
            },
        )

    # Rollout storage: per-step tensors are appended to lists and stacked once per
    # rollout into batch-major [num_envs, num_steps, ...] (pglab's [B, T]); one stack
    # per field costs less than a slice assignment per field and step.
    N, T = config.num_envs, config.num_steps
    num_iterations = config.num_iterations
    train_seconds = 0.0
    window_start, window_steps = time.perf_counter(), 0
    for iteration in run.steps(
        num_iterations, save=make_checkpoint, desc=f"train ppo {config.env} --algo {config.algo}"
    ):
        tick = time.perf_counter()
        if config.lr_schedule == "linear":
            # lr_k = lr * (1 - (k - 1) / K): linear decay to 0 (CleanRL)
            optimizer.param_groups[0]["lr"] = config.lr * schedule_fraction("linear", iteration, num_iterations)
        if hp.clip_schedule == "constant":
            iteration_hp = hp
        else:  # the same fraction for the clip range (RL-Zoo's clip_range: lin_0.2)
            iteration_hp = replace(
                hp, clip_coef=hp.clip_coef * schedule_fraction(hp.clip_schedule, iteration, num_iterations)
            )

        # -- 1. collect a rollout with the current policy ------------------------------
        steps: dict[str, list[torch.Tensor]] = {name: [] for name in ROLLOUT_FIELDS}
        reported: list[tuple[torch.Tensor, torch.Tensor]] = []  # episodes the env reports itself
        raw_rewards: list[torch.Tensor] = []  # with reward normalisation: for the episode statistics
        no_trunc_value = torch.zeros(N, device=device)
        rollout_start_steps = run.counters["env_steps"]
        # inference_mode, not just no_grad: it also skips autograd's version counters,
        # about 10% of a CPU rollout step with these small nets.
        with torch.inference_mode():
            policy_step = net.rollout_actor()  # actor + critic side by side, weights frozen
            for rollout_step in range(T):
                if use_sde and (
                    rollout_step == 0 or (config.sde_sample_freq > 0 and rollout_step % config.sde_sample_freq == 0)
                ):
                    net.reset_noise(N, action_generator)  # gSDE: new exploration matrices
                actions, log_probs, values = policy_step(obs, action_generator)
                steps["obs"].append(obs)
                env_actions = agent.to_env(actions)
                obs, rewards, dones, truncs, info = env.step(env_actions)
                if normalizer is not None:
                    raw_rewards.append(rewards)
                    obs, rewards = normalizer.step(obs, rewards, dones | truncs)
                if (episodes := reported_episodes(info)) is not None:  # Atari: whole games, raw score
                    reported.append(episodes)
                for name, value in (
                    ("actions", actions),
                    ("log_probs", log_probs),
                    ("values", values),
                    ("rewards", rewards),
                    ("dones", dones),
                    ("truncs", truncs),
                ):
                    steps[name].append(value)
                # A time limit: the future of the pre-reset state is bootstrapped.
                if bool(truncs.any()):
                    final_obs = info.get("final_obs", obs)
                    if normalizer is not None and "final_obs" in info:
                        final_obs = normalizer.normalize_obs(final_obs)  # this step's statistics, no update
                    steps["trunc_values"].append(net.value(final_obs))
                else:
                    steps["trunc_values"].append(no_trunc_value)
                if step_hooks:
                    step_info = StepInfo(
                        iteration,
                        rollout_step,
                        rollout_start_steps + (rollout_step + 1) * N,
                        env_actions,
                        raw_rewards[-1] if raw_rewards else rewards,
                        dones,
                        truncs,
                        obs,
                        agent,
                    )
                    stopped_by_callback |= any([hook(step_info) is False for hook in step_hooks])

            # -- 2. bootstrap value of the state after the rollout ---------------------
            last_value = net.value(obs)
        obs_buf, action_buf, log_prob_buf, value_buf, reward_buf, done_buf, trunc_buf, trunc_value_buf = (
            torch.stack(steps[name], dim=1) for name in ROLLOUT_FIELDS
        )
        if reported:  # the env's own episode statistics (Atari: not the clipped per-life rewards)
            episode_returns, episode_lengths = (torch.stack(column, dim=1) for column in zip(*reported, strict=False))
        else:  # raw rewards: the returns the user cares about, not the normalised ones
            raw_reward_buf = torch.stack(raw_rewards, dim=1) if raw_rewards else reward_buf
            episode_returns, episode_lengths = tracker.update_rollout(raw_reward_buf, done_buf | trunc_buf)
        window.add(episode_returns, episode_lengths)
        if rollout_hooks:
            ended = episode_lengths > 0
            rollout_info = RolloutInfo(
                iteration,
                rollout_start_steps + N * T,
                episode_returns[ended].double(),
                episode_lengths[ended],
                {
                    "obs": obs_buf,
                    "actions": action_buf,
                    "log_probs": log_prob_buf,
                    "values": value_buf,
                    "rewards": reward_buf,
                    "dones": done_buf,
                    "truncs": trunc_buf,
                },
                agent,
            )
            stopped_by_callback |= any([hook(rollout_info) is False for hook in rollout_hooks])

        # -- 3. advantages and value targets -------------------------------------------
        if config.algo == "reinforce_raw":
            # Monte Carlo reward-to-go within the rollout, no critic anywhere.
            returns = reward_to_go(reward_buf, done_buf | trunc_buf, config.update.gamma)
            advantages = returns
        else:
            # V(s'_t): the next row's value, the final observation's value at a time
            # limit, last_value after the final step.
            next_values = torch.cat([value_buf[:, 1:], last_value[:, None]], dim=1)
            next_values = torch.where(trunc_buf, trunc_value_buf, next_values)
            advantages, returns = compute_gae(
                reward_buf,
                value_buf,
                done_buf,
                trunc_buf,
                last_value,
                config.update.gamma,
                config.update.gae_lambda,
                next_values=next_values,
            )

        # -- 4. optimise: K epochs of minibatches (ppo) or one step --------------------
        flat_obs = obs_buf.reshape(N * T, *env.observation_shape)
        flat_actions = action_buf.reshape(N * T, *action_buf.shape[2:])
        batch = OnPolicyBatch(
            log_prob_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1), value_buf.reshape(-1)
        )
        update_metrics = update(flat_obs, flat_actions, batch, iteration_hp, minibatch_generator)

        # -- 5. log (the shell saves checkpoints after this body) ----------------------
        elapsed = time.perf_counter() - tick
        train_seconds += elapsed
        run.counters["env_steps"] += N * T
        window_steps += N * T
        if iteration % config.log_interval == 0 or iteration == num_iterations:
            row = {
                "env_steps": run.counters["env_steps"],
                **window.metrics(),
                **update_metrics,
                "stats/lr": optimizer.param_groups[0]["lr"],
                **({"stats/clip_coef": iteration_hp.clip_coef} if hp.clip_schedule != "constant" else {}),
                "perf/iter_s": elapsed,
                "perf/steps_per_s": window_steps / max(time.perf_counter() - window_start, 1e-9),
            }
            logged = run.log(iteration, row)
            window.reset()
            window_start, window_steps = time.perf_counter(), 0
            mean_return = logged["return/mean"]
            run.set_postfix(
                ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
                kl=f"{logged.get('stats/approx_kl', 0.0):.4f}",
            )
        if stopped_by_callback:
            run.request_stop()  # the shell saves a checkpoint after this iteration and ends the loop

    if normalizer is not None:
        normalizer.training = False  # the returned agent (and the final evaluation) use frozen statistics
    return agent, train_seconds, stopped_by_callback


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------
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

    Returns: ``episodes``, ``return/mean``, ``return/std``, ``return/min``,
    ``return/max``, ``length/mean``.
    """
    check_int("episodes", episodes, minimum=1)
    # Atari: whole games with raw rewards, so the summed rewards are the game score.
    env = make_env(env_spec, episodes, device=device, seed=seed, **evaluation_options(env_spec))
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
        "return/min": float(returns.min()),
        "return/max": float(returns.max()),
        "length/mean": float(lengths.double().mean()),
    }
