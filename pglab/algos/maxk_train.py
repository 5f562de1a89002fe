"""The maxk-pomo trainer: RL4CO's POMO machinery driven by a visible pglab loop.

RL4CO supplies the TSP environment, the attention policy, multi-start decoding and
``shared_step`` -> ``calculate_loss``; the loop is pglab's, inside the training shell
(:mod:`pglab.run.shell`: run directory, resume, logs, checkpoints, signals)::

    for step in 1..n_steps:
        locs  ~ U[0,1]^(batch x num_loc x 2)      (pglab generator: seeded, resumable)
        out   = model.training_step(locs)         (RL4CO: decode n = num_loc tours, loss)
        Adam step on out["loss"] (grad-norm clipped)
        log every log_every steps; the shell checkpoints every save_interval steps

This loop (``--trainer pglab``, the default) gives exact ``--resume`` (N + resume + N
steps == 2N steps bit for bit on the CPU), which Lightning's resume (no RNG state,
dataset regenerated in ``setup``) does not. ``--trainer lightning`` fits the same
module with RL4CO's ``RL4COTrainer`` instead (one epoch of ``n_steps`` batches; no
``--resume``), in the same run-directory lifecycle.

``--algo pomo`` trains plain RL4CO POMO with the same loop and budget (the baseline).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import torch

from pglab.algos.maxk_pomo import KIND, build_model, random_locs
from pglab.configs.maxk import MaxKPOMOTrainConfig
from pglab.run.shell import TrainerSpec, TrainingRun

SPEC = TrainerSpec(
    system=KIND,
    config_class=MaxKPOMOTrainConfig,
    kinds=(KIND,),
    step_key="step",
    # A resume may extend the budget and change the logging cadence: neither alters what
    # is trained (the instance stream is one generator, the optimiser has no schedule).
    resumable=frozenset({"n_steps", "log_every"}),
    total_steps=lambda config: config.n_steps,
    budget_field="n_steps",
)


def step_metrics(out: dict[str, Any], k: int, grad_norm: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """pglab's names for one ``training_step`` output of RL4CO (tensors, no host sync).

    ``train/reward`` is the mean reward (= -tour length) of the batch's n sampled tours,
    ``train/max_reward`` the best of them, ``train/rho_hat`` MaxKPOMO's max@k estimate.
    """
    sample = {
        "loss/policy": out["loss"].detach(),
        "stats/tour_length": -out["train/reward"].detach(),
        "stats/best_of_n_tour_length": -out["train/max_reward"].detach(),
    }
    if grad_norm is not None:
        sample["stats/grad_norm"] = grad_norm.detach()
    if "train/rho_hat" in out:
        sample[f"stats/max@{k}_tour_length"] = -out["train/rho_hat"].detach()
    return sample


class MetricWindow:
    """Per-step metrics kept as tensors until the next log row: one host sync per row."""

    def __init__(self):
        self.values: dict[str, list[torch.Tensor]] = {}

    def add(self, sample: dict[str, torch.Tensor]) -> None:
        for name, value in sample.items():
            self.values.setdefault(name, []).append(value)

    def row(self, step_seconds: float) -> dict[str, float]:
        """The window's means plus the last step's timing; empties the window."""
        from pglab.run.logger import to_float

        row = {name: torch.stack(values).mean() for name, values in self.values.items()}
        row["perf/iter_s"] = torch.tensor(step_seconds)
        row["perf/steps_per_s"] = torch.tensor(1.0 / max(step_seconds, 1e-9))
        self.values.clear()
        return {name: to_float(value) for name, value in row.items()}


def train_maxk_pomo(
    config: MaxKPOMOTrainConfig, *, given: frozenset[str] | None = None, echo=print, stop_after: int | None = None
) -> dict[str, Any]:
    """Train (or resume) a run.

    Args:
        config: the run's config (``resume`` set: continue that run).
        given: the fields the user set (from :func:`pglab.run.config.parse_flags`); a
            resume applies exactly these. ``None`` (the Python API): the fields that
            differ from the defaults.
        echo: where messages for the user go.
        stop_after: stop (checkpoint, exit code 130) after this many steps of this
            session, as if SIGTERM arrived (the test hook of exact resume).

    Returns:
        ``{"run_dir", "step", "interrupted", "exit_code", "last", "config"}``: ``last`` is
        the last metric row, ``config`` the run's (merged) config.
    """
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        if run.config.trainer == "lightning":
            last = _fit_with_lightning(run)
        else:
            last = _train_with_pglab_loop(run)
        run.finish({"label": run.config.label, **last})
    return {
        "run_dir": run.run_dir,
        "step": int(run.counters["step"]),
        "interrupted": run.interrupted,
        "exit_code": run.exit_code,
        "last": last,
        "config": run.config,
    }


def _build_checkpoint(run: TrainingRun, model, optimizer, rng: dict[str, Any], **extra: Any) -> dict[str, Any]:
    from pglab.run.checkpoint import build_checkpoint
    from pglab.run.config import config_to_dict

    config = dataclasses.replace(run.config, resume=None)
    return build_checkpoint(
        kind=KIND,
        config=config_to_dict(config),
        counters=dict(run.counters),
        models={"model": model.state_dict()},
        optimizers={"adam": optimizer.state_dict()},
        rng=rng,
        extra={"label": config.label, **extra},
    )


def _train_with_pglab_loop(run: TrainingRun) -> dict[str, float]:
    """``--trainer pglab``: the loop above; returns the last metric row."""
    from tensordict import TensorDict

    from pglab.run.checkpoint import load_state_dict_checked
    from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state

    config, device = run.config, run.device
    # -- build (torch's global generator was seeded by the shell: the weights) --
    data_generator = make_generator(config.seed + 1)  # instances: CPU stream, device-independent
    model = build_model(config, device)
    # Adam as RL4CO's configure_optimizers builds it (no scheduler), kept here to own its state.
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    run.counters.setdefault("instances", 0)
    if run.checkpoint is not None:
        load_state_dict_checked(model, run.checkpoint["models"]["model"], name="model", source=run.checkpoint["path"])
        optimizer.load_state_dict(run.checkpoint["optimizers"]["adam"])
        restore_rng_state(run.checkpoint["rng"], {"data": data_generator})

    def checkpoint() -> dict[str, Any]:
        return _build_checkpoint(run, model, optimizer, capture_rng_state({"data": data_generator}))

    model.train()
    last: dict[str, float] = {}
    window = MetricWindow()
    for step in run.steps(config.n_steps, save=checkpoint, desc=f"train {config.label}", unit="step"):
        tick = time.perf_counter()
        # -- sample instances, decode n tours each, loss (RL4CO shared_step) --
        locs = random_locs(data_generator, config.batch_size, config.num_loc).to(device)
        batch = TensorDict({"locs": locs}, batch_size=[config.batch_size], device=device)
        out = model.training_step(batch, step)
        # -- optimise --
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        step_seconds = time.perf_counter() - tick
        run.counters["instances"] += config.batch_size
        # -- log --
        window.add(step_metrics(out, config.k, grad_norm))
        if step % config.log_every == 0 or step == config.n_steps:
            last = window.row(step_seconds)
            run.log(step, last)
            run.set_postfix(len=f"{last['stats/tour_length']:.3f}", best=f"{last['stats/best_of_n_tour_length']:.3f}")
    return last


def _fit_with_lightning(run: TrainingRun) -> dict[str, float]:
    """``--trainer lightning``: one epoch of ``n_steps`` batches under RL4CO's ``RL4COTrainer``.

    RL4CO generates ``n_steps * batch_size`` training instances (and 2 batches of
    validation instances) in ``setup``. Lightning clips gradients at ``max_grad_norm``,
    keeps float32 matmuls (RL4CO's default "medium" precision runs them in bfloat16 on
    CPUs with AMX) and writes its own CSV log to ``run_dir/lightning``; a callback writes
    the same pglab metrics as the pglab loop (``metrics.csv``, ``metrics.jsonl``,
    TensorBoard; no ``stats/grad_norm``, which Lightning keeps to itself) and turns
    SIGINT/SIGTERM into Lightning's ``should_stop``. The final model (also after a stop)
    is saved as a pglab checkpoint, so ``pglab evaluate`` and ``pglab.load_checkpoint``
    read it like any other run. Returns the last metric row.
    """
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import CSVLogger
    from rl4co.utils.trainer import RL4COTrainer

    config, device = run.config, run.device
    model = build_model(
        config,
        device,
        train_data_size=config.n_steps * config.batch_size,
        val_data_size=2 * config.batch_size,
        test_data_size=config.batch_size,
    )
    last: dict[str, float] = {}

    class PglabMetrics(Callback):
        """pglab's metric rows and stop requests inside Lightning's loop."""

        def __init__(self):
            self.window = MetricWindow()
            self.tick = time.perf_counter()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.tick = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = int(trainer.global_step)
            self.window.add(step_metrics(outputs, config.k))
            if step % config.log_every == 0 or step == config.n_steps:
                last.clear()
                last.update(self.window.row(time.perf_counter() - self.tick))
                run.log(step, last)
            if run.stop_requested:
                trainer.should_stop = True

    trainer = RL4COTrainer(
        max_epochs=1,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision="32-true",
        matmul_precision=None,
        gradient_clip_val=config.max_grad_norm,
        log_every_n_steps=config.log_every,
        logger=[CSVLogger(run.run_dir, name="", version="lightning")],
        callbacks=[PglabMetrics()],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=os.environ.get("PGLAB_NO_PROGRESS", "") in ("", "0"),
    )
    tick = time.perf_counter()
    try:
        trainer.fit(model)
    except SystemExit:  # Lightning's answer to SIGTERM (SIGTERMException) and to Ctrl-C (sys.exit(1))
        pass
    step = int(trainer.global_step)
    run.counters.update({"step": step, "instances": step * config.batch_size, "wall_time": time.perf_counter() - tick})
    run.save(step, _build_checkpoint(run, model, trainer.optimizers[0], {}, trainer="lightning"))
    if step < config.n_steps:
        run.interrupted = True
        echo_stop = f"stopped: checkpoint saved at step {step} in {run.run_dir} (--trainer lightning cannot be resumed)"
        run.echo(echo_stop, file=sys.stderr)
    return last


__all__ = ["SPEC", "train_maxk_pomo", "step_metrics", "MetricWindow", "MaxKPOMOTrainConfig"]
