"""Checks for configuration fields, used in every config's ``__post_init__``.

Each check raises :class:`pglab.errors.ConfigError` naming the field, the value that
arrived and what was expected, e.g. ``sigma=-0.2: must be >= 0``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pglab.errors import ConfigError


def check_finite(field: str, value: float) -> None:
    """Reject NaN and +-inf (and anything that is not a real number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, value, "must be a number")
    if not math.isfinite(value):
        raise ConfigError(field, value, "must be a finite number")


def check_positive(field: str, value: float) -> None:
    check_finite(field, value)
    if value <= 0:
        raise ConfigError(field, value, "must be > 0")


def check_non_negative(field: str, value: float) -> None:
    check_finite(field, value)
    if value < 0:
        raise ConfigError(field, value, "must be >= 0")


def check_range(
    field: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Check ``low <= value <= high`` (each end optional, inclusive or not)."""
    check_finite(field, value)
    lo_ok = low is None or (value >= low if low_inclusive else value > low)
    hi_ok = high is None or (value <= high if high_inclusive else value < high)
    if not (lo_ok and hi_ok):
        left = "" if low is None else ("[" if low_inclusive else "(") + f"{low}"
        right = "" if high is None else f"{high}" + ("]" if high_inclusive else ")")
        if low is None:
            expected = f"must be {'<=' if high_inclusive else '<'} {high}"
        elif high is None:
            expected = f"must be {'>=' if low_inclusive else '>'} {low}"
        else:
            expected = f"must lie in {left}, {right}"
        raise ConfigError(field, value, expected)


def check_int(field: str, value: int, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, "must be an integer")
    if minimum is not None and value < minimum:
        raise ConfigError(field, value, f"must be >= {minimum}")


def check_choice(field: str, value: Any, choices: Iterable[Any]) -> None:
    options = tuple(choices)
    if value not in options:
        raise ConfigError(field, value, f"must be one of {', '.join(map(repr, options))}")


def check_int_sequence(field: str, values: Sequence[int], minimum: int = 1) -> None:
    if len(values) == 0:
        raise ConfigError(field, tuple(values), "must hold at least one entry")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(field, tuple(values), f"every entry must be an integer >= {minimum}")


def check_device(field: str, value: str) -> None:
    if value not in ("auto", "cpu") and not value.startswith("cuda"):
        raise ConfigError(field, value, "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")


def check_output_file(field: str, path: str | os.PathLike | None) -> None:
    """An output file that can be written when the work is done: not a folder, and its
    folder exists (created here if missing). Called before minutes of evaluation, so a
    bad ``--output`` fails at once, not after."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise ConfigError(field, str(path), "is a folder; give a file name for the JSON results")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            field,
            str(path),
            f"cannot be written: its folder {target.parent} cannot be created ({error.strerror or error})",
        ) from error
    if not os.access(target.parent, os.W_OK):
        raise ConfigError(field, str(path), f"cannot be written: its folder {target.parent} is not writable")
