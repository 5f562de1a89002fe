"""Actor-critic MLPs for Discrete (Categorical) and Box (diagonal Gaussian) actions.

Both follow the layout that CleanRL's ``ppo.py`` / ``ppo_continuous_action.py`` and
Stable-Baselines3's ``MlpPolicy`` use, so results compare across the three:

* separate actor and critic MLPs (no shared trunk; the critic's hidden sizes may differ,
  ``critic_hidden_dims``, SB3's ``net_arch=dict(pi=..., vf=...)``), ``tanh`` hidden layers;
* orthogonal initialisation, gain ``sqrt(2)`` on hidden layers, ``0.01`` on the policy
  output (near-uniform / near-zero-mean initial policy), ``1`` on the value output;
* Gaussian: a state-independent learnable ``log_std`` (initially 0, sigma = 1). Samples
  are *raw* Gaussian draws; the trainer clips them to the Box bounds only when it hands
  them to the environment, so ``log pi(a|s)`` is the exact density of what was sampled.
* gSDE (:class:`GSDEActorCritic`, SB3's ``use_sde``): the noise is a linear function of
  the actor's last hidden features, so the standard deviation depends on the state.
* ``ortho_init=False`` keeps PyTorch's default ``Linear`` initialisation (SB3's
  ``ortho_init=False``, used by RL-Zoo's MountainCarContinuous setting).

Interface shared by both (``B`` = batch, ``obs_dim`` = flattened observation size):

* ``act(obs, generator)`` -> ``(actions, log_probs [B], values [B])``, the rollout call;
* ``evaluate_actions(obs, actions)`` -> ``(log_probs [B], entropy [B], values [B])``;
* ``value(obs)`` -> ``[B]``; ``deterministic_action(obs)`` -> the mode / mean.

Actions are ``int64 [B]`` (discrete) or ``float32 [B, action_dim]`` (continuous).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pglab.contracts import check_tensor
from pglab.errors import TensorContractError
from pglab.nets.mlp import (
    NUMPY_ACTIVATIONS,
    Layer,
    build_mlp,
    linear_stack,
    mlp_forward,
    numpy_forward,
    numpy_layers,
)

NumpySampler = Callable[[np.ndarray, "torch.Generator | None"], tuple[np.ndarray, np.ndarray]]
"""``sample(head [B, A] float32, generator) -> (actions, log_probs [B])``: a policy head's
draw in NumPy (:meth:`ActorCritic._numpy_sampler`)."""

_FLOATS = (torch.float32, torch.float64)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
"""``log sqrt(2 pi)``, the Gaussian density's constant"""


def orthogonal_init_(mlp: nn.Sequential, output_gain: float) -> nn.Sequential:
    """Orthogonal weights, zero biases: ``sqrt(2)`` for hidden layers, ``output_gain``
    for the last ``Linear`` (CleanRL's ``layer_init`` and SB3's ``ortho_init``)."""
    linears = [m for m in mlp if isinstance(m, nn.Linear)]
    for index, layer in enumerate(linears):
        gain = output_gain if index == len(linears) - 1 else math.sqrt(2.0)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return mlp


def _maybe_orthogonal(mlp: nn.Sequential, output_gain: float, ortho_init: bool) -> nn.Sequential:
    return orthogonal_init_(mlp, output_gain) if ortho_init else mlp


