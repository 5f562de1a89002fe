"""Checkpoints shared by every trainer.

A checkpoint is one ``torch.save`` file holding a plain dict::

    {"format": "pglab-checkpoint", "format_version": 1, "kind": "ghm-mc",
     "versions": {...}, "config": {...}, "counters": {...},
     "models": {name: state_dict}, "optimizers": {name: state_dict},
     "rng": {...}, "extra": {...}}

Files are written atomically (temporary file, fsync, ``os.replace``) and loaded with
``torch.load(weights_only=True)``, so a checkpoint cannot execute code when loaded and a
write killed half-way leaves the previous checkpoint intact.
"""
from __future__ import annotations

import os
import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from pglab.errors import CheckpointError
from pglab.run.atomic import atomic_torch_save, remove_stale_temporaries

FORMAT = "pglab-checkpoint"
FORMAT_VERSION = 1
LATEST_NAME = "checkpoint_latest.pt"


def library_versions() -> dict[str, str]:
    """Versions recorded with every run (config.json, checkpoints, JSONL meta)."""
    import platform

    import numpy

    import pglab

    return {
        "pglab": pglab.__version__,
        "torch": str(torch.__version__),
        "numpy": str(numpy.__version__),
        "python": platform.python_version(),
    }


def build_checkpoint(
    *,
    kind: str,
    config: dict[str, Any],
    counters: dict[str, int | float],
    models: dict[str, dict[str, torch.Tensor]],
    optimizers: dict[str, dict[str, Any]] | None = None,
    rng: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "versions": library_versions(),
        "config": config,
        "counters": counters,
        "models": models,
        "optimizers": optimizers or {},
        "rng": rng or {},
        "extra": extra or {},
    }


def save_checkpoint(path: str | os.PathLike, checkpoint: dict[str, Any]) -> Path:
    """Write ``checkpoint`` (from :func:`build_checkpoint`) atomically."""
    if checkpoint.get("format") != FORMAT:
        raise ValueError("save_checkpoint expects a dict made by build_checkpoint")
    return atomic_torch_save(checkpoint, path)


def resolve_checkpoint_path(path: str | os.PathLike) -> Path:
    """Accept a checkpoint file, a ``checkpoints/`` folder or a run directory."""
    candidate = Path(path)
    if candidate.is_dir():
        for inner in (
            candidate / LATEST_NAME,
            candidate / "checkpoints" / LATEST_NAME,
            candidate / "checkpoint.pt",
        ):
            if inner.exists():
                return inner
        raise CheckpointError(f"checkpoint: no {LATEST_NAME} or checkpoint.pt found in directory {candidate}")
    if not candidate.exists():
        raise CheckpointError(f"checkpoint: no such file: {candidate}")
    return candidate


def load_checkpoint_file(
    path: str | os.PathLike,
    *,
    kinds: Iterable[str] | None = None,
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load and validate a pglab checkpoint.

    Raises:
        CheckpointError: the file is missing, unreadable (corrupt or truncated), not a
            pglab checkpoint, of an unsupported format version, or of another kind.
    """
    resolved = resolve_checkpoint_path(path)
    try:
        checkpoint = torch.load(resolved, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"checkpoint {resolved}: not a readable checkpoint (corrupt or truncated?): {reason}") from exc
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {resolved}: not a pglab checkpoint (missing format marker)")
    version = checkpoint.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {resolved}: format_version={version!r}, this pglab reads version {FORMAT_VERSION}"
        )
    for key in ("kind", "config", "counters", "models"):
        if key not in checkpoint:
            raise CheckpointError(f"checkpoint {resolved}: missing required entry {key!r}")
    if kinds is not None:
        allowed = tuple(kinds)
        if checkpoint["kind"] not in allowed:
            raise CheckpointError(
                f"checkpoint {resolved}: kind={checkpoint['kind']!r}, expected one of {', '.join(map(repr, allowed))}"
            )
    checkpoint["path"] = str(resolved)
    return checkpoint


def load_state_dict_checked(module: torch.nn.Module, state_dict: dict[str, Any], *, name: str, source: str) -> None:
    """``module.load_state_dict`` that reports a mismatch as a CheckpointError."""
    try:
        module.load_state_dict(state_dict)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointError(f"checkpoint {source}: {name} does not match the configured network ({first})") from exc


class CheckpointManager:
    """Numbered checkpoints in one folder plus a ``checkpoint_latest.pt`` pointer.

    Args:
        directory: folder for the files (created).
        pattern: file name format with a ``{step}`` field.
        keep: keep only the newest ``keep`` numbered files (``None`` keeps all).
    """

    def __init__(self, directory: str | os.PathLike, *, pattern: str = "checkpoint_iter_{step:06d}.pt", keep: int | None = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pattern = pattern
        self.keep = keep
        remove_stale_temporaries(self.directory)

    @property
    def latest_path(self) -> Path:
        return self.directory / LATEST_NAME

    def save(self, step: int, checkpoint: dict[str, Any]) -> Path:
        path = save_checkpoint(self.directory / self.pattern.format(step=step), checkpoint)
        self._point_latest_at(path)
        self._prune()
        return path

    def _point_latest_at(self, path: Path) -> None:
        # A relative symlink swapped in with os.replace: atomic, and the run directory
        # stays relocatable. Where symlinks are unavailable fall back to a full copy.
        tmp_link = self.directory / f".{LATEST_NAME}.tmp-{os.getpid()}"
        tmp_link.unlink(missing_ok=True)
        try:
            os.symlink(path.name, tmp_link)
            os.replace(tmp_link, self.latest_path)
        except OSError:
            tmp_link.unlink(missing_ok=True)
            save_checkpoint(self.latest_path, torch.load(path, weights_only=True))

    def _prune(self) -> None:
        if self.keep is None:
            return
        numbered = sorted(p for p in self.directory.glob(self.pattern.replace("{step:06d}", "*")) if p.name != LATEST_NAME)
        for old in numbered[: max(0, len(numbered) - self.keep)]:
            old.unlink(missing_ok=True)
