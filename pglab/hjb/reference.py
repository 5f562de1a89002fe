"""The exact value ``V*`` a trained policy is compared with: one interface for every model.

A model's ``reference`` hook (:meth:`pglab.envs.dynamics.ContinuousTimeModel.reference`)
returns a :class:`ValueReference`; the trainer, ``pglab evaluate`` and the sweep use only
this interface, whatever the state's dimension:

* :meth:`ValueReference.value_at` -- ``V*`` at states ``[P, d]`` (the "% of V*" columns);
* :meth:`ValueReference.value_bound` -- ``V*`` as a torch function of states ``[B, d]``: no
  policy beats it, so it bounds the discounted tail a simulated evaluation leaves out;
* :meth:`ValueReference.value_slope` -- ``grad V*`` ``[B, d]``, the coefficient of the
  evaluation's control variate (any function keeps it unbiased; this one makes it small);
* :meth:`ValueReference.policy_value` -- the exact value of a fixed feedback policy where
  the reference can compute one (one state: FD policy evaluation), else ``None``;
* :meth:`ValueReference.to_arrays` -- NumPy arrays to cache it in a run directory
  (``fd_reference.npz``); the model's ``reference_from_arrays`` reads them back.

The references here: :class:`FDReference` (a 1-D FD solution, :mod:`pglab.hjb.fd`),
:class:`SeparableReference` (a sum of 1-D solutions, one per coordinate: a model made of
independent parts), :class:`RegimeReference` (one 1-D solution per regime of a Markov
regime coordinate) and :class:`GridReference2D` (a value on a tensor grid of two states).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import numpy as np
import torch

from pglab.envs.dynamics import ContinuousTimeModel
from pglab.envs.simulator import interpolate_uniform
from pglab.hjb.fd import FDSolution, evaluate_policy_1d

TorchFn = Callable[[torch.Tensor], torch.Tensor]
ControlsFn = Callable[[np.ndarray], np.ndarray]


class ValueReference(abc.ABC):
    """The exact optimum of a model (module docstring)."""

    @abc.abstractmethod
    def value_at(self, states: np.ndarray) -> np.ndarray:
        """``V*`` at ``states [P, d]`` (NumPy float64), ``[P]``."""

    @abc.abstractmethod
    def value_bound(self) -> TorchFn:
        """``V*`` as a torch function ``[B, d] -> [B]`` (an upper bound of any policy's value)."""

    @abc.abstractmethod
    def value_slope(self) -> TorchFn:
        """``grad V*`` as a torch function ``[B, d] -> [B, d]``."""

    def policy_value(self, model: ContinuousTimeModel, controls: ControlsFn, states: np.ndarray) -> np.ndarray | None:
        """The exact value at ``states [P, d]`` of the feedback policy ``controls`` (states
        ``[N, d]`` -> controls ``[N, A]``, NumPy, in the box), or ``None`` where this
        reference cannot compute it."""
        return None

    def thresholds(self) -> dict[str, float | None]:
        """The optimal policy's switching points in the state (1-D references; else empty)."""
        return {}

    @abc.abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that define the reference (``np.savez``-ready)."""


def on_uniform_grid(grid: np.ndarray, values: np.ndarray, *, beyond: str) -> TorchFn:
    """``values`` on the uniform ``grid`` as a torch function of points ``[B]`` -> ``[B]``
    (linear interpolation on the CPU tables; beyond the grid's end: the last value,
    ``"hold"``, or 0, ``"zero"``; below its start: the first value)."""
    table = torch.as_tensor(values, dtype=torch.float32)
    low, step, top = float(grid[0]), float(grid[1] - grid[0]), float(grid[-1])

    def interpolate(points: torch.Tensor) -> torch.Tensor:
        position = points.cpu()
        out = interpolate_uniform(table, low, step, position)
        if beyond == "zero":
            out = out * (position <= top)
        return out.to(points.device, points.dtype)

    return interpolate


class FDReference(ValueReference):
    """A one-state model's FD solution (:func:`pglab.hjb.fd.solve_hjb_1d_extrapolated`)."""

    def __init__(self, solution: FDSolution):
        self.solution = solution

    def value_at(self, states: np.ndarray) -> np.ndarray:
        return self.solution.value_at(np.asarray(states, dtype=np.float64).reshape(-1))

    def value_bound(self) -> TorchFn:
        values = on_uniform_grid(self.solution.grid, self.solution.value, beyond="hold")
        return lambda states: values(states[:, 0])

    def value_slope(self) -> TorchFn:
        """``V*'`` by central differences on the grid, linearly interpolated, 0 beyond it."""
        slope = on_uniform_grid(self.solution.grid, np.gradient(self.solution.value, self.solution.grid), beyond="zero")
        return lambda states: slope(states[:, 0]).unsqueeze(1)

    def policy_value(self, model: ContinuousTimeModel, controls: ControlsFn, states: np.ndarray) -> np.ndarray:
        """FD policy evaluation on the reference's grid (:func:`pglab.hjb.fd.evaluate_policy_1d`)."""
        nodes = max(len(self.solution.grid) - 1, 20)
        evaluated = evaluate_policy_1d(model, controls, x_max=float(self.solution.grid[-1]), num_nodes=nodes)
        return evaluated.value_at(np.asarray(states, dtype=np.float64).reshape(-1))

    def thresholds(self) -> dict[str, float | None]:
        return self.solution.thresholds()

    def to_arrays(self) -> dict[str, np.ndarray]:
        solution = self.solution
        return {
            "grid": solution.grid,
            "value": solution.value,
            "controls": solution.controls,
            "iterations": np.asarray(solution.iterations),
            "converged": np.asarray(solution.converged),
        }

    @classmethod
    def from_arrays(cls, arrays, control_names: Sequence[str], prefix: str = "") -> FDReference:
        return cls(
            FDSolution(
                grid=arrays[f"{prefix}grid"],
                value=arrays[f"{prefix}value"],
                controls=arrays[f"{prefix}controls"],
                iterations=int(arrays[f"{prefix}iterations"]),
                converged=bool(arrays[f"{prefix}converged"]),
                control_names=tuple(control_names),
            )
        )


def _prefixed(reference: FDReference, prefix: str) -> dict[str, np.ndarray]:
    return {f"{prefix}{name}": array for name, array in reference.to_arrays().items()}


class SeparableReference(ValueReference):
    """``V*(x) = sum_j V_{p(j)}(x_j)``: a model whose coordinates are independent parts with
    one-state optima (N divisions of a firm, each liquidated on its own).

    Args:
        parts: the distinct one-state FD references.
        part_of: for each coordinate ``j``, the index of its reference in ``parts``.
    """

    def __init__(self, parts: Sequence[FDReference], part_of: Sequence[int]):
        self.parts, self.part_of = tuple(parts), tuple(int(index) for index in part_of)

    def value_at(self, states: np.ndarray) -> np.ndarray:
        states = np.asarray(states, dtype=np.float64)
        columns = [self.parts[index].value_at(states[:, j]) for j, index in enumerate(self.part_of)]
        return np.sum(columns, axis=0)

    def _coordinatewise(self, kind: str) -> TorchFn:
        functions = [getattr(part, kind)() for part in self.parts]

        def evaluate(states: torch.Tensor) -> torch.Tensor:
            columns = [functions[index](states[:, j : j + 1]) for j, index in enumerate(self.part_of)]
            return torch.stack(columns, dim=1) if kind == "value_bound" else torch.cat(columns, dim=1)

        return evaluate

    def value_bound(self) -> TorchFn:
        per_part = self._coordinatewise("value_bound")
        return lambda states: per_part(states).sum(1)

    def value_slope(self) -> TorchFn:
        return self._coordinatewise("value_slope")

    def policy_value(self, model: ContinuousTimeModel, controls: ControlsFn, states: np.ndarray) -> np.ndarray | None:
        """With one part, the FD policy evaluation of a one-state policy; with several, a
        joint policy does not separate, so there is no exact value (``None``)."""
        if len(self.part_of) != 1:
            return None
        return self.parts[self.part_of[0]].policy_value(model, controls, states)

    def thresholds(self) -> dict[str, float | None]:
        return self.parts[self.part_of[0]].thresholds() if len(self.parts) == 1 else {}

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {"part_of": np.asarray(self.part_of)}
        for index, part in enumerate(self.parts):
            arrays.update(_prefixed(part, f"part{index}_"))
        return arrays

    @classmethod
    def from_arrays(cls, arrays, control_names: Sequence[str]) -> SeparableReference:
        part_of = [int(index) for index in arrays["part_of"]]
        parts = [FDReference.from_arrays(arrays, control_names, f"part{index}_") for index in range(max(part_of) + 1)]
        return cls(parts, part_of)


class RegimeReference(ValueReference):
    """``V*(c, s) = V_s(c)``: one one-state FD solution per regime of a Markov regime
    coordinate, on a shared grid of the other coordinate (GHM with switching financing
    conditions: :mod:`pglab.hjb.fd_regimes`).

    Args:
        regimes: ``V_s`` for ``s = 0, 1, ...`` (as :class:`FDReference`).
        coordinate: the state coordinate of the continuous variable (cash); the other one
            holds the regime.
    """

    def __init__(self, regimes: Sequence[FDReference], coordinate: int = 0):
        self.regimes, self.coordinate = tuple(regimes), coordinate
        self.regime_coordinate = 1 - coordinate

    def value_at(self, states: np.ndarray) -> np.ndarray:
        states = np.asarray(states, dtype=np.float64)
        values = np.stack([regime.value_at(states[:, self.coordinate]) for regime in self.regimes])  # [S, P]
        index = np.rint(states[:, self.regime_coordinate]).astype(int)
        return values[index, np.arange(states.shape[0])]

    def _by_regime(self, functions: list[TorchFn], states: torch.Tensor) -> torch.Tensor:
        continuous = states[:, self.coordinate : self.coordinate + 1]
        stacked = torch.stack([function(continuous) for function in functions])  # [S, B, ...]
        index = states[:, self.regime_coordinate].long()
        return stacked[index, torch.arange(states.shape[0], device=states.device)]

    def value_bound(self) -> TorchFn:
        functions = [regime.value_bound() for regime in self.regimes]
        return lambda states: self._by_regime(functions, states)

    def value_slope(self) -> TorchFn:
        """``(V_s'(c), 0)``: the regime coordinate does not diffuse, so its slope never multiplies noise."""
        functions = [regime.value_slope() for regime in self.regimes]

        def slope(states: torch.Tensor) -> torch.Tensor:
            out = torch.zeros_like(states)
            out[:, self.coordinate] = self._by_regime(functions, states)[:, 0]
            return out

        return slope

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {"coordinate": np.asarray(self.coordinate)}
        for index, regime in enumerate(self.regimes):
            arrays.update(_prefixed(regime, f"regime{index}_"))
        return arrays

    @classmethod
    def from_arrays(cls, arrays, control_names: Sequence[str]) -> RegimeReference:
        count = sum(1 for name in arrays if name.startswith("regime") and name.endswith("_value"))
        regimes = [FDReference.from_arrays(arrays, control_names, f"regime{index}_") for index in range(count)]
        return cls(regimes, int(arrays["coordinate"]))


class GridReference2D(ValueReference):
    """A value on a tensor grid of two states, ``values[i, j] = V*(x_i, y_j)`` (uniform
    grids), bilinearly interpolated, clamped to the grid (:mod:`pglab.hjb.fd2d`)."""

    def __init__(self, x_grid: np.ndarray, y_grid: np.ndarray, values: np.ndarray):
        self.x_grid, self.y_grid = np.asarray(x_grid, np.float64), np.asarray(y_grid, np.float64)
        self.values = np.asarray(values, np.float64)
        if self.values.shape != (self.x_grid.size, self.y_grid.size):
            raise ValueError(
                f"GridReference2D: values {self.values.shape} must be [len(x_grid), len(y_grid)] "
                f"= [{self.x_grid.size}, {self.y_grid.size}]"
            )

    def _bilinear(self, table: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """``table [Nx, Ny]`` at ``states [B, 2]`` (float64 on the CPU)."""
        grids = (self.x_grid, self.y_grid)
        cells, weights = [], []
        for axis in (0, 1):
            grid = grids[axis]
            position = ((states[:, axis] - grid[0]) / (grid[1] - grid[0])).clamp(0.0, grid.size - 1.0)
            index = position.floor().clamp(max=grid.size - 2).long()
            cells.append(index)
            weights.append(position - index.to(position.dtype))
        (i, j), (u, v) = cells, weights
        return (
            (1 - u) * (1 - v) * table[i, j]
            + u * (1 - v) * table[i + 1, j]
            + (1 - u) * v * table[i, j + 1]
            + u * v * table[i + 1, j + 1]
        )

    def value_at(self, states: np.ndarray) -> np.ndarray:
        points = torch.as_tensor(np.asarray(states, dtype=np.float64))
        return self._bilinear(torch.as_tensor(self.values), points).numpy()

    def value_bound(self) -> TorchFn:
        table = torch.as_tensor(self.values)
        return lambda states: self._bilinear(table, states.detach().cpu().double()).to(states.device, states.dtype)

    def value_slope(self) -> TorchFn:
        """Central differences of the grid values along each axis, bilinearly interpolated."""
        slopes = [
            torch.as_tensor(np.gradient(self.values, grid, axis=axis))
            for axis, grid in enumerate((self.x_grid, self.y_grid))
        ]

        def slope(states: torch.Tensor) -> torch.Tensor:
            points = states.detach().cpu().double()
            out = torch.stack([self._bilinear(table, points) for table in slopes], dim=1)
            return out.to(states.device, states.dtype)

        return slope

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"x_grid": self.x_grid, "y_grid": self.y_grid, "values": self.values}

    @classmethod
    def from_arrays(cls, arrays, control_names: Sequence[str]) -> GridReference2D:
        return cls(arrays["x_grid"], arrays["y_grid"], arrays["values"])


def as_reference(reference: ValueReference | FDSolution) -> ValueReference:
    """A :class:`ValueReference` for either one or a plain 1-D :class:`FDSolution`."""
    return FDReference(reference) if isinstance(reference, FDSolution) else reference
