"""Checks for configuration fields, used in every config's ``__post_init__``.

Each check raises :class:`pglab.errors.ConfigError` naming the field, the value that
arrived and what was expected, e.g. ``sigma=-0.2: must be >= 0``.
"""

from __future__ import annotations

import dataclasses
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
    """An output file that can be written when the work is done (:func:`check_output_path`
    with a file expected). Called before minutes of evaluation, so a bad ``--output`` fails
    at once, not after; nothing is created."""
    check_output_path(field, path)


# -- seeds, threads and memory -------------------------------------------------------------------

MAX_SEED = 2**63 - 1
"""The largest seed: torch.manual_seed takes 64-bit integers, NumPy's generators any
non-negative integer (the legacy global one ``seed % 2**32``); seeds derived by adding a
small offset (the evaluation's ``seed + 2``) stay within 64 bits."""

THREADS_PER_CORE = 4
"""``--threads`` may ask for at most this many threads per CPU core: more only slows torch
down, and tens of thousands fail to start (the OS refuses the threads)."""


def check_seed(field: str, value: int) -> None:
    """A seed in ``[0, MAX_SEED]``."""
    check_int(field, value, minimum=0)
    if value > MAX_SEED:
        raise ConfigError(field, value, "must be <= 2**63 - 1 (a 64-bit seed)")


def max_threads() -> int:
    """The largest ``--threads``: :data:`THREADS_PER_CORE` x the machine's CPU cores."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def check_threads(field: str, value: int) -> None:
    """A thread count in ``[0, max_threads()]`` (0: torch's default)."""
    check_int(field, value, minimum=0)
    if value > max_threads():
        raise ConfigError(
            field, value, f"must be <= {max_threads()} ({THREADS_PER_CORE} x the {os.cpu_count() or 1} CPU cores)"
        )


def available_memory_bytes() -> int | None:
    """Memory the machine can give a new allocation now: ``MemAvailable`` of /proc/meminfo
    (Linux), else the free physical pages (``SC_AVPHYS_PAGES``); ``None`` when neither can
    be read (no check is made then)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _gigabytes(count: float) -> str:
    return f"{count / 1e9:,.1f} GB" if count < 1e10 else f"{count / 1e9:,.0f} GB"


def check_memory(field: str, value: Any, bytes_needed: float, what: str) -> None:
    """Refuse ``value`` of ``field`` when ``bytes_needed`` (an estimate for ``what``, e.g.
    "the FD grid") exceeds the memory this machine has available now."""
    available = available_memory_bytes()
    if available is None or bytes_needed <= available:
        return
    raise ConfigError(
        field,
        value,
        f"needs ~{_gigabytes(bytes_needed)} for {what}, this machine has {_gigabytes(available)} available",
    )


# -- paths ---------------------------------------------------------------------------------------

PATH_MAX = 4096  # Linux's limit on a whole path, in bytes
NAME_MAX = 255  # the usual limit on one path component, when the filesystem cannot be asked


def _existing_ancestor(path: Path) -> Path:
    """The nearest folder above ``path`` (or ``path`` itself) that exists."""
    candidate = path.absolute()
    while candidate != candidate.parent:
        try:
            if candidate.exists():
                break
        except OSError:  # a name too long for the filesystem: it does not exist either
            pass
        candidate = candidate.parent
    return candidate


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def check_path(field: str, path: str | os.PathLike | None) -> None:
    """A path the OS can take: not empty, no NUL byte, at most :data:`PATH_MAX` bytes and no
    component longer than the filesystem's name limit (``PC_NAME_MAX``, usually 255 bytes).
    Whether it exists is the caller's question."""
    if path is None:
        return
    text = os.fspath(path)
    if isinstance(text, bytes) or text.strip() == "":
        raise ConfigError(field, text, "must be a path")
    if "\0" in text:
        raise ConfigError(field, text, "must not contain a NUL byte")
    if len(os.fsencode(text)) > PATH_MAX:
        raise ConfigError(field, text, f"is longer than {PATH_MAX} bytes")
    limit = _name_max(_existing_ancestor(Path(text)))
    for part in Path(text).parts:
        if len(os.fsencode(part)) > limit:
            raise ConfigError(field, text, f"has a component of {len(os.fsencode(part))} bytes (the limit is {limit})")


def check_output_path(field: str, path: str | os.PathLike | None, *, folder: bool = False) -> None:
    """An output the command can create when its work is done, checked before the work and
    without creating anything: a valid path (:func:`check_path`) whose nearest existing
    ancestor is a writable folder, that is not an existing folder when a file is expected
    (``folder=False``) nor an existing file when a folder is (``folder=True``)."""
    if path is None:
        return
    check_path(field, path)
    target = Path(path)
    if not folder and target.is_dir():
        raise ConfigError(field, str(path), "is a folder; give a file name")
    if folder and target.exists() and not target.is_dir():
        raise ConfigError(field, str(path), "is a file; give a folder")
    ancestor = _existing_ancestor(target.parent)
    if not ancestor.is_dir():
        raise ConfigError(field, str(path), f"cannot be created: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(field, str(path), f"cannot be created: the folder {ancestor} is not writable")


def check_path_fields(config: Any) -> None:
    """:func:`check_path` on every path-valued field of a config dataclass (a ``Path``, or a
    tuple of them), each named by its field."""
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        for entry in values:
            if isinstance(entry, os.PathLike):
                check_path(item.name, entry)


def check_new_run_dir(config: Any) -> None:
    """A trainer's ``log_dir`` (when it starts a fresh run: no ``resume``) can be created:
    :func:`check_output_path` with a folder expected."""
    if getattr(config, "resume", None) is None:
        check_output_path("log_dir", getattr(config, "log_dir", None), folder=True)
