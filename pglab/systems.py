"""The one table of pglab's systems: what ``pglab train``, ``pglab evaluate CHECKPOINT`` and
``pglab.load_checkpoint`` dispatch to.

Entries are ``"module:attribute"`` strings, imported only when used, so that reading the
table (``pglab --help``) imports neither torch nor any trainer. A checkpoint's ``kind`` is
its system's name or starts with ``<name>-`` (``ghm-mc``, ``a2c-stream-ac``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class System:
    name: str
    summary: str
    train: str
    """``pglab train NAME``: ``function(argv) -> exit code``"""
    evaluate_checkpoint: str
    """``pglab evaluate CHECKPOINT``: ``function(argv) -> exit code`` (argv[0] is the checkpoint)"""
    agent: str
    """``pglab.load_checkpoint``: ``function(checkpoint dict, device) -> Agent``"""
    evaluate_named: str | None = None
    """``pglab evaluate NAME``: evaluation on generated instances, without a checkpoint"""


SYSTEMS: dict[str, System] = {
    system.name: system
    for system in (
        System(
            "ghm",
            "GHM corporate cash management: REINFORCE (mc), pathwise, actor-critic",
            train="pglab.commands.ghm:train",
            evaluate_checkpoint="pglab.commands.ghm:evaluate",
            agent="pglab.algos.ghm_agent:agent_from_checkpoint",
        ),
        System(
            "a2c",
            "streaming TD(0) A2C / stream-AC over batched pixel environments",
            train="pglab.commands.a2c:train",
            evaluate_checkpoint="pglab.commands.a2c:evaluate",
            agent="pglab.algos.a2c:agent_from_checkpoint",
        ),
        System(
            "ppo",
            "PPO / VPG+GAE / REINFORCE on Gymnasium or pglab environments",
            train="pglab.commands.ppo:train",
            evaluate_checkpoint="pglab.commands.ppo:evaluate",
            agent="pglab.algos.ppo:agent_from_checkpoint",
        ),
        System(
            "pso-tsp",
            "learned particle-swarm coefficients for the TSP (Deep-PSO)",
            train="pglab.commands.pso_tsp:train",
            evaluate_checkpoint="pglab.commands.pso_tsp:evaluate_checkpoint",
            agent="pglab.algos.pso_tsp:agent_from_checkpoint",
            evaluate_named="pglab.commands.pso_tsp:evaluate",
        ),
        System(
            "maxk-pomo",
            "Max@K policy optimisation: MaxKPOMO / POMO on RL4CO's TSP",
            train="pglab.commands.maxk:train",
            evaluate_checkpoint="pglab.commands.maxk:evaluate_checkpoint",
            agent="pglab.algos.maxk_pomo:agent_from_checkpoint",
            evaluate_named="pglab.commands.maxk:evaluate",
        ),
        System(
            "forecast",
            "multi-agent forecasting game: Q-learning, WoLF-PHC, RARL",
            train="pglab.commands.forecast:train",
            evaluate_checkpoint="pglab.commands.forecast:evaluate_checkpoint",
            agent="pglab.algos.forecast:agent_from_checkpoint",
            evaluate_named="pglab.commands.forecast:evaluate",
        ),
    )
}


def resolve(reference: str) -> Any:
    """Import ``"module:attribute"``."""
    module_name, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def system_of_kind(kind: str) -> System | None:
    """The system a checkpoint kind belongs to (longest matching name), or ``None``."""
    for name in sorted(SYSTEMS, key=len, reverse=True):
        if kind == name or kind.startswith(name + "-"):
            return SYSTEMS[name]
    return None
