"""``pglab train maxk-pomo`` and ``pglab evaluate maxk-pomo`` / ``pglab evaluate CHECKPOINT``.

Training runs RL4CO's POMO machinery (TSP environment, attention policy, multi-start
decoding, ``shared_step`` -> ``calculate_loss``) inside a visible pglab loop::

    for step in 1..n_steps:
        locs  ~ U[0,1]^(batch x num_loc x 2)      (pglab generator: seeded, resumable)
        out   = model.training_step(locs)         (RL4CO: decode n = num_loc tours, loss)
        Adam step on out["loss"] (grad-norm clipped)
        log / checkpoint every few steps

by default (``--trainer pglab``): the explicit loop gives pglab's run directory, metrics
logs, atomic checkpoints holding every RNG state, exact ``--resume`` (N + resume + N steps
== 2N steps bit-for-bit on the CPU) and SIGINT/SIGTERM -> final checkpoint, which
Lightning's resume (no RNG state, dataset regenerated in ``setup``) does not give. The
model is a plain RL4CO ``LightningModule``: ``--trainer lightning`` fits it with RL4CO's
``RL4COTrainer`` instead (one epoch of ``n_steps`` batches; no ``--resume``).

``--algo pomo`` trains plain RL4CO POMO with the same loop and budget (the baseline).

Evaluation decodes a seeded test set (``--seed``, ``--num-instances``) with each
checkpoint and reports tour lengths and gaps to near-optimal tours from elkai (LKH-2);
see ``docs/maxk.md``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from pglab.errors import ConfigError, DataError, UsageError
from pglab.estimators.maxk import VARIANCE_REDUCTIONS
from pglab.run.config import config_from_dict, config_to_dict, parse_config
from pglab.run.signals import StopRequested
from pglab.validation import check_choice, check_device, check_int, check_positive

KIND = "maxk-pomo"


# -- configs --------------------------------------------------------------------------


@dataclass(frozen=True)
class MaxKPOMOTrainConfig:
    """Train MaxKPOMO (or plain POMO) on random uniform TSP instances with RL4CO."""

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
    variance_reduction: Literal["none", "sample_loo", "subloo"] = "subloo"
    """Max@K baseline: none, sample_loo (needs num_loc > k) or subloo (needs k >= 2)"""
    stable_sort: bool = True
    """deterministic tie order in the Max@K weights"""
    n_steps: int = 500
    """optimizer steps (one batch each)"""
    batch_size: int = 64
    """instances per step (each decoded num_loc times)"""
    lr: float = 1e-4
    """Adam learning rate"""
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
    checkpoint_every: int = 100
    """steps between checkpoints"""
    seed: int = 0
    """random seed (same seed + config on the CPU: bit-identical run)"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N (fp32 everywhere)"""
    log_dir: Path | None = None
    """run directory (default runs/maxk-pomo/<time>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint"""

    def __post_init__(self):
        check_choice("algo", self.algo, ("maxk-pomo", "pomo"))
        check_choice("trainer", self.trainer, ("pglab", "lightning"))
        if self.trainer == "lightning" and self.resume is not None:
            raise ConfigError("resume", self.resume, "needs --trainer pglab: Lightning's loop restores no RNG state, so it cannot continue a run exactly")
        check_choice("problem", self.problem, ("tsp",))
        check_int("num_loc", self.num_loc, minimum=3)
        check_int("k", self.k, minimum=1)
        if self.k > self.num_loc:
            raise ConfigError("k", self.k, f"must be <= num_loc={self.num_loc} (samples per instance)")
        check_choice("variance_reduction", self.variance_reduction, VARIANCE_REDUCTIONS)
        if self.algo == "maxk-pomo" and self.variance_reduction == "sample_loo" and self.k >= self.num_loc:
            raise ConfigError("variance_reduction", self.variance_reduction, f"sample_loo needs num_loc > k, got num_loc={self.num_loc}, k={self.k}")
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
        check_int("log_every", self.log_every, minimum=1)
        check_int("checkpoint_every", self.checkpoint_every, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_int("threads", self.threads, minimum=0)
        check_device("device", self.device)

    @property
    def label(self) -> str:
        return "pomo" if self.algo == "pomo" else f"maxk-pomo/{self.variance_reduction}"


# Fields a resumed run may change (they do not alter the trajectory of training).
RESUMABLE_FIELDS = {"n_steps", "log_every", "checkpoint_every", "threads", "device", "log_dir", "resume"}


@dataclass(frozen=True)
class MaxKEvalConfig:
    """Evaluate MaxKPOMO/POMO checkpoints on a seeded TSP test set."""

    checkpoints: tuple[Path, ...] = ()
    """checkpoint files or run directories (one table row each)"""
    num_instances: int = 1000
    """test instances (uniform in the unit square)"""
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
        if len(self.checkpoints) == 0:
            raise ConfigError("checkpoints", self.checkpoints, "needs at least one checkpoint or run directory")
        check_int("num_instances", self.num_instances, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_int("k", self.k, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_choice("optimal", self.optimal, ("elkai", "none"))
        check_int("elkai_runs", self.elkai_runs, minimum=1)
        check_int("threads", self.threads, minimum=0)
        check_device("device", self.device)


# -- model construction ----------------------------------------------------------------


def _quiet_lightning() -> None:
    # self.log() outside a Lightning Trainer warns once per call; the loop logs itself.
    warnings.filterwarnings("ignore", message=r".*self\.log\(\).*")
    warnings.filterwarnings("ignore", message=r".*is an instance of `nn.Module`.*")


def build_model(config: MaxKPOMOTrainConfig, device: torch.device, **data_sizes: int):
    """The RL4CO module for ``config``: MaxKPOMO or POMO on a ``TSPEnv(num_loc)``.
    ``data_sizes`` (``train_data_size`` ...) size the datasets a Lightning ``fit`` generates."""
    try:
        from rl4co.envs import TSPEnv
        from rl4co.models.zoo.pomo import POMO
    except ImportError as exc:
        raise UsageError("maxk-pomo needs the co extra: pip install 'pglab[co]'") from exc
    from pglab.algos.maxk_pomo import MaxKPOMO

    _quiet_lightning()
    env = TSPEnv(generator_params={"num_loc": config.num_loc})
    common: dict[str, Any] = {
        "policy_kwargs": {
            "embed_dim": config.embed_dim,
            "num_encoder_layers": config.num_encoder_layers,
            "num_heads": config.num_heads,
        },
        "batch_size": config.batch_size,
        "optimizer_kwargs": {"lr": config.lr},
        **data_sizes,
    }
    if config.algo == "pomo":
        model = POMO(env, **common)
    else:
        model = MaxKPOMO(
            env, k=config.k, variance_reduction=config.variance_reduction, stable_sort=config.stable_sort, **common
        )
    # Return the per-batch best-of-n reward as a metric too (POMO computes it in train).
    model.train_metrics = list(dict.fromkeys([*model.train_metrics, "max_reward"]))
    return model.to(device)


def _random_locs(generator: torch.Generator, count: int, num_loc: int) -> torch.Tensor:
    """Uniform TSP instances ``[count, num_loc, 2]`` (float32, CPU) from ``generator``."""
    return torch.rand(count, num_loc, 2, generator=generator)




# -- training ---------------------------------------------------------------------------


def _resolve_resume(config: MaxKPOMOTrainConfig) -> tuple[MaxKPOMOTrainConfig, dict[str, Any] | None]:
    from pglab.run.checkpoint import load_checkpoint_file

    if config.resume is None:
        return config, None
    checkpoint = load_checkpoint_file(config.resume, kinds=[KIND])
    stored = config_from_dict(MaxKPOMOTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    defaults = config_to_dict(MaxKPOMOTrainConfig())
    current = config_to_dict(config)
    for field in dataclasses.fields(MaxKPOMOTrainConfig):
        name = field.name
        if name in RESUMABLE_FIELDS or current[name] == defaults[name]:
            continue
        if current[name] != config_to_dict(stored)[name]:
            raise ConfigError(
                name, getattr(config, name),
                f"differs from the resumed run's value {getattr(stored, name)!r}; only "
                f"{', '.join(sorted(RESUMABLE_FIELDS))} may change on --resume",
            )
    overrides = {name: getattr(config, name) for name in RESUMABLE_FIELDS if current[name] != defaults[name]}
    merged = dataclasses.replace(stored, **overrides)
    done = int(checkpoint["counters"]["step"])
    if merged.n_steps < done:
        raise ConfigError("n_steps", merged.n_steps, f"is below the checkpoint's step {done}")
    return merged, checkpoint


def train_maxk_pomo(config: MaxKPOMOTrainConfig, *, echo=print) -> dict[str, Any]:
    """Train (or resume) a run; returns ``{"run_dir", "step", "interrupted", "last"}``."""
    from tensordict import TensorDict

    from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_state_dict_checked
    from pglab.run.device import resolve_device
    from pglab.run.logger import MetricsLogger, to_float
    from pglab.run.progress import progress_bar
    from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config
    from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state, seed_everything

    config, checkpoint = _resolve_resume(config)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    if checkpoint is not None:
        path = Path(checkpoint["path"])
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir(KIND))
        write_run_config(run_dir, config_to_dict(config), kind=KIND)

    seed_everything(config.seed)
    if config.trainer == "lightning":
        return _train_with_lightning(config, run_dir, device, echo=echo)
    data_generator = make_generator(config.seed + 1)  # instances: CPU stream, device-independent
    model = build_model(config, device)
    # Adam as RL4CO's configure_optimizers builds it (no scheduler), kept here to own its state.
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    counters: dict[str, float] = {"step": 0, "instances": 0, "wall_time": 0.0}
    if checkpoint is not None:
        load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint["path"])
        optimizer.load_state_dict(checkpoint["optimizers"]["adam"])
        restore_rng_state(checkpoint["rng"], {"data": data_generator})
        counters.update(checkpoint["counters"])
    start = int(counters["step"])
    logger = MetricsLogger(run_dir, step_key="step", jsonl_name="metrics.jsonl",
                           resume_step=start if checkpoint is not None else None)
    manager = CheckpointManager(run_dir / "checkpoints", keep=3)

    def save(step: int) -> Path:
        state = build_checkpoint(
            kind=KIND, config=config_to_dict(dataclasses.replace(config, resume=None)), counters=dict(counters),
            models={"model": model.state_dict()}, optimizers={"adam": optimizer.state_dict()},
            rng=capture_rng_state({"data": data_generator}), extra={"label": config.label},
        )
        return manager.save(step, state)

    model.train()
    interrupted = False
    step = start
    last: dict[str, float] = {}
    window: dict[str, list[torch.Tensor]] = {}
    bar = progress_bar(config.n_steps, desc=f"train {config.label}", initial=start, unit="step")
    try:
        with StopRequested() as stop:
            for step in range(start + 1, config.n_steps + 1):
                tick = time.perf_counter()
                # -- sample instances, decode n tours each, loss (RL4CO shared_step) --
                locs = _random_locs(data_generator, config.batch_size, config.num_loc).to(device)
                batch = TensorDict({"locs": locs}, batch_size=[config.batch_size], device=device)
                out = model.training_step(batch, step)
                # -- optimise --
                optimizer.zero_grad(set_to_none=True)
                out["loss"].backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                elapsed = time.perf_counter() - tick
                counters["step"] = step
                counters["instances"] += config.batch_size
                counters["wall_time"] += elapsed
                # -- metrics: kept as tensors, one host sync per log row --
                sample = {
                    "loss/policy": out["loss"].detach(),
                    "stats/tour_length": -out["train/reward"],
                    "stats/best_of_n_tour_length": -out["train/max_reward"],
                    "stats/grad_norm": grad_norm.detach(),
                }
                if "train/rho_hat" in out:
                    sample[f"stats/max@{config.k}_tour_length"] = -out["train/rho_hat"]
                for name, value in sample.items():
                    window.setdefault(name, []).append(value)
                if step % config.log_every == 0 or step == config.n_steps:
                    row = {name: torch.stack(values).mean() for name, values in window.items()}
                    row["perf/iter_s"] = torch.tensor(elapsed)
                    row["perf/steps_per_s"] = torch.tensor(1.0 / max(elapsed, 1e-9))
                    last = {name: to_float(value) for name, value in row.items()}
                    logger.log(step, last)
                    window.clear()
                    bar.set_postfix(len=f"{last['stats/tour_length']:.3f}", best=f"{last['stats/best_of_n_tour_length']:.3f}")
                if step % config.checkpoint_every == 0 or step == config.n_steps:
                    save(step)
                bar.update(1)
                if stop.requested:
                    save(step)
                    interrupted = True
                    echo(f"interrupted: checkpoint saved at step {step} in {run_dir}", file=sys.stderr)
                    break
    finally:
        bar.close()
        logger.close()
    return {"run_dir": run_dir, "step": step, "interrupted": interrupted, "last": last}


def _train_with_lightning(config: MaxKPOMOTrainConfig, run_dir: Path, device: torch.device, *, echo=print) -> dict[str, Any]:
    """``--trainer lightning``: one epoch of ``n_steps`` batches under RL4CO's ``RL4COTrainer``.

    RL4CO generates ``n_steps * batch_size`` training instances (and 2 batches of
    validation instances) in ``setup``; Lightning logs to ``run_dir/lightning`` (CSV) and
    ``run_dir/tensorboard``, clips gradients at ``max_grad_norm`` and keeps float32
    matmuls (RL4CO's default "medium" precision runs them in bfloat16 on CPUs with AMX).
    The final model (also after Ctrl-C) is saved as a pglab checkpoint, so ``pglab
    evaluate`` and ``pglab.load_checkpoint`` read it like any other run.
    """
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from rl4co.utils.trainer import RL4COTrainer

    from pglab.run.checkpoint import CheckpointManager, build_checkpoint

    model = build_model(config, device, train_data_size=config.n_steps * config.batch_size,
                        val_data_size=2 * config.batch_size, test_data_size=config.batch_size)
    trainer = RL4COTrainer(
        max_epochs=1, accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, precision="32-true",
        matmul_precision=None, gradient_clip_val=config.max_grad_norm, log_every_n_steps=config.log_every,
        logger=[CSVLogger(run_dir, name="", version="lightning"), TensorBoardLogger(run_dir, name="", version="tensorboard")],
        enable_checkpointing=False, enable_model_summary=False,
        enable_progress_bar=os.environ.get("PGLAB_NO_PROGRESS", "") in ("", "0"),
    )
    tick = time.perf_counter()
    interrupted = False
    try:
        trainer.fit(model)
    except SystemExit:  # Lightning's answer to Ctrl-C (sys.exit(1)) and to SIGTERM
        interrupted = True
    step = int(trainer.global_step)
    counters = {"step": step, "instances": step * config.batch_size, "wall_time": time.perf_counter() - tick}
    state = build_checkpoint(
        kind=KIND, config=config_to_dict(config), counters=counters, models={"model": model.state_dict()},
        optimizers={"adam": trainer.optimizers[0].state_dict()}, extra={"label": config.label, "trainer": "lightning"},
    )
    CheckpointManager(run_dir / "checkpoints", keep=3).save(step, state)
    last = {name: float(value) for name, value in trainer.logged_metrics.items()}
    if interrupted:
        echo(f"interrupted: checkpoint saved at step {step} in {run_dir}", file=sys.stderr)
    return {"run_dir": run_dir, "step": step, "interrupted": interrupted, "last": last}


def train(argv: list[str]) -> int:
    """``pglab train maxk-pomo [FLAGS]``."""
    config = parse_config(MaxKPOMOTrainConfig, argv, prog="pglab train maxk-pomo",
                          description=MaxKPOMOTrainConfig.__doc__)
    result = train_maxk_pomo(config)
    last = result["last"]
    if "stats/tour_length" in last:
        print(f"step {result['step']}: mean tour length {last['stats/tour_length']:.4f}, "
              f"best of {config.num_loc} {last['stats/best_of_n_tour_length']:.4f}")
    elif "train/reward" in last:  # --trainer lightning: RL4CO's metric names
        print(f"step {result['step']}: mean tour length {-last['train/reward']:.4f}")
    print(f"run directory: {result['run_dir']}")
    return 130 if result["interrupted"] else 0


# -- evaluation ------------------------------------------------------------------------


def reference_tour_lengths(locs: torch.Tensor, *, runs: int = 10) -> torch.Tensor:
    """Near-optimal tour lengths ``[N]`` of ``locs`` ``[N, n, 2]`` with elkai (LKH).

    Uses :func:`pglab.envs.tsp_solvers.lkh_tour` (integer-scaled costs for the search,
    exact float64 length of the tour found). LKH is not certified optimal; for TSP20 its
    tours matched the exact Held-Karp optimum on every instance checked (tests and
    docs/maxk.md), so gaps are relative to the optimum up to that caveat.
    """
    from pglab.envs.tsp_solvers import distance_matrix, lkh_tour

    points = locs.detach().to(torch.float64).cpu().numpy()
    return torch.tensor([lkh_tour(distance_matrix(coords), runs=runs)[1] for coords in points], dtype=torch.float64)


def _model_from_checkpoint(checkpoint: dict[str, Any], device: torch.device):
    from pglab.run.checkpoint import load_state_dict_checked

    config = config_from_dict(MaxKPOMOTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    model = build_model(config, device)
    load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint.get("path", "?"))
    model.eval()
    return model, config


def load_model(path: str | Path, device: torch.device):
    """Rebuild the RL4CO module stored in a maxk-pomo checkpoint; returns (model, config, checkpoint)."""
    from pglab.run.checkpoint import load_checkpoint_file

    checkpoint = load_checkpoint_file(path, kinds=[KIND], map_location=device)
    model, config = _model_from_checkpoint(checkpoint, device)
    return model, config, checkpoint


def evaluate_models(config: MaxKEvalConfig, *, echo=print) -> list[dict[str, Any]]:
    """One row per checkpoint: tour lengths (greedy, max@k, best of n, sample mean) and
    gaps to the reference tours, on ``num_instances`` instances drawn with ``seed``."""
    from pglab.algos.maxk_pomo import evaluate_tsp_policy
    from pglab.run.device import resolve_device
    from pglab.run.seeding import make_generator

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    loaded = [load_model(path, device) for path in config.checkpoints]
    sizes = {train_config.num_loc for _, train_config, _ in loaded}
    if len(sizes) != 1:
        raise DataError(f"checkpoints: trained on different num_loc {sorted(sizes)}; evaluate them separately")
    num_loc = sizes.pop()
    if config.k > num_loc:
        raise ConfigError("k", config.k, f"must be <= num_loc={num_loc} of the checkpoints")
    locs = _random_locs(make_generator(config.seed), config.num_instances, num_loc)
    reference = None
    if config.optimal == "elkai":
        tick = time.perf_counter()
        reference = reference_tour_lengths(locs, runs=config.elkai_runs)
        echo(f"reference tours (elkai, {config.elkai_runs} runs): mean length {float(reference.mean()):.4f} "
             f"in {time.perf_counter() - tick:.1f} s", file=sys.stderr)
    rows = []
    first: dict[str, torch.Tensor] | None = None
    for (model, train_config, checkpoint), path in zip(loaded, config.checkpoints):
        torch.manual_seed(config.seed)  # the sampled tours are reproducible too
        lengths = evaluate_tsp_policy(model, locs.to(device), config.k, batch_size=config.batch_size)
        row: dict[str, Any] = {
            "checkpoint": str(path), "label": train_config.label, "step": int(checkpoint["counters"]["step"]),
            "k": config.k, "num_loc": num_loc, "num_instances": config.num_instances,
        }
        for name, values in lengths.items():
            row[f"{name}_length"] = float(values.double().mean())
            if reference is not None:
                row[f"{name}_gap_pct"] = float(((values.double() / reference - 1.0) * 100).mean())
        if reference is not None:
            row["reference_length"] = float(reference.mean())
        # Paired difference to the first checkpoint on the same instances, with its
        # standard error: the instance-to-instance spread cancels in the difference.
        if first is None:
            first = lengths
        for name, values in lengths.items():
            diff = values.double() - first[name].double()
            row[f"{name}_diff_vs_first"] = float(diff.mean())
            row[f"{name}_diff_vs_first_se"] = float(diff.std() / len(diff) ** 0.5) if len(diff) > 1 else float("nan")
        rows.append(row)
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    k = rows[0]["k"]
    n = rows[0]["num_loc"]
    columns = [("greedy", "greedy"), (f"max@{k}", "maxk"), (f"best of {n}", "sample_best"), ("sample mean", "sample_mean")]
    has_gap = "greedy_gap_pct" in rows[0]
    header = f"{'model':<24} {'steps':>6} " + " ".join(f"{title:>19}" for title, _ in columns)
    lines = [f"TSP{n}, {rows[0]['num_instances']} instances; tour length" + (" (gap % to elkai)" if has_gap else ""), header]
    for row in rows:
        cells = []
        for _, key in columns:
            cell = f"{row[key + '_length']:.4f}"
            if has_gap:
                cell += f" ({row[key + '_gap_pct']:.2f}%)"
            cells.append(f"{cell:>19}")
        lines.append(f"{row['label']:<24} {row['step']:>6} " + " ".join(cells))
    if has_gap:
        lines.append(f"{'elkai (LKH)':<24} {'':>6} {rows[0]['reference_length']:>19.4f}")
    if len(rows) > 1:
        lines.append(f"paired difference to {rows[0]['label']} (mean ± standard error over instances; < 0: shorter)")
        for row in rows[1:]:
            cells = [f"{row[key + '_diff_vs_first']:+.4f} ± {row[key + '_diff_vs_first_se']:.4f}" for _, key in columns]
            lines.append(f"{row['label']:<24} {row['step']:>6} " + " ".join(f"{cell:>19}" for cell in cells))
    return "\n".join(lines)


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate maxk-pomo --checkpoints RUN [RUN ...] [FLAGS]``."""
    config = parse_config(MaxKEvalConfig, argv, prog="pglab evaluate maxk-pomo", description=MaxKEvalConfig.__doc__)
    rows = evaluate_models(config)
    print(format_rows(rows))
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json

        atomic_write_json(config.output, {"rows": rows, "config": config_to_dict(config)})
    return 0


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]`` for a checkpoint of kind ``maxk-pomo``."""
    if not argv:
        raise UsageError("evaluate: give a checkpoint path")
    return evaluate(["--checkpoints", argv[0], *argv[1:]])


def agent_from_checkpoint(checkpoint: dict[str, Any], *, device: str | torch.device = "cpu"):
    """For ``pglab.load_checkpoint`` (``AGENT_LOADERS["maxk-pomo"]``): the RL4CO module
    (``.policy``, ``.env``; MaxKPOMO or POMO) of a loaded maxk-pomo checkpoint, in eval mode,
    with ``.pglab_config`` holding its training config."""
    from pglab.run.device import resolve_device

    device = resolve_device(device) if isinstance(device, str) else device
    model, config = _model_from_checkpoint(checkpoint, device)
    model.pglab_config = config
    return model


__all__ = ["train", "evaluate", "evaluate_checkpoint", "agent_from_checkpoint", "MaxKPOMOTrainConfig", "MaxKEvalConfig",
           "train_maxk_pomo", "evaluate_models", "reference_tour_lengths"]
