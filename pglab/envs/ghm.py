"""The GHM corporate cash-management model (dividends and equity issuance).

State: cash ``c >= 0``. Controls: dividend rate ``a_L in [0, a_L_max]`` and equity
issuance rate ``a_E in [0, a_E_max]``.

    dc = (mu + r c - a_L + a_E) dt + sigma dW
    payout rate = a_L - (1 + lambda_dilution) a_E,  discounted at rho
    the firm is liquidated (absorbed, value 0) when cash reaches 0

HJB (with ``V(0) = 0``)::

    rho V = 0.5 sigma^2 V'' + (mu + r c) V' + max_{a_L} a_L (1 - V')
            + max_{a_E} a_E (V' - (1 + lambda))

so dividends are paid at the maximal rate where ``V' < 1`` and equity is issued where
``V' > 1 + lambda``. Euler-Maruyama with step ``dt`` gives the simulator's step
``c' = c + (mu + r c - a_L + a_E) dt + sigma sqrt(dt) eps``.
"""
from __future__ import annotations

import torch

# The parameters live with the configs (importable without torch); re-exported here.
from pglab.configs.ghm import GHMParams
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec

__all__ = ["GHMModel", "GHMParams"]


class GHMModel(ContinuousTimeModel):
    """The GHM model as a :class:`ContinuousTimeModel` (state ``cash``, controls
    ``dividend_rate``, ``issuance_rate``)."""

    state_names = ("cash",)

    def __init__(self, params: GHMParams | None = None):
        self.params = params or GHMParams()
        p = self.params
        self.control = ControlSpec(("dividend_rate", "issuance_rate"), (0.0, 0.0), (p.a_L_max, p.a_E_max))
        self.discount_rate = p.rho
        self.state_low = (0.0,)
        self.state_high = (max(p.initial_cash_high, 1e-6),)

    @property
    def initial_low(self) -> tuple[float, ...]:
        return (self.params.initial_cash_low,)

    @property
    def initial_high(self) -> tuple[float, ...]:
        return (self.params.initial_cash_high,)

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        p = self.params
        dividend_rate, issuance_rate = controls[:, 0:1], controls[:, 1:2]
        return p.mu + p.r * states - dividend_rate + issuance_rate

    def diffusion(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        return torch.full_like(states, self.params.sigma)

    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        dividend_rate, issuance_rate = controls[:, 0], controls[:, 1]
        return dividend_rate - (1.0 + self.params.lambda_dilution) * issuance_rate

    def terminated(self, states: torch.Tensor) -> torch.Tensor:
        return states[:, 0] <= 0.0

    def step_survival(self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float) -> torch.Tensor:
        """Brownian-bridge survival over one step: given ``c > 0`` at the start and ``c' > 0``
        at the end, a Brownian motion with constant drift and volatility ``sigma`` touched
        0 in between with probability ``exp(-2 c c' / (sigma^2 dt))`` (independent of the
        drift), so ``P(survive) = 1 - exp(-2 c+ c'+ / (sigma^2 dt))``. It is 0 when
        ``c' <= 0`` and tends to 0 continuously as ``c' -> 0+``, so a path's survival weight
        is continuous in the controls (the hard rule jumps from 1 to 0 at ``c' = 0``)."""
        sigma = self.params.sigma
        if sigma == 0.0:
            return super().step_survival(states, next_states, controls, dt)
        start, end = states[:, 0].clamp_min(0.0), next_states[:, 0].clamp_min(0.0)
        return -torch.expm1(-2.0 * start * end / (sigma * sigma * dt))

    def describe(self) -> dict:
        from dataclasses import asdict

        return {**super().describe(), "params": asdict(self.params)}
