"""Configs of ``pglab train ppo`` and ``pglab evaluate PPO_CHECKPOINT`` (torch-free).

``pglab train ppo --help`` builds its flag list from this module alone, so it never
imports torch. :class:`OnPolicyHyperparams` lives here too because :class:`PPOConfig`
validates itself through it; :mod:`pglab.algos.onpolicy` re-exports it for the update
code and the Deep-PSO trainer.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import tyro

from pglab.configs.expressions import check_plain_data, parse_call
from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_int_sequence,
    check_memory,
    check_non_negative,
    check_path_fields,
    check_positive,
    check_range,
    check_seed,
    check_threads,
)

RLMode = Literal["reinforce_raw", "vpg_gae", "ppo"]
"""The estimator and loss of an on-policy update."""
RL_MODES: tuple[str, ...] = typing.get_args(RLMode)
Vectorization = Literal["auto", "vector", "sync", "async"]
# The same modes as pglab.envs.gym_adapter.VECTORIZATION_MODES, spelled here so that this
# module does not import the adapter (and torch with it).
VECTORIZATION_MODES: tuple[str, ...] = typing.get_args(Vectorization)
ACTIVATIONS = ("tanh", "relu", "elu", "silu", "gelu")
Schedule = Literal["constant", "linear"]
"""How a coefficient changes over training: ``linear`` multiplies it by ``1 - (k - 1) / K``
in iteration ``k`` of ``K`` (CleanRL's annealing; SB3's ``lin_`` prefix)."""
SCHEDULES: tuple[str, ...] = typing.get_args(Schedule)
KLStop = Literal["epoch", "minibatch"]
"""When ``target_kl`` ends an update: after a pass (its mean approx-KL) or before a
minibatch's step (SB3's rule, 1.5 x target_kl)."""
KL_STOPS: tuple[str, ...] = typing.get_args(KLStop)


ROLLOUT_BYTES_PER_SAMPLE = 32
"""Lower bound of a PPO rollout's memory per sample: 8 float32 (an observation of at least
one number, action, log-probability, reward, done, value, advantage, return)."""
ENV_COPY_BYTES = 1024
"""Lower bound of one environment copy's memory (a Gymnasium CartPole object takes ~5 KB)."""


def rollout_memory_bytes(num_envs: int, num_steps: int) -> int:
    """``num_envs`` copies and their ``num_envs x num_steps``-sample rollout buffer."""
    return num_envs * ENV_COPY_BYTES + num_envs * num_steps * ROLLOUT_BYTES_PER_SAMPLE


def schedule_at(schedule: str, progress_remaining: float) -> float:
    """The factor a ``schedule`` applies when ``progress_remaining`` of training is left
    (1 at the start, 0 at the end; SB3's argument of a schedule): 1 for ``constant``,
    ``progress_remaining`` for ``linear`` (RL-Zoo's ``lin_``)."""
    return 1.0 if schedule == "constant" else progress_remaining


def schedule_fraction(schedule: str, iteration: int, num_iterations: int) -> float:
    """The factor a ``schedule`` applies in ``iteration`` (1-based) of ``num_iterations``:
    :func:`schedule_at` the progress remaining when the iteration starts,
    ``1 - (iteration - 1) / num_iterations`` (1 in the first iteration, ``1 / K`` in the
    last: never 0, so a clip range stays valid)."""
    return schedule_at(schedule, 1.0 - (iteration - 1.0) / num_iterations)


def check_env_options(env_wrappers: tuple[str, ...], env_kwargs: dict[str, Any]) -> None:
    """``env_wrappers`` name classes by import path (read, not imported: the command imports
    them before a run starts); ``env_kwargs`` is a mapping of plain data."""
    if not isinstance(env_wrappers, (tuple, list)):
        raise ConfigError("env_wrappers", env_wrappers, "must be a list of module.Class(key=value, ...) strings")
    for index, spec in enumerate(env_wrappers):
        parse_call(spec, f"env_wrappers[{index}]")
    if not isinstance(env_kwargs, dict):
        raise ConfigError("env_kwargs", env_kwargs, "must be a mapping of keyword arguments")
    check_plain_data("env_kwargs", env_kwargs)


