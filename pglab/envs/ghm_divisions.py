"""A firm of N divisions, each a GHM cash process with its own dividends and issuance.

Division ``j`` holds cash ``c_j``, pays dividends at rate ``a_L,j`` and issues equity at
rate ``a_E,j`` (its own parameters ``mu_j, sigma_j, r_j, lambda_j``, a shared discount rate
``rho``); the divisions' Brownian motions are independent::

    dc_j = (mu_j + r_j c_j - a_L,j + a_E,j) dt + sigma_j dW_j          while c_j > 0
    payout rate = sum over the alive divisions of a_L,j - (1 + lambda_j) a_E,j

Absorption: each division is liquidated on its own, when its cash reaches 0 -- as a holding
company would close a unit that ran out of money while keeping the others going. A
liquidated division stops (its cash stays where it was liquidated, at or below 0, its
controls have no effect) and pays nothing more; the firm is absorbed when every division
is. Because the divisions share nothing but the discount rate, the firm's value separates::

    V*(c_1, ..., c_N) = sum_j V*_j(c_j)          V*_j: the one-division GHM optimum

which is the exact reference (:class:`pglab.hjb.reference.SeparableReference`; one FD
solve per distinct division parameter set). The learner is not told: it trains one joint
policy network on ``[B, N]`` states with ``2N`` controls (``dividend_rate_j,
issuance_rate_j`` interleaved) and one value network on ``[B, N]``.

Continuous monitoring (``absorption="bridge"``): with one division the firm is the path and
GHM's Brownian-bridge survival applies to it (the model is GHM, bit for bit: the same
closed-form held steps and the same random draws). With several, each division is killed
between grid times with its own bridge probability (one uniform per division and step,
:meth:`~pglab.envs.dynamics.ContinuousTimeModel.jump`), which sets its cash to
``min(c, 0)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch

from pglab.configs.ghm import GHMParams
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec, EvaluationPoint
from pglab.envs.ghm import GHMModel, affine_cash_steps
from pglab.errors import ConfigError

__all__ = ["GHMDivisionsModel"]


class GHMDivisionsModel(ContinuousTimeModel):
    """N GHM divisions, liquidated independently, valued as one firm (module docstring).

    Args:
        divisions: one :class:`GHMParams` per division (all with the same ``rho``).
    """

    def __init__(self, divisions: Sequence[GHMParams]):
        divisions = tuple(divisions)
        if not divisions:
            raise ConfigError("divisions", 0, "needs at least one division")
        if len({params.rho for params in divisions}) != 1:
            raise ConfigError("rho", [p.rho for p in divisions], "must be the same for every division (one owner)")
        self.divisions = divisions
        count = len(divisions)
        self.num_parts = count
        self.state_names = tuple(f"cash_{j}" for j in range(count))
        self.cash_coordinates = tuple(range(count))
        names = tuple(name for j in range(count) for name in (f"dividend_rate_{j}", f"issuance_rate_{j}"))
        highs = tuple(bound for p in divisions for bound in (p.a_L_max, p.a_E_max))
        self.control = ControlSpec(names, (0.0,) * (2 * count), highs)
        self.discount_rate = divisions[0].rho
        self.state_low = (0.0,) * count
        self.state_high = tuple(max(p.initial_cash_high, 1e-6) for p in divisions)
        self._tables: dict[tuple[torch.dtype, torch.device], dict[str, torch.Tensor]] = {}
        self._bridge_scales: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}

    # -- parameters as [N] tensors (python floats combined in float64 first, as GHM's) -----------

    def _table(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        key = (like.dtype, like.device)
        if key not in self._tables:
            columns = {
                "mu": [p.mu for p in self.divisions],
                "r": [p.r for p in self.divisions],
                "sigma": [p.sigma for p in self.divisions],
                "cost": [1.0 + p.lambda_dilution for p in self.divisions],
            }
            self._tables[key] = {
                name: torch.tensor(values, dtype=like.dtype, device=like.device) for name, values in columns.items()
            }
        return self._tables[key]

    @property
    def initial_low(self) -> tuple[float, ...]:
        return tuple(p.initial_cash_low for p in self.divisions)

    @property
    def initial_high(self) -> tuple[float, ...]:
        return tuple(p.initial_cash_high for p in self.divisions)

    @property
    def liquidation_cash(self) -> float:
        """Cash at which a division is liquidated: 0."""
        return 0.0

    # -- the dynamics ----------------------------------------------------------------------------

    def _alive(self, states: torch.Tensor) -> torch.Tensor:
        """1.0 for each division with cash > 0, ``[B, N]``."""
        return (states > 0.0).to(states.dtype)

    def drift(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        table = self._table(states)
        dividend_rate, issuance_rate = controls[:, 0::2], controls[:, 1::2]
        return (table["mu"] + table["r"] * states - dividend_rate + issuance_rate) * self._alive(states)

    def diffusion(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        return self._table(states)["sigma"] * self._alive(states)

    def reward_rate_parts(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        dividend_rate, issuance_rate = controls[:, 0::2], controls[:, 1::2]
        return (dividend_rate - self._table(states)["cost"] * issuance_rate) * self._alive(states)

    def reward_rate(self, states: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
        return self.reward_rate_parts(states, controls).sum(1)

    def terminated(self, states: torch.Tensor) -> torch.Tensor:
        return (states <= 0.0).all(1)

    def part_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """Each division's Brownian-bridge survival over the step, ``[B, N]`` (GHM's
        :meth:`~pglab.envs.ghm.GHMModel.step_survival`; the hard rule where ``sigma_j = 0``)."""
        key = (dt, states.dtype, states.device)
        if key not in self._bridge_scales:  # sigma_j^2 dt, in float64 before the state's dtype (as GHM's)
            scale = torch.tensor([p.sigma * p.sigma * dt for p in self.divisions], dtype=states.dtype)
            self._bridge_scales[key] = scale.to(states.device)
        scale = self._bridge_scales[key]
        start, end = states.clamp_min(0.0), next_states.clamp_min(0.0)
        bridge = -torch.expm1(-2.0 * start * end / scale.clamp_min(torch.finfo(states.dtype).tiny))
        return torch.where(scale > 0, bridge, (next_states > 0.0).to(states.dtype))

    def step_survival(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, dt: float
    ) -> torch.Tensor:
        """The probability that not every division was liquidated in the step, ``[B]``: the
        one division's bridge survival, or ``1 - prod_j (1 - s_j)``."""
        parts = self.part_survival(states, next_states, controls, dt)
        return parts[:, 0] if self.num_parts == 1 else 1.0 - (1.0 - parts).prod(1)

    def liquidate_parts(self, states: torch.Tensor, killed: torch.Tensor) -> torch.Tensor:
        """A killed division's cash becomes ``min(c, 0)``: terminal, and frozen from then on."""
        return torch.where(killed, states.clamp(max=0.0), states)

    def held_control_steps(
        self, states: torch.Tensor, controls: torch.Tensor, state_noise: torch.Tensor, dt: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One division: GHM's closed form (:func:`pglab.envs.ghm.affine_cash_steps`), the
        firm being the path; several: the steps one by one (a division liquidated inside
        the interval stops there)."""
        if self.num_parts != 1:
            return super().held_control_steps(states, controls, state_noise, dt)
        p = self.divisions[0]
        cash = affine_cash_steps(
            states, p.mu - controls[:, 0:1] + controls[:, 1:2], state_noise[:, :, 0], dt, r=p.r, sigma=p.sigma
        )
        rewards = (self.reward_rate(states, controls) * dt).unsqueeze(1).expand(-1, state_noise.shape[1])
        return cash.unsqueeze(2), rewards

    # -- the reference and the evaluation ------------------------------------------------------------

    def distinct_divisions(self) -> tuple[list[GHMParams], list[int]]:
        """The distinct parameter sets, and for each division the index of its own."""
        distinct: list[GHMParams] = []
        for params in self.divisions:
            if params not in distinct:
                distinct.append(params)
        return distinct, [distinct.index(params) for params in self.divisions]

    def grid_check_models(self) -> list[ContinuousTimeModel]:
        """One GHM model per distinct division: the one-state problems the reference solves."""
        return [GHMModel(params) for params in self.distinct_divisions()[0]]

    def reference(self, *, x_max: float, num_nodes: int):
        """``V* = sum_j V*_j(c_j)``: one extrapolated 1-D FD solve per distinct division."""
        from pglab.hjb.fd import solve_hjb_1d_extrapolated
        from pglab.hjb.reference import FDReference, SeparableReference

        distinct, part_of = self.distinct_divisions()
        parts = [
            FDReference(solve_hjb_1d_extrapolated(GHMModel(params), x_max=x_max, num_nodes=num_nodes))
            for params in distinct
        ]
        return SeparableReference(parts, part_of)

    def reference_from_arrays(self, arrays: Mapping[str, Any]):
        from pglab.hjb.reference import SeparableReference

        return SeparableReference.from_arrays(arrays, GHMModel(self.divisions[0]).control.names)

    def evaluation_points(self, levels: Sequence[float]) -> list[EvaluationPoint]:
        """Every division at each level (``c<level>``) and, with several divisions and
        levels, the rotations ``mix<k>``: division ``j`` at ``levels[(j + k) % m]``."""
        levels = [float(level) for level in levels]
        count = self.num_parts
        points = [EvaluationPoint(f"c{level:g}", (level,) * count) for level in levels]
        if count > 1 and len(levels) > 1:
            points += [
                EvaluationPoint(f"mix{k}", tuple(levels[(j + k) % len(levels)] for j in range(count)))
                for k in range(len(levels))
            ]
        return points

    def describe(self) -> dict:
        return {**super().describe(), "divisions": [asdict(params) for params in self.divisions]}
