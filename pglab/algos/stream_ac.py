"""Stream-AC(lambda) of Elsayed, Vasan & Mahmood (2024), "Streaming Deep Reinforcement
Learning Finally Works" (``pglab train a2c --algo stream-ac``), as their code runs it.

One stream, one update per transition, no buffer, no batch. The recipe:

- separate actor and critic networks with LayerNorm (no affine) before every LeakyReLU and
  sparse initialisation (:mod:`pglab.nets.stream`): an MLP for vector observations,
  the reference's MinAtar and Atari networks for 10x10 boards and 84x84 frames; a
  softmax policy for discrete actions, a Gaussian (mean, softplus standard deviation)
  for continuous ones, its samples clipped to the action bounds for the environment;
- online normalisation of observations (running mean / sample variance per element;
  the time feature of vector observations passes through) and reward scaling
  (:class:`RewardScaler`), without clipping (Atari's rewards too);
- eligibility traces and ObGD, or AdaptiveObGD (:mod:`pglab.algos.obgd`), one per network::

      delta   = r_hat + gamma (1 - done) V(s') - V(s)          (done: terminated or truncated)
      z_th    = gamma lambda z_th + grad_th [log pi(a|s) + c_H sign(delta) H(pi(.|s))]
      z_w     = gamma lambda z_w + grad_w V(s)
      each network: w += alpha' delta u   (ObGD: u = z, alpha' = alpha / max(M, 1))

  with ``kappa_policy`` (3) and ``kappa_value`` (2) in the bound ``M``; traces are
  cleared when an episode ends.

Defaults (:data:`pglab.configs.a2c.ALGO_DEFAULTS`): ``gamma = 0.99``, ``alpha = 1``,
``lambda = 0.8``, ``c_H = 0.01``, sparsity 0.9.

:func:`train_stream_ac` is *config -> build -> step* inside the training shell
(:mod:`pglab.run.shell`): :class:`StreamACLearner` builds the run (env, network,
optimisers, reward scaler, statistics) and holds its two phases,
:meth:`~StreamACLearner.transition` (one update) and :meth:`~StreamACLearner.row` (one
log record). An "optimiser step" is one transition (``opt_steps == env_steps``, the step
column), checkpoints come every ``save_interval`` transitions, and one record with the
batched trainer's metrics (:mod:`pglab.algos.a2c_common`) is logged every ``LOG_EVERY``
transitions and at the end. A stop writes no record: the window's sums travel with the
checkpoint, and the resumed run logs the uninterrupted run's records. There is no
gradient norm and no single learning rate: ``stats/lr/actor`` and ``stats/lr/critic`` are
the mean effective step sizes ``alpha'`` of the window; the shell's ``perf/step_s`` is
seconds per transition.
"""

from __future__ import annotations

import math
from typing import Any

import torch

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
    latest,
    present,
    record_keys,
    run_result,
)
from pglab.algos.obgd import OPTIMIZERS, AdaptiveObGD, ObGD
from pglab.configs.a2c import STREAM_AC_KIND, A2CTrainConfig
from pglab.envs.base import EpisodeTracker, defines_success
from pglab.errors import ConfigError
from pglab.nets.stream import StreamActorCritic, build_stream_actor_critic, sparse_init_
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun
from pglab.run.state import Value

__all__ = [
    "SPEC",
    "STREAM_AC_RECORD_KEYS",
    "AdaptiveObGD",
    "ObGD",
    "RewardScaler",
    "StreamACLearner",
    "StreamActorCritic",
    "sparse_init_",
    "train_stream_ac",
]

LOG_EVERY = 1000
REWARD_EPS = 1e-8
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


class RewardScaler:
    """The reference's ``ScaleReward``: ``r / sqrt(var(G) + 1e-8)``, where ``G = gamma G + r``
    is the running discounted return, restarted (``G = r``) at an episode's last step, and
    ``var`` the sample variance of every ``G`` so far (1 before two of them)."""

    def __init__(self, gamma: float):
        self.gamma = gamma
        self.state = {"trace": 0.0, "count": 0.0, "mean": 0.0, "m2": 0.0}

    def __call__(self, reward: float, finished: bool) -> float:
        s = self.state
        s["trace"] = s["trace"] * self.gamma * (0.0 if finished else 1.0) + reward
        s["count"] += 1
        delta = s["trace"] - s["mean"]
        s["mean"] += delta / s["count"]
        s["m2"] += delta * (s["trace"] - s["mean"])
        variance = s["m2"] / (s["count"] - 1) if s["count"] >= 2 else 1.0
        return reward / math.sqrt(variance + REWARD_EPS)

    def state_dict(self) -> dict[str, float]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.state = {name: float(state[name]) for name in ("trace", "count", "mean", "m2")}


