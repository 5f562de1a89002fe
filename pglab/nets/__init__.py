"""Policies and value networks (``nn.Module``s with checked tensor contracts)."""

from pglab.nets.gaussian import GaussianPolicy
from pglab.nets.mlp import build_mlp
from pglab.nets.value import ValueNetwork

__all__ = ["GaussianPolicy", "ValueNetwork", "build_mlp"]
