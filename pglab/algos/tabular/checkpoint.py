"""Forecast checkpoints as agents: moved to :mod:`pglab.algos.forecast`.

``pglab.algos.forecast.agent_from_checkpoint`` is the loader ``pglab.load_checkpoint``
uses for the ``forecast-*`` kinds; these names stay importable from here for existing
code (``LoadedForecaster`` is the old name of :class:`~pglab.algos.forecast.ForecastAgent`).
"""

from pglab.algos.forecast import KINDS, ForecastAgent, agent_from_checkpoint

LoadedForecaster = ForecastAgent

__all__ = ["KINDS", "ForecastAgent", "LoadedForecaster", "agent_from_checkpoint"]
