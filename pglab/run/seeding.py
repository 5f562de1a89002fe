"""Seeding and RNG-state capture, so that runs are reproducible and resume exactly."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import cast

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's legacy global and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A private torch generator on ``device``: simulators draw from their own stream so
    that unrelated global RNG use (e.g. weight init, dropout) cannot shift their noise."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def capture_rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict:
    """All RNG states needed to continue a run bit-identically.

    The result holds only tensors, ints, lists and strings, so checkpoints can be loaded
    with ``torch.load(weights_only=True)``.
    """
    np_state = cast(tuple, np.random.get_state(legacy=True))  # the legacy form is a tuple
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": np_state[0],
            "keys": np_state[1].tolist(),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {name: gen.get_state() for name, gen in (generators or {}).items()},
    }
    return state


def restore_rng_state(state: Mapping, generators: Mapping[str, torch.Generator] | None = None) -> None:
    """Inverse of :func:`capture_rng_state`."""
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np.asarray(np_state["keys"], dtype=np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("generators", {})
    for name, generator in (generators or {}).items():
        if name in saved:
            generator.set_state(saved[name])
