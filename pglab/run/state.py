"""The state a run registers once, and the checkpoint the shell builds from it.

A trainer hands the shell every object whose state must survive a stop
(:meth:`pglab.run.shell.TrainingRun.track`)::

    run.track(
        models={"agent": net},                      # nn.Module: state_dict / load_state_dict
        optimizers={"agent": optimizer},            # anything with state_dict / load_state_dict
        rngs={"action": generator},                 # torch.Generator (the global RNGs always travel)
        state={"env": env, "tracker": tracker},     # anything with state_dict / load_state_dict
        meta={"obs_dim": 4},                        # fixed facts of the run, checked on resume
    )

From then on the shell saves, seals and restores them; the trainer writes no checkpoint
code. On a resume, ``track`` restores every object at once from the checkpoint, and a
stored ``meta`` value that differs from this run's is refused (the checkpoint belongs to
another environment or network).

The checkpoint layout (:func:`pglab.run.checkpoint.build_checkpoint`): ``models`` and
``optimizers`` by name, ``rng`` (the global RNGs and the named generators), and
``extra``: each ``state`` object's ``state_dict()`` and each ``meta`` value under its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from pglab.errors import CheckpointError


class Stateful(Protocol):
    """What the shell checkpoints: the ``torch.nn.Module`` / ``torch.optim`` protocol."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


class Value:
    """A plain value held for the shell (the current observations, a running total).

    The trainer reads and writes ``.value``; the checkpoint stores it as it is (tensors
    are moved to the CPU and restored to the device they had).
    """

    def __init__(self, value: Any):
        self.value = value

    def state_dict(self) -> Any:
        if isinstance(self.value, torch.Tensor):
            return self.value.detach().cpu().clone()
        return self.value

    def load_state_dict(self, state: Any) -> None:
        if isinstance(self.value, torch.Tensor) and isinstance(state, torch.Tensor):
            state = state.to(self.value.device)
        self.value = state


@dataclass
class StateRegistry:
    """Everything one run checkpoints, by kind and name (see the module docstring)."""

    models: dict[str, torch.nn.Module] = field(default_factory=dict)
    optimizers: dict[str, Stateful] = field(default_factory=dict)
    rngs: dict[str, torch.Generator] = field(default_factory=dict)
    state: dict[str, Stateful] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(
        self,
        *,
        models: Mapping[str, torch.nn.Module] | None = None,
        optimizers: Mapping[str, Stateful] | None = None,
        rngs: Mapping[str, torch.Generator] | None = None,
        state: Mapping[str, Stateful] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Register objects; a name may be registered once across ``state`` and ``meta``."""
        taken = set(self.state) | set(self.meta)
        for name in (*(state or {}), *(meta or {})):
            if name in taken:
                raise ValueError(f"track: {name!r} is registered twice")
            taken.add(name)
        for name, kind in (("models", models), ("optimizers", optimizers), ("rngs", rngs)):
            existing = getattr(self, name)
            for key in kind or {}:
                if key in existing:
                    raise ValueError(f"track: {name} {key!r} is registered twice")
        self.models.update(models or {})
        self.optimizers.update(optimizers or {})
        self.rngs.update(rngs or {})
        self.state.update(state or {})
        self.meta.update(meta or {})

    def capture(self) -> dict[str, Any]:
        """The ``models``, ``optimizers``, ``rng`` and ``extra`` entries of a checkpoint."""
        from pglab.run.seeding import capture_rng_state

        return {
            "models": {name: module.state_dict() for name, module in self.models.items()},
            "optimizers": {name: optimizer.state_dict() for name, optimizer in self.optimizers.items()},
            "rng": capture_rng_state(self.rngs),
            "extra": {
                **{name: obj.state_dict() for name, obj in self.state.items()},
                **dict(self.meta),
            },
        }

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        """Load a checkpoint into the registered objects and the global RNGs; a missing
        entry or a differing ``meta`` value is a :class:`CheckpointError` naming it."""
        from pglab.run.checkpoint import load_state_dict_checked
        from pglab.run.seeding import restore_rng_state

        source = str(checkpoint.get("path", "<memory>"))
        for name, value in self.meta.items():
            stored = _lookup(checkpoint, "extra", name, source)
            if _plain(stored) != _plain(value):
                raise CheckpointError(
                    f"checkpoint {source}: its {name} {_plain(stored)!r} differs from this run's {_plain(value)!r}"
                )
        for name, module in self.models.items():
            load_state_dict_checked(module, _lookup(checkpoint, "models", name, source), name=name, source=source)
        for name, optimizer in self.optimizers.items():
            try:
                optimizer.load_state_dict(_lookup(checkpoint, "optimizers", name, source))
            except (ValueError, KeyError, RuntimeError) as error:  # torch's words for another parameter layout
                first = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise CheckpointError(
                    f"checkpoint {source}: optimizer {name!r} does not match this run's parameters ({first})"
                ) from error
        for name, obj in self.state.items():
            obj.load_state_dict(_lookup(checkpoint, "extra", name, source))
        restore_rng_state(checkpoint["rng"], self.rngs)


def _lookup(checkpoint: Mapping[str, Any], section: str, name: str, source: str) -> Any:
    entries = checkpoint.get(section)
    if not isinstance(entries, Mapping) or name not in entries:
        raise CheckpointError(
            f"checkpoint {source}: holds no {section} entry {name!r}, which this run needs to resume "
            "(written by another set-up or another version of pglab)"
        )
    return entries[name]


def _plain(value: Any) -> Any:
    """Lists for tuples, so that a value and its stored (JSON-like) form compare equal."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
