"""``pglab train a2c``: streaming advantage actor-critic with TD(0) targets, no rollout buffer.

Every environment step of all ``num_envs`` copies is learned from at once and then
forgotten::

    obs = env.reset(seed)
    repeat until env_steps >= total_env_steps:                     (env_steps counts transitions)
        logits, V(s) = model(obs)                                  forward
        a ~ Categorical(softmax(logits))                           sample (int32 for the env)
        obs', r, done, trunc, info = env.step(a)                   batched env step (+ autoreset)
        (--obs-norm: model.observe(obs'); --reward-scale: r <- r / std(discounted return))
        V(s') = model(obs') under no_grad                          bootstrap
        losses = a2c_td0_losses(...)                               pglab.losses.a2c (the note's math)
        (losses["loss"] / update_every).backward()                 gradient accumulation
        every update_every env-steps: clip_grad_norm_, optimizer.step(), one log record
        obs = obs'

:func:`train_a2c` is *config -> build -> step*: :class:`A2CTrainer` builds the env, model,
optimiser and statistics and splits the loop into ``env_step`` (one line of the loop
above), ``optimizer_step`` and ``window`` (``update_every`` env-steps + one optimiser
step). Everything around it (run directory, resume, device, seed, logs, checkpoints every
``save_interval`` optimiser steps, SIGINT/SIGTERM, progress bar, summary.json, the error
line of a failed run) is the training shell's (:mod:`pglab.run.shell`), which checkpoints
what :meth:`A2CTrainer.tracked` registers.

Exact reuse of the bootstrap forward: inside an accumulation window the parameters do
not change, so ``model(obs')`` computed *with* gradient for the bootstrap of step t is
bit-for-bit the forward that step t+1 needs; the trainer keeps it (its detached value is
the target) instead of running the network twice. At a window's end the parameters
change, so the bootstrap there is a plain ``no_grad`` forward. ``--no-reuse-forward``
switches this off (DDP does, see :mod:`pglab.algos.a2c_distributed`).

Run directory (``--log-dir``)::

    config.json  metrics.csv  metrics.jsonl  tensorboard/  summary.json
    checkpoints/checkpoint_iter_*.pt  checkpoints/checkpoint_latest.pt

One record per optimiser step (step column ``opt_steps``); ``metrics.jsonl``'s first line
is the shell's ``{"meta": {...}}`` (``kind``, ``config``, ``versions``, ``device``,
``num_params``, ``architecture``, ``world_size``, ``env``, ``record_keys``):

=============================  ====================================================================
``env_steps``                  transitions so far, summed over environments (and ranks)
``loss``                       total loss, mean over the window's env-steps (before 1/update_every)
``loss/policy``                ``-mean(log pi(a|s) * adv)``
``loss/value``                 ``value_coef * mean((target - V(s))^2)``
``loss/entropy``               ``-entropy_coef * mean(H)``
``stats/entropy``              mean policy entropy (nats)
``stats/advantage_mean``       mean TD error ``target - V(s)``
``stats/value_mean``           mean ``V(s)``
``stats/grad_norm``            gradient norm before clipping
``stats/reward_mean``          mean reward per transition in the window
``stats/done_rate``            fraction of transitions that terminated
``stats/trunc_rate``           fraction of transitions that were truncated
``stats/reset_rate``           fraction with ``done | trunc``
``episode/count``              episodes finished in the window
``return/mean``                mean undiscounted return of those episodes *
``return/std``                 their standard deviation (population) *
``episode/length``             their mean length in env-steps *
``episode/success_rate``       fraction of them that succeeded (PixelGoalEnv: reached the goal) *;
                               only environments that define success (:mod:`pglab.envs.base`)
``stats/dist_p10/p50/p90``     percentiles of ``info["dist"]`` at the window's last env-step
                               (only for environments that report ``dist``)
``stats/lr``                   learning rate
``perf/step_s``                wall-clock seconds per optimiser step since the previous record (shell)
``perf/env_steps_per_s``       transitions (all environments and ranks) per wall-clock second (shell)
=============================  ====================================================================

\\* empty (no value) in a record whose window finished no episode.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pglab.agent import Agent, ObsSpec, check_observation
from pglab.algos.a2c_common import (
    DIST_KEYS,
    EPISODE_KEYS,
    LOG_NAME,
    PERF_KEYS,
    RECORD_KEYS,
    FreshEpisodes,
    WindowStats,
    build_env,
    env_entry,
    episode_summary,
    evaluate_policy,
    finished_episodes,
    format_postfix,
    latest,
    present,
    record_keys,
    run_result,
    sample_actions,
)
from pglab.configs.a2c import KIND, KINDS, STREAM_AC_KIND, A2CTrainConfig
from pglab.envs.base import EpisodeTracker, defines_success
from pglab.envs.normalize import ObsRewardNormalizer
from pglab.errors import CheckpointError, ConfigError
from pglab.losses.a2c import a2c_td0_losses
from pglab.nets.pixel_cnn import PixelActorCriticCNN
from pglab.nets.stream import StreamActorCritic
from pglab.report import warn_rounded_budget
from pglab.run.checkpoint import load_state_dict_checked
from pglab.run.config import config_from_dict
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun
from pglab.run.state import Value

__all__ = [
    "A2C_RECORD_KEYS",
    "DIST_KEYS",
    "KIND",
    "KINDS",
    "LOG_NAME",
    "SPEC",
    "A2CAgent",
    "A2CTrainConfig",
    "A2CTrainer",
    "agent_from_checkpoint",
    "build_env",
    "build_model",
    "evaluate_policy",
    "sample_actions",
    "self_test",
    "train_a2c",
]

# The trainer's metrics (the shell adds PERF_KEYS to every record).
A2C_RECORD_KEYS = (*RECORD_KEYS, "stats/grad_norm", "stats/lr")

SPEC = TrainerSpec(
    system="a2c",
    config_class=A2CTrainConfig,
    kinds=(KIND,),
    step_key="opt_steps",
    resumable=frozenset({"total_env_steps"}),
    total_steps=lambda c: c.total_opt_steps(),
    budget_field="total_env_steps",
    unstored=("self_test",),
)


def build_model(config: A2CTrainConfig, env) -> PixelActorCriticCNN:
    """The network for ``env``'s uint8 pixel stacks or bool boards ``[C, H, W]`` (discrete actions)."""
    shape = tuple(env.observation_shape)
    dtype = env.observation_dtype
    if len(shape) != 3 or dtype not in (torch.uint8, torch.bool):
        raise ConfigError(
            "env",
            config.env,
            f"needs uint8 pixel or bool board observations [C, H, W], got {dtype} {list(shape)}",
        )
    if env.action_spec.kind != "discrete":
        raise ConfigError("env", config.env, "needs a discrete action space")
    return PixelActorCriticCNN(
        shape[0],
        shape[1],
        shape[2],
        int(env.action_spec.num_actions),
        hidden=config.hidden or None,
        torso=config.torso,
        obs_kind="pixels" if dtype == torch.uint8 else "board",
        layer_norm=config.layer_norm,
        sparsity=config.sparsity,
        obs_norm=config.obs_norm,
    )


