"""Gymnasium wrappers named by import path (``env_wrappers``), imported and bound.

A config names each wrapper as ``module.Class`` or ``module.Class(key=value, ...)``
(:func:`pglab.configs.expressions.parse_call` reads it without running anything);
:func:`load_wrappers` imports the classes (``gymnasium.Wrapper`` subclasses only) and
returns ``env -> Class(env, **kwargs)`` functions, innermost first, for
``gymnasium.make_vec(wrappers=...)``. The ``pglab train ppo`` command calls it before a
run starts, so an import error is one line naming the field and nothing is created.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from pglab.configs.expressions import parse_call
from pglab.errors import ConfigError

Wrapper = Callable[[Any], Any]


def _apply(cls: Any, kwargs: dict[str, Any], env: Any) -> Any:
    return cls(env, **kwargs)


def load_wrapper(spec: str, field: str = "env_wrappers") -> Wrapper:
    """``env -> Class(env, **kwargs)`` for one ``module.Class(key=value, ...)`` spec."""
    call = parse_call(spec, field)
    module_name, _, name = call.path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(field, spec, f"cannot import module {module_name!r} ({exc})") from exc
    cls = getattr(module, name, None)
    if cls is None:
        raise ConfigError(field, spec, f"module {module_name!r} has no class {name!r}")
    import gymnasium

    if not (isinstance(cls, type) and issubclass(cls, gymnasium.Wrapper)):
        raise ConfigError(field, spec, f"{call.path} is not a gymnasium.Wrapper class")
    return functools.partial(_apply, cls, dict(call.kwargs))


def load_wrappers(specs: Sequence[str]) -> list[Wrapper]:
    """:func:`load_wrapper` for each spec of ``env_wrappers``, in order (innermost first)."""
    return [load_wrapper(spec, f"env_wrappers[{index}]") for index, spec in enumerate(specs)]
