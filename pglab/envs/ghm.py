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

from dataclasses import dataclass

import torch

from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec
from pglab.validation import check_finite, check_non_negative, check_positive


@dataclass(frozen=True)
class GHMParams:
    """Parameters of the GHM model (defaults from the design note)."""

    mu: float = 0.1
    """cash-flow drift (per unit time)"""
    sigma: float = 0.2
    """cash-flow volatility"""
    r: float = 0.05
    """interest rate earned on cash"""
    lambda_dilution: float = 0.1
    """proportional cost of issuing equity"""
    rho: float = 0.1
    """shareholders' discount rate (must exceed r)"""
    a_L_max: float = 1.0
    """maximal dividend rate"""
    a_E_max: float = 1.0
    """maximal equity-issuance rate"""
    initial_cash_low: float = 0.0
    """initial cash ~ Uniform[initial_cash_low, initial_cash_high]"""
    initial_cash_high: float = 2.0
    """upper end of the initial-cash distribution"""

    def __post_init__(self):
        check_finite("mu", self.mu)
        check_non_negative("sigma", self.sigma)
        check_finite("r", self.r)
        check_non_negative("lambda_dilution", self.lambda_dilution)
        check_positive("rho", self.rho)
        if self.rho <= self.r:
            # rho <= r makes hoarding cash forever optimal and the value unbounded.
            from pglab.errors import ConfigError

            raise ConfigError("rho", self.rho, f"must exceed r={self.r} (otherwise the value is unbounded)")
        check_non_negative("a_L_max", self.a_L_max)
        check_non_negative("a_E_max", self.a_E_max)
        self._check_initial_cash(lowest=0.0)

    def _check_initial_cash(self, lowest: float) -> None:
        """``lowest <= initial_cash_low <= initial_cash_high`` (a variant of the model with
        another liquidation point passes its own ``lowest``)."""
        from pglab.errors import ConfigError

        check_finite("initial_cash_low", self.initial_cash_low)
        if self.initial_cash_low < lowest:
            raise ConfigError("initial_cash_low", self.initial_cash_low, f"must be >= {lowest:g} (below it the firm is liquidated)")
        check_finite("initial_cash_high", self.initial_cash_high)
        if self.initial_cash_high < self.initial_cash_low:
            raise ConfigError("initial_cash_high", self.initial_cash_high, f"must be >= initial_cash_low={self.initial_cash_low}")


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
