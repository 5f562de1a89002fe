"""PPO's clipped loss and its gradient for a plain MLP actor-critic, in closed form, in NumPy.

An accelerator of :func:`pglab.losses.ppo.ppo_clip_loss` followed by ``loss.backward()``
(the reference), used only through :func:`pglab.algos.policy_update.build_policy_update`:
it computes the same loss *and* the gradient of every parameter with a handful of matrix
products, without building an autograd graph. Why: with classic-control networks (two
64-unit layers, minibatches of 64-256 rows) a PPO gradient step is almost all
per-operation dispatch, not arithmetic. Autograd records and replays ~100 small
operations per step; the closed form needs about 40 and no graph, and runs them in NumPy
on views of the parameters (a NumPy operation on these sizes costs ~1 us of overhead, a
torch one ~4 us).

What it models is declared below (:data:`HYPERPARAMETERS`, :data:`HYPERPARAMETER_VALUES`,
:data:`NETWORKS`, :data:`ACTIVATIONS`, :data:`DTYPES`, the CPU): :func:`declines` names
the first thing outside it, and the update then runs on autograd and says why.
``tests/test_policy_update.py`` holds the two paths together for every field of
:class:`~pglab.configs.ppo.OnPolicyHyperparams` (a field it has no case for fails it).
The matrix products run on NumPy's BLAS, limited to torch's intra-op thread count while an
update runs (:func:`blas_threads`).

Notation for one minibatch of ``B`` rows (``1/B`` from every mean):

    policy:  r = exp(log pi(a|s) - log pi_old(a|s))
             L_pi = -mean(min(r A, clip(r, 1-eps, 1+eps) A))
             dL/dlog pi = -(1/B) r A [r A <= clip(r) A]        (autograd's min/clamp rule)
    value:   L_V = 0.5 mean((V - R)^2)                    dL/dV = c_v (V - R) / B
    entropy: L_H = -c_H mean(H)
    softmax head (logits z, pi = softmax(z)):
             dlog pi(a)/dz = onehot(a) - pi,   dH/dz_k = -pi_k (log pi_k + H)
    Gaussian head (mean mu, log sigma, u = (a - mu) / sigma):
             dlog pi/dmu = u / sigma,   dlog pi/dlog sigma_i = u_i^2 - 1,   dH/dlog sigma_i = 1
    MLP layer (z = a_prev W^T + b, a = act(z)):
             dW = g_z^T a_prev,  db = sum_rows g_z,  g_prev = g_z W,
             tanh' = 1 - a^2,  relu' = [a > 0]
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from pglab.nets.actor_critic import (
    LOG_SQRT_2PI,
    ActorCritic,
    CategoricalActorCritic,
    GaussianActorCritic,
    GSDEActorCritic,
    numpy_gaussian_log_prob,
    numpy_log_softmax,
)
from pglab.nets.mlp import (
    ACTIVATION_NAMES,
    NUMPY_ACTIVATIONS,
    ArrayLayer,
    Layer,
    linear_stack,
    numpy_forward,
    numpy_layers,
)

# --------------------------------------------------------------------------------------
# What the closed form models
# --------------------------------------------------------------------------------------
HYPERPARAMETERS: dict[str, str] = {
    "ppo_epochs": "the shared epoch loop (pglab.algos.onpolicy)",
    "num_minibatches": "the shared minibatch split; the rows are gathered per minibatch",
    "minibatch_size": "the shared minibatch split (SB3's slices); the rows are gathered per minibatch",
    "clip_coef": "the clipped surrogate and its slope",
    "value_clip_coef": "the clipped value loss and its slope (None: the plain one)",
    "value_coef": "dL/dV",
    "entropy_coef": "the entropy bonus's gradient",
    "max_grad_norm": "clip_flat_gradient: clip_grad_norm_'s arithmetic on the flat gradient",
    "target_kl": "the epochs' approximate KL, from the kept per-sample terms",
    "kl_stop": "the shared epoch loop; a minibatch's approximate KL from its terms, before its step",
    "normalize_advantages": "each minibatch's advantages standardised (or not)",
    "gamma": "not read by the update: the trainer's advantages and returns use it",
    "gae_lambda": "not read by the update: the trainer's advantages use it",
    "clip_schedule": "not read by the update: the trainer passes each iteration's clip_coef",
}
"""Every field of :class:`~pglab.configs.ppo.OnPolicyHyperparams` the closed form models
at every valid value, and how. A field in neither this table nor
:data:`HYPERPARAMETER_VALUES` is not modelled: any value of it takes autograd."""

HYPERPARAMETER_VALUES: dict[str, tuple[Any, ...]] = {"algo": ("ppo",)}
"""Fields modelled at these values only (``reinforce_raw`` and ``vpg_gae`` take autograd)."""

NETWORKS: dict[type[nn.Module], str] = {CategoricalActorCritic: "categorical", GaussianActorCritic: "gaussian"}
"""The actor-critics it knows and their heads: softmax over discrete actions; a diagonal
Gaussian with a state-independent ``log_std`` (not gSDE's state-dependent one)."""

ACTIVATIONS: tuple[str, ...] = tuple(ACTIVATION_NAMES[cls] for cls in NUMPY_ACTIVATIONS)
"""The hidden activations of the actor and critic ``Linear`` stacks (``tanh``, ``relu``)."""

DTYPES = (torch.float32, torch.float64)
"""Parameter dtypes (on the CPU only: a GPU gains nothing from host arithmetic)."""


def declines(net: nn.Module, hp: Any, device: torch.device) -> str | None:
    """Why the closed form does not model this update (``"<what>: <why>"``, naming the
    config field where one decides it), or ``None`` where it does."""
    return hyperparameters_declined(hp) or network_declined(net, device)


def hyperparameters_declined(hp: Any) -> str | None:
    """The first field of ``hp`` (an ``OnPolicyHyperparams``) outside :data:`HYPERPARAMETERS`
    and :data:`HYPERPARAMETER_VALUES`, as ``"<field>=<value>: ..."``; ``None`` if none."""
    for field in dataclasses.fields(hp):
        value = getattr(hp, field.name)
        if field.name in HYPERPARAMETERS:
            continue
        if field.name in HYPERPARAMETER_VALUES:
            if value not in HYPERPARAMETER_VALUES[field.name]:
                allowed = ", ".join(map(str, HYPERPARAMETER_VALUES[field.name]))
                return f"{field.name}={value}: the closed form models {allowed}"
            continue
        return f"{field.name}={value}: the closed form does not model {field.name}"
    return None


def network_declined(net: nn.Module, device: torch.device | None = None) -> str | None:
    """Why the closed form does not know ``net`` (its type, a layer, an activation, an extra
    parameter, the device or dtype), or ``None``."""
    if isinstance(net, GSDEActorCritic):
        return "use_sde=True: the closed form models a state-independent log_std, gSDE's noise is state-dependent"
    if type(net) not in NETWORKS or not isinstance(net, ActorCritic):
        return f"{type(net).__name__}: the closed form models {', '.join(cls.__name__ for cls in NETWORKS)}"
    parts = {"actor": linear_stack(net.actor), "critic": linear_stack(net.critic)}
    covered = {id(net.log_std)} if isinstance(net, GaussianActorCritic) else set()
    for part, layers in parts.items():
        if layers is None:
            return f"{part}: the closed form models Linear/activation stacks (no LayerNorm, biased layers)"
        for weight, bias, activation in layers:
            if activation is not None and type(activation) not in NUMPY_ACTIVATIONS:
                name = ACTIVATION_NAMES[type(activation)]
                return f"activation={name}: the closed form models {', '.join(ACTIVATIONS)}"
            covered |= {id(weight), id(bias)}
    if covered != {id(p) for p in net.parameters()}:
        return f"{type(net).__name__}: a parameter outside the actor and critic stacks"
    params = list(net.parameters())
    if device is not None and device.type != "cpu" or any(p.device.type != "cpu" for p in params):
        return f"device={device}: the closed form runs on the CPU"
    if any(p.dtype not in DTYPES or p.dtype != params[0].dtype for p in params):
        return f"dtype {sorted({str(p.dtype) for p in params})}: the closed form models one of float32, float64"
    return None


def _stack(mlp: nn.Sequential) -> list[Layer]:
    layers = linear_stack(mlp)
    if layers is None:
        raise ValueError("ClosedFormPPO: not a Linear/activation stack")
    return layers


# --------------------------------------------------------------------------------------
# The gradient
# --------------------------------------------------------------------------------------
def _backward(
    layers: list[ArrayLayer],
    outputs: list[np.ndarray],
    grad_output: np.ndarray,
    targets: list[tuple[np.ndarray, np.ndarray]],
    ones: np.ndarray,
) -> None:
    """Write every layer's weight and bias gradient from ``dL/d(output)`` ``[B, out]`` into
    ``targets`` (per layer, arrays shaped like the weight and the bias). ``outputs``: the
    layers' activations (:func:`~pglab.nets.mlp.numpy_forward`); ``ones``: ``[B]`` of ones."""
    grad = grad_output
    for index in range(len(layers) - 1, -1, -1):
        weight_grad, bias_grad = targets[index]
        np.matmul(grad.T, outputs[index], out=weight_grad)
        # the column sums as a BLAS product 1^T G: ~3x faster than np.add.reduce(axis=0)
        # on [256, 64] (which walks the rows one at a time)
        np.matmul(ones, grad, out=bias_grad)
        if index == 0:
            break
        grad = grad @ layers[index][0]  # dL/da_{index}
        previous = outputs[index]
        if type(layers[index - 1][2]) is nn.Tanh:
            grad -= grad * previous * previous  # g (1 - a^2)
        else:  # relu: a > 0 exactly where z > 0
            grad *= previous > 0


@dataclass
class PPOTerms:
    """Per-sample pieces of one minibatch's loss (NumPy arrays), from which the logged
    metrics are made (:meth:`ClosedFormPPO.summarize`) without spending operations on
    them per step."""

    log_ratio: np.ndarray
    """``log r`` ``[B]``"""
    surrogate: np.ndarray
    """``min(r A, clip(r) A)`` ``[B]``"""
    value_term: np.ndarray
    """``(V - R)^2`` or, with value clipping, ``max((V - R)^2, (V_clip - R)^2)`` ``[B]``"""
    entropy_source: np.ndarray
    """categorical: ``log pi`` ``[B, K]``; Gaussian: ``log sigma`` ``[action_dim]`` (a copy)"""


@dataclass
class NetViews:
    """What :meth:`ClosedFormPPO.gradient` reads and writes: NumPy views (no copies) of
    the parameters and of the tensors their gradients go to."""

    actor: list[ArrayLayer]
    critic: list[ArrayLayer]
    log_std: np.ndarray | None
    """the Gaussian head's ``log_std`` ``[action_dim]`` (None for the categorical head)"""
    actor_grads: list[tuple[np.ndarray, np.ndarray]]
    """per actor layer: (weight gradient, bias gradient)"""
    critic_grads: list[tuple[np.ndarray, np.ndarray]]
    log_std_grad: np.ndarray | None


def _surrogate(
    log_probs: np.ndarray, old_log_probs: np.ndarray, advantages: np.ndarray, clip_coef: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log r, min(r A, clip(r) A), dL_pi/dlog pi)``, each ``[B]``: the surrogate's
    slope ``-r A / B`` where ``min`` picks the unclipped term, else 0."""
    log_ratio = log_probs - old_log_probs
    ratio = np.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = np.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    picks_unclipped = unclipped <= clipped
    grad_log_probs = np.where(picks_unclipped, unclipped, 0.0) * (-1.0 / log_probs.shape[0])
    return log_ratio, np.where(picks_unclipped, unclipped, clipped), grad_log_probs


def _value(
    values: np.ndarray, returns: np.ndarray, old_values: np.ndarray, value_clip_coef: float | None, value_coef: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(value term [B], value_coef * dL_V/dV [B])`` of the plain or the clipped value loss."""
    scale = value_coef / values.shape[0]
    value_error = values - returns
    if value_clip_coef is None:
        return value_error * value_error, value_error * scale
    moved = values - old_values
    clipped_error = old_values + np.clip(moved, -value_clip_coef, value_clip_coef) - returns
    squared, clipped_squared = value_error * value_error, clipped_error * clipped_error
    # max(u^2, w^2): the larger branch's slope; w moves with V only inside the clip range
    inside = np.abs(moved) <= value_clip_coef
    grad_values = np.where(squared >= clipped_squared, value_error, clipped_error * inside)
    grad_values *= scale
    return np.maximum(squared, clipped_squared), grad_values


class ClosedFormPPO:
    """The closed-form gradient of PPO's loss for one network (see :func:`declines`).

    ``gradient(obs, actions, old_log_probs, advantages, returns, old_values, clip_coef=...,
    value_clip_coef=..., value_coef=..., entropy_coef=..., views=...) -> PPOTerms`` writes
    the gradient of :func:`~pglab.losses.ppo.ppo_clip_loss` on this minibatch into the
    gradient tensors of ``views`` (default: every parameter's ``.grad``);
    ``summarize(terms, clip_coef=..., entropy_coef=..., value_coef=...)`` makes that
    function's metrics (torch tensors) from the terms of one or more minibatches
    (sample-weighted means).
    ``advantages`` are used as given (normalise them first).

    Shapes: ``obs [B, obs_dim]`` (cast to the parameters' dtype), ``actions [B]`` int
    (categorical) or ``[B, action_dim]`` float (Gaussian), the rest float ``[B]``; torch
    tensors on the CPU or NumPy arrays.
    """

    def __init__(self, net: nn.Module):
        reason = network_declined(net)
        if reason is not None or not isinstance(net, ActorCritic):
            raise ValueError(f"ClosedFormPPO: {reason}")
        self.head = NETWORKS[type(net)]
        self.actor, self.critic = _stack(net.actor), _stack(net.critic)
        self.log_std: nn.Parameter | None = net.log_std if isinstance(net, GaussianActorCritic) else None
        self.dtype = self.actor[0][0].detach().numpy().dtype
        self._ones: dict[int, np.ndarray] = {}  # ones [B] per minibatch size (bias gradients)

    def parameters(self) -> list[torch.Tensor]:
        """Every parameter the gradient is written for, actor layers first, then critic, then ``log_std``."""
        params = [p for layers in (self.actor, self.critic) for weight, bias, _ in layers for p in (weight, bias)]
        return params + ([self.log_std] if self.log_std is not None else [])

    def views(self, gradient_of: Callable[[torch.Tensor], torch.Tensor] | None = None) -> NetViews:
        """NumPy views of every parameter and of ``gradient_of(param)``, the CPU tensor (shaped
        like the parameter) its gradient is written into; default: its ``.grad``,
        allocated (zero) where missing. The views stay valid while nothing replaces those tensors."""

        def default(param: torch.Tensor) -> torch.Tensor:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            return param.grad

        target = gradient_of or default

        def grads(layers: list[Layer]) -> list[tuple[np.ndarray, np.ndarray]]:
            return [(target(weight).numpy(), target(bias).numpy()) for weight, bias, _ in layers]

        log_std = None if self.log_std is None else self.log_std.detach().numpy()
        return NetViews(
            numpy_layers(self.actor),
            numpy_layers(self.critic),
            log_std,
            grads(self.actor),
            grads(self.critic),
            None if self.log_std is None else target(self.log_std).numpy(),
        )

    def _head_log_probs(self, head: np.ndarray, actions: np.ndarray, views: NetViews) -> tuple[np.ndarray, tuple]:
        """``log pi(a|s)`` ``[B]`` and what the head's gradient needs of the forward pass."""
        if self.head == "categorical":
            log_pi = numpy_log_softmax(head)
            index = actions.astype(np.int64, copy=False)
            return log_pi[np.arange(head.shape[0]), index], (log_pi, index)
        assert views.log_std is not None
        inverse_std = np.exp(-views.log_std)
        scaled = (actions - head) * inverse_std  # u = (a - mu) / sigma
        return numpy_gaussian_log_prob(scaled, views.log_std), (scaled, inverse_std)

    def _head_gradient(
        self, cache: tuple, grad_log_probs: np.ndarray, entropy_coef: float, views: NetViews
    ) -> np.ndarray:
        """``dL/d(head output)`` ``[B, A]``; the Gaussian head also writes ``dL/dlog sigma``."""
        batch_size = grad_log_probs.shape[0]
        if self.head == "categorical":
            log_pi, index = cache
            pi = np.exp(log_pi)
            # (onehot(a) - pi) g + (c_H / B) pi (log pi + H)
            grad_head = pi * -grad_log_probs[:, None]
            grad_head[np.arange(batch_size), index] += grad_log_probs
            if entropy_coef != 0.0:
                entropy = -np.add.reduce(pi * log_pi, axis=-1, keepdims=True)
                grad_head += (entropy_coef / batch_size) * pi * (log_pi + entropy)
            return grad_head
        scaled, inverse_std = cache
        # dL/dlog sigma = sum_b g_b (u_b^2 - 1) - c_H
        np.subtract(
            np.add.reduce(grad_log_probs[:, None] * (scaled * scaled - 1.0), axis=0),
            entropy_coef,
            out=views.log_std_grad,
        )
        return (grad_log_probs[:, None] * scaled) * inverse_std

    def gradient(
        self,
        obs,
        actions,
        old_log_probs,
        advantages,
        returns,
        old_values,
        *,
        clip_coef: float,
        value_clip_coef: float | None,
        value_coef: float,
        entropy_coef: float,
        views: NetViews | None = None,
    ) -> PPOTerms:
        """``views`` (optional): the NumPy views of the parameters and of the gradient
        tensors to write into (:meth:`views`); made afresh by default."""
        if views is None:
            views = self.views()
        obs, actions, old_log_probs, advantages, returns, old_values = (
            value.numpy() if isinstance(value, torch.Tensor) else value
            for value in (obs, actions, old_log_probs, advantages, returns, old_values)
        )
        flat = obs.reshape(obs.shape[0], -1)
        if flat.dtype != self.dtype:  # as ActorCritic._flat
            flat = flat.astype(self.dtype)
        actor_out, critic_out = numpy_forward(views.actor, flat), numpy_forward(views.critic, flat)
        log_probs, cache = self._head_log_probs(actor_out[-1], actions, views)
        log_ratio, surrogate, grad_log_probs = _surrogate(log_probs, old_log_probs, advantages, clip_coef)
        value_term, grad_values = _value(critic_out[-1][:, 0], returns, old_values, value_clip_coef, value_coef)
        grad_head = self._head_gradient(cache, grad_log_probs, entropy_coef, views)
        ones = self._ones.get(flat.shape[0])
        if ones is None:
            ones = self._ones[flat.shape[0]] = np.ones(flat.shape[0], dtype=self.dtype)
        _backward(views.actor, actor_out, grad_head, views.actor_grads, ones)
        _backward(views.critic, critic_out, grad_values[:, None], views.critic_grads, ones)
        entropy_source = cache[0] if views.log_std is None else views.log_std.copy()
        return PPOTerms(log_ratio, surrogate, value_term, entropy_source)

    @torch.no_grad()
    def summarize(
        self, terms: list[PPOTerms], *, clip_coef: float, value_coef: float, entropy_coef: float
    ) -> dict[str, torch.Tensor]:
        """:func:`~pglab.losses.ppo.ppo_clip_loss`'s metrics averaged over the minibatches
        of ``terms``, as the autograd path averages its per-minibatch metrics (0-d tensors
        on the CPU)."""
        log_ratio = torch.from_numpy(np.concatenate([t.log_ratio for t in terms]))
        ratio = log_ratio.exp()
        mean = _minibatch_mean([t.log_ratio.shape[0] for t in terms], log_ratio.dtype)
        policy_loss = -mean(torch.from_numpy(np.concatenate([t.surrogate for t in terms])))
        value_loss = 0.5 * mean(torch.from_numpy(np.concatenate([t.value_term for t in terms])))
        if self.head == "categorical":
            log_pi = torch.from_numpy(np.concatenate([t.entropy_source for t in terms]))
            mean_entropy = mean(-(log_pi.exp() * log_pi).sum(-1))
        else:  # H = sum_i (1/2 + log sqrt(2 pi) + log sigma_i), one value per minibatch
            per_minibatch = (
                torch.from_numpy(np.stack([t.entropy_source for t in terms])).sum(-1)
                + (0.5 + LOG_SQRT_2PI) * terms[0].entropy_source.shape[0]
            )
            mean_entropy = per_minibatch.mean()
        entropy_loss = -entropy_coef * mean_entropy
        return {
            "loss": policy_loss + value_coef * value_loss + entropy_loss,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": entropy_loss,
            "stats/entropy": mean_entropy,
            "stats/approx_kl": mean((ratio - 1.0) - log_ratio),
            "stats/clipfrac": mean(((ratio - 1.0).abs() > clip_coef).to(log_ratio.dtype)),
        }

    def bind(
        self, obs: torch.Tensor, actions: torch.Tensor, samples: Any, views: NetViews, flat_grad: np.ndarray
    ) -> BoundPPOGradient:
        """This gradient over one rollout: ``obs [M, ...]``, ``actions [M, ...]`` and
        ``samples`` with ``old_log_probs``, ``advantages``, ``returns``, ``old_values``
        ``[M]`` (an :class:`~pglab.algos.onpolicy.OnPolicyBatch`). Gradients go to ``views``,
        whose gradient arrays are slices of ``flat_grad`` (the one array the clip scales)."""
        return BoundPPOGradient(self, obs, actions, samples, views, flat_grad)


class BoundPPOGradient:
    """:class:`ClosedFormPPO` over one rollout's samples, selected by minibatch index
    (the ``closed_form`` of :func:`pglab.algos.onpolicy.onpolicy_update`). It also
    normalises each minibatch's advantages, as
    :func:`~pglab.estimators.normalize_advantages` does (Bessel-corrected std + 1e-8),
    and clips the gradient (:meth:`clip_gradient`)."""

    def __init__(
        self,
        closed_form: ClosedFormPPO,
        obs: torch.Tensor,
        actions: torch.Tensor,
        samples: Any,
        views: NetViews,
        flat_grad: np.ndarray,
    ):
        self.closed_form, self.views, self.flat_grad = closed_form, views, flat_grad
        self.obs = obs.reshape(obs.shape[0], -1).numpy()
        if self.obs.dtype != closed_form.dtype:  # cast once per rollout, not per minibatch
            self.obs = self.obs.astype(closed_form.dtype)
        self.actions = actions.numpy()
        # old log-probs, returns and old values in one [M, 3] table: one gather per minibatch, not three
        self.table = np.stack(
            [samples.old_log_probs.numpy(), samples.returns.numpy(), samples.old_values.numpy()], axis=1
        )
        self.advantages = samples.advantages.numpy()
        self._whole: dict[bool, tuple[np.ndarray, ...]] = {}  # the whole-rollout minibatch's arrays, made once

    def gradient(self, index: torch.Tensor, hp: Any) -> PPOTerms:
        """The gradient on the minibatch ``index`` ``[B]``: distinct rows (a slice of a
        permutation of the rollout, as :func:`~pglab.algos.onpolicy.minibatch_indices` makes)."""
        if index.shape[0] == self.advantages.shape[0]:
            # One minibatch per epoch: the rows are the whole rollout, and the loss is a mean
            # over them, so their order changes nothing but float rounding. The rollout's
            # own arrays (and its normalised advantages, made once) stand in for the
            # gathered copies: five gathers and the normalisation fewer per epoch.
            normalize = bool(hp.normalize_advantages)
            if normalize not in self._whole:
                advantages = _normalized(self.advantages) if normalize else self.advantages
                self._whole[normalize] = (self.obs, self.actions, *self.table.T, advantages)
            obs, actions, old_log_probs, returns, old_values, advantages = self._whole[normalize]
        else:
            rows = index.numpy()
            obs, actions = self.obs[rows], self.actions[rows]
            old_log_probs, returns, old_values = self.table[rows].T
            advantages = _normalized(self.advantages[rows]) if hp.normalize_advantages else self.advantages[rows]
        return self.closed_form.gradient(
            obs,
            actions,
            old_log_probs,
            advantages,
            returns,
            old_values,
            clip_coef=hp.clip_coef,
            value_clip_coef=hp.value_clip_coef,
            value_coef=hp.value_coef,
            entropy_coef=hp.entropy_coef,
            views=self.views,
        )

    def clip_gradient(self, max_norm: float) -> float:
        """:func:`clip_flat_gradient` on the flat gradient; returns the pre-clip norm."""
        return clip_flat_gradient(self.flat_grad, max_norm)

    def summarize(self, terms: list[PPOTerms], hp: Any) -> dict[str, torch.Tensor]:
        return self.closed_form.summarize(
            terms, clip_coef=hp.clip_coef, value_coef=hp.value_coef, entropy_coef=hp.entropy_coef
        )


def _minibatch_mean(sizes: list[int], dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean over minibatches of the per-minibatch means, for per-sample values of
    minibatches of ``sizes`` concatenated: the plain mean where the sizes are equal, else
    a weighted sum (each sample weighs ``1 / (len(sizes) * its minibatch's size)``)."""
    if min(sizes) == max(sizes):
        return torch.mean
    weights = torch.from_numpy(np.repeat([1.0 / (len(sizes) * size) for size in sizes], sizes)).to(dtype)
    return lambda values: (values * weights).sum()


def clip_flat_gradient(grad: np.ndarray, max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_``'s arithmetic on one gradient array, in place:
    ``g *= min(1, max_norm / (||g|| + 1e-6))`` (a NaN norm makes every element NaN, as
    there); returns the pre-clip norm. Why not ``clip_grad_norm_`` itself: its per-call
    overhead (~80 us) is a sixth of a classic-control step; this costs ~3 us."""
    norm = np.sqrt(np.dot(grad, grad))
    scale = max_norm / (norm + 1e-6)
    if not scale >= 1.0:  # min(scale, 1) = 1 changes nothing
        grad *= scale
    return float(norm)


def _normalized(advantages: np.ndarray) -> np.ndarray:
    """``(A - mean) / (std + 1e-8)`` with Bessel's std, as
    :func:`~pglab.estimators.normalize_advantages` (centred only for one sample)."""
    count = advantages.shape[0]
    centred = advantages - np.add.reduce(advantages) / count
    if count < 2:
        return centred
    return centred / (np.sqrt(np.dot(centred, centred) / (count - 1)) + 1e-8)


_BLAS_CONTROLLER = None


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """NumPy's BLAS limited to ``threads`` threads inside the block (threadpoolctl): the
    closed form's matrix products then use what torch's ``--threads`` allows, not every
    core (which would also make one-thread speed comparisons meaningless)."""
    global _BLAS_CONTROLLER
    from threadpoolctl import ThreadpoolController

    if _BLAS_CONTROLLER is None:  # scanning the loaded libraries costs ~ms: once per process
        _BLAS_CONTROLLER = ThreadpoolController()
    with _BLAS_CONTROLLER.limit(limits=max(int(threads), 1), user_api="blas"):
        yield
