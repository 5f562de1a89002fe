"""Q-tables as JSON files: atomic writes, validated reads.

Format (version 1)::

    {"format": "pglab-qtable", "format_version": 1, "algorithm": "q" | "wolf",
     "action_space": {"n_bins": 21, "max_delta": 1.0},
     "hyperparameters": {"alpha": 0.1, "gamma": 0.95, ...},
     "epsilon": 0.08, "n_updates": 16000, "rng": {...numpy bit-generator state...},
     "entries": [{"state": 1234, "q": [... n_bins floats ...],
                  "pi": [...], "avg_pi": [...], "count": 7}],        # pi/avg_pi/count: wolf only
     "metadata": {...free-form: state encoder, data source, training summary...}}

Python's ``json`` writes floats with ``repr``, which round-trips float64 exactly, so a
saved and reloaded agent acts and learns bit-identically.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from pglab.algos.tabular.agents import QTableAgent, WoLFPHCAgent
from pglab.envs.forecast_game import DiscreteActionSpace
from pglab.errors import CheckpointError, ConfigError
from pglab.run.atomic import atomic_write_text

FORMAT = "pglab-qtable"
FORMAT_VERSION = 1
AGENT_CLASSES: dict[str, type[QTableAgent]] = {"q": QTableAgent, "wolf": WoLFPHCAgent}


def agent_to_dict(agent: QTableAgent, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "algorithm": agent.algorithm,
        "action_space": agent.action_space.to_dict(),
        "hyperparameters": agent.hyperparameters(),
        **agent.state_dict(),
        "metadata": metadata or {},
    }


def save_q_table(agent: QTableAgent, path: str | os.PathLike, metadata: dict[str, Any] | None = None) -> Path:
    """Write ``agent`` to ``path`` as JSON, atomically (temporary file + rename)."""
    payload = json.dumps(agent_to_dict(agent, metadata), allow_nan=False)
    return atomic_write_text(path, payload + "\n")


def _fail(source: str, message: str) -> CheckpointError:
    return CheckpointError(f"Q-table {source}: {message}")


def _check_vector(source: str, where: str, values: Any, n: int, *, distribution: bool = False) -> None:
    if not isinstance(values, list) or len(values) != n:
        raise _fail(source, f"{where} must be a list of {n} numbers (one per action)")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _fail(source, f"{where} holds {value!r}, not a finite number")
    if distribution and (min(values) < -1e-12 or abs(sum(values) - 1.0) > 1e-6):
        raise _fail(source, f"{where} is not a probability distribution (sum={sum(values):.6g})")


def agent_from_dict(
    payload: Any,
    *,
    source: str = "<dict>",
    expected_algorithm: str | None = None,
    expected_action_space: DiscreteActionSpace | None = None,
) -> QTableAgent:
    """Validate ``payload`` (from :func:`agent_to_dict`) and rebuild the agent."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise _fail(source, f'not a pglab Q-table (missing "format": "{FORMAT}")')
    if payload.get("format_version") != FORMAT_VERSION:
        raise _fail(
            source, f"format_version={payload.get('format_version')!r}, this pglab reads version {FORMAT_VERSION}"
        )
    for key in ("algorithm", "action_space", "hyperparameters", "epsilon", "entries"):
        if key not in payload:
            raise _fail(source, f"missing required entry {key!r}")
    algorithm = payload["algorithm"]
    if algorithm not in AGENT_CLASSES:
        raise _fail(source, f"algorithm={algorithm!r}, expected one of {', '.join(AGENT_CLASSES)}")
    if expected_algorithm is not None and algorithm != expected_algorithm:
        raise _fail(source, f"algorithm={algorithm!r}, expected {expected_algorithm!r}")
    try:
        space = DiscreteActionSpace(**payload["action_space"])
        if expected_action_space is not None and space != expected_action_space:
            raise _fail(source, f"action space {space} does not match the configured {expected_action_space}")
        agent = AGENT_CLASSES[algorithm](space, **payload["hyperparameters"], epsilon=payload["epsilon"])
    except (ConfigError, TypeError) as exc:
        raise _fail(source, f"invalid parameters: {exc}") from exc
    entries = payload["entries"]
    if not isinstance(entries, list):
        raise _fail(source, "entries must be a list")
    seen = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "state" not in entry or "q" not in entry:
            raise _fail(source, f"entries[{i}] must be an object with 'state' and 'q'")
        state = entry["state"]
        if isinstance(state, bool) or not isinstance(state, (int, str)):
            raise _fail(source, f"entries[{i}].state={state!r} must be an int or a string")
        if state in seen:
            raise _fail(source, f"entries[{i}].state={state!r} appears twice")
        seen.add(state)
        _check_vector(source, f"entries[{i}].q", entry["q"], space.n)
        if algorithm == "wolf":
            for name in ("pi", "avg_pi"):
                if name not in entry:
                    raise _fail(source, f"entries[{i}] lacks {name!r} (a WoLF-PHC table)")
                _check_vector(source, f"entries[{i}].{name}", entry[name], space.n, distribution=True)
            count = entry.get("count")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise _fail(source, f"entries[{i}].count={count!r} must be an integer >= 0")
    try:
        agent.load_state_dict(payload)
    except (ConfigError, TypeError, ValueError, KeyError) as exc:
        raise _fail(source, f"cannot restore the agent's state: {exc}") from exc
    return agent


def load_q_table(
    path: str | os.PathLike,
    *,
    expected_algorithm: str | None = None,
    expected_action_space: DiscreteActionSpace | None = None,
) -> QTableAgent:
    """Read and validate a Q-table written by :func:`save_q_table`.

    Raises:
        CheckpointError (exit code 2): missing file, invalid JSON, wrong format or
            version, non-finite or wrongly sized rows, policies that are not
            distributions, or an algorithm / action space other than the expected one.
    """
    agent, _ = load_q_table_with_metadata(
        path, expected_algorithm=expected_algorithm, expected_action_space=expected_action_space
    )
    return agent


def load_q_table_with_metadata(path: str | os.PathLike, **expected: Any) -> tuple[QTableAgent, dict[str, Any]]:
    source = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError as exc:
        raise _fail(source, "no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(source, f"unreadable ({exc})") from exc
    try:
        # parse_constant rejects NaN/Infinity, which Python's json would otherwise accept.
        payload = json.loads(
            text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(f"{name} is not allowed"))
        )
    except ValueError as exc:
        raise _fail(source, f"not valid JSON (truncated or edited?): {exc}") from exc
    agent = agent_from_dict(payload, source=source, **expected)
    metadata = payload.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _fail(source, "metadata must be an object")
    return agent, metadata
