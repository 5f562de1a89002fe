"""``PSOTSPEnv``: particle-swarm optimisation of TSP tours as a batched RL environment.

One episode runs ``pso_iterations`` PSO steps on ``B`` TSP instances at once, each with
a swarm of ``P`` particles. A particle's position is an *edge-score vector*: one real
score per candidate edge of the instance's k-nearest-neighbour graph (``dim = n * k``
directed edges ``i -> neighbours[i, m]``; ``k = n - 1`` gives the full graph).

Decoding (batched over instances and particles; the only Python loop is over the
``n - 1`` construction steps). From city 0, the next city is drawn among the unvisited
ones with logits::

    logit(i -> j) = x_ij / temperature - distance_prior * d_ij / mean_kNN_edge   (kNN edge)
    logit(i -> j) = -1e4 - distance_prior * d_ij / mean_kNN_edge                 (other edge)

so an edge outside the kNN graph is taken only when every kNN neighbour of the current
city is visited (then the nearest unvisited city is preferred). ``decode="sample"``
samples (Gumbel-max with the env's generator); ``decode="greedy"`` takes the argmax.
Cost: ``L = sum_t d[tour_t, tour_{t+1 mod n}]``; reward ``r = -L`` per particle.

PSO update with per-particle, per-dimension coefficients ``wc1c2 [B, P, D, 3]`` (the
policy's action; clamped to ``[w_min, w_max]``, ``[0, c_max]``) and ``r1, r2 ~ U(0,1)``::

    v <- w * v + c1 * r1 * (pbest - x) + c2 * r2 * (gbest - x),   v clamped to +-v_max
    x <- x + v
    pbest <- x where L(x) < L(pbest);   gbest <- pbest of the particle with least L

The swarm's answer for an instance is the shortest tour decoded in the episode
(``best_tour``, ``best_cost``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from pglab.configs.pso_tsp import PSOTSPEnvConfig  # re-exported: lives torch-free for `--help`
from pglab.contracts import check_tensor
from pglab.validation import check_choice

FLOATS = (torch.float32, torch.float64)
NON_EDGE_PENALTY = 1e4
# The classic constriction coefficients of Clerc & Kennedy (2002).
CLASSIC_W, CLASSIC_C1, CLASSIC_C2 = 0.7298, 1.49618, 1.49618


@dataclass
class SwarmState:
    """The swarm at iteration ``t`` (every tensor batched over ``B`` instances).

    Instance (constant over the episode): ``coords [B, n, 2]``, ``dist [B, n, n]``,
    ``neighbours [B, n, k]`` (long), ``edge_dist [B, D]`` (distance of each candidate
    edge, divided by the instance's mean candidate-edge length).
    Swarm: ``position, velocity, pbest [B, P, D]``; ``gbest [B, D]``; ``cost,
    pbest_cost [B, P]`` (tour lengths); ``gbest_cost, best_cost [B]``;
    ``pbest_tour [B, P, n]`` and ``best_tour [B, n]`` (long: the tours those costs were
    measured on, so a best reproduces even when decoding samples); ``iteration`` (steps
    done so far).
    """

    coords: torch.Tensor
    dist: torch.Tensor
    neighbours: torch.Tensor
    edge_dist: torch.Tensor
    position: torch.Tensor
    velocity: torch.Tensor
    pbest: torch.Tensor
    gbest: torch.Tensor
    cost: torch.Tensor
    pbest_cost: torch.Tensor
    gbest_cost: torch.Tensor
    best_cost: torch.Tensor
    best_tour: torch.Tensor
    iteration: int
    pbest_tour: torch.Tensor | None = None

    def snapshot(self) -> SwarmState:
        """A detached copy of the swarm tensors (instance tensors are shared: constant)."""
        swarm = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in (
            "position",
            "velocity",
            "pbest",
            "gbest",
            "cost",
            "pbest_cost",
            "gbest_cost",
            "best_cost",
            "best_tour",
            "pbest_tour",
        ):
            if swarm[name] is not None:
                swarm[name] = swarm[name].detach().clone()
        return SwarmState(**swarm)


def random_instances(
    num_instances: int, num_cities: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Uniform cities in the unit square: float32 ``[B, n, 2]``."""
    return torch.rand((num_instances, num_cities, 2), generator=generator, device=device)


def knn_graph(coords: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dist [B, n, n], neighbours [B, n, k], edge_length [B, n, k])`` of the k nearest
    other cities of each city (ascending distance)."""
    dist = torch.cdist(coords, coords)
    n = coords.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=coords.device)
    edge_length, neighbours = dist.masked_fill(eye, float("inf")).topk(k, dim=-1, largest=False)
    return dist, neighbours, edge_length


def tour_cost(dist: torch.Tensor, tours: torch.Tensor) -> torch.Tensor:
    """``L = sum_t d[tour_t, tour_{t+1 mod n}]`` for ``dist [B, n, n]``, ``tours [B, P, n]`` -> ``[B, P]``."""
    B, P, n = tours.shape
    nxt = tours.roll(-1, dims=-1)
    flat = dist.reshape(B, 1, n * n).expand(B, P, n * n)
    return flat.gather(2, tours * n + nxt).sum(-1)


def two_opt_batch(
    dist: torch.Tensor, tours: torch.Tensor, *, max_iterations: int | None = None, tol: float = 1e-9
) -> torch.Tensor:
    """Best-improvement 2-opt on a batch of tours at once: ``dist [B, n, n]``, ``tours
    [B, n]`` (long) -> improved tours ``[B, n]`` (each a local optimum of 2-opt, city 0
    kept first).

    Move (i, j), 0 <= i < j - 1: replace edges (t_i, t_{i+1}), (t_j, t_{j+1 mod n}) by
    (t_i, t_j), (t_{i+1}, t_{j+1}), i.e. reverse ``t[i+1..j]``, with
    ``delta = d(a, c) + d(b, d) - d(a, b) - d(c, d)``. Every round computes all moves'
    deltas of all B tours in one tensor ``[B, M]`` and applies each tour's best move if it
    shortens that tour by more than ``tol``; the loop ends when no tour improves (the same
    moves, in the same order, as :func:`pglab.envs.tsp_solvers.two_opt` per tour).
    """
    B, n = tours.shape
    if n < 4:
        return tours
    i_idx, j_idx = torch.triu_indices(n, n, offset=2, device=tours.device)
    keep = ~((i_idx == 0) & (j_idx == n - 1))  # these two edges are adjacent
    i_idx, j_idx = i_idx[keep], j_idx[keep]
    rows = torch.arange(B, device=tours.device)[:, None]
    positions = torch.arange(n, device=tours.device)
    dist = dist.to(torch.float64)
    tours = tours.clone()
    for _ in range(max_iterations if max_iterations is not None else n * n):
        a, b = tours[:, i_idx], tours[:, i_idx + 1]
        c, d = tours[:, j_idx], tours[:, (j_idx + 1) % n]
        delta = dist[rows, a, c] + dist[rows, b, d] - dist[rows, a, b] - dist[rows, c, d]  # [B, M]
        best_delta, best = delta.min(dim=1)
        improve = best_delta < -tol
        if not bool(improve.any()):
            break
        i, j = i_idx[best][:, None], j_idx[best][:, None]  # [B, 1]
        inside = (positions > i) & (positions <= j) & improve[:, None]
        index = torch.where(inside, i + 1 + j - positions, positions)  # reverse t[i+1..j]
        tours = tours.gather(1, index)
    return tours


class PSOTSPEnv:
    """Batched PSO-on-TSP episodes; see the module docstring for the equations.

    Usage::

        env = PSOTSPEnv(config, device, generator)
        state = env.reset(coords)                      # coords [B, n, 2]
        while not done:
            state, reward, done = env.step(wc1c2)      # wc1c2 [B, P, D, 3]; reward [B, P]
    """

    def __init__(
        self,
        config: PSOTSPEnvConfig,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        *,
        decode: str = "sample",
        paired: bool = False,
        replicas: int = 1,
    ):
        check_choice("decode", decode, ("sample", "greedy"))
        if paired and replicas != 1:
            raise ValueError("PSOTSPEnv: give paired=True (= replicas=2) or replicas, not both")
        self.replicas = 2 if paired else int(replicas)
        if self.replicas < 1:
            raise ValueError(f"PSOTSPEnv: replicas must be >= 1, got {replicas}")
        self.paired = paired
        self.config = config
        self.device = torch.device(device)
        self.generator = generator if generator is not None else torch.Generator(device=self.device)
        self.decode_mode = decode
        self.state: SwarmState | None = None

    def _random(self, shape: tuple[int, ...], normal: bool = False) -> torch.Tensor:
        """``torch.rand`` / ``torch.randn`` of ``shape`` (batch first) from the env's generator.

        ``paired`` / ``replicas = R``: common random numbers for a batch of R identical
        blocks (instance b and b + B/R are the same instance): every block reuses the
        first block's draws, so their swarms differ only through their coefficients
        (``paired`` is R = 2: mirrored training pairs; the ES trainer puts its population
        in the blocks).
        """
        draw = torch.randn if normal else torch.rand
        if self.replicas == 1:
            return draw(shape, generator=self.generator, device=self.device)
        if shape[0] % self.replicas:
            even = " (an even size)" if self.replicas == 2 else ""
            raise ValueError(
                f"PSOTSPEnv(replicas={self.replicas}): the batch must be a multiple of {self.replicas}{even}, "
                f"got {shape[0]}"
            )
        block = draw((shape[0] // self.replicas, *shape[1:]), generator=self.generator, device=self.device)
        return block.repeat(self.replicas, *([1] * (len(shape) - 1)))

    # -- decoding -----------------------------------------------------------------------
    def edge_logits(self, position: torch.Tensor, state: SwarmState) -> torch.Tensor:
        """Full logit matrix ``[B, P, n, n]`` of the decoding distribution."""
        cfg = self.config
        B, P, _ = position.shape
        n, k = cfg.num_cities, cfg.k
        mean_edge = state.dist.gather(2, state.neighbours).mean(dim=(1, 2)).clamp_min(1e-12)  # [B]
        prior = cfg.distance_prior * state.dist / mean_edge[:, None, None]  # [B, n, n]
        logits = (-NON_EDGE_PENALTY - prior).unsqueeze(1).expand(B, P, n, n).clone()
        edge_prior = prior.gather(2, state.neighbours).reshape(B, 1, n * k)
        scores = position / cfg.temperature - edge_prior  # [B, P, D]
        index = state.neighbours.reshape(B, 1, n, k).expand(B, P, n, k)
        logits.scatter_(3, index, scores.reshape(B, P, n, k))
        return logits

    def decode(
        self, position: torch.Tensor, state: SwarmState, *, greedy: bool | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tours ``[B, P, n]`` (permutations starting at city 0) and their lengths ``[B, P]``."""
        greedy = self.decode_mode == "greedy" if greedy is None else greedy
        logits = self.edge_logits(position, state)
        B, P, n, _ = logits.shape
        current = torch.zeros((B, P), dtype=torch.long, device=position.device)
        visited = torch.zeros((B, P, n), dtype=torch.bool, device=position.device)
        visited[..., 0] = True
        tours = torch.zeros((B, P, n), dtype=torch.long, device=position.device)
        for step in range(1, n):
            row = logits.gather(2, current[..., None, None].expand(B, P, 1, n)).squeeze(2)
            row = row.masked_fill(visited, float("-inf"))
            if not greedy:
                # Gumbel-max: argmax(logit + G), G ~ Gumbel(0, 1), samples softmax(logit).
                uniform = self._random(tuple(row.shape)).to(row.dtype)
                row = row - torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))
            current = row.argmax(-1)
            tours[..., step] = current
            visited.scatter_(2, current.unsqueeze(-1), True)
        return tours, tour_cost(state.dist, tours)

    # -- episode ------------------------------------------------------------------------
    def reset(self, coords: torch.Tensor) -> SwarmState:
        """Start an episode on instances ``coords [B, n, 2]``: random positions, zero
        velocities, pbest = the initial positions (decoded once)."""
        cfg = self.config
        check_tensor("coords", coords, (None, cfg.num_cities, 2), FLOATS, where="PSOTSPEnv.reset")
        coords = coords.to(self.device, torch.float32)
        B = coords.shape[0]
        dist, neighbours, edge_length = knn_graph(coords, cfg.k)
        edge_dist = (edge_length / edge_length.mean(dim=(1, 2), keepdim=True).clamp_min(1e-12)).reshape(B, cfg.dim)
        position = cfg.init_std * self._random((B, cfg.n_particles, cfg.dim), normal=True)
        zeros = torch.zeros(B, dtype=torch.float32, device=self.device)
        state = SwarmState(
            coords=coords,
            dist=dist,
            neighbours=neighbours,
            edge_dist=edge_dist,
            position=position,
            velocity=torch.zeros_like(position),
            pbest=position.clone(),
            gbest=position[:, 0].clone(),
            cost=zeros[:, None].expand(B, cfg.n_particles).clone(),
            pbest_cost=zeros[:, None].expand(B, cfg.n_particles).clone(),
            gbest_cost=zeros.clone(),
            best_cost=torch.full((B,), float("inf"), device=self.device),
            best_tour=torch.zeros((B, cfg.num_cities), dtype=torch.long, device=self.device),
            iteration=0,
        )
        tours, cost = self.decode(position, state)
        state.cost, state.pbest_cost, state.pbest_tour = cost, cost.clone(), tours
        self._update_gbest(state, tours)
        self.state = state
        return state

    def step(self, wc1c2: torch.Tensor) -> tuple[SwarmState, torch.Tensor, bool]:
        """One PSO iteration with coefficients ``wc1c2 [B, P, D, 3]``; returns
        ``(state, reward [B, P] = -tour length, done)``."""
        if self.state is None:
            raise RuntimeError("PSOTSPEnv.step before reset")
        cfg, state = self.config, self.state
        B = state.coords.shape[0]
        check_tensor("wc1c2", wc1c2, (B, cfg.n_particles, cfg.dim, 3), FLOATS, where="PSOTSPEnv.step")
        wc1c2 = wc1c2.to(state.position.dtype)
        w = wc1c2[..., 0].clamp(cfg.w_min, cfg.w_max)
        c1 = wc1c2[..., 1].clamp(0.0, cfg.c_max)
        c2 = wc1c2[..., 2].clamp(0.0, cfg.c_max)
        r1 = self._random(tuple(state.position.shape))
        r2 = self._random(tuple(state.position.shape))
        x = state.position
        # v <- w v + c1 r1 (pbest - x) + c2 r2 (gbest - x)
        velocity = w * state.velocity + c1 * r1 * (state.pbest - x) + c2 * r2 * (state.gbest.unsqueeze(1) - x)
        velocity = velocity.clamp(-cfg.v_max, cfg.v_max)
        position = x + velocity  # x <- x + v
        tours, cost = self.decode(position, state)
        improved = cost < state.pbest_cost
        assert state.pbest_tour is not None  # reset decodes the first tours
        state = dataclasses.replace(
            state,
            position=position,
            velocity=velocity,
            cost=cost,
            pbest=torch.where(improved.unsqueeze(-1), position, state.pbest),
            pbest_cost=torch.where(improved, cost, state.pbest_cost),
            iteration=state.iteration + 1,
            pbest_tour=torch.where(improved.unsqueeze(-1), tours, state.pbest_tour),
        )
        self._update_gbest(state, tours)
        self.state = state
        return state, -cost, state.iteration >= cfg.pso_iterations

    @staticmethod
    def _update_gbest(state: SwarmState, tours: torch.Tensor) -> None:
        B = state.pbest.shape[0]
        rows = torch.arange(B, device=state.pbest.device)
        leader = state.pbest_cost.argmin(dim=1)
        state.gbest = state.pbest[rows, leader]
        state.gbest_cost = state.pbest_cost[rows, leader]
        this_best = state.cost.argmin(dim=1)
        this_cost = state.cost[rows, this_best]
        better = this_cost < state.best_cost
        state.best_cost = torch.where(better, this_cost, state.best_cost)
        state.best_tour = torch.where(better.unsqueeze(-1), tours[rows, this_best], state.best_tour)


def fixed_coefficients(
    shape: tuple[int, ...], w: float = CLASSIC_W, c1: float = CLASSIC_C1, c2: float = CLASSIC_C2, device="cpu"
) -> torch.Tensor:
    """``wc1c2`` of classic PSO: the same ``(w, c1, c2)`` everywhere, shape ``[*shape, 3]``."""
    return torch.tensor([w, c1, c2], device=device).expand(*shape, 3)


def random_coefficients(shape: tuple[int, ...], generator: torch.Generator, device="cpu") -> torch.Tensor:
    """Random-coefficient PSO: ``w ~ U(0.5, 1)`` (Eberhart & Shi's random inertia, mean
    0.75), ``c1, c2 ~ U(0, 2 * 1.49618)`` (mean = the classic value), drawn afresh per
    particle, dimension and iteration."""
    u = torch.rand((*shape, 3), generator=generator, device=device)
    return torch.stack([0.5 + 0.5 * u[..., 0], 2 * CLASSIC_C1 * u[..., 1], 2 * CLASSIC_C2 * u[..., 2]], dim=-1)
