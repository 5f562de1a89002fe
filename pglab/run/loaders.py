"""``pglab.load_checkpoint``: checkpoint kind -> the system's agent loader."""
from __future__ import annotations

import importlib

from pglab.errors import CheckpointError
from pglab.run.checkpoint import load_checkpoint_file

# The checkpoint's ``kind`` starts with one of these system names.
AGENT_LOADERS: dict[str, str] = {
    "ghm": "pglab.algos.ghm_agent:agent_from_checkpoint",
    "a2c": "pglab.algos.a2c:agent_from_checkpoint",
    "ppo": "pglab.algos.ppo:agent_from_checkpoint",
    "pso-tsp": "pglab.algos.pso_tsp:agent_from_checkpoint",
    "maxk-pomo": "pglab.commands.maxk:agent_from_checkpoint",
    "forecast": "pglab.algos.tabular.checkpoint:agent_from_checkpoint",
}


def load_agent(path, *, device="cpu"):
    checkpoint = load_checkpoint_file(path, map_location=device)
    kind = checkpoint["kind"]
    for system in sorted(AGENT_LOADERS, key=len, reverse=True):
        if kind == system or kind.startswith(system + "-"):
            module_name, function_name = AGENT_LOADERS[system].split(":")
            return getattr(importlib.import_module(module_name), function_name)(checkpoint, device=device)
    raise CheckpointError(f"checkpoint {path}: kind={kind!r} cannot be loaded as an agent")
