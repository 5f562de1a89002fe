"""Multi-layer perceptrons."""

from __future__ import annotations

from collections.abc import Sequence

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


FUNCTIONAL_ACTIVATIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.SiLU: nn.functional.silu}


def mlp_forward(mlp: nn.Sequential, inputs: torch.Tensor) -> torch.Tensor:
    """``mlp(inputs)`` without ``nn.Module.__call__`` per layer: the same ops (``F.linear``,
    ``torch.tanh``, ...) in the same order, so the result is bit-identical.

    Why: for the small MLPs of classic-control PPO the per-layer module dispatch (hooks,
    ``__getattr__``, ``Sequential`` iteration) costs about as much as the arithmetic, and
    the rollout calls the networks once per environment step. Layers of any other type
    are called normally.
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
