"""``pglab train pso-tsp``: learn per-particle, per-edge PSO coefficients for the TSP.

One training iteration (CleanRL's phases)::

    instances  B fresh uniform TSP instances; env.reset -> random swarm
    rollout    for t < T: (mu, sigma, V) = model(s_t); a_t ~ N(mu, sigma);
               s_{t+1}, L_t = env.step(a_t)                 (--train_decode sample|greedy)
               r_t per particle: --reward (see shaped_reward)
    advantages compute_gae over [B*P, T] (episode ends at T: terminated, V_T = 0);
               reinforce_raw uses the Monte Carlo returns with a batch-mean baseline
    optimise   pglab.algos.onpolicy.onpolicy_update (rl_mode reinforce_raw|vpg_gae|ppo);
               samples are (iteration, instance, particle) triples, re-evaluated from the
               stored swarm snapshots (the note's "ephemeral state snapshots")
    log / checkpoint / greedy validation against classic PSO

Rewards are divided by ``L_ref = 0.7124 sqrt(n)`` (the Beardwood–Halton–Hammersley
estimate of the optimal length in the unit square) so the critic's targets are O(1);
the ``tour_length`` reward is also shifted by the initial swarm's mean length of the same
instance. Per-instance shifts and scales leave the optimal policy unchanged.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
from pglab.envs.pso_tsp import PSOTSPEnv, PSOTSPEnvConfig, SwarmState, fixed_coefficients, random_instances
from pglab.errors import ConfigError
from pglab.estimators import compute_gae
from pglab.nets.tsp_pso import HyperparamTSPModel, gaussian_log_prob_entropy, sample_coefficients, swarm_scalars
from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_checkpoint_file, load_state_dict_checked, save_checkpoint
from pglab.run.config import config_from_dict, config_to_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.progress import progress_bar
from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything
from pglab.run.signals import StopRequested
from pglab.validation import check_choice, check_device, check_int, check_non_negative, check_positive, check_range

KIND = "pso-tsp"
BHH_CONSTANT = 0.7124  # E[L*] ~ 0.7124 sqrt(n A) for n uniform cities in area A


@dataclass(frozen=True)
class PSOTSPTrainConfig:
    """Configuration of ``pglab train pso-tsp`` (configs/tsp.yaml)."""

    # -- problem and swarm ------------------------------------------------------------------
    num_cities: int = 20
    """cities per instance (n)"""
    knn: int = 10
    """candidate edges per city (k); 0 or >= n-1: full graph"""
    n_particles: int = 16
    """particles per swarm (P)"""
    pso_iterations: int = 20
    """PSO steps per episode (T)"""
    distance_prior: float = 3.0
    """weight of -d_ij/mean edge in the decoding logits"""
    temperature: float = 1.0
    """edge scores are divided by this when decoding"""
    init_std: float = 1.0
    """initial positions ~ N(0, init_std^2)"""
    v_max: float = 2.0
    """velocity clamp"""
    w_min: float = -1.0
    """lower clamp of the applied inertia"""
    w_max: float = 1.2
    """upper clamp of the applied inertia"""
    c_max: float = 4.0
    """upper clamp of the applied c1, c2"""
    train_decode: Literal["sample", "greedy"] = "sample"
    """decoding during training rollouts (evaluation always decodes greedily)"""
    reward: Literal["tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit"] = "tour_length"
    """per-particle reward: -tour length (the note), own-best or swarm-best improvement, or the
    swarm-best improvement credited to the particle whose tour achieved it"""
    # -- network ----------------------------------------------------------------------------
    emb_dim: int = 32
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
    mu_scale: float = 1.0
    """mean coefficients = classic + mu_scale * network output (a faster-moving mean)"""
    log_prob_reduction: Literal["mean", "sum"] = "mean"
    """per-particle log-likelihood: mean over edges (the note) or the exact sum"""
    particle_noise_std: float = 0.0
    """std of an exploration offset per coefficient shared by all edges (0: per-edge noise only)"""
    noise_scope: Literal["particle", "swarm"] = "particle"
    """who shares that offset: each particle its own, or the whole swarm of an instance"""
    antithetic: bool = False
    """rollouts in mirrored pairs: each instance twice, with common PSO/decode random numbers
    and negated exploration noise (instances_per_iteration counts both copies; must be even)"""
    # -- RL update (pglab.algos.onpolicy) -----------------------------------------------------
    rl_mode: Literal["reinforce_raw", "vpg_gae", "ppo"] = "ppo"
    """reinforce_raw | vpg_gae | ppo"""
    lr: float = 3e-4
    """Adam learning rate"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    ppo_epochs: int = 4
    """passes over each rollout (ppo)"""
    num_minibatches: int = 1
    """minibatches per pass (ppo); 1 = the whole trajectory, as in the note"""
    clip_coef: float = 0.2
    """PPO clip range"""
    value_coef: float = 0.5
    """weight of the value loss"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    target_kl: float | None = None
    """PPO early stop on approx-KL (None: off)"""
    # -- schedule ---------------------------------------------------------------------------
    n_iterations: int = 200
    """training iterations (one rollout + update each)"""
    instances_per_iteration: int = 4
    """TSP instances per rollout (B)"""
    log_interval: int = 5
    """iterations between metric rows"""
    save_interval: int = 50
    """iterations between checkpoints (the last is always saved)"""
    eval_interval: int = 25
    """iterations between greedy validations against classic PSO (0: off)"""
    eval_instances: int = 32
    """validation instances"""
    # -- other ------------------------------------------------------------------------------
    log_dir: Path | None = None
    """run directory (default runs/pso-tsp/<timestamp>)"""
    seed: int = 0
    """random seed (same seed + config on the CPU: bit-identical run)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""

    def __post_init__(self):
        self.env_config()  # validates the swarm fields (n_particles >= 1, ...)
        self.hyperparams()  # validates the RL fields
        check_choice("train_decode", self.train_decode, ("sample", "greedy"))
        check_choice("reward", self.reward, ("tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit"))
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
            raise ConfigError("instances_per_iteration", self.instances_per_iteration, "must be even with antithetic: true")
        check_positive("lr", self.lr)
        for name in ("n_iterations", "instances_per_iteration", "log_interval", "save_interval", "eval_instances"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_interval", self.eval_interval, minimum=0)
        check_int("seed", self.seed, minimum=0)
        check_device("device", self.device)

    def env_config(self) -> PSOTSPEnvConfig:
        names = {f.name for f in dataclasses.fields(PSOTSPEnvConfig)}
        return PSOTSPEnvConfig(**{name: getattr(self, name) for name in names})

    def hyperparams(self) -> OnPolicyHyperparams:
        return OnPolicyHyperparams(
            rl_mode=self.rl_mode, gamma=self.gamma, gae_lambda=self.gae_lambda, ppo_epochs=self.ppo_epochs,
            num_minibatches=self.num_minibatches, clip_coef=self.clip_coef, value_coef=self.value_coef,
            entropy_coef=self.entropy_coef, max_grad_norm=self.max_grad_norm, target_kl=self.target_kl,
        )


RESUMABLE_FIELDS = {"n_iterations", "log_interval", "save_interval", "eval_interval", "device", "resume", "log_dir"}


def build_model(config: PSOTSPTrainConfig, device: torch.device) -> HyperparamTSPModel:
    env_cfg = config.env_config()
    return HyperparamTSPModel(
        config.num_cities, env_cfg.k, emb_dim=config.emb_dim, num_heads=config.num_heads, node_layers=config.node_layers,
        swarm_layers=config.swarm_layers, log_std_init=config.log_std_init, min_std=config.min_std, max_std=config.max_std,
        mu_scale=config.mu_scale, particle_noise_std=config.particle_noise_std, noise_scope=config.noise_scope,
    ).to(device)


@dataclass
class PSOTSPAgent:
    """A trained coefficient policy: ``agent.act(state)`` gives ``wc1c2 [B, P, D, 3]``."""

    model: HyperparamTSPModel
    config: PSOTSPTrainConfig

    def act(self, state: SwarmState, *, deterministic: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.model.act(state, self.config.pso_iterations, deterministic=deterministic, generator=generator)

    @property
    def policy(self) -> HyperparamTSPModel:
        return self.model


def agent_from_checkpoint(checkpoint: dict[str, Any], device: str | torch.device = "cpu") -> PSOTSPAgent:
    """Rebuild the agent of a loaded ``pso-tsp`` checkpoint (``pglab.load_checkpoint``)."""
    device = resolve_device(device) if isinstance(device, str) else device
    config = config_from_dict(PSOTSPTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None, "device": "cpu"})
    model = build_model(config, device)
    load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint.get("path", "checkpoint"))
    model.eval()
    return PSOTSPAgent(model=model, config=config)


