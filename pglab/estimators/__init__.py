"""Pure tensor estimators: returns, GAE, TD targets, advantage normalisation, Max@K.

No state, no I/O. Every function takes batch-major tensors ``[B, T]`` (B paths or
environments, T time steps) and is tested against a slow reference loop.

Terminated vs truncated (TorchRL's distinction, kept everywhere in pglab):

* ``dones``/``terminated``: the episode *ended* after step t (GHM liquidation, a goal
  reached). Nothing follows; no bootstrap.
* ``truncs``/``truncated``: the simulation *stopped* after step t (time limit, horizon
  ``T``) although the process goes on; its future is bootstrapped from a value estimate.
"""

from pglab.estimators.gae import compute_gae, td0_targets
from pglab.estimators.maxk import maxk_gradient_weights, maxk_reward_estimate
from pglab.estimators.returns import (
    discount_powers,
    discounted_return,
    normalize_advantages,
    reward_to_go,
)

__all__ = [
    "compute_gae",
    "td0_targets",
    "discount_powers",
    "discounted_return",
    "reward_to_go",
    "normalize_advantages",
    "maxk_reward_estimate",
    "maxk_gradient_weights",
]
