"""Multi-layer perceptrons: the module, its forward pass in torch and in NumPy.

An MLP is a ``Linear -> [LayerNorm] -> activation -> ... -> Linear`` ``nn.Sequential``
(:func:`build_mlp`). Its forward pass is written twice, once per array library:

* :func:`mlp_forward`: torch, any ``nn.Sequential`` (what the modules compute, with less
  dispatch);
* :func:`numpy_forward`: NumPy, for a plain ``Linear``/``Tanh``/``ReLU`` stack as
  :func:`linear_stack` describes it. The rollout's NumPy step and the closed-form PPO
  gradient (:mod:`pglab.losses.ppo_fused`) both run it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation: must be one of {', '.join(ACTIVATIONS)} (got {name!r})")
    return ACTIVATIONS[name]


def build_mlp(
    in_dim: int,
    hidden_dims: Sequence[int],
    out_dim: int,
    *,
    activation: str = "tanh",
    layer_norm: bool = False,
) -> nn.Sequential:
    """``Linear -> [LayerNorm] -> act`` per hidden size, then a final ``Linear``."""
    act = activation_class(activation)
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_dims:
        layers.append(nn.Linear(width, hidden))
        if layer_norm:
            layers.append(nn.LayerNorm(hidden))
        layers.append(act())
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


# The activations' functional forms, by module type (what mlp_forward calls directly).
FUNCTIONAL_ACTIVATIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.SiLU: nn.functional.silu}
ACTIVATION_NAMES = {cls: name for name, cls in ACTIVATIONS.items()}


def mlp_forward(mlp: Iterable[nn.Module], inputs: torch.Tensor) -> torch.Tensor:
    """``mlp(inputs)`` without ``nn.Module.__call__`` per layer: the same ops (``F.linear``,
    ``torch.tanh``, ...) in the same order, so the result is bit-identical.

    Why: for the small MLPs of classic-control PPO the per-layer module dispatch (hooks,
    ``__getattr__``, ``Sequential`` iteration) costs about as much as the arithmetic.
    Layers of any other type are called normally.
    """
    out = inputs
    for layer in mlp:
        if type(layer) is nn.Linear:
            out = nn.functional.linear(out, layer.weight, layer.bias)
        elif type(layer) in FUNCTIONAL_ACTIVATIONS:
            out = FUNCTIONAL_ACTIVATIONS[type(layer)](out)
        else:
            out = layer(out)
    return out


Layer = tuple[torch.Tensor, torch.Tensor, nn.Module | None]
"""``(weight [out, in], bias [out], activation)``: one ``Linear`` and the activation
module after it (``None`` after the output layer)."""


def linear_stack(mlp: Iterable[nn.Module]) -> list[Layer] | None:
    """The :data:`Layer` list of a ``Linear -> act -> ... -> Linear`` stack (biased
    ``Linear`` layers, each hidden one followed by one activation of :data:`ACTIVATIONS`),
    or ``None`` for any other layout (LayerNorm, a missing bias, two activations in a row,
    an activation last)."""
    layers: list[list] = []
    for module in mlp:
        if type(module) is nn.Linear and module.bias is not None and (not layers or layers[-1][2] is not None):
            layers.append([module.weight, module.bias, None])
        elif type(module) in ACTIVATION_NAMES and layers and layers[-1][2] is None:
            layers[-1][2] = module
        else:
            return None
    if not layers or layers[-1][2] is not None or any(activation is None for _, _, activation in layers[:-1]):
        return None
    return [(weight, bias, activation) for weight, bias, activation in layers]


def _relu(values: np.ndarray, out: np.ndarray) -> None:
    np.maximum(values, 0.0, out=out)


# the activations numpy_forward knows, in place: f(x, out)
NUMPY_ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray, np.ndarray], Any]] = {nn.Tanh: np.tanh, nn.ReLU: _relu}

ArrayLayer = tuple[np.ndarray, np.ndarray, nn.Module | None]
"""A :data:`Layer` as NumPy arrays (views of the parameters or copies)."""


def numpy_layers(layers: list[Layer]) -> list[ArrayLayer]:
    """NumPy views (no copies) of CPU layers: an optimiser step in torch is seen without a copy."""
    return [(weight.detach().numpy(), bias.detach().numpy(), activation) for weight, bias, activation in layers]


def numpy_forward(layers: list[ArrayLayer], inputs: np.ndarray) -> list[np.ndarray]:
    """The MLP's activations ``[inputs, a_1, ..., a_{L-1}, output]``:
    ``z = a_prev W^T + b``, ``a = act(z)`` per layer (no activation after the last).

    Why NumPy: on classic-control sizes (rows of 4-256, widths of 64) an operation's
    overhead is ~1 us in NumPy against ~4 us in torch, and the arithmetic is negligible.
    ``np.dot`` rather than ``@``: the same BLAS product, bit for bit, without the ufunc
    machinery of ``matmul`` (4 rows x 128 units: 6.3 us against 9.9)."""
    outputs = [inputs]
    for weight, bias, activation in layers:
        out = np.dot(outputs[-1], weight.T)
        out += bias
        if activation is not None:
            NUMPY_ACTIVATIONS[type(activation)](out, out)
        outputs.append(out)
    return outputs
