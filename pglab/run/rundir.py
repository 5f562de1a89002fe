"""Run directories: creation, the refusal to overwrite a finished run, config.json, and the
lock that gives a run directory one owner."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

from pglab.errors import UsageError
from pglab.run.atomic import atomic_write_json
from pglab.run.checkpoint import library_versions

CONFIG_NAME = "config.json"
LOCK_NAME = ".lock"  # holds the owner's PID; locked with flock while the owner runs


class RunDirLock:
    """An exclusive lock on a run directory, held while one process trains in it.

    The lock is ``flock`` on ``DIR/.lock``: the kernel releases it when its owner exits,
    however it exits (``kill -9`` included), so a lock left by a dead process is simply
    taken over. The file holds the owner's PID, which the refusal names. The file stays
    after the owner ends (removing it would let two processes lock two different files).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        """Take the lock, or raise a :class:`UsageError` naming the process that holds it."""
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"log_dir={str(self.path.parent)!r}: in use by process {owner}, which is training in it; "
                f"wait for it to end, or stop it (kill -TERM {owner}) and continue with --resume"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def default_run_dir(kind: str, *, root: str | os.PathLike = "runs", now: _dt.datetime | None = None) -> Path:
    """The directory a command writes to when no ``--log-dir`` (``--output``) is given:
    ``runs/<kind>-<YYYYmmdd-HHMMSS>``, one level below ``runs/`` in the working directory.

    One flat level keeps a default out of any run directory given by hand (``--log-dir
    runs/ppo`` and a later default ``runs/ppo-20260101-120000`` sit side by side). A name
    already taken (two starts in the same second) gets ``-2``, ``-3``, ... Refuses with a
    :class:`UsageError` when ``root`` or a folder above it is itself a run directory (the
    working directory inside a run), since the default would land inside that run.
    """
    base = Path(root)
    host = next((folder for folder in (base.absolute(), *base.absolute().parents) if is_run_dir(folder)), None)
    if host is not None:
        raise UsageError(
            f"log_dir: the default {str(base / kind)}-<time> would lie inside the run directory {str(host)!r}; "
            "give --log-dir, or start from outside that run"
        )
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    path = base / f"{kind}-{stamp}"
    suffix = 2
    while path.exists():
        path = base / f"{kind}-{stamp}-{suffix}"
        suffix += 1
    return path


def is_run_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a pglab run: a ``config.json`` naming a kind and a config."""
    try:
        payload = json.loads((Path(path) / CONFIG_NAME).read_text())
    except (OSError, ValueError):  # absent, unreadable, not JSON, not text
        return False
    return isinstance(payload, dict) and isinstance(payload.get("kind"), str) and "config" in payload


def create_run_dir(path: str | os.PathLike, *, subdirs: tuple[str, ...] = ("checkpoints", "plots")) -> Path:
    """Create a fresh run directory.

    Refuses a directory that already holds a run (a ``config.json``): continuing it is
    ``--resume``'s job, and silently starting over would destroy its logs.
    """
    run_dir = Path(path)
    if (run_dir / CONFIG_NAME).exists():
        raise UsageError(
            f"log_dir={str(run_dir)!r}: already holds a run; continue it with --resume {run_dir} "
            "or choose another --log_dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    for sub in subdirs:
        (run_dir / sub).mkdir(exist_ok=True)
    return run_dir


def find_run_dir(path: str | os.PathLike) -> Path:
    """The run directory behind ``path``: a run directory, its ``checkpoints/`` folder, or
    a checkpoint file inside either. The one place that maps a checkpoint to its run."""
    candidate = Path(path)
    if not candidate.exists():
        raise UsageError(f"resume: no such run directory or checkpoint (got {str(candidate)!r})")
    if candidate.is_file():
        if candidate.suffix != ".pt" and candidate.name != CONFIG_NAME:
            raise UsageError(
                f"resume: give a run directory, its checkpoints/ folder or a checkpoint file (.pt) (got {str(path)!r})"
            )
        candidate = candidate.parent
    if not (candidate / CONFIG_NAME).exists() and candidate.name == "checkpoints":
        candidate = candidate.parent
    if not (candidate / CONFIG_NAME).exists():
        raise UsageError(f"resume: not a pglab run directory (no {CONFIG_NAME}) (got {str(path)!r})")
    return candidate


def write_run_config(run_dir: str | os.PathLike, config: dict[str, Any], *, kind: str) -> Path:
    payload = {"kind": kind, "config": config, "versions": library_versions()}
    return atomic_write_json(Path(run_dir) / CONFIG_NAME, payload)


def read_run_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_NAME
    if not path.exists():
        raise UsageError(f"run directory {run_dir}: no {CONFIG_NAME} (is this a pglab run directory?)")
    try:
        payload = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"run directory {run_dir}: {CONFIG_NAME} is not valid JSON ({exc})") from exc
    except OSError as exc:
        raise UsageError(f"run directory {run_dir}: {CONFIG_NAME} cannot be read ({exc.strerror})") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("kind"), str):
        raise UsageError(f"run directory {run_dir}: {CONFIG_NAME} does not describe a pglab run (no kind)")
    return payload
