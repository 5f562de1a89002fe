"""``pglab train pso-tsp``: learn per-particle, per-edge PSO coefficients for the TSP.

One training iteration (CleanRL's phases)::

    instances  B fresh uniform TSP instances; env.reset -> random swarm
    rollout    for t < T: (mu, sigma, V) = model(s_t); a_t ~ N(mu, sigma);
               s_{t+1}, L_t = env.step(a_t)                 (--train_decode sample|greedy)
               r_t per particle: --reward (see shaped_reward)
    advantages compute_gae over [B*P, T] (episode ends at T: terminated, V_T = 0);
               reinforce_raw uses the Monte Carlo returns with a batch-mean baseline
    optimise   pglab.algos.onpolicy.onpolicy_update (--algo reinforce_raw|vpg_gae|ppo);
               samples are (iteration, instance, particle) triples, re-evaluated from the
               stored swarm snapshots
    log / checkpoint / greedy validation against classic PSO

The run itself (run directory, resume, device, threads, seed, metrics.csv/jsonl and
TensorBoard, checkpoints, SIGINT/SIGTERM, summary.json) is :class:`pglab.run.shell.TrainingRun`'s.

Rewards are divided by ``L_ref = 0.7124 sqrt(n)`` (the Beardwood–Halton–Hammersley
estimate of the optimal length in the unit square) so the critic's targets are O(1);
the ``tour_length`` reward is also shifted by the initial swarm's mean length of the same
instance. Per-instance shifts and scales leave the optimal policy unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pglab.agent import (
    Agent,
    NoCritic,
    ObservationError,
    ObservationTypeError,
    ObsSpec,
    check_observation,
    numeric_tensor,
)
from pglab.algos.onpolicy import OnPolicyBatch, OnPolicyHyperparams, onpolicy_update
from pglab.configs.pso_tsp import (
    KIND,
    PSOTSPTrainConfig,
)  # re-exported: `from pglab.algos.pso_tsp import PSOTSPTrainConfig`
from pglab.contracts import Dim
from pglab.envs.pso_tsp import (
    CLASSIC_C1,
    CLASSIC_C2,
    CLASSIC_W,
    PSOTSPEnv,
    PSOTSPEnvConfig,
    SwarmState,
    fixed_coefficients,
    random_instances,
)
from pglab.estimators import compute_gae
from pglab.nets.tsp_pso import (
    HyperparamTSPModel,
    SwarmController,
    gaussian_log_prob_entropy,
    sample_coefficients,
    swarm_features,
    swarm_scalars,
)
from pglab.run.atomic import atomic_write_json
from pglab.run.checkpoint import load_state_dict_checked
from pglab.run.config import config_from_dict
from pglab.run.device import resolve_device
from pglab.run.logger import MetricsLogger
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun

__all__ = [
    "KIND",
    "SPEC",
    "PSOTSPAgent",
    "PSOTSPEnvConfig",
    "PSOTSPRunResult",
    "PSOTSPTrainConfig",
    "agent_from_checkpoint",
    "build_model",
    "train_pso_tsp",
]

BHH_CONSTANT = 0.7124  # E[L*] ~ 0.7124 sqrt(n A) for n uniform cities in area A


# Fields a --resume may change besides the shell's (log_dir, device, threads, save_interval):
# the budget, the logging cadence and the validation cadence. eval_instances stays fixed:
# checkpoint_best.pt is chosen by comparing validations on one fixed instance set.
RESUMABLE_FIELDS = frozenset({"n_iterations", "log_interval", "eval_interval"})

SPEC = TrainerSpec(
    system=KIND,
    config_class=PSOTSPTrainConfig,
    kinds=(KIND,),
    step_key="iteration",
    resumable=RESUMABLE_FIELDS,
    total_steps=lambda c: c.n_iterations,
    budget_field="n_iterations",
    # a stored config without a controller field is an edge-policy run
    stored_defaults={"controller": "edge_policy"},
)


def build_controller(
    config: PSOTSPTrainConfig,
    device: torch.device,
    base: tuple[float, float, float] = (CLASSIC_W, CLASSIC_C1, CLASSIC_C2),
) -> SwarmController:
    """The ``swarm_es`` controller, its hidden layer drawn from the run's seed (its output
    layer is zero: it starts as the constant PSO ``base``)."""
    return SwarmController(base, hidden=config.hidden, generator=make_generator(config.seed * 4 + 3)).to(device)


def build_policy(config: PSOTSPTrainConfig, device: torch.device) -> HyperparamTSPModel | SwarmController:
    """The run's coefficient model: :func:`build_controller` or :func:`build_model`."""
    return build_controller(config, device) if config.controller == "swarm_es" else build_model(config, device)


def build_model(config: PSOTSPTrainConfig, device: torch.device) -> HyperparamTSPModel:
    """The ``edge_policy`` network (:class:`HyperparamTSPModel`)."""
    env_cfg = config.env
    return HyperparamTSPModel(
        config.env.num_cities,
        env_cfg.k,
        emb_dim=config.emb_dim,
        num_heads=config.num_heads,
        node_layers=config.node_layers,
        swarm_layers=config.swarm_layers,
        log_std_init=config.log_std_init,
        min_std=config.min_std,
        max_std=config.max_std,
        mu_scale=config.mu_scale,
        particle_noise_std=config.particle_noise_std,
        noise_scope=config.noise_scope,
    ).to(device)


