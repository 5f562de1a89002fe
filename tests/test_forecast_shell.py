"""The forecast system on the shared training shell: layering, resume, logs, stops, the
agent API, the CLI vocabulary, CSV errors and the backtest figure."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pglab.cli import main as cli_main
from pglab.run.config import make_config

TINY = ["--source", "synthetic", "--horizon", "5", "--save_interval", "2"]


def train_cli(run_dir, *extra):
    return cli_main(["train", "forecast", "--log_dir", str(run_dir), *TINY, *extra])


def tiny_config(run_dir, **fields):
    from pglab.configs.forecast import ForecastTrainConfig

    return make_config(
        ForecastTrainConfig,
        **{"source": "synthetic", "horizon": 5, "save_interval": 2, "episodes": 4, "log_dir": run_dir, **fields},
    )


def latest_episode(run_dir):
    from pglab.run.checkpoint import load_checkpoint_file

    return load_checkpoint_file(run_dir / "checkpoints" / "checkpoint_latest.pt")["counters"]["episode"]


# --- layering ---------------------------------------------------------------------------------
def test_the_game_imports_no_algos():
    code = (
        "import sys, pglab.envs.forecast_game, pglab.envs.matrix_games; "
        "print([m for m in sys.modules if m.startswith('pglab.algos')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


CONFIG_MODULES = sorted(
    f"pglab.configs.{path.stem}" for path in (Path(__file__).parents[1] / "pglab" / "configs").glob("*.py")
)


@pytest.mark.parametrize("module", CONFIG_MODULES)
def test_the_configs_import_neither_envs_nor_torch(module):
    """Configs sit below the environments and trainers: no import of pglab.envs (not even
    inside a function) and none of torch, so ``--help`` stays fast."""
    import ast
    import importlib
    import inspect

    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name and (name.startswith("pglab.envs") or name == "torch")]
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('pglab.envs') or m == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_trainer_and_the_agent_loader_live_in_algos():
    import pglab.algos.forecast as algos_forecast
    import pglab.commands.forecast as commands_forecast

    assert callable(algos_forecast.train_forecast) and callable(algos_forecast.agent_from_checkpoint)
    assert "train_forecast" not in vars(commands_forecast) and "run_training" not in vars(commands_forecast)


# --- resume ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_resume_refuses_changed_game_fields_and_names_them(tmp_path, capsys):
    run = tmp_path / "run"
    assert train_cli(run, "--episodes", "4") == 0
    stored = json.loads((run / "config.json").read_text())["config"]
    capsys.readouterr()
    assert cli_main(["train", "forecast", "--resume", str(run), "--alpha", "0.5", "--n_bins", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pglab: error: alpha: ") and "(got 0.5)" in err and len(err.strip().splitlines()) == 1
    assert cli_main(["train", "forecast", "--resume", str(run), "--n_bins", "5"]) == 2
    assert "pglab: error: n_bins: " in (err := capsys.readouterr().err) and "(got 5)" in err
    assert json.loads((run / "config.json").read_text())["config"] == stored
    assert latest_episode(run) == 4


@pytest.mark.slow
def test_resume_budget_below_the_checkpoint_is_refused_and_a_larger_one_continues(tmp_path, capsys):
    run = tmp_path / "run"
    assert train_cli(run, "--episodes", "4", "--algo", "wolf") == 0
    capsys.readouterr()
    assert cli_main(["train", "forecast", "--resume", str(run), "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "episodes: the resumed run has already done episode 4; this budget ends at episode 2 (got 2)" in err
    assert cli_main(["train", "forecast", "--resume", str(run), "--episodes", "6"]) == 0
    assert latest_episode(run) == 6
    assert "pglab train forecast (wolf): 6 episodes" in capsys.readouterr().out  # the run's algo, not the default
    assert pd.read_csv(run / "metrics.csv")["episode"].tolist() == [1, 2, 3, 4, 5, 6]


# --- logs, stops, device -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_run_writes_csv_jsonl_and_tensorboard(tmp_path):
    run = tmp_path / "run"
    assert train_cli(run, "--episodes", "3") == 0
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["episode"].tolist() == [1, 2, 3]
    # the shell's speed metrics (5 rounds per episode), none of the trainer's own
    assert {"perf/step_s", "perf/env_steps_per_s"} <= set(metrics.columns)
    assert [c for c in metrics.columns if c.startswith("perf/")] == ["perf/step_s", "perf/env_steps_per_s"]
    assert (metrics["perf/env_steps_per_s"] > 0).all()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["meta"]["series"] == "synthetic(seed=0)" and records[0]["meta"]["rows"] == 240
    assert [r["episode"] for r in records if "episode" in r] == [1, 2, 3]
    from pglab.run.checkpoint import load_checkpoint_file

    checkpoint = load_checkpoint_file(run / "checkpoints" / "checkpoint_latest.pt")
    assert checkpoint["counters"]["env_steps"] == 3 * 5
    assert set(checkpoint["extra"]) == {"forecaster", "loop", "encoder", "series"}
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["n_episodes"] == 3


@pytest.mark.slow
def test_a_stop_saves_exits_130_and_resumes_to_the_same_tables(tmp_path):
    from pglab.algos.forecast import train_forecast
    from pglab.errors import EXIT_INTERRUPTED

    straight = train_forecast(tiny_config(tmp_path / "straight", algo="wolf"), echo=lambda *a, **k: None)
    stopped = train_forecast(tiny_config(tmp_path / "stopped", algo="wolf"), stop_after=3, echo=lambda *a, **k: None)
    assert straight["exit_code"] == 0
    assert stopped["interrupted"] and stopped["exit_code"] == EXIT_INTERRUPTED == 130
    assert latest_episode(tmp_path / "stopped") == 3
    assert json.loads((tmp_path / "stopped" / "summary.json").read_text())["status"] == "interrupted"
    assert not (tmp_path / "stopped" / "forecaster.json").exists()
    resumed = train_forecast(tiny_config(None, algo="wolf", resume=tmp_path / "stopped"), echo=lambda *a, **k: None)
    assert resumed["exit_code"] == 0
    tables = [json.loads((tmp_path / name / "forecaster.json").read_text()) for name in ("straight", "stopped")]
    assert tables[0]["entries"] == tables[1]["entries"] and tables[0]["rng"] == tables[1]["rng"]


@pytest.mark.slow
def test_device_flag_is_accepted_and_checked(tmp_path, capsys):
    assert train_cli(tmp_path / "cpu", "--episodes", "1", "--device", "cpu") == 0
    assert json.loads((tmp_path / "cpu" / "config.json").read_text())["config"]["device"] == "cpu"
    capsys.readouterr()
    assert train_cli(tmp_path / "tpu", "--episodes", "1", "--device", "tpu") == 2
    assert "device: " in (err := capsys.readouterr().err) and "(got 'tpu')" in err
    if not torch.cuda.is_available():
        assert train_cli(tmp_path / "cuda", "--episodes", "1", "--device", "cuda") == 2
        assert not (tmp_path / "cuda").exists()  # a failed start leaves nothing behind


# --- CSV sources -------------------------------------------------------------------------------
def test_a_csv_without_a_date_column_is_a_one_line_data_error(tmp_path, capsys):
    from pglab.data import load_series
    from pglab.errors import DataError

    path = tmp_path / "values.csv"
    rows = "\n".join(f"{5 + 0.1 * np.sin(t):.3f},{np.cos(t):.3f}" for t in range(120))
    path.write_text("UNRATE,GDPGROWTH\n" + rows + "\n")
    with pytest.raises(DataError, match="no date column") as caught:
        load_series(f"csv:{path}")
    assert str(path) in str(caught.value) and "'UNRATE'" in str(caught.value)
    assert cli_main(["backtest", "--source", f"csv:{path}", "--output", str(tmp_path / "bt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "no date column" in err
    dated = tmp_path / "dated.csv"
    dated.write_text("observation_date,UNRATE\n2020-01-01,3.5\n2020-02-01,3.6\n2020-03-01,4.4\n2020-04-01,14.7\n")
    assert len(load_series(f"csv:{dated}")) == 3  # the first row has no previous change


def test_a_directory_as_csv_source_says_it_is_a_directory(tmp_path):
    from pglab.data import load_series
    from pglab.errors import DataError

    with pytest.raises(DataError, match="is a directory") as caught:
        load_series(f"csv:{tmp_path}")
    assert str(tmp_path) in str(caught.value) and "no such file" not in str(caught.value)


# --- the backtest figure -----------------------------------------------------------------------
def test_every_backtest_panel_has_a_y_label():
    import matplotlib.pyplot as plt

    from pglab.algos.forecast import BASELINES, backtest_figure, target_label
    from pglab.data import ForecastSeries

    predictions = pd.DataFrame(
        {
            "date": [f"t{i}" for i in range(6)],
            "actual": np.linspace(4, 5, 6),
            **{name: np.linspace(4, 5, 6) + 0.1 for name in ("learned",) + BASELINES},
        }
    )
    windows = pd.DataFrame({"window": [0, 1], **{f"mae_{name}": [0.1, 0.2] for name in ("learned",) + BASELINES}})
    series = ForecastSeries(np.ones(3), np.zeros(3), ("a", "b", "c"), "macrodata:unemp~realgdp_growth (1 rows dropped)")
    fig = backtest_figure(predictions, windows, title="test", target_label=target_label(series))
    try:
        labels = [ax.get_ylabel() for ax in fig.axes]
        assert len(labels) == 2 and all(labels)
        assert "unemp" in labels[0]
        np.testing.assert_array_equal(fig.axes[0].lines[0].get_ydata(), predictions["actual"])
    finally:
        plt.close(fig)


# --- the agent API -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["q", "wolf"])
def test_a_forecast_checkpoint_loads_as_an_agent_with_a_value(tmp_path, algo):
    import pglab
    from pglab.agent import Agent
    from pglab.algos.forecast import ForecastAgent, train_forecast
    from pglab.data import load_series
    from pglab.envs.forecast_game import state_at

    run = tmp_path / "run"
    train_forecast(tiny_config(run, algo=algo, episodes=6), echo=lambda *a, **k: None)
    agent = pglab.load_checkpoint(run, device="auto")
    assert isinstance(agent, Agent) and isinstance(agent, ForecastAgent)
    assert agent.kind == f"forecast-{algo}" and agent.config.algo == algo
    table = agent.policy
    keys = torch.tensor(table.state_keys, dtype=torch.int64)
    if algo == "q":  # max_a Q(s, a): the state's value under the greedy policy
        expected = [table.q_values(k).max() for k in table.state_keys]
    else:  # sum_a pi(s, a) Q(s, a): the expected Q under the mixed policy
        expected = [table.policy(k) @ table.q_values(k) for k in table.state_keys]
    values = agent.value(keys)
    assert values.shape == (len(table.state_keys),) and values.dtype == torch.float64
    np.testing.assert_array_equal(values.numpy(), expected)
    # every key the state key can give has a value: 0 (the table's initial value) for one never met
    by_key = dict(zip(table.state_keys, expected, strict=True))
    every_key = agent.value(torch.arange(agent.key_count)).tolist()
    assert every_key == [by_key.get(key, 0.0) for key in range(agent.key_count)]

    series = load_series("synthetic", seed=0)
    states = [state_at(series, t) for t in range(1, 40)]
    obs = np.stack([agent.observation(s) for s in states])
    # Greedy ties are broken by the table's own RNG (as in training): give each path the same RNG state.
    same = [copy.deepcopy(agent) for _ in range(4)]
    actions = same[0].act(torch.as_tensor(obs), deterministic=True)
    assert actions.dtype == torch.int64 and actions.shape == (len(states),)
    assert actions.tolist() == same[1].act(torch.tensor([agent.encoder(s) for s in states])).tolist()
    assert same[2].predict(obs).tolist() == actions.tolist()
    deltas = table.action_space.deltas[actions.numpy()]
    np.testing.assert_allclose(
        [same[3].forecast(s) for s in states], [s.value for s in states] + deltas, rtol=0, atol=1e-12
    )
    assert (
        agent.value(torch.as_tensor(obs)).tolist()
        == agent.value(torch.tensor([agent.encoder(s) for s in states])).tolist()
    )


@pytest.mark.slow
def test_a_rarl_checkpoint_holds_both_tables_and_a_damaged_one_is_a_checkpoint_error(tmp_path):
    from pglab.algos.forecast import agent_from_checkpoint, train_forecast
    from pglab.algos.tabular.serialization import agent_to_dict, load_q_table
    from pglab.errors import CheckpointError
    from pglab.run.checkpoint import load_checkpoint_file

    run = tmp_path / "run"
    train_forecast(tiny_config(run, algo="rarl", episodes=4, alternation_schedule=2), echo=lambda *a, **k: None)
    checkpoint = load_checkpoint_file(run)
    agent = agent_from_checkpoint(checkpoint)
    for table, path in ((agent.policy, "forecaster.json"), (agent.adversary, "forecaster.adversary.json")):
        assert table is not None and table.n_states > 0
        assert agent_to_dict(table) == agent_to_dict(load_q_table(run / path))
    for damage in ({"adversary": None}, {"encoder": {"kind": "cubic"}}):
        damaged = {**checkpoint, "extra": {**checkpoint["extra"], **damage}}
        with pytest.raises(CheckpointError, match="forecast agents missing or unreadable"):
            agent_from_checkpoint(damaged)
    without = {**checkpoint, "extra": {k: v for k, v in checkpoint["extra"].items() if k != "forecaster"}}
    with pytest.raises(CheckpointError, match="'forecaster'"):
        agent_from_checkpoint(without)


# --- the CLI vocabulary ------------------------------------------------------------------------
def test_shared_flag_names_and_deprecated_spellings(capsys):
    from pglab.configs.forecast import BacktestConfig, ForecastTrainConfig
    from pglab.run.config import config_from_dict, parse_flags

    parsed = parse_flags(
        ForecastTrainConfig,
        [
            "--algorithm",
            "wolf",
            "--checkpoint_every",
            "5",
            "--threads",
            "1",
            "--seed",
            "3",
            "--log-dir",
            "runs/x",
            "--device",
            "cpu",
        ],
        prog="pglab train forecast",
    )
    config = parsed.config
    assert (config.algo, config.save_interval, config.threads, config.seed, config.device) == ("wolf", 5, 1, 3, "cpu")
    assert {"algo", "save_interval", "threads", "seed", "log_dir", "device"} <= parsed.given
    notes = capsys.readouterr().err
    assert "--algorithm is deprecated" in notes and "--checkpoint-every is deprecated" in notes
    backtest = parse_flags(BacktestConfig, ["--output_dir", "out", "--algorithm", "q"], prog="pglab backtest").config
    assert str(backtest.output) == "out" and backtest.algo == "q"
    # stored configs spelling the deprecated names load too
    stored = config_from_dict(ForecastTrainConfig, {"algorithm": "rarl", "checkpoint_every": 7})
    assert (stored.algo, stored.save_interval) == ("rarl", 7)


@pytest.mark.parametrize(
    "argv, flags",
    [
        (
            ["train", "forecast", "--help"],
            ["--algo", "--save-interval", "--device", "--threads", "--seed", "--log-dir"],
        ),
        (["backtest", "--help"], ["--algo", "--output", "--device", "--seed"]),
    ],
)
def test_help_lists_the_shared_flags_without_importing_torch(argv, flags):
    code = (
        "import sys\nfrom pglab.cli import main\ncode = main(sys.argv[1:])\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "COLUMNS": "200"},
    ).stdout
    assert out.strip().splitlines()[-1] == "NO-TORCH 0"
    for flag in flags:
        assert f"{flag} " in out, flag