# -- rollout -------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One episode's samples, time-major for storage: swarm tensors ``[T, B, ...]``."""

    coords: torch.Tensor
    neighbours: torch.Tensor
    edge_dist: torch.Tensor
    position: torch.Tensor   # [T, B, P, D]
    velocity: torch.Tensor   # [T, B, P, D]
    pbest: torch.Tensor      # [T, B, P, D]
    gbest: torch.Tensor      # [T, B, D]
    scalars: torch.Tensor    # [T, B, P, 3]
    actions: torch.Tensor    # [T, B, P, D, 3]
    log_probs: torch.Tensor  # [T, B, P]
    values: torch.Tensor     # [T, B, P]
    rewards: torch.Tensor    # [T, B, P]
    tour_length: torch.Tensor  # [T, B, P]
    best_cost: torch.Tensor  # [B]


def collect_rollout(model: HyperparamTSPModel, env: PSOTSPEnv, coords: torch.Tensor, config: PSOTSPTrainConfig,
                    action_generator: torch.Generator) -> Rollout:
    T = config.pso_iterations
    state = env.reset(coords)
    reference = BHH_CONSTANT * math.sqrt(config.num_cities)
    initial_mean = state.cost.mean(dim=1, keepdim=True)  # [B, 1]
    store: dict[str, list[torch.Tensor]] = {k: [] for k in ("position", "velocity", "pbest", "gbest", "scalars", "actions", "log_probs", "values", "rewards", "tour_length")}
    with torch.no_grad():
        node_emb, edge_emb = model.encode_instances(state.coords, state.neighbours, state.edge_dist)
        for _ in range(T):
            scalars = swarm_scalars(state, T)
            mu, sigma, values = model(node_emb, edge_emb, state.position, state.velocity, state.pbest, state.gbest, scalars)
            actions = sample_coefficients(mu, sigma, config.particle_noise_std, action_generator, config.noise_scope,
                                          antithetic=config.antithetic)
            log_probs, _ = gaussian_log_prob_entropy(mu, sigma, actions, config.log_prob_reduction, config.particle_noise_std,
                                                     config.noise_scope)
            for name, tensor in (("position", state.position), ("velocity", state.velocity), ("pbest", state.pbest),
                                 ("gbest", state.gbest), ("scalars", scalars), ("actions", actions),
                                 ("log_probs", log_probs), ("values", values)):
                store[name].append(tensor)
            previous_pbest, previous_best = state.pbest_cost, state.best_cost
            state, _, _ = env.step(actions)
            store["rewards"].append(shaped_reward(config.reward, state, previous_pbest, previous_best, initial_mean, reference))
            store["tour_length"].append(state.cost)
    stacked = {name: torch.stack(tensors) for name, tensors in store.items()}
    return Rollout(coords=state.coords, neighbours=state.neighbours, edge_dist=state.edge_dist, best_cost=state.best_cost, **stacked)


