"""``pglab sweep ghm``: train on a grid of calibrations and compare with the FD truth.

Only the torch-free config (:mod:`pglab.configs.sweep`) is imported before the command
line is parsed, so ``--help`` never imports torch.
"""

from __future__ import annotations

from pglab.configs.sweep import GHMSweepConfig
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir


def ghm(argv: list[str]) -> int:
    """``pglab sweep ghm --sigma 0.1 0.2 0.3 [--rho 0.08 0.1] [FLAGS]``: see :mod:`pglab.algos.ghm_sweep`."""
    parsed = parse_flags(
        GHMSweepConfig,
        argv,
        prog="pglab sweep ghm",
        description="Comparative statics of the GHM model: learned policies against the FD optimum "
        "on a grid of calibrations.",
    )
    check_new_run_dir(parsed.config)
    from pglab.algos.ghm_sweep import run_sweep

    run_sweep(parsed.config, given=parsed.given)
    return 0
