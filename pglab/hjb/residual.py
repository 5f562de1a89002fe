"""How well a value function and a policy satisfy a 1-D model's HJB equation.

For a :class:`~pglab.envs.dynamics.ContinuousTimeModel` with one state ``x``, reward
rate ``f``, drift ``b`` and volatility ``s`` the Hamiltonian of a control ``u`` is::

    H(x, u; V) = f(x, u) + b(x, u) V'(x) + 0.5 s(x, u)^2 V''(x)

and the residuals reported here are (absolute, in value per unit time)::

    R_opt(x)    = rho V(x) - max_u H(x, u; V)     V = V* solves the HJB:      R_opt = 0
    R_pi(x)     = rho V(x) - H(x, pi(x); V)       V = V^pi (pi's own value):   R_pi = 0
    G_pi(x)     = max_u H(x, u; V*) - H(x, pi(x); V*) >= 0    (pi's Hamiltonian gap)

Why these, absolute: by Dynkin's formula ``V(x) - V^pi(x) = E[int_0^tau e^{-rho t}
R_pi(X_t) dt] + E[e^{-rho tau}] (V(0) - g(0))`` along the paths of ``pi``, so
``|V - V^pi| <= sup|R_pi| / rho + |V(0) - g(0)|`` (and likewise ``|V - V*|`` from
``R_opt`` by the comparison principle), and ``V* - V^pi = E[int e^{-rho t} G_pi dt] <=
sup G_pi / rho``. A residual of 1e-3 thus accounts for at most 1e-3 / rho = 0.01 of value
(0.5-1 % of V on GHM's interior). ``max_relative`` divides by ``rho V*`` pointwise: the
relative value error the residual can explain.

Where: the statistics are taken on an interior interval ``[c_min, c_max]``. Near the
absorbing boundary ``x = 0`` a model that issues equity at a bounded rate has a boundary
layer (GHM: ``V`` rises from 0 to ~0.9 within ``sigma^2 / (2 (mu + a_E_max)) ~ 0.02``)
where no grid of the FD reference resolves ``V''`` well, so the boundary is reported
separately: ``V(0)`` against the terminal value and the residual on ``(0, c_min)``.

Derivatives: ``method="autograd"`` differentiates the value function twice with
``torch.autograd`` (exact for a smooth network; it needs a function whose outputs depend
only on their own row, as any MLP without batch statistics), ``method="fd"`` uses
central differences with step ``fd_step``. An :class:`~pglab.hjb.fd.FDSolution` is
checked with its own central differences on every other node (see
:meth:`HJBResidualValidator.validate_solution`).

The maximum over controls is taken over a uniform grid of each control's box (ends
included), as in :mod:`pglab.hjb.fd`: exact for Hamiltonians linear in the controls
(GHM), a lower bound of the maximum otherwise (``R_opt`` then slightly overstated).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from pglab.contracts import check_tensor
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec
from pglab.errors import ConfigError
from pglab.hjb.fd import FDSolution, solve_hjb_1d_extrapolated
from pglab.validation import check_choice, check_int, check_positive, check_range

ValueFn = Callable[[torch.Tensor], torch.Tensor]
PolicyFn = Callable[[torch.Tensor], torch.Tensor]
Method = Literal["autograd", "fd"]
_FLOATS = (torch.float32, torch.float64)


# -- the Hamiltonian and its derivatives ------------------------------------------------------------


def control_candidates(
    control: ControlSpec, points_per_control: int, *, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The tensor grid of each control's box (both ends included), ``[K, A]`` with
    ``K = points_per_control ** A`` (a control with ``low == high`` contributes 1)."""
    check_int("points_per_control", points_per_control, minimum=2)
    axes = [
        np.linspace(lo, hi, points_per_control if hi > lo else 1)
        for lo, hi in zip(control.low, control.high, strict=False)
    ]
    return torch.tensor(list(itertools.product(*axes)), dtype=dtype)


def hamiltonian(
    model: ContinuousTimeModel, states: torch.Tensor, controls: torch.Tensor, first: torch.Tensor, second: torch.Tensor
) -> torch.Tensor:
    """``H = f(x, u) + b(x, u) V' + 0.5 s(x, u)^2 V''``, ``[B]``.

    Args:
        states: ``[B, 1]``. controls: ``[B, A]`` (already in the box).
        first, second: ``V'(x)`` and ``V''(x)``, ``[B]``.
    """
    drift = model.drift(states, controls)[:, 0]
    volatility = model.diffusion(states, controls)[:, 0]
    return model.reward_rate(states, controls) + drift * first + 0.5 * volatility.pow(2) * second


