"""Stream-AC(lambda) of Elsayed, Vasan & Mahmood (2024), "Streaming Deep Reinforcement
Learning Finally Works" (``pglab train a2c --algo stream-ac --num-envs 1``).

One environment, one update per transition, no buffer, no batch. The recipe:

- separate actor and critic networks with LayerNorm (no affine) before every activation
  (LeakyReLU) and *sparse initialisation* (a fraction ``sparsity`` of each unit's input
  weights set to zero, the rest LeCun-uniform);
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

Logging follows :mod:`pglab.algos.a2c`'s JSONL schema, one record per ``LOG_EVERY``
transitions (an "optimiser step" here is one transition, so ``opt_steps == env_steps``).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

import torch
from torch import nn

from pglab.contracts import check_tensor
from pglab.envs.base import EpisodeTracker
from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_state_dict_checked
from pglab.run.config import config_to_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.progress import progress_bar
from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything

LOG_EVERY = 1000
ACTOR_KAPPA = 3.0


def sparse_init_(weight: torch.Tensor, sparsity: float, generator: torch.Generator | None = None) -> None:
    """LeCun-uniform weights with ``round(sparsity * fan_in)`` inputs of every output unit zeroed."""
    fan_out = weight.shape[0]
    fan_in = weight[0].numel()
    bound = math.sqrt(1.0 / fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)
        zeros = int(round(sparsity * fan_in))
        flat = weight.view(fan_out, fan_in)
        for unit in range(fan_out):  # init only; per-unit so every unit keeps the same count
            flat[unit, torch.randperm(fan_in, generator=generator)[:zeros]] = 0.0


class _Torso(nn.Module):
    def __init__(self, in_channels: int, height: int, width: int, hidden: int, sparsity: float):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        h, w = (height - 1) // 2 + 1, (width - 1) // 2 + 1
        self.norm1 = nn.LayerNorm([16, height, width], elementwise_affine=False)
        self.norm2 = nn.LayerNorm([32, h, w], elementwise_affine=False)
        self.dense = nn.Linear(32 * h * w, hidden)
        self.norm3 = nn.LayerNorm(hidden, elementwise_affine=False)
        for layer in (self.conv1, self.conv2, self.dense):
            sparse_init_(layer.weight, sparsity)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.leaky_relu
        x = act(self.norm1(self.conv1(x)))
        x = act(self.norm2(self.conv2(x)))
        return act(self.norm3(self.dense(x.flatten(1))))


class StreamActorCritic(nn.Module):
    """Separate actor and critic (sparse init, LayerNorm) with running observation
    statistics. ``forward(obs uint8 [N, K, H, W]) -> (logits [N, A], values [N])``."""

    def __init__(self, in_channels: int, height: int, width: int, num_actions: int, hidden: int = 128, sparsity: float = 0.9):
        super().__init__()
        self.arch = {"in_channels": in_channels, "height": height, "width": width, "num_actions": num_actions,
                     "hidden": hidden, "sparsity": sparsity}
        self.actor_torso = _Torso(in_channels, height, width, hidden, sparsity)
        self.critic_torso = _Torso(in_channels, height, width, hidden, sparsity)
        self.policy_head = nn.Linear(hidden, num_actions)
        self.value_head = nn.Linear(hidden, 1)
        for layer in (self.policy_head, self.value_head):
            sparse_init_(layer.weight, sparsity)
            nn.init.zeros_(layer.bias)
        shape = (in_channels, height, width)
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("obs_mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("obs_m2", torch.zeros(shape, dtype=torch.float64))

    def architecture(self) -> dict[str, Any]:
        return dict(self.arch)

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor_torso.parameters(), *self.policy_head.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        return [*self.critic_torso.parameters(), *self.value_head.parameters()]

    @torch.no_grad()
    def observe(self, obs: torch.Tensor) -> None:
        """Welford update of the per-pixel statistics with a batch ``[N, K, H, W]``."""
        for sample in obs.to(torch.float64) / 255.0:
            self.obs_count += 1
            delta = sample - self.obs_mean
            self.obs_mean += delta / self.obs_count
            self.obs_m2 += delta * (sample - self.obs_mean)

    def normalise(self, obs: torch.Tensor) -> torch.Tensor:
        check_tensor("obs", obs, (None, *self.obs_mean.shape), torch.uint8, where="StreamActorCritic")
        variance = self.obs_m2 / self.obs_count.clamp_min(2.0) if self.obs_count > 1 else torch.ones_like(self.obs_m2)
        scaled = (obs.to(torch.float64) / 255.0 - self.obs_mean) / (variance + 1e-8).sqrt()
        return scaled.to(torch.float32)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.normalise(obs)
        return self.policy_head(self.actor_torso(x)), self.value_head(self.critic_torso(x)).squeeze(1)

    @torch.no_grad()
    def act_batch(self, obs: torch.Tensor, *, deterministic: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        from pglab.algos.a2c import sample_actions

        logits, _ = self(obs)
        if deterministic:
            return logits.argmax(dim=1).to(torch.int32)
        return sample_actions(logits, generator or torch.Generator(device=logits.device)).to(torch.int32)


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
        bound = self.lr * self.kappa * max(abs(delta_value), 1.0) * z_norm   # M = alpha kappa max(|delta|,1) ||z||_1
        step_size = self.lr / max(bound, 1.0)                                # alpha / max(M, 1)
        torch._foreach_add_(self.params, self.traces, alpha=step_size * delta_value)  # w += alpha_eff delta z
        for param in self.params:
            param.grad = None
        if reset:
            torch._foreach_zero_(self.traces)
        return step_size

    def state_dict(self) -> dict[str, Any]:
        return {"traces": [t.clone() for t in self.traces]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for trace, saved in zip(self.traces, state["traces"]):
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


def train_stream_ac(config, *, checkpoint: dict[str, Any] | None = None, echo=print) -> dict[str, Any]:
    """Stream-AC(lambda) training loop (config: :class:`pglab.algos.a2c.A2CTrainConfig`)."""
    from pglab.algos.a2c import LOG_NAME, StopRequested, WindowStats, build_env, run_dir_of, sample_actions
    from pglab.run.checkpoint import library_versions

    device = resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    if checkpoint is not None:
        run_dir = run_dir_of(checkpoint)
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir("a2c-stream-ac"))
        write_run_config(run_dir, config_to_dict(config), kind=config.kind)
    seed_everything(config.seed)
    env = build_env(config, device, seed=config.seed)
    shape = tuple(env.observation_shape)
    model = StreamActorCritic(*shape, int(env.action_spec.num_actions), hidden=config.hidden or 128, sparsity=config.sparsity).to(device)
    actor = ObGD(model.actor_parameters(), lr=config.lr, gamma=config.gamma, lam=config.trace_lambda, kappa=ACTOR_KAPPA)
    critic = ObGD(model.critic_parameters(), lr=config.lr, gamma=config.gamma, lam=config.trace_lambda, kappa=config.kappa)
    scaler = RewardScaler(config.gamma)
    generator = make_generator(config.seed + 7919, device)
    tracker = EpisodeTracker(1, device)
    stats = WindowStats(device)
    counters = {"env_steps": 0, "opt_steps": 0}
    obs = env.reset(seed=config.seed).clone()
    model.observe(obs)
    if checkpoint is not None:
        load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint["path"])
        extra = checkpoint["extra"]
        actor.load_state_dict(extra["actor_traces"])
        critic.load_state_dict(extra["critic_traces"])
        scaler.state = dict(extra["reward_scaler"])
        tracker.load_state_dict(extra["tracker"])
        stats.carry = dict(extra["carry"])
        if "env" in extra and hasattr(env, "load_state_dict"):
            env.load_state_dict(extra["env"])
            obs = env.frames.clone()
        restore_rng_state(checkpoint["rng"], {"actions": generator})
        counters.update({k: int(v) for k, v in checkpoint["counters"].items() if k in counters})
    total = config.total_env_steps
    logger = MetricsLogger(run_dir, step_key="opt_steps", csv_name=None, jsonl_name=LOG_NAME, tensorboard_dir=None,
                           resume_step=counters["opt_steps"] if checkpoint is not None else None)
    logger.write_meta({"versions": library_versions(), "config": config_to_dict(config), "kind": config.kind,
                       "num_params": sum(p.numel() for p in model.parameters()), "world_size": 1, "device": str(device)})
    manager = CheckpointManager(run_dir / "checkpoints", keep=3)

    def save() -> None:
        extra = {"actor_traces": actor.state_dict(), "critic_traces": critic.state_dict(), "reward_scaler": dict(scaler.state),
                 "tracker": tracker.state_dict(), "carry": dict(stats.carry), "architecture": model.architecture()}
        if hasattr(env, "state_dict"):
            extra["env"] = env.state_dict()
        manager.save(counters["opt_steps"], build_checkpoint(
            kind=config.kind, config=config_to_dict(dataclasses.replace(config, resume=None, self_test=False)),
            counters=dict(counters), models={"model": model.state_dict()}, rng=capture_rng_state({"actions": generator}),
            extra=extra))

    bar = progress_bar(total, desc="train a2c --algo stream-ac", initial=counters["env_steps"], unit="step")
    interrupted = False
    last: dict[str, float] = {}
    step_sizes = torch.zeros(2, dtype=torch.float64)
    next_save = counters["opt_steps"] + config.checkpoint_every_opt_steps
    try:
        with StopRequested() as stop:
            tick = time.perf_counter()
            while counters["env_steps"] < total:
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
                episode_returns, episode_lengths, _ = tracker.update(reward, done | trunc)
                losses = {"loss": (-(chosen.detach() * delta) + 0.5 * delta**2).detach(), "loss/policy": -(chosen.detach() * delta),
                          "loss/value": 0.5 * delta**2, "loss/entropy": -config.entropy_coef * entropy.detach(),
                          "stats/entropy": entropy.detach(), "stats/advantage_mean": delta, "stats/value_mean": value.detach()[0]}
                stats.add(losses, reward, done, trunc, episode_returns, episode_lengths.to(torch.float64), info.get("dist"))
                counters["env_steps"] += 1
                counters["opt_steps"] += 1
                obs = next_obs
                bar.update(1)
                if counters["opt_steps"] % LOG_EVERY == 0 or counters["env_steps"] >= total or stop.requested:
                    now = time.perf_counter()
                    elapsed, tick = now - tick, now
                    record = stats.summary()
                    record.update({"env_steps": counters["env_steps"], "stats/grad_norm": float("nan"),
                                   "perf/steps_per_s": stats.env_steps / max(elapsed, 1e-9), "perf/iter_s": elapsed / max(stats.env_steps, 1),
                                   "lr": float(step_sizes[0] / max(stats.env_steps, 1))})
                    record["stats/grad_norm"] = float(step_sizes[1] / max(stats.env_steps, 1))  # mean critic step size
                    step_sizes.zero_()
                    stats.reset()
                    last = logger.log(counters["opt_steps"], record)
                    # a checkpoint at the first record after every checkpoint_every_opt_steps transitions
                    if counters["opt_steps"] >= next_save:
                        save()
                        next_save = counters["opt_steps"] + config.checkpoint_every_opt_steps
                if stop.requested:
                    interrupted = True
                    echo(f"interrupted: checkpoint saved at env_steps={counters['env_steps']} in {run_dir}", file=sys.stderr)
                    break
            save()
    except Exception as exc:
        logger.write_record({"error": {"type": type(exc).__name__, "message": str(exc), **counters}})
        raise
    finally:
        bar.close()
        logger.close()
        env.close()
    return {"run_dir": str(run_dir), **counters, "interrupted": interrupted, "last": last}

