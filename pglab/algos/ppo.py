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

Exact resume: the checkpoint stores networks, optimiser, every RNG, the current
observations, running episode statistics and the environments' own state (for
Gymnasium envs whose state lives in plain attributes: numpy arrays, numbers and
``np.random.Generator``s, which covers classic control and toy text). So on the CPU,
N iterations + ``--resume`` + N more == 2N iterations, bit for bit, when the budget of
the first run was already 2N or ``anneal_lr`` is off (the annealed learning rate is a
function of the total budget, so extending the budget changes the rest of its schedule).
"""
from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pglab.agent import Agent
from pglab.algos.onpolicy import OnPolicyBatch, onpolicy_update
from pglab.configs.ppo import PPOConfig  # re-exported: pglab.algos.ppo.PPOConfig keeps working
from pglab.envs.base import ActionSpec, EpisodeTracker
from pglab.envs.registry import make_env
from pglab.errors import CheckpointError, ConfigError
from pglab.estimators import compute_gae, reward_to_go
from pglab.nets.actor_critic import ActorCritic, build_actor_critic
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
# Extending total_steps with anneal_lr changes the rest of the learning-rate schedule.
SPEC = TrainerSpec(system="ppo", config_class=PPOConfig, kinds=(KIND,), step_key="iteration",
                   resumable=frozenset({"total_steps", "log_interval", "eval_episodes"}),
                   total_steps=lambda config: config.num_iterations, budget_field="total_steps")

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


class PPOAgent(Agent):
    """A trained actor-critic ready to act (the :class:`pglab.agent.Agent` API).

    - ``act(obs, deterministic=True)``: tensors ``[B, *obs_shape]`` in, environment-ready
      actions out (int64 ``[B]`` for Discrete, float ``[B, *shape]`` clipped to the Box);
    - ``predict(obs, deterministic=True)``: the same on NumPy arrays;
    - ``value(obs)``: the critic's ``V(s)``, float ``[B]``.

    Attributes: ``kind`` (``"ppo"``), ``config`` (:class:`PPOConfig`), ``device``,
    ``policy`` (the :class:`~pglab.nets.actor_critic.ActorCritic`, actor and critic),
    ``action`` (:class:`ActionInfo`), ``obs_dim``.
    """

    kind = KIND

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

    def act(self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Environment-ready actions for ``obs [B, *obs_shape]``: the mode/mean when
        ``deterministic``, else a sample (drawn with ``generator`` when given)."""
        self.policy.check_obs(obs, "act")
        with torch.no_grad():
            raw = self.policy.deterministic_action(obs) if deterministic else self.policy.act(obs, generator)[0]
        return self.to_env(raw)


def build_agent(config: PPOConfig, obs_dim: int, action: ActionInfo, device: torch.device) -> PPOAgent:
    net = build_actor_critic(obs_dim, action.kind, action.size, config.hidden_dims,
                             activation=config.activation, log_std_init=config.log_std_init).to(device)
    return PPOAgent(net, config, action, obs_dim, device)


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "auto") -> PPOAgent:
    """The :class:`PPOAgent` stored in a loaded ``ppo`` checkpoint (``pglab.load_checkpoint``).

    ``device``: a ``torch.device`` or ``auto``/``cpu``/``cuda[:N]``."""
    device = resolve_device(device) if isinstance(device, str) else torch.device(device)
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
    exit_code: int
    """the command's exit code: 0, or :data:`pglab.errors.EXIT_INTERRUPTED` after a stop"""


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


def train_ppo(config: PPOConfig, *, given: frozenset[str] | None = None, echo: Callable[..., None] = print,
              stop_after: int | None = None) -> PPORunResult:
    """Train (or, with ``config.resume``, continue) a run.

    Args:
        config: the run's configuration.
        given: the fields the user set on the command line or in ``--config`` (what a
            ``--resume`` applies or refuses); ``None`` (the Python API): the fields that
            differ from their defaults.
        echo: where messages for the user go (``print``-like).
        stop_after: behave as if SIGTERM arrived after this many iterations of this
            session (checkpoint, then return): the test hook for exact resume.
    """
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config, device = run.config, run.device
        action_generator = make_generator(config.seed, device)  # policy sampling
        minibatch_generator = make_generator(config.seed + 1)   # minibatch shuffles (CPU)
        env = make_env(config.env, config.num_envs, device=device, seed=config.seed,
                       **({"vectorization": config.vectorization} if config.env.startswith("gym:") else {}))
        try:
            agent, train_seconds = _train_iterations(run, config, env, action_generator, minibatch_generator)
        finally:
            env.close()

        # -- final evaluation of the deterministic policy on held-out seeds ---------------
        iteration, env_steps = int(run.counters["iteration"]), int(run.counters["env_steps"])
        evaluation = None
        if config.eval_episodes > 0 and not run.interrupted:
            evaluation = evaluate_agent(agent, config.env, episodes=config.eval_episodes, seed=config.seed + 10_000, device=device)
            atomic_write_json(run.run_dir / "evaluation.json", {"iteration": iteration, "env_steps": env_steps, **evaluation})
            echo(f"evaluation ({config.eval_episodes} episodes, deterministic): return {evaluation['return/mean']:.2f} "
                 f"+- {evaluation['return/std']:.2f}; run directory: {run.run_dir}")
        run.finish({"env_steps": env_steps, **{f"eval/{key}": value for key, value in (evaluation or {}).items()}})
    return PPORunResult(run_dir=run.run_dir, iterations=iteration, env_steps=env_steps, train_seconds=train_seconds,
                        evaluation=evaluation, interrupted=run.interrupted, exit_code=run.exit_code)


