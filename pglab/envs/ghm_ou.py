"""GHM with a mean-reverting profitability: cash and an Ornstein-Uhlenbeck drift ``mu_t``.

The parameters are :class:`pglab.configs.ghm_multi.OUGHMParams`; the state is ``(cash,
mu)``, driven by two Brownian motions with correlation ``correlation``::

    dc  = (mu + r c - a_L + a_E) dt + sigma dW
    dmu = kappa (mu_bar - mu) dt + sigma_mu (correlation dW + sqrt(1 - correlation^2) dW')
    payout a_L - (1 + lambda) a_E;  the firm is liquidated when cash reaches 0

so the diffusion matrix is constant and lower triangular (the model is the correlated-noise
case of :class:`~pglab.envs.dynamics.ContinuousTimeModel`, ``noise_dim = 2``). The exact
reference is the 2-D FD solution (:mod:`pglab.hjb.fd2d`,
:class:`pglab.hjb.reference.GridReference2D`). Between grid times the cash's
Brownian-bridge survival uses its own volatility ``sigma``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch

from pglab.configs.ghm_multi import OUGHMParams
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec, EvaluationPoint
from pglab.envs.ghm import GHMModel

__all__ = ["OUGHMModel", "OUGHMParams", "REFERENCE_NODES_RATIO"]

REFERENCE_NODES_RATIO = 30
"""The 2-D FD reference has ``num_nodes / 30`` cash intervals for a 1-D grid of ``num_nodes``
(800 at the default 24,000: on ``[0, 6]`` the cash step 0.0075 of
:func:`pglab.hjb.fd2d.solve_hjb_2d_extrapolated`'s default grid; its profitability step
follows from it, inside the band where the scheme is monotone)."""


class OUGHMModel(ContinuousTimeModel):
    """GHM whose cash-flow drift mean-reverts (module docstring). State ``(cash, mu)``;
    controls ``dividend_rate``, ``issuance_rate``."""

    state_names = ("cash", "mu")
    diagonal_noise = False

    def __init__(self, params: OUGHMParams | None = None):
        self.params = params or OUGHMParams()
        p = self.params
        self.control = ControlSpec(("dividend_rate", "issuance_rate"), (0.0, 0.0), (p.a_L_max, p.a_E_max))
        self.discount_rate = p.rho
        mu_low, mu_high = p.initial_mu_range()
        self.state_low = (0.0, mu_low)
        self.state_high = (max(p.initial_cash_high, 1e-6), mu_high)
        mixing = math.sqrt(max(1.0 - p.correlation**2, 0.0))
        self._matrix = ((p.sigma, 0.0), (p.sigma_mu * p.correlation, p.sigma_mu * mixing))

    @property
    def noise_dim(self) -> int:
        return 2

    @property
    def initial_low(self) -> tuple[float, ...]:
        return (self.params.initial_cash_low, self.state_low[1])

    @property
    def initial_high(self) -> tuple[float, ...]:
        return (self.params.initial_cash_high, self.state_high[1])

    @property
    def liquidation_cash(self) -> float:
        return 0.0

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        p = self.params
        cash = states[:, 1] + p.r * states[:, 0] - controls[:, 0] + controls[:, 1]
        return torch.stack([cash, p.kappa * (p.mu_bar - states[:, 1])], dim=1)

    def diffusion_matrix(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        matrix = torch.tensor(self._matrix, dtype=states.dtype, device=states.device)
        return matrix.expand(states.shape[0], -1, -1)

    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        return controls[:, 0] - (1.0 + self.params.lambda_dilution) * controls[:, 1]

    def terminated(self, states: torch.Tensor) -> torch.Tensor:
        return states[:, 0] <= 0.0

    def step_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """GHM's Brownian-bridge survival of the cash coordinate (volatility ``sigma``)."""
        sigma = self.params.sigma
        if sigma == 0.0:
            return super().step_survival(states, next_states, controls, dt)
        start, end = states[:, 0].clamp_min(0.0), next_states[:, 0].clamp_min(0.0)
        return -torch.expm1(-2.0 * start * end / (sigma * sigma * dt))

    # -- the reference and the evaluation -------------------------------------------------------------

    def evaluation_mu(self) -> list[float]:
        """The profitability levels of the final table: ``mu_bar`` and ``mu_bar -+`` one
        stationary standard deviation (``mu_bar`` alone when ``sigma_mu = 0``)."""
        p = self.params
        spread = p.stationary_std
        return [p.mu_bar] if spread == 0 else [p.mu_bar - spread, p.mu_bar, p.mu_bar + spread]

    def grid_check_models(self) -> list[ContinuousTimeModel]:
        """GHM with the profitability frozen at the evaluated levels' ends."""
        levels = self.evaluation_mu()
        return [GHMModel(self.params.frozen(mu)) for mu in (levels[0], levels[-1])]

    def reference(self, *, x_max: float, num_nodes: int):
        """The extrapolated 2-D FD solution (:func:`pglab.hjb.fd2d.solve_hjb_2d_extrapolated`)
        on ``[0, x_max]`` with ``num_nodes / REFERENCE_NODES_RATIO`` cash intervals (at least
        20; ``num_nodes``, a 1-D grid's size, would be far too fine in two dimensions)."""
        from pglab.hjb.fd2d import solve_hjb_2d_extrapolated
        from pglab.hjb.reference import GridReference2D

        num_cash = max(num_nodes // REFERENCE_NODES_RATIO, 20)
        solution = solve_hjb_2d_extrapolated(self.params, x_max=x_max, num_cash=num_cash)
        return GridReference2D(solution.cash, solution.mu, solution.value)

    def reference_from_arrays(self, arrays: Mapping[str, Any]):
        from pglab.hjb.reference import GridReference2D

        return GridReference2D.from_arrays(arrays, self.control.names)

    def evaluation_points(self, levels: Sequence[float]) -> list[EvaluationPoint]:
        """Each cash level at each of :meth:`evaluation_mu`, ``c<cash>_mu<mu>``."""
        return [
            EvaluationPoint(f"c{float(cash):g}_mu{mu:.3g}", (float(cash), float(mu)))
            for cash in levels
            for mu in self.evaluation_mu()
        ]

    def describe(self) -> dict:
        return {**super().describe(), "params": asdict(self.params)}
