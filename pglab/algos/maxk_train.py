"""The maxk-pomo trainer: RL4CO's POMO machinery driven by a visible pglab loop.

RL4CO supplies the TSP environment, the attention policy, multi-start decoding and
``shared_step`` -> ``calculate_loss``; the loop is pglab's, inside the training shell
(:mod:`pglab.run.shell`: run directory, resume, logs, checkpoints, signals)::

    for step in 1..n_steps:
        locs  ~ U[0,1]^(batch x num_loc x 2)      (pglab generator: seeded, resumable)
        out   = model.training_step(locs)         (RL4CO: decode n = num_loc tours, loss)
        Adam step on out["loss"] (grad-norm clipped)
        log every log_every steps; the shell checkpoints every save_interval steps

``env_steps`` (the shell's counter, and its ``perf/env_steps_per_s``) counts the tours
decoded in training: ``batch_size * num_loc`` per step (POMO starts one tour at each node).

This loop (``--trainer pglab``, the default) gives exact ``--resume`` (N + resume + N
steps == 2N steps bit for bit on the CPU), which Lightning's resume (no RNG state,
dataset regenerated in ``setup``) does not. ``--trainer lightning`` fits the same
module with RL4CO's ``RL4COTrainer`` instead (one epoch of ``n_steps`` batches; no
``--resume``); a callback runs the shell's loop inside Lightning's (metric rows,
progress, checkpoints, stops).

``--algo pomo`` trains plain RL4CO POMO with the same loop and budget (the baseline).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
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
    """Per-step metrics kept as tensors until the next log row: one host sync per row.

    A checkpointable :class:`pglab.run.state.Stateful`: a run stopped between two rows
    resumes with the steps it has already taken in the window, so its next row is the
    uninterrupted run's.
    """

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.values: dict[str, list[torch.Tensor]] = {}

    def add(self, sample: dict[str, torch.Tensor]) -> None:
        for name, value in sample.items():
            self.values.setdefault(name, []).append(value)

    def row(self) -> dict[str, torch.Tensor]:
        """The window's means; empties the window."""
        row = {name: torch.stack(values).mean() for name, values in self.values.items()}
        self.values.clear()
        return row

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Each metric's values so far, stacked ``[steps]`` on the CPU."""
        return {name: torch.stack(values).detach().cpu() for name, values in self.values.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.values = {name: list(values.to(self.device).unbind(0)) for name, values in state.items()}


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
            process, as if SIGTERM arrived (the test hook of exact resume).

    Returns:
        ``{"run_dir", "step", "interrupted", "exit_code", "last", "config"}``: ``last`` is
        the last metric row, ``config`` the run's (merged) config.
    """
    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        fit = _fit_with_lightning if run.config.trainer == "lightning" else _train_with_pglab_loop
        last = fit(run)
        run.finish({"label": run.config.label, **last})
    return {
        "run_dir": run.run_dir,
        "step": int(run.counters["step"]),
        "interrupted": run.interrupted,
        "exit_code": run.exit_code,
        "last": last,
        "config": run.config,
    }


def _track(
    run: TrainingRun,
    model: torch.nn.Module,
    optimizer: Any,
    rngs: dict[str, torch.Generator],
    window: MetricWindow,
) -> None:
    """Register the run's state with the shell (both trainers), and start the tour count.
    A checkpoint that holds no metric window (written by an earlier pglab) resumes with
    an empty one."""
    if run.checkpoint is not None:
        run.checkpoint["extra"].setdefault("window", {})
    run.track(
        models={"model": model},
        optimizers={"adam": optimizer},
        rngs=rngs,
        state={"window": window},
        info={"label": run.config.label},
    )
    run.counters.setdefault("env_steps", 0)


def _tours_per_step(config: MaxKPOMOTrainConfig) -> int:
    """Tours decoded by one training step: ``num_loc`` per instance (POMO's starts)."""
    return config.batch_size * config.num_loc


def _train_with_pglab_loop(run: TrainingRun) -> dict[str, float]:
    """``--trainer pglab``: the loop above; returns the last metric row."""
    from tensordict import TensorDict

    from pglab.run.seeding import make_generator

    config, device = run.config, run.device
    # -- build (torch's global generator was seeded by the shell: the weights) --
    data_generator = make_generator(config.seed + 1)  # instances: CPU stream, device-independent
    model = build_model(config, device)
    # Adam as RL4CO's configure_optimizers builds it (no scheduler), kept here to own its state.
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    window = MetricWindow(device)
    _track(run, model, optimizer, {"data": data_generator}, window)
    model.train()
    last: dict[str, float] = {}
    for step in run.steps(config.n_steps, desc=f"train {config.label}", unit="step"):
        # -- sample instances, decode n tours each, loss (RL4CO shared_step) --
        locs = random_locs(data_generator, config.batch_size, config.num_loc).to(device)
        batch = TensorDict({"locs": locs}, batch_size=[config.batch_size], device=device)
        out = model.training_step(batch, step)
        # -- optimise --
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        run.counters["env_steps"] += _tours_per_step(config)
        # -- log --
        window.add(step_metrics(out, config.k, grad_norm))
        if step % config.log_every == 0 or step == config.n_steps:
            last = run.log(step, window.row())
            run.set_postfix(len=f"{last['stats/tour_length']:.3f}", best=f"{last['stats/best_of_n_tour_length']:.3f}")
    return last


def _fit_with_lightning(run: TrainingRun) -> dict[str, float]:
    """``--trainer lightning``: one epoch of ``n_steps`` batches under RL4CO's ``RL4COTrainer``.

    RL4CO generates ``n_steps * batch_size`` training instances (and 2 batches of
    validation instances) in ``setup``. Lightning clips gradients at ``max_grad_norm``,
    keeps float32 matmuls (RL4CO's default "medium" precision runs them in bfloat16 on
    CPUs with AMX) and writes its own CSV log to ``run_dir/lightning``. The shell's
    bookkeeping runs inside Lightning's loop through a callback (:func:`_shell_callback`):
    the same metric rows as the pglab loop (no ``stats/grad_norm``, which Lightning keeps
    to itself), progress, checkpoints every ``save_interval`` steps and at the end, and
    stops on SIGINT/SIGTERM; ``pglab evaluate`` and ``pglab.load_checkpoint`` read the
    checkpoints like any other run's. Returns the last metric row.
    """
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
    shell = _shell_callback(run, last)
    trainer = RL4COTrainer(
        max_epochs=1,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision="32-true",
        matmul_precision=None,
        gradient_clip_val=config.max_grad_norm,
        log_every_n_steps=config.log_every,
        logger=[CSVLogger(run.run_dir, name="", version="lightning")],
        callbacks=[shell],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,  # the shell's progress bar
    )
    with contextlib.suppress(SystemExit):  # Lightning's answer to SIGTERM (SIGTERMException) and Ctrl-C (sys.exit(1))
        trainer.fit(model)
    if not shell.done and run.registry is not None:
        # Lightning left its loop while the shell's was still running (its own signal handling): save here
        run.counters["step"] = int(trainer.global_step)
        run.save(int(trainer.global_step), run.build_checkpoint())
        run.interrupted = True
    if run.interrupted:
        run.echo(
            "note: a --trainer lightning run cannot be resumed; its checkpoint evaluates like any other",
            file=sys.stderr,
        )
    return last


def _shell_callback(run: TrainingRun, last: dict[str, float]) -> Any:
    """The shell inside Lightning's loop: a ``Callback`` that registers the module and its
    optimiser when the fit starts and steps through :meth:`TrainingRun.steps` batch by
    batch (progress, checkpoints, stop requests), counting decoded tours and writing
    pglab's metric rows (the latest into ``last``). Its ``done`` says the shell's loop
    ended (the last step, or a stop it saved a checkpoint for)."""
    from lightning.pytorch.callbacks import Callback

    config = run.config

    class ShellCallback(Callback):
        def __init__(self):
            self.window = MetricWindow(run.device)
            self.steps: Iterator[int] = iter(())
            self.done = False

        def on_train_start(self, trainer, pl_module):
            _track(run, pl_module, trainer.optimizers[0], {}, self.window)
            self.steps = run.steps(config.n_steps, desc=f"train {config.label}", unit="step")
            next(self.steps)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = int(trainer.global_step)
            run.counters["env_steps"] += _tours_per_step(config)
            self.window.add(step_metrics(outputs, config.k))
            if step % config.log_every == 0 or step == config.n_steps:
                last.clear()
                last.update(run.log(step, self.window.row()))
            if next(self.steps, None) is None:  # the shell ended its loop after this step
                self.done = True
                trainer.should_stop = True

    return ShellCallback()


__all__ = ["SPEC", "train_maxk_pomo", "step_metrics", "MetricWindow", "MaxKPOMOTrainConfig"]