@dataclass(frozen=True)
class OnPolicyHyperparams:
    """Update hyperparameters (the PSO note's table; CleanRL's PPO defaults).

    A nested config of :class:`PPOConfig` and :class:`~pglab.configs.pso_tsp.PSOTSPTrainConfig`
    (``config.update``) whose flags keep their plain names (``--clip-coef``)."""

    algo: RLMode = "ppo"
    """reinforce_raw (MC returns, mean baseline) | vpg_gae (one GAE step) | ppo (clipped, K epochs)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda (1 = Monte Carlo, 0 = one-step TD)"""
    ppo_epochs: int = 4
    """passes over each batch (ppo only)"""
    num_minibatches: int = 4
    """minibatches per pass (ppo only; sizes differ by at most one)"""
    minibatch_size: int | None = None
    """samples per minibatch instead of --num-minibatches: consecutive slices of this size of
    each pass's shuffle, the last one shorter where it does not divide the rollout (SB3's
    batch_size; ppo only). None: --num-minibatches"""
    clip_coef: float = 0.2
    """surrogate clip range epsilon (its value in the first iteration with --clip-schedule linear)"""
    clip_schedule: Schedule = "constant"
    """constant | linear (clip_coef decays like the lr's linear schedule: RL-Zoo's lin_0.2; PPO trainer only)"""
    value_clip_coef: float | None = None
    """clip the value update to +-this around the old values (None: no clipping)"""
    value_coef: float = 0.5
    """weight of the critic loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: float | None = None
    """stop the update early once approx-KL exceeds this, by --kl-stop's rule (None: never)"""
    kl_stop: KLStop = "epoch"
    """with --target-kl: epoch (after each pass, stop once the pass's mean approx-KL exceeds
    target_kl) | minibatch (SB3: before each minibatch's step, stop the update, that step
    included, once the minibatch's approx-KL exceeds 1.5 * target_kl)"""
    normalize_advantages: bool = True
    """standardise advantages per minibatch"""

    def __post_init__(self):
        check_choice("algo", self.algo, RL_MODES)
        check_range("gamma", self.gamma, 0.0, 1.0)
        check_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_int("ppo_epochs", self.ppo_epochs, minimum=1)
        check_int("num_minibatches", self.num_minibatches, minimum=1)
        if self.minibatch_size is not None:
            check_int("minibatch_size", self.minibatch_size, minimum=2)
        check_positive("clip_coef", self.clip_coef)
        check_choice("clip_schedule", self.clip_schedule, SCHEDULES)
        if self.value_clip_coef is not None:
            check_positive("value_clip_coef", self.value_clip_coef)
        check_non_negative("value_coef", self.value_coef)
        check_non_negative("entropy_coef", self.entropy_coef)
        check_positive("max_grad_norm", self.max_grad_norm)
        if self.target_kl is not None:
            check_positive("target_kl", self.target_kl)
        check_choice("kl_stop", self.kl_stop, KL_STOPS)


