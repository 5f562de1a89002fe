"""Every parameter of a module as a slice of one flat ``nn.Parameter``.

Why: a classic-control actor-critic has a dozen parameter tensors of a few thousand
numbers in all, so the gradient clip and the Adam step are all per-tensor, per-call
overhead. Over one flat tensor ``torch.nn.utils.clip_grad_norm_`` is one norm and one
multiply, and ``torch.optim.Adam(fused=True)`` one kernel call on one tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class _Method(nn.Module):
    """``module.<name>(*args)`` as a module's ``forward`` (what ``functional_call`` calls)."""

    def __init__(self, module: nn.Module, name: str):
        super().__init__()
        self.module, self.name = module, name

    def forward(self, *args: Any) -> Any:
        return getattr(self.module, self.name)(*args)


class FlatParameters:
    """``module``'s parameters moved into one flat ``nn.Parameter``, :attr:`flat`.

    Building it replaces each parameter of ``module`` by a new ``nn.Parameter`` that is a
    view of :attr:`flat`'s storage holding the same values, so the module, its
    ``state_dict`` (same keys), ``load_state_dict`` (it copies into the views) and its own
    forward passes keep working and see every in-place step of :attr:`flat`. Build it
    before any optimiser and do not move the module to another device or dtype afterwards
    (that would give it new tensors).

    Gradients: :meth:`function` runs a method of the module through ``torch.func.functional_call``
    with differentiable views of :attr:`flat` in place of the parameters, so
    ``loss.backward()`` fills ``flat.grad`` (one tensor); :meth:`grad_view` is the slice of
    a flat gradient that belongs to one parameter (where the closed-form PPO gradient
    writes).
    """

    def __init__(self, module: nn.Module):
        named = list(module.named_parameters(remove_duplicate=False))
        if not named:
            raise ValueError(f"FlatParameters: {type(module).__name__} has no parameters")
        kinds = {(p.device, p.dtype) for _, p in named}
        if len(kinds) != 1 or not all(p.requires_grad for _, p in named):
            raise ValueError(
                "FlatParameters: every parameter must be trainable and share one device and dtype, "
                f"got {sorted(map(str, kinds))}"
            )
        unique = {id(p): p for _, p in named}  # a tied parameter gets one slice
        self.flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in unique.values()]))
        storage = self.flat.detach()
        self._slices: dict[int, tuple[int, int]] = {}
        offset = 0
        for key, param in unique.items():
            self._slices[key] = (offset, offset + param.numel())
            offset += param.numel()
        self._layout: list[tuple[str, int, int, torch.Size]] = []  # (name, start, end, shape)
        replacements: dict[int, nn.Parameter] = {}
        for name, param in named:
            start, end = self._slices[id(param)]
            if id(param) not in replacements:
                replacements[id(param)] = nn.Parameter(storage[start:end].view_as(param))
            owner, _, leaf = name.rpartition(".")
            setattr(module.get_submodule(owner), leaf, replacements[id(param)])
            self._layout.append((f"module.{name}", start, end, param.shape))
        self._slices = {id(replacements[key]): bounds for key, bounds in self._slices.items()}
        self.module = module
        self._methods: dict[str, _Method] = {}

    def views(self) -> dict[str, torch.Tensor]:
        """Differentiable views of :attr:`flat`, by ``functional_call`` name (``module.<name>``)."""
        return {name: self.flat[start:end].view(shape) for name, start, end, shape in self._layout}

    def function(self, method: str) -> Callable[..., Any]:
        """``module.<method>`` as a function computed from views of :attr:`flat`
        (``torch.func.functional_call``): its backward fills ``flat.grad``. The views are
        made once here and stay valid across in-place steps of :attr:`flat` (their autograd
        nodes hold no tensors), so make the function once per update, not per call."""
        wrapper = self._methods.get(method)
        if wrapper is None:
            wrapper = self._methods[method] = _Method(self.module, method)
        views = self.views()

        def call(*args: Any) -> Any:
            # every name (tied ones too) gets its own view of the shared slice: nothing to re-tie
            return torch.func.functional_call(wrapper, views, args, tie_weights=False)

        return call

    def grad_view(self, grad: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """``param -> the slice of grad [numel]`` (a flat gradient) shaped like ``param``, a
        parameter of the module."""

        def view(param: torch.Tensor) -> torch.Tensor:
            start, end = self._slices[id(param)]
            return grad[start:end].view_as(param)

        return view
