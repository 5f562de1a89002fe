"""The one agent API every checkpoint kind loads into (``pglab.load_checkpoint``).

Every agent has

- ``.kind`` (the checkpoint kind, e.g. ``"ppo"``) and ``.config`` (the trainer config);
- ``.act(obs, deterministic=True)``: tensors in, tensors out, batch-first ``[B, ...]``;
- ``.predict(obs, deterministic=True)``: the same on NumPy arrays (Stable-Baselines3's
  habit), returning a NumPy array;
- ``.value(obs)``: the critic's ``V(s)`` ``[B]`` where the agent has one; agents without
  a critic raise :class:`NoCritic` saying so.

A subclass implements :meth:`Agent.act` (and :meth:`Agent.value` when it has a critic);
:meth:`Agent.predict` is the NumPy wrapper around it, shared by all.
"""

from __future__ import annotations

from typing import Any

from pglab.errors import UsageError


class NoCritic(UsageError, NotImplementedError):
    """``agent.value(obs)`` on an agent that was trained without a value function."""


class Agent:
    """Base class of the agents returned by ``pglab.load_checkpoint``.

    Attributes:
        kind: the checkpoint kind.
        config: the trainer config the agent was trained with.
        device: the ``torch.device`` the agent's tensors live on.
    """

    kind: str
    config: Any
    device: Any

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """Actions for a batch of observations (tensors on ``self.device``)."""
        raise NotImplementedError(f"{type(self).__name__}.act")

    def value(self, obs: Any) -> Any:
        """``V(s)`` ``[B]`` for a batch of observations."""
        raise NoCritic(f"{self.kind} agent: has no value function (this algorithm trains no critic)")

    def predict(self, obs: Any, deterministic: bool = True) -> Any:
        """:meth:`act` on NumPy arrays: ``obs`` is converted to a tensor on the agent's
        device (float32 for floating input), the result comes back as a NumPy array."""
        import numpy as np
        import torch

        array = np.asarray(obs)
        tensor = torch.as_tensor(array, device=self.device)
        if tensor.is_floating_point():
            tensor = tensor.float()
        with torch.no_grad():
            out = self.act(tensor, deterministic=deterministic)
        if isinstance(out, torch.Tensor):
            return out.detach().cpu().numpy()
        if isinstance(out, (tuple, list)):
            return type(out)(o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out)
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={getattr(self, 'kind', '?')!r} device={getattr(self, 'device', '?')}>"
