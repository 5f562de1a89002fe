"""``pglab train forecast``, ``pglab evaluate forecast`` and ``pglab backtest`` end to end."""

import json
import signal

import numpy as np
import pandas as pd
import pytest

from pglab.algos.forecast import baseline_forecasts, window_bounds
from pglab.cli import main as cli_main

SMALL = ["--horizon", "10", "--save_interval", "3", "--source", "synthetic"]


def train(tmp_path, name, *extra):
    code = cli_main(["train", "forecast", "--log_dir", str(tmp_path / name), *SMALL, *extra])
    return code, tmp_path / name


def learned_state(run_dir):
    """The parts of a run that must match bit for bit (not timings or paths)."""
    tables = {}
    for path in sorted(run_dir.glob("forecaster*.json")):
        payload = json.loads(path.read_text())
        tables[path.name] = {k: payload[k] for k in ("entries", "epsilon", "rng", "n_updates")}
    metrics = pd.read_csv(run_dir / "metrics.csv")
    return tables, metrics[[c for c in metrics.columns if not c.startswith("perf/")]]


def assert_same_run(a, b):
    tables_a, metrics_a = learned_state(a)
    tables_b, metrics_b = learned_state(b)
    assert tables_a == tables_b
    pd.testing.assert_frame_equal(metrics_a, metrics_b)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["q", "rarl"])
def test_n_plus_resume_plus_n_equals_2n(tmp_path, algorithm):
    assert train(tmp_path, "straight", "--episodes", "12", "--algo", algorithm)[0] == 0
    code, halves = train(tmp_path, "halves", "--episodes", "6", "--algo", algorithm)
    assert code == 0
    assert cli_main(["train", "forecast", "--resume", str(halves), "--episodes", "12"]) == 0
    assert_same_run(tmp_path / "straight", halves)
    if algorithm == "rarl":
        assert (halves / "forecaster.adversary.json").exists()
    summary = json.loads((halves / "summary.json").read_text())
    assert summary["total_epochs" if algorithm == "rarl" else "n_episodes"] == 12


@pytest.mark.slow
def test_sigint_writes_a_final_checkpoint_and_resume_finishes_identically(tmp_path, monkeypatch):
    import pglab.run.progress as progress

    real_bar = progress.progress_bar

    class InterruptingBar:
        def __init__(self, *args, **kwargs):
            self.bar, self.count = real_bar(*args, **kwargs), 0

        def update(self, n):
            self.count += n
            if self.count == 4:
                signal.raise_signal(signal.SIGINT)  # as if the user pressed Ctrl-C mid-run

        def set_postfix(self, **kwargs):
            pass

        def close(self):
            self.bar.close()

    assert train(tmp_path, "straight", "--episodes", "8", "--algo", "wolf")[0] == 0
    monkeypatch.setattr(progress, "progress_bar", InterruptingBar)
    code, run_dir = train(tmp_path, "interrupted", "--episodes", "8", "--algo", "wolf")
    assert code == 130
    latest = run_dir / "checkpoints" / "checkpoint_latest.pt"
    from pglab.run.checkpoint import load_checkpoint_file

    assert load_checkpoint_file(latest, kinds=["forecast-wolf"])["counters"]["episode"] == 4
    monkeypatch.setattr(progress, "progress_bar", real_bar)
    assert cli_main(["train", "forecast", "--resume", str(run_dir)]) == 0
    assert_same_run(tmp_path / "straight", run_dir)


