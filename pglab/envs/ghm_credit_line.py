"""The GHM firm with a committed credit line: a second model on the pluggable interface.

The firm of :mod:`pglab.envs.ghm` may also draw on a credit line of size ``L``: cash
``c`` may go negative down to ``-L``, a drawn balance (``c < 0``) pays ``r + spread``
instead of earning ``r``, and the firm is liquidated only when the line is exhausted.
The state is liquidity ``x = c + L`` (cash plus the undrawn line), so the absorbing
boundary stays at ``x = 0`` as the finite-difference solver expects::

    dx = (mu + r c + spread min(c, 0) - a_L + a_E) dt + sigma dW,    c = x - L
    payout rate = a_L - (1 + lambda_dilution) a_E,  discounted at rho;  absorbed at x <= 0

``credit_limit = 0`` is GHM exactly (the same floating-point operations, so the FD
solutions are bitwise equal); with ``r = spread = 0`` the line is worth exactly ``L`` of
cash, ``V_line(c) = V_GHM(c + L)``. In general ``V_GHM(c) <= V_line(c) <= V_GHM(c + L)``:
the firm can ignore the line until its cash runs out, and a line is worth less than the
same amount of cash because undrawn credit earns no interest.

This module is the worked example of ``docs/ghm-validation.md``: a new model is a
validated parameter dataclass plus the methods of
:class:`~pglab.envs.dynamics.ContinuousTimeModel` (``drift``, ``diffusion``,
``reward_rate``, ``terminated``). A variant of an existing model overrides only what
differs: here the parameters extend :class:`~pglab.envs.ghm.GHMParams` and the model
overrides GHM's state range and drift.
"""

from __future__ import annotations

import torch

# The parameters live with the configs (importable without torch); re-exported here.
from pglab.configs.ghm import CreditLineParams, GHMParams
from pglab.envs.ghm import GHMModel

__all__ = ["CreditLineParams", "GHMCreditLineModel", "GHMParams"]


class GHMCreditLineModel(GHMModel):
    """GHM with a credit line (state ``liquidity`` ``x = cash + credit_limit``; controls
    ``dividend_rate``, ``issuance_rate``): only the state, its range and the drift differ
    from :class:`~pglab.envs.ghm.GHMModel`; the diffusion, payout, absorption at ``x <= 0``
    and the Brownian-bridge survival are GHM's."""

    state_names = ("liquidity",)
    params: CreditLineParams

    def __init__(self, params: CreditLineParams | None = None):
        super().__init__(params or CreditLineParams())
        self.state_high = (max(self.params.initial_cash_high + self.params.credit_limit, 1e-6),)

    @property
    def initial_low(self) -> tuple[float, ...]:
        return (self.params.initial_cash_low + self.params.credit_limit,)

    @property
    def initial_high(self) -> tuple[float, ...]:
        return (self.params.initial_cash_high + self.params.credit_limit,)

    def liquidity(self, cash):
        """``x = c + L`` for cash levels ``c`` (floats, arrays or tensors): the state,
        :meth:`~pglab.envs.ghm.GHMModel.state_from_cash` with ``liquidation_cash = -L``."""
        return self.state_from_cash(cash)

    def cash(self, states: torch.Tensor) -> torch.Tensor:
        """Cash ``c = x - L`` of states ``[B, 1]``, ``[B, 1]``."""
        return self.cash_from_state(states)

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        p = self.params
        cash = self.cash(states)
        dividend_rate, issuance_rate = controls[:, 0:1], controls[:, 1:2]
        # interest r c on both sides of zero, plus the spread on the drawn part only
        return p.mu + p.r * cash + p.credit_spread * cash.clamp(max=0.0) - dividend_rate + issuance_rate
