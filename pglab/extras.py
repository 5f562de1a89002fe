"""pglab's optional extras: which extra brings which package, and :func:`require`, the one
way pglab imports a package of an extra.

``pip install pglab`` installs the core (torch, NumPy, Gymnasium, ...); a system that needs
more names the extra to install. ``require`` imports the package lazily, when a command
needs it, and turns an absent package into one line and exit code 2::

    pglab: error: maxk-pomo needs the 'co' extra (rl4co is not installed): pip install 'pglab[co]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from pglab.errors import MissingExtraError

# top-level package -> the extra of pyproject.toml's [project.optional-dependencies] that installs it
EXTRA_OF: dict[str, str] = {
    "rl4co": "co",
    "elkai": "co",
    "ray": "dist",
    "ale_py": "atari",
    "fredapi": "fred",
    "Box2D": "box2d",
    "minatar": "minatar",
    "rl_zoo3": "zoo",
    "mujoco": "mujoco",
}


def require(module: str, *, needed_by: str) -> ModuleType:
    """Import ``module`` (``"ale_py.vector_env"``) of an optional extra, for ``needed_by``
    (what the user asked for: ``"maxk-pomo"``, ``"Atari envs"``).

    Raises:
        MissingExtraError: the module, or a package it imports, is not installed; the
            message names the extra to install.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(module, needed_by=needed_by, missing=exc.name) from exc


def missing_extra(module: str, *, needed_by: str, missing: str | None = None) -> MissingExtraError:
    """The error :func:`require` raises: ``needed_by`` needs the extra of ``module``;
    ``missing`` is the package that failed to import (``module``'s own by default)."""
    top = module.partition(".")[0]
    if top not in EXTRA_OF:
        raise KeyError(f"{top!r} is in no extra of pglab (pglab.extras.EXTRA_OF)")
    extra = EXTRA_OF[top]
    absent = (missing or top).partition(".")[0]
    return MissingExtraError(
        f"{needed_by} needs the '{extra}' extra ({absent} is not installed): pip install 'pglab[{extra}]'"
    )
