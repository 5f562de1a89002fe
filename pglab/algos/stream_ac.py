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

The run lives in the training shell (:mod:`pglab.run.shell`), like the batched trainer's:
an "optimiser step" here is one transition (``opt_steps == env_steps``, the step column),
checkpoints come every ``save_interval`` transitions, and one record with the batched
trainer's metrics (:mod:`pglab.algos.a2c_common`) is logged every ``LOG_EVERY``
transitions. There is no gradient norm and no single learning rate: ``stats/lr/actor``
and ``stats/lr/critic`` are the mean effective ObGD step sizes ``alpha_eff`` of the window.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch
from torch import nn

from pglab.algos.a2c_common import (
    EPISODE_KEYS,
    RECORD_KEYS,
    WindowStats,
    build_env,
    error_record,
    finished_episodes,
    format_postfix,
    present,
    sample_actions,
)
from pglab.configs.a2c import STREAM_AC_KIND, A2CTrainConfig
from pglab.envs.base import EpisodeTracker
from pglab.errors import ConfigError
from pglab.nets.nature_cnn import build_stream_actor_critic
from pglab.nets.pixel_cnn import StreamActorCritic, sparse_init_
from pglab.run.checkpoint import build_checkpoint, library_versions, load_state_dict_checked
from pglab.run.config import config_to_dict
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state
from pglab.run.shell import TrainerSpec, TrainingRun

__all__ = [
    "SPEC",
    "STREAM_AC_RECORD_KEYS",
    "ObGD",
    "RewardScaler",
    "StreamActorCritic",
    "sparse_init_",
    "train_stream_ac",
]

LOG_EVERY = 1000
ACTOR_KAPPA = 3.0
STREAM_AC_RECORD_KEYS = (*RECORD_KEYS, "stats/lr/actor", "stats/lr/critic")

SPEC = TrainerSpec(
    system="a2c",
    config_class=A2CTrainConfig,
    kinds=(STREAM_AC_KIND,),
    step_key="opt_steps",
    resumable=frozenset({"total_env_steps"}),
    total_steps=lambda c: c.total_env_steps,
    budget_field="total_env_steps",
)


