"""Parameters of the GHM models with a second state variable, importable without torch.

Both models keep GHM's cash equation, controls and payout (docs/ghm.md): dividends
``a_L in [0, a_L_max]`` and equity issuance ``a_E in [0, a_E_max]``, payout rate
``a_L - (1 + lambda) a_E`` discounted at ``rho``, the firm liquidated (value 0) when
cash reaches 0. The second state variable moves the cash-flow drift ``mu`` (and, for
the regimes, the volatility and the issuance cost).

:class:`RegimeGHMParams` -- financing conditions that switch (two-state Markov regime
``s in {0, 1}``, in the spirit of Bolton, Chen & Wang 2013)::

    dc = (mu_s + r c - a_L + a_E) dt + sigma_s dW
    s jumps 0 -> 1 at intensity q01 and 1 -> 0 at intensity q10
    payout rate a_L - (1 + lambda_dilution_s) a_E

State ``(cash, regime)``. The value solves one HJB per regime, coupled by the switches::

    rho V_s = max_u [ payout_s(u) + (mu_s + r c - a_L + a_E) V_s' + 0.5 sigma_s^2 V_s'' ]
              + q_{s s'} (V_{s'} - V_s),        V_s(0) = 0

:class:`OUGHMParams` -- cash plus a mean-reverting profitability::

    dc  = (mu_t + r c - a_L + a_E) dt + sigma dW
    dmu = kappa (mu_bar - mu_t) dt + sigma_mu dZ,        corr(dW, dZ) = correlation

State ``(cash, mu)``; ``mu`` is unbounded (its stationary law is normal, mean
``mu_bar``, standard deviation ``sigma_mu / sqrt(2 kappa)``). The finite-difference
references are :mod:`pglab.hjb.fd_regimes` and :mod:`pglab.hjb.fd2d`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pglab.configs.ghm import FirmTerms, GHMParams
from pglab.validation import check_finite, check_non_negative, check_positive, check_range

REGIMES = (0, 1)
"""The regime labels of :class:`RegimeGHMParams`."""


@dataclass(frozen=True)
class RegimeGHMParams(FirmTerms):
    """GHM with a two-state Markov regime of financing conditions (module docstring).

    Regime 0 is the good state (GHM's defaults), regime 1 the bad one: lower cash flow
    and dearer equity. The terms of :class:`~pglab.configs.ghm.FirmTerms` (rates, control
    bounds, initial cash) hold in both regimes. An equity market that is closed in a regime is a large
    ``lambda_dilution`` there (issuing never pays)."""

    mu_0: float = 0.1
    """cash-flow drift in regime 0 (per unit time)"""
    mu_1: float = 0.05
    """cash-flow drift in regime 1"""
    sigma_0: float = 0.2
    """cash-flow volatility in regime 0"""
    sigma_1: float = 0.2
    """cash-flow volatility in regime 1"""
    lambda_dilution_0: float = 0.1
    """proportional cost of issuing equity in regime 0"""
    lambda_dilution_1: float = 0.5
    """proportional cost of issuing equity in regime 1"""
    q01: float = 0.1
    """intensity of the switch from regime 0 to regime 1 (expected stay in 0: 1 / q01)"""
    q10: float = 0.5
    """intensity of the switch from regime 1 to regime 0 (expected stay in 1: 1 / q10)"""
    initial_regime_1_probability: float = 0.5
    """probability that a path starts in regime 1 (independent of its initial cash)"""

    def __post_init__(self):
        for regime in REGIMES:
            check_finite(f"mu_{regime}", getattr(self, f"mu_{regime}"))
            check_non_negative(f"sigma_{regime}", getattr(self, f"sigma_{regime}"))
            check_non_negative(f"lambda_dilution_{regime}", getattr(self, f"lambda_dilution_{regime}"))
        check_non_negative("q01", self.q01)
        check_non_negative("q10", self.q10)
        self._check_terms()
        check_range("initial_regime_1_probability", self.initial_regime_1_probability, 0.0, 1.0)

    def switch_rate(self, regime: int) -> float:
        """Intensity of leaving ``regime`` (``q01`` from 0, ``q10`` from 1)."""
        return (self.q01, self.q10)[regime]

    def stationary_regime_1_probability(self) -> float:
        """Long-run share of time in regime 1, ``q01 / (q01 + q10)`` (the initial
        regime's law when both intensities are 0: ``initial_regime_1_probability``)."""
        total = self.q01 + self.q10
        return self.q01 / total if total > 0 else self.initial_regime_1_probability

    def regime(self, regime: int) -> GHMParams:
        """The GHM model of one regime with the switching turned off: the cash dynamics
        and payout that hold while the regime lasts."""
        if regime not in REGIMES:
            raise ValueError(f"regime must be 0 or 1, got {regime!r}")
        return GHMParams(
            **self.terms(),
            mu=getattr(self, f"mu_{regime}"),
            sigma=getattr(self, f"sigma_{regime}"),
            lambda_dilution=getattr(self, f"lambda_dilution_{regime}"),
        )


@dataclass(frozen=True)
class OUGHMParams(FirmTerms):
    """GHM whose cash-flow drift ``mu`` follows an Ornstein-Uhlenbeck process (module
    docstring). ``sigma_mu = 0`` with the initial ``mu = mu_bar`` is GHM at ``mu_bar``."""

    mu_bar: float = 0.1
    """long-run mean of the profitability mu (GHM's mu)"""
    kappa: float = 0.5
    """speed of mean reversion of mu (half-life ln 2 / kappa)"""
    sigma_mu: float = 0.05
    """volatility of mu"""
    correlation: float = 0.5
    """correlation of the cash shock dW and the profitability shock dZ, in [-1, 1]"""
    sigma: float = 0.2
    """cash-flow volatility"""
    lambda_dilution: float = 0.1
    """proportional cost of issuing equity"""
    initial_mu_spread: float = 1.0
    """initial mu ~ Uniform[mu_bar - s d, mu_bar + s d] with s this spread and d the
    stationary standard deviation (independent of the initial cash; 0: mu starts at mu_bar)"""

    def __post_init__(self):
        check_finite("mu_bar", self.mu_bar)
        check_positive("kappa", self.kappa)
        check_non_negative("sigma_mu", self.sigma_mu)
        check_range("correlation", self.correlation, -1.0, 1.0)
        check_non_negative("sigma", self.sigma)
        check_non_negative("lambda_dilution", self.lambda_dilution)
        self._check_terms()
        check_non_negative("initial_mu_spread", self.initial_mu_spread)

    @property
    def stationary_std(self) -> float:
        """Standard deviation of mu's stationary law, ``sigma_mu / sqrt(2 kappa)``."""
        return self.sigma_mu / math.sqrt(2.0 * self.kappa)

    def initial_mu_range(self) -> tuple[float, float]:
        """``(low, high)`` of the initial mu's uniform law."""
        half_width = self.initial_mu_spread * self.stationary_std
        return self.mu_bar - half_width, self.mu_bar + half_width

    def frozen(self, mu: float) -> GHMParams:
        """The GHM model with the profitability held at ``mu`` (``sigma_mu = 0``,
        ``mu = mu_bar``: the model itself)."""
        return GHMParams(**self.terms(), mu=mu, sigma=self.sigma, lambda_dilution=self.lambda_dilution)


__all__ = ["REGIMES", "RegimeGHMParams", "OUGHMParams"]