def shaped_reward(kind: str, state: SwarmState, previous_pbest: torch.Tensor, previous_best: torch.Tensor,
                  initial_mean: torch.Tensor, reference: float) -> torch.Tensor:
    """Per-particle reward ``[B, P]`` after one PSO step (all divided by ``L_ref``):

    * ``tour_length``: ``(L0_mean - L_t)``, the note's ``-L_t`` shifted per instance;
    * ``pbest_improvement``: ``pbest_{t-1} - pbest_t`` (sums to the particle's total
      personal-best improvement over the episode);
    * ``gbest_improvement``: ``best_{t-1} - best_t`` of the instance, shared by its
      particles (sums to the improvement of the swarm's answer: the evaluation metric).
    * ``gbest_credit``: the same improvement, given only to the particle whose tour set
      the new best (the first such particle on ties); summed over particles it is
      ``best_{t-1} - best_t``, so the episode's total is still the evaluation metric.
    """
    if kind == "tour_length":
        return (initial_mean - state.cost) / reference
    if kind == "pbest_improvement":
        return (previous_pbest - state.pbest_cost) / reference
    improvement = (previous_best - state.best_cost) / reference  # [B]
    if kind == "gbest_credit":
        # the particle whose current tour is the new best (argmin takes the first on ties)
        finder = state.cost.argmin(dim=1, keepdim=True)
        credit = torch.zeros_like(state.cost)
        return credit.scatter_(1, finder, improvement.unsqueeze(1))
    return improvement.unsqueeze(1).expand_as(state.cost).contiguous()


