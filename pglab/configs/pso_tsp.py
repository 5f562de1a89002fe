"""Configs of the Deep-PSO TSP system: ``pglab train pso-tsp`` and ``pglab evaluate pso-tsp``.

Torch-free on purpose: ``pglab train pso-tsp --help`` builds its flag list from this
module alone. :mod:`pglab.envs.pso_tsp` and :mod:`pglab.algos.pso_tsp` re-export these
names, so ``from pglab.algos.pso_tsp import PSOTSPTrainConfig`` keeps working.

Other names of fields (``DEPRECATED_NAMES``) still work as flags (with a one-line note),
in YAML files and in the configs stored in checkpoints:

    rl_mode        -> algo       (trainer)
    ppo_clip, value_loss_coeff, entropy_coeff -> clip_coef, value_coef, entropy_coef
    num_instances  -> episodes   (evaluator: the number of held-out instances)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import tyro

from pglab.configs.ppo import OnPolicyHyperparams  # torch-free, shared with ppo
from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_memory,
    check_non_negative,
    check_path_fields,
    check_positive,
    check_range,
    check_seed,
    check_threads,
)

KIND = "pso-tsp"
# The PSO trainer's update defaults (--controller edge_policy) differ from PPO's (CleanRL's):
# one minibatch (the whole trajectory), entropy 0.01 and vpg_gae, and a looser gradient clip.
PSO_UPDATE_DEFAULTS = OnPolicyHyperparams(algo="vpg_gae", num_minibatches=1, entropy_coef=0.01, max_grad_norm=1.0)
CONTROLLERS = ("swarm_es", "edge_policy")
REWARDS = ("tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit")


SWARM_ARRAYS = 3
"""float32 vectors of length D = n x k per particle: position, velocity, personal best."""


def swarm_bytes(instances: int, num_cities: int, n_particles: int, neighbours: int) -> int:
    """Lower bound of ``instances`` TSP instances' swarms held at once: ``instances x
    (3 x n_particles x D + n**2) x 4`` bytes (D = n x k candidate edges; the n x n
    distance matrix)."""
    dim = num_cities * neighbours
    return instances * (SWARM_ARRAYS * n_particles * dim + num_cities**2) * 4


@dataclass(frozen=True)
class PSOTSPEnvConfig:
    """Swarm and decoding settings of :class:`pglab.envs.pso_tsp.PSOTSPEnv`."""

    num_cities: int = 20
    """cities per instance (n)"""
    knn: int = 10
    """candidate edges per city (k); 0 or >= n-1 means the full graph"""
    n_particles: int = 16
    """particles per swarm (P)"""
    pso_iterations: int = 20
    """PSO steps per episode (T)"""
    distance_prior: float = 3.0
    """weight of -d_ij / mean edge length in the decoding logits"""
    temperature: float = 1.0
    """edge scores are divided by this in the decoding logits"""
    init_std: float = 1.0
    """initial positions ~ N(0, init_std^2)"""
    v_max: float = 2.0
    """velocity clamp per dimension"""
    w_min: float = -1.0
    """lower clamp of the applied inertia w"""
    w_max: float = 1.2
    """upper clamp of the applied inertia w"""
    c_max: float = 4.0
    """upper clamp of the applied c1, c2 (lower clamp is 0)"""

    def __post_init__(self):
        check_int("num_cities", self.num_cities, minimum=4)
        check_int("knn", self.knn, minimum=0)
        if 0 < self.knn < 2:
            raise ConfigError("knn", self.knn, "must be 0 (full graph) or >= 2")
        check_int("n_particles", self.n_particles, minimum=1)
        check_int("pso_iterations", self.pso_iterations, minimum=1)
        check_non_negative("distance_prior", self.distance_prior)
        check_positive("temperature", self.temperature)
        check_non_negative("init_std", self.init_std)
        check_positive("v_max", self.v_max)
        if self.w_min >= self.w_max:
            raise ConfigError("w_min", self.w_min, f"must be < w_max={self.w_max}")
        check_positive("c_max", self.c_max)
        check_memory("num_cities", self.num_cities, self.swarm_bytes(1), "one instance's swarm")

    def swarm_bytes(self, instances: int) -> int:
        """Memory of ``instances`` instances' swarms (:func:`swarm_bytes`)."""
        return swarm_bytes(instances, self.num_cities, self.n_particles, self.k)

    @property
    def k(self) -> int:
        """Neighbours per city actually used."""
        return self.num_cities - 1 if self.knn == 0 or self.knn >= self.num_cities - 1 else self.knn

    @property
    def dim(self) -> int:
        """Position dimension D = n * k (directed candidate edges)."""
        return self.num_cities * self.k


