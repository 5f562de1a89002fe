"""SIGTERM at a random moment, per trainer: the process exits 130 within seconds, prints no
traceback, and leaves either nothing or a run that ``--resume`` finishes exactly as an
uninterrupted run would (the same weights, every metric row once).

The moment is drawn afresh on every run (printed on failure, and fixed with
``PGLAB_SIGNAL_DELAY=SECONDS``): from start-up, through the training loop and its
checkpoints, to after the last one; each draw must satisfy the same property."""

from __future__ import annotations

import contextlib
import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pglab.cli import import_torch, main
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.signals import STOP, Stopped

EXIT_WITHIN_S = 8.0  # inside the 10 s grace period a container runtime gives before SIGKILL, even beside other tests

TRAINERS = {
    "ghm": "ghm --n_iterations 12 --n_trajectories 32 --T 0.5 --dt 0.05 --log_interval 3 --eval_interval 1000 "
    "--save_interval 4 --eval_quick_paths 0 --fd_nodes 400 --eval_paths 16 --eval_tail_tolerance 0.5 --eval_dt 0.05 "
    "--no-plots --device cpu",
    "a2c": "a2c --num-envs 4 --update-every 1 --pixel-goal.grid-size 4 --hidden 16 --total-env-steps 96 "
    "--save-interval 20 --device cpu",
    "ppo": "ppo --num-envs 2 --num-steps 32 --num-minibatches 2 --ppo-epochs 2 --hidden-dims 16 --no-tensorboard "
    "--total-steps 640 --save-interval 3 --eval-episodes 2",
    "pso-tsp": "pso-tsp --num_cities 8 --knn 4 --n_particles 4 --pso_iterations 3 --emb_dim 8 --num_heads 2 "
    "--node_layers 1 --instances_per_iteration 2 --eval_instances 4 --eval_interval 5 --n_iterations 12 "
    "--save_interval 4 --device cpu",
    "maxk-pomo": "maxk-pomo --num-loc 6 --k 3 --batch-size 4 --embed-dim 16 --num-encoder-layers 1 --num-heads 2 "
    "--device cpu --log-every 2 --save-interval 3 --n-steps 12",
    "forecast": "forecast --source synthetic --horizon 5 --episodes 30 --save_interval 7",
}


def _steps_logged(run_dir: Path) -> list[str]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    return [row[0] for row in rows[1:]]


def _models(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = load_checkpoint_file(run_dir / "checkpoints" / "checkpoint_latest.pt")
    return {f"{name}.{key}": t for name, state in checkpoint["models"].items() for key, t in state.items()}


def _stop_at_random(argv: list[str], run_dir: Path, delay: float) -> tuple[int, float, str]:
    """Run ``pglab train`` in a process and send it SIGTERM after ``delay`` seconds;
    returns its exit code, the seconds from the signal to its exit, and its stderr."""
    env = {**os.environ, "PGLAB_NO_PROGRESS": "1"}
    command = [sys.executable, "-m", "pglab", "train", *argv, "--log-dir", str(run_dir)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=delay)
    sent = time.monotonic()
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    return process.returncode, time.monotonic() - sent, err


@pytest.mark.slow
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_sigterm_at_a_random_moment_ends_cleanly_and_resumes_exactly(trainer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PGLAB_NO_PROGRESS", "1")
    argv = [*TRAINERS[trainer].split(), "--threads", "1"]  # as in this process: bit-identical sums
    began = time.monotonic()
    assert main(["train", *argv, "--log-dir", "whole"]) == 0
    in_process = time.monotonic() - began
    # start-up in a fresh process (imports) plus the run itself, and a little after it; from
    # 0.25 s on, once the interpreter runs pglab's code: a signal before that takes the OS
    # default action (exit -15), which no program can change
    delay = float(os.environ.get("PGLAB_SIGNAL_DELAY") or random.uniform(0.25, 3.0 + 1.3 * in_process))
    code, latency, err = _stop_at_random(argv, tmp_path / "cut", delay)
    context = f"SIGTERM after {delay:.2f} s (PGLAB_SIGNAL_DELAY={delay:.2f} repeats it): exit {code}\n{err}"
    assert "Traceback" not in err, context
    assert code in (0, 130), context
    if code == 130:
        assert latency < EXIT_WITHIN_S, f"exit took {latency:.2f} s; {context}"
        assert err.splitlines()[-1].startswith(("pglab: stopped by SIGTERM", "stopped: checkpoint saved")), context
    if not (tmp_path / "cut").exists():
        assert code == 130, context
        return
    assert main(["train", argv[0], "--resume", "cut"]) == 0, context
    assert _steps_logged(tmp_path / "cut") == _steps_logged(tmp_path / "whole"), context
    whole, cut = _models(tmp_path / "whole"), _models(tmp_path / "cut")
    assert whole.keys() == cut.keys()
    assert all(torch.equal(whole[name], cut[name]) for name in whole), context


@pytest.mark.slow
def test_a_live_run_directory_has_one_owner(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    flags = TRAINERS["forecast"].replace("--episodes 30", "--episodes 100000").split()
    env = {**os.environ, "PGLAB_NO_PROGRESS": "1"}
    owner = subprocess.Popen(
        [sys.executable, "-m", "pglab", "train", *flags, "--log-dir", "run"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt").exists():
            assert owner.poll() is None and time.monotonic() < deadline, owner.stderr.read() if owner.stderr else ""
            time.sleep(0.05)
        resume = ["train", "forecast", "--resume", "run", "--episodes", "1"]
        for argv in (["train", *flags, "--log-dir", "run"], resume):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith("pglab: error: log_dir") and "\n" not in err, err
            assert f"in use by process {owner.pid}" in err or "already holds a run" in err, err
        assert f"in use by process {owner.pid}" in err  # the resume, named by its owner
    finally:
        owner.send_signal(signal.SIGTERM)
        _, owner_err = owner.communicate(timeout=60)
    assert owner.returncode == 130, owner_err
    steps = [int(step) for step in _steps_logged(tmp_path / "run")]
    assert steps == sorted(set(steps)) and steps  # every row once, in order: nobody else wrote


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_raised_where_python_ignores_exceptions_prints_nothing_and_stays_recorded(capsys):
    """A signal whose handler runs inside a ``__del__`` or a weakref callback (the import
    system's module locks: seen at a random moment) raises where Python only prints the
    exception: no traceback, and the signal stays recorded for the end of the step."""
    import gc

    from pglab.run.signals import STOP

    class Dying:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100_000):  # the handler runs here, between two instructions
                pass

    installed = STOP.install()
    try:
        Dying()
        gc.collect()
        assert STOP.signal == signal.SIGTERM
        assert "Traceback" not in capsys.readouterr().err
    finally:
        STOP.clear()
        if installed:
            STOP.uninstall()


def test_a_stop_during_the_torch_import_is_raised_once_the_import_is_done(monkeypatch):
    """SIGTERM arriving while torch is imported (Python code inside torch's C++ extension,
    which a raised stop would abort) is held until the import returns, then raised."""
    import builtins

    real_import, finished = builtins.__import__, []

    def importing(name, *args, **kwargs):
        if name == "torch":
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: mid-import
            module = real_import(name, *args, **kwargs)
            finished.append(name)
            return module
        return real_import(name, *args, **kwargs)

    installed = STOP.install()
    STOP.clear()
    monkeypatch.setattr(builtins, "__import__", importing)
    try:
        with pytest.raises(Stopped):
            import_torch()
    finally:
        monkeypatch.undo()
        STOP.clear()
        if installed:
            STOP.uninstall()
    assert finished == ["torch"]