@dataclass(frozen=True)
class PPOConfig:
    """Configuration of ``pglab train ppo`` (defaults: CleanRL's ``ppo.py``)."""

    # Old spellings, still accepted on the command line, in YAML files and in stored runs.
    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"rl_mode": "algo", "torch_threads": "threads"}

    env: str = "gym:CartPole-v1"
    """environment: gym:ID (Gymnasium, Discrete or Box actions) or pglab:NAME"""
    total_steps: int = 200_000
    """environment steps to train for (summed over the num_envs copies)"""
    num_envs: int = 4
    """parallel environment copies"""
    num_steps: int = 128
    """rollout length per environment copy and iteration"""
    env_wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers put around each copy of a gym:ID environment, innermost first, by
    import path: module.Class or module.Class(key=value, ...) (literal values)"""
    # Keyword arguments of the environment's constructor (gym:ID: gymnasium.make's; Atari:
    # pglab.envs.atari.AtariEnv's options). A mapping: set in a --config file or by --zoo.
    env_kwargs: Annotated[dict[str, Any], tyro.conf.Suppress] = field(default_factory=dict)
    vectorization: Vectorization = "auto"
    """Gymnasium vector env: vector (all copies as array ops; CartPole-v1, Swimmer-v4,
    HalfCheetah-v4, InvertedPendulum-v4, InvertedDoublePendulum-v4), sync (a loop over
    copies in one process), async (one process per copy); auto = vector where available,
    else sync"""
    # -- optimisation ------------------------------------------------------------------
    lr: float = 2.5e-4
    """Adam learning rate (its value in the first iteration)"""
    lr_schedule: Schedule = "linear"
    """linear: decay the learning rate linearly towards 0 over total_steps (CleanRL); constant.
    Old spelling, still accepted: --anneal-lr (linear) / --no-anneal-lr (constant)"""
    # The old boolean spelling (YAML `anneal_lr: false`, PPOConfig(anneal_lr=False)); on the
    # command line `pglab train ppo` rewrites --[no-]anneal-lr into --lr-schedule.
    anneal_lr: Annotated[bool | None, tyro.conf.Suppress] = None
    adam_eps: float = 1e-5
    """Adam epsilon (CleanRL's 1e-5)"""
    # -- the update (algo, gamma, gae_lambda, ppo_epochs, num_minibatches, clip_coef, ...) --
    update: Annotated[OnPolicyHyperparams, tyro.conf.OmitArgPrefixes] = field(default_factory=OnPolicyHyperparams)
    """the on-policy update: --algo, --gamma, --gae-lambda, --ppo-epochs, --num-minibatches,
    --clip-coef, --clip-schedule, --value-clip-coef, --value-coef, --entropy-coef, --max-grad-norm,
    --target-kl, --normalize-advantages"""
    # -- networks ----------------------------------------------------------------------
    hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor MLP, and of the critic's unless --critic-hidden-dims
    (separate MLPs)"""
    critic_hidden_dims: tuple[int, ...] | None = None
    """hidden layer sizes of the critic MLP (None: --hidden-dims; SB3's net_arch=dict(pi=..., vf=...))"""
    activation: Literal["tanh", "relu", "elu", "silu", "gelu"] = "tanh"
    """hidden activation"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions)"""
    ortho_init: bool = True
    """orthogonal initialisation (gain sqrt 2, 0.01 policy head, 1 value head); off: PyTorch's
    default init (SB3 ortho_init)"""
    fused_update: bool = True
    """PPO's gradient in closed form where it models the run (--algo ppo, Categorical or Gaussian
    heads, tanh|relu MLPs, the CPU; the same update as autograd to float rounding); anything else
    runs on autograd, and the run prints which path it takes. off: autograd everywhere"""
    use_sde: bool = False
    """Box actions: generalized state-dependent exploration (gSDE, SB3's use_sde):
    noise = latent(s) @ W, W ~ N(0, exp(log_std)^2) resampled per rollout"""
    sde_sample_freq: int = -1
    """with --use-sde: also resample W every this many steps (-1: once per rollout)"""
    # -- normalisation (SB3 VecNormalize) -----------------------------------------------
    normalize_obs: bool = False
    """normalise observations by their running mean/std (updated while training, frozen for
    evaluation; stored in checkpoints)"""
    normalize_reward: bool = False
    """scale rewards by the running std of the discounted return, not centred"""
    normalize_gamma: float | None = None
    """discount of the return whose std scales the rewards (VecNormalize's gamma; None: --gamma)"""
    clip_obs: float = 10.0
    """clip normalised observations to +-this"""
    clip_reward: float = 10.0
    """clip normalised rewards to +-this"""
    normalize_epsilon: float = 1e-8
    """added to the variances before the square root"""
    # -- run ---------------------------------------------------------------------------
    seed: int = 0
    """random seed (same seed + config on the CPU: bit-identical run)"""
    device: str = "auto"
    """auto (a GPU when one is visible, else the CPU), cpu, cuda or cuda:N"""
    threads: int = 1
    """torch CPU threads (small MLPs run fastest on one; 0: torch's default)"""
    log_dir: Path | None = None
    """run directory (default runs/ppo-<YYYYmmdd-HHMMSS>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""
    log_interval: int = 1
    """iterations between metric rows"""
    save_interval: int = 50
    """iterations between checkpoints (the last iteration is always saved)"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    tensorboard: bool = True
    """also write TensorBoard events"""
    eval_episodes: int = 10
    """episodes of the deterministic policy evaluated after training (0: skip)"""

    def __post_init__(self):
        check_path_fields(self)
        if self.anneal_lr is not None:
            # The old boolean spelling, canonicalised so that stored configs hold one field.
            if not isinstance(self.anneal_lr, bool):
                raise ConfigError("anneal_lr", self.anneal_lr, "must be true or false")
            object.__setattr__(self, "lr_schedule", "linear" if self.anneal_lr else "constant")
            object.__setattr__(self, "anneal_lr", None)
        if not isinstance(self.env, str) or ":" not in self.env:
            raise ConfigError("env", self.env, "must look like 'gym:CartPole-v1' or 'pglab:NAME'")
        if not isinstance(self.update, OnPolicyHyperparams):  # it validates its own fields
            raise ConfigError("update", self.update, "must be an OnPolicyHyperparams")
        check_int("total_steps", self.total_steps, minimum=1)
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("num_steps", self.num_steps, minimum=1)
        check_choice("vectorization", self.vectorization, VECTORIZATION_MODES)
        if self.num_envs * self.num_steps < 2:
            raise ConfigError(
                "num_steps", self.num_steps, "num_envs * num_steps must be >= 2 (advantages are standardised)"
            )
        # On --resume the rollout shape comes from the stored run: the shell checks the
        # merged config again (with resume=None).
        if self.resume is None and self.total_steps < self.batch_size:
            raise ConfigError(
                "total_steps", self.total_steps, f"must be >= num_envs * num_steps = {self.batch_size} (one iteration)"
            )
        check_positive("lr", self.lr)
        check_choice("lr_schedule", self.lr_schedule, SCHEDULES)
        check_positive("adam_eps", self.adam_eps)
        if self.update.minibatch_size is None and self.batch_size // self.update.num_minibatches < 2:
            raise ConfigError(
                "num_minibatches",
                self.update.num_minibatches,
                f"leaves fewer than 2 samples per minibatch of the {self.batch_size}-sample rollout",
            )
        check_int_sequence("hidden_dims", self.hidden_dims)
        if self.critic_hidden_dims is not None:
            check_int_sequence("critic_hidden_dims", self.critic_hidden_dims)
        if self.normalize_gamma is not None:
            check_range("normalize_gamma", self.normalize_gamma, 0.0, 1.0)
        check_env_options(self.env_wrappers, self.env_kwargs)
        if self.env_wrappers and not self.env.startswith("gym:"):
            raise ConfigError("env_wrappers", list(self.env_wrappers), "wrap gym:ID environments only")
        check_choice("activation", self.activation, ACTIVATIONS)
        check_range("log_std_init", self.log_std_init, -20.0, 5.0)
        check_int("sde_sample_freq", self.sde_sample_freq, minimum=-1)
        if self.sde_sample_freq == 0:
            raise ConfigError("sde_sample_freq", self.sde_sample_freq, "must be -1 (once per rollout) or >= 1")
        check_positive("clip_obs", self.clip_obs)
        check_positive("clip_reward", self.clip_reward)
        check_positive("normalize_epsilon", self.normalize_epsilon)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        check_threads("threads", self.threads)
        check_int("log_interval", self.log_interval, minimum=1)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        check_int("eval_episodes", self.eval_episodes, minimum=0)
        check_memory(
            "num_envs",
            self.num_envs,
            rollout_memory_bytes(self.num_envs, 1),
            f"{self.num_envs} environment copies",
        )
        check_memory(
            "num_steps",
            self.num_steps,
            rollout_memory_bytes(self.num_envs, self.num_steps),
            f"the rollout of num_envs x num_steps samples ({ROLLOUT_BYTES_PER_SAMPLE} bytes each at least)",
        )
        check_memory(
            "eval_episodes",
            self.eval_episodes,
            rollout_memory_bytes(self.eval_episodes, 0),
            "one environment copy per evaluation episode",
        )

    @property
    def batch_size(self) -> int:
        """Samples per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations the budget buys, ``total_steps // batch_size`` (rounded down)."""
        return self.total_steps // self.batch_size

    @property
    def normalizes(self) -> bool:
        """Whether observations or rewards are normalised (an :class:`ObsRewardNormalizer` runs)."""
        return self.normalize_obs or self.normalize_reward

    @property
    def algo(self) -> str:
        """The update rule, ``update.algo`` (the run's kind of training; read-only)."""
        return self.update.algo


def value_coef_from_vf_coef(vf_coef: float) -> float:
    """pglab's ``value_coef`` for SB3's ``vf_coef``: SB3's critic loss is ``mean((R - V)^2)``,
    pglab's (CleanRL's) ``0.5 * mean((V - R)^2)``, so the same total loss needs twice the
    coefficient (:func:`vf_coef_from_value_coef` is the inverse)."""
    return 2.0 * vf_coef


def vf_coef_from_value_coef(value_coef: float) -> float:
    """SB3's ``vf_coef`` for pglab's ``value_coef`` (see :func:`value_coef_from_vf_coef`)."""
    return value_coef / 2.0


SB3_DEFAULTS: dict[str, Any] = {
    "num_envs": 1,  # make_vec_env's and RL-Zoo's n_envs
    "num_steps": 2048,
    "lr": 3e-4,
    "lr_schedule": "constant",
    "adam_eps": 1e-5,
    "ppo_epochs": 10,
    "minibatch_size": 64,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_coef": 0.2,
    "clip_schedule": "constant",
    "value_clip_coef": None,
    "value_coef": value_coef_from_vf_coef(0.5),
    "entropy_coef": 0.0,
    "max_grad_norm": 0.5,
    "target_kl": None,
    "kl_stop": "minibatch",
    "normalize_advantages": True,
    "hidden_dims": (64, 64),
    "critic_hidden_dims": None,
    "activation": "tanh",
    "ortho_init": True,
    "log_std_init": 0.0,
    "use_sde": False,
    "sde_sample_freq": -1,
}
"""Stable-Baselines3's ``PPO(...)`` and ``MlpPolicy`` defaults as :class:`PPOConfig` fields
(flat names, as :func:`pglab.run.config.make_config` takes them): ``pglab train ppo
--defaults sb3`` (and ``--zoo``) start from these. The other fields keep their defaults."""

DEFAULT_SETS: dict[str, dict[str, Any]] = {"cleanrl": {}, "sb3": SB3_DEFAULTS}
"""``--defaults NAME``: the fields a default set changes. ``cleanrl``: none (the
dataclasses' own defaults are CleanRL's ``ppo.py``)."""


@dataclass(frozen=True)
class PPOEvaluateConfig:
    """Flags of ``pglab evaluate CHECKPOINT`` for a ppo checkpoint."""

    episodes: int = 10
    """episodes to run (one per environment copy)"""
    seed: int = 12_345
    """seed of the evaluation environments (held out from training's seed)"""
    stochastic: bool = False
    """sample actions instead of taking the mode/mean"""
    env: str | None = None
    """evaluate on another environment id with the same spaces (default: the training env)"""
    device: str = "auto"
    """auto (a GPU when one is visible, else the CPU), cpu, cuda or cuda:N"""
    threads: int = 1
    """torch CPU threads (0: torch's default)"""
    output: Path | None = None
    """also write the results to this JSON file"""

    def __post_init__(self):
        check_path_fields(self)
        check_int("episodes", self.episodes, minimum=1)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        check_threads("threads", self.threads)
        check_memory(
            "episodes", self.episodes, rollout_memory_bytes(self.episodes, 0), "one environment copy per episode"
        )