class ActorCritic(nn.Module, abc.ABC):
    """Common part: the critic ``V(s)`` and input flattening/contract checks."""

    actor: nn.Sequential
    critic: nn.Sequential
    samples_in_numpy: bool = False
    """whether :meth:`_numpy_sampler` exists (the rollout's NumPy step samples with it)"""

    def __init__(
        self,
        obs_dim: int,
        hidden_dims: Sequence[int],
        activation: str,
        ortho_init: bool = True,
        critic_hidden_dims: Sequence[int] | None = None,
    ):
        super().__init__()
        self.obs_dim = int(obs_dim)
        critic_dims = hidden_dims if critic_hidden_dims is None else critic_hidden_dims
        self.critic = _maybe_orthogonal(build_mlp(self.obs_dim, critic_dims, 1, activation=activation), 1.0, ortho_init)

    def _flat(self, obs: torch.Tensor) -> torch.Tensor:
        # [B, *obs_shape] of any numeric dtype -> float32 [B, obs_dim]
        flat = obs.reshape(obs.shape[0], -1)
        return flat if flat.dtype in _FLOATS else flat.float()

    def check_obs(self, obs: torch.Tensor, where: str) -> None:
        """Contract at the user-facing entry points: ``[B, *obs_shape]`` with ``obs_dim`` numbers per row."""
        name = f"{type(self).__name__}.{where}"
        check_tensor("obs", obs, None, where=name)
        if obs.dim() < 2 or obs[0].numel() != self.obs_dim:
            raise TensorContractError(
                f"{name}: obs expected [B, ...] with {self.obs_dim} numbers per row, got {list(obs.shape)}"
            )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(s)``, float ``[B]``."""
        return mlp_forward(self.critic, self._flat(obs)).squeeze(-1)

    @abc.abstractmethod
    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, log_probs [B])`` drawn from the policy head's output ``[B, A]``."""

    def _numpy_sampler(self) -> NumpySampler:
        """:meth:`_sample` on a NumPy head ``[B, A]`` (float32) with the current parameters
        (a snapshot, as the rollout step's weights), where :attr:`samples_in_numpy`."""
        raise NotImplementedError(f"{type(self).__name__} samples in torch only")

    def act(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``a ~ pi(.|s)``: ``(actions, log_probs [B], values [B])``.
        Unchecked: this is the per-step hot path of the rollout."""
        flat = self._flat(obs)
        actions, log_probs = self._sample(mlp_forward(self.actor, flat), generator)
        return actions, log_probs, mlp_forward(self.critic, flat).squeeze(-1)

    def rollout_actor(self):
        """``act`` for one rollout with frozen weights: ``step(obs, generator) -> (actions,
        log_probs, values)``, the same distribution as :meth:`act`.

        Actor and critic are evaluated as one MLP whose layers are the two networks'
        layers side by side (first layer: weights stacked; later layers: block-diagonal),
        so a step costs 3 matrix products instead of 6 and one forward pass instead of
        two: ~40% of a CartPole rollout step's network time at 4 copies. On the CPU in
        float32 with Tanh/ReLU layers the step runs in NumPy (:meth:`_numpy_step`), side
        by side up to :data:`SIDE_BY_SIDE_MAX_WIDTH` hidden units and one network after
        the other beyond. The weights are copied when this is called: build a new one after
        every update.
        Falls back to :meth:`act` when the two MLPs are not plain ``Linear``/activation
        stacks of equal depth (e.g. with LayerNorm). Results agree with :meth:`act` to
        float rounding (a wider matrix product may sum in another order).
        """
        joint = _side_by_side(self.actor, self.critic)
        if joint is None:
            return self.act
        head_size = [m for m in self.actor if isinstance(m, nn.Linear)][-1].out_features
        if self.samples_in_numpy and all(
            weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and (activation is None or type(activation) in NUMPY_ACTIVATIONS)
            for weight, _, activation in joint
        ):
            if max(weight.shape[0] for weight, _, _ in joint[:-1]) > SIDE_BY_SIDE_MAX_WIDTH:
                return self._numpy_step(_apart(self.actor, self.critic))
            return self._numpy_step(_together(joint, head_size))
        modules = _as_sequential(joint)

        def step(obs: torch.Tensor, generator: torch.Generator | None = None):
            out = mlp_forward(modules, self._flat(obs))
            actions, log_probs = self._sample(out[:, :head_size], generator)
            return actions, log_probs, out[:, head_size]

        return step

    def _numpy_step(self, forward: NumpyForward) -> NumpyRolloutStep:
        """The rollout step in NumPy on the CPU (:func:`~pglab.nets.mlp.numpy_forward`):
        the same computation as the torch one, with ~1 us of overhead per operation
        instead of ~4 (on an 8-copy CartPole step the network and the sampling are a few
        dozen tiny operations: ~0.1 -> ~0.03 ms). ``forward(inputs) -> (head [B, A],
        values [B])`` is the two networks side by side (:func:`_together`) or one after
        the other (:func:`_apart`). The random numbers still come from ``generator``
        through torch, so a seeded run draws the same stream; results agree with
        :meth:`act` to float rounding. The head's sampler (:meth:`_numpy_sampler`, made
        once here) turns ``head [B, A]`` float32 and ``generator`` into ``(actions,
        log_probs [B])``."""
        return NumpyRolloutStep(forward, self._numpy_sampler())


class NumpyRolloutStep:
    """The rollout step of :meth:`ActorCritic._numpy_step`: called on a tensor of
    observations it returns tensors, and :meth:`arrays` is the same step on NumPy arrays
    (for a rollout loop that stays in NumPy)."""

    def __init__(self, forward: NumpyForward, sample: NumpySampler):
        self.forward, self.sample = forward, sample

    def arrays(
        self, obs: np.ndarray, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, log_probs [B], values [B])`` for ``obs [B, ...]`` (flattened, cast to float32)."""
        inputs = obs if obs.ndim == 2 else obs.reshape(obs.shape[0], -1)
        if inputs.dtype != np.float32:
            inputs = inputs.astype(np.float32)
        head, values = self.forward(inputs)
        actions, log_probs = self.sample(head, generator)
        return actions, log_probs, values

    def __call__(self, obs: torch.Tensor, generator: torch.Generator | None = None):
        # a rollout's observations: one call without gradients, else detached first
        actions, log_probs, values = self.arrays(
            obs.numpy() if not obs.requires_grad else obs.detach().numpy(), generator
        )
        return torch.from_numpy(actions), torch.from_numpy(log_probs), torch.from_numpy(values)


