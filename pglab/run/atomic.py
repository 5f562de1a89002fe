"""Crash-safe file writes: write a temporary file beside the target, fsync, os.replace.

A reader (or a resumed run) therefore sees either the previous complete file or the new
complete file, never a torn one, even if the process is killed mid-write.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import torch

_TMP_MARK = ".tmp-"


def _fsync_directory(directory: Path) -> None:
    # The rename itself lives in the directory entry; without this a power loss could
    # forget it. Not every platform can open a directory, hence the guard.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> Path:
    """Write ``payload`` to ``path`` atomically; return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}{_TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:  # a full disk, a name too long...: name the file meant, not the temporary
        raise OSError(error.errno, error.strerror or str(error), str(target)) from error
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    _fsync_directory(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` through an in-memory buffer, then an atomic write."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def remove_stale_temporaries(directory: str | os.PathLike) -> int:
    """Delete temporaries left by writers that were killed mid-write; return the count."""
    removed = 0
    folder = Path(directory)
    if not folder.is_dir():
        return 0
    for leftover in folder.glob(f".*{_TMP_MARK}*"):
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed
