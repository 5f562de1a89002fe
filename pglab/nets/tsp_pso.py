"""``HyperparamTSPModel``: a network that sets PSO coefficients per particle and edge.

Data flow (S swarms = instances or (iteration, instance) pairs, n cities, k neighbours,
D = n * k candidate edges, P particles, E = ``emb_dim``)::

    coords [S, n, 2] --TSPNodeEncoder (self-attention over cities)--> h [S, n, E]
    edge e = (i -> j):  edge_emb[S, D, E] = A h_i + B h_j + c * d_ij
    per particle and edge: f = [x, v, pbest - x, gbest - x]  -> Linear -> + edge_emb -> pe [S, P, D, E]
    SwarmEncoder: mean_D(pe) + MLP(particle scalars) -> self-attention over particles -> z [S, P, E]
    cross-attention: particle_ctx = LN(z + Attn(q=z, k=v=h))                     [S, P, E]
    policy head:  MLP(pe + particle_ctx) -> (mu, log sigma) of wc1c2               [S, P, D, 3] each
    value head:   MLP(particle_ctx) -> V(s_t, p)                                   [S, P]

``mu`` starts at the classic coefficients (0.7298, 1.49618, 1.49618): the head's last
layer is zero-initialised, so an untrained model *is* classic PSO plus exploration noise
and training can only have to improve on it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pglab.contracts import check_tensor
from pglab.envs.pso_tsp import CLASSIC_C1, CLASSIC_C2, CLASSIC_W, SwarmState
from pglab.nets.mlp import build_mlp

FLOATS = (torch.float32, torch.float64)


class TSPNodeEncoder(nn.Module):
    """Graph attention over the complete graph of cities (a Transformer encoder on the
    coordinates, as in the attention model of Kool et al.): ``[S, n, 2] -> [S, n, E]``."""

    def __init__(self, emb_dim: int, num_heads: int, num_layers: int):
        super().__init__()
        self.input = nn.Linear(2, emb_dim)
        layer = nn.TransformerEncoderLayer(
            emb_dim, num_heads, dim_feedforward=2 * emb_dim, dropout=0.0, batch_first=True
        )
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        return self.layers(self.input(coords))


class SwarmEncoder(nn.Module):
    """Per-particle tokens from its edge features and scalars, mixed by self-attention
    across the swarm: ``pe [S, P, D, E], scalars [S, P, F] -> [S, P, E]``."""

    def __init__(self, emb_dim: int, num_scalars: int, num_heads: int, num_layers: int):
        super().__init__()
        self.scalars = build_mlp(num_scalars, (emb_dim,), emb_dim, activation="relu")
        layer = nn.TransformerEncoderLayer(
            emb_dim, num_heads, dim_feedforward=2 * emb_dim, dropout=0.0, batch_first=True
        )
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, particle_edges: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        tokens = particle_edges.mean(dim=2) + self.scalars(scalars)
        return self.layers(tokens)


def swarm_scalars(state: SwarmState, pso_iterations: int) -> torch.Tensor:
    """Per-particle scalar features ``[S, P, 3]``: current and personal-best tour length
    relative to the swarm's best (``L / L_gbest - 1``), and progress ``t / T``."""
    reference = state.gbest_cost.clamp_min(1e-9).unsqueeze(1)
    progress = torch.full_like(state.cost, state.iteration / pso_iterations)
    return torch.stack([state.cost / reference - 1.0, state.pbest_cost / reference - 1.0, progress], dim=-1)