def numpy_log_softmax(logits: np.ndarray) -> np.ndarray:
    """``log softmax`` over the last axis of a NumPy array (max-shifted, as torch's)."""
    shifted = logits - np.maximum.reduce(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.add.reduce(np.exp(shifted), axis=-1, keepdims=True))


def numpy_gaussian_log_prob(scaled: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """``sum_i -u_i^2 / 2 - log sigma_i - log sqrt(2 pi)`` for ``u = (a - mu) / sigma`` ``[B, A]``
    (in the arrays' dtype)."""
    return np.add.reduce(-0.5 * scaled * scaled - log_std - LOG_SQRT_2PI, axis=-1)


SIDE_BY_SIDE_MAX_WIDTH = 128
"""the widest hidden layer (actor's and critic's together) that the NumPy rollout step
evaluates as one block-diagonal product. Measured at 4 rows (float32, one thread): one
``[128, 128]`` product costs 32 us against 21 for two ``[64, 64]`` ones, and
``[512, 512]`` 101 us against 57 for two ``[256, 256]``: the zeros of a block-diagonal
weight are multiplied too, and past 64 units per network they cost more than the second
call saves. At 64 units the two are even (10.5 against 10.9 us)."""

NumpyForward = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``forward(inputs [B, obs_dim] float32) -> (head [B, A], values [B])`` in NumPy"""


def _together(joint: list[Layer], head_size: int) -> NumpyForward:
    """The forward of the side-by-side MLP (:func:`_side_by_side`): one product per layer."""
    layers = numpy_layers(joint)

    def forward(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = numpy_forward(layers, inputs)[-1]
        # the values: a column view of the output (torch wraps the strided array)
        return out[:, :head_size], out[:, head_size]

    return forward


def _apart(actor: nn.Sequential, critic: nn.Sequential) -> NumpyForward:
    """The forward of the actor, then of the critic, each on a copy of its own weights:
    the wide networks' rollout step (:data:`SIDE_BY_SIDE_MAX_WIDTH`)."""
    actor_stack, critic_stack = linear_stack(actor), linear_stack(critic)
    assert actor_stack is not None and critic_stack is not None  # _side_by_side accepted both
    actor_layers, critic_layers = (
        [(weight.copy(), bias.copy(), activation) for weight, bias, activation in numpy_layers(stack)]
        for stack in (actor_stack, critic_stack)
    )

    def forward(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return numpy_forward(actor_layers, inputs)[-1], numpy_forward(critic_layers, inputs)[-1][:, 0]

    return forward


def _side_by_side(actor: nn.Sequential, critic: nn.Sequential) -> list[Layer] | None:
    """The layers of the joint MLP ``x -> [actor(x), critic(x)]`` (copies of the weights),
    or ``None`` when the two are not plain stacks of the same depth and activations."""
    actor_layers, critic_layers = linear_stack(actor), linear_stack(critic)
    if actor_layers is None or critic_layers is None or len(actor_layers) != len(critic_layers):
        return None
    if [type(a) for _, _, a in actor_layers] != [type(a) for _, _, a in critic_layers]:
        return None
    layers: list[Layer] = []
    with torch.no_grad():
        for index, ((actor_weight, actor_bias, activation), (critic_weight, critic_bias, _)) in enumerate(
            zip(actor_layers, critic_layers, strict=True)
        ):
            if index == 0:
                weight = torch.cat([actor_weight, critic_weight])
            else:
                weight = torch.block_diag(actor_weight, critic_weight)
            layers.append((weight.detach(), torch.cat([actor_bias, critic_bias]).detach(), activation))
    return layers


def _as_sequential(layers: list[Layer]) -> nn.Sequential:
    """``Linear``/activation modules holding ``layers``' tensors (no initialisation drawn)."""
    modules: list[nn.Module] = []
    for weight, bias, activation in layers:
        linear = nn.utils.skip_init(
            nn.Linear, weight.shape[1], weight.shape[0], device=weight.device, dtype=weight.dtype
        )
        linear.weight, linear.bias = nn.Parameter(weight, requires_grad=False), nn.Parameter(bias, requires_grad=False)
        modules.append(linear)
        if activation is not None:
            modules.append(activation)
    return nn.Sequential(*modules)


class CategoricalActorCritic(ActorCritic):
    """``pi(a|s) = softmax(logits(s))`` over ``num_actions`` discrete actions."""

    samples_in_numpy = True

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        ortho_init: bool = True,
        critic_hidden_dims: Sequence[int] | None = None,
    ):
        super().__init__(obs_dim, hidden_dims, activation, ortho_init, critic_hidden_dims)
        if num_actions < 2:
            raise ValueError(f"CategoricalActorCritic: num_actions must be >= 2, got {num_actions}")
        self.num_actions = int(num_actions)
        self.actor = _maybe_orthogonal(
            build_mlp(self.obs_dim, hidden_dims, self.num_actions, activation=activation), 0.01, ortho_init
        )

    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``a ~ softmax(logits)``: ``(actions int64 [B], log_probs [B])``."""
        log_pi = F.log_softmax(head, dim=-1)
        # Inverse-CDF sampling, a = #{k : F(k) < u} with u ~ U[0, 1): three cheap ops
        # instead of torch.multinomial's much larger per-call overhead on small batches.
        # The clamp guards against F(K-1) rounding to just below u.
        uniform = torch.rand((head.shape[0], 1), generator=generator, device=head.device, dtype=log_pi.dtype)
        actions = (log_pi.exp().cumsum(-1) < uniform).sum(-1, keepdim=True).clamp_max(self.num_actions - 1)
        return actions.squeeze(-1), log_pi.gather(-1, actions).squeeze(-1)

    def _numpy_sampler(self) -> NumpySampler:
        """:meth:`_sample` on a NumPy head ``[B, A]`` (float32), the same inverse-CDF draw."""
        last_action = self.num_actions - 1

        def sample(head: np.ndarray, generator: torch.Generator | None) -> tuple[np.ndarray, np.ndarray]:
            log_pi = numpy_log_softmax(head)
            uniform = torch.rand((head.shape[0], 1), generator=generator, dtype=torch.float32).numpy()
            actions = np.add.reduce(np.cumsum(np.exp(log_pi), axis=-1) < uniform, axis=-1, dtype=np.int64)
            np.minimum(actions, last_action, out=actions)
            return actions, log_pi[np.arange(head.shape[0]), actions]

        return sample

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H[pi(.|s)] [B], V(s) [B])`` for stored ``actions`` int ``[B]``."""
        flat = self._flat(obs)
        log_pi = F.log_softmax(mlp_forward(self.actor, flat), dim=-1)
        log_probs = log_pi.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_pi.exp() * log_pi).sum(-1)  # H = -sum_a pi(a) log pi(a)
        return log_probs, entropy, mlp_forward(self.critic, flat).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The most probable action, int64 ``[B]``."""
        return mlp_forward(self.actor, self._flat(obs)).argmax(-1)


class GaussianActorCritic(ActorCritic):
    """``pi(a|s) = N(mu(s), diag(sigma^2))`` with a state-independent ``log sigma``.

    Args:
        obs_dim: flattened observation size. action_dim: size of the action vector.
        hidden_dims, activation: MLP layout of actor and critic.
        log_std_init: initial ``log sigma`` for every action dimension.
    """

    samples_in_numpy = True

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        critic_hidden_dims: Sequence[int] | None = None,
    ):
        super().__init__(obs_dim, hidden_dims, activation, ortho_init, critic_hidden_dims)
        self.action_dim = int(action_dim)
        self.actor = _maybe_orthogonal(
            build_mlp(self.obs_dim, hidden_dims, self.action_dim, activation=activation), 0.01, ortho_init
        )
        self.log_std = nn.Parameter(torch.full((self.action_dim,), float(log_std_init)))

    def _log_prob(self, actions: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        # log N(a; mu, sigma) = sum_i [-(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log sqrt(2 pi)]
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - LOG_SQRT_2PI).sum(-1)

    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw ``a = mu + sigma * eps``: ``(actions [B, action_dim], log_probs [B])``."""
        noise = torch.randn(head.shape, generator=generator, device=head.device, dtype=head.dtype)
        actions = head + self.log_std.exp() * noise
        return actions, self._log_prob(actions, head)

    def _numpy_sampler(self) -> NumpySampler:
        """:meth:`_sample` on a NumPy head ``[B, A]`` (float32). ``sigma``, ``1 / sigma`` (as
        ``exp(-log sigma)``) and ``log sigma`` are taken once; the noise is drawn into one
        reused tensor with ``normal_``, which is what ``torch.randn`` does (the same draws)."""
        log_std = self.log_std.detach().numpy().copy()
        std, inverse_std = np.exp(log_std), np.exp(-log_std)
        noise = torch.empty(0)
        noise_array = noise.numpy()

        def sample(head: np.ndarray, generator: torch.Generator | None) -> tuple[np.ndarray, np.ndarray]:
            nonlocal noise, noise_array
            if noise_array.shape != head.shape:
                noise = torch.empty(head.shape)
                noise_array = noise.numpy()
            noise.normal_(generator=generator)
            actions = head + std * noise_array
            # log N(a; mu, sigma) with (a - mu) / sigma = noise up to rounding, as _log_prob computes it
            scaled = (actions - head) * inverse_std
            return actions, numpy_gaussian_log_prob(scaled, log_std)

        return sample

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H [B], V(s) [B])``; ``H = sum_i (1/2 + log sqrt(2 pi) + log sigma_i)``."""
        flat = self._flat(obs)
        mean = mlp_forward(self.actor, flat)
        entropy = (0.5 + LOG_SQRT_2PI + self.log_std).sum().expand(mean.shape[0])
        return self._log_prob(actions, mean), entropy, mlp_forward(self.critic, flat).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``mu(s)``, float ``[B, action_dim]`` (unclipped)."""
        return mlp_forward(self.actor, self._flat(obs))


