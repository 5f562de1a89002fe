"""The one agent API every checkpoint kind loads into (``pglab.load_checkpoint``).

Every agent has

- ``.kind`` (the checkpoint kind, e.g. ``"ppo"``) and ``.config`` (the trainer config);
- ``.act(obs, deterministic=True)``: tensors in, tensors out, batch-first ``[B, ...]``;
- ``.predict(obs, deterministic=True)``: the same on NumPy arrays (Stable-Baselines3's
  habit), returning a NumPy array;
- ``.value(obs)``: the critic's ``V(s)`` ``[B]`` where the agent has one; agents without
  a critic raise :class:`NoCritic` saying so.

A subclass implements :meth:`Agent.act` (and :meth:`Agent.value` when it has a critic);
:meth:`Agent.predict` is the NumPy wrapper around it, shared by all.

Observations are checked on the way in, by :func:`check_observation` against the agent's
:class:`ObsSpec`: the object type, the shape, the dtype, NaN/inf and, for pixels and
discrete keys, the range. A bad observation raises :class:`ObservationError` (a
``ValueError``; :class:`ObservationTypeError`, also a ``TypeError``, for the wrong kind of
object) whose one line names what was expected and what arrived, e.g.::

    PPOAgent.act: obs expected finite values, got nan at [0, 2]

Inputs of another numeric dtype are cast where the cast loses nothing the agent reads:
real-valued observations (float64, float16, integers) to the network's float dtype, pixels
given as integers or integral floats in 0..255 to uint8. Booleans, strings and objects are
refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pglab.errors import TensorContractError, UsageError

if TYPE_CHECKING:
    import torch

    from pglab.contracts import Dim

# Pixels are uint8: 0..255.
PIXEL_MAX = 255


class NoCritic(UsageError, NotImplementedError):
    """``agent.value(obs)`` on an agent that was trained without a value function."""


class ObservationError(TensorContractError):
    """An agent was given an observation it cannot read: wrong shape, dtype, a NaN/inf, a
    value out of range. The message names what was expected and what arrived."""


class ObservationTypeError(ObservationError, TypeError):
    """An agent was given the wrong kind of object (a list, a dict, ``None``, another class)."""


@dataclass(frozen=True)
class ObsSpec:
    """What an agent reads.

    Attributes:
        shape: sizes as :func:`pglab.contracts.check_tensor` takes them (``"B"`` the batch,
            strings bound across the fields of one observation, ``None`` any size); ``None``
            with ``per_row`` for ``[B, ...]`` of ``per_row`` numbers per row.
        values: ``"real"`` (finite numbers, cast to ``dtype``), ``"pixels"`` (integers
            0..255, cast to uint8) or ``"keys"`` (integers ``0 <= key < high``, int64).
        dtype: the dtype the agent computes in (``"real"`` only; float32 if ``None``).
        high: ``"keys"``: one past the largest valid key.
        per_row: numbers per batch row when ``shape`` is ``None``.
        booleans: ``"real"``: booleans are read as 0/1 (boolean boards such as MinAtar's,
            flattened for a vector policy).
        name: the argument's name in messages (``obs``, ``cash``, ``locs``).
        hint: appended to every message (what the agent takes instead).
    """

    shape: tuple[Dim, ...] | None
    values: Literal["real", "pixels", "keys"] = "real"
    dtype: torch.dtype | None = None
    high: int | None = None
    per_row: int | None = None
    booleans: bool = False
    name: str = "obs"
    hint: str = ""

    def describe(self) -> str:
        """``float32[B, 4]``, ``uint8 pixels 0..255 [B, 1, 8, 8]``, ``int64 keys 0..99 [B]``."""
        if self.shape is None:
            dims = f"B, ... ({self.per_row} numbers per row)"
        else:
            dims = ", ".join("*" if d is None else str(d) for d in self.shape)
        if self.values == "pixels":
            kind = f"uint8 pixels 0..{PIXEL_MAX} "
        elif self.values == "keys":
            kind = f"int64 keys 0..{(self.high or 0) - 1} "
        else:
            kind = str(self.dtype).removeprefix("torch.") if self.dtype is not None else "float32"
        return f"{kind}[{dims}]"


def _fail(where: str, spec: ObsSpec, message: str, error: type[ObservationError] = ObservationError):
    hint = f" ({spec.hint})" if spec.hint else ""
    return error(f"{where}: {spec.name} expected {message}{hint}")


def _got(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}[{', '.join(map(str, tensor.shape))}]"


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    """The index of the first ``True`` of ``mask``."""
    return tuple(int(i) for i in mask.nonzero()[0])


def check_observation(
    obs: Any, spec: ObsSpec, *, where: str, device: Any = None, dims: dict[str, int] | None = None
) -> torch.Tensor:
    """``obs`` checked against ``spec`` and cast to what the agent reads, on ``device``
    (``None``: where it is). Raises :class:`ObservationTypeError` for anything but a
    tensor, :class:`ObservationError` for a wrong shape, dtype, a NaN/inf or a value out
    of range; ``dims`` shares symbolic sizes between the fields of one observation."""
    import torch

    if not isinstance(obs, torch.Tensor):
        raise _fail(where, spec, f"a torch.Tensor {spec.describe()}, got {type(obs).__name__}", ObservationTypeError)
    _check_shape(obs, spec, where, dims)
    if (obs.dtype == torch.bool and not (spec.booleans and spec.values == "real")) or obs.is_complex():
        raise _fail(where, spec, f"{spec.describe()}, got {_got(obs)}")
    if spec.values == "real":
        return _real(obs, spec, where, device)
    return _integers(obs, spec, where, device)


def _check_shape(obs: torch.Tensor, spec: ObsSpec, where: str, dims: dict[str, int] | None) -> None:
    from pglab.contracts import check_tensor

    if spec.shape is not None:
        try:
            check_tensor(spec.name, obs, spec.shape, dims=dims, where=where)
        except TensorContractError as exc:
            hint = f" ({spec.hint})" if spec.hint else ""
            raise ObservationError(f"{exc}{hint}") from None
    elif obs.dim() < 2 or obs[0].numel() != spec.per_row:
        raise _fail(where, spec, f"{spec.describe()}, got {_got(obs)}")


def _real(obs: torch.Tensor, spec: ObsSpec, where: str, device: Any) -> torch.Tensor:
    import torch

    cast = obs.to(device=device, dtype=spec.dtype or torch.float32)
    finite = torch.isfinite(cast)
    if not bool(finite.all()):
        index = _first(~finite)
        raise _fail(where, spec, f"finite values, got {obs[index].item()} at {list(index)}")
    return cast


def _integers(obs: torch.Tensor, spec: ObsSpec, where: str, device: Any) -> torch.Tensor:
    import torch

    low, high = (0, PIXEL_MAX) if spec.values == "pixels" else (0, (spec.high or 0) - 1)
    what = "pixels" if spec.values == "pixels" else "state keys"
    if obs.is_floating_point():
        if spec.values == "keys":
            raise _fail(where, spec, f"{spec.describe()}, got {_got(obs)}")
        fractional = obs != obs.round()  # NaN != NaN: caught here too
        if bool(fractional.any()):
            index = _first(fractional)
            raise _fail(where, spec, f"{what} as integers {low}..{high}, got {obs[index].item()} at {list(index)}")
    outside = (obs < low) | (obs > high)
    if bool(outside.any()):
        index = _first(outside)
        raise _fail(where, spec, f"{what} in {low}..{high}, got {obs[index].item()} at {list(index)}")
    return obs.to(device=device, dtype=torch.uint8 if spec.values == "pixels" else torch.int64)


def numeric_tensor(obs: Any, *, where: str, name: str = "obs", device: Any = None) -> torch.Tensor:
    """A NumPy array (or nested lists of numbers, a number, a tensor) as a tensor, dtype
    kept, on ``device``. Anything else, and arrays of strings or objects, raise
    :class:`ObservationTypeError` naming what arrived."""
    import numbers

    import numpy as np
    import torch

    if isinstance(obs, torch.Tensor):
        return obs.to(device) if device is not None else obs
    if not isinstance(obs, (np.ndarray, list, tuple, numbers.Number, np.generic)):
        raise ObservationTypeError(f"{where}: {name} expected a NumPy array of numbers, got {type(obs).__name__}")
    try:
        array = np.asarray(obs)
    except ValueError as exc:  # ragged nested lists
        raise ObservationTypeError(f"{where}: {name} expected a NumPy array of numbers, got {exc}") from None
    if array.dtype.kind not in "biuf":
        raise ObservationTypeError(
            f"{where}: {name} expected a NumPy array of numbers, got an array of dtype {array.dtype} "
            f"shape {list(array.shape)}"
        )
    return torch.as_tensor(array, device=device)


class Agent:
    """Base class of the agents returned by ``pglab.load_checkpoint``.

    Attributes:
        kind: the checkpoint kind.
        config: the trainer config the agent was trained with.
        device: the ``torch.device`` the agent's tensors live on.
    """

    kind: str
    config: Any
    device: Any

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """Actions for a batch of observations (tensors on ``self.device``)."""
        raise NotImplementedError(f"{type(self).__name__}.act")

    def value(self, obs: Any) -> Any:
        """``V(s)`` ``[B]`` for a batch of observations."""
        raise NoCritic(f"{self.kind} agent: has no value function (this algorithm trains no critic)")

    def predict(self, obs: Any, deterministic: bool = True) -> Any:
        """:meth:`act` on NumPy arrays: ``obs`` (an array of numbers, or nested lists of
        them) becomes a tensor on the agent's device with its dtype kept, :meth:`act`
        checks and casts it; the result comes back as a NumPy array. Strings, objects and
        other types raise :class:`ObservationTypeError`."""
        import torch

        tensor = numeric_tensor(obs, where=f"{type(self).__name__}.predict", device=self.device)
        with torch.no_grad():
            out = self.act(tensor, deterministic=deterministic)
        if isinstance(out, torch.Tensor):
            return out.detach().cpu().numpy()
        if isinstance(out, (tuple, list)):
            return type(out)(o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out)
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={getattr(self, 'kind', '?')!r} device={getattr(self, 'device', '?')}>"
