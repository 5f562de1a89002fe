"""Multi-layer perceptrons."""
from __future__ import annotations

from collections.abc import Sequence

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
        raise ValueError(f"activation={name!r}: must be one of {', '.join(ACTIVATIONS)}")
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
