"""Configs of ``pglab train maxk-pomo`` and ``pglab evaluate maxk-pomo`` (torch-free).

``pglab train maxk-pomo --help`` builds its flag list from this module alone, so it never
imports torch (nor rl4co). :mod:`pglab.commands.maxk` and :mod:`pglab.algos.maxk_train`
re-export these names.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_int,
    check_memory,
    check_path_fields,
    check_positive,
    check_seed,
    check_threads,
)

VarianceReduction = Literal["none", "sample_loo", "subloo"]
# The same modes as pglab.estimators.maxk.VARIANCE_REDUCTIONS (a test keeps them equal),
# spelled here so that this module does not import the estimators (and torch with them).
VARIANCE_REDUCTIONS: tuple[str, ...] = typing.get_args(VarianceReduction)


MAX_HEAD_DIM = 128
"""RL4CO's attention (rl4co.models.nn.attention) supports head_dim = embed_dim / num_heads
<= 128 and divisible by 8 only."""


def decoding_bytes(batch_size: int, num_loc: int, embed_dim: int) -> int:
    """Lower bound of a POMO training step's memory: one float32 embedding per instance,
    start and decoding step kept for the backward pass, ``batch x n x n x embed_dim x 4``."""
    return batch_size * num_loc * num_loc * embed_dim * 4


@dataclass(frozen=True)
class MaxKPOMOTrainConfig:
    """Train MaxKPOMO (or plain POMO) on random uniform TSP instances with RL4CO."""

    # Aliases, accepted on the command line, in YAML files and in stored runs.
    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"checkpoint_every": "save_interval"}

    algo: Literal["maxk-pomo", "pomo"] = "maxk-pomo"
    """maxk-pomo (Max@K loss) or pomo (RL4CO's shared-baseline loss, the baseline)"""
    trainer: Literal["pglab", "lightning"] = "pglab"
    """pglab: pglab's loop over model.training_step (run directory, exact --resume);
    lightning: RL4CO's RL4COTrainer.fit (Lightning's loop, fp32; no --resume)"""
    problem: Literal["tsp"] = "tsp"
    """routing problem (RL4CO environment)"""
    num_loc: int = 20
    """nodes per instance; also the number of POMO starts n per instance"""
    k: int = 8
    """best-of-k objective (1 <= k <= num_loc; ignored by --algo pomo)"""
    variance_reduction: VarianceReduction = "subloo"
    """Max@K baseline: none, sample_loo (needs num_loc > k) or subloo (needs k >= 2)"""
    stable_sort: bool = True
    """deterministic tie order in the Max@K weights"""
    n_steps: int = 2000
    """optimizer steps (one batch each; docs/maxk.md's headline budget)"""
    batch_size: int = 64
    """instances per step (each decoded num_loc times)"""
    lr: float = 5e-4
    """Adam learning rate (every run in docs/maxk.md)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip (RL4COTrainer's default)"""
    embed_dim: int = 64
    """attention-model embedding size (RL4CO default 128; smaller for the CPU)"""
    num_encoder_layers: int = 3
    """encoder layers (POMO default 6; smaller for the CPU)"""
    num_heads: int = 4
    """attention heads (must divide embed_dim)"""
    log_every: int = 10
    """steps between metric rows"""
    save_interval: int = 100
    """steps between checkpoints (also at the last step and on SIGINT/SIGTERM)"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    seed: int = 0
    """random seed (same seed + config on the CPU: bit-identical run)"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N (fp32 everywhere)"""
    log_dir: Path | None = None
    """run directory (default runs/maxk-pomo-<YYYYmmdd-HHMMSS>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""

    def __post_init__(self):
        check_path_fields(self)
        check_choice("algo", self.algo, ("maxk-pomo", "pomo"))
        check_choice("trainer", self.trainer, ("pglab", "lightning"))
        if self.trainer == "lightning" and self.resume is not None:
            raise ConfigError(
                "resume",
                str(self.resume),
                "needs --trainer pglab: Lightning's loop restores no RNG state, so it cannot continue a run exactly",
            )
        check_choice("problem", self.problem, ("tsp",))
        check_int("num_loc", self.num_loc, minimum=3)
        check_int("k", self.k, minimum=1)
        if self.k > self.num_loc:
            raise ConfigError("k", self.k, f"must be <= num_loc={self.num_loc} (samples per instance)")
        check_choice("variance_reduction", self.variance_reduction, VARIANCE_REDUCTIONS)
        if self.algo == "maxk-pomo" and self.variance_reduction == "sample_loo" and self.k >= self.num_loc:
            raise ConfigError(
                "variance_reduction",
                self.variance_reduction,
                f"sample_loo needs num_loc > k, got num_loc={self.num_loc}, k={self.k}",
            )
        if self.algo == "maxk-pomo" and self.variance_reduction == "subloo" and self.k < 2:
            raise ConfigError("variance_reduction", self.variance_reduction, "subloo needs k >= 2")
        check_int("n_steps", self.n_steps, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_positive("lr", self.lr)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_int("embed_dim", self.embed_dim, minimum=1)
        check_int("num_encoder_layers", self.num_encoder_layers, minimum=1)
        check_int("num_heads", self.num_heads, minimum=1)
        if self.embed_dim % self.num_heads:
            raise ConfigError("num_heads", self.num_heads, f"must divide embed_dim={self.embed_dim}")
        head_dim = self.embed_dim // self.num_heads
        if head_dim % 8 or head_dim > MAX_HEAD_DIM:
            raise ConfigError(
                "embed_dim",
                self.embed_dim,
                f"embed_dim / num_heads = {head_dim} must be a multiple of 8 and <= {MAX_HEAD_DIM} "
                f"(RL4CO's attention; num_heads={self.num_heads})",
            )
        check_int("log_every", self.log_every, minimum=1)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        check_seed("seed", self.seed)
        check_threads("threads", self.threads)
        check_device("device", self.device)
        check_memory(
            "num_loc", self.num_loc, decoding_bytes(1, self.num_loc, self.embed_dim), "one instance's POMO decoding"
        )
        check_memory(
            "batch_size",
            self.batch_size,
            decoding_bytes(self.batch_size, self.num_loc, self.embed_dim),
            f"POMO decoding of {self.batch_size} instances x {self.num_loc} starts x {self.num_loc} steps",
        )

    @property
    def label(self) -> str:
        return "pomo" if self.algo == "pomo" else f"maxk-pomo/{self.variance_reduction}"


@dataclass(frozen=True)
class MaxKEvalConfig:
    """Evaluate MaxKPOMO/POMO checkpoints on a seeded TSP test set."""

    # Aliases, accepted on the command line and in YAML files.
    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"num_instances": "episodes"}

    checkpoints: tuple[Path, ...] = ()
    """checkpoint files or run directories (one table row each)"""
    episodes: int = 1000
    """test instances (uniform in the unit square; one episode = one instance)"""
    seed: int = 1234
    """seed of the test set (same seed: same instances)"""
    k: int = 8
    """report the expected best of k sampled tours"""
    batch_size: int = 250
    """instances decoded at once"""
    optimal: Literal["elkai", "none"] = "elkai"
    """reference tours for the gap: elkai (LKH) or none"""
    elkai_runs: int = 10
    """LKH runs per instance"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    output: Path | None = None
    """also write the results as JSON here"""

    def __post_init__(self):
        check_path_fields(self)
        if len(self.checkpoints) == 0:
            raise ConfigError("checkpoints", self.checkpoints, "needs at least one checkpoint or run directory")
        check_int("episodes", self.episodes, minimum=1)
        check_seed("seed", self.seed)
        check_int("k", self.k, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_choice("optimal", self.optimal, ("elkai", "none"))
        check_int("elkai_runs", self.elkai_runs, minimum=1)
        check_threads("threads", self.threads)
        check_device("device", self.device)


__all__ = ["MaxKPOMOTrainConfig", "MaxKEvalConfig", "VARIANCE_REDUCTIONS", "VarianceReduction"]