class PSOTSPAgent(Agent):
    """A trained coefficient policy (``pglab.load_checkpoint`` of a ``pso-tsp`` run).

    The observation is the swarm: a :class:`~pglab.envs.pso_tsp.SwarmState` of ``B``
    instances (``env.state`` of a :class:`~pglab.envs.pso_tsp.PSOTSPEnv`).

    Attributes:
        model: the :class:`HyperparamTSPModel` (in eval mode).
        config: the trainer config it was trained with.
        device: where its tensors live.
        pso_iterations: the episode length ``T`` the progress feature ``t / T`` is measured
            against (default: the training config's; an evaluation at another ``T`` sets it).
    """

    kind = KIND

    def __init__(
        self,
        model: HyperparamTSPModel | SwarmController,
        config: PSOTSPTrainConfig,
        device: torch.device,
        pso_iterations: int | None = None,
    ):
        self.model = model
        self.config = config
        self.device = device
        self.pso_iterations = config.env.pso_iterations if pso_iterations is None else int(pso_iterations)

    @property
    def policy(self) -> HyperparamTSPModel | SwarmController:
        return self.model

    def act(
        self, obs: SwarmState, deterministic: bool = True, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Coefficients ``wc1c2 [B, P, D, 3]``: the Gaussian mean, or a sample drawn with
        ``generator`` (``deterministic=False``).

        ``obs`` is a :class:`~pglab.envs.pso_tsp.SwarmState` whose fields the policy reads
        are checked (:meth:`checked_swarm`): tensors of the swarm's shapes, finite real
        numbers (cast to float32, float64 included), ``neighbours`` city indices
        ``0 .. n - 1`` and ``iteration`` an int >= 0. Anything else raises
        :class:`~pglab.agent.ObservationError` (:class:`~pglab.agent.ObservationTypeError`
        for another object than a SwarmState)."""
        swarm = self.checked_swarm(obs, "act")
        return self.model.act(swarm, self.pso_iterations, deterministic=deterministic, generator=generator)

    def value(self, obs: SwarmState) -> torch.Tensor:
        """The critic's per-particle value ``V(s_t, p)`` ``[B, P]`` (in units of ``L_ref``);
        ``obs`` is checked as for :meth:`act`."""
        if self.config.controller == "swarm_es":
            raise NoCritic(
                f"{self.kind} agent: the swarm_es controller is trained by evolution strategies and has no critic"
            )
        if self.config.algo == "reinforce_raw":
            raise NoCritic(
                f"{self.kind} agent: trained with --algo reinforce_raw, whose value head is never "
                "trained (vpg_gae and ppo train one)"
            )
        assert isinstance(self.model, HyperparamTSPModel)  # every controller but swarm_es
        swarm = self.checked_swarm(obs, "value")
        with torch.no_grad():
            node_emb, edge_emb = self.model.encode_instances(swarm.coords, swarm.neighbours, swarm.edge_dist)
            _, _, values = self.model(
                node_emb,
                edge_emb,
                swarm.position,
                swarm.velocity,
                swarm.pbest,
                swarm.gbest,
                swarm_scalars(swarm, self.pso_iterations),
            )
        return values

    def predict(
        self, obs: SwarmState, deterministic: bool = True, *, generator: torch.Generator | None = None
    ) -> np.ndarray:
        """:meth:`act` for a swarm whose fields are NumPy arrays (or tensors): ``wc1c2`` as a
        NumPy array ``[B, P, D, 3]``. Arrays of strings or objects raise
        :class:`~pglab.agent.ObservationTypeError`."""
        where = "PSOTSPAgent.predict"
        swarm = require_swarm(obs, where)
        fields: dict[str, Any] = {
            name: numeric_tensor(value, where=where, name=name, device=self.device)
            for name, value in vars(swarm).items()
            if isinstance(value, (np.ndarray, torch.Tensor))
        }
        return self.act(dataclasses.replace(swarm, **fields), deterministic, generator=generator).cpu().numpy()

    def checked_swarm(self, obs: Any, method: str) -> SwarmState:
        """``obs`` with the fields the policy reads checked and cast to float32 on the
        agent's device (a field already so is passed as it is: the instance encoding is
        cached on the ``coords`` tensor). ``n`` cities and ``k`` neighbours are the
        network's for the edge policy; ``D = n k`` edges, ``P`` particles, ``B`` instances."""
        where = f"PSOTSPAgent.{method}"
        swarm = require_swarm(obs, where)
        iteration = swarm.iteration
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral) or iteration < 0:
            raise ObservationError(f"{where}: iteration expected an int >= 0, got {iteration!r}")
        if isinstance(self.model, HyperparamTSPModel):
            n, k, dim = self.model.num_cities, self.model.k, self.model.dim
        else:  # the swarm controller reads any instance size
            n, k, dim = "n", "k", "D"

        def real(name: str, *shape: Dim) -> ObsSpec:
            return ObsSpec(("B", *shape), "real", torch.float32, name=name)

        dims: dict[str, int] = {}
        coords = check_observation(swarm.coords, real("coords", n, 2), where=where, device=self.device, dims=dims)
        fields = {"coords": coords}
        specs = [
            ObsSpec(("B", n, k), "keys", high=coords.shape[1], name="neighbours"),
            real("edge_dist", dim),
            real("position", "P", dim),
            real("velocity", "P", dim),
            real("pbest", "P", dim),
            real("gbest", dim),
            real("cost", "P"),
            real("pbest_cost", "P"),
            real("gbest_cost"),
        ]
        for spec in specs:
            fields[spec.name] = check_observation(
                getattr(swarm, spec.name), spec, where=where, device=self.device, dims=dims
            )
        return dataclasses.replace(swarm, **fields)


