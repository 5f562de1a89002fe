"""pglab: policy gradients, actor-critics and tabular multi-agent learners on fast,
batched simulators.

The Python API mirrors the command line: every checkpoint kind loads into an agent with
the same interface (:class:`pglab.agent.Agent`)::

    import pglab
    agent = pglab.load_checkpoint("runs/ghm-mc/20260101-120000", device="auto")
    agent.kind, agent.config
    rates = agent.act(cash, deterministic=True)       # tensors: [B, 1] -> [B, 2]
    rates = agent.predict(cash_array)                 # the same on NumPy arrays
    value = agent.value(cash)                         # [B]; NoCritic where none was trained
"""

from __future__ import annotations

__version__ = "1.0.0"  # the one place of the version: pyproject.toml reads it from here

__all__ = ["__version__", "load_checkpoint"]


def load_checkpoint(path, *, device="auto"):
    """Load any pglab checkpoint (a file, a ``checkpoints/`` folder or a run directory) as
    a ready-to-use :class:`pglab.agent.Agent` on ``device`` (``auto``, ``cpu``, ``cuda[:N]``).

    Raises:
        pglab.errors.CheckpointError: missing, corrupt (digest mismatch) or unknown kind.
    """
    from pglab.run.loaders import load_agent

    return load_agent(path, device=device)
