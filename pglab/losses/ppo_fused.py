"""PPO's clipped loss and its gradient for a plain MLP actor-critic, in closed form, in NumPy.

:func:`pglab.losses.ppo.ppo_clip_loss` followed by ``loss.backward()`` is the reference; this
module computes the same loss *and* the gradient of every parameter with a handful of
matrix products, without building an autograd graph. Why: with classic-control networks
(two 64-unit layers, minibatches of 64-256 rows) a PPO gradient step is almost all
per-operation dispatch, not arithmetic. Autograd records and replays ~100 small
operations per step; the closed form needs about 40 and no graph, and runs them in NumPy
on views of the parameters (a NumPy operation on these sizes costs ~1 us of overhead,
a torch one ~4 us). Measured on one CPU thread, the RL-Zoo CartPole run's whole update
(7,820 gradient steps on 256 rows, the clip and Adam included): 11.6 s with autograd,
6.8 s with this closed form written in torch, 4.4 s in NumPy with
:class:`~pglab.algos.flat_adam.FlatAdam` (``bench/ppo_vs_sb3.py``, docs/ppo.md;
``tests/test_ppo_fused.py`` checks every gradient and metric against autograd).

Supported: :class:`~pglab.nets.actor_critic.CategoricalActorCritic` and
:class:`~pglab.nets.actor_critic.GaussianActorCritic` on the CPU in float32 whose actor and
critic are ``Linear``/``Tanh``/``ReLU`` stacks (any depth and widths), with or without value
clipping and the entropy bonus. :func:`fused_ppo_gradient` returns ``None`` for anything
else (gSDE, LayerNorm, the Nature CNN, other activations, a GPU, float64) and the trainer
falls back to autograd. The matrix products run on NumPy's BLAS, limited to torch's
intra-op thread count while an update runs (:func:`blas_threads`).

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from pglab.nets.actor_critic import (
    _LOG_SQRT_2PI,
    CategoricalActorCritic,
    GaussianActorCritic,
    numpy_gaussian_log_prob,
    numpy_log_softmax,
)

# (weight, bias, activation name or None for the output layer)
Layer = tuple[nn.Parameter, nn.Parameter, str | None]
# the same with NumPy views of the weight and bias (they share memory with the parameters,
# so an optimiser step in torch is seen here without a copy)
ArrayLayer = tuple[np.ndarray, np.ndarray, str | None]


def _mlp_layers(mlp: nn.Sequential) -> list[Layer] | None:
    """The ``(weight, bias, activation)`` list of a ``Linear -> Tanh|ReLU -> ... -> Linear``
    stack, or ``None`` if it is anything else."""
    layers: list[list] = []
    for module in mlp:
        if type(module) is nn.Linear and module.bias is not None and (not layers or layers[-1][2] is not None):
            layers.append([module.weight, module.bias, None])
        elif type(module) in (nn.Tanh, nn.ReLU) and layers and layers[-1][2] is None:
            layers[-1][2] = "tanh" if type(module) is nn.Tanh else "relu"
        else:
            return None
    if not layers or layers[-1][2] is not None or any(act is None for _, _, act in layers[:-1]):
        return None
    return [tuple(layer) for layer in layers]


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor (no copy)."""
    return tensor.detach().numpy()


def _views(layers: list[Layer]) -> list[ArrayLayer]:
    return [(_array(weight), _array(bias), activation) for weight, bias, activation in layers]


def _forward(layers: list[ArrayLayer], inputs: np.ndarray) -> list[np.ndarray]:
    """Activations ``[inputs, a_1, ..., a_{L-1}, output]`` of the MLP."""
    outputs = [inputs]
    for weight, bias, activation in layers:
        out = outputs[-1] @ weight.T
        out += bias
        if activation == "tanh":
            np.tanh(out, out=out)
        elif activation == "relu":
            np.maximum(out, 0.0, out=out)
        outputs.append(out)
    return outputs


def _backward(
    layers: list[ArrayLayer],
    outputs: list[np.ndarray],
    grad_output: np.ndarray,
    targets: list[tuple[np.ndarray, np.ndarray]],
    ones: np.ndarray,
) -> None:
    """Write every layer's weight and bias gradient from ``dL/d(output)`` ``[B, out]`` into
    ``targets`` (per layer, arrays shaped like the weight and the bias: views of ``.grad``).
    ``ones``: float32 ``[B]`` of ones."""
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
        if layers[index - 1][2] == "tanh":
            grad -= grad * previous * previous  # g (1 - a^2)
        else:  # relu: a > 0 exactly where z > 0
            grad *= previous > 0