def require_swarm(obs: Any, where: str) -> SwarmState:
    """``obs`` if it is a :class:`SwarmState`, else :class:`~pglab.agent.ObservationTypeError`."""
    if not isinstance(obs, SwarmState):
        raise ObservationTypeError(
            f"{where}: obs expected a SwarmState (the state of a PSOTSPEnv), got {type(obs).__name__}"
        )
    return obs


def agent_from_checkpoint(checkpoint: dict[str, Any], device: str | torch.device = "auto") -> PSOTSPAgent:
    """Rebuild the agent of a loaded ``pso-tsp`` checkpoint (``pglab.load_checkpoint``).

    Stored configs of older runs load too (``rl_mode`` is read as ``algo``; a config
    without ``controller`` is an ``edge_policy`` run)."""
    device = resolve_device(device) if isinstance(device, str) else device
    config = config_from_dict(PSOTSPTrainConfig, upgrade_stored_config(checkpoint["config"]))
    model = build_policy(config, device)
    load_state_dict_checked(
        model, checkpoint["models"]["model"], name="model", source=checkpoint.get("path", "checkpoint")
    )
    model.eval()
    return PSOTSPAgent(model, config, device)


def upgrade_stored_config(stored: dict[str, Any]) -> dict[str, Any]:
    """A run config stored in a checkpoint, ready for ``config_from_dict``: a config
    written before the ``controller`` field is an ``edge_policy`` run (the only kind there
    was; configs are stored with every field, so its other fields are all there)."""
    return {"controller": "edge_policy", **stored, "resume": None, "log_dir": None}


# -- rollout -------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One episode's samples, time-major for storage: swarm tensors ``[T, B, ...]``."""

    coords: torch.Tensor
    neighbours: torch.Tensor
    edge_dist: torch.Tensor
    position: torch.Tensor  # [T, B, P, D]
    velocity: torch.Tensor  # [T, B, P, D]
    pbest: torch.Tensor  # [T, B, P, D]
    gbest: torch.Tensor  # [T, B, D]
    scalars: torch.Tensor  # [T, B, P, 3]
    actions: torch.Tensor  # [T, B, P, D, 3]
    log_probs: torch.Tensor  # [T, B, P]
    values: torch.Tensor  # [T, B, P]
    rewards: torch.Tensor  # [T, B, P]
    tour_length: torch.Tensor  # [T, B, P]
    best_cost: torch.Tensor  # [B]


def collect_rollout(
    model: HyperparamTSPModel,
    env: PSOTSPEnv,
    coords: torch.Tensor,
    config: PSOTSPTrainConfig,
    action_generator: torch.Generator,
) -> Rollout:
    T = config.env.pso_iterations
    state = env.reset(coords)
    reference = BHH_CONSTANT * math.sqrt(config.env.num_cities)
    initial_mean = state.cost.mean(dim=1, keepdim=True)  # [B, 1]
    store: dict[str, list[torch.Tensor]] = {
        k: []
        for k in (
            "position",
            "velocity",
            "pbest",
            "gbest",
            "scalars",
            "actions",
            "log_probs",
            "values",
            "rewards",
            "tour_length",
        )
    }
    with torch.no_grad():
        node_emb, edge_emb = model.encode_instances(state.coords, state.neighbours, state.edge_dist)
        for _ in range(T):
            scalars = swarm_scalars(state, T)
            mu, sigma, values = model(
                node_emb, edge_emb, state.position, state.velocity, state.pbest, state.gbest, scalars
            )
            actions = sample_coefficients(
                mu, sigma, config.particle_noise_std, action_generator, config.noise_scope, antithetic=config.antithetic
            )
            log_probs, _ = gaussian_log_prob_entropy(
                mu, sigma, actions, config.log_prob_reduction, config.particle_noise_std, config.noise_scope
            )
            for name, tensor in (
                ("position", state.position),
                ("velocity", state.velocity),
                ("pbest", state.pbest),
                ("gbest", state.gbest),
                ("scalars", scalars),
                ("actions", actions),
                ("log_probs", log_probs),
                ("values", values),
            ):
                store[name].append(tensor)
            previous_pbest, previous_best = state.pbest_cost, state.best_cost
            state, _, _ = env.step(actions)
            store["rewards"].append(
                shaped_reward(config.reward, state, previous_pbest, previous_best, initial_mean, reference)
            )
            store["tour_length"].append(state.cost)
    stacked = {name: torch.stack(tensors) for name, tensors in store.items()}
    return Rollout(
        coords=state.coords,
        neighbours=state.neighbours,
        edge_dist=state.edge_dist,
        best_cost=state.best_cost,
        **stacked,
    )


