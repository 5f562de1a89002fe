"""``pglab.load_checkpoint``: a checkpoint's kind -> its system's agent loader
(:data:`pglab.systems.SYSTEMS`, the one dispatch table)."""

from __future__ import annotations

from pglab.errors import CheckpointError
from pglab.run.checkpoint import load_checkpoint_file


def load_agent(path, *, device="auto"):
    """The agent stored in a checkpoint, on ``device`` (``auto``, ``cpu``, ``cuda[:N]``)."""
    from pglab.run.device import resolve_device
    from pglab.systems import resolve, system_of_kind

    device = resolve_device(device) if isinstance(device, str) else device
    checkpoint = load_checkpoint_file(path, map_location=device)
    system = system_of_kind(checkpoint["kind"])
    if system is None:
        raise CheckpointError(f"checkpoint {path}: kind={checkpoint['kind']!r} cannot be loaded as an agent")
    return resolve(system.agent)(checkpoint, device=device)