class GSDEActorCritic(ActorCritic):
    """Generalized state-dependent exploration (Raffin et al. 2022; SB3's ``use_sde`` with
    its defaults ``full_std=True``, ``use_expln=False``, ``learn_features=False``).

    With ``z(s)`` the actor's last hidden features ``[B, F]`` and ``mu(s)`` its output:

        a = mu(s) + z(s) @ W,   W [F, A] with W_ij ~ N(0, sigma_ij^2),  sigma = exp(log_std [F, A])

    ``W`` is drawn once per environment copy (:meth:`reset_noise`, at the start of every
    rollout and every ``sde_sample_freq`` steps), so within that stretch the noise is a
    smooth function of the state instead of white noise. Given ``s`` the action is
    Gaussian with a state-dependent variance,

        a_j ~ N(mu_j(s), sum_i z_i(s)^2 sigma_ij^2 + 1e-6),

    which is the density :meth:`evaluate_actions` scores. ``z`` is detached wherever it
    enters the noise or the variance (``learn_features=False``): the features are trained
    through the mean only; ``log_std`` through the variance.
    """

    VARIANCE_EPS = 1e-6
    """added to the variance (SB3's epsilon): a state with z(s) = 0 still has a density"""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        log_std_init: float = -2.0,
        ortho_init: bool = True,
        critic_hidden_dims: Sequence[int] | None = None,
    ):
        super().__init__(obs_dim, hidden_dims, activation, ortho_init, critic_hidden_dims)
        self.action_dim = int(action_dim)
        self.actor = _maybe_orthogonal(
            build_mlp(self.obs_dim, hidden_dims, self.action_dim, activation=activation), 0.01, ortho_init
        )
        self.latent_dim = int(hidden_dims[-1]) if len(hidden_dims) else self.obs_dim
        self.log_std = nn.Parameter(torch.full((self.latent_dim, self.action_dim), float(log_std_init)))
        self.exploration_matrices: torch.Tensor | None = None
        """``W`` per environment copy ``[N, F, A]`` (not a parameter: redrawn every rollout)"""

    def reset_noise(self, num_envs: int, generator: torch.Generator | None = None) -> None:
        """Draw a new ``W ~ N(0, sigma^2)`` for each of ``num_envs`` copies."""
        std = self.log_std.detach().exp()
        noise = torch.randn((num_envs, *std.shape), generator=generator, device=std.device, dtype=std.dtype)
        self.exploration_matrices = noise * std

    def _latent_and_mean(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layers = list(self.actor)
        latent = mlp_forward(layers[:-1], flat)
        head = layers[-1]
        assert isinstance(head, nn.Linear)
        return latent, F.linear(latent, head.weight, head.bias)

    def action_std(self, latent: torch.Tensor) -> torch.Tensor:
        """The state-dependent standard deviation ``sqrt(z^2 @ sigma^2 + eps)`` ``[B, A]``."""
        variance = latent.detach().pow(2) @ self.log_std.exp().pow(2)
        return torch.sqrt(variance + self.VARIANCE_EPS)

    def _log_prob(self, actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) / std
        return (-0.5 * z.pow(2) - std.log() - LOG_SQRT_2PI).sum(-1)

    def _sample(self, head: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("GSDEActorCritic samples from the hidden features: call act()")

    def act(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``a = mu(s) + z(s) W_env``: ``(actions [B, A], log_probs [B], values [B])``. Row
        ``b`` uses copy ``b``'s matrix; fresh matrices are drawn when none match ``B``."""
        flat = self._flat(obs)
        latent, mean = self._latent_and_mean(flat)
        if self.exploration_matrices is None or self.exploration_matrices.shape[0] != flat.shape[0]:
            self.reset_noise(flat.shape[0], generator)
        matrices = self.exploration_matrices
        assert matrices is not None  # reset_noise drew them
        noise = torch.bmm(latent.detach().unsqueeze(1), matrices).squeeze(1)
        actions = mean + noise
        return (
            actions,
            self._log_prob(actions, mean, self.action_std(latent)),
            mlp_forward(self.critic, flat).squeeze(-1),
        )

    def rollout_actor(self):
        """:meth:`act` (no side-by-side fast path: the noise needs the hidden features)."""
        return self.act

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s) [B], H [B], V(s) [B])`` under ``N(mu(s), diag std(s)^2)``;
        ``H = sum_j (1/2 + log sqrt(2 pi) + log std_j(s))``."""
        flat = self._flat(obs)
        latent, mean = self._latent_and_mean(flat)
        std = self.action_std(latent)
        entropy = (0.5 + LOG_SQRT_2PI + std.log()).sum(-1)
        return self._log_prob(actions, mean, std), entropy, mlp_forward(self.critic, flat).squeeze(-1)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``mu(s)``, float ``[B, action_dim]`` (unclipped)."""
        return mlp_forward(self.actor, self._flat(obs))


def build_actor_critic(
    obs_dim: int,
    action_kind: str,
    action_size: int,
    hidden_dims: Sequence[int] = (64, 64),
    *,
    activation: str = "tanh",
    log_std_init: float = 0.0,
    ortho_init: bool = True,
    use_sde: bool = False,
    critic_hidden_dims: Sequence[int] | None = None,
) -> ActorCritic:
    """``action_kind="discrete"`` with ``action_size`` actions, or ``"continuous"`` with
    an ``action_size``-dimensional Box (``use_sde``: :class:`GSDEActorCritic`). The actor's
    hidden sizes are ``hidden_dims``, the critic's ``critic_hidden_dims`` (default: the same)."""
    if action_kind == "discrete":
        return CategoricalActorCritic(
            obs_dim,
            action_size,
            hidden_dims,
            activation=activation,
            ortho_init=ortho_init,
            critic_hidden_dims=critic_hidden_dims,
        )
    if action_kind == "continuous":
        gaussian = GSDEActorCritic if use_sde else GaussianActorCritic
        return gaussian(
            obs_dim,
            action_size,
            hidden_dims,
            activation=activation,
            log_std_init=log_std_init,
            ortho_init=ortho_init,
            critic_hidden_dims=critic_hidden_dims,
        )
    raise ValueError(f"build_actor_critic: action_kind must be 'discrete' or 'continuous', got {action_kind!r}")