def shaped_reward(
    kind: str,
    state: SwarmState,
    previous_pbest: torch.Tensor,
    previous_best: torch.Tensor,
    initial_mean: torch.Tensor,
    reference: float,
) -> torch.Tensor:
    """Per-particle reward ``[B, P]`` after one PSO step (all divided by ``L_ref``):

    * ``tour_length``: ``(L0_mean - L_t)``, ``-L_t`` shifted per instance;
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
    if hp.algo == "reinforce_raw":
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
        mu, sigma, values = model(
            node_emb[b],
            edge_emb[b],
            rollout.position[t, b],
            rollout.velocity[t, b],
            rollout.pbest[t, b],
            rollout.gbest[t, b],
            rollout.scalars[t, b],
        )
        log_probs, entropy = gaussian_log_prob_entropy(
            mu, sigma, rollout.actions[t, b], config.log_prob_reduction, config.particle_noise_std, config.noise_scope
        )
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


def greedy_validation(
    model: HyperparamTSPModel, config: PSOTSPTrainConfig, coords: torch.Tensor, seed: int
) -> torch.Tensor:
    env = PSOTSPEnv(config.env, coords.device, make_generator(seed, coords.device), decode="greedy")
    return run_swarm(env, coords, lambda s: model.act(s, config.env.pso_iterations, deterministic=True)).mean()


def classic_validation(config: PSOTSPTrainConfig, coords: torch.Tensor, seed: int) -> torch.Tensor:
    env = PSOTSPEnv(config.env, coords.device, make_generator(seed, coords.device), decode="greedy")
    return run_swarm(env, coords, lambda s: fixed_coefficients(tuple(s.position.shape), device=coords.device)).mean()


# -- constant coefficients: the tuned baseline and the ES controller ----------------------------------
def constant_swarm_lengths(
    env_config: PSOTSPEnvConfig,
    coords: torch.Tensor,
    coefficients: torch.Tensor,
    seed: int,
    max_batch_cells: int = 2**24,
) -> torch.Tensor:
    """Best tour lengths ``[K, I]`` of K constant-coefficient swarms ``coefficients [K, 3]``
    (w, c1, c2) on instances ``coords [I, n, 2]``, greedy decoding.

    Common random numbers: every candidate gets the same initial swarm and the same
    ``r1, r2`` (``PSOTSPEnv(replicas=K)`` seeded with ``seed``), so differences between
    candidates are differences of their coefficients, not of their luck. The candidates
    run in chunks of at most ``max_batch_cells`` decoding-logit cells (B P n^2) at once;
    a chunk's draws are the same as the whole batch's (the env draws one block).
    """
    K, num_instances = coefficients.shape[0], coords.shape[0]
    n, P = env_config.num_cities, env_config.n_particles
    chunk = max(1, min(K, max_batch_cells // max(1, num_instances * P * n * n)))
    out = []
    for start in range(0, K, chunk):
        block = coefficients[start : start + chunk].to(coords.device, torch.float32)  # [R, 3]
        R = block.shape[0]
        env = PSOTSPEnv(env_config, coords.device, make_generator(seed, coords.device), decode="greedy", replicas=R)
        wc1c2 = block.repeat_interleave(num_instances, dim=0)[:, None, None, :]  # [R*I, 1, 1, 3], candidate-major
        best = run_swarm(env, coords.repeat(R, 1, 1), constant_policy(wc1c2))
        out.append(best.reshape(R, num_instances))
    return torch.cat(out)


def constant_policy(wc1c2: torch.Tensor) -> Callable[[SwarmState], torch.Tensor]:
    """The coefficient policy that applies ``wc1c2`` (``[3]``, or any shape that broadcasts
    to ``[B, P, D, 3]``) at every PSO step."""
    return lambda state: wc1c2.expand(*state.position.shape, 3)


def tune_constant_coefficients(
    env_config: PSOTSPEnvConfig,
    *,
    candidates: int,
    instances: int,
    seed: int,
    device: torch.device | str = "cpu",
    finalists: int = 5,
) -> dict[str, Any]:
    """Random search for the best constant ``(w, c1, c2)`` on the training distribution.

    Stage 1: ``candidates`` coefficient triples (classic PSO first, then ``w ~ U(w_min,
    w_max)``, ``c1, c2 ~ U(0, 3.5)``) on ``instances`` uniform instances, scored by the mean
    over instances of ``L / L_classic`` (per-instance ratios: every instance counts the
    same, and the instance's difficulty cancels). Stage 2: the ``finalists`` best (classic
    always among them) re-scored on ``2 * instances`` fresh instances, which removes
    stage 1's winner's curse; the best there wins. Everything from ``seed`` (instances
    and swarm noise); common random numbers across candidates.

    Returns ``{"w", "c1", "c2", "score", "classic_score", "stage1": [...], "stage2": [...]}``
    (scores: mean ratio to classic, < 1 is better).
    """
    device = torch.device(device)
    generator = make_generator(seed, device)
    draws = torch.rand((candidates - 1, 3), generator=generator, device=device)
    low = torch.tensor([env_config.w_min, 0.0, 0.0], device=device)
    high = torch.tensor([env_config.w_max, 3.5, 3.5], device=device)
    classic = torch.tensor([[CLASSIC_W, CLASSIC_C1, CLASSIC_C2]], device=device)
    pool = torch.cat([classic, low + (high - low) * draws])  # [K, 3]

    def score(coefficients: torch.Tensor, count: int) -> torch.Tensor:
        coords = random_instances(count, env_config.num_cities, generator, device)
        lengths = constant_swarm_lengths(
            env_config,
            coords,
            torch.cat([classic, coefficients]),
            seed=int(torch.randint(2**31, (1,), generator=generator, device=device)),
        )
        return (lengths[1:] / lengths[:1]).mean(dim=1)  # [K] mean ratio to classic

    stage1 = score(pool, instances)
    order = stage1.argsort()
    finalists_idx = order[:finalists]
    if not bool((finalists_idx == 0).any()):
        finalists_idx = torch.cat([finalists_idx[: finalists - 1], order.new_zeros(1)])
    stage2 = score(pool[finalists_idx], 2 * instances)
    winner = int(finalists_idx[stage2.argmin()])
    w, c1, c2 = (float(x) for x in pool[winner])
    as_rows = lambda idx, values: [  # noqa: E731
        {"w": float(pool[i, 0]), "c1": float(pool[i, 1]), "c2": float(pool[i, 2]), "score": float(v)}
        for i, v in zip(idx.tolist(), values.tolist(), strict=False)
    ]
    return {
        "w": w,
        "c1": c1,
        "c2": c2,
        "score": float(stage2.min()),
        "classic_score": float(stage2[(finalists_idx == 0).nonzero()[0, 0]]),
        "num_cities": env_config.num_cities,
        "n_particles": env_config.n_particles,
        "pso_iterations": env_config.pso_iterations,
        "knn": env_config.knn,
        "seed": seed,
        "candidates": candidates,
        "instances": instances,
        "stage1": as_rows(torch.arange(len(pool)), stage1),
        "stage2": as_rows(finalists_idx, stage2),
    }


def controller_swarm_lengths(
    controller: SwarmController, env: PSOTSPEnv, coords: torch.Tensor, flat: torch.Tensor
) -> torch.Tensor:
    """Best tour lengths ``[K, I]`` of K controllers (parameter vectors ``flat [K, M]``) on
    instances ``coords [I, n, 2]``: one batch of K * I swarms, candidate-major, in ``env``
    (greedy decoding, ``replicas=K``: common random numbers)."""
    K, num_instances = flat.shape[0], coords.shape[0]
    params = controller.population(flat)
    T = env.config.pso_iterations
    state = env.reset(coords.repeat(K, 1, 1))
    with torch.no_grad():
        for _ in range(T):
            features = swarm_features(state, T)  # [K*I, P, F]
            coefficients = controller(features.reshape(K, num_instances, *features.shape[1:]), params)  # [K, I, P, 3]
            wc1c2 = coefficients.reshape(K * num_instances, -1, 1, 3).expand(*state.position.shape, 3)
            state, _, _ = env.step(wc1c2)
    return state.best_cost.reshape(K, num_instances)


def centered_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks of ``values [N]`` mapped to ``[-0.5, 0.5]`` (fitness shaping of Salimans et
    al. 2017: the ES step then ignores the scale and outliers of the fitness)."""
    ranks = torch.empty_like(values)
    ranks[values.argsort()] = torch.arange(len(values), dtype=values.dtype, device=values.device)
    return ranks / max(1, len(values) - 1) - 0.5


