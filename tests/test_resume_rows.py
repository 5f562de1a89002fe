"""A run stopped at any step and resumed writes the uninterrupted run's metric rows.

For every trainer: one uninterrupted run, and one run of the same config stopped twice,
neither time on a log or evaluation boundary, and resumed twice:

- after ``STOPS[0]`` steps by the ``stop_after`` test hook (the stop is noticed after the
  step, as a signal that arrives between two steps);
- during step ``STOPS[1]`` by a real SIGTERM (raised as the shell hands out that step, so
  the trainer sees ``run.stop_requested`` inside it, as a signal that arrives mid-step).

Checkpoints come only at the stops (``save_interval`` beyond the budget), so whatever a
row is built from (a window of per-step metrics, episode sums, counters) must travel in
the stop's checkpoint, and no row may be written because of the stop.

Every row file of the run (``metrics.csv``, ``metrics.jsonl`` and, where the trainer has
one, ``eval.csv`` / ``eval.jsonl``) must then hold the same rows, in the same order, with
the same columns, except the wall-clock columns (:func:`wall_clock`), which measure the
machine, not the training.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pglab.errors import EXIT_INTERRUPTED
from pglab.run.config import make_config
from pglab.run.shell import TrainingRun

TOTAL = 8  # steps of every run
LOG_EVERY = 3  # rows at 3, 6 and 8 (the last step)
EVAL_EVERY = 4  # evaluation rows at 4 and 8, where the trainer evaluates during training
STOPS = (2, 5)  # on neither boundary
ROW_FILES = ("metrics.csv", "metrics.jsonl", "eval.csv", "eval.jsonl")


def wall_clock(column: str) -> bool:
    """The wall-clock columns: the shell's ``perf/*`` rates (``perf/step_s``,
    ``perf/env_steps_per_s``: seconds per step and steps per second of the interval, in
    every trainer's ``metrics.*``) and ``wall_time`` (seconds spent in steps when a GHM
    quick check ran, in its ``eval.*``). They time the machine: two runs of one config
    never agree on them. Every other column of every row file is compared."""
    return column.startswith("perf/") or column == "wall_time"


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One trainer: ``train(config, stop_after=..., echo=...)`` and its config from flat fields."""

    train: Callable[..., Any]
    config_class: type
    fields: dict[str, Any]
    step_key: str
    setup: Callable[[pytest.MonkeyPatch], None] | None = None

    def config(self, **fields: Any) -> Any:
        return make_config(self.config_class, **{**self.fields, **fields})


def ghm_case(algo: str) -> Case:
    from pglab.algos.ghm_train import train_ghm
    from pglab.configs.ghm import GHMTrainConfig

    fields = dict(
        algo=algo,
        n_iterations=TOTAL,
        n_trajectories=32,
        T=0.3,
        dt=0.01,
        log_interval=LOG_EVERY,
        eval_interval=EVAL_EVERY,
        eval_quick_paths=0,
        plots=False,
        final_eval=False,
        fd_nodes=200,
        lr_final_fraction=0.2,  # schedules that move every iteration
        device="cpu",
        seed=3,
    )
    return Case(train_ghm, GHMTrainConfig, fields, "iteration")


def a2c_case() -> Case:
    from pglab.algos.a2c import train_a2c
    from pglab.configs.a2c import A2CTrainConfig

    fields = dict(
        algo="a2c",
        num_envs=4,
        update_every=2,
        total_env_steps=4 * 2 * TOTAL,
        grid_size=4,
        max_steps=5,
        hidden=16,
        device="cpu",
        threads=1,
    )
    return Case(train_a2c, A2CTrainConfig, fields, "opt_steps")


