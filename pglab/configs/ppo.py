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
from typing import Annotated, ClassVar, Literal

import tyro

from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_int_sequence,
    check_non_negative,
    check_positive,
    check_range,
)

RLMode = Literal["reinforce_raw", "vpg_gae", "ppo"]
"""The estimator and loss of an on-policy update (the PSO design note's names)."""
RL_MODES: tuple[str, ...] = typing.get_args(RLMode)
Vectorization = Literal["auto", "vector", "sync", "async"]
# The same modes as pglab.envs.gym_adapter.VECTORIZATION_MODES, spelled here so that this
# module does not import the adapter (and torch with it).
VECTORIZATION_MODES: tuple[str, ...] = typing.get_args(Vectorization)
ACTIVATIONS = ("tanh", "relu", "elu", "silu", "gelu")


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
    """minibatches per pass (ppo only)"""
    clip_coef: float = 0.2
    """surrogate clip range epsilon"""
    value_clip_coef: float | None = None
    """clip the value update to +-this around the old values (None: no clipping)"""
    value_coef: float = 0.5
    """weight of the critic loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: float | None = None
    """stop the epochs early once approx-KL exceeds this (None: never)"""
    normalize_advantages: bool = True
    """standardise advantages per minibatch"""

    def __post_init__(self):
        check_choice("algo", self.algo, RL_MODES)
        check_range("gamma", self.gamma, 0.0, 1.0)
        check_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_int("ppo_epochs", self.ppo_epochs, minimum=1)
        check_int("num_minibatches", self.num_minibatches, minimum=1)
        check_positive("clip_coef", self.clip_coef)
        if self.value_clip_coef is not None:
            check_positive("value_clip_coef", self.value_clip_coef)
        check_non_negative("value_coef", self.value_coef)
        check_non_negative("entropy_coef", self.entropy_coef)
        check_positive("max_grad_norm", self.max_grad_norm)
        if self.target_kl is not None:
            check_positive("target_kl", self.target_kl)


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
    vectorization: Vectorization = "auto"
    """Gymnasium vector env: vector (all copies as array ops; CartPole-v1), sync (a loop over
    copies in one process), async (one process per copy); auto = vector where available, else sync"""
    # -- optimisation ------------------------------------------------------------------
    lr: float = 2.5e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_steps"""
    adam_eps: float = 1e-5
    """Adam epsilon (CleanRL's 1e-5)"""
    # -- the update (algo, gamma, gae_lambda, ppo_epochs, num_minibatches, clip_coef, ...) --
    update: Annotated[OnPolicyHyperparams, tyro.conf.OmitArgPrefixes] = field(default_factory=OnPolicyHyperparams)
    """the on-policy update: --algo, --gamma, --gae-lambda, --ppo-epochs, --num-minibatches,
    --clip-coef, --value-clip-coef, --value-coef, --entropy-coef, --max-grad-norm, --target-kl,
    --normalize-advantages"""
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
    device: str = "auto"
    """auto (a GPU when one is visible, else the CPU), cpu, cuda or cuda:N"""
    threads: int = 1
    """torch CPU threads (small MLPs run fastest on one; 0: torch's default)"""
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
        if not isinstance(self.update, OnPolicyHyperparams):  # it validates its own fields
            raise ConfigError("update", self.update, "must be an OnPolicyHyperparams")
        check_int("total_steps", self.total_steps, minimum=1)
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("num_steps", self.num_steps, minimum=1)
        check_choice("vectorization", self.vectorization, VECTORIZATION_MODES)
        if self.num_envs * self.num_steps < 2:
            raise ConfigError("num_steps", self.num_steps, "num_envs * num_steps must be >= 2 (advantages are standardised)")
        # On --resume the rollout shape comes from the stored run: the shell checks the
        # merged config again (with resume=None).
        if self.resume is None and self.total_steps < self.batch_size:
            raise ConfigError("total_steps", self.total_steps, f"must be >= num_envs * num_steps = {self.batch_size} (one iteration)")
        check_positive("lr", self.lr)
        check_positive("adam_eps", self.adam_eps)
        if self.batch_size // self.update.num_minibatches < 2:
            raise ConfigError("num_minibatches", self.update.num_minibatches,
                              f"leaves fewer than 2 samples per minibatch of the {self.batch_size}-sample rollout")
        check_int_sequence("hidden_dims", self.hidden_dims)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_range("log_std_init", self.log_std_init, -20.0, 5.0)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)
        check_int("threads", self.threads, minimum=0)
        check_int("log_interval", self.log_interval, minimum=1)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("eval_episodes", self.eval_episodes, minimum=0)

    @property
    def batch_size(self) -> int:
        """Samples per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations the budget buys, ``total_steps // batch_size`` (rounded down)."""
        return self.total_steps // self.batch_size

    @property
    def algo(self) -> str:
        """The update rule, ``update.algo`` (the run's kind of training; read-only)."""
        return self.update.algo


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
        check_int("episodes", self.episodes, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)
        check_int("threads", self.threads, minimum=0)
