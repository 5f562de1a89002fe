"""Tabular multi-agent learners for the forecasting game and small matrix games.

``DiscreteActionSpace``, ``QTableAgent`` (Q-learning), ``WoLFPHCAgent`` (Bowling & Veloso
2002), JSON ``save_q_table``/``load_q_table``, and the loops ``TrainingLoop``,
``RADversarialTrainer`` and ``IterativeFeedbackLoop``.

Names are imported lazily, so that ``from pglab.algos.tabular import QTableAgent`` loads
only the agents (the JSON serialisation pulls in pglab.run, and with it torch).
``DiscreteActionSpace`` belongs to the game (:mod:`pglab.envs.forecast_game`): envs never
import algos.
"""

import importlib

_EXPORTS = {
    "DiscreteActionSpace": "pglab.envs.forecast_game",
    "QTableAgent": "pglab.algos.tabular.agents",
    "WoLFPHCAgent": "pglab.algos.tabular.agents",
    "TrainingLoop": "pglab.algos.tabular.loops",
    "RADversarialTrainer": "pglab.algos.tabular.loops",
    "IterativeFeedbackLoop": "pglab.algos.tabular.loops",
    "save_q_table": "pglab.algos.tabular.serialization",
    "load_q_table": "pglab.algos.tabular.serialization",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
