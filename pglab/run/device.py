"""``--device auto|cpu|cuda[:N]`` resolution."""

from __future__ import annotations

import torch

from pglab.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """Map a ``--device`` value to a ``torch.device``.

    ``auto`` picks CUDA when a GPU is visible, else the CPU. Asking for CUDA on a machine
    without one is a usage error rather than a silent fallback, so timings and
    reproducibility claims always refer to the device the user named.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", name, "CUDA was requested but no GPU is visible; use --device cpu or auto")
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError("device", name, f"only {torch.cuda.device_count()} CUDA device(s) are visible")
        return device
    raise ConfigError("device", name, "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