def es_gradient(
    controller: SwarmController,
    env: PSOTSPEnv,
    coords: torch.Tensor,
    pairs: int,
    sigma: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One antithetic ES estimate of the ascent direction of the deterministic controller's
    fitness, ``F(theta) = -mean_i L_theta(i) / L_base(i)`` (best tour of the greedy swarm
    relative to the constant PSO the controller starts from, on the same instance):

        eps_j ~ N(0, I),  g = sum_j (u(theta + sigma eps_j) - u(theta - sigma eps_j)) eps_j / (pairs sigma)

    with ``u`` the centred ranks of the 2 * pairs fitnesses. All candidates, the centre
    ``theta`` and the base constant PSO run in one batch with common random numbers.
    Returns ``(g [M], metrics)``.
    """
    theta = controller.flat_parameters()
    eps = torch.randn((pairs, theta.numel()), generator=generator, device=theta.device)
    base = theta.clone()
    base[-(controller.w2.numel() + controller.b2.numel()) :] = 0.0  # output layer 0: the base constants
    flat = torch.cat([theta[None], base[None], theta + sigma * eps, theta - sigma * eps])
    lengths = controller_swarm_lengths(controller, env, coords, flat)  # [2 + 2 pairs, I]
    fitness = -(lengths / lengths[1:2]).mean(dim=1)
    ranks = centered_ranks(fitness[2:])
    gradient = ((ranks[:pairs] - ranks[pairs:])[:, None] * eps).sum(0) / (pairs * sigma)
    # improvement over the base constant PSO in % (> 0: shorter tours than the base)
    return gradient, {
        "es/centre_vs_base_pct": float(100.0 * (1.0 + fitness[0])),
        "es/population_vs_base_pct": float(100.0 * (1.0 + fitness[2:].mean())),
        "tour_length/best": float(lengths[0].mean()),
        "tour_length/base": float(lengths[1].mean()),
    }


# -- the training loop ------------------------------------------------------------------------------

# Seeds of the run's streams besides the four training generators (4 * seed + 0..3): the
# validation instances (VALIDATION_SEED_OFFSET + seed), the swarm noise of every validation
# (VALIDATION_SWARM_SEED), the tuning stage of a swarm_es run (TUNE_SEED_OFFSET + seed);
# `pglab evaluate` draws its held-out set from 20_261_123.
VALIDATION_SEED_OFFSET = 10_000
VALIDATION_SWARM_SEED = 1
TUNE_SEED_OFFSET = 1_000_003
BEST_CHECKPOINT = "checkpoint_best.pt"


@dataclass
class PSOTSPRunResult:
    run_dir: Path
    iterations: int
    interrupted: bool
    exit_code: int
    """0, or :data:`pglab.errors.EXIT_INTERRUPTED` (130) after SIGINT/SIGTERM"""
    model: HyperparamTSPModel | SwarmController
    last_metrics: dict[str, float]


def training_generators(config: PSOTSPTrainConfig, device: torch.device) -> dict[str, torch.Generator]:
    """The run's four streams: instances, env noise (decoding, r1, r2), policy sampling (the
    ES perturbations for swarm_es), minibatch order."""
    names = ("instances", "env", "action", "update")
    return {name: make_generator(config.seed * 4 + i, device) for i, name in enumerate(names)}


def validation_instances(config: PSOTSPTrainConfig, device: torch.device) -> torch.Tensor:
    """The fixed validation instances ``[eval_instances, n, 2]`` of a run (model selection
    for ``checkpoint_best.pt``; never the held-out set of ``pglab evaluate``)."""
    generator = make_generator(VALIDATION_SEED_OFFSET + config.seed, device)
    return random_instances(config.eval_instances, config.env.num_cities, generator, device)


class EdgePolicyTraining:
    """``--controller edge_policy``: the per-edge Gaussian policy trained by ``--algo``.

    One :meth:`step` is the module docstring's iteration (instances, rollout, advantages,
    optimise); :meth:`validate` runs the greedy policy (its mean) against classic PSO on
    the validation instances.
    """

    def __init__(self, config: PSOTSPTrainConfig, device: torch.device):
        self.config = config
        self.model = build_model(config, device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, eps=1e-5)
        self.generators = training_generators(config, device)
        self.env = PSOTSPEnv(
            config.env, device, self.generators["env"], decode=config.train_decode, paired=config.antithetic
        )
        self.validation_coords = validation_instances(config, device)
        self.classic_length: torch.Tensor | None = None  # classic PSO on the validation instances (first validation)
        self.desc = f"train pso-tsp --algo {config.algo}"
        # env_steps: particle updates, each one decoded tour
        self.env_steps_per_iteration = (
            config.instances_per_iteration * config.env.n_particles * config.env.pso_iterations
        )

    def step(self) -> dict[str, torch.Tensor]:
        """One training iteration; returns the row's metrics (tensors)."""
        config, device = self.config, self.env.device
        # -- instances -----------------------------------------------------------------------
        count = config.instances_per_iteration // 2 if config.antithetic else config.instances_per_iteration
        coords = random_instances(count, config.env.num_cities, self.generators["instances"], device)
        if config.antithetic:  # each instance twice: a mirrored pair
            coords = torch.cat([coords, coords])
        # -- rollout -------------------------------------------------------------------------
        self.model.eval()
        rollout = collect_rollout(self.model, self.env, coords, config, self.generators["action"])
        # -- advantages ----------------------------------------------------------------------
        advantages, returns = advantages_and_returns(rollout, config.update)
        batch = OnPolicyBatch(
            old_log_probs=rollout.log_probs.reshape(-1),
            advantages=advantages,
            returns=returns,
            old_values=rollout.values.reshape(-1),
        )
        # -- optimise ------------------------------------------------------------------------
        self.model.train()
        metrics = onpolicy_update(
            make_evaluate(self.model, rollout, config),
            batch,
            self.model.parameters(),
            self.optimizer,
            config.update,
            generator=self.generators["update"],
        )
        return {**metrics, **rollout_metrics(rollout)}

    def validate(self) -> tuple[dict[str, Any], float]:
        """``(eval.csv row, improvement over classic PSO in %)``: greedy swarms, same noise."""
        if self.classic_length is None:
            self.classic_length = classic_validation(self.config, self.validation_coords, seed=VALIDATION_SWARM_SEED)
        self.model.eval()
        learned = greedy_validation(self.model, self.config, self.validation_coords, seed=VALIDATION_SWARM_SEED)
        improvement = float(100.0 * (self.classic_length - learned) / self.classic_length)
        row = {
            "eval/tour_length_learned": learned,
            "eval/tour_length_classic": self.classic_length,
            "eval/improvement_pct": improvement,
        }
        return row, improvement

    def postfix(self, row: dict[str, float]) -> dict[str, str]:
        return {"best": f"{row['tour_length/best']:.3f}"}

    def summary(self, last_metrics: dict[str, float], last_improvement: float | None) -> dict[str, Any]:
        summary: dict[str, Any] = {
            key: last_metrics[key] for key in ("tour_length/mean", "tour_length/best") if key in last_metrics
        }
        if last_improvement is not None:
            summary["eval/improvement_pct"] = last_improvement
        return summary