def build_network(config: A2CTrainConfig, env) -> StreamActorCritic:
    """The network for ``env``'s observations and actions (:func:`pglab.nets.stream.build_stream_actor_critic`)."""
    if env.action_spec.kind not in ("discrete", "continuous"):
        raise ConfigError("env", config.env, "stream-ac takes discrete or continuous (Box) actions")
    return build_stream_actor_critic(
        tuple(env.observation_shape),
        env.observation_dtype,
        env.action_spec,
        torso=config.torso,
        hidden=config.hidden,
        sparsity=config.sparsity,
        raw_inputs=1 if getattr(env, "time_feature", False) else 0,
    )


class StreamACLearner:
    """One stream-AC run: env, network, optimisers, reward scaler, statistics (built here,
    after the shell has seeded), and the loop's two phases, :meth:`transition` and
    :meth:`row`. ``counters`` is the shell's ``run.counters`` (``env_steps`` counted here)."""

    def __init__(self, config: A2CTrainConfig, device: torch.device, counters: dict[str, Any]):
        self.config, self.counters = config, counters
        self.counters.setdefault("env_steps", 0)
        self.env = build_env(config, device, seed=config.seed)
        self.model = build_network(config, self.env).to(device)
        assert config.optimizer is not None and config.lr is not None and config.gamma is not None  # A2CTrainConfig
        optimizer = OPTIMIZERS[config.optimizer]
        traced = dict(lr=config.lr, gamma=config.gamma, lam=config.trace_lambda)
        self.actor = optimizer(self.model.actor_parameters(), kappa=config.kappa_policy, **traced)
        self.critic = optimizer(self.model.critic_parameters(), kappa=config.kappa_value, **traced)
        self.gamma = config.gamma
        self.scaler = RewardScaler(config.gamma)
        self.generator = make_generator(config.seed + 7919, device)
        self.tracker = EpisodeTracker(1, device)
        self.stats = WindowStats(device, success=defines_success(self.env))
        self.obs = Value(self.env.reset(seed=config.seed).clone())
        self.model.observe(self.obs.value)

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
        return {"record_keys": ["opt_steps", *record_keys(STREAM_AC_RECORD_KEYS, self.env), *PERF_KEYS]}

    def _step_env(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool, Any]:
        """Act in the environment; observe what it returns (the last observation of a
        finished episode, then the next one); ``(next_obs, reward, finished, step)``."""
        step = self.env.step(self.model.env_action(action))
        next_obs, reward, done, trunc, info = step
        next_obs = next_obs.clone()  # the env may reuse its buffer
        finished = bool((done | trunc).item())
        if finished:
            self.model.observe(info["final_obs"])
        self.model.observe(next_obs)
        return next_obs, reward, finished, step

    def transition(self) -> None:
        """One transition and one update of each network (the module docstring's equations)."""
        model, head = self.model, self.model.policy_head
        params, value = model(self.obs.value)
        action = head.sample(params, self.generator)
        next_obs, reward, finished, (_, _, done, trunc, info) = self._step_env(action)
        scaled = self.scaler(float(reward.item()), finished)
        with torch.no_grad():
            v_next = model.value(next_obs)
        # delta = r + gamma (1 - done) V(s') - V(s); a truncation resets s', so no bootstrap either
        delta = (scaled + self.gamma * (0.0 if finished else 1.0) * v_next - value).detach()[0]
        log_prob, entropy = head.log_prob(params, action)[0], head.entropy(params)[0]
        # ascend log pi + c_H sign(delta) H (actor) and V (critic): both traced
        (log_prob + self.config.entropy_coef * torch.sign(delta) * entropy + value[0]).backward()
        actor_step = self.actor.step(delta, finished)
        critic_step = self.critic.step(delta, finished)
        policy_loss, value_loss = -(log_prob.detach() * delta), 0.5 * delta**2
        scalars = {
            "loss": policy_loss + value_loss,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": -self.config.entropy_coef * entropy.detach(),
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
                    last = latest(last, present(run.log(step, learner.row())))
                    run.set_postfix(**format_postfix(last))
                    learner.stats.reset()
        finally:
            learner.env.close()
        run.finish(episode_summary(last))
    return run_result(run, last)
