"""PPO / VPG+GAE / REINFORCE on any batched environment (``pglab train ppo``).

Reads like CleanRL's ``ppo.py``: one config dataclass, then a loop in visible phases

    collect rollout -> bootstrap value -> advantages -> optimise (K epochs) -> log/save

The update itself is the shared :func:`pglab.algos.onpolicy.onpolicy_update` (the same
code the Deep-PSO trainer uses), so ``--rl-mode reinforce_raw | vpg_gae | ppo`` switch
the estimator and loss, not the loop.

Environments: ``--env gym:ID`` (any Gymnasium id with a Discrete or float Box action
space, through gymnasium's vector envs) or ``--env pglab:NAME`` (native batched envs).
Box actions are sampled from a Gaussian and clipped to the bounds when they reach the
environment; log-probabilities are of the raw sample (as in SB3 and CleanRL).

Termination vs truncation: ``done`` (terminated) stops the bootstrap; ``trunc`` (a time
limit) bootstraps from ``V(final_obs)``, the value of the pre-reset observation, and
stops the advantage recursion (see :func:`pglab.estimators.compute_gae`).

Exact resume: the checkpoint stores networks, optimiser, every RNG, the current
observations, running episode statistics and the environments' own state (for
Gymnasium envs whose state lives in plain attributes: numpy arrays, numbers and
``np.random.Generator``s, which covers classic control and toy text). So on the CPU,
N iterations + ``--resume`` + N more == 2N iterations, bit for bit.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
from pglab.envs.base import ActionSpec, EpisodeTracker
from pglab.envs.gym_adapter import VECTORIZATION_MODES
from pglab.envs.registry import make_env
from pglab.errors import CheckpointError, ConfigError
from pglab.estimators import compute_gae, reward_to_go
from pglab.nets.actor_critic import ActorCritic, build_actor_critic
from pglab.run.atomic import atomic_write_json
from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_checkpoint_file, load_state_dict_checked
from pglab.run.config import config_from_dict, config_to_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.progress import progress_bar
from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything
from pglab.run.signals import StopRequested
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_int_sequence,
    check_positive,
    check_range,
)

KIND = "ppo"


@dataclass(frozen=True)
class PPOConfig:
    """Configuration of ``pglab train ppo`` (defaults: CleanRL's ``ppo.py``)."""

    env: str = "gym:CartPole-v1"
    """environment: gym:ID (Gymnasium, Discrete or Box actions) or pglab:NAME"""
    rl_mode: Literal["reinforce_raw", "vpg_gae", "ppo"] = "ppo"
    """reinforce_raw (MC returns, mean baseline) | vpg_gae (one GAE step) | ppo (clipped, K epochs)"""
    total_steps: int = 200_000
    """environment steps to train for (summed over the num_envs copies)"""
    num_envs: int = 4
    """parallel environment copies"""
    num_steps: int = 128
    """rollout length per environment copy and iteration"""
    vectorization: Literal["auto", "vector", "sync", "async"] = "auto"
    """Gymnasium vector env: vector (all copies as array ops; CartPole-v1), sync (a loop over
    copies in one process), async (one process per copy); auto = vector where available, else sync"""
    # -- optimisation ------------------------------------------------------------------
    lr: float = 2.5e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_steps"""
    adam_eps: float = 1e-5
    """Adam epsilon (CleanRL's 1e-5)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda (1: Monte Carlo advantages, 0: one-step TD errors)"""
    ppo_epochs: int = 4
    """passes over each rollout (ppo only)"""
    num_minibatches: int = 4
    """minibatches per pass (ppo only)"""
    clip_coef: float = 0.2
    """surrogate clip range epsilon"""
    value_clip_coef: float | None = None
    """clip the value update to +-this around the rollout's values (None: no clipping)"""
    value_coef: float = 0.5
    """weight of the value loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: float | None = None
    """stop the epochs of an iteration once approx-KL exceeds this (None: never)"""
    normalize_advantages: bool = True
    """standardise advantages per minibatch"""
    # -- networks ----------------------------------------------------------------------
    hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of actor and critic (separate MLPs)"""
    activation: Literal["tanh", "relu", "elu", "silu", "gelu"] = "tanh"
    """hidden activation"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions)"""
    # -- run ---------------------------------------------------------------------------
    seed: int = 0
    """random seed (same seed + config on the CPU: bit-identical run)"""
    device: str = "cpu"
    """cpu, cuda, cuda:N or auto (cpu default: Gymnasium envs step on the CPU and these nets are tiny)"""
    torch_threads: int = 1
    """torch CPU threads (small MLPs run fastest on one)"""
    log_dir: Path | None = None
    """run directory (default runs/ppo/<timestamp>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""
    log_interval: int = 1
    """iterations between metric rows"""
    save_interval: int = 50
    """iterations between checkpoints (the last iteration is always saved)"""
    tensorboard: bool = True
    """also write TensorBoard events"""
    eval_episodes: int = 10
    """episodes of the deterministic policy evaluated after training (0: skip)"""

    def __post_init__(self):
        if not isinstance(self.env, str) or ":" not in self.env:
            raise ConfigError("env", self.env, "must look like 'gym:CartPole-v1' or 'pglab:NAME'")
        check_choice("rl_mode", self.rl_mode, ("reinforce_raw", "vpg_gae", "ppo"))
        check_int("total_steps", self.total_steps, minimum=1)
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("num_steps", self.num_steps, minimum=1)
        check_choice("vectorization", self.vectorization, VECTORIZATION_MODES)
        if self.num_envs * self.num_steps < 2:
            raise ConfigError("num_steps", self.num_steps, "num_envs * num_steps must be >= 2 (advantages are standardised)")
        # (On --resume the rollout shape comes from the stored run; checked after merging.)
        if self.resume is None and self.total_steps < self.batch_size:
            raise ConfigError("total_steps", self.total_steps, f"must be >= num_envs * num_steps = {self.batch_size} (one iteration)")
        check_positive("lr", self.lr)
        check_positive("adam_eps", self.adam_eps)
        check_int("ppo_epochs", self.ppo_epochs, minimum=1)
        check_int("num_minibatches", self.num_minibatches, minimum=1)
        if self.batch_size // self.num_minibatches < 2:
            raise ConfigError("num_minibatches", self.num_minibatches, f"leaves fewer than 2 samples per minibatch of the {self.batch_size}-sample rollout")
        self.hyperparams()  # validates gamma, gae_lambda, clip/value/entropy coefficients, target_kl
        check_int_sequence("hidden_dims", self.hidden_dims)
        check_choice("activation", self.activation, ("tanh", "relu", "elu", "silu", "gelu"))
        check_range("log_std_init", self.log_std_init, -20.0, 5.0)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)
        check_int("torch_threads", self.torch_threads, minimum=1)
        check_int("log_interval", self.log_interval, minimum=1)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("eval_episodes", self.eval_episodes, minimum=0)

    @property
    def batch_size(self) -> int:
        """Samples per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_steps // self.batch_size

    def hyperparams(self) -> OnPolicyHyperparams:
        return OnPolicyHyperparams(
            rl_mode=self.rl_mode, gamma=self.gamma, gae_lambda=self.gae_lambda, ppo_epochs=self.ppo_epochs,
            num_minibatches=self.num_minibatches, clip_coef=self.clip_coef, value_clip_coef=self.value_clip_coef,
            value_coef=self.value_coef, entropy_coef=self.entropy_coef, max_grad_norm=self.max_grad_norm,
            target_kl=self.target_kl, normalize_advantages=self.normalize_advantages,
        )


# Fields a resumed run may change: they do not alter what was computed so far.
# (Changing total_steps with anneal_lr changes the remaining learning-rate schedule.)
# Per-step rollout outputs, in the order the trainer stacks them into [N, T, ...] buffers.
ROLLOUT_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "dones", "truncs", "trunc_values")
RESUMABLE_FIELDS = {"total_steps", "log_interval", "save_interval", "tensorboard", "eval_episodes", "device", "resume", "log_dir", "torch_threads"}


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
    def from_spec(cls, spec: ActionSpec) -> "ActionInfo":
        if spec.kind == "discrete":
            if spec.num_actions is None or spec.num_actions < 2:
                raise ConfigError("env", f"Discrete({spec.num_actions})", "needs at least 2 actions")
            return cls("discrete", int(spec.num_actions))
        if spec.kind == "continuous":
            size = int(np.prod(spec.shape)) if spec.shape else 1
            return cls("continuous", size, tuple(spec.shape), spec.low, spec.high)
        raise ConfigError("env", spec.kind, "unsupported action space: ppo handles Discrete and Box actions")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "size": self.size, "shape": list(self.shape),
                "low": None if self.low is None else list(self.low), "high": None if self.high is None else list(self.high)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ActionInfo":
        return cls(data["kind"], int(data["size"]), tuple(data["shape"]),
                   None if data["low"] is None else tuple(data["low"]), None if data["high"] is None else tuple(data["high"]))


class PPOAgent:
    """A trained actor-critic ready to act: ``predict(obs, deterministic=True)``.

    Attributes: ``policy`` (the :class:`~pglab.nets.actor_critic.ActorCritic`, which is
    also the critic: ``policy.value(obs)``), ``config`` (:class:`PPOConfig`), ``action``
    (:class:`ActionInfo`), ``obs_dim``.
    """

    def __init__(self, policy: ActorCritic, config: PPOConfig, action: ActionInfo, obs_dim: int, device: torch.device):
        self.policy, self.config, self.action, self.obs_dim = policy, config, action, obs_dim
        self.device = device
        if action.kind == "continuous":
            shape = action.shape or (action.size,)
            low = action.low if action.low is not None else (-math.inf,) * action.size
            high = action.high if action.high is not None else (math.inf,) * action.size
            self._low = torch.tensor(low, dtype=torch.float32, device=device).reshape(shape)
            self._high = torch.tensor(high, dtype=torch.float32, device=device).reshape(shape)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)`` float ``[B]`` for observations ``[B, *obs_shape]``."""
        self.policy.check_obs(obs, "value")
        with torch.no_grad():
            return self.policy.value(obs)

    def to_env(self, raw_actions: torch.Tensor) -> torch.Tensor:
        """Network actions -> what the environment accepts: Box actions are reshaped to
        ``[B, *shape]`` and clipped to ``[low, high]``; discrete ones pass through."""
        if self.action.kind == "discrete":
            return raw_actions
        shaped = raw_actions.reshape(raw_actions.shape[0], *self._low.shape)
        return torch.maximum(torch.minimum(shaped, self._high), self._low)

    def predict(self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Environment-ready actions for ``obs [B, *obs_shape]``: the mode/mean when
        ``deterministic``, else a sample."""
        self.policy.check_obs(obs, "predict")
        with torch.no_grad():
            raw = self.policy.deterministic_action(obs) if deterministic else self.policy.act(obs, generator)[0]
        return self.to_env(raw)


