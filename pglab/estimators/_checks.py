"""Shared argument checks for the estimators."""

from __future__ import annotations

import math

import torch

from pglab.contracts import check_tensor

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_discount(where: str, name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{where}: {name} must lie in [0, 1], got {value!r}")


def check_flags(where: str, name: str, flags: torch.Tensor, dims: dict[str, int]) -> torch.Tensor:
    """Accept bool or 0/1 float flags of shape [B, T]; return them as the float dtype 1-flag."""
    check_tensor(name, flags, ("B", "T"), dims=dims, where=where)
    return flags


def check_rewards(where: str, rewards: torch.Tensor, dims: dict[str, int]) -> None:
    check_tensor("rewards", rewards, ("B", "T"), FLOATS, dims=dims, where=where)