def max_hamiltonian(
    model: ContinuousTimeModel,
    states: torch.Tensor,
    first: torch.Tensor,
    second: torch.Tensor,
    candidates: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``max_u H`` over the candidate controls ``[K, A]``: ``(value [B], argmax controls [B, A])``.
    All ``K * B`` pairs are evaluated in one batched call of the model."""
    num_states, num_candidates = states.shape[0], candidates.shape[0]
    candidates = candidates.to(states)
    values = hamiltonian(
        model,
        states.repeat(num_candidates, 1),
        candidates.repeat_interleave(num_states, dim=0),
        first.repeat(num_candidates),
        second.repeat(num_candidates),
    ).view(num_candidates, num_states)
    best, index = values.max(dim=0)
    return best, candidates[index]


def value_derivatives(
    value_fn: ValueFn, states: torch.Tensor, *, method: Method = "autograd", fd_step: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(V, V', V'')`` of ``value_fn`` at ``states`` ``[B, 1]``, each ``[B]`` (detached).

    ``autograd``: two backward passes through ``value_fn`` (which must not run under
    ``torch.no_grad``). ``fd``: ``V' = (V(x+h) - V(x-h)) / 2h``, ``V'' = (V(x+h) - 2V(x) +
    V(x-h)) / h^2`` with ``h = fd_step`` (default ``eps^(1/4)`` of the dtype, which balances
    the ``h^2`` truncation error of ``V''`` against its ``eps / h^2`` rounding error:
    1.2e-4 in float64, 0.019 in float32).
    """
    where = "value_derivatives: value_fn(states [B, 1]) must return values"
    check_tensor("states", states, ("B", 1), _FLOATS, where="value_derivatives")
    check_choice("method", method, ("autograd", "fd"))
    if method == "fd":
        step = fd_step if fd_step is not None else torch.finfo(states.dtype).eps ** 0.25
        check_positive("fd_step", step)
        with torch.no_grad():
            centre, above, below = (_checked_value(value_fn, states + shift, where) for shift in (0.0, step, -step))
        return centre, (above - below) / (2 * step), (above - 2 * centre + below) / step**2
    inputs = states.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        values = _checked_value(value_fn, inputs, where)
        if not values.requires_grad:
            raise ValueError(
                "value_derivatives: value_fn returned values without a graph to the states; autograd needs "
                "a differentiable value function (do not wrap it in torch.no_grad), or use method='fd'"
            )
        (first,) = torch.autograd.grad(values.sum(), inputs, create_graph=True)
        if first.requires_grad:
            (second,) = torch.autograd.grad(first.sum(), inputs, allow_unused=True)
        else:  # V is affine in x: V'' = 0
            second = None
    second = torch.zeros_like(first) if second is None else second
    return values.detach(), first[:, 0].detach(), second[:, 0].detach()


def hjb_residual_for_training(
    model: ContinuousTimeModel,
    value_fn: ValueFn,
    states: torch.Tensor,
    *,
    controls: torch.Tensor | None = None,
    candidates: torch.Tensor | None = None,
) -> torch.Tensor:
    """The HJB residual of ``value_fn`` at ``states`` ``[B, 1]``, ``[B]``, differentiable in
    ``value_fn``'s parameters (a physics-informed loss; :func:`value_derivatives` detaches).

    With ``controls`` ``[B, A]`` (given, not differentiated): the policy-evaluation residual
    ``rho V - H(x, u; V)``. With ``candidates`` ``[K, A]`` instead: the optimal-control residual
    ``rho V - max_k H(x, u_k; V)`` (the maximum's gradient flows through the maximising
    candidate, as for any max). ``V'`` and ``V''`` by autograd with ``create_graph=True``.
    """
    check_tensor("states", states, ("B", 1), _FLOATS, where="hjb_residual_for_training")
    if (controls is None) == (candidates is None):
        raise ValueError(
            "hjb_residual_for_training: give exactly one of controls (policy residual) and candidates "
            "(optimal residual)"
        )
    inputs = states.detach().requires_grad_(True)
    with torch.enable_grad():
        values = _checked_value(
            value_fn, inputs, "hjb_residual_for_training: value_fn(states [B, 1]) must return values"
        )
        (first,) = torch.autograd.grad(values.sum(), inputs, create_graph=True)
        (second,) = torch.autograd.grad(first.sum(), inputs, create_graph=True)
        if controls is not None:
            best = hamiltonian(model, inputs, controls, first[:, 0], second[:, 0])
        else:
            assert candidates is not None  # exactly one of the two, checked above
            best, _ = max_hamiltonian(model, inputs, first[:, 0], second[:, 0], candidates)
        return model.discount_rate * values - best


def _checked_value(value_fn: ValueFn, states: torch.Tensor, where: str) -> torch.Tensor:
    values = value_fn(states)
    check_tensor("values", values, (states.shape[0],), _FLOATS, where=where)
    return values.to(states.dtype)


def control_thresholds(
    states: np.ndarray, controls: np.ndarray, control: ControlSpec, fraction: float = 0.5
) -> dict[str, float | None]:
    """Where each control switches on, the rule of :meth:`FDSolution.thresholds` made robust
    to a learned policy's wiggles: a control "on" (at least ``fraction`` of its box
    maximum) at the top of the grid reports the start of its last on-run (the dividend
    barrier); one used only lower down reports the highest state where it is on (the
    upper end of the issuance region); ``None`` if never on. ``states [N]``, ``controls [N, A]``."""
    out: dict[str, float | None] = {}
    for j, name in enumerate(control.names):
        high = control.high[j]
        on = controls[:, j] >= fraction * high if high > 0 else np.zeros(len(states), dtype=bool)
        if not on.any():
            out[name] = None
        elif on[-1]:
            off = np.flatnonzero(~on)
            out[name] = float(states[off[-1] + 1]) if off.size else float(states[0])
        else:
            out[name] = float(states[np.flatnonzero(on)[-1]])
    return out


# -- the report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResidualStats:
    """Statistics of ``|R|`` over a set of states."""

    max: float
    """max |R|"""
    mean: float
    """mean |R|"""
    rms: float
    """root mean square of R"""
    argmax: float
    """the state where |R| is largest"""
    max_relative: float
    """max |R| / (rho V*): the relative value error this residual can account for"""

    @classmethod
    def of(cls, states: np.ndarray, residual: np.ndarray, scale: np.ndarray) -> ResidualStats:
        magnitude = np.abs(residual)
        worst = int(np.argmax(magnitude))
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(scale > 0, magnitude / scale, np.inf)
        return cls(
            max=float(magnitude[worst]),
            mean=float(magnitude.mean()),
            rms=float(np.sqrt(np.mean(residual**2))),
            argmax=float(states[worst]),
            max_relative=float(relative.max()),
        )


@dataclass
class HJBValidationReport:
    """What :class:`HJBResidualValidator` measured; :meth:`to_dict` is JSON-ready.

    Residual statistics are on the interior ``[c_min, c_max]``; ``None`` where the input
    needed for them was not given (no value function: no ``R_opt``/``R_pi``; no policy: no
    ``R_pi``, gap, policy error).
    """

    source: str
    method: str
    model: dict[str, Any]
    c_min: float
    c_max: float
    n_points: int
    n_interior: int
    tolerance: float
    residual_optimal: ResidualStats | None
    residual_policy: ResidualStats | None
    hamiltonian_gap: ResidualStats | None
    boundary_layer_residual: ResidualStats | None
    value_at_zero: float | None
    terminal_value: float
    value_error: dict[str, float] | None
    policy_error: dict[str, dict[str, float]] | None
    thresholds: dict[str, dict[str, float | None] | None]
    reference: dict[str, Any]
    curves: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def meets_tolerance(self) -> bool | None:
        """``max |R_opt| <= tolerance`` on the interior (``None`` without a value function)."""
        return None if self.residual_optimal is None else self.residual_optimal.max <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = {
            name: getattr(self, name)
            for name in (
                "source",
                "method",
                "model",
                "c_min",
                "c_max",
                "n_points",
                "n_interior",
                "tolerance",
                "value_at_zero",
                "terminal_value",
                "value_error",
                "policy_error",
                "thresholds",
                "reference",
            )
        }
        for name in ("residual_optimal", "residual_policy", "hamiltonian_gap", "boundary_layer_residual"):
            stats = getattr(self, name)
            out[name] = None if stats is None else asdict(stats)
        out["meets_tolerance"] = self.meets_tolerance
        out["residual_norm"] = (
            f"absolute |rho V - H| on [{self.c_min:g}, {self.c_max:g}] "
            f"({self.n_interior} points); boundary layer (0, {self.c_min:g}) and V(0) reported apart"
        )
        return out


# -- the validator -------------------------------------------------------------------------------


class HJBResidualValidator:
    """Check value functions and policies of a 1-D model against its HJB and FD optimum.

    Args:
        model: any :class:`ContinuousTimeModel` with ``state_dim == 1`` whose absorbing
            boundary is ``x = 0`` (what :func:`~pglab.hjb.fd.solve_hjb_1d` solves).
        reference: the FD optimum; default ``solve_hjb_1d_extrapolated(model,
            x_max=fd_x_max, num_nodes=fd_nodes)``.
        c_min, c_max: the interior interval of the statistics (``c_max`` default: the
            model's ``state_high``). The evaluation grid is ``n_points`` uniform states on
            ``[0, c_max]``; those ``>= c_min`` are the interior.
        points_per_control: resolution of the control grid for ``max_u H``.
        tolerance: the pass mark for ``max |R_opt|`` (1e-3).
        dtype: the dtype of the states handed to value and policy functions.
    """

    def __init__(
        self,
        model: ContinuousTimeModel,
        *,
        reference: FDSolution | None = None,
        c_min: float = 0.1,
        c_max: float | None = None,
        n_points: int = 2001,
        points_per_control: int = 21,
        tolerance: float = 1e-3,
        fd_nodes: int = 24_000,
        fd_x_max: float = 6.0,
        dtype: torch.dtype = torch.float64,
    ):
        if model.state_dim != 1:
            raise ValueError(f"HJBResidualValidator: needs a 1-D state, got state_dim={model.state_dim}")
        self.model = model
        self.reference = (
            reference if reference is not None else solve_hjb_1d_extrapolated(model, x_max=fd_x_max, num_nodes=fd_nodes)
        )
        x_max = float(self.reference.grid[-1])
        self.c_max = float(model.state_high[0]) if c_max is None else float(c_max)
        check_range("c_max", self.c_max, 0.0, x_max, low_inclusive=False)
        check_range("c_min", c_min, 0.0, self.c_max, low_inclusive=False, high_inclusive=False)
        check_int("n_points", n_points, minimum=3)
        check_positive("tolerance", tolerance)
        self.c_min, self.n_points, self.tolerance, self.dtype = float(c_min), n_points, float(tolerance), dtype
        self.candidates = control_candidates(model.control, points_per_control, dtype=dtype)
        grid = np.linspace(0.0, self.c_max, n_points)
        self.grid = grid
        self.states = torch.as_tensor(grid, dtype=dtype).unsqueeze(1)
        self.interior = grid >= self.c_min
        self.layer = (grid > 0.0) & ~self.interior
        if self.interior.sum() < 2:
            raise ConfigError(
                "n_points", n_points, f"leaves fewer than 2 grid points in [c_min, c_max] = [{c_min}, {self.c_max}]"
            )
        # V*, V*', V*'' and u* on the evaluation grid
        self.ref_value, self.ref_first, self.ref_second = _solution_on_grid(self.reference, grid)
        self.ref_controls = self.reference.control_at(grid)
        self.scale = model.discount_rate * np.abs(self.ref_value)
        self.terminal_value = float(model.terminal_value(self.states[:1])[0])

    # -- entry points --------------------------------------------------------------------------

    def validate(
        self,
        value_fn: ValueFn | None = None,
        policy_fn: PolicyFn | None = None,
        *,
        method: Method = "autograd",
        fd_step: float | None = None,
        source: str = "learned",
    ) -> HJBValidationReport:
        """Residuals, boundary value and distance to the FD optimum of a value function
        and/or a policy.

        Args:
            value_fn: states ``[B, 1]`` (the validator's dtype) -> ``V`` ``[B]``.
            policy_fn: states ``[B, 1]`` -> controls ``[B, A]``, the policy's
                deterministic action; clipped to the control box here.
            method: ``autograd`` or ``fd`` derivatives of ``value_fn``.
        """
        if value_fn is None and policy_fn is None:
            raise ValueError("HJBResidualValidator.validate: give a value_fn, a policy_fn or both")
        check_choice("method", method, ("autograd", "fd"))
        derivatives = None
        if value_fn is not None:
            derivatives = tuple(
                t.cpu().double().numpy()
                for t in value_derivatives(value_fn, self.states, method=method, fd_step=fd_step)
            )
        controls = None
        if policy_fn is not None:
            with torch.no_grad():
                raw = policy_fn(self.states)
            check_tensor(
                "controls",
                raw,
                (self.states.shape[0], self.model.action_dim),
                _FLOATS,
                where="HJBResidualValidator.validate: policy_fn(states [B, 1]) must return controls",
            )
            controls = self.model.control.clip(raw.to(self.dtype)).cpu().double().numpy()
        return self._report(derivatives, controls, method=method if value_fn is not None else "none", source=source)

    def validate_solution(self, solution: FDSolution, *, source: str = "FD solution") -> HJBValidationReport:
        """The same report for a finite-difference solution, with its own derivatives and
        controls.

        Central differences are taken on every other node. For a Richardson-extrapolated
        solution (``V = 2 V_h - V_2h``) those are the nodes the two grids share; at the
        others the coarse solution was linearly interpolated, which leaves an
        ``O(h^2 V'')`` zigzag that a stride-1 second difference turns into an ``O(V'')``
        error (measured on GHM: max residual 1e-3 at stride 1, 1e-9 at stride 2 away from
        the switching points). For a plain solution the stride costs nothing (the
        ``(2h)^2`` truncation error is far below the scheme's ``O(h)`` one).
        """
        if float(solution.grid[-1]) < self.c_max:
            raise ConfigError(
                "c_max", self.c_max, f"lies beyond the solution's grid, which ends at {float(solution.grid[-1])}"
            )
        derivatives = _solution_on_grid(solution, self.grid)
        return self._report(derivatives, solution.control_at(self.grid), method="fd-solution", source=source)

    # -- the computation -----------------------------------------------------------------------

    def _report(self, derivatives, controls, *, method: str, source: str) -> HJBValidationReport:
        """The report of a value ``(V, V', V'')`` on the grid (``None``: no value function)
        and of controls ``[N, A]`` (``None``: no policy)."""
        curves: dict[str, np.ndarray] = {
            "states": self.grid,
            "value_reference": self.ref_value,
            "controls_reference": self.ref_controls,
        }
        with torch.no_grad():
            value_stats = self._value_statistics(derivatives, controls, curves) if derivatives is not None else {}
            policy_stats = self._policy_statistics(controls, curves) if controls is not None else {}
        thresholds = {
            "policy": None if controls is None else control_thresholds(self.grid, controls, self.model.control),
            "reference": control_thresholds(self.grid, self.ref_controls, self.model.control),
        }
        return HJBValidationReport(
            source=source,
            method=method,
            model=self.model.describe(),
            c_min=self.c_min,
            c_max=self.c_max,
            n_points=self.n_points,
            n_interior=int(self.interior.sum()),
            tolerance=self.tolerance,
            residual_optimal=value_stats.get("residual_optimal"),
            residual_policy=value_stats.get("residual_policy"),
            hamiltonian_gap=policy_stats.get("hamiltonian_gap"),
            boundary_layer_residual=value_stats.get("boundary_layer_residual"),
            value_at_zero=value_stats.get("value_at_zero"),
            terminal_value=self.terminal_value,
            value_error=value_stats.get("value_error"),
            policy_error=policy_stats.get("policy_error"),
            thresholds=thresholds,
            reference=self._reference_summary(),
            curves=curves,
        )

    def _stats(self, residual: np.ndarray, mask: np.ndarray) -> ResidualStats:
        return ResidualStats.of(self.grid[mask], residual[mask], self.scale[mask])

    def _value_statistics(
        self, derivatives: tuple[np.ndarray, np.ndarray, np.ndarray], controls: np.ndarray | None, curves: dict
    ) -> dict[str, Any]:
        """The value's optimal residual (interior and boundary layer), ``V(0)``, its error
        against ``V*`` and, with ``controls``, the policy-evaluation residual; adds their
        curves to ``curves``."""
        model, interior, layer = self.model, self.interior, self.layer
        value, first, second = derivatives
        first_t, second_t = self._tensor(first), self._tensor(second)
        best, _ = max_hamiltonian(model, self.states, first_t, second_t, self.candidates)
        r_opt = model.discount_rate * value - best.double().numpy()
        curves.update(value=value, residual_optimal=r_opt)
        error = np.abs(value - self.ref_value)[interior]
        out: dict[str, Any] = {
            "residual_optimal": self._stats(r_opt, interior),
            "boundary_layer_residual": self._stats(r_opt, layer) if layer.any() else None,
            "value_at_zero": float(value[0]),
            "value_error": {
                "sup_abs": float(error.max()),
                "mean_abs": float(error.mean()),
                "sup_rel": float((error / np.abs(self.ref_value[interior])).max()),
                "argsup": float(self.grid[interior][int(np.argmax(error))]),
            },
        }
        if controls is not None:
            own = hamiltonian(model, self.states, self._tensor(controls), first_t, second_t).double().numpy()
            r_pi = model.discount_rate * value - own
            out["residual_policy"] = self._stats(r_pi, interior)
            curves["residual_policy"] = r_pi
        return out

    def _policy_statistics(self, controls: np.ndarray, curves: dict) -> dict[str, Any]:
        """The controls' Hamiltonian gap under ``V*`` (how much they leave of ``max_u H``)
        and their distance to the optimal controls; adds their curves to ``curves``."""
        ref_first, ref_second = self._tensor(self.ref_first), self._tensor(self.ref_second)
        best, _ = max_hamiltonian(self.model, self.states, ref_first, ref_second, self.candidates)
        own = hamiltonian(self.model, self.states, self._tensor(controls), ref_first, ref_second)
        gap = (best - own).double().numpy()
        curves.update(controls=controls, hamiltonian_gap=gap)
        difference = np.abs(controls - self.ref_controls)[self.interior]
        return {
            "hamiltonian_gap": self._stats(gap, self.interior),
            "policy_error": {
                name: {"mean_abs": float(difference[:, j].mean()), "max_abs": float(difference[:, j].max())}
                for j, name in enumerate(self.model.control.names)
            },
        }

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, dtype=self.dtype)

    def _reference_summary(self) -> dict[str, Any]:
        """The FD reference's grid, convergence and its scalar metadata."""
        return {
            "nodes": len(self.reference.grid) - 1,
            "x_max": float(self.reference.grid[-1]),
            "converged": bool(self.reference.converged),
            **{
                k: (v.item() if isinstance(v, np.generic) else v)
                for k, v in self.reference.meta.items()
                if isinstance(v, (bool, int, float, str, np.generic))
            },
        }


