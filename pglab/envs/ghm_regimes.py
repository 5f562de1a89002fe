"""GHM with switching financing conditions: cash and a two-state Markov regime.

The parameters are :class:`pglab.configs.ghm_multi.RegimeGHMParams`; the state is
``(cash, regime)`` with the regime ``s in {0, 1}`` held as a float coordinate that jumps
``0 -> 1`` at intensity ``q01`` and ``1 -> 0`` at ``q10``
(:class:`~pglab.envs.dynamics.MarkovRegimes`; between grid times the simulators draw the
next regime from ``expm(Q dt)``)::

    dc = (mu_s + r c - a_L + a_E) dt + sigma_s dW        payout a_L - (1 + lambda_s) a_E
    the firm is liquidated when cash reaches 0, whatever the regime

The exact reference solves one HJB per regime, coupled by the switches
(:mod:`pglab.hjb.fd_regimes`, :class:`pglab.hjb.reference.RegimeReference`). Between grid
times the Brownian-bridge survival uses the volatility of the regime at the step's start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch

from pglab.configs.ghm_multi import REGIMES, RegimeGHMParams
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec, EvaluationPoint, MarkovRegimes
from pglab.envs.ghm import GHMModel

__all__ = ["RegimeGHMModel", "RegimeGHMParams"]


class RegimeGHMModel(ContinuousTimeModel):
    """GHM in two regimes of financing conditions (module docstring). State ``(cash,
    regime)``; controls ``dividend_rate``, ``issuance_rate``."""

    state_names = ("cash", "regime")

    def __init__(self, params: RegimeGHMParams | None = None):
        self.params = params or RegimeGHMParams()
        p = self.params
        self.control = ControlSpec(("dividend_rate", "issuance_rate"), (0.0, 0.0), (p.a_L_max, p.a_E_max))
        self.discount_rate = p.rho
        self.regimes = MarkovRegimes(coordinate=1, rates=((0.0, p.q01), (p.q10, 0.0)))
        self.state_low = (0.0, 0.0)
        self.state_high = (max(p.initial_cash_high, 1e-6), 1.0)
        self._tables: dict[tuple[torch.dtype, torch.device], dict[str, torch.Tensor]] = {}

    def _by_regime(self, states: torch.Tensor, name: str) -> torch.Tensor:
        """Parameter ``name`` (``mu``, ``sigma``, ``cost`` = 1 + lambda) of each path's regime, ``[B]``."""
        key = (states.dtype, states.device)
        if key not in self._tables:
            p = self.params
            columns = {
                "mu": [p.mu_0, p.mu_1],
                "sigma": [p.sigma_0, p.sigma_1],
                "cost": [1.0 + p.lambda_dilution_0, 1.0 + p.lambda_dilution_1],
                "bridge": [p.sigma_0**2, p.sigma_1**2],
            }
            self._tables[key] = {
                column: torch.tensor(values, dtype=states.dtype, device=states.device)
                for column, values in columns.items()
            }
        return self._tables[key][name].index_select(0, states[:, 1].long())

    @property
    def liquidation_cash(self) -> float:
        return 0.0

    def initial_states(self, num_paths, generator=None, *, device="cpu", dtype=torch.float32) -> torch.Tensor:
        """Cash uniform on ``[initial_cash_low, initial_cash_high]``; regime 1 with probability
        ``initial_regime_1_probability`` (one draw of ``[num_paths, 2]`` uniforms)."""
        p = self.params
        unit = torch.rand((num_paths, 2), generator=generator, device=device, dtype=dtype)
        cash = p.initial_cash_low + (p.initial_cash_high - p.initial_cash_low) * unit[:, 0]
        regime = (unit[:, 1] < p.initial_regime_1_probability).to(dtype)
        return torch.stack([cash, regime], dim=1)

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        cash = self.params.r * states[:, 0] + self._by_regime(states, "mu") - controls[:, 0] + controls[:, 1]
        return torch.stack([cash, torch.zeros_like(cash)], dim=1)

    def diffusion(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        volatility = self._by_regime(states, "sigma")
        return torch.stack([volatility, torch.zeros_like(volatility)], dim=1)

    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        return controls[:, 0] - self._by_regime(states, "cost") * controls[:, 1]

    def terminated(self, states: torch.Tensor) -> torch.Tensor:
        return states[:, 0] <= 0.0

    def step_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """GHM's Brownian-bridge survival with the volatility of the regime at the step's start."""
        variance = self._by_regime(states, "bridge") * dt
        start, end = states[:, 0].clamp_min(0.0), next_states[:, 0].clamp_min(0.0)
        bridge = -torch.expm1(-2.0 * start * end / variance.clamp_min(torch.finfo(states.dtype).tiny))
        return torch.where(variance > 0, bridge, (next_states[:, 0] > 0.0).to(states.dtype))

    # -- the reference and the evaluation -------------------------------------------------------------

    def grid_check_models(self) -> list[ContinuousTimeModel]:
        """Each regime's GHM model without switching (:meth:`RegimeGHMParams.regime`)."""
        return [GHMModel(self.params.regime(regime)) for regime in REGIMES]

    def reference(self, *, x_max: float, num_nodes: int):
        """The coupled FD solution (:func:`pglab.hjb.fd_regimes.solve_regimes_extrapolated`)."""
        from pglab.hjb.fd_regimes import solve_regimes_extrapolated
        from pglab.hjb.reference import FDReference, RegimeReference

        solution = solve_regimes_extrapolated(self.params, x_max=x_max, num_nodes=num_nodes)
        return RegimeReference([FDReference(regime) for regime in solution.regimes], coordinate=0)

    def reference_from_arrays(self, arrays: Mapping[str, Any]):
        from pglab.hjb.reference import RegimeReference

        return RegimeReference.from_arrays(arrays, self.control.names)

    def evaluation_points(self, levels: Sequence[float]) -> list[EvaluationPoint]:
        """Each cash level in each regime, ``c<cash>_r<regime>``."""
        return [
            EvaluationPoint(f"c{float(cash):g}_r{regime}", (float(cash), float(regime)))
            for cash in levels
            for regime in REGIMES
        ]

    def describe(self) -> dict:
        return {**super().describe(), "params": asdict(self.params)}