def _train_iterations(run: TrainingRun, config: PPOConfig, env: Any, action_generator: torch.Generator,
                      minibatch_generator: torch.Generator) -> tuple[PPOAgent, float]:
    """Build the agent (restoring ``run.checkpoint``) and run the iterations.

    Returns the agent and the seconds spent in iterations (rollout + update)."""
    device = run.device
    # -- build ---------------------------------------------------------------------------
    action = ActionInfo.from_spec(env.action_spec)
    obs_dim = int(np.prod(env.observation_shape)) if env.observation_shape else 1
    agent = build_agent(config, obs_dim, action, device)
    net = agent.policy
    # fused: one kernel for the whole Adam step instead of a Python loop over parameters
    # (the networks are tiny, so per-op dispatch dominates the update's cost).
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr, eps=config.adam_eps, fused=device.type in ("cpu", "cuda"))
    hp = config.update
    obs = env.reset(seed=config.seed)
    tracker = EpisodeTracker(config.num_envs, device)
    window = EpisodeWindow(device)
    run.counters.setdefault("env_steps", 0)

    if run.checkpoint is not None:
        checkpoint = run.checkpoint
        source = checkpoint["path"]
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
        window.load_state_dict(extra["window"])
    run.logger.write_meta({"kind": KIND, "env": config.env, "algo": config.algo})

    def make_checkpoint() -> dict[str, Any]:
        return build_checkpoint(
            kind=KIND, config=config_to_dict(replace(config, resume=None)), counters=dict(run.counters),
            models={"agent": net.state_dict()}, optimizers={"agent": optimizer.state_dict()},
            rng=capture_rng_state({"action": action_generator, "minibatch": minibatch_generator}),
            extra={"obs": obs.detach().cpu().clone(), "tracker": tracker.state_dict(), "window": window.state_dict(),
                   "env_state": capture_env_state(env), "action": action.to_dict(), "obs_dim": obs_dim},
        )

    # Rollout storage: per-step tensors are appended to lists and stacked once per
    # rollout into batch-major [num_envs, num_steps, ...] (pglab's [B, T]); one stack
    # per field costs less than a slice assignment per field and step.
    N, T = config.num_envs, config.num_steps
    num_iterations = config.num_iterations
    train_seconds = 0.0
    window_start, window_steps = time.perf_counter(), 0
    for iteration in run.steps(num_iterations, save=make_checkpoint, desc=f"train ppo {config.env} --algo {config.algo}"):
        tick = time.perf_counter()
        if config.anneal_lr:
            # lr_k = lr * (1 - (k - 1) / K): linear decay to 0 (CleanRL)
            optimizer.param_groups[0]["lr"] = config.lr * (1.0 - (iteration - 1.0) / num_iterations)

        # -- 1. collect a rollout with the current policy ------------------------------
        steps: dict[str, list[torch.Tensor]] = {name: [] for name in ROLLOUT_FIELDS}
        no_trunc_value = torch.zeros(N, device=device)
        # inference_mode, not just no_grad: it also skips autograd's version counters,
        # about 10% of a CPU rollout step with these small nets.
        with torch.inference_mode():
            policy_step = net.rollout_actor()  # actor + critic side by side, weights frozen
            for _ in range(T):
                actions, log_probs, values = policy_step(obs, action_generator)
                steps["obs"].append(obs)
                obs, rewards, dones, truncs, info = env.step(agent.to_env(actions))
                for name, value in (("actions", actions), ("log_probs", log_probs), ("values", values),
                                    ("rewards", rewards), ("dones", dones), ("truncs", truncs)):
                    steps[name].append(value)
                # A time limit: the future of the pre-reset state is bootstrapped.
                steps["trunc_values"].append(net.value(info.get("final_obs", obs)) if bool(truncs.any()) else no_trunc_value)

            # -- 2. bootstrap value of the state after the rollout ---------------------
            last_value = net.value(obs)
        obs_buf, action_buf, log_prob_buf, value_buf, reward_buf, done_buf, trunc_buf, trunc_value_buf = (
            torch.stack(steps[name], dim=1) for name in ROLLOUT_FIELDS)
        window.add(*tracker.update_rollout(reward_buf, done_buf | trunc_buf))

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
            advantages, returns = compute_gae(reward_buf, value_buf, done_buf, trunc_buf, last_value,
                                              config.update.gamma, config.update.gae_lambda, next_values=next_values)

        # -- 4. optimise: K epochs of minibatches (ppo) or one step --------------------
        flat_obs = obs_buf.reshape(N * T, *env.observation_shape)
        flat_actions = action_buf.reshape(N * T, *action_buf.shape[2:])
        batch = OnPolicyBatch(log_prob_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1), value_buf.reshape(-1))

        def evaluate(index: torch.Tensor):
            return net.evaluate_actions(flat_obs[index], flat_actions[index])

        update_metrics = onpolicy_update(evaluate, batch, net.parameters(), optimizer, hp, generator=minibatch_generator)

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
                "perf/iter_s": elapsed,
                "perf/steps_per_s": window_steps / max(time.perf_counter() - window_start, 1e-9),
            }
            logged = run.log(iteration, row)
            window.reset()
            window_start, window_steps = time.perf_counter(), 0
            mean_return = logged["return/mean"]
            run.set_postfix(ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
                            kl=f"{logged.get('stats/approx_kl', 0.0):.4f}")

    return agent, train_seconds


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
    env = make_env(env_spec, episodes, device=device, seed=seed)
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
