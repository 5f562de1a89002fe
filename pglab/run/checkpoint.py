"""Checkpoints shared by every trainer.

A checkpoint is one ``torch.save`` file holding a plain dict::

    {"format": "pglab-checkpoint", "format_version": 1, "kind": "ghm-mc",
     "versions": {...}, "config": {...}, "counters": {...},
     "models": {name: state_dict}, "optimizers": {name: state_dict},
     "rng": {...}, "extra": {...}}

Files are written atomically (temporary file, fsync, ``os.replace``) and loaded with
``torch.load(weights_only=True)``, so a checkpoint cannot execute code when loaded and a
write killed half-way leaves the previous checkpoint intact.

Integrity (format version 2): the dict above is serialised to bytes, and the file holds
``{"format", "format_version": 2, "sha256": hex digest of those bytes, "payload": the
bytes as a uint8 tensor}``. Loading recomputes the digest before unpickling the payload,
so a flipped byte anywhere in the weights is a :class:`CheckpointError` (exit 2), not a
silently different model. Version-1 files (no digest) still load.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from pglab.errors import CheckpointError
from pglab.run.atomic import atomic_torch_save, atomic_write_bytes, remove_stale_temporaries

FORMAT = "pglab-checkpoint"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
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


def seal(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The on-disk form of ``checkpoint``: its serialised bytes and their SHA-256."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    payload = buffer.getvalue()
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": checkpoint["kind"],
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8),
    }


def save_checkpoint(path: str | os.PathLike, checkpoint: dict[str, Any]) -> Path:
    """Write ``checkpoint`` (from :func:`build_checkpoint`) atomically, with its digest."""
    if checkpoint.get("format") != FORMAT:
        raise ValueError("save_checkpoint expects a dict made by build_checkpoint")
    return atomic_torch_save(seal(checkpoint), path)


def _torch_load(source: Any, where: Path, map_location: Any) -> Any:
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types on a damaged file (KeyError, IndexError, UnpicklingError...)
        reason = str(exc).splitlines()[0].strip() if str(exc).strip() else ""
        if isinstance(exc, (KeyError, IndexError, TypeError, AttributeError)) or not reason:
            reason = f"{type(exc).__name__} {reason}".strip()
        # torch's advice to retry with weights_only=False would run arbitrary code: never echo it.
        if "weights_only" in reason or "WeightsUnpickler" in reason:
            reason = type(exc).__name__
        raise CheckpointError(
            f"checkpoint {where}: not a readable checkpoint (corrupt or truncated?): {reason}"
        ) from exc


def _unseal(loaded: Any, where: Path, map_location: Any) -> Any:
    if (
        not isinstance(loaded, dict)
        or loaded.get("format") != FORMAT
        or ("payload" not in loaded and "sha256" not in loaded)
    ):
        return loaded  # a version-1 file, or a dict saved without save_checkpoint
    payload = loaded.get("payload")
    digest = loaded.get("sha256")
    if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8 or not isinstance(digest, str):
        raise CheckpointError(f"checkpoint {where}: damaged (payload or digest missing)")
    data = payload.cpu().numpy().tobytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise CheckpointError(
            f"checkpoint {where}: integrity check failed (SHA-256 {actual[:12]}... != stored {digest[:12]}...); "
            "the file was modified or damaged after it was written"
        )
    inner = _torch_load(io.BytesIO(data), where, map_location)
    if isinstance(inner, dict):
        inner["format_version"] = 2
    return inner


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
    if isinstance(map_location, str) and map_location == "auto":
        from pglab.run.device import resolve_device

        map_location = resolve_device("auto")
    checkpoint = _torch_load(resolved, resolved, map_location)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {resolved}: not a pglab checkpoint (missing format marker)")
    version = checkpoint.get("format_version")
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"checkpoint {resolved}: format_version={version!r}, this pglab reads versions {READABLE_VERSIONS}"
        )
    checkpoint = _unseal(checkpoint, resolved, map_location)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {resolved}: not a pglab checkpoint (missing format marker)")
    expected_types = {"kind": str, "config": dict, "counters": dict, "models": dict}
    for key, expected in expected_types.items():
        if not isinstance(checkpoint.get(key), expected):
            raise CheckpointError(f"checkpoint {resolved}: missing or malformed required entry {key!r}")
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

    def __init__(
        self, directory: str | os.PathLike, *, pattern: str = "checkpoint_iter_{step:06d}.pt", keep: int | None = None
    ):
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
            atomic_write_bytes(self.latest_path, path.read_bytes())

    def _prune(self) -> None:
        if self.keep is None:
            return
        numbered = sorted(
            p for p in self.directory.glob(self.pattern.replace("{step:06d}", "*")) if p.name != LATEST_NAME
        )
        for old in numbered[: max(0, len(numbered) - self.keep)]:
            old.unlink(missing_ok=True)
