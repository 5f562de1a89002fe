"""Adam and the gradient-norm clip over one flat buffer: the same step as
``torch.optim.Adam``, as one kernel instead of a dozen.

Why: on a classic-control actor-critic (about a dozen parameter tensors of a few thousand
numbers in all) the optimiser step is all per-tensor, per-call overhead: ``clip_grad_norm_``
plus ``Adam.step`` cost ~0.25 ms per minibatch on one CPU thread, more than the closed-form
gradient's matrix products (:mod:`pglab.losses.ppo_fused`). Here every parameter, its
``.grad`` and its two Adam moments are slices of four flat tensors, so the clip is one
norm and one multiply (in NumPy on the CPU) and the Adam step is one call of torch's
fused Adam kernel (the one ``torch.optim.Adam(fused=True)`` runs; otherwise its
functional form ``torch.optim.adam.adam``) on one tensor: ~0.02 ms.

The ``torch.optim.Adam`` it wraps stays the owner of the hyperparameters (a learning-rate
schedule writes ``param_groups[0]["lr"]`` as before) and of the checkpointed state: its
``state[p]["exp_avg"]`` / ``["exp_avg_sq"]`` *are* slices of the flat moments, its
per-parameter ``step`` counters are brought up to date whenever ``state_dict()`` is
called, and ``load_state_dict()`` copies the loaded state back into the flat buffers. So a
checkpoint written with or without it loads either way.

Adam's step is elementwise, so one flat tensor gives the result of the same fused (or
foreach) step over the separate tensors, to the last bit or nearly: the kernel's vector
body and its scalar tail may round differently (fused multiply-adds), and which elements
fall in the tail depends on the tensor boundaries. The clip's norm is one reduction over
all the numbers instead of a norm of per-tensor norms: also equal to float rounding. A run
is reproducible either way; it is not bit-identical to one with the per-tensor step.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam

# torch < 2.7's functional adam has no decoupled_weight_decay argument (pyproject allows >= 2.4)
_HAS_DECOUPLED = "decoupled_weight_decay" in inspect.signature(adam).parameters
# The kernel that `adam(..., fused=True)` ends in. Called directly, it skips ~15 us of
# argument checks and tensor grouping per step, twice the kernel's own time on a
# classic-control network; where torch lacks it, the functional form runs as before.
_FUSED_ADAM_KERNEL = getattr(torch, "_fused_adam_", None)


class FlatAdam:
    """``optimizer`` (a ``torch.optim.Adam`` with one parameter group, no amsgrad) stepped
    over flat buffers.

    Building it moves every parameter's data (and ``.grad``, and Adam's moments) into
    slices of flat tensors, keeping their values: the parameters stay the same
    ``nn.Parameter`` objects, so the network, its ``state_dict`` and the optimiser keep
    working. Gradients must be written *into* ``p.grad`` (as
    :class:`pglab.losses.ppo_fused.BoundPPOGradient` does), not assigned.
    """

    def __init__(self, optimizer: torch.optim.Adam):
        if type(optimizer) is not torch.optim.Adam:
            raise TypeError(f"FlatAdam: expected a torch.optim.Adam, got {type(optimizer).__name__}")
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"FlatAdam: expected one parameter group, got {len(optimizer.param_groups)}")
        group = optimizer.param_groups[0]
        unsupported = {
            key: group[key] for key in ("amsgrad", "maximize", "capturable", "differentiable") if group.get(key)
        }
        if unsupported:
            raise ValueError(f"FlatAdam: unsupported Adam options {unsupported}")
        params: list[nn.Parameter] = list(group["params"])
        if len({(p.device, p.dtype) for p in params}) != 1:
            raise ValueError(
                "FlatAdam: every parameter must share one device and dtype, got "
                f"{sorted({(str(p.device), str(p.dtype)) for p in params})}"
            )
        self.optimizer, self.params = optimizer, params
        total = sum(p.numel() for p in params)
        like = params[0]
        self.values = torch.empty(total, dtype=like.dtype, device=like.device)
        self.grad = torch.zeros_like(self.values)
        self.exp_avg = torch.zeros_like(self.values)
        self.exp_avg_sq = torch.zeros_like(self.values)
        # fused Adam keeps its step counter as a float32 tensor on the parameters' device
        self.step_count = torch.zeros((), dtype=torch.float32, device=like.device)
        # on the CPU the norm and the clip run in NumPy on a view of the flat gradient:
        # ~3 us against ~13 for the same few torch calls on ~10k numbers
        self._numpy_grad = self.grad.numpy() if like.device.type == "cpu" and like.dtype == torch.float32 else None
        self._attach()
        optimizer.register_state_dict_pre_hook(lambda _optimizer: self._sync_steps())
        optimizer.register_load_state_dict_post_hook(lambda _optimizer: self._attach())

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @torch.no_grad()
    def _attach(self) -> None:
        """Point every parameter, its ``.grad`` and its Adam state at its slice of the flat
        buffers, keeping the values they hold (the optimiser's loaded state included)."""
        state = self.optimizer.state
        steps = {float(state[p]["step"]) for p in self.params if "step" in state.get(p, {})}
        if len(steps) > 1:
            raise ValueError(
                f"FlatAdam: the parameters' Adam step counts differ ({sorted(steps)}); one step count is needed"
            )
        self.step_count.fill_(steps.pop() if steps else 0.0)
        grad_views: list[torch.Tensor] = []
        offset = 0
        for param in self.params:
            size = param.numel()
            part = slice(offset, offset + size)
            offset += size
            self.values[part].copy_(param.detach().reshape(-1))
            param.data = self.values[part].view_as(param)
            grad = self.grad[part].view_as(param)
            grad_views.append(grad)
            if param.grad is None:
                grad.zero_()
            else:
                grad.copy_(param.grad)
            param.grad = grad
            entry = state.get(param, {})
            moments = {}
            for key, flat in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                moment = flat[part].view_as(param)
                if key in entry:
                    moment.copy_(entry[key])
                else:
                    moment.zero_()
                moments[key] = moment
            state[param] = {"step": self.step_count.clone(), **moments}
        self._grad_views = grad_views

    def ensure_grad_views(self) -> None:
        """Point every ``.grad`` back at its slice of the flat gradient if something replaced
        it (``zero_grad()`` sets it to ``None``): the closed form writes into ``.grad`` and
        the step reads the flat buffer, so they must be the same memory."""
        for param, view in zip(self.params, self._grad_views, strict=False):
            if param.grad is None or param.grad.data_ptr() != view.data_ptr():
                param.grad = view

    def _sync_steps(self) -> None:
        for param in self.params:
            self.optimizer.state[param]["step"].copy_(self.step_count)

    @torch.no_grad()
    def clip_and_step(self, max_grad_norm: float) -> torch.Tensor:
        """Clip the gradient's global 2-norm to ``max_grad_norm`` (``clip_grad_norm_``'s
        arithmetic: ``g *= min(1, max_norm / (||g|| + 1e-6))``), take Adam's step; returns
        the pre-clip norm (0-d)."""
        if self._numpy_grad is not None:
            grad = self._numpy_grad
            norm = np.sqrt(np.dot(grad, grad))  # float32, as torch's vector_norm
            scale = np.float32(max_grad_norm) / (norm + np.float32(1e-6))
            if not scale >= 1.0:  # min(scale, 1) = 1 changes nothing; a NaN scale spreads, as in torch
                grad *= scale
            norm = torch.tensor(norm)
        else:
            norm = torch.linalg.vector_norm(self.grad)
            self.grad.mul_((max_grad_norm / (norm + 1e-6)).clamp_max(1.0))
        group = self.optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        if (
            _FUSED_ADAM_KERNEL is not None
            and group.get("fused")
            and not group["weight_decay"]
            and not group.get("decoupled_weight_decay", False)
            and not isinstance(group["lr"], torch.Tensor)
        ):
            # what torch.optim.adam._fused_adam does for one tensor: count the step, then the kernel
            self.step_count += 1
            _FUSED_ADAM_KERNEL(
                [self.values],
                [self.grad],
                [self.exp_avg],
                [self.exp_avg_sq],
                [],
                [self.step_count],
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
            return norm
        adam(
            [self.values],
            [self.grad],
            [self.exp_avg],
            [self.exp_avg_sq],
            [],
            [self.step_count],
            foreach=group.get("foreach"),
            fused=group.get("fused"),
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            capturable=False,
            differentiable=False,
            grad_scale=None,
            found_inf=None,
            has_complex=False,
            **({"decoupled_weight_decay": group.get("decoupled_weight_decay", False)} if _HAS_DECOUPLED else {}),
        )
        return norm