def _solution_on_grid(solution: FDSolution, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(V, V', V'')`` of an FD solution at ``grid``: its own central differences on every
    other node (see :meth:`HJBResidualValidator.validate_solution`), interpolated linearly."""
    shared = FDSolution(
        grid=solution.grid[::2],
        value=solution.value[::2],
        controls=solution.controls[::2],
        iterations=solution.iterations,
        converged=solution.converged,
        control_names=solution.control_names,
    )
    first, second = shared.derivatives()
    return tuple(np.interp(grid, shared.grid, column) for column in (shared.value, first, second))


def residual_summary(report: HJBValidationReport) -> str:
    """One line: ``max/mean/RMS`` of ``R_opt`` and ``V(0)`` (for logs)."""
    stats = report.residual_optimal
    if stats is None:
        gap = report.hamiltonian_gap
        return f"{report.source}: no value function; policy Hamiltonian gap max {gap.max:.2e}" if gap else report.source
    return (
        f"{report.source}: |R| on [{report.c_min:g}, {report.c_max:g}] max {stats.max:.2e} mean {stats.mean:.2e} "
        f"RMS {stats.rms:.2e}; V(0) = {report.value_at_zero:.4f}"
    )


__all__ = [
    "HJBResidualValidator",
    "HJBValidationReport",
    "ResidualStats",
    "control_candidates",
    "control_thresholds",
    "hamiltonian",
    "hjb_residual_for_training",
    "max_hamiltonian",
    "residual_summary",
    "value_derivatives",
]
