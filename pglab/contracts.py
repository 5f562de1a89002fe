"""Tensor contracts checked where tensors cross a module boundary.

``check_tensor("states", states, ("B", 1), torch.float32)`` raises
:class:`pglab.errors.TensorContractError` with a message that says what was expected and
what arrived::

    GaussianPolicy.act: states expected float32[B, 1], got float64[32, 2] on cpu

Symbolic dimensions (strings) are bound on first use through a shared ``dims`` dict, so
several tensors can be checked for consistent sizes (``B`` must mean the same thing in
``rewards[B, T]`` and ``values[B, T]``). ``None`` accepts any size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pglab.errors import TensorContractError

Dim = int | str | None


def _describe(shape: Sequence[Dim], dtype: torch.dtype | Sequence[torch.dtype] | None) -> str:
    dims = ", ".join("*" if d is None else str(d) for d in shape)
    if dtype is None:
        kind = "tensor"
    elif isinstance(dtype, torch.dtype):
        kind = str(dtype).removeprefix("torch.")
    else:
        kind = "|".join(str(d).removeprefix("torch.") for d in dtype)
    return f"{kind}[{dims}]"


def check_tensor(
    name: str,
    tensor: object,
    shape: Sequence[Dim] | None = None,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    device: torch.device | str | None = None,
    *,
    dims: dict[str, int] | None = None,
    where: str = "",
) -> torch.Tensor:
    """Check one tensor's type, rank, sizes, dtype and device; return it unchanged.

    Args:
        name: argument name used in the message.
        tensor: the value to check.
        shape: expected sizes; ints must match exactly, strings are symbolic (bound in
            ``dims``), ``None`` matches anything. ``None`` for the whole shape skips it.
        dtype: one dtype or a sequence of allowed dtypes.
        device: expected device type (``"cpu"``/``"cuda"``) or exact device.
        dims: bindings of symbolic sizes shared between calls (mutated).
        where: prefix naming the boundary (``"a2c_td0_losses"``).
    """

    if not isinstance(tensor, torch.Tensor):
        prefix = f"{where}: " if where else ""
        raise TensorContractError(
            f"{prefix}{name} expected a torch.Tensor {_describe(shape or (), dtype)}, got {type(tensor).__name__}"
        )
    checked: torch.Tensor = tensor

    # The messages are built only on failure: this runs on hot paths (every env step).
    def fail(template: str) -> TensorContractError:
        prefix = f"{where}: " if where else ""
        expected = _describe(shape or (), dtype)
        got = f"{str(checked.dtype).removeprefix('torch.')}[{', '.join(map(str, checked.shape))}] on {checked.device}"
        return TensorContractError(prefix + template.format(name=name, expected=expected, got=got))

    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if tensor.dtype not in allowed:
            raise fail("{name} expected {expected}, got {got}")
    if shape is not None:
        if tensor.dim() != len(shape):
            raise fail("{name} expected {expected}, got {got}")
        bindings = dims if dims is not None else {}
        for axis, (want, have) in enumerate(zip(shape, tensor.shape, strict=False)):
            if want is None:
                continue
            if isinstance(want, str):
                bound = bindings.setdefault(want, int(have))
                if bound != have:
                    raise fail(
                        f"{{name}} expected {{expected}} with {want}={bound} (from an earlier argument), got {{got}}"
                    )
            elif want != have:
                raise fail(f"{{name}} expected {{expected}}, got {{got}} (axis {axis})")
    if device is not None:
        want_device = torch.device(device)
        same = tensor.device.type == want_device.type and (
            want_device.index is None or tensor.device.index == want_device.index
        )
        if not same:
            raise fail(f"{{name}} expected a tensor on {want_device}, got {{got}}")
    return tensor


def check_same_device(where: str, **tensors: torch.Tensor) -> None:
    """All named tensors must live on one device."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {dev}" for name, dev in devices.items())
        raise TensorContractError(f"{where}: tensors must share one device, got {listing}")