def rollout_metrics(rollout: Rollout) -> dict[str, torch.Tensor]:
    """The episode statistics of one edge-policy rollout (tensors, no host sync)."""
    episode_return = rollout.rewards.sum(0)  # [B, P], undiscounted
    return {
        "return/mean": episode_return.mean(),
        "return/std": episode_return.std(),
        "tour_length/mean": rollout.tour_length.mean(),
        "tour_length/best": rollout.best_cost.mean(),
        # what the policy proposes, averaged over particles, edges and iterations
        **{f"policy/{name}_mean": rollout.actions[..., i].mean() for i, name in enumerate(("w", "c1", "c2"))},
    }


def set_flat_gradient(parameters, gradient: torch.Tensor) -> None:
    """Give each parameter its slice of a flat gradient (the :meth:`SwarmController.flat_parameters` order)."""
    start = 0
    for p in parameters:
        p.grad = gradient[start : start + p.numel()].reshape(p.shape).clone()
        start += p.numel()


class SwarmESTraining:
    """``--controller swarm_es``: tune the constant PSO, then evolution-strategies steps.

    Stage 0 (a fresh run only): :func:`tune_constant_coefficients` on training instances
    (``tuned.json`` in the run directory); the controller starts as that constant PSO. A
    resumed run gets its tuned constant back with the controller's weights (the ``base``
    buffer). Then per :meth:`step`: ``instances_per_iteration`` fresh instances, one
    :func:`es_gradient` estimate (all candidates greedy, common random numbers), one Adam
    step (lr ``es_lr``) along it. :meth:`validate`: the controller (deterministic, greedy)
    vs classic and vs the tuned constant on the validation instances; model selection is
    against the tuned constant.
    """

    def __init__(self, config: PSOTSPTrainConfig, device: torch.device, base: tuple[float, float, float]):
        self.config = config
        self.model = build_controller(config, device, base)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.es_lr)
        self.generators = training_generators(config, device)
        candidates = 2 + 2 * config.es_pairs  # the centre, the base constant and the population
        self.env = PSOTSPEnv(config.env, device, self.generators["env"], decode="greedy", replicas=candidates)
        self.validation_coords = validation_instances(config, device)
        # classic and tuned-constant PSO on the validation instances [2, I] (first validation)
        self.baseline_lengths: torch.Tensor | None = None
        self.desc = "train pso-tsp --controller swarm_es"
        # env_steps: particle updates of every candidate swarm, each one decoded tour
        self.env_steps_per_iteration = (
            candidates * config.instances_per_iteration * config.env.n_particles * config.env.pso_iterations
        )

    def step(self) -> dict[str, Any]:
        """One ES iteration; returns the row's metrics."""
        config, device = self.config, self.env.device
        coords = random_instances(
            config.instances_per_iteration, config.env.num_cities, self.generators["instances"], device
        )
        gradient, metrics = es_gradient(
            self.model, self.env, coords, config.es_pairs, config.es_sigma, self.generators["action"]
        )
        self.optimizer.zero_grad()
        set_flat_gradient(self.model.parameters(), -gradient)  # Adam minimises: ascend the fitness
        self.optimizer.step()
        return {**metrics, "es/gradient_norm": gradient.norm()}

    def validate(self) -> tuple[dict[str, Any], float]:
        """``(eval.csv row, improvement over the tuned constant in %)``: greedy swarms, same noise."""
        device = self.validation_coords.device
        if self.baseline_lengths is None:
            constants = torch.stack([torch.tensor([CLASSIC_W, CLASSIC_C1, CLASSIC_C2], device=device), self.model.base])
            self.baseline_lengths = constant_swarm_lengths(
                self.config.env, self.validation_coords, constants, seed=VALIDATION_SWARM_SEED
            )
        classic_lengths, base_lengths = self.baseline_lengths
        env = PSOTSPEnv(self.config.env, device, make_generator(VALIDATION_SWARM_SEED, device), decode="greedy")
        learned = controller_swarm_lengths(self.model, env, self.validation_coords, self.model.flat_parameters()[None])[
            0
        ]
        improvement = float(100.0 * (1.0 - learned / base_lengths).mean())
        row = {
            "eval/tour_length_learned": learned.mean(),
            "eval/tour_length_classic": classic_lengths.mean(),
            "eval/tour_length_tuned": base_lengths.mean(),
            "eval/improvement_pct": float(100.0 * (1.0 - learned / classic_lengths).mean()),
            "eval/improvement_vs_tuned_pct": improvement,
        }
        return row, improvement

    def postfix(self, row: dict[str, float]) -> dict[str, str]:
        return {"vs_base": f"{row['es/centre_vs_base_pct']:+.2f}%"}

    def summary(self, last_metrics: dict[str, float], last_improvement: float | None) -> dict[str, Any]:
        summary: dict[str, Any] = {"tuned": self.model.base.tolist()}
        if last_improvement is not None:
            summary["eval/improvement_vs_tuned_pct"] = last_improvement
        return summary