def advantages_and_returns(rollout: Rollout, hp: OnPolicyHyperparams) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (or Monte Carlo for reinforce_raw) over particles as ``[B*P, T]`` rows, returned
    flattened time-major ``[T*B*P]`` to match the stored samples."""
    T, B, P = rollout.rewards.shape
    rewards = rollout.rewards.permute(1, 2, 0).reshape(B * P, T)
    values = rollout.values.permute(1, 2, 0).reshape(B * P, T)
    dones = torch.zeros_like(rewards, dtype=torch.bool)
    dones[:, -1] = True  # the PSO episode ends after T iterations: nothing to bootstrap
    last_value = torch.zeros(B * P, device=rewards.device)
    if hp.rl_mode == "reinforce_raw":
        # lam = 1 with V = 0: A_t = G_t, the discounted Monte Carlo return.
        returns, _ = compute_gae(rewards, torch.zeros_like(values), dones, None, last_value, hp.gamma, 1.0)
        advantages = returns
    else:
        advantages, returns = compute_gae(rewards, values, dones, None, last_value, hp.gamma, hp.gae_lambda)
    to_flat = lambda x: x.reshape(B, P, T).permute(2, 0, 1).reshape(-1)  # noqa: E731
    return to_flat(advantages), to_flat(returns)


def make_evaluate(model: HyperparamTSPModel, rollout: Rollout, config: PSOTSPTrainConfig):
    """``evaluate(indices)`` for :func:`onpolicy_update`: flat sample ``i = (t*B + b)*P + p``.
    Only the swarms (t, b) that the indices touch are re-run; the city encoder runs once
    per call on the B instances (its output is shared by all T iterations)."""
    T, B, P = rollout.rewards.shape

    def evaluate(indices: torch.Tensor):
        swarm = indices // P
        unique, inverse = torch.unique(swarm, return_inverse=True)
        t, b = unique // B, unique % B
        node_emb, edge_emb = model.encode_instances(rollout.coords, rollout.neighbours, rollout.edge_dist)
        mu, sigma, values = model(node_emb[b], edge_emb[b], rollout.position[t, b], rollout.velocity[t, b],
                                  rollout.pbest[t, b], rollout.gbest[t, b], rollout.scalars[t, b])
        log_probs, entropy = gaussian_log_prob_entropy(mu, sigma, rollout.actions[t, b], config.log_prob_reduction,
                                                       config.particle_noise_std, config.noise_scope)
        particle = indices % P
        return log_probs[inverse, particle], entropy[inverse, particle], values[inverse, particle]

    return evaluate


# -- validation -------------------------------------------------------------------------------------
def run_swarm(env: PSOTSPEnv, coords: torch.Tensor, policy) -> torch.Tensor:
    """Best tour length ``[B]`` found by a swarm whose coefficients come from ``policy(state)``."""
    state = env.reset(coords)
    for _ in range(env.config.pso_iterations):
        state, _, _ = env.step(policy(state))
    return state.best_cost


def greedy_validation(model: HyperparamTSPModel, config: PSOTSPTrainConfig, coords: torch.Tensor, seed: int) -> torch.Tensor:
    env = PSOTSPEnv(config.env_config(), coords.device, make_generator(seed, coords.device), decode="greedy")
    return run_swarm(env, coords, lambda s: model.act(s, config.pso_iterations, deterministic=True)).mean()


def classic_validation(config: PSOTSPTrainConfig, coords: torch.Tensor, seed: int) -> torch.Tensor:
    env = PSOTSPEnv(config.env_config(), coords.device, make_generator(seed, coords.device), decode="greedy")
    return run_swarm(env, coords, lambda s: fixed_coefficients(tuple(s.position.shape), device=coords.device)).mean()


# -- the training loop ------------------------------------------------------------------------------


@dataclass
class PSOTSPRunResult:
    run_dir: Path
    iterations: int
    interrupted: bool
    model: HyperparamTSPModel
    last_metrics: dict[str, float]


def resolve_resume(config: PSOTSPTrainConfig) -> tuple[PSOTSPTrainConfig, dict[str, Any] | None]:
    """For ``--resume DIR``: the stored config, with only :data:`RESUMABLE_FIELDS` taken
    from the command line (a change to any other field is a ConfigError)."""
    if config.resume is None:
        return config, None
    checkpoint = load_checkpoint_file(Path(config.resume), kinds=[KIND])
    stored = config_from_dict(PSOTSPTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    current, before, defaults = config_to_dict(config), config_to_dict(stored), config_to_dict(PSOTSPTrainConfig())
    for field in dataclasses.fields(PSOTSPTrainConfig):
        name = field.name
        if name not in RESUMABLE_FIELDS and current[name] != before[name] and current[name] != defaults[name]:
            raise ConfigError(name, getattr(config, name), f"differs from the resumed run's value {getattr(stored, name)!r}; "
                              f"only {', '.join(sorted(RESUMABLE_FIELDS))} may change on --resume")
    overrides = {name: getattr(config, name) for name in RESUMABLE_FIELDS if current[name] != defaults[name]}
    merged = dataclasses.replace(stored, **overrides)
    if merged.n_iterations < checkpoint["counters"]["iteration"]:
        raise ConfigError("n_iterations", merged.n_iterations, f"is below the checkpoint's iteration {checkpoint['counters']['iteration']}")
    return merged, checkpoint


def train_pso_tsp(config: PSOTSPTrainConfig, *, echo=print) -> PSOTSPRunResult:
    """Train (or resume) a Deep-PSO run; see the module docstring."""
    config, checkpoint = resolve_resume(config)
    device = resolve_device(config.device)
    if checkpoint is not None:
        path = Path(checkpoint["path"])
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else Path(config.resume)
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir(KIND), subdirs=("checkpoints",))
    seed_everything(config.seed)
    model = build_model(config, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5)
    hp = config.hyperparams()
    # Separate streams: instances, env noise (decode, r1, r2), policy sampling, minibatch order.
    generators = {name: make_generator(config.seed * 4 + i, device) for i, name in enumerate(("instances", "env", "action", "update"))}
    env = PSOTSPEnv(config.env_config(), device, generators["env"], decode=config.train_decode, paired=config.antithetic)
    validation_coords = random_instances(config.eval_instances, config.num_cities, make_generator(10_000 + config.seed, device), device)

    # best_validation_pct: the best greedy validation improvement over classic PSO so far
    # (its model is checkpoints/checkpoint_best.pt); -inf before the first validation.
    counters: dict[str, float] = {"iteration": 0, "env_steps": 0, "wall_time": 0.0, "best_validation_pct": float("-inf")}
    if checkpoint is not None:
        load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint["path"])
        optimizer.load_state_dict(checkpoint["optimizers"]["adam"])
        restore_rng_state(checkpoint["rng"], generators)
        counters.update(checkpoint["counters"])
    else:
        write_run_config(run_dir, config_to_dict(config), kind=KIND)
    start = int(counters["iteration"])
    resumed = checkpoint is not None
    logger = MetricsLogger(run_dir, jsonl_name="metrics.jsonl", tensorboard_dir=None, resume_step=start if resumed else None)
    logger.write_meta({"kind": KIND, "config": config_to_dict(config)})
    eval_logger = MetricsLogger(run_dir, csv_name="eval.csv", tensorboard_dir=None, resume_step=start if resumed else None)
    manager = CheckpointManager(run_dir / "checkpoints", keep=3)
    classic_length = classic_validation(config, validation_coords, seed=1) if config.eval_interval else None

    def checkpoint_state() -> dict[str, Any]:
        return build_checkpoint(
            kind=KIND, config=config_to_dict(dataclasses.replace(config, resume=None)), counters=dict(counters),
            models={"model": model.state_dict()}, optimizers={"adam": optimizer.state_dict()},
            rng=capture_rng_state(generators),
        )

    def save(iteration: int) -> Path:
        return manager.save(iteration, checkpoint_state())

    interrupted = False
    iteration = start
    last_metrics: dict[str, float] = {}
    steps_per_iteration = config.instances_per_iteration * config.n_particles * config.pso_iterations
    bar = progress_bar(config.n_iterations, desc=f"train pso-tsp --rl-mode {config.rl_mode}", initial=start, unit="iter")
    try:
        with StopRequested() as stop:
            for iteration in range(start + 1, config.n_iterations + 1):
                tick = time.perf_counter()
                # -- rollout ----------------------------------------------------------------
                if config.antithetic:  # each instance twice: a mirrored pair
                    coords = random_instances(config.instances_per_iteration // 2, config.num_cities, generators["instances"], device)
                    coords = torch.cat([coords, coords])
                else:
                    coords = random_instances(config.instances_per_iteration, config.num_cities, generators["instances"], device)
                model.eval()
                rollout = collect_rollout(model, env, coords, config, generators["action"])
                # -- advantages -------------------------------------------------------------
                advantages, returns = advantages_and_returns(rollout, hp)
                batch = OnPolicyBatch(old_log_probs=rollout.log_probs.reshape(-1), advantages=advantages,
                                      returns=returns, old_values=rollout.values.reshape(-1))
                # -- optimise ---------------------------------------------------------------
                model.train()
                metrics = onpolicy_update(make_evaluate(model, rollout, config), batch, model.parameters(), optimizer, hp,
                                          generator=generators["update"])
                elapsed = time.perf_counter() - tick
                counters["iteration"] = iteration
                counters["env_steps"] += steps_per_iteration
                counters["wall_time"] += elapsed
                # -- log ------------------------------------------------------------------------
                last = iteration == config.n_iterations
                if iteration % config.log_interval == 0 or last:
                    episode_return = rollout.rewards.sum(0)  # [B, P], undiscounted
                    last_metrics = logger.log(iteration, {
                        **metrics,
                        "return/mean": episode_return.mean(), "return/std": episode_return.std(),
                        "tour_length/mean": rollout.tour_length.mean(), "tour_length/best": rollout.best_cost.mean(),
                        # what the policy proposes, averaged over particles, edges and iterations
                        **{f"stats/{name}_mean": rollout.actions[..., i].mean() for i, name in enumerate(("w", "c1", "c2"))},
                        "stats/env_steps": counters["env_steps"], "stats/wall_time": counters["wall_time"],
                        "perf/iter_s": elapsed, "perf/steps_per_s": steps_per_iteration / max(elapsed, 1e-9),
                    })
                    bar.set_postfix(best=f"{last_metrics['tour_length/best']:.3f}")
                if config.eval_interval and (iteration % config.eval_interval == 0 or last):
                    model.eval()
                    learned = greedy_validation(model, config, validation_coords, seed=1)
                    improvement = float(100.0 * (classic_length - learned) / classic_length)
                    eval_logger.log(iteration, {
                        "eval/tour_length_learned": learned, "eval/tour_length_classic": classic_length,
                        "eval/improvement_pct": improvement, "stats/wall_time": counters["wall_time"],
                    })
                    if improvement > counters["best_validation_pct"]:
                        # Model selection on the validation instances (never the held-out set
                        # that `pglab evaluate` uses): `pglab evaluate RUN/checkpoints/checkpoint_best.pt`.
                        counters["best_validation_pct"] = improvement
                        save_checkpoint(run_dir / "checkpoints" / "checkpoint_best.pt", checkpoint_state())
                if iteration % config.save_interval == 0 or last:
                    save(iteration)
                bar.update(1)
                if stop.requested:
                    save(iteration)
                    interrupted = True
                    echo(f"interrupted: checkpoint saved at iteration {iteration} in {run_dir}", file=sys.stderr)
                    break
    finally:
        bar.close()
        logger.close()
        eval_logger.close()
    return PSOTSPRunResult(run_dir=run_dir, iterations=iteration, interrupted=interrupted, model=model, last_metrics=last_metrics)