@dataclass(frozen=True)
class PSOTSPTrainConfig:
    """Configuration of ``pglab train pso-tsp`` (configs/tsp.yaml)."""

    # Aliases, accepted as flags, YAML keys and in stored checkpoint configs.
    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {
        "rl_mode": "algo",
        "ppo_clip": "clip_coef",
        "value_loss_coeff": "value_coef",
        "entropy_coeff": "entropy_coef",
    }

    # -- problem and swarm: --num-cities, --knn, --n-particles, --pso-iterations, ... --------
    env: Annotated[PSOTSPEnvConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=PSOTSPEnvConfig)
    """the TSP instances, the swarm and the decoding (PSOTSPEnvConfig)"""
    controller: Literal["swarm_es", "edge_policy"] = "swarm_es"
    """swarm_es: a deterministic per-particle controller (w, c1, c2) = tuned constants + MLP(swarm
    state), trained by evolution strategies on its greedy result (the recommended setup);
    edge_policy: the per-edge attention policy trained by --algo"""
    # -- swarm_es: constant tuning, controller, evolution strategies --------------------------
    tune_candidates: int = 48
    """swarm_es: random-search candidates for the constant (w, c1, c2) the controller starts from"""
    tune_instances: int = 32
    """swarm_es: training instances per candidate in the tuning's first stage"""
    hidden: int = 16
    """swarm_es: hidden units of the controller (0: linear in the swarm features)"""
    es_pairs: int = 8
    """swarm_es: antithetic perturbation pairs per iteration"""
    es_sigma: float = 0.1
    """swarm_es: perturbation standard deviation in parameter space"""
    es_lr: float = 0.03
    """swarm_es: Adam learning rate on the ES gradient"""
    # -- edge_policy: decoding, reward, exploration ---------------------------------------------
    train_decode: Literal["sample", "greedy"] = "greedy"
    """decoding during training rollouts (evaluation always decodes greedily)"""
    reward: Literal["tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit"] = "gbest_improvement"
    """per-particle reward: -tour length, own-best or swarm-best improvement, or the
    swarm-best improvement credited to the particle whose tour achieved it"""
    # -- network ----------------------------------------------------------------------------
    emb_dim: int = 16
    """embedding width"""
    num_heads: int = 4
    """attention heads"""
    node_layers: int = 2
    """city self-attention layers"""
    swarm_layers: int = 1
    """particle self-attention layers"""
    log_std_init: float = -1.2
    """initial log standard deviation of the coefficients"""
    min_std: float = 0.01
    """lower clamp of the coefficients' standard deviation"""
    max_std: float = 1.0
    """upper clamp of the coefficients' standard deviation"""
    mu_scale: float = 5.0
    """mean coefficients = classic + mu_scale * network output (a faster-moving mean)"""
    log_prob_reduction: Literal["mean", "sum"] = "mean"
    """per-particle log-likelihood: mean over edges or the exact sum"""
    particle_noise_std: float = 0.3
    """std of an exploration offset per coefficient shared by all edges (0: per-edge noise only)"""
    noise_scope: Literal["particle", "swarm"] = "swarm"
    """who shares that offset: each particle its own, or the whole swarm of an instance"""
    antithetic: bool = True
    """rollouts in mirrored pairs: each instance twice, with common PSO/decode random numbers
    and negated exploration noise (instances_per_iteration counts both copies; must be even)"""
    # -- RL update (pglab.algos.onpolicy) -----------------------------------------------------
    lr: float = 1e-3
    """edge_policy: Adam learning rate"""
    update: Annotated[OnPolicyHyperparams, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: PSO_UPDATE_DEFAULTS
    )
    """the on-policy update: --algo, --gamma, --gae-lambda, --ppo-epochs, --num-minibatches,
    --clip-coef, --value-clip-coef, --value-coef, --entropy-coef, --max-grad-norm, --target-kl,
    --normalize-advantages"""
    # -- schedule ---------------------------------------------------------------------------
    n_iterations: int = 60
    """training iterations (one ES step, or one rollout + update, each)"""
    instances_per_iteration: int = 16
    """TSP instances per rollout (B; swarm_es: per candidate, the same for all candidates)"""
    log_interval: int = 5
    """iterations between metric rows"""
    save_interval: int = 50
    """iterations between checkpoints (the last is always saved)"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    eval_interval: int = 10
    """iterations between greedy validations against classic (and tuned) PSO (0: off)"""
    eval_instances: int = 128
    """validation instances"""
    # -- run --------------------------------------------------------------------------------
    log_dir: Path | None = None
    """run directory (default runs/pso-tsp-<YYYYmmdd-HHMMSS>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""
    seed: int = 0
    """random seed (same seed + config + threads on the CPU: bit-identical run)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""

    def __post_init__(self):
        check_path_fields(self)
        # The nested configs validate their own fields (n_particles >= 1, gamma in [0, 1], ...).
        if not isinstance(self.env, PSOTSPEnvConfig):
            raise ConfigError("env", self.env, "must be a PSOTSPEnvConfig")
        if not isinstance(self.update, OnPolicyHyperparams):
            raise ConfigError("update", self.update, "must be an OnPolicyHyperparams")
        if self.update.clip_schedule != "constant":  # a field of the shared update config that only ppo uses
            raise ConfigError(
                "clip_schedule",
                self.update.clip_schedule,
                "the Deep-PSO trainer has no clip schedule (pglab train ppo only)",
            )
        check_choice("controller", self.controller, CONTROLLERS)
        check_int("tune_candidates", self.tune_candidates, minimum=1)
        check_int("tune_instances", self.tune_instances, minimum=1)
        check_int("hidden", self.hidden, minimum=0)
        check_int("es_pairs", self.es_pairs, minimum=1)
        check_positive("es_sigma", self.es_sigma)
        check_positive("es_lr", self.es_lr)
        check_choice("train_decode", self.train_decode, ("sample", "greedy"))
        check_choice("reward", self.reward, REWARDS)
        check_choice("noise_scope", self.noise_scope, ("particle", "swarm"))
        check_int("emb_dim", self.emb_dim, minimum=1)
        check_int("num_heads", self.num_heads, minimum=1)
        if self.emb_dim % self.num_heads:
            raise ConfigError("emb_dim", self.emb_dim, f"must be divisible by num_heads={self.num_heads}")
        check_int("node_layers", self.node_layers, minimum=1)
        check_int("swarm_layers", self.swarm_layers, minimum=1)
        check_range("log_std_init", self.log_std_init, -10.0, 2.0)
        check_positive("min_std", self.min_std)
        check_positive("max_std", self.max_std)
        if self.min_std >= self.max_std:
            raise ConfigError("min_std", self.min_std, f"must be < max_std={self.max_std}")
        check_positive("mu_scale", self.mu_scale)
        check_choice("log_prob_reduction", self.log_prob_reduction, ("mean", "sum"))
        check_non_negative("particle_noise_std", self.particle_noise_std)
        if self.antithetic and self.instances_per_iteration % 2:
            raise ConfigError(
                "instances_per_iteration", self.instances_per_iteration, "must be even with antithetic: true"
            )
        check_positive("lr", self.lr)
        for name in ("n_iterations", "instances_per_iteration", "log_interval", "save_interval", "eval_instances"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_interval", self.eval_interval, minimum=0)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        for name in ("instances_per_iteration", "eval_instances", "tune_instances"):
            count = getattr(self, name)
            check_memory(name, count, self.env.swarm_bytes(count), f"{count} instances' swarms")
        check_seed("seed", self.seed)
        check_device("device", self.device)
        check_threads("threads", self.threads)

    @property
    def algo(self) -> str:
        """The update rule, ``update.algo`` (read-only)."""
        return self.update.algo


@dataclass(frozen=True)
class PSOTSPEvalConfig:
    """Configuration of ``pglab evaluate pso-tsp`` / ``pglab evaluate CHECKPOINT``."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"num_instances": "episodes"}

    checkpoint: Path | None = None
    """a pso-tsp checkpoint (file or run directory); without one only the baselines run"""
    num_cities: int | None = None
    """cities per instance (default: the checkpoint's, else 20)"""
    n_particles: int | None = None
    """particles per swarm (default: the checkpoint's, else 16)"""
    pso_iterations: int | None = None
    """PSO iterations (default: the checkpoint's, else 20)"""
    episodes: int = 64
    """held-out instances, one PSO episode each (alias --num-instances)"""
    seed: int = 20_261_123
    """seed of the held-out instance set (training uses other streams)"""
    swarm_seed: int = 7
    """seed of the initial swarms and PSO noise (the same for every swarm method)"""
    held_karp_max_n: int = 16
    """exact Held–Karp up to this n; LKH-3 (elkai) above, Held–Karp if elkai is missing and n <= 22"""
    optimal: bool = True
    """compute the optimal (or LKH-3) reference tours"""
    tune: int = 0
    """N > 0: instead of evaluating, random-search N constant (w, c1, c2) on the training
    distribution (--episodes instances each, from --seed's tuning stream, never the held-out
    set) and write the winner to --output (JSON, for --tuned)"""
    tuned: Path | None = None
    """a --tune result: adds the tuned constant PSO (and its equal-time row)"""
    local_search: Literal["none", "2opt"] = "none"
    """2opt: also report each swarm's best tour improved by 2-opt (batched in torch)"""
    equal_time: bool = True
    """with a checkpoint: also run classic (and tuned) PSO with the learned controller's
    extra CPU time spent on more PSO iterations"""
    output: Path | None = None
    """write the table (or the --tune result) as JSON here"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""

    def __post_init__(self):
        check_path_fields(self)
        for name in ("num_cities", "n_particles", "pso_iterations"):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, minimum=4 if name == "num_cities" else 1)
        check_int("episodes", self.episodes, minimum=1)
        check_seed("seed", self.seed)
        check_seed("swarm_seed", self.swarm_seed)
        cities = self.num_cities or PSOTSPEnvConfig.num_cities  # the checkpoint's when it has one: a lower bound
        particles = self.n_particles or PSOTSPEnvConfig.n_particles
        check_memory(
            "episodes",
            self.episodes,
            swarm_bytes(self.episodes, cities, particles, min(PSOTSPEnvConfig.knn, cities - 1)),
            f"{self.episodes} instances' swarms",
        )
        check_int("held_karp_max_n", self.held_karp_max_n, minimum=2)
        check_int("tune", self.tune, minimum=0)
        check_choice("local_search", self.local_search, ("none", "2opt"))
        if self.tune and self.output is None:
            raise ConfigError("output", None, "--tune needs --output FILE for the tuned coefficients")
        if self.tuned is not None and not Path(self.tuned).is_file():
            raise ConfigError("tuned", str(self.tuned), "is not a file (write one with --tune N --output FILE)")
        check_device("device", self.device)
        check_threads("threads", self.threads)
        if self.output is not None and Path(self.output).is_dir():
            raise ConfigError("output", str(self.output), "is a directory; name the JSON file to write")
