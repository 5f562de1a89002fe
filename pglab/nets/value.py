"""State-value network ``V(s)``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pglab.contracts import check_tensor
from pglab.nets.mlp import build_mlp


class ValueNetwork(nn.Module):
    """``state -> hidden (activation) -> 1``; ``forward`` returns ``V(s)`` as ``[B]``.

    Args:
        state_dim: size of ``s``. hidden_dims: hidden sizes. activation: hidden activation.
        boundary_layer: for a 1-D state absorbed at 0 with value 0: the width ``l`` of the
            value's boundary layer there. The network then computes
            ``V(s) = (1 - exp(-s / l)) N(s)``: ``V(0) = 0`` holds exactly (a hard boundary
            condition) and the factor carries the layer's steep rise, which an MLP on the
            raw state cannot resolve (GHM: ``l = sigma^2 / (2 (mu + a_E_max)) = 0.018``,
            ``V*'(0) = 45``). ``None``: the plain network.
    """

    def __init__(
        self,
        state_dim: int,
        hidden_dims: Sequence[int] = (64, 64),
        *,
        activation: str = "tanh",
        boundary_layer: float | None = None,
    ):
        super().__init__()
        if boundary_layer is not None and (state_dim != 1 or not boundary_layer > 0):
            raise ValueError(
                f"ValueNetwork: boundary_layer needs a 1-D state and a width > 0, got state_dim={state_dim}, "
                f"boundary_layer={boundary_layer}"
            )
        self.state_dim = state_dim
        self.boundary_layer = boundary_layer
        self.net = build_mlp(state_dim, hidden_dims, 1, activation=activation)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        check_tensor(
            "states", states, ("B", self.state_dim), (torch.float32, torch.float64), where="ValueNetwork.forward"
        )
        values = self.net(states).squeeze(-1)
        if self.boundary_layer is not None:
            values = -torch.expm1(-states[:, 0] / self.boundary_layer) * values  # (1 - e^{-s/l}) N(s)
        return values