class HyperparamTSPModel(nn.Module):
    """Gaussian policy over ``wc1c2`` plus a per-particle value head (shared encoders).

    Args:
        num_cities, k: instance size and neighbours per city (D = num_cities * k).
        emb_dim, num_heads: width and attention heads of every block.
        node_layers, swarm_layers: depths of the city and swarm encoders.
        log_std_init: initial log standard deviation of the coefficients.
        min_std, max_std: clamp of the standard deviation.
        mu_scale: ``mu = classic + mu_scale * head``; > 1 lets Adam move the mean
            coefficients ``mu_scale`` times faster (its steps are ~lr in parameter space).
        particle_noise_std: standard deviation of an exploration offset per coefficient
            that is shared by all D edges (0: independent noise per edge only).
        noise_scope: ``"particle"`` (one offset per particle) or ``"swarm"`` (one per
            instance, shared by its particles). See :func:`sample_coefficients`.
    """

    classic: torch.Tensor  # buffer [3]: classic PSO's (w, c1, c2), the untrained mean
    source_city: torch.Tensor  # buffer [D]: the source city of each candidate edge

    def __init__(
        self,
        num_cities: int,
        k: int,
        *,
        emb_dim: int = 32,
        num_heads: int = 4,
        node_layers: int = 2,
        swarm_layers: int = 1,
        log_std_init: float = math.log(0.3),
        min_std: float = 0.01,
        max_std: float = 1.0,
        mu_scale: float = 1.0,
        particle_noise_std: float = 0.0,
        noise_scope: str = "particle",
    ):
        super().__init__()
        self.particle_noise_std = float(particle_noise_std)
        self.noise_scope = noise_scope
        self.num_cities, self.k, self.dim = num_cities, k, num_cities * k
        self.min_log_std, self.max_log_std = math.log(min_std), math.log(max_std)
        self.mu_scale = mu_scale
        self.node_encoder = TSPNodeEncoder(emb_dim, num_heads, node_layers)
        self.edge_src = nn.Linear(emb_dim, emb_dim)
        self.edge_dst = nn.Linear(emb_dim, emb_dim, bias=False)
        self.edge_len = nn.Linear(1, emb_dim, bias=False)
        self.particle_edge = nn.Linear(4, emb_dim)
        self.swarm_encoder = SwarmEncoder(emb_dim, 3, num_heads, swarm_layers)
        self.cross_attention = nn.MultiheadAttention(emb_dim, num_heads, batch_first=True)
        self.cross_norm = nn.LayerNorm(emb_dim)
        self.policy_head = build_mlp(emb_dim, (emb_dim,), 6, activation="relu")
        self.value_head = build_mlp(emb_dim, (emb_dim,), 1, activation="relu")
        last = self.policy_head[-1]
        assert isinstance(last, nn.Linear)  # build_mlp ends with its output layer
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        with torch.no_grad():
            last.bias[3:] = log_std_init
        self.register_buffer("classic", torch.tensor([CLASSIC_W, CLASSIC_C1, CLASSIC_C2]))
        self.register_buffer("source_city", torch.arange(num_cities).repeat_interleave(k))

    def encode_instances(
        self, coords: torch.Tensor, neighbours: torch.Tensor, edge_dist: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node_emb [S, n, E], edge_emb [S, D, E])`` of instances (constant over an episode)."""
        dims: dict[str, int] = {}
        check_tensor("coords", coords, ("S", self.num_cities, 2), FLOATS, dims=dims, where="HyperparamTSPModel")
        check_tensor(
            "neighbours", neighbours, ("S", self.num_cities, self.k), torch.int64, dims=dims, where="HyperparamTSPModel"
        )
        check_tensor("edge_dist", edge_dist, ("S", self.dim), FLOATS, dims=dims, where="HyperparamTSPModel")
        node_emb = self.node_encoder(coords)
        S, E = node_emb.shape[0], node_emb.shape[2]
        src = node_emb[:, self.source_city]  # [S, D, E]
        dst = node_emb.gather(1, neighbours.reshape(S, self.dim, 1).expand(S, self.dim, E))
        edge_emb = self.edge_src(src) + self.edge_dst(dst) + self.edge_len(edge_dist.unsqueeze(-1))
        return node_emb, edge_emb

    def forward(
        self,
        node_emb: torch.Tensor,
        edge_emb: torch.Tensor,
        position: torch.Tensor,
        velocity: torch.Tensor,
        pbest: torch.Tensor,
        gbest: torch.Tensor,
        scalars: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(mu [S, P, D, 3], sigma [S, P, D, 3], values [S, P])``.

        Args: node_emb ``[S, n, E]``, edge_emb ``[S, D, E]`` (from
        :meth:`encode_instances`); position, velocity, pbest ``[S, P, D]``; gbest
        ``[S, D]``; scalars ``[S, P, 3]`` (:func:`swarm_scalars`).
        """
        dims: dict[str, int] = {}
        where = "HyperparamTSPModel"
        check_tensor("position", position, ("S", "P", self.dim), FLOATS, dims=dims, where=where)
        check_tensor("velocity", velocity, ("S", "P", self.dim), FLOATS, dims=dims, where=where)
        check_tensor("pbest", pbest, ("S", "P", self.dim), FLOATS, dims=dims, where=where)
        check_tensor("gbest", gbest, ("S", self.dim), FLOATS, dims=dims, where=where)
        check_tensor("scalars", scalars, ("S", "P", 3), FLOATS, dims=dims, where=where)
        check_tensor("edge_emb", edge_emb, ("S", self.dim, None), FLOATS, dims=dims, where=where)
        features = torch.stack([position, velocity, pbest - position, gbest.unsqueeze(1) - position], dim=-1)
        particle_edges = torch.relu(self.particle_edge(features) + edge_emb.unsqueeze(1))  # [S, P, D, E]
        tokens = self.swarm_encoder(particle_edges, scalars)  # [S, P, E]
        attended, _ = self.cross_attention(tokens, node_emb, node_emb, need_weights=False)
        particle_ctx = self.cross_norm(tokens + attended)
        head = self.policy_head(particle_edges + particle_ctx.unsqueeze(2))  # [S, P, D, 6]
        mu = self.classic + self.mu_scale * head[..., :3]
        sigma = head[..., 3:].clamp(self.min_log_std, self.max_log_std).exp()
        values = self.value_head(particle_ctx).squeeze(-1)
        return mu, sigma, values

    def cached_encoding(self, state: SwarmState) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`encode_instances` of the state's instances, computed once per episode.

        The city and edge embeddings depend only on the instance (coords, neighbours,
        edge lengths), which an episode never changes: the env passes the same ``coords``
        tensor to every state of an episode, so it is the cache key (identity and
        in-place version; a new episode, or new weights, recompute). Not for training:
        the cached tensors carry no gradient.
        """
        key = (id(state.coords), state.coords._version, id(state.neighbours), self._weights_version())
        cache = getattr(self, "_encoding_cache", None)
        if cache is None or cache[0] != key or cache[1] is not state.coords:
            with torch.no_grad():
                cache = (key, state.coords, self.encode_instances(state.coords, state.neighbours, state.edge_dist))
            self._encoding_cache = cache
        return cache[2]

    def _weights_version(self) -> int:
        """Sum of the encoder parameters' in-place versions: an optimizer step changes it."""
        return sum(p._version for p in self.parameters())

    def act(
        self,
        state: SwarmState,
        pso_iterations: int,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Coefficients ``wc1c2 [B, P, D, 3]`` for the env's current state (no gradient):
        the mean (``deterministic``) or a sample of the Gaussian."""
        with torch.no_grad():
            node_emb, edge_emb = self.cached_encoding(state)
            mu, sigma, _ = self(
                node_emb,
                edge_emb,
                state.position,
                state.velocity,
                state.pbest,
                state.gbest,
                swarm_scalars(state, pso_iterations),
            )
            if deterministic:
                return mu
            return sample_coefficients(mu, sigma, self.particle_noise_std, generator, self.noise_scope)


def sample_coefficients(
    mu: torch.Tensor,
    sigma: torch.Tensor,
    particle_noise_std: float = 0.0,
    generator: torch.Generator | None = None,
    noise_scope: str = "particle",
    antithetic: bool = False,
) -> torch.Tensor:
    """Draw ``wc1c2 [S, P, D, 3] = mu + sigma * eps_edge + particle_noise_std * eps_shared``.

    ``eps_edge ~ N(0, 1)`` is independent per edge; ``eps_shared ~ N(0, 1)`` is one draw
    per particle (``noise_scope="particle"``) or per instance (``"swarm"``: one offset
    for all P particles) and coefficient, added to all the edges it covers. Why the shared part: with only
    independent noise, how a particle's reward responds to its *overall* coefficient
    level is estimated through 3 * D ~ 600 independent score terms, whose sum is almost
    pure noise (the mean coefficients random-walk); a shared offset is a 3-dimensional
    perturbation per particle whose score term carries that signal directly (an
    evolution-strategies-like direction), while the independent part still explores
    per-edge differences. Each coefficient's D values are then jointly Gaussian with the
    equicorrelated covariance ``diag(sigma^2) + particle_noise_std^2 * 1 1^T`` over the
    D (particle scope) or P * D (swarm scope) entries that share an offset
    (:func:`gaussian_log_prob_entropy` scores it exactly).

    ``antithetic``: the batch is two halves (the same instances, see ``PSOTSPEnv(paired=
    True)``) and the second half's noise is the first half's negated (mirrored
    sampling): each pair's score terms are equal and opposite, so in the policy
    gradient the part of the return the pair shares cancels exactly.
    """

    def draw(shape: tuple[int, ...]) -> torch.Tensor:
        if not antithetic:
            return torch.randn(shape, generator=generator, device=mu.device, dtype=mu.dtype)
        if shape[0] % 2:
            raise ValueError(f"sample_coefficients(antithetic=True): the batch must have an even size, got {shape[0]}")
        half = torch.randn((shape[0] // 2, *shape[1:]), generator=generator, device=mu.device, dtype=mu.dtype)
        return torch.cat([half, -half])

    actions = mu + sigma * draw(tuple(mu.shape))
    if particle_noise_std > 0:
        shape = (mu.shape[0], 1, 1, mu.shape[-1]) if noise_scope == "swarm" else (*mu.shape[:-2], 1, mu.shape[-1])
        actions = actions + particle_noise_std * draw(shape)
    return actions


def gaussian_log_prob_entropy(
    mu: torch.Tensor,
    sigma: torch.Tensor,
    actions: torch.Tensor,
    reduction: str = "mean",
    particle_noise_std: float = 0.0,
    noise_scope: str = "particle",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-particle log-likelihood and entropy of ``actions [S, P, D, 3]``, ``[S, P]`` each.

    Without shared noise: ``log N(a; mu, sigma) = -(a - mu)^2 / (2 sigma^2) - log sigma -
    log(2 pi) / 2`` summed over the 3 coefficients and the D edges. With
    ``particle_noise_std = s > 0`` each coefficient's D-vector ``a`` is
    ``N(mu, Sigma)``, ``Sigma = diag(sigma^2) + s^2 1 1^T`` (:func:`sample_coefficients`),
    scored exactly by Sherman-Morrison with ``r = a - mu``, ``q = sum_d 1 / sigma_d^2``:

        r^T Sigma^-1 r = sum_d r_d^2 / sigma_d^2 - s^2 (sum_d r_d / sigma_d^2)^2 / (1 + s^2 q)
        log det Sigma  = sum_d log sigma_d^2 + log(1 + s^2 q)
        log p = -(r^T Sigma^-1 r + log det Sigma + D log(2 pi)) / 2,  H = (log det Sigma + D (1 + log 2 pi)) / 2

    ``reduction="mean"`` divides the joint log-density and entropy by D (the design
    note's per-edge log-likelihood, which keeps PPO's ratio ``exp(lp - lp_old)`` O(1) for
    D ~ hundreds of edges); ``"sum"`` keeps the exact joint density.

    ``noise_scope="swarm"``: the P particles of an instance share the offset, so only the
    swarm's joint density exists; it is computed over the P * D entries as above and
    each particle gets ``1 / P`` of it (the particles' log-probs sum to the swarm's, so
    ``sum_p A * grad log p_p`` is the swarm's score term when the advantage is shared).
    """
    if noise_scope == "swarm" and particle_noise_std > 0:
        num_particles = mu.shape[-3]
        mu_joint, sigma_joint, actions_joint = (x.reshape(x.shape[0], 1, -1, x.shape[-1]) for x in (mu, sigma, actions))
        log_prob, entropy = gaussian_log_prob_entropy(
            mu_joint, sigma_joint, actions_joint, "sum", particle_noise_std, "particle"
        )  # [S, 1]
        scale = num_particles * (mu.shape[-2] if reduction == "mean" else 1)
        return (log_prob / scale).expand(-1, num_particles), (entropy / scale).expand(-1, num_particles)
    num_edges = mu.shape[-2]
    residual = actions - mu
    inverse_variance = sigma.pow(-2)
    quadratic = (residual.pow(2) * inverse_variance).sum(-2)  # [S, P, 3]
    log_det = (2.0 * sigma.log()).sum(-2)
    if particle_noise_std > 0:
        shared_variance = particle_noise_std**2
        precision_sum = inverse_variance.sum(-2)
        denominator = 1.0 + shared_variance * precision_sum
        quadratic = quadratic - shared_variance * (residual * inverse_variance).sum(-2).pow(2) / denominator
        log_det = log_det + denominator.log()
    log_prob = -0.5 * (quadratic + log_det + num_edges * math.log(2 * math.pi))
    entropy = 0.5 * (log_det + num_edges * (1.0 + math.log(2 * math.pi)))
    log_prob, entropy = log_prob.sum(-1), entropy.sum(-1)  # over w, c1, c2
    if reduction == "mean":
        return log_prob / num_edges, entropy / num_edges
    return log_prob, entropy


# -- the swarm controller (trained by evolution strategies on its deterministic output) ---------
SWARM_FEATURES = (
    "progress",
    "cost_gap",
    "pbest_gap",
    "is_leader",
    "at_pbest",
    "dist_pbest",
    "dist_gbest",
    "speed",
    "diversity",
)


def swarm_features(state: SwarmState, pso_iterations: int) -> torch.Tensor:
    """Per-particle features of the swarm's state ``[B, P, F]`` (F = len(SWARM_FEATURES)),
    all O(B P D) from tensors the swarm already holds:

    ``progress`` t / T; ``cost_gap`` and ``pbest_gap``: the current and personal-best tour
    length over the swarm's best, minus 1; ``is_leader`` 1 for the particle whose personal
    best is the swarm's; ``at_pbest`` 1 when the current tour is the personal best (it just
    improved or tied); ``dist_pbest``, ``dist_gbest``, ``speed``: root-mean-square over the D
    edges of ``pbest - x``, ``gbest - x`` and ``v``; ``diversity``: the swarm's mean
    ``dist_gbest`` (the same for all its particles).
    """
    reference = state.gbest_cost.clamp_min(1e-9).unsqueeze(1)  # [B, 1]
    rms = lambda x: x.pow(2).mean(-1).sqrt()  # noqa: E731  [B, P, D] -> [B, P]
    dist_gbest = rms(state.gbest.unsqueeze(1) - state.position)
    features = [
        torch.full_like(state.cost, state.iteration / pso_iterations),
        state.cost / reference - 1.0,
        state.pbest_cost / reference - 1.0,
        (state.pbest_cost <= reference).to(state.cost.dtype),
        (state.cost <= state.pbest_cost).to(state.cost.dtype),
        rms(state.pbest - state.position),
        dist_gbest,
        rms(state.velocity),
        dist_gbest.mean(dim=1, keepdim=True).expand_as(dist_gbest),
    ]
    return torch.stack(features, dim=-1)


class SwarmController(nn.Module):
    """A deterministic per-particle PSO controller: ``(w, c1, c2) = base + f(features)``.

    ``features [..., P, F]`` (:func:`swarm_features`) -> ``f``: linear (``hidden=0``) or one
    tanh hidden layer of ``hidden`` units -> 3 outputs added to ``base`` (the constant
    coefficients it starts from: the tuned constant PSO). The output layer is
    zero-initialised, so the untrained controller *is* that constant PSO. One ``(w, c1,
    c2)`` per particle and PSO iteration, applied to all of the particle's D edges; no
    per-instance encoding (nothing to cache), a few hundred multiply-adds per particle.

    ``forward(features, params)`` also evaluates a population of parameter vectors at once
    (the ES trainer): ``params`` from :meth:`population` holds each tensor with a leading
    ``K`` and ``features`` is ``[K, ..., F]``.
    """

    base: torch.Tensor  # buffer [3]: the constant (w, c1, c2)

    def __init__(
        self,
        base: tuple[float, float, float] = (CLASSIC_W, CLASSIC_C1, CLASSIC_C2),
        hidden: int = 16,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        num_features = len(SWARM_FEATURES)
        self.hidden = int(hidden)
        self.register_buffer("base", torch.tensor([float(b) for b in base]))
        if self.hidden > 0:
            self.w1 = nn.Parameter(torch.randn(num_features, hidden, generator=generator) / math.sqrt(num_features))
            self.b1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(torch.zeros(self.hidden or num_features, 3))
        self.b2 = nn.Parameter(torch.zeros(3))

    def forward(self, features: torch.Tensor, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Coefficients ``[..., 3]`` for ``features [..., F]`` (``params``: a population, see above)."""
        check_tensor(
            "features", features, (*[None] * (features.dim() - 1), len(SWARM_FEATURES)), FLOATS, where="SwarmController"
        )
        if params is None:
            hidden = torch.tanh(features @ self.w1 + self.b1) if self.hidden else features
            return self.base + hidden @ self.w2 + self.b2
        K = features.shape[0]
        hidden = features.reshape(K, -1, features.shape[-1])  # [K, N, F]
        if self.hidden:
            hidden = torch.tanh(torch.bmm(hidden, params["w1"]) + params["b1"].unsqueeze(1))
        out = self.base + torch.bmm(hidden, params["w2"]) + params["b2"].unsqueeze(1)
        return out.reshape(*features.shape[:-1], 3)

    def flat_parameters(self) -> torch.Tensor:
        """All parameters as one vector ``[M]`` (the ES search space)."""
        return torch.cat([p.detach().reshape(-1) for p in self.parameters()])

    def population(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Parameter vectors ``[K, M]`` -> ``{name: [K, *shape]}`` for :meth:`forward`."""
        out, start = {}, 0
        for name, p in self.named_parameters():
            out[name] = flat[:, start : start + p.numel()].reshape(flat.shape[0], *p.shape)
            start += p.numel()
        return out

    def act(
        self,
        state: SwarmState,
        pso_iterations: int,
        *,
        deterministic: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """``wc1c2 [B, P, D, 3]``: each particle's coefficients on all its D edges."""
        if not deterministic:
            raise ValueError("SwarmController is deterministic: it has no sampled coefficients")
        with torch.no_grad():
            coefficients = self(swarm_features(state, pso_iterations))  # [B, P, 3]
        B, P, D = state.position.shape
        return coefficients.unsqueeze(2).expand(B, P, D, 3)
