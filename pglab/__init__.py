"""pglab: policy gradients, actor-critics and tabular multi-agent learners on fast,
batched simulators.

The Python API mirrors the command line::

    import pglab
    agent = pglab.load_checkpoint("runs/ghm-mc/checkpoints/checkpoint_latest.pt")
    rates = agent.policy.act(cash, deterministic=True)   # [B, 1] -> [B, 2]
    value = agent.value(cash)                            # [B]
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_checkpoint"]


def load_checkpoint(path, *, device="cpu"):
    """Load any pglab checkpoint as a ready-to-use agent.

    GHM checkpoints give a :class:`pglab.algos.ghm_agent.GHMAgent` with ``.policy``,
    ``.value``, ``.config`` and ``.model``. Other kinds return the loader of their
    system (see each system's docs).
    """
    from pglab.run.loaders import load_agent

    return load_agent(path, device=device)