def _grad_views(layers: list[Layer]) -> list[tuple[np.ndarray, np.ndarray]]:
    """NumPy views of every layer's ``.grad`` (allocated, zero, where there is none yet)."""
    views = []
    for weight, bias, _ in layers:
        pair = []
        for param in (weight, bias):
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            pair.append(_array(param.grad))
        views.append(tuple(pair))
    return views


@dataclass
class PPOTerms:
    """Per-sample pieces of one minibatch's loss (NumPy arrays), from which the logged
    metrics are made (:meth:`FusedPPOGradient.summarize`) without spending operations on
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
    """What :meth:`FusedPPOGradient.gradient` reads and writes: NumPy views (no copies) of
    the parameters and of their ``.grad`` tensors."""

    actor: list[ArrayLayer]
    critic: list[ArrayLayer]
    log_std: np.ndarray | None
    """the Gaussian head's ``log_std`` ``[action_dim]`` (None for the categorical head)"""
    actor_grads: list[tuple[np.ndarray, np.ndarray]]
    """per actor layer: (weight gradient, bias gradient)"""
    critic_grads: list[tuple[np.ndarray, np.ndarray]]
    log_std_grad: np.ndarray | None


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


class FusedPPOGradient:
    """The closed-form gradient of PPO's loss for one network.

    ``gradient(obs, actions, old_log_probs, advantages, returns, old_values, clip_coef=...,
    value_clip_coef=..., value_coef=..., entropy_coef=...) -> PPOTerms`` sets ``.grad`` of
    every parameter to the gradient of :func:`~pglab.losses.ppo.ppo_clip_loss` on this
    minibatch; ``summarize(terms, clip_coef=..., entropy_coef=..., value_coef=...)`` makes
    that function's metrics (torch tensors) from the terms of one or more minibatches
    (sample-weighted means: the mean over minibatches when they are of equal size); calling
    the object does both for one minibatch. ``advantages`` are used as given (normalise
    them first).

    Shapes: ``obs [B, obs_dim]`` (cast to float32 as the network does), ``actions [B]`` int
    (categorical) or ``[B, action_dim]`` float (Gaussian), the rest float ``[B]``; torch
    tensors on the CPU or NumPy arrays.
    """

    def __init__(self, actor: list[Layer], critic: list[Layer], head: str, log_std: nn.Parameter | None):
        self.actor, self.critic, self.head, self.log_std = actor, critic, head, log_std
        self._ones: dict[int, np.ndarray] = {}  # float32 ones [B] per minibatch size (bias gradients)

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
        """``views`` (optional): the NumPy views of the parameters and of the ``.grad`` to
        write into (:meth:`views`); made afresh by default."""
        if views is None:
            views = self.views()
        obs, actions, old_log_probs, advantages, returns, old_values = (
            _array(value) if isinstance(value, torch.Tensor) else value
            for value in (obs, actions, old_log_probs, advantages, returns, old_values)
        )
        batch_size = obs.shape[0]
        flat = obs.reshape(batch_size, -1)
        if flat.dtype != np.float32:  # as ActorCritic._flat
            flat = flat.astype(np.float32)
        actor_out = _forward(views.actor, flat)
        critic_out = _forward(views.critic, flat)
        head, values = actor_out[-1], critic_out[-1][:, 0]
        rows = np.arange(batch_size)

        if self.head == "categorical":
            log_pi = numpy_log_softmax(head)
            pi = np.exp(log_pi)
            index = actions.astype(np.int64, copy=False)
            log_probs = log_pi[rows, index]
            entropy_source = log_pi
        else:
            log_std = views.log_std
            inverse_std = np.exp(-log_std)
            scaled = (actions - head) * inverse_std  # u = (a - mu) / sigma
            log_probs = numpy_gaussian_log_prob(scaled, log_std)
            entropy_source = log_std.copy()

        # -- the clipped surrogate and the value error (ppo_clip_loss's formulas) ----------
        log_ratio = log_probs - old_log_probs
        ratio = np.exp(log_ratio)
        unclipped = ratio * advantages
        clipped = np.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
        value_error = values - returns
        if value_clip_coef is None:
            value_term = value_error * value_error
            grad_values = value_error * np.float32(value_coef / batch_size)
        else:
            moved = values - old_values
            clipped_error = old_values + np.clip(moved, -value_clip_coef, value_clip_coef) - returns
            squared, clipped_squared = value_error * value_error, clipped_error * clipped_error
            value_term = np.maximum(squared, clipped_squared)
            # max(u^2, w^2): the larger branch's slope; w moves with V only inside the clip range
            inside = np.abs(moved) <= value_clip_coef
            grad_values = np.where(squared >= clipped_squared, value_error, clipped_error * inside)
            grad_values *= np.float32(value_coef / batch_size)

        # -- dL/dlog pi(a|s): the surrogate's slope where min() picks the unclipped term ----
        picks_unclipped = unclipped <= clipped
        grad_log_probs = np.where(picks_unclipped, unclipped, np.float32(0.0)) * np.float32(-1.0 / batch_size)
        if self.head == "categorical":
            # (onehot(a) - pi) g + (c_H / B) pi (log pi + H)
            grad_head = pi * -grad_log_probs[:, None]
            grad_head[rows, index] += grad_log_probs
            if entropy_coef != 0.0:
                entropy = -np.add.reduce(pi * log_pi, axis=-1, keepdims=True)
                grad_head += np.float32(entropy_coef / batch_size) * pi * (log_pi + entropy)
        else:
            grad_head = (grad_log_probs[:, None] * scaled) * inverse_std
            # sum_b g_b (u_b^2 - 1) - c_H
            np.subtract(
                np.add.reduce(grad_log_probs[:, None] * (scaled * scaled - 1.0), axis=0),
                np.float32(entropy_coef),
                out=views.log_std_grad,
            )
        ones = self._ones.get(batch_size)
        if ones is None:
            ones = self._ones[batch_size] = np.ones(batch_size, dtype=np.float32)
        _backward(views.actor, actor_out, grad_head, views.actor_grads, ones)
        _backward(views.critic, critic_out, grad_values[:, None], views.critic_grads, ones)
        return PPOTerms(log_ratio, np.where(picks_unclipped, unclipped, clipped), value_term, entropy_source)

    def views(self) -> NetViews:
        """NumPy views of every parameter and its ``.grad`` (allocated, zero, where missing).
        They stay valid while nothing replaces the tensors (an optimiser's ``zero_grad()``
        replaces the ``.grad``: make them again after one)."""
        log_std = log_std_grad = None
        if self.log_std is not None:
            if self.log_std.grad is None:
                self.log_std.grad = torch.zeros_like(self.log_std)
            log_std, log_std_grad = _array(self.log_std), _array(self.log_std.grad)
        return NetViews(
            _views(self.actor),
            _views(self.critic),
            log_std,
            _grad_views(self.actor),
            _grad_views(self.critic),
            log_std_grad,
        )

    @torch.no_grad()
    def summarize(
        self, terms: list[PPOTerms], *, clip_coef: float, value_coef: float, entropy_coef: float
    ) -> dict[str, torch.Tensor]:
        """:func:`~pglab.losses.ppo.ppo_clip_loss`'s metrics over the samples of ``terms``
        (float32 0-d tensors on the CPU)."""
        log_ratio = torch.from_numpy(np.concatenate([t.log_ratio for t in terms]))
        ratio = log_ratio.exp()
        policy_loss = -torch.from_numpy(np.concatenate([t.surrogate for t in terms])).mean()
        value_loss = 0.5 * torch.from_numpy(np.concatenate([t.value_term for t in terms])).mean()
        if self.head == "categorical":
            log_pi = torch.from_numpy(np.concatenate([t.entropy_source for t in terms]))
            mean_entropy = -(log_pi.exp() * log_pi).sum(-1).mean()
        else:  # H = sum_i (1/2 + log sqrt(2 pi) + log sigma_i), one value per minibatch
            sizes = torch.tensor([float(t.log_ratio.shape[0]) for t in terms])
            per_minibatch = (
                torch.from_numpy(np.stack([t.entropy_source for t in terms])).sum(-1)
                + (0.5 + _LOG_SQRT_2PI) * terms[0].entropy_source.shape[0]
            )
            mean_entropy = (per_minibatch * sizes).sum() / sizes.sum()
        entropy_loss = -entropy_coef * mean_entropy
        return {
            "loss": policy_loss + value_coef * value_loss + entropy_loss,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": entropy_loss,
            "stats/entropy": mean_entropy,
            "stats/approx_kl": ((ratio - 1.0) - log_ratio).mean(),
            "stats/clipfrac": ((ratio - 1.0).abs() > clip_coef).to(log_ratio.dtype).mean(),
        }

    def bind(self, obs: torch.Tensor, actions: torch.Tensor, samples: Any) -> BoundPPOGradient:
        """This gradient over one rollout: ``obs [M, ...]``, ``actions [M, ...]`` and
        ``samples`` with ``old_log_probs``, ``advantages``, ``returns``, ``old_values``
        ``[M]`` (an :class:`~pglab.algos.onpolicy.OnPolicyBatch`)."""
        return BoundPPOGradient(self, obs, actions, samples)

    def __call__(
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
    ) -> dict[str, torch.Tensor]:
        """:meth:`gradient` and :meth:`summarize` on one minibatch."""
        terms = self.gradient(
            obs,
            actions,
            old_log_probs,
            advantages,
            returns,
            old_values,
            clip_coef=clip_coef,
            value_clip_coef=value_clip_coef,
            value_coef=value_coef,
            entropy_coef=entropy_coef,
        )
        return self.summarize([terms], clip_coef=clip_coef, value_coef=value_coef, entropy_coef=entropy_coef)