class ObGD:
    """Overshooting-bounded gradient descent with eligibility traces (one network)."""

    def __init__(self, params: list[nn.Parameter], *, lr: float, gamma: float, lam: float, kappa: float):
        self.params, self.lr, self.gamma, self.lam, self.kappa = params, lr, gamma, lam, kappa
        self.traces = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, delta: torch.Tensor, reset: bool) -> float:
        """Uses each parameter's ``.grad`` (the gradient to trace); returns the step size."""
        grads = [param.grad for param in self.params]
        # z = gamma lambda z + grad  (foreach: one fused pass over all tensors)
        torch._foreach_mul_(self.traces, self.gamma * self.lam)
        torch._foreach_add_(self.traces, grads)
        delta_value = float(delta)
        z_norm = float(torch.stack(torch._foreach_norm(self.traces, 1)).sum())
        bound = self.lr * self.kappa * max(abs(delta_value), 1.0) * z_norm  # M = alpha kappa max(|delta|,1) ||z||_1
        step_size = self.lr / max(bound, 1.0)  # alpha / max(M, 1)
        torch._foreach_add_(self.params, self.traces, alpha=step_size * delta_value)  # w += alpha_eff delta z
        for param in self.params:
            param.grad = None
        if reset:
            torch._foreach_zero_(self.traces)
        return step_size

    def state_dict(self) -> dict[str, Any]:
        return {"traces": [t.clone() for t in self.traces]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for trace, saved in zip(self.traces, state["traces"], strict=False):
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


def train_stream_ac(
    config: A2CTrainConfig, *, given: frozenset[str] | None = None, echo=print, stop_after: int | None = None
) -> dict[str, Any]:
    """Train (or resume) a ``--algo stream-ac`` run inside the training shell.

    Arguments and result as :func:`pglab.algos.a2c.train_a2c` (``stop_after`` counts
    transitions).
    """
    if config.algo != "stream-ac":
        raise ConfigError("algo", config.algo, "train_stream_ac trains --algo stream-ac")
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config, device = run.config, run.device
        # -- build -------------------------------------------------------------------
        env = build_env(config, device, seed=config.seed)
        shape = tuple(env.observation_shape)
        # PixelGoalEnv's small boards: StreamActorCritic's own torso; Atari frames: the Nature
        # conv stack with the same LayerNorm + sparse init (config.torso, auto by image size).
        model = build_stream_actor_critic(
            *shape, int(env.action_spec.num_actions), hidden=config.hidden, sparsity=config.sparsity, torso=config.torso
        ).to(device)
        actor = ObGD(
            model.actor_parameters(), lr=config.lr, gamma=config.gamma, lam=config.trace_lambda, kappa=ACTOR_KAPPA
        )
        critic = ObGD(
            model.critic_parameters(), lr=config.lr, gamma=config.gamma, lam=config.trace_lambda, kappa=config.kappa
        )
        scaler = RewardScaler(config.gamma)
        generator = make_generator(config.seed + 7919, device)
        tracker = EpisodeTracker(1, device)
        stats = WindowStats(device)
        counters = {"env_steps": 0, "opt_steps": 0}
        obs = env.reset(seed=config.seed).clone()
        model.observe(obs)
        if run.checkpoint is not None:
            checkpoint = run.checkpoint
            load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint["path"])
            extra = checkpoint["extra"]
            actor.load_state_dict(extra["actor_traces"])
            critic.load_state_dict(extra["critic_traces"])
            scaler.state = dict(extra["reward_scaler"])
            tracker.load_state_dict(extra["tracker"])
            if "env" in extra and hasattr(env, "load_state_dict"):
                env.load_state_dict(extra["env"])
                obs = env.frames.clone()
            restore_rng_state(checkpoint["rng"], {"actions": generator})
            counters.update({k: int(v) for k, v in checkpoint["counters"].items() if k in counters})
        run.logger.write_meta(
            {
                "versions": library_versions(),
                "config": config_to_dict(config),
                "kind": config.kind,
                "num_params": sum(p.numel() for p in model.parameters()),
                "world_size": 1,
                "device": str(device),
                "record_keys": ["opt_steps", *STREAM_AC_RECORD_KEYS],
            }
        )

        def checkpoint_now() -> dict[str, Any]:
            extra = {
                "actor_traces": actor.state_dict(),
                "critic_traces": critic.state_dict(),
                "reward_scaler": dict(scaler.state),
                "tracker": tracker.state_dict(),
                "architecture": model.architecture(),
            }
            if hasattr(env, "state_dict"):
                extra["env"] = env.state_dict()
            return build_checkpoint(
                kind=config.kind,
                config=config_to_dict(dataclasses.replace(config, resume=None, self_test=False)),
                counters={**counters, "wall_time": run.counters.get("wall_time", 0.0)},
                models={"model": model.state_dict()},
                rng=capture_rng_state({"actions": generator}),
                extra=extra,
            )

        # -- one update per transition -----------------------------------------------
        last: dict[str, float] = {}
        step_sizes = torch.zeros(2, dtype=torch.float64)
        try:
            tick = time.perf_counter()
            for step in run.steps(
                config.total_env_steps, save=checkpoint_now, desc="train a2c --algo stream-ac", unit="step"
            ):
                logits, value = model(obs)
                action = sample_actions(logits, generator)
                next_obs, reward, done, trunc, info = env.step(action.to(torch.int32))
                next_obs = next_obs.clone()
                finished = bool((done | trunc).item())
                scaled = scaler(float(reward.item()), finished)
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
                step_sizes[0] += actor.step(delta, finished)
                step_sizes[1] += critic.step(delta, finished)
                episode_returns, episode_lengths, ended, succeeded = finished_episodes(
                    tracker, reward, done, trunc, info
                )
                losses = {
                    "loss": (-(chosen.detach() * delta) + 0.5 * delta**2).detach(),
                    "loss/policy": -(chosen.detach() * delta),
                    "loss/value": 0.5 * delta**2,
                    "loss/entropy": -config.entropy_coef * entropy.detach(),
                    "stats/entropy": entropy.detach(),
                    "stats/advantage_mean": delta,
                    "stats/value_mean": value.detach()[0],
                }
                stats.add(
                    losses,
                    reward,
                    done,
                    trunc,
                    episode_returns,
                    episode_lengths.to(torch.float64),
                    info.get("dist"),
                    ended,
                    succeeded,
                )
                counters["env_steps"] += 1
                counters["opt_steps"] += 1
                obs = next_obs
                # -- log every LOG_EVERY transitions, at the end and before a stop -------
                if step % LOG_EVERY == 0 or step == config.total_env_steps or run.stop_requested:
                    now = time.perf_counter()
                    elapsed, tick = now - tick, now
                    record: dict[str, Any] = stats.summary()
                    transitions = max(stats.env_steps, 1)
                    record.update(
                        {
                            "env_steps": counters["env_steps"],
                            "perf/steps_per_s": stats.env_steps / max(elapsed, 1e-9),
                            "perf/iter_s": elapsed / transitions,
                            "stats/lr/actor": float(step_sizes[0] / transitions),
                            "stats/lr/critic": float(step_sizes[1] / transitions),
                        }
                    )
                    step_sizes.zero_()
                    stats.reset()
                    last = present(run.log(step, record))
                    run.set_postfix(**format_postfix(last))
        except Exception as exc:
            run.logger.write_record(error_record(exc, counters))
            raise
        finally:
            env.close()
        run.finish({key: value for key, value in last.items() if key in EPISODE_KEYS})
    return {
        "run_dir": str(run.run_dir),
        **counters,
        "interrupted": run.interrupted,
        "exit_code": run.exit_code,
        "last": last,
    }
