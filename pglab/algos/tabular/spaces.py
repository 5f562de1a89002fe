"""Discretised action spaces for tabular learners.

:class:`DiscreteActionSpace` is defined by the forecasting game
(:mod:`pglab.envs.forecast_game`), since an environment owns its action space and envs
never import algos; it is re-exported here for the learners and for existing imports.
"""

from pglab.envs.forecast_game import DiscreteActionSpace

__all__ = ["DiscreteActionSpace"]