def build_reward_scaler(config: A2CTrainConfig, env) -> ObsRewardNormalizer | None:
    """``r / sqrt(var(R) + 1e-8)`` clipped to +-10, ``R = gamma R + r`` per environment (``--reward-scale``)."""
    if not config.reward_scale:
        return None
    assert config.num_envs is not None and config.gamma is not None  # set by the config
    return ObsRewardNormalizer(
        tuple(env.observation_shape), config.num_envs, normalize_obs=False, normalize_reward=True, gamma=config.gamma
    )


class A2CTrainer:
    """Env + model + optimiser + statistics, and the three pieces of the loop:
    :meth:`env_step`, :meth:`optimizer_step` and :meth:`window`.

    The caller seeds first (the training shell does; so does each DDP rank). ``counters``
    is the dict the trainer counts ``env_steps`` and ``opt_steps`` in: the shell's
    ``run.counters`` inside a run (default: a dict of its own). ``rank``, ``world_size``
    and ``wrap_model`` are set by :mod:`pglab.algos.a2c_distributed`; a single process
    leaves them at their defaults.
    """

    def __init__(
        self,
        config: A2CTrainConfig,
        *,
        device: torch.device,
        counters: dict[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
        wrap_model: Callable[[nn.Module], nn.Module] | None = None,
    ):
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.device = device
        self.counters = counters if counters is not None else {}
        self.counters.setdefault("env_steps", 0)
        self.counters.setdefault("opt_steps", 0)
        self.env_seed = config.seed + 1000 * rank  # each rank its own episodes
        self.env = build_env(config, self.device, seed=self.env_seed)
        self.model = build_model(config, self.env).to(self.device)
        assert config.lr is not None and config.num_envs is not None and config.gamma is not None  # set by the config
        self.gamma, self.num_envs = config.gamma, config.num_envs
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, eps=config.adam_eps)
        # DDP wraps the module after the weights are identical on every rank (same seed).
        self.train_model = wrap_model(self.model) if wrap_model is not None else self.model
        self.reuse_forward = config.reuse_forward and wrap_model is None
        self.action_generator = make_generator(config.seed + 7919 + 1000 * rank, self.device)
        self.tracker = EpisodeTracker(config.num_envs, self.device)
        self.stats = WindowStats(self.device, success=defines_success(self.env))
        self.obs = Value(self.env.reset(seed=self.env_seed).clone())
        self.reward_scaler = build_reward_scaler(config, self.env)
        if config.obs_norm:
            self.model.observe(self.obs.value)

    def tracked(self) -> dict[str, Any]:
        """What a checkpoint holds (:meth:`pglab.run.shell.TrainingRun.track`'s arguments).

        Rank 0 registers everything; the environment through its own ``state_dict`` where
        it has one (:func:`pglab.algos.a2c_common.env_entry`). Other DDP ranks take the
        weights and optimiser from rank 0's checkpoint and start fresh episodes with their
        own action noise.
        """
        fresh = FreshEpisodes(self.env, self.obs, self.tracker, seed=lambda: self.env_seed + self.counters["opt_steps"])
        shared = {
            "models": {"model": self.model},
            "optimizers": {"adam": self.optimizer},
            "meta": {"architecture": self.model.architecture()},
        }
        if self.rank > 0:
            return {**shared, "state": {"env": fresh}}
        scaler = {"reward_scale": self.reward_scaler} if self.reward_scaler is not None else {}
        return {
            **shared,
            "rngs": {"actions": self.action_generator},
            # registration order is restore order: the env entry last (FreshEpisodes)
            "state": {
                "tracker": self.tracker,
                "window": self.stats,
                "obs": self.obs,
                **scaler,
                "env": env_entry(self.env, fresh),
            },
        }

    def info(self) -> dict[str, Any]:
        """Facts for the meta line of metrics.jsonl (not checked on resume)."""
        return {
            "world_size": self.world_size,
            "env": {
                "observation_shape": list(self.env.observation_shape),
                "num_actions": int(self.env.action_spec.num_actions),
            },
            "record_keys": ["opt_steps", *record_keys(A2C_RECORD_KEYS, self.env), *PERF_KEYS],
        }

    # -- one env-step ----------------------------------------------------------------
    def env_step(self, cached: tuple[torch.Tensor, torch.Tensor] | None, *, last_in_window: bool):
        """Act, step the env, bootstrap, backpropagate the scaled loss; returns the
        forward to reuse at the next env-step (or ``None``)."""
        cfg = self.config
        # forward: logits [N, A], V(s) [N]
        logits, values = cached if cached is not None else self.train_model(self.obs.value)
        # sample: a ~ Categorical(softmax(logits)), int32 for the env
        actions = sample_actions(logits, self.action_generator)
        next_obs, reward, done, trunc, info = self.env.step(actions.to(torch.int32))
        next_obs = next_obs.clone()  # the env may reuse its buffer
        if cfg.obs_norm:  # the statistics include an observation before its first forward
            self.model.observe(next_obs)
        scaled = reward
        if self.reward_scaler is not None:
            scaled = self.reward_scaler.step(next_obs, reward, done | trunc)[1]
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
        losses = a2c_td0_losses(
            logits,
            actions,
            values,
            scaled,
            done,
            trunc,
            v_next,
            gamma=self.gamma,
            value_coef=cfg.value_coef,
            entropy_coef=cfg.entropy_coef,
        )
        # accumulate: the window's gradient is the mean of its env-steps' gradients
        (losses["loss"] / cfg.update_every).backward()
        episode_returns, episode_lengths, ended, succeeded = finished_episodes(self.tracker, reward, done, trunc, info)
        self.stats.add(
            losses, reward, done, trunc, episode_returns, episode_lengths, info.get("dist"), ended, succeeded
        )
        self.counters["env_steps"] += self.num_envs * self.world_size
        self.obs.value = next_obs
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
    def record(self, grad_norm: torch.Tensor) -> dict[str, Any]:
        """The log record of the window just finished (one host sync)."""
        return {
            "env_steps": self.counters["env_steps"],
            **self.stats.summary({"stats/grad_norm": grad_norm}),
            "stats/lr": self.optimizer.param_groups[0]["lr"],
        }

    def train(
        self, run: TrainingRun, *, no_sync=None, any_rank_stops: Callable[[bool], bool] | None = None
    ) -> dict[str, float]:
        """One window per optimiser step until the budget or a stop request, inside the
        training shell; returns the last logged record. Under DDP (rank 0),
        ``any_rank_stops(requested)`` tells whether any rank was asked to stop, so that
        every rank leaves after the same optimiser step."""
        total = self.config.total_opt_steps(self.world_size)
        per_step = self.config.env_steps_per_opt_step * self.world_size
        warn_rounded_budget(
            "total_env_steps",
            self.config.total_env_steps,
            per_step,
            total,
            "optimiser steps",
            "num_envs x update_every" + (" x ranks" if self.world_size > 1 else "") + " transitions",
        )
        last: dict[str, float] = {}
        try:
            for opt_step in run.steps(total, desc="train a2c --algo a2c", unit="opt"):
                grad_norm = self.window(no_sync)
                last = latest(last, present(run.log(opt_step, self.record(grad_norm))))
                run.set_postfix(**format_postfix(last))
                self.stats.reset()
                if any_rank_stops is not None and opt_step < total and any_rank_stops(run.stop_requested):
                    run.request_stop()  # another rank was signalled: rank 0 saves and stops with it
        finally:
            self.env.close()
        return last


