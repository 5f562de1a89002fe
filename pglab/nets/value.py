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
    """

    def __init__(self, state_dim: int, hidden_dims: Sequence[int] = (64, 64), *, activation: str = "tanh"):
        super().__init__()
        self.state_dim = state_dim
        self.net = build_mlp(state_dim, hidden_dims, 1, activation=activation)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        check_tensor("states", states, ("B", self.state_dim), (torch.float32, torch.float64), where="ValueNetwork.forward")
        return self.net(states).squeeze(-1)
