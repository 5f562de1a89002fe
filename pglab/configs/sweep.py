"""Config of ``pglab sweep ghm``: comparative statics of the GHM model (torch-free).

A sweep is a grid of calibrations (values of the model parameters) times solvers times
seeds; every cell is one ordinary ``pglab train ghm`` run directory under the sweep's
``runs/`` folder. Swept parameters are given as lists, ``--sigma 0.1 0.2 0.3 --rho 0.08
0.1`` (their Cartesian product), or in a YAML ``--grid`` file; every other setting comes
from ``--train-config`` (a ``pglab train ghm`` YAML file) and the defaults.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pglab.configs.ghm import MODEL_FIELDS, FirmTerms, GHMParams, GHMTrainConfig, fd_grid_bytes
from pglab.errors import ConfigError
from pglab.validation import (
    check_device,
    check_finite,
    check_int,
    check_memory,
    check_path_fields,
    check_seed,
    check_threads,
)

# The model parameters a sweep may vary: GHMParams' fields (its cash-flow dynamics first,
# then the terms every model shares), and each model's own (GHMTrainConfig's
# credit_limit/credit_spread for --model credit-line, ...). A grid is the product in this order.
CREDIT_LINE_PARAMETERS = ("credit_limit", "credit_spread")
MODEL_PARAMETERS: dict[str, tuple[str, ...]] = {"credit-line": CREDIT_LINE_PARAMETERS, **MODEL_FIELDS}
_TERMS = tuple(field.name for field in dataclasses.fields(FirmTerms))
SWEEPABLE = (
    tuple(field.name for field in dataclasses.fields(GHMParams) if field.name not in _TERMS)
    + _TERMS
    + tuple(name for names in MODEL_PARAMETERS.values() for name in names)
)
INTEGER_PARAMETERS = ("divisions",)
SOLVERS = ("mc", "pathwise", "actor-critic")
MAX_RUNS_WITHOUT_YES = 200
"""A sweep of more runs (calibrations x solvers x seeds) starts only with --yes."""
MODELS = typing.get_args(typing.get_type_hints(GHMTrainConfig)["model"])  # ("ghm", "credit-line")


@dataclass(frozen=True)
class GHMSweepConfig:
    """``pglab sweep ghm``: train on every calibration of a grid, against the FD truth."""

    mu: tuple[float, ...] = ()
    """cash-flow drift values to sweep (empty: the train config's value)"""
    sigma: tuple[float, ...] = ()
    """cash-flow volatility values to sweep"""
    r: tuple[float, ...] = ()
    """interest-rate values to sweep"""
    lambda_dilution: tuple[float, ...] = ()
    """equity-issuance cost values to sweep"""
    rho: tuple[float, ...] = ()
    """discount-rate values to sweep"""
    a_L_max: tuple[float, ...] = ()
    """maximal dividend rates to sweep"""
    a_E_max: tuple[float, ...] = ()
    """maximal issuance rates to sweep"""
    initial_cash_low: tuple[float, ...] = ()
    """lower ends of the initial-cash distribution to sweep"""
    initial_cash_high: tuple[float, ...] = ()
    """upper ends of the initial-cash distribution to sweep"""
    credit_limit: tuple[float, ...] = ()
    """--model credit-line: credit-line sizes to sweep"""
    credit_spread: tuple[float, ...] = ()
    """--model credit-line: spreads on the drawn balance to sweep"""
    divisions: tuple[int, ...] = ()
    """--model divisions: numbers of divisions to sweep"""
    mu_1: tuple[float, ...] = ()
    """--model regimes: regime 1's cash-flow drifts to sweep"""
    sigma_1: tuple[float, ...] = ()
    """--model regimes: regime 1's volatilities to sweep"""
    lambda_dilution_1: tuple[float, ...] = ()
    """--model regimes: regime 1's issuance costs to sweep"""
    q01: tuple[float, ...] = ()
    """--model regimes: switching intensities 0 -> 1 to sweep"""
    q10: tuple[float, ...] = ()
    """--model regimes: switching intensities 1 -> 0 to sweep"""
    initial_regime_1_probability: tuple[float, ...] = ()
    """--model regimes: probabilities of starting in regime 1 to sweep"""
    kappa: tuple[float, ...] = ()
    """--model ou: speeds of mean reversion to sweep"""
    sigma_mu: tuple[float, ...] = ()
    """--model ou: profitability volatilities to sweep"""
    correlation: tuple[float, ...] = ()
    """--model ou: correlations of the two shocks to sweep"""
    initial_mu_spread: tuple[float, ...] = ()
    """--model ou: initial profitability spreads to sweep"""
    model: Literal["ghm", "credit-line", "divisions", "regimes", "ou"] = "ghm"
    """the model of every run and of the FD lines (pglab train ghm --model)"""
    grid: Path | None = None
    """YAML grid: a mapping of parameter -> list of values (their product), or
    ``calibrations:`` a list of mappings (one calibration each); adds to the flags' grid"""
    algo: tuple[Literal["mc", "pathwise", "actor-critic"], ...] = ("mc",)
    """solvers to train on every calibration"""
    seeds: tuple[int, ...] = (0,)
    """training seeds per calibration and solver (the spread of the RL points)"""
    train_config: Path | None = None
    """a ``pglab train ghm`` YAML file with the settings shared by every run (n_iterations, ...)"""
    n_iterations: int | None = None
    """training iterations of every run (default: the train config's, else the solver's)"""
    backend: Literal["ray", "serial"] = "ray"
    """run the training runs as Ray tasks (one CPU each; bit-identical to serial) or one after another"""
    ray_address: str | None = None
    """connect to this Ray cluster ("auto" or host:port; default: start a local Ray)"""
    max_parallel: int = 0
    """Ray: CPUs of the local Ray instance, i.e. runs at once (0: this machine's cores)"""
    fd_line_points: int = 15
    """FD solutions per swept parameter for the comparative-statics lines (0: only at the grid's values)"""
    fd_line_nodes: int = 3000
    """grid intervals of those FD solutions (thresholds within ~2 x_max / nodes)"""
    log_dir: Path | None = None
    """sweep directory (default runs/sweep-ghm-<YYYYmmdd-HHMMSS>); never overwritten"""
    resume: Path | None = None
    """continue the sweep in this directory: finished runs are read, unfinished ones resumed"""
    device: str = "auto"
    """device of every run: auto, cpu, cuda or cuda:N"""
    yes: bool = False
    """start a sweep of more than 200 runs (without it such a sweep is refused, naming its size)"""

    def __post_init__(self):
        check_path_fields(self)
        for name in SWEEPABLE:
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ConfigError(name, values, "lists a value twice")
            for value in values:  # whole calibrations (rho > r, ...) are checked when the grid is built
                check_finite(name, value)
        if self.model not in MODELS:
            raise ConfigError("model", self.model, f"must be one of {', '.join(MODELS)}")
        for name in SWEEPABLE:
            owner = model_of_parameter(name)
            if owner is not None and owner != self.model and getattr(self, name):
                raise ConfigError(name, getattr(self, name), f"is a parameter of --model {owner}")
        for value in self.divisions:
            check_int("divisions", value, minimum=1)
        if not self.algo:
            raise ConfigError("algo", self.algo, "needs at least one solver")
        for algo in self.algo:
            if algo not in SOLVERS:
                raise ConfigError("algo", algo, f"must be one of {', '.join(SOLVERS)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError("seeds", self.seeds, "needs one or more distinct seeds")
        for seed in self.seeds:
            check_seed("seeds", seed)
        if self.n_iterations is not None:
            check_int("n_iterations", self.n_iterations, minimum=1)
        if self.backend not in ("ray", "serial"):
            raise ConfigError("backend", self.backend, "must be 'ray' or 'serial'")
        if self.ray_address is not None and self.backend != "ray":
            raise ConfigError("ray_address", self.ray_address, "is only used with --backend ray")
        check_threads("max_parallel", self.max_parallel)  # local Ray CPUs: one run each, at most 4 per core
        if self.max_parallel > 1 and (self.backend != "ray" or self.ray_address is not None):  # 1: one at a time
            raise ConfigError(
                "max_parallel", self.max_parallel, "sizes the local Ray instance (--backend ray, no --ray-address)"
            )
        check_int("fd_line_points", self.fd_line_points, minimum=0)
        if self.fd_line_points == 1:
            raise ConfigError("fd_line_points", 1, "needs 0 or at least 2 points for a line")
        check_int("fd_line_nodes", self.fd_line_nodes, minimum=100)
        check_memory("fd_line_nodes", self.fd_line_nodes, fd_grid_bytes(self.fd_line_nodes), "an FD line's grid")
        check_device("device", self.device)
        for name in ("grid", "train_config"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(name, str(path), "no such YAML file")

    def swept(self) -> dict[str, tuple[float, ...]]:
        """The parameters given on the command line, ``{name: values}``."""
        return {name: getattr(self, name) for name in SWEEPABLE if getattr(self, name)}


def model_of_parameter(name: str) -> str | None:
    """The model whose own parameter ``name`` is (``None``: a GHM parameter every model has)."""
    return next((model for model, names in MODEL_PARAMETERS.items() if name in names), None)


# What a resumed sweep may change: where and how the runs execute, not what they compute.
SWEEP_RESUMABLE = frozenset({"backend", "ray_address", "max_parallel", "device", "resume", "log_dir", "yes"})

__all__ = [
    "CREDIT_LINE_PARAMETERS",
    "GHMSweepConfig",
    "INTEGER_PARAMETERS",
    "MODEL_PARAMETERS",
    "model_of_parameter",
    "MAX_RUNS_WITHOUT_YES",
    "MODELS",
    "SWEEPABLE",
    "SWEEP_RESUMABLE",
    "SOLVERS",
]
