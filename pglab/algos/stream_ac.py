"""Stream-AC(lambda) of Elsayed, Vasan & Mahmood (2024), "Streaming Deep Reinforcement
Learning Finally Works" (``pglab train a2c --algo stream-ac --num-envs 1``).

One environment, one update per transition, no buffer, no batch. The recipe:

- separate actor and critic networks with LayerNorm (no affine) before every activation
  (LeakyReLU) and *sparse initialisation* (a fraction ``sparsity`` of each unit's input
  weights set to zero, the rest LeCun-uniform): :class:`pglab.nets.pixel_cnn.StreamActorCritic`;
- online normalisation of observations (running per-pixel mean / variance, Welford) and
  reward scaling by the running standard deviation of the discounted return;
- eligibility traces and the ObGD optimiser (overshooting-bounded gradient descent)::

      delta   = r + gamma (1 - done) V(s') - V(s)
      z_w     = gamma lambda z_w + grad_w V(s)                               (critic)
      z_th    = gamma lambda z_th + grad_th [log pi(a|s) + c_H sign(delta) H(pi(.|s))]
      M       = alpha kappa max(|delta|, 1) ||z||_1;   alpha_eff = alpha / max(M, 1)
      w      += alpha_eff delta z                                            (each network)

  with kappa = ``kappa`` (2) for the critic and 3 for the actor, as in the paper's code;
  traces are cleared when an episode ends (``done | trunc``).

:func:`train_stream_ac` is *config -> build -> step* inside the training shell
(:mod:`pglab.run.shell`), like the batched trainer: :class:`StreamACLearner` builds the
run (env, networks, ObGD optimisers, reward scaler, statistics) and holds its two phases,
:meth:`~StreamACLearner.transition` (one update) and :meth:`~StreamACLearner.row` (one
log record). An "optimiser step" is one transition (``opt_steps == env_steps``, the step
column), checkpoints come every ``save_interval`` transitions, and one record with the
batched trainer's metrics (:mod:`pglab.algos.a2c_common`) is logged every ``LOG_EVERY``
transitions and at the end. A stop writes no record: the window's sums travel with the
checkpoint, and the resumed run logs the uninterrupted run's records. There is no
gradient norm and no single learning rate: ``stats/lr/actor`` and ``stats/lr/critic`` are
the mean effective ObGD step sizes ``alpha_eff`` of the window; the shell's
``perf/step_s`` is seconds per transition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from pglab.algos.a2c_common import (
    PERF_KEYS,
    RECORD_KEYS,
    FreshEpisodes,
    WindowStats,
    build_env,
    env_entry,
    episode_summary,
    finished_episodes,
    format_postfix,
    present,
    run_result,
    sample_actions,
)
from pglab.configs.a2c import STREAM_AC_KIND, A2CTrainConfig
from pglab.envs.base import EpisodeTracker
from pglab.errors import ConfigError
from pglab.nets.nature_cnn import build_stream_actor_critic
from pglab.nets.pixel_cnn import StreamActorCritic, sparse_init_
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun
from pglab.run.state import Value

__all__ = [
    "SPEC",
    "STREAM_AC_RECORD_KEYS",
    "ObGD",
    "RewardScaler",
    "StreamACLearner",
    "StreamActorCritic",
    "sparse_init_",
    "train_stream_ac",
]

LOG_EVERY = 1000
ACTOR_KAPPA = 3.0
# The trainer's metrics (the shell adds PERF_KEYS to every record).
STREAM_AC_RECORD_KEYS = (*RECORD_KEYS, "stats/lr/actor", "stats/lr/critic")

SPEC = TrainerSpec(
    system="a2c",
    config_class=A2CTrainConfig,
    kinds=(STREAM_AC_KIND,),
    step_key="opt_steps",
    resumable=frozenset({"total_env_steps"}),
    total_steps=lambda c: c.total_env_steps,
    budget_field="total_env_steps",
    unstored=("self_test",),
)


class ObGD:
    """Overshooting-bounded gradient descent with eligibility traces (one network)."""

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, gamma: float, lam: float, kappa: float):
        self.params, self.lr, self.gamma, self.lam, self.kappa = list(params), lr, gamma, lam, kappa
        self.traces = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, delta: torch.Tensor, reset: bool) -> float:
        """Uses each parameter's ``.grad`` (the gradient to trace); returns the step size."""
        for trace, param in zip(self.traces, self.params, strict=True):
            assert param.grad is not None, "ObGD.step: backward() first"
            trace.mul_(self.gamma * self.lam).add_(param.grad)  # z = gamma lambda z + grad
        delta_value = float(delta)
        z_norm = float(torch.stack([trace.abs().sum() for trace in self.traces]).sum())
        bound = self.lr * self.kappa * max(abs(delta_value), 1.0) * z_norm  # M = alpha kappa max(|delta|,1) ||z||_1
        step_size = self.lr / max(bound, 1.0)  # alpha / max(M, 1)
        for param, trace in zip(self.params, self.traces, strict=True):
            param.add_(trace, alpha=step_size * delta_value)  # w += alpha_eff delta z
            param.grad = None
        if reset:
            for trace in self.traces:
                trace.zero_()
        return step_size

    def state_dict(self) -> dict[str, Any]:
        return {"traces": [t.clone() for t in self.traces]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for trace, saved in zip(self.traces, state["traces"], strict=True):
            trace.copy_(saved)


class RewardScaler:
    """r / std(G) with G the running discounted return (reset at episode ends)."""

    def __init__(self, gamma: float):
        self.gamma = gamma
        self.state = {"ret": 0.0, "count": 0.0, "mean": 0.0, "m2": 0.0}

    def __call__(self, reward: float, finished: bool) -> float:
        s = self.state
        s["ret"] = self.gamma * s["ret"] + reward
        s["count"] += 1
        delta = s["ret"] - s["mean"]
        s["mean"] += delta / s["count"]
        s["m2"] += delta * (s["ret"] - s["mean"])
        if finished:
            s["ret"] = 0.0
        std = math.sqrt(s["m2"] / s["count"]) if s["count"] > 1 else 1.0
        return reward / (std + 1e-8)

    def state_dict(self) -> dict[str, float]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.state = {name: float(state[name]) for name in ("ret", "count", "mean", "m2")}


class StreamACLearner:
    """One stream-AC run: env, networks, ObGD optimisers, reward scaler, statistics (built
    here, after the shell has seeded), and the loop's two phases, :meth:`transition` and
    :meth:`row`. ``counters`` is the shell's ``run.counters`` (``env_steps`` counted here)."""

    def __init__(self, config: A2CTrainConfig, device: torch.device, counters: dict[str, Any]):
        self.config, self.counters = config, counters
        self.counters.setdefault("env_steps", 0)
        self.env = build_env(config, device, seed=config.seed)
        channels, height, width = tuple(self.env.observation_shape)
        # PixelGoalEnv's small boards: StreamActorCritic's own torso; Atari frames: the Nature
        # conv stack with the same LayerNorm + sparse init (config.torso, auto by image size).
        model = build_stream_actor_critic(
            channels,
            height,
            width,
            int(self.env.action_spec.num_actions),
            hidden=config.hidden,
            sparsity=config.sparsity,
            torso=config.torso,
        ).to(device)
        assert isinstance(model, StreamActorCritic)  # the Nature variant subclasses it; the builder returns nn.Module
        self.model = model
        traced = dict(lr=config.lr, gamma=config.gamma, lam=config.trace_lambda)
        self.actor = ObGD(model.actor_parameters(), kappa=ACTOR_KAPPA, **traced)
        self.critic = ObGD(model.critic_parameters(), kappa=config.kappa, **traced)
        self.scaler = RewardScaler(config.gamma)
        self.generator = make_generator(config.seed + 7919, device)
        self.tracker = EpisodeTracker(1, device)
        self.stats = WindowStats(device)
        self.obs = Value(self.env.reset(seed=config.seed).clone())
        model.observe(self.obs.value)

    def tracked(self) -> dict[str, Any]:
        """What a checkpoint holds (:meth:`pglab.run.shell.TrainingRun.track`'s arguments);
        the environment through its own ``state_dict`` where it has one."""
        fresh = FreshEpisodes(
            self.env, self.obs, self.tracker, seed=lambda: self.config.seed + self.counters["opt_steps"]
        )
        return {
            "models": {"model": self.model},
            "rngs": {"actions": self.generator},
            # registration order is restore order: the env entry last (FreshEpisodes)
            "state": {
                "actor_traces": self.actor,
                "critic_traces": self.critic,
                "reward_scaler": self.scaler,
                "tracker": self.tracker,
                "window": self.stats,
                "obs": self.obs,
                "env": env_entry(self.env, fresh),
            },
            "meta": {"architecture": self.model.architecture()},
        }

    def info(self) -> dict[str, Any]:
        """Facts for the meta line of metrics.jsonl (not checked on resume)."""
        return {"record_keys": ["opt_steps", *STREAM_AC_RECORD_KEYS, *PERF_KEYS]}

    def transition(self) -> None:
        """One transition and one ObGD update of each network (the module docstring's equations)."""
        config, model = self.config, self.model
        logits, value = model(self.obs.value)
        action = sample_actions(logits, self.generator)
        next_obs, reward, done, trunc, info = self.env.step(action.to(torch.int32))
        next_obs = next_obs.clone()  # the env may reuse its buffer
        finished = bool((done | trunc).item())
        scaled = self.scaler(float(reward.item()), finished)
        model.observe(next_obs)
        with torch.no_grad():
            _, v_next = model(next_obs)
        # delta = r + gamma (1 - done) V(s') - V(s); a truncation resets s', so no bootstrap either
        target = scaled + config.gamma * (0.0 if finished else 1.0) * v_next
        delta = (target - value).detach()[0]
        log_probs = torch.log_softmax(logits, dim=1)
        entropy = -(log_probs.exp() * log_probs).sum()
        chosen = log_probs[0, action[0]]
        # ascend log pi + c_H sign(delta) H  (actor);  ascend V (critic): both traced
        (chosen + config.entropy_coef * torch.sign(delta) * entropy + value[0]).backward()
        actor_step = self.actor.step(delta, finished)
        critic_step = self.critic.step(delta, finished)
        policy_loss, value_loss = -(chosen.detach() * delta), 0.5 * delta**2
        scalars = {
            "loss": policy_loss + value_loss,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": -config.entropy_coef * entropy.detach(),
            "stats/entropy": entropy.detach(),
            "stats/advantage_mean": delta,
            "stats/value_mean": value.detach()[0],
            "stats/lr/actor": torch.tensor(actor_step, dtype=torch.float64),
            "stats/lr/critic": torch.tensor(critic_step, dtype=torch.float64),
        }
        returns, lengths, ended, succeeded = finished_episodes(self.tracker, reward, done, trunc, info)
        self.stats.add(scalars, reward, done, trunc, returns, lengths, info.get("dist"), ended, succeeded)
        self.counters["env_steps"] += 1
        self.obs.value = next_obs

    def row(self) -> dict[str, Any]:
        """The log record of the window since the previous one (one host sync)."""
        return {"env_steps": self.counters["env_steps"], **self.stats.summary()}


def train_stream_ac(
    config: A2CTrainConfig, *, given: frozenset[str] | None = None, echo=print, stop_after: int | None = None
) -> dict[str, Any]:
    """Train (or resume) a ``--algo stream-ac`` run inside the training shell.

    Arguments and result as :func:`pglab.algos.a2c.train_a2c` (``stop_after`` counts
    transitions).
    """
    if config.resume is None and config.algo != "stream-ac":  # a resume takes the stored run's algo
        raise ConfigError("algo", config.algo, "train_stream_ac trains --algo stream-ac")
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config = run.config
        learner = StreamACLearner(config, run.device, run.counters)
        run.track(**learner.tracked(), info=learner.info())
        last: dict[str, float] = {}
        try:
            for step in run.steps(config.total_env_steps, desc="train a2c --algo stream-ac", unit="step"):
                learner.transition()
                if step % LOG_EVERY == 0 or step == config.total_env_steps:
                    last = present(run.log(step, learner.row()))
                    run.set_postfix(**format_postfix(last))
                    learner.stats.reset()
        finally:
            learner.env.close()
        run.finish(episode_summary(last))
    return run_result(run, last)