class BoundPPOGradient:
    """:class:`FusedPPOGradient` over one rollout's samples, selected by minibatch index
    (the ``fused_gradient`` of :func:`pglab.algos.onpolicy.onpolicy_update`). It also
    normalises each minibatch's advantages, as
    :func:`~pglab.estimators.normalize_advantages` does (Bessel-corrected std + 1e-8)."""

    def __init__(self, closed_form: FusedPPOGradient, obs: torch.Tensor, actions: torch.Tensor, samples: Any):
        self.closed_form = closed_form
        self.obs = _array(obs.reshape(obs.shape[0], -1))
        if self.obs.dtype != np.float32:  # cast once per rollout, not per minibatch
            self.obs = self.obs.astype(np.float32)
        self.actions = _array(actions)
        # old log-probs, returns and old values in one [M, 3] table: one gather per minibatch, not three
        self.table = np.stack(
            [_array(samples.old_log_probs), _array(samples.returns), _array(samples.old_values)], axis=1
        )
        self.advantages = _array(samples.advantages)
        # the weights, and where the gradients go: the parameters' .grad as they are now (a
        # FlatAdam's flat buffer, when the trainer uses one); made once per rollout
        self.views = closed_form.views()
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
                advantages = self._normalized(self.advantages) if normalize else self.advantages
                self._whole[normalize] = (self.obs, self.actions, *self.table.T, advantages)
            obs, actions, old_log_probs, returns, old_values, advantages = self._whole[normalize]
        else:
            rows = _array(index)
            obs, actions = self.obs[rows], self.actions[rows]
            old_log_probs, returns, old_values = self.table[rows].T
            advantages = self._normalized(self.advantages[rows]) if hp.normalize_advantages else self.advantages[rows]
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

    @staticmethod
    def _normalized(advantages: np.ndarray) -> np.ndarray:
        """``(A - mean) / (std + 1e-8)`` with Bessel's std, as
        :func:`~pglab.estimators.normalize_advantages` (centred only for one sample)."""
        count = advantages.shape[0]
        centred = advantages - np.add.reduce(advantages) / count
        if count < 2:
            return centred
        return centred / (np.sqrt(np.dot(centred, centred) / (count - 1)) + np.float32(1e-8))

    def summarize(self, terms: list[PPOTerms], hp: Any) -> dict[str, torch.Tensor]:
        return self.closed_form.summarize(
            terms, clip_coef=hp.clip_coef, value_coef=hp.value_coef, entropy_coef=hp.entropy_coef
        )


def fused_ppo_gradient(net: nn.Module) -> FusedPPOGradient | None:
    """The closed-form PPO gradient of ``net``, or ``None`` where only autograd applies."""
    if type(net) is CategoricalActorCritic:
        head, log_std = "categorical", None
    elif type(net) is GaussianActorCritic:
        head, log_std = "gaussian", net.log_std
    else:
        return None
    actor, critic = _mlp_layers(net.actor), _mlp_layers(net.critic)
    if actor is None or critic is None:
        return None
    covered = {id(p) for layers in (actor, critic) for weight, bias, _ in layers for p in (weight, bias)}
    if log_std is not None:
        covered.add(id(log_std))
    if covered != {id(p) for p in net.parameters()}:  # a parameter the closed form does not know
        return None
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in net.parameters()):
        return None  # NumPy works on the host, in float32; a GPU gains nothing from it
    return FusedPPOGradient(actor, critic, head, log_std)
