"""ObGD and AdaptiveObGD: stream-AC(lambda)'s optimisers (Elsayed, Vasan & Mahmood 2024,
``optim.py`` of their code), one per network, with eligibility traces.

Each step takes the TD error ``delta`` and each parameter's ``.grad``, the gradient of the
objective the network *ascends* (``log pi + c_H sign(delta) H`` for the actor, ``V`` for
the critic; the reference descends the negated objective, which is the same update)::

    z       = gamma lambda z + grad                               (eligibility trace)
    ObGD:          u = z,                    ||u||_1 = sum |z|
    AdaptiveObGD:  v = beta2 v + (1 - beta2) (delta z)^2,  v_hat = v / (1 - beta2^t),
                   u = z / sqrt(v_hat + eps), ||u||_1 = sum |u|
    M       = alpha kappa max(|delta|, 1) ||u||_1
    alpha'  = alpha / M if M > 1 else alpha                       (the overshooting bound)
    w      += alpha' delta u

with ``t`` the optimiser's step count (from 1), ``beta2 = 0.999`` and ``eps = 1e-8``. The
traces are cleared after the step that ends an episode (``reset``); ``v`` and ``t`` are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

ADAPTIVE_BETA2 = 0.999
ADAPTIVE_EPS = 1e-8


class ObGD:
    """Overshooting-bounded gradient descent with eligibility traces (one network)."""

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, gamma: float, lam: float, kappa: float):
        self.params, self.lr, self.gamma, self.lam, self.kappa = list(params), lr, gamma, lam, kappa
        self.traces = [torch.zeros_like(p) for p in self.params]

    def _trace(self) -> None:
        """``z = gamma lambda z + grad`` for every parameter (the gradient is consumed)."""
        for trace, param in zip(self.traces, self.params, strict=True):
            assert param.grad is not None, f"{type(self).__name__}.step: backward() first"
            trace.mul_(self.gamma * self.lam).add_(param.grad)
            param.grad = None

    def _directions(self, delta: float) -> list[torch.Tensor]:
        """The update direction ``u`` of each parameter (ObGD: the trace itself)."""
        return self.traces

    def _step_size(self, delta: float, directions: list[torch.Tensor]) -> float:
        """``alpha / M`` where ``M = alpha kappa max(|delta|, 1) ||u||_1`` exceeds 1, else ``alpha``."""
        norm = float(torch.stack([u.abs().sum() for u in directions]).sum())
        bound = self.lr * self.kappa * max(abs(delta), 1.0) * norm
        return self.lr / bound if bound > 1.0 else self.lr

    @torch.no_grad()
    def step(self, delta: torch.Tensor | float, reset: bool) -> float:
        """One update from each parameter's ``.grad`` and the TD error; returns the step size."""
        delta_value = float(delta)
        self._trace()
        directions = self._directions(delta_value)
        step_size = self._step_size(delta_value, directions)
        for param, direction in zip(self.params, directions, strict=True):
            param.add_(direction, alpha=step_size * delta_value)  # w += alpha' delta u
        if reset:
            for trace in self.traces:
                trace.zero_()
        return step_size

    def state_dict(self) -> dict[str, Any]:
        return {"traces": [t.clone() for t in self.traces]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for trace, saved in zip(self.traces, state["traces"], strict=True):
            trace.copy_(saved)


class AdaptiveObGD(ObGD):
    """ObGD whose direction is the trace scaled by a bias-corrected running RMS of
    ``delta z`` (the module docstring's ``u = z / sqrt(v_hat + eps)``)."""

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, gamma: float, lam: float, kappa: float):
        super().__init__(params, lr=lr, gamma=gamma, lam=lam, kappa=kappa)
        self.second_moments = [torch.zeros_like(p) for p in self.params]
        self.count = 0

    def _directions(self, delta: float) -> list[torch.Tensor]:
        self.count += 1
        correction = 1.0 - ADAPTIVE_BETA2**self.count
        directions = []
        for trace, moment in zip(self.traces, self.second_moments, strict=True):
            scaled = delta * trace
            moment.mul_(ADAPTIVE_BETA2).addcmul_(scaled, scaled, value=1.0 - ADAPTIVE_BETA2)
            directions.append(trace / (moment / correction + ADAPTIVE_EPS).sqrt())
        return directions

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "second_moments": [v.clone() for v in self.second_moments], "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for moment, saved in zip(self.second_moments, state["second_moments"], strict=True):
            moment.copy_(saved)
        self.count = int(state["count"])


OPTIMIZERS: dict[str, type[ObGD]] = {"obgd": ObGD, "adaptive-obgd": AdaptiveObGD}
