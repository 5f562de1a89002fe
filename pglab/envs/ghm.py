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

from collections.abc import Sequence

import torch

# The parameters live with the configs (importable without torch); re-exported here.
from pglab.configs.ghm import GHMParams
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec, EvaluationPoint

__all__ = ["GHMModel", "GHMParams", "affine_cash_steps"]


def affine_cash_steps(
    cash: torch.Tensor, drift: torch.Tensor, state_noise: torch.Tensor, dt: float, *, r: float, sigma: float
) -> torch.Tensor:
    """``n`` Euler steps of GHM's cash with a held control, ``[B, n]`` (see
    :meth:`GHMModel.held_control_steps`): ``c_{j+1} = g c_j + m_j``, ``g = 1 + r dt``,
    ``m_j = drift dt + sigma sqrt(dt) eps_j``, from ``cash [B, 1]`` with the control part of
    the drift ``drift = mu - a_L + a_E`` ``[B, 1]`` and ``state_noise [B, n]``."""
    num_steps = state_noise.shape[1]
    growth = 1.0 + r * dt
    # g^1 .. g^n, [n]; float64 powers, then the state's dtype
    powers = torch.tensor([growth ** (j + 1) for j in range(num_steps)], dtype=cash.dtype, device=cash.device)
    increments = drift * dt + (sigma * dt**0.5) * state_noise  # m_j, [B, n]
    return powers * (cash + torch.cumsum(increments / powers, dim=1))  # c_1 .. c_n, [B, n]


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

    def state_from_cash(self, cash):
        """The model's state for cash levels (floats, arrays or tensors ``[B, 1]``):
        ``cash - liquidation_cash``, so the firm is absorbed at state 0. GHM's state is
        cash itself; a variant with another liquidation point (the credit line: liquidity
        ``cash + credit_limit``) shifts it. Users give and read cash; the simulator, the
        networks and the FD grid work in the state."""
        return cash - self.params.liquidation_cash

    def cash_from_state(self, states):
        """Cash of model states (floats, arrays or tensors ``[B, 1]``): the inverse of
        :meth:`state_from_cash`."""
        return states + self.params.liquidation_cash

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

    def held_control_steps(
        self, states: torch.Tensor, controls: torch.Tensor, state_noise: torch.Tensor, dt: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """All ``n`` Euler-Maruyama steps of a held control in one batched expression.

        With ``(a_L, a_E)`` held the Euler step is affine in cash::

            c_{j+1} = g c_j + m_j,   g = 1 + r dt,   m_j = (mu - a_L + a_E) dt + sigma sqrt(dt) eps_j

        so ``c_j = g^j (c_0 + sum_{i<j} m_i g^{-(i+1)})``: one cumulative sum over the
        interval instead of ``n`` dispatched steps. It is the per-step recursion itself
        (not an approximation): with the same ``eps`` the two agree to float rounding,
        and so do absorption, rewards and their discounted sums. The payout rate
        ``a_L - (1 + lambda) a_E`` does not depend on cash, so each step of the interval
        earns ``(a_L - (1 + lambda) a_E) dt`` while alive.

        Why not the endpoint-only Brownian-bridge shortcut (sum the increments to ``c_n``,
        survive with ``1 - exp(-2 c_0 c_n / (sigma^2 n dt))``)? A path killed inside the
        interval would need the bridge's first-passage law for its within-interval rewards.
        The simulator instead keeps every grid point (this cumulative sum costs the same few
        dispatches) and, with ``absorption="bridge"`` (``--absorption bridge``), kills a path in
        each step with the one-step bridge probability (:meth:`step_survival`): the
        continuously monitored model that the FD reference solves.

        A subclass that changes the drift, volatility or payout (the credit-line variant)
        falls back to the step-by-step default."""
        if (
            type(self).drift is not GHMModel.drift
            or type(self).diffusion is not GHMModel.diffusion
            or type(self).reward_rate is not GHMModel.reward_rate
            or not self.diagonal_noise
        ):
            return super().held_control_steps(states, controls, state_noise, dt)
        p = self.params
        dividend_rate, issuance_rate = controls[:, 0:1], controls[:, 1:2]
        cash = affine_cash_steps(
            states, p.mu - dividend_rate + issuance_rate, state_noise[:, :, 0], dt, r=p.r, sigma=p.sigma
        )
        rewards = (self.reward_rate(states, controls) * dt).unsqueeze(1).expand(-1, state_noise.shape[1])
        return cash.unsqueeze(2), rewards

    def step_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
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

    @property
    def liquidation_cash(self) -> float:
        """Cash at which the firm is liquidated (the state is ``cash - liquidation_cash``)."""
        return self.params.liquidation_cash

    def evaluation_points(self, levels: Sequence[float]) -> list[EvaluationPoint]:
        """One point per cash level, ``c<cash>``, at the state ``state_from_cash(cash)``."""
        return [
            EvaluationPoint(f"c{cash:g}", (float(self.state_from_cash(float(cash))),), float(cash)) for cash in levels
        ]

    def grid_check_models(self) -> list[ContinuousTimeModel]:
        """The one-state models whose FD grid's length the trainer checks: the model itself."""
        return [self]

    def describe(self) -> dict:
        from dataclasses import asdict

        return {**super().describe(), "params": asdict(self.params)}
