"""Forecast checkpoints (``kind`` = ``forecast-q|wolf|rarl``) as ready-to-use agents.

``pglab train forecast`` writes pglab checkpoints whose ``extra`` holds the agents' JSON
Q-tables (exact floats, RNG state) and the fitted state key. :func:`agent_from_checkpoint`
turns one back into a :class:`LoadedForecaster` (what ``pglab.load_checkpoint`` returns
for these kinds).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pglab.algos.tabular.agents import QTableAgent
from pglab.algos.tabular.serialization import agent_from_dict
from pglab.envs.forecast_game import ForecastState, StateEncoder, encoder_from_dict
from pglab.errors import CheckpointError

KINDS = ("forecast-q", "forecast-wolf", "forecast-rarl")


@dataclass
class LoadedForecaster:
    """A trained forecaster (``policy``), its state key, the RARL adversary if any, the config."""

    policy: QTableAgent
    encoder: StateEncoder
    config: dict[str, Any]
    adversary: QTableAgent | None = None
    value: None = None  # tabular agents have no separate value network

    def predict(self, state: ForecastState) -> float:
        """The greedy one-step forecast ``y_t + delta`` of ``y_{t+1}`` (target units)."""
        action = self.policy.act(self.encoder(state), explore=False)
        return state.value + self.policy.action_space.action_to_delta(action)


def agent_from_checkpoint(checkpoint: dict[str, Any], *, device: Any = "cpu") -> LoadedForecaster:
    """Rebuild the agents of a loaded forecast checkpoint (``device`` is ignored: NumPy, CPU)."""
    source = checkpoint.get("path", "<checkpoint>")
    if checkpoint.get("kind") not in KINDS:
        raise CheckpointError(f"checkpoint {source}: kind={checkpoint.get('kind')!r}, expected one of {', '.join(KINDS)}")
    extra = checkpoint.get("extra", {})
    try:
        forecaster = agent_from_dict(json.loads(extra["forecaster"]), source=source)
        adversary = agent_from_dict(json.loads(extra["adversary"]), source=source) if "adversary" in extra else None
        encoder = encoder_from_dict(json.loads(extra["encoder"]))
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {source}: forecast agents missing or unreadable ({exc!r})") from exc
    return LoadedForecaster(forecaster, encoder, dict(checkpoint["config"]), adversary)