def train_a2c(
    config: A2CTrainConfig, *, given: frozenset[str] | None = None, echo=print, stop_after: int | None = None
) -> dict[str, Any]:
    """Train (or resume) a single-process ``--algo a2c`` run inside the training shell.

    Args:
        config: the trainer config (``resume`` may be set).
        given: the fields the user set (from :func:`pglab.run.config.parse_flags`);
            ``None`` (the Python API) counts every non-default field as given.
        echo: where messages for the user go.
        stop_after: stop as if SIGTERM arrived after this many optimiser steps (tests).

    Returns:
        ``{"run_dir", "opt_steps", "env_steps", "interrupted", "exit_code", "last"}``
        (``last``: the last logged record).
    """
    if config.algo != "a2c":
        raise ConfigError(
            "algo",
            config.algo,
            "train_a2c trains --algo a2c; stream-ac runs train with "
            "pglab.algos.stream_ac.train_stream_ac (pglab train a2c chooses for you)",
        )
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        trainer = A2CTrainer(run.config, device=run.device, counters=run.counters)
        run.track(**trainer.tracked(), info=trainer.info())
        last = trainer.train(run)
        run.finish(episode_summary(last))
    return run_result(run, last)


# -- the agent API (pglab.load_checkpoint) ----------------------------------------------
@dataclass(repr=False)
class A2CAgent(Agent):
    """A trained actor-critic of either algorithm: ``act(obs)`` -> actions, ``value(obs)`` ->
    ``V(s)``, ``predict`` on NumPy arrays (from :class:`pglab.agent.Agent`). Actions are
    int32 indices, or for a stream-ac Gaussian policy float32 vectors within the action
    bounds."""

    policy: nn.Module
    config: A2CTrainConfig
    kind: str
    counters: dict[str, int]
    device: torch.device
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def model(self) -> nn.Module:
        return self.policy

    @property
    def obs_spec(self) -> ObsSpec:
        """What :meth:`act` and :meth:`value` read: pixels ``[B, K, H, W]`` 0..255, boards
        ``[B, C, H, W]``, or (stream-ac) real-valued vectors ``[B, D]``."""
        arch = self.extra["architecture"]
        sizes = arch["obs_shape"] if "obs_shape" in arch else (arch["in_channels"], arch["height"], arch["width"])
        shape: tuple[int | str, ...] = ("B", *(int(size) for size in sizes))
        # the batched A2C's architecture names no obs_kind when it reads pixels
        return ObsSpec(shape, "pixels" if arch.get("obs_kind", "pixels") == "pixels" else "real")

    def _checked(self, obs: torch.Tensor, where: str) -> torch.Tensor:
        """``obs`` checked against :attr:`obs_spec` (a board may come as bool)."""
        if isinstance(obs, torch.Tensor) and obs.dtype == torch.bool and self.obs_spec.values == "real":
            obs = obs.to(torch.float32)
        return check_observation(obs, self.obs_spec, where=where, device=self.device)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Observations ``[N, ...]`` -> actions ``[N]`` (int32) or ``[N, D]`` (float32): the
        most probable action (a Gaussian's mean), or a sample drawn with ``generator``.

        Pixels are uint8 (integer tensors, and floats holding whole numbers, in 0..255 are
        cast to uint8); a wrong type, shape or dtype, or a value out of range, raises
        :class:`~pglab.agent.ObservationError`."""
        obs = self._checked(obs, "A2CAgent.act")
        generator = generator or torch.Generator(device=obs.device)
        if isinstance(self.policy, StreamActorCritic):
            return self.policy.act(obs, deterministic, generator)
        logits, _ = self.policy(obs)
        if deterministic:
            return logits.argmax(dim=1).to(torch.int32)
        return sample_actions(logits, generator).to(torch.int32)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations (checked as for :meth:`act`) -> float32 ``[N]``."""
        return self.policy(self._checked(obs, "A2CAgent.value"))[1]

    def make_env(self, num_envs: int, *, seed: int, device: torch.device | str | None = None):
        """The environment the agent was trained on, with ``num_envs`` copies."""
        target = torch.device(device) if device is not None else self.device
        return build_env(self.config, target, seed=seed, num_envs=num_envs)


def agent_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "cpu") -> A2CAgent:
    """Rebuild the agent stored in an ``a2c-*`` checkpoint (from ``load_checkpoint_file``)."""
    from pglab.run.device import resolve_device

    if checkpoint.get("kind") not in KINDS:
        raise CheckpointError(
            f"checkpoint {checkpoint.get('path')}: kind={checkpoint.get('kind')!r} is not an a2c checkpoint"
        )
    device = resolve_device(device) if isinstance(device, str) else device
    config = config_from_dict(A2CTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    arch = checkpoint.get("extra", {}).get("architecture")
    if arch is None:
        raise CheckpointError(f"checkpoint {checkpoint.get('path')}: no network architecture recorded")
    policy: nn.Module
    try:
        policy = StreamActorCritic(**arch) if checkpoint["kind"] == STREAM_AC_KIND else PixelActorCriticCNN(**arch)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {checkpoint.get('path')}: an unknown network architecture ({exc})") from exc
    load_state_dict_checked(policy, checkpoint["models"]["model"], name="model", source=str(checkpoint.get("path")))
    policy.to(device).eval()
    return A2CAgent(
        policy=policy,
        config=config,
        kind=checkpoint["kind"],
        counters=dict(checkpoint["counters"]),
        device=device,
        extra={"architecture": arch},
    )


def self_test(echo=print) -> int:
    """Tiny end-to-end check on the CPU (no GPU, no ROM): 2 optimiser steps on 8 envs.

    Passes when the losses are finite, the parameters changed, metrics.csv and
    metrics.jsonl hold one record per optimiser step with the documented keys, and the
    checkpoint loads back into an agent. Prints one JSON summary; returns 0 or 1.
    """
    import tempfile

    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.seeding import seed_everything

    def quiet(*args: Any, **kwargs: Any) -> None:
        pass

    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        config = A2CTrainConfig(num_envs=8, total_env_steps=32, update_every=2, device="cpu", log_dir=run_dir, seed=0)
        # the initial weights: the shell seeds before the trainer builds its network
        seed_everything(config.seed)
        before = build_model(config, build_env(config, torch.device("cpu"), seed=config.seed)).state_dict()
        result = train_a2c(config, echo=quiet)
        after = load_checkpoint_file(run_dir, kinds=KINDS)["models"]["model"]
        checks["parameters_changed"] = any(not torch.equal(before[k], after[k]) for k in before)
        lines = [json.loads(line) for line in (run_dir / LOG_NAME).read_text().splitlines()]
        checks["meta_first"] = "meta" in lines[0] and "architecture" in lines[0]["meta"]
        records = lines[1:]
        checks["one_record_per_opt_step"] = len(records) == config.total_opt_steps() == 2
        allowed = {"opt_steps", *A2C_RECORD_KEYS, *PERF_KEYS, *DIST_KEYS}
        required = allowed - set(EPISODE_KEYS) - set(DIST_KEYS)
        checks["documented_keys"] = all(required <= set(r) <= allowed for r in records)
        checks["csv_written"] = len((run_dir / "metrics.csv").read_text().splitlines()) == 1 + len(records)
        checks["finite_losses"] = all(math.isfinite(r["loss"]) for r in records)
        checks["counters_increase"] = [r["opt_steps"] for r in records] == [1, 2] and records[-1]["env_steps"] == 32
        agent = agent_from_checkpoint(load_checkpoint_file(run_dir, kinds=KINDS))
        checks["checkpoint_loads"] = agent.counters["opt_steps"] == 2
        summary = {
            "self_test": "pass" if all(checks.values()) else "fail",
            "checks": checks,
            "opt_steps": result["opt_steps"],
            "env_steps": result["env_steps"],
            "loss": records[-1]["loss"] if records else None,
        }
    echo(json.dumps(summary))
    return 0 if all(checks.values()) else 1