def stream_ac_case() -> Case:
    from pglab.algos import stream_ac
    from pglab.configs.a2c import A2CTrainConfig

    def rows_every_three(monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(stream_ac, "LOG_EVERY", LOG_EVERY)

    fields = dict(
        algo="stream-ac",
        num_envs=1,
        total_env_steps=TOTAL,
        lr=1.0,
        grid_size=4,
        max_steps=2,  # episodes end inside the windows
        hidden=16,
        device="cpu",
        threads=1,
    )
    return Case(stream_ac.train_stream_ac, A2CTrainConfig, fields, "opt_steps", setup=rows_every_three)


def ppo_case() -> Case:
    from pglab.algos.ppo import train_ppo
    from pglab.configs.ppo import PPOConfig

    fields = dict(
        env="gym:CartPole-v1",
        num_envs=2,
        num_steps=16,
        total_steps=2 * 16 * TOTAL,
        num_minibatches=2,
        ppo_epochs=1,
        hidden_dims=(8,),
        log_interval=LOG_EVERY,
        eval_episodes=0,
        device="cpu",
    )
    return Case(train_ppo, PPOConfig, fields, "iteration")


def pso_tsp_case() -> Case:
    from pglab.algos.pso_tsp import train_pso_tsp
    from pglab.configs.pso_tsp import PSOTSPTrainConfig

    fields = dict(
        controller="edge_policy",
        algo="vpg_gae",
        n_iterations=TOTAL,
        num_cities=6,
        knn=3,
        n_particles=3,
        pso_iterations=2,
        emb_dim=8,
        num_heads=2,
        node_layers=1,
        instances_per_iteration=2,
        eval_instances=2,
        log_interval=LOG_EVERY,
        eval_interval=EVAL_EVERY,
        device="cpu",
    )
    return Case(train_pso_tsp, PSOTSPTrainConfig, fields, "iteration")


def maxk_pomo_case() -> Case:
    pytest.importorskip("rl4co")
    from pglab.algos.maxk_train import train_maxk_pomo
    from pglab.configs.maxk import MaxKPOMOTrainConfig

    fields = dict(
        n_steps=TOTAL,
        num_loc=5,
        k=3,
        batch_size=2,
        embed_dim=16,
        num_encoder_layers=1,
        num_heads=2,
        log_every=LOG_EVERY,
        device="cpu",
    )
    return Case(train_maxk_pomo, MaxKPOMOTrainConfig, fields, "step")


def forecast_case() -> Case:
    from pglab.algos.forecast import train_forecast
    from pglab.configs.forecast import ForecastTrainConfig

    # a row every episode (the trainer has no log interval)
    fields = dict(algo="rarl", source="synthetic", horizon=5, episodes=TOTAL, alternation_schedule=3, device="cpu")
    return Case(train_forecast, ForecastTrainConfig, fields, "episode", setup=no_learning_curves)


def no_learning_curves(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished run's learning-curve figure (seconds, and no rows) is not drawn."""
    from pglab.algos import forecast

    monkeypatch.setattr(forecast, "plot_training", lambda run_dir: None)


CASES: dict[str, Callable[[], Case]] = {
    "ghm-mc": lambda: ghm_case("mc"),
    "ghm-pathwise": lambda: ghm_case("pathwise"),
    "a2c": a2c_case,
    "stream-ac": stream_ac_case,
    "ppo": ppo_case,
    "pso-tsp": pso_tsp_case,
    "maxk-pomo": maxk_pomo_case,
    "forecast": forecast_case,
}


def sigterm_during(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """SIGTERM arrives while the shell's loop runs ``step`` (the run is told inside it)."""
    steps = TrainingRun.steps

    def steps_with_a_signal(run: TrainingRun, total: int, **kwargs: Any):
        for number in steps(run, total, **kwargs):
            if number == step:
                # the shell's handler, not the default one that would end the test process
                assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
                signal.raise_signal(signal.SIGTERM)
            yield number

    monkeypatch.setattr(TrainingRun, "steps", steps_with_a_signal)


def row_files(run_dir: Path) -> dict[str, Any]:
    """Each row file's header and rows (JSONL: its records but the meta line), without the
    wall-clock columns."""
    files: dict[str, Any] = {}
    for name in ROW_FILES:
        path = run_dir / name
        if not path.exists():
            continue
        if name.endswith(".csv"):
            with open(path, newline="") as handle:
                reader = csv.DictReader(handle)
                rows = [{k: v for k, v in row.items() if not wall_clock(k)} for row in reader]
                files[name] = ([k for k in reader.fieldnames or () if not wall_clock(k)], rows)
        else:
            records = [json.loads(line) for line in path.read_text().splitlines()]
            files[name] = [{k: v for k, v in r.items() if not wall_clock(k)} for r in records if "meta" not in r]
    return files


def counters(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())["counters"]


@pytest.mark.parametrize("name", list(CASES))
def test_a_stopped_and_resumed_run_writes_the_uninterrupted_rows(name, tmp_path, monkeypatch):
    case = CASES[name]()
    if case.setup is not None:
        case.setup(monkeypatch)
    never = dict(save_interval=10 * TOTAL)  # checkpoints only at the stops and at the end
    full = tmp_path / "full"
    case.train(case.config(log_dir=full, **never), echo=quiet)
    split = tmp_path / "split"
    first = case.train(case.config(log_dir=split, **never), stop_after=STOPS[0], echo=quiet)
    assert counters(split)[case.step_key] == STOPS[0]
    with monkeypatch.context() as signalled:
        sigterm_during(signalled, STOPS[1])
        second = case.train(case.config(resume=split, **never), echo=quiet)
    assert counters(split)[case.step_key] == STOPS[1]
    case.train(case.config(resume=split, **never), echo=quiet)
    assert counters(split)[case.step_key] == TOTAL
    for result in (first, second):
        code = result["exit_code"] if isinstance(result, dict) else result.exit_code
        assert code == EXIT_INTERRUPTED
    expected, got = row_files(full), row_files(split)
    assert "metrics.csv" in expected and "metrics.jsonl" in expected
    steps = [int(row[case.step_key]) for row in expected["metrics.csv"][1]]
    assert not set(STOPS) & set(steps) or steps == list(range(1, TOTAL + 1)), steps  # no row at a stop
    assert got.keys() == expected.keys()
    for file in expected:
        assert got[file] == expected[file], file


def test_a_maxk_pomo_checkpoint_without_a_metric_window_resumes_with_an_empty_one(tmp_path):
    """A checkpoint whose ``extra`` holds no ``window`` (one written at a row, by a pglab
    that did not store the window) still resumes, and the rows continue."""
    from pglab.run.checkpoint import load_checkpoint_file, save_checkpoint

    case = maxk_pomo_case()
    run_dir = tmp_path / "run"
    case.train(case.config(log_dir=run_dir, n_steps=4, log_every=2, save_interval=40), stop_after=2, echo=quiet)
    path = (run_dir / "checkpoints" / "checkpoint_latest.pt").resolve()
    checkpoint = load_checkpoint_file(path)
    assert checkpoint["extra"].pop("window") == {}  # the window is empty at a row
    checkpoint.pop("path")
    save_checkpoint(path, checkpoint)
    result = case.train(case.config(resume=run_dir, n_steps=4, log_every=2, save_interval=40), echo=quiet)
    assert result["exit_code"] == 0
    assert [row["step"] for row in row_files(run_dir)["metrics.csv"][1]] == ["2", "4"]