def build_agent(config: PPOConfig, obs_dim: int, action: ActionInfo, device: torch.device) -> PPOAgent:
    net = build_actor_critic(obs_dim, action.kind, action.size, config.hidden_dims,
                             activation=config.activation, log_std_init=config.log_std_init).to(device)
    return PPOAgent(net, config, action, obs_dim, device)


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "cpu") -> PPOAgent:
    """The :class:`PPOAgent` stored in a loaded ``ppo`` checkpoint (``pglab.load_checkpoint``)."""
    device = torch.device(device)
    source = checkpoint.get("path", "<memory>")
    try:
        config = config_from_dict(PPOConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
        action = ActionInfo.from_dict(checkpoint["extra"]["action"])
        obs_dim = int(checkpoint["extra"]["obs_dim"])
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {source}: not a complete ppo checkpoint (missing {exc})") from exc
    agent = build_agent(config, obs_dim, action, device)
    load_state_dict_checked(agent.policy, checkpoint["models"]["agent"], name="agent", source=source)
    agent.policy.eval()
    return agent


# --------------------------------------------------------------------------------------
# Environment snapshots (exact resume)
# --------------------------------------------------------------------------------------
# Attributes that are configuration, rendering or links, not simulation state.
_SKIP_ATTRIBUTES = {"env", "envs", "env_fns", "spec", "_saved_kwargs", "metadata", "_metadata", "render_mode",
                    "_cached_spec", "action_space", "observation_space", "_action_space", "_observation_space",
                    "single_action_space", "single_observation_space", "screen", "clock", "autoreset_mode"}


def _storable(value: Any) -> Any:
    """A weights_only-loadable copy of one attribute value, or ``_SKIP``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"py": value}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"ndarray": torch.from_numpy(value.copy()), "dtype": str(value.dtype)}
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"ndarray": torch.from_numpy(np.asarray(value).copy()), "dtype": str(value.dtype), "scalar": True}
    if isinstance(value, np.random.Generator):
        return {"np_generator": value.bit_generator.state}
    return _SKIP


_SKIP = object()


def _restored(stored: dict[str, Any], current: Any) -> Any:
    if "py" in stored:
        return stored["py"]
    if "ndarray" in stored:
        array = stored["ndarray"].numpy().astype(stored["dtype"], copy=True)
        return array[()] if stored.get("scalar") else array
    state = stored["np_generator"]
    generator = current if isinstance(current, np.random.Generator) else np.random.Generator(getattr(np.random, state["bit_generator"])())
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
        raise CheckpointError(f"checkpoint {source}: its environment snapshot does not match the environment built from the config")
    for holder, layer in zip(holders, state["layers"]):
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


def resolve_resume(config: PPOConfig) -> tuple[PPOConfig, dict[str, Any] | None]:
    """For ``--resume DIR``: load its latest checkpoint; only RESUMABLE_FIELDS may differ
    from the stored config (a field left at its default takes the stored value)."""
    if config.resume is None:
        return config, None
    checkpoint = load_checkpoint_file(Path(config.resume), kinds=[KIND])
    stored = config_from_dict(PPOConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    current, before, defaults = config_to_dict(config), config_to_dict(stored), config_to_dict(PPOConfig())
    for field in dataclasses.fields(PPOConfig):
        name = field.name
        if name not in RESUMABLE_FIELDS and current[name] != before[name] and current[name] != defaults[name]:
            raise ConfigError(name, getattr(config, name), f"differs from the resumed run's value {getattr(stored, name)!r}; "
                              f"only {', '.join(sorted(RESUMABLE_FIELDS))} may change on --resume")
    overrides = {name: getattr(config, name) for name in RESUMABLE_FIELDS if current[name] != defaults[name]}
    merged = dataclasses.replace(stored, **overrides)
    done = int(checkpoint["counters"]["iteration"])
    if merged.num_iterations < done:
        raise ConfigError("total_steps", merged.total_steps, f"is below the checkpoint's {checkpoint['counters']['env_steps']} env steps")
    return merged, checkpoint


def _run_dir_of(checkpoint: dict[str, Any], resume: Path) -> Path:
    path = Path(checkpoint["path"])
    return path.parent.parent if path.parent.name == "checkpoints" else Path(resume)


def train_ppo(config: PPOConfig, *, echo=print, stop_after: int | None = None) -> PPORunResult:
    """Train (or resume) a run.

    Args:
        config: the run's configuration.
        echo: where the final summary goes (``print``-like).
        stop_after: behave as if SIGTERM arrived after this many iterations of this
            session (checkpoint, then return): the test hook for exact resume.
    """
    config, checkpoint = resolve_resume(config)
    torch.set_num_threads(config.torch_threads)
    device = resolve_device(config.device)
    seed_everything(config.seed)
    action_generator = make_generator(config.seed, device)  # policy sampling
    minibatch_generator = make_generator(config.seed + 1)   # minibatch shuffles (CPU)

    env = make_env(config.env, config.num_envs, device=device, seed=config.seed,
                   **({"vectorization": config.vectorization} if config.env.startswith("gym:") else {}))
    try:
        action = ActionInfo.from_spec(env.action_spec)
        obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
        agent = build_agent(config, obs_dim, action, device)
        net = agent.policy
        # fused: one kernel for the whole Adam step instead of a Python loop over parameters
        # (the networks are tiny, so per-op dispatch dominates the update's cost).
        optimizer = torch.optim.Adam(net.parameters(), lr=config.lr, eps=config.adam_eps, fused=device.type in ("cpu", "cuda"))
        hp = config.hyperparams()
        obs = env.reset(seed=config.seed)
        tracker = EpisodeTracker(config.num_envs, device)
        # Episode statistics of the current logging window, kept on the device.
        window = {name: torch.zeros((), dtype=torch.float64, device=device) for name in ("count", "return_sum", "return_sq_sum", "length_sum")}
        counters: dict[str, Any] = {"iteration": 0, "env_steps": 0, "wall_time": 0.0}

        if checkpoint is not None:
            source = checkpoint["path"]
            run_dir = _run_dir_of(checkpoint, config.resume)
            if ActionInfo.from_dict(checkpoint["extra"]["action"]) != action or int(checkpoint["extra"]["obs_dim"]) != obs_dim:
                raise CheckpointError(f"checkpoint {source}: its spaces do not match env={config.env!r}")
            load_state_dict_checked(net, checkpoint["models"]["agent"], name="agent", source=source)
            optimizer.load_state_dict(checkpoint["optimizers"]["agent"])
            restore_rng_state(checkpoint["rng"], {"action": action_generator, "minibatch": minibatch_generator})
            extra = checkpoint["extra"]
            if not restore_env_state(env, extra["env_state"], source=source):
                warnings.warn(f"env={config.env}: its state could not be checkpointed; the resumed run continues from "
                              "freshly reset environments and is not bit-identical to an uninterrupted one", stacklevel=2)
            else:
                obs = extra["obs"].to(device)
                # Running episode returns belong to the restored episodes only.
                tracker.load_state_dict(extra["tracker"])
            window = {name: value.to(device) for name, value in extra["window"].items()}
            counters.update(checkpoint["counters"])
        else:
            run_dir = create_run_dir(config.log_dir or default_run_dir("ppo"), subdirs=("checkpoints",))
            write_run_config(run_dir, config_to_dict(config), kind=KIND)
        start = int(counters["iteration"])
        resumed_at = start if checkpoint is not None else None
        logger = MetricsLogger(run_dir, step_key="iteration", jsonl_name="metrics.jsonl",
                               tensorboard_dir="tensorboard" if config.tensorboard else None, resume_step=resumed_at)
        logger.write_meta({"kind": KIND, "env": config.env, "rl_mode": config.rl_mode})
        manager = CheckpointManager(run_dir / "checkpoints", keep=3)

        def save(iteration: int) -> Path:
            state = build_checkpoint(
                kind=KIND, config=config_to_dict(dataclasses.replace(config, resume=None)), counters=dict(counters),
                models={"agent": net.state_dict()}, optimizers={"agent": optimizer.state_dict()},
                rng=capture_rng_state({"action": action_generator, "minibatch": minibatch_generator}),
                extra={"obs": obs.detach().cpu().clone(), "tracker": tracker.state_dict(), "window": {k: v.cpu() for k, v in window.items()},
                       "env_state": capture_env_state(env), "action": action.to_dict(), "obs_dim": obs_dim},
            )
            return manager.save(iteration, state)

        # Rollout storage: per-step tensors are appended to lists and stacked once per
        # rollout into batch-major [num_envs, num_steps, ...] (pglab's [B, T]); one stack
        # per field costs less than a slice assignment per field and step.
        N, T = config.num_envs, config.num_steps

        num_iterations = config.num_iterations
        interrupted = False
        iteration = start
        session_iterations = 0
        train_seconds = 0.0
        window_start, window_steps = time.perf_counter(), 0
        bar = progress_bar(num_iterations, desc=f"train ppo {config.env} --rl-mode {config.rl_mode}", initial=start, unit="iter")
        try:
            with StopRequested() as stop:
                for iteration in range(start + 1, num_iterations + 1):
                    tick = time.perf_counter()
                    if config.anneal_lr:
                        # lr_k = lr * (1 - (k - 1) / K): linear decay to 0 (CleanRL)
                        optimizer.param_groups[0]["lr"] = config.lr * (1.0 - (iteration - 1.0) / num_iterations)

                    # -- 1. collect a rollout with the current policy ------------------
                    steps: dict[str, list[torch.Tensor]] = {name: [] for name in ROLLOUT_FIELDS}
                    no_trunc_value = torch.zeros(N, device=device)
                    # inference_mode, not just no_grad: it also skips autograd's version
                    # counters, about 10% of a CPU rollout step with these small nets.
                    with torch.inference_mode():
                        policy_step = net.rollout_actor()  # actor + critic side by side, weights frozen
                        for step in range(T):
                            actions, log_probs, values = policy_step(obs, action_generator)
                            steps["obs"].append(obs)
                            obs, rewards, dones, truncs, info = env.step(agent.to_env(actions))
                            for name, value in (("actions", actions), ("log_probs", log_probs), ("values", values),
                                                ("rewards", rewards), ("dones", dones), ("truncs", truncs)):
                                steps[name].append(value)
                            # A time limit: the future of the pre-reset state is bootstrapped.
                            steps["trunc_values"].append(net.value(info.get("final_obs", obs)) if bool(truncs.any())
                                                         else no_trunc_value)

                        # -- 2. bootstrap value of the state after the rollout ----------
                        last_value = net.value(obs)
                    obs_buf, action_buf, log_prob_buf, value_buf, reward_buf, done_buf, trunc_buf, trunc_value_buf = (
                        torch.stack(steps[name], dim=1) for name in ROLLOUT_FIELDS)
                    episode_return_buf, episode_length_buf = tracker.update_rollout(reward_buf, done_buf | trunc_buf)

                    # Finished episodes of this rollout (returns/lengths are 0 elsewhere).
                    finished = episode_length_buf > 0
                    episode_returns = episode_return_buf.double()
                    window["count"] += finished.sum()
                    window["return_sum"] += episode_returns.sum()
                    window["return_sq_sum"] += episode_returns.pow(2).sum()
                    window["length_sum"] += episode_length_buf.sum()

                    # -- 3. advantages and value targets --------------------------------
                    if config.rl_mode == "reinforce_raw":
                        # Monte Carlo reward-to-go within the rollout, no critic anywhere.
                        returns = reward_to_go(reward_buf, done_buf | trunc_buf, config.gamma)
                        advantages = returns
                    else:
                        # V(s'_t): the next row's value, the final observation's value at a
                        # time limit, last_value after the final step.
                        next_values = torch.cat([value_buf[:, 1:], last_value[:, None]], dim=1)
                        next_values = torch.where(trunc_buf, trunc_value_buf, next_values)
                        advantages, returns = compute_gae(reward_buf, value_buf, done_buf, trunc_buf, last_value,
                                                          config.gamma, config.gae_lambda, next_values=next_values)

                    # -- 4. optimise: K epochs of minibatches (ppo) or one step ---------
                    flat_obs = obs_buf.reshape(N * T, *env.observation_shape)
                    flat_actions = action_buf.reshape(N * T, *action_buf.shape[2:])
                    batch = OnPolicyBatch(log_prob_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1), value_buf.reshape(-1))

                    def evaluate(index: torch.Tensor):
                        return net.evaluate_actions(flat_obs[index], flat_actions[index])

                    metrics = onpolicy_update(evaluate, batch, net.parameters(), optimizer, hp, generator=minibatch_generator)

                    # -- 5. bookkeeping, logging, checkpoints ---------------------------
                    elapsed = time.perf_counter() - tick
                    train_seconds += elapsed
                    counters["iteration"] = iteration
                    counters["env_steps"] += N * T
                    counters["wall_time"] += elapsed
                    window_steps += N * T
                    session_iterations += 1
                    last = iteration == num_iterations
                    if iteration % config.log_interval == 0 or last:
                        count = window["count"]
                        mean = window["return_sum"] / count
                        row = {
                            "env_steps": counters["env_steps"],
                            "return/mean": mean,
                            "return/std": (window["return_sq_sum"] / count - mean.pow(2)).clamp_min(0).sqrt(),
                            "episode/length": window["length_sum"] / count,
                            "episode/count": count,
                            **metrics,
                            "stats/lr": optimizer.param_groups[0]["lr"],
                            "perf/iter_s": elapsed,
                            "perf/steps_per_s": window_steps / max(time.perf_counter() - window_start, 1e-9),
                        }
                        values = logger.log(iteration, row)
                        for value in window.values():
                            value.zero_()
                        window_start, window_steps = time.perf_counter(), 0
                        bar.set_postfix(ret=f"{values['return/mean']:.1f}", kl=f"{values.get('stats/approx_kl', 0.0):.4f}")
                    bar.update(1)
                    stop_now = stop.requested or (stop_after is not None and session_iterations >= stop_after)
                    if iteration % config.save_interval == 0 or last or stop_now:
                        save(iteration)
                    if stop_now and not last:
                        interrupted = True
                        echo(f"stopped: checkpoint saved at iteration {iteration} in {run_dir}; continue with --resume {run_dir}",
                             file=sys.stderr)
                        break
        finally:
            bar.close()
            logger.close()
    finally:
        env.close()

    evaluation = None
    if config.eval_episodes > 0 and not interrupted:
        evaluation = evaluate_agent(agent, config.env, episodes=config.eval_episodes, seed=config.seed + 10_000, device=device)
        atomic_write_json(run_dir / "evaluation.json", {"iteration": iteration, "env_steps": counters["env_steps"], **evaluation})
        echo(f"evaluation ({config.eval_episodes} episodes, deterministic): return {evaluation['return/mean']:.2f} "
             f"+- {evaluation['return/std']:.2f}; run directory: {run_dir}")
    return PPORunResult(run_dir=run_dir, iterations=iteration, env_steps=int(counters["env_steps"]),
                        train_seconds=train_seconds, evaluation=evaluation, interrupted=interrupted)


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

    Returns: ``episodes``, ``return/mean``, ``return/std``, ``return/min``,
    ``return/max``, ``length/mean``.
    """
    check_int("episodes", episodes, minimum=1)
    env = make_env(env_spec, episodes, device=device, seed=seed)
    try:
        obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
        if ActionInfo.from_spec(env.action_spec) != agent.action or obs_dim != agent.obs_dim:
            raise ConfigError("env", env_spec, "has other action/observation spaces than the checkpoint's environment")
        generator = make_generator(seed, device)
        obs = env.reset(seed=seed)
        returns = torch.zeros(episodes, dtype=torch.float64, device=device)
        lengths = torch.zeros(episodes, dtype=torch.int64, device=device)
        running = torch.ones(episodes, dtype=torch.bool, device=device)
        for _ in range(max_episode_steps):
            actions = agent.predict(obs, deterministic=deterministic, generator=generator)
            obs, rewards, dones, truncs, _ = env.step(actions)
            returns += torch.where(running, rewards.double(), torch.zeros_like(returns))
            lengths += running.long()
            running &= ~(dones | truncs)
            if not bool(running.any()):
                break
    finally:
        env.close()
    return {
        "episodes": float(episodes),
        "return/mean": float(returns.mean()),
        "return/std": float(returns.std(unbiased=False)),
        "return/min": float(returns.min()),
        "return/max": float(returns.max()),
        "length/mean": float(lengths.double().mean()),
    }