@pytest.mark.slow
def test_backtest_reports_against_baselines_computed_independently(tmp_path):
    out = tmp_path / "bt"
    code = cli_main(
        [
            "backtest",
            "--source",
            "synthetic",
            "--window_size",
            "40",
            "--step_size",
            "5",
            "--windows",
            "3",
            "--episodes",
            "5",
            "--horizon",
            "20",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    predictions = pd.read_csv(out / "predictions.csv")
    windows = pd.read_csv(out / "windows.csv")
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert len(windows) == 3 and len(predictions) == 15 and (out / "backtest.png").exists()
    from pglab.data import load_series

    series = load_series("synthetic", seed=0)
    # Out-of-sample rows: 41..55, each forecast from the row before it.
    np.testing.assert_array_equal(predictions["actual"], series.target[41:56])
    np.testing.assert_array_equal(predictions["random_walk"], series.target[40:55])
    rw_mae = np.mean(np.abs(series.target[41:56] - series.target[40:55]))
    assert summary["methods"]["random_walk"]["mae"] == pytest.approx(rw_mae)
    learned_mae = np.mean(np.abs(predictions["actual"] - predictions["learned"]))
    assert summary["methods"]["learned"]["mae"] == pytest.approx(learned_mae)


def test_ar_baselines_equal_least_squares_fits():
    """statsmodels' AutoReg (conditional MLE) equals OLS of y_t on (1, y_{t-1})."""
    rng = np.random.default_rng(0)
    y = np.cumsum(rng.normal(size=60)) * 0.3 + 5
    x = rng.normal(size=60)
    forecasts = baseline_forecasts(y[:50], x[:50], y[48:], x[48:])
    prev, prev2 = y[49:59], y[48:58]
    coef = np.linalg.lstsq(np.column_stack([np.ones(49), y[:49]]), y[1:50], rcond=None)[0]
    np.testing.assert_allclose(forecasts["ar1"], coef[0] + coef[1] * prev, rtol=1e-10)
    d = np.diff(y[:50])
    coef_d = np.linalg.lstsq(np.column_stack([np.ones(48), d[:-1]]), d[1:], rcond=None)[0]
    np.testing.assert_allclose(forecasts["ar1_diff"], prev + coef_d[0] + coef_d[1] * (prev - prev2), rtol=1e-10)
    coef_x = np.linalg.lstsq(np.column_stack([np.ones(48), d[:-1], x[1:49]]), d[1:], rcond=None)[0]
    np.testing.assert_allclose(
        forecasts["arx_diff"], prev + coef_x[0] + coef_x[1] * (prev - prev2) + coef_x[2] * x[49:59], rtol=1e-10
    )
    np.testing.assert_array_equal(forecasts["random_walk"], prev)


def test_window_bounds_enumeration():
    assert window_bounds(12, 5, 3, None) == [(1, 6, 9), (4, 9, 12), (7, 12, 12)][:2]
    assert window_bounds(13, 5, 3, None) == [(1, 6, 9), (4, 9, 12), (7, 12, 13)]
    assert window_bounds(13, 5, 3, 1) == [(1, 6, 9)]


@pytest.mark.slow
def test_evaluate_against_an_adversary_is_like_for_like(tmp_path):
    code, run_dir = train(
        tmp_path, "rarl", "--episodes", "8", "--algo", "rarl", "--train_rows", "150", "--alternation_schedule", "2"
    )
    assert code == 0
    out = tmp_path / "eval.json"
    assert (
        cli_main(
            [
                "evaluate",
                "forecast",
                "--model",
                str(run_dir / "forecaster.json"),
                "--adversary",
                str(run_dir / "forecaster.adversary.json"),
                "--source",
                "synthetic",
                "--start_row",
                "150",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    from pglab.algos.tabular.serialization import load_q_table_with_metadata
    from pglab.data import load_series
    from pglab.envs.forecast_game import encoder_from_dict, state_at

    series = load_series("synthetic", seed=0)
    adversary, meta = load_q_table_with_metadata(run_dir / "forecaster.adversary.json")
    encoder = encoder_from_dict(meta["state_encoder"])
    realised = [
        series.target[t]
        + adversary.action_space.action_to_delta(adversary.act(encoder(state_at(series, t - 1)), explore=False))
        for t in range(150, len(series))
    ]
    expected = np.mean(np.abs(np.asarray(realised) - series.target[149:-1]))
    assert result["attacked"]["mae_random_walk"] == pytest.approx(expected)
    assert result["clean"]["mae_random_walk"] == pytest.approx(np.mean(np.abs(np.diff(series.target[149:]))))
    assert result["attacked"]["mae_random_walk"] != result["clean"]["mae_random_walk"]  # the adversary did act


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "forecast", "--algo", "sarsa"], "(got 'sarsa')"),
        (["train", "forecast", "--source", "csv:{empty}"], "empty"),
        (["backtest", "--source", "csv:{text}"], "not a number"),
        (["backtest", "--source", "synthetic", "--window_size", "400"], "(got 400)"),
        (["backtest", "--window_size", "30"], "horizon: must be <= window_size - 2 = 28"),
        (["train", "forecast", "--source", "yahoo"], "(got 'yahoo')"),
        (["evaluate", "forecast", "--model", "{bad_table}"], "not valid JSON"),
        (["train", "forecast", "--resume", "{tmp}"], "no config.json"),
        (["train", "forecast", "--episodes", "0"], "episodes: must be >= 1 (got 0)"),
    ],
)
def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, capsys, argv, message):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "text.csv").write_text("DATE,UNRATE\n2020-01-01,3.5\n2020-02-01,high\n")
    (tmp_path / "bad.json").write_text('{"format": "pglab-qtable", ')
    paths = {
        "empty": tmp_path / "empty.csv",
        "text": tmp_path / "text.csv",
        "bad_table": tmp_path / "bad.json",
        "tmp": tmp_path,
    }
    argv = [a.format(**paths) for a in argv]
    if argv[0] == "train" and "--resume" not in argv:
        argv += ["--log_dir", str(tmp_path / "run")]
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err + captured.out


@pytest.mark.slow
def test_checkpoint_evaluates_out_of_sample_and_loads_as_an_agent(tmp_path, capsys, monkeypatch):
    code, run_dir = train(tmp_path, "run", "--episodes", "4", "--train_rows", "200")
    assert code == 0
    capsys.readouterr()
    from pglab.commands.forecast import evaluate_checkpoint

    out = tmp_path / "eval.json"
    assert evaluate_checkpoint([str(run_dir), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["rows"] == [200, 240] and result["clean"]["n"] == 40
    from pglab.algos.forecast import agent_from_checkpoint
    from pglab.data import load_series
    from pglab.envs.forecast_game import state_at
    from pglab.run.checkpoint import load_checkpoint_file

    loaded = agent_from_checkpoint(load_checkpoint_file(run_dir))
    series = load_series("synthetic", seed=0)
    forecasts = np.array([loaded.forecast(state_at(series, t - 1)) for t in range(200, 240)])
    assert result["clean"]["mae"] == pytest.approx(np.mean(np.abs(series.target[200:240] - forecasts)))