def tune_base(run: TrainingRun, config: PSOTSPTrainConfig) -> tuple[float, float, float]:
    """Stage 0 of a fresh swarm_es run: the tuned constant ``(w, c1, c2)`` (also written
    to ``tuned.json`` in the run directory)."""
    tick = time.perf_counter()
    tuned = tune_constant_coefficients(
        config.env,
        candidates=config.tune_candidates,
        instances=config.tune_instances,
        seed=TUNE_SEED_OFFSET + config.seed,
        device=run.device,
    )
    tuned["seconds"] = time.perf_counter() - tick
    atomic_write_json(run.run_dir / "tuned.json", tuned)
    run.echo(
        f"tuned constant PSO: w={tuned['w']:.4f} c1={tuned['c1']:.4f} c2={tuned['c2']:.4f} "
        f"({100 * (1 - tuned['score']):+.2f} % vs classic on {2 * config.tune_instances} tuning instances)"
    )
    return float(tuned["w"]), float(tuned["c1"]), float(tuned["c2"])


def build_training(run: TrainingRun) -> EdgePolicyTraining | SwarmESTraining:
    """The run's trainer for its ``--controller``, built (a resumed swarm_es run skips the
    tuning: ``track`` restores its tuned constant with the weights)."""
    config, device = run.config, run.device
    if config.controller == "edge_policy":
        return EdgePolicyTraining(config, device)
    base = tune_base(run, config) if run.checkpoint is None else (CLASSIC_W, CLASSIC_C1, CLASSIC_C2)
    return SwarmESTraining(config, device, base)


def train_pso_tsp(
    config: PSOTSPTrainConfig, *, given: frozenset[str] | None = None, echo=print, stop_after: int | None = None
) -> PSOTSPRunResult:
    """Train (or resume) a Deep-PSO run; see the module docstring.

    Args:
        config: the run's config (``resume`` set to continue a run).
        given: the fields the user set (from :func:`pglab.run.config.parse_flags`); ``None``
            (the Python API) counts every field that differs from its default.
        echo: where messages go.
        stop_after: stop as if SIGTERM arrived after this many iterations (tests).
    """
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        training = build_training(run)
        run.track(
            models={"model": training.model},
            optimizers={"adam": training.optimizer},
            rngs=training.generators,
            info={"env_steps_per_iteration": training.env_steps_per_iteration},
        )
        # The shell's counters plus ours: env_steps (particle updates, each a decoded tour) and,
        # from the first validation on, best_validation_pct (keep_if_best).
        run.counters.setdefault("env_steps", 0)
        iteration, last_metrics, last_improvement = training_loop(run, training)
        run.finish(training.summary(last_metrics, last_improvement))
    return PSOTSPRunResult(
        run_dir=run.run_dir,
        iterations=iteration,
        interrupted=run.interrupted,
        exit_code=run.exit_code,
        model=training.model,
        last_metrics=last_metrics,
    )


def training_loop(
    run: TrainingRun, training: EdgePolicyTraining | SwarmESTraining
) -> tuple[int, dict[str, float], float | None]:
    """The iterations of either controller: step, log, validate (``eval.csv``, a second log
    beside the shell's metrics). Returns ``(last iteration, last metric row, last
    validation improvement or None)``."""
    config = run.config
    last_metrics: dict[str, float] = {}
    last_improvement: float | None = None
    iteration = run.start
    with MetricsLogger(
        run.run_dir,
        csv_name="eval.csv",
        jsonl_name="eval.jsonl",
        tensorboard_dir=None,
        resume_step=run.start if run.resumed else None,
    ) as eval_logger:
        for iteration in run.steps(config.n_iterations, desc=training.desc):
            metrics = training.step()
            run.counters["env_steps"] += training.env_steps_per_iteration
            last = iteration == config.n_iterations
            if iteration % config.log_interval == 0 or last:
                last_metrics = run.log(iteration, {**metrics, "env_steps": run.counters["env_steps"]})
                run.set_postfix(**training.postfix(last_metrics))
            if config.eval_interval and (iteration % config.eval_interval == 0 or last):
                row, last_improvement = training.validate()
                eval_logger.log(iteration, row)
                keep_if_best(run, iteration, last_improvement)
    return iteration, last_metrics, last_improvement


def keep_if_best(run: TrainingRun, iteration: int, improvement: float) -> None:
    """Model selection on the validation instances (never the held-out set that ``pglab
    evaluate`` uses): a new best improvement writes ``checkpoints/checkpoint_best.pt``,
    the shell's checkpoint of the run as it is now (``pglab evaluate RUN/checkpoints/checkpoint_best.pt``).
    The counter ``best_validation_pct`` holds the best improvement so far (absent before
    the first validation)."""
    best = run.counters.get("best_validation_pct")
    if best is not None and improvement <= best:
        return
    run.counters["best_validation_pct"] = improvement
    run.save_copy(BEST_CHECKPOINT, iteration)
