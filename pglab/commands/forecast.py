"""``pglab train forecast``, ``pglab evaluate forecast`` and ``pglab backtest``.

* ``train``: Q-learning, WoLF-PHC or robust adversarial (RARL) training on a data source;
  run directory with config.json, metrics.csv/metrics.jsonl, atomic checkpoints,
  ``--resume RUN_DIR`` (bit-identical continuation), SIGINT/SIGTERM -> final checkpoint;
  writes the Q-table JSON (and the adversary's, for RARL).
* ``evaluate``: a saved forecaster on a row range of a source, optionally against a saved
  adversary; MAE/RMSE against the random walk facing the same perturbations.
* ``backtest``: walk-forward windows (train on ``window_size`` rows, forecast the next
  ``step_size`` rows one step ahead, out of sample), learned forecaster vs random walk,
  AR(1), AR(1) on differences and ARX on differences fitted with statsmodels on the
  same window; CSVs, summary.json and a plot.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from pglab.errors import ConfigError, DataError, UsageError
from pglab.validation import check_choice, check_int, check_range
from pglab.run.signals import StopRequested

ALGORITHMS = ("q", "wolf", "rarl")
EXIT_INTERRUPTED = 130


# --- configs -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _LearnerFields:
    """Fields shared by training and backtesting: data, game and learner settings."""

    algorithm: str = "q"
    """learner: 'q' (Q-learning), 'wolf' (WoLF-PHC) or 'rarl' (Q-learning forecaster trained against a learning adversary)"""
    source: str = "auto"
    """data: 'auto' (fred if FRED_API_KEY is set, else macrodata), 'macrodata', 'synthetic', 'fred' or 'csv:PATH'"""
    target: str | None = None
    """target column (default: unemp for macrodata, UNRATE for fred, the first column of a CSV)"""
    driver: str | None = None
    """exogenous driver column; NAME_growth / NAME_diff derive one (default: realgdp_growth for macrodata)"""
    seed: int = 42
    """seed of the episodes' start dates and of the agents' exploration"""
    data_seed: int = 0
    """seed of the synthetic source (ignored by the others)"""
    episodes: int = 200
    """training episodes (epochs for rarl)"""
    horizon: int = 80
    """rounds per episode"""
    n_bins: int = 21
    """forecaster actions (deltas in [-max_delta, max_delta])"""
    max_delta: float = 1.0
    """largest forecast delta, target units"""
    adversary_bins: int = 11
    """adversary actions (perturbations in [-adversary_max, adversary_max])"""
    adversary_max: float = 0.25
    """largest adversarial perturbation, target units"""
    state_key: str = "scaled"
    """state discretisation: 'scaled' (quantiles of recent change and driver) or 'hash' (the design note's 50x50 hash)"""
    scaled_buckets: int = 3
    """quantile buckets per dimension of the 'scaled' key (3 won the macrodata backtest, docs/forecast.md)"""
    hash_buckets: int = 50
    """buckets per dimension of the 'hash' key"""
    alpha: float = 0.1
    """learning rate"""
    gamma: float = 0.0
    """discount factor; 0 because a forecast does not move the series (0.95, the agents' default, lost the backtest)"""
    epsilon: float = 1.0
    """initial exploration probability"""
    epsilon_decay: float = 0.995
    """per-update epsilon multiplier"""
    epsilon_min: float = 0.05
    """exploration floor"""
    delta_win: float = 0.01
    """WoLF-PHC policy step when winning"""
    delta_lose: float = 0.04
    """WoLF-PHC policy step when losing"""
    alternation_schedule: int = 10
    """RARL: epochs per block before the other player learns"""

    def __post_init__(self):
        check_choice("algorithm", self.algorithm, ALGORITHMS)
        from pglab.data import check_source

        try:
            check_source(self.source)
        except DataError as exc:
            raise ConfigError("source", self.source, str(exc).split(": ", 1)[1]) from exc
        check_int("seed", self.seed, minimum=0)
        check_int("data_seed", self.data_seed, minimum=0)
        check_int("episodes", self.episodes, minimum=1)
        check_int("alternation_schedule", self.alternation_schedule, minimum=1)
        check_range("alpha", self.alpha, 0.0, 1.0, low_inclusive=False)
        check_range("gamma", self.gamma, 0.0, 1.0)
        check_range("epsilon", self.epsilon, 0.0, 1.0)
        check_range("epsilon_decay", self.epsilon_decay, 0.0, 1.0, low_inclusive=False)
        check_range("epsilon_min", self.epsilon_min, 0.0, 1.0)
        check_range("delta_win", self.delta_win, 0.0, 1.0, low_inclusive=False)
        check_range("delta_lose", self.delta_lose, 0.0, 1.0, low_inclusive=False)
        self.simulation()  # validates the game fields

    def simulation(self):
        from pglab.envs.forecast_game import SimulationConfig

        return SimulationConfig(
            horizon=self.horizon, n_bins=self.n_bins, max_delta=self.max_delta, adversary_bins=self.adversary_bins,
            adversary_max=self.adversary_max, state_key=self.state_key, hash_buckets=self.hash_buckets,
            scaled_buckets=self.scaled_buckets,
        )


@dataclasses.dataclass(frozen=True)
class TrainForecastConfig(_LearnerFields):
    """``pglab train forecast``."""

    train_rows: int | None = None
    """train on the first N rows only (default: all); evaluate later rows out of sample"""
    output: Path | None = None
    """forecaster Q-table JSON (default RUN_DIR/forecaster.json; RARL also writes *.adversary.json)"""
    log_dir: Path | None = None
    """run directory (default runs/forecast/<timestamp>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint (--episodes may extend it)"""
    checkpoint_every: int = 50
    """episodes between checkpoints"""

    def __post_init__(self):
        super().__post_init__()
        if self.train_rows is not None:
            check_int("train_rows", self.train_rows, minimum=3)
        check_int("checkpoint_every", self.checkpoint_every, minimum=1)


@dataclasses.dataclass(frozen=True)
class EvaluateForecastConfig:
    """``pglab evaluate forecast``."""

    model: Path
    """forecaster Q-table JSON written by pglab train forecast"""
    adversary: Path | None = None
    """adversary Q-table JSON (from --algorithm rarl): perturbs the realised values"""
    source: str = "auto"
    """data source (see pglab train forecast --help)"""
    target: str | None = None
    """target column"""
    driver: str | None = None
    """driver column"""
    data_seed: int = 0
    """seed of the synthetic source"""
    start_row: int = 1
    """first row whose value is forecast (from row start_row - 1)"""
    end_row: int | None = None
    """one past the last forecast row (default: the end of the series)"""
    best_response_episodes: int = 0
    """if > 0: train a fresh adversary for this many episodes against the frozen forecaster on the evaluated rows, then report the error under its attack (exploitability)"""
    output: Path | None = None
    """write the results as JSON here"""

    def __post_init__(self):
        check_int("data_seed", self.data_seed, minimum=0)
        check_int("best_response_episodes", self.best_response_episodes, minimum=0)
        check_int("start_row", self.start_row, minimum=1)
        if self.end_row is not None:
            check_int("end_row", self.end_row, minimum=self.start_row + 1)


@dataclasses.dataclass(frozen=True)
class BacktestConfig(_LearnerFields):
    """``pglab backtest``: walk-forward evaluation against random-walk and AR baselines."""

    horizon: int = 40
    """rounds per training episode (at most window_size - 2)"""
    windows: int | None = None
    """maximum number of walk-forward windows (default: as many as the data allow)"""
    window_size: int = 80
    """training rows per window"""
    step_size: int = 4
    """rows between windows = out-of-sample rows forecast per window"""
    feedback: bool = True
    """update the forecaster online from each realised test value (IterativeFeedbackLoop)"""
    output_dir: Path | None = None
    """folder for windows.csv, predictions.csv, summary.json, backtest.png (default runs/backtest/<timestamp>)"""

    def __post_init__(self):
        super().__post_init__()
        if self.windows is not None:
            check_int("windows", self.windows, minimum=1)
        check_int("window_size", self.window_size, minimum=4)
        check_int("step_size", self.step_size, minimum=1)
        if self.horizon > self.window_size - 2:
            raise ConfigError("horizon", self.horizon, f"must be <= window_size - 2 = {self.window_size - 2} (an episode needs horizon + 2 rows)")


# --- shared helpers ----------------------------------------------------------------------------
def _load_data(config) -> Any:
    from pglab.data import load_series

    return load_series(config.source, target=config.target, driver=config.driver, seed=config.data_seed)


def make_agents(config: _LearnerFields):
    """``(forecaster, adversary or None)`` for ``config.algorithm``."""
    from pglab.algos.tabular import QTableAgent, WoLFPHCAgent

    game = config.simulation()
    space = game.forecaster_space
    common = dict(alpha=config.alpha, gamma=config.gamma, epsilon=config.epsilon, epsilon_decay=config.epsilon_decay,
                  epsilon_min=config.epsilon_min)
    # An unseen state falls back to delta 0: the random-walk forecast, not a random guess.
    zero = space.delta_to_action(0.0)
    if config.algorithm == "wolf":
        forecaster = WoLFPHCAgent(space, delta_win=config.delta_win, delta_lose=config.delta_lose, seed=config.seed, default_action=zero, **common)
    else:
        forecaster = QTableAgent(space, seed=config.seed, default_action=zero, **common)
    adversary = None
    if config.algorithm == "rarl":
        adversary = QTableAgent(game.adversary_space, seed=config.seed + 1, default_action=game.adversary_space.delta_to_action(0.0), **common)
    return forecaster, adversary




class _Interrupted(Exception):
    pass


def _explicit_flag(argv: list[str], name: str) -> bool:
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    return any(arg in spellings or arg.split("=", 1)[0] in spellings for arg in argv)


# --- train -------------------------------------------------------------------------------------
def train(argv: list[str]) -> int:
    """``pglab train forecast [FLAGS]``."""
    from pglab.run.config import config_from_dict, config_to_dict, parse_config

    config = parse_config(TrainForecastConfig, argv, prog="pglab train forecast",
                          description="Train a tabular forecaster (Q-learning, WoLF-PHC or RARL) on a macro series.")
    if config.resume is not None:
        from pglab.run.rundir import read_run_config

        stored = read_run_config(config.resume)
        if not str(stored.get("kind", "")).startswith("forecast"):
            raise UsageError(f"resume={str(config.resume)!r}: not a forecast run (kind={stored.get('kind')!r})")
        merged = dict(stored["config"])
        if _explicit_flag(argv, "episodes"):
            merged["episodes"] = config.episodes
        merged["resume"] = str(config.resume)
        config = config_from_dict(TrainForecastConfig, merged)
    return run_training(config, config_to_dict(config))


def run_training(config: TrainForecastConfig, config_dict: dict[str, Any]) -> int:
    from pglab.algos.tabular import RADversarialTrainer, TrainingLoop
    from pglab.algos.tabular.serialization import agent_from_dict, agent_to_dict, save_q_table
    from pglab.envs.forecast_game import encoder_from_dict, make_state_encoder
    from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_checkpoint_file
    from pglab.run.logger import MetricsLogger
    from pglab.run.progress import progress_bar
    from pglab.run.rundir import create_run_dir, default_run_dir, write_run_config

    series = _load_data(config)
    if config.train_rows is not None:
        series.require_length(config.train_rows, f"train_rows={config.train_rows}")
        series = series.slice(0, config.train_rows)
    game = config.simulation()
    series.require_length(game.horizon + 2, f"horizon={game.horizon}")
    kind = f"forecast-{config.algorithm}"
    forecaster, adversary = make_agents(config)
    if config.algorithm == "rarl":
        loop = RADversarialTrainer(game, alternation_schedule=config.alternation_schedule, total_epochs=config.episodes, seed=config.seed)
    else:
        loop = TrainingLoop(game, n_episodes=config.episodes, seed=config.seed)

    if config.resume is not None:
        run_dir = Path(config.resume)
        checkpoint = load_checkpoint_file(run_dir, kinds=[kind])
        extra = checkpoint["extra"]
        forecaster = agent_from_dict(json.loads(extra["forecaster"]), source=checkpoint["path"])
        if adversary is not None:
            adversary = agent_from_dict(json.loads(extra["adversary"]), source=checkpoint["path"])
        loop.set_state(json.loads(extra["loop"]))
        encoder = encoder_from_dict(json.loads(extra["encoder"]))
        done = int(checkpoint["counters"]["episode"])
    else:
        run_dir = create_run_dir(config.log_dir or default_run_dir("forecast"))
        encoder = make_state_encoder(game, series)
        done = 0
    write_run_config(run_dir, config_dict, kind=kind)
    manager = CheckpointManager(run_dir / "checkpoints", pattern="checkpoint_ep_{step:06d}.pt", keep=3)
    logger = MetricsLogger(run_dir, step_key="episode", jsonl_name="metrics.jsonl", tensorboard_dir=None,
                           resume_step=done if config.resume is not None else None)
    logger.write_meta({"kind": kind, "series": series.name, "rows": len(series)})

    def save(episode: int) -> None:
        extra = {"forecaster": json.dumps(agent_to_dict(forecaster)), "loop": json.dumps(loop.get_state()),
                 "encoder": json.dumps(encoder.to_dict())}
        if adversary is not None:
            extra["adversary"] = json.dumps(agent_to_dict(adversary))
        manager.save(episode, build_checkpoint(kind=kind, config=config_dict, counters={"episode": episode}, models={}, extra=extra))

    bar = progress_bar(config.episodes, desc=f"train forecast ({config.algorithm})", initial=done, unit="ep")
    started = time.perf_counter()
    last_time = [started]

    def on_episode(episode: int, stats: dict[str, float]) -> None:
        now = time.perf_counter()
        logger.log(episode + 1, {**stats, "perf/iter_s": now - last_time[0], "perf/steps_per_s": game.horizon / max(now - last_time[0], 1e-9)})
        last_time[0] = now
        bar.update(1)
        bar.set_postfix(reward=f"{stats['reward/mean']:.3f}")
        if stop.signal is not None:
            raise _Interrupted

    interrupted = False
    with StopRequested() as stop:
        episode = done
        try:
            while episode < config.episodes:
                chunk_end = min(config.episodes, (episode // config.checkpoint_every + 1) * config.checkpoint_every)
                if adversary is not None:
                    loop.run(forecaster, adversary, series=series, encoder=encoder, stop=chunk_end, on_episode=on_episode)
                else:
                    loop.run(forecaster, series=series, encoder=encoder, stop=chunk_end, on_episode=on_episode)
                episode = chunk_end
                save(episode)
        except _Interrupted:
            interrupted = True
            episode = len(loop.epoch_results) if adversary is not None else len(loop.rewards_history)
            save(episode)
    bar.close()
    logger.close()
    if interrupted:
        print(f"interrupted after episode {episode}; checkpoint saved. Continue with: pglab train forecast --resume {run_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED

    summary = loop.summary() if adversary is not None else loop.summary(forecaster)
    metadata = {"state_encoder": encoder.to_dict(), "series": series.name, "rows": len(series), "algorithm": config.algorithm,
                "config": config_dict}
    output = Path(config.output) if config.output else run_dir / "forecaster.json"
    save_q_table(forecaster, output, metadata={**metadata, "role": "forecaster"})
    written = [str(output)]
    if adversary is not None:
        adversary_path = output.with_name(output.stem + ".adversary.json")
        save_q_table(adversary, adversary_path, metadata={**metadata, "role": "adversary"})
        written.append(str(adversary_path))
    from pglab.run.atomic import atomic_write_json

    atomic_write_json(run_dir / "summary.json", {**summary, "outputs": written, "wall_s": time.perf_counter() - started})
    try:
        from pglab.run.plots import plot_learning_curves

        plot_learning_curves(run_dir, keys=["reward/mean", "stats/abs_td_error"], smooth=10)
    except UsageError:
        pass
    brief = {k: v for k, v in summary.items() if k not in ("rewards_history", "epoch_results")}
    print(json.dumps({**brief, "outputs": written, "run_dir": str(run_dir)}, indent=2))
    return 0


# --- evaluate ----------------------------------------------------------------------------------
def _load_player(path: Path, role: str):
    from pglab.algos.tabular.serialization import load_q_table_with_metadata
    from pglab.envs.forecast_game import encoder_from_dict

    agent, metadata = load_q_table_with_metadata(path)
    if "state_encoder" not in metadata:
        raise UsageError(f"{role}={str(path)!r}: the Q-table has no state_encoder metadata (not written by pglab train forecast)")
    return agent, encoder_from_dict(metadata["state_encoder"]), metadata


def evaluate_forecaster(series, forecaster, encoder, rows: range, adversary=None, adversary_encoder=None) -> dict[str, Any]:
    """Greedy one-step forecasts of ``series.target[t]`` from row ``t - 1`` for ``t`` in ``rows``.

    With an adversary, the realised value is ``y_t + perturbation`` for both the model
    and the random walk, so the comparison is like for like.
    """
    from pglab.envs.forecast_game import state_at

    forecasts, naive, realised = [], [], []
    for t in rows:
        state = state_at(series, t - 1)
        forecasts.append(state.value + forecaster.action_space.action_to_delta(forecaster.act(encoder(state), explore=False)))
        naive.append(state.value)
        perturbation = 0.0
        if adversary is not None:
            perturbation = adversary.action_space.action_to_delta(adversary.act(adversary_encoder(state), explore=False))
        realised.append(series.target[t] + perturbation)
    forecasts, naive, realised = map(np.asarray, (forecasts, naive, realised))
    return {
        "n": len(rows),
        "mae": float(np.mean(np.abs(realised - forecasts))),
        "rmse": float(np.sqrt(np.mean((realised - forecasts) ** 2))),
        "mae_random_walk": float(np.mean(np.abs(realised - naive))),
        "rmse_random_walk": float(np.sqrt(np.mean((realised - naive) ** 2))),
    }


def best_response_attack(series, forecaster, encoder, start: int, end: int, episodes: int, metadata: dict[str, Any]) -> dict[str, Any]:
    """Train a fresh adversary (the run's game settings) against the frozen forecaster on
    rows ``start - 1 .. end - 1``, then evaluate the forecaster under its greedy attack."""
    from pglab.algos.tabular import QTableAgent
    from pglab.algos.tabular.loops import train_best_response

    run = dict(metadata.get("config") or {})
    fields = {f.name for f in dataclasses.fields(TrainForecastConfig)}
    from pglab.run.config import config_from_dict

    run = config_from_dict(TrainForecastConfig, {k: v for k, v in run.items() if k in fields and k not in ("output", "log_dir", "resume")})
    window = series.slice(start - 1, end)
    game = dataclasses.replace(run.simulation(), horizon=min(run.horizon, len(window) - 2))
    space = game.adversary_space
    adversary = QTableAgent(space, alpha=run.alpha, gamma=0.0, epsilon=1.0, epsilon_decay=run.epsilon_decay,
                            epsilon_min=run.epsilon_min, seed=run.seed + 7, default_action=space.delta_to_action(0.0))
    history = train_best_response(forecaster, adversary, game, series=window, encoder=encoder, episodes=episodes, seed=run.seed)
    return {"episodes": episodes, "final_training_error": history[-1],
            **evaluate_forecaster(series, forecaster, encoder, range(start, end), adversary, encoder)}


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate forecast --model PATH [--adversary PATH] [FLAGS]``."""
    from pglab.run.atomic import atomic_write_json
    from pglab.run.config import parse_config

    config = parse_config(EvaluateForecastConfig, argv, prog="pglab evaluate forecast",
                          description="Evaluate a saved forecaster (optionally against a saved adversary).")
    forecaster, encoder, metadata = _load_player(config.model, "model")
    adversary, adversary_encoder, _ = _load_player(config.adversary, "adversary") if config.adversary else (None, None, None)
    series = _load_data(config)
    end = len(series) if config.end_row is None else config.end_row
    if end > len(series):
        raise DataError(f"end_row={end}: the series {series.name} has only {len(series)} rows")
    result = {"model": str(config.model), "series": series.name, "rows": [config.start_row, end],
              "clean": evaluate_forecaster(series, forecaster, encoder, range(config.start_row, end))}
    if adversary is not None:
        result["adversary"] = str(config.adversary)
        result["attacked"] = evaluate_forecaster(series, forecaster, encoder, range(config.start_row, end), adversary, adversary_encoder)
    if config.best_response_episodes > 0:
        result["best_response"] = best_response_attack(series, forecaster, encoder, config.start_row, end, config.best_response_episodes, metadata)
    if config.output is not None:
        atomic_write_json(config.output, result)
    print(json.dumps(result, indent=2))
    return 0


@dataclasses.dataclass(frozen=True)
class EvaluateCheckpointConfig:
    """``pglab evaluate CHECKPOINT``: a forecast training checkpoint on its own data source."""

    checkpoint: Annotated[Path, tyro.conf.Positional]
    """checkpoint file or run directory of pglab train forecast"""
    start_row: int | None = None
    """first forecast row (default: the run's train_rows, i.e. out of sample; 1 if it trained on everything)"""
    end_row: int | None = None
    """one past the last forecast row (default: the end of the series)"""
    with_adversary: bool = True
    """RARL runs: also evaluate against the run's own adversary"""
    output: Path | None = None
    """write the results as JSON here"""


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]`` for checkpoints of kind ``forecast-*``."""
    from pglab.algos.tabular.checkpoint import KINDS, agent_from_checkpoint
    from pglab.run.atomic import atomic_write_json
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.config import config_from_dict, parse_config

    config = parse_config(EvaluateCheckpointConfig, argv, prog="pglab evaluate CHECKPOINT")
    loaded = agent_from_checkpoint(load_checkpoint_file(config.checkpoint, kinds=KINDS))
    run = config_from_dict(TrainForecastConfig, loaded.config)
    series = _load_data(run)
    start = config.start_row if config.start_row is not None else (run.train_rows or 1)
    end = len(series) if config.end_row is None else config.end_row
    if not 1 <= start < end <= len(series):
        raise DataError(f"rows {start}..{end}: must satisfy 1 <= start_row < end_row <= {len(series)} (rows of {series.name})")
    rows = range(start, end)
    result = {"checkpoint": str(config.checkpoint), "series": series.name, "rows": [start, end],
              "clean": evaluate_forecaster(series, loaded.policy, loaded.encoder, rows)}
    if loaded.adversary is not None and config.with_adversary:
        result["attacked"] = evaluate_forecaster(series, loaded.policy, loaded.encoder, rows, loaded.adversary, loaded.encoder)
    if config.output is not None:
        atomic_write_json(config.output, result)
    print(json.dumps(result, indent=2))
    return 0


# --- backtest ----------------------------------------------------------------------------------
BASELINES = ("random_walk", "ar1", "ar1_diff", "arx_diff")


def baseline_forecasts(train_y: np.ndarray, train_x: np.ndarray, history_y: np.ndarray, history_x: np.ndarray) -> dict[str, np.ndarray]:
    """One-step forecasts of ``y_t`` from ``y_{t-1}`` (and ``y_{t-2}``, ``x_{t-1}``), fitted on the window.

    Args:
        train_y, train_x: float64[W], the training window.
        history_y, history_x: float64[K + 2]: the two rows before each of the K test
            targets are ``history[k]`` (t-2) and ``history[k + 1]`` (t-1).

    Models (parameters estimated by statsmodels on the window only):
        random_walk: y_t = y_{t-1}
        ar1:         y_t = c + phi y_{t-1}                         (AutoReg, lags=1)
        ar1_diff:    dy_t = c + phi dy_{t-1}, y_t = y_{t-1} + dy_t (AutoReg on differences = ARIMA(1,1,0) with drift, conditional MLE)
        arx_diff:    dy_t = c + phi dy_{t-1} + beta x_{t-1}        (OLS; uses the same driver as the learner)
    """
    import statsmodels.api as sm
    from statsmodels.tsa.ar_model import AutoReg

    prev_y, prev2_y, prev_x = history_y[1:-1], history_y[:-2], history_x[1:-1]
    c, phi = AutoReg(train_y, lags=1, trend="c").fit().params
    diff = np.diff(train_y)
    c_d, phi_d = AutoReg(diff, lags=1, trend="c").fit().params
    design = sm.add_constant(np.column_stack([diff[:-1], train_x[1:-1]]), has_constant="add")
    c_x, phi_x, beta_x = sm.OLS(diff[1:], design).fit().params
    return {
        "random_walk": prev_y.copy(),
        "ar1": c + phi * prev_y,
        "ar1_diff": prev_y + c_d + phi_d * (prev_y - prev2_y),
        "arx_diff": prev_y + c_x + phi_x * (prev_y - prev2_y) + beta_x * prev_x,
    }


def backtest(argv: list[str]) -> int:
    """``pglab backtest [FLAGS]``."""
    from pglab.run.config import parse_config

    config = parse_config(BacktestConfig, argv, prog="pglab backtest",
                          description="Walk-forward backtest of a tabular forecaster against random-walk and AR baselines.")
    result = run_backtest(config)
    print(format_summary(result["summary"]))
    print(f"results in {result['output_dir']}")
    return 0


def window_bounds(n_rows: int, window_size: int, step_size: int, max_windows: int | None) -> list[tuple[int, int, int]]:
    """``(train_start, train_end, test_end)`` per window; rows ``train_end..test_end-1`` are forecast.

    The first window starts at row 1 so that its first state has a previous change.
    """
    if window_size + 2 > n_rows:
        raise DataError(f"window_size={window_size}: the series has only {n_rows} rows; a window needs window_size + 2 rows "
                        "(a training window and at least one row to forecast)")
    bounds = []
    start = 1
    while start + window_size < n_rows and (max_windows is None or len(bounds) < max_windows):
        bounds.append((start, start + window_size, min(start + window_size + step_size, n_rows)))
        start += step_size
    return bounds


def run_backtest(config: BacktestConfig) -> dict[str, Any]:
    import pandas as pd

    from pglab.algos.tabular import IterativeFeedbackLoop, RADversarialTrainer, TrainingLoop
    from pglab.envs.forecast_game import make_state_encoder, state_at
    from pglab.run.atomic import atomic_write_json, atomic_write_text
    from pglab.run.config import config_to_dict
    from pglab.run.progress import progress_bar
    from pglab.run.rundir import default_run_dir

    series = _load_data(config)
    game = config.simulation()
    bounds = window_bounds(len(series), config.window_size, config.step_size, config.windows)
    output_dir = Path(config.output_dir or default_run_dir("backtest"))
    output_dir.mkdir(parents=True, exist_ok=True)
    window_rows, prediction_rows = [], []
    started = time.perf_counter()
    bar = progress_bar(len(bounds), desc=f"backtest ({config.algorithm}, {config.state_key})", unit="win")
    for index, (train_start, train_end, test_end) in enumerate(bounds):
        window = series.slice(train_start, train_end)
        encoder = make_state_encoder(game, window)
        # Each window gets a fresh agent and its own seeds: nothing learned on one window
        # leaks into another's out-of-sample rows except through its training data.
        window_config = dataclasses.replace(config, seed=config.seed + 1000 * index)
        forecaster, adversary = make_agents(window_config)
        if adversary is not None:
            RADversarialTrainer(game, config.alternation_schedule, config.episodes, window_config.seed).run(
                forecaster, adversary, series=window, encoder=encoder)
        else:
            TrainingLoop(game, config.episodes, window_config.seed).run(forecaster, series=window, encoder=encoder)
        feedback = IterativeFeedbackLoop(encoder=encoder)
        rows = range(train_end, test_end)
        learned = []
        for t in rows:
            state = state_at(series, t - 1)
            forecast = state.value + forecaster.action_space.action_to_delta(forecaster.act(encoder(state), explore=False))
            learned.append(forecast)
            if config.feedback:
                feedback.update_from_realized(forecaster, [(state, forecast, float(series.target[t]))])
        baselines = baseline_forecasts(window.target, window.exogenous, series.target[train_end - 2:test_end], series.exogenous[train_end - 2:test_end])
        actual = series.target[train_end:test_end]
        methods = {"learned": np.asarray(learned), **baselines}
        row = {"window": index, "train_start": series.dates[train_start], "train_end": series.dates[train_end - 1],
               "test_start": series.dates[train_end], "test_end": series.dates[test_end - 1], "n": len(rows),
               "states_seen": forecaster.n_states}
        for name, forecasts in methods.items():
            errors = actual - forecasts
            row[f"mae_{name}"] = float(np.mean(np.abs(errors)))
            row[f"rmse_{name}"] = float(np.sqrt(np.mean(errors ** 2)))
        window_rows.append(row)
        for k, t in enumerate(rows):
            prediction_rows.append({"window": index, "date": series.dates[t], "actual": float(actual[k]),
                                    **{name: float(forecasts[k]) for name, forecasts in methods.items()}})
        bar.update(1)
    bar.close()
    predictions = pd.DataFrame(prediction_rows)
    windows = pd.DataFrame(window_rows)
    summary = summarise(predictions, windows)
    summary.update({"series": series.name, "algorithm": config.algorithm, "state_key": config.state_key, "n_windows": len(bounds),
                    "window_size": config.window_size, "step_size": config.step_size, "episodes": config.episodes,
                    "feedback": config.feedback, "wall_s": time.perf_counter() - started})
    atomic_write_text(output_dir / "windows.csv", windows.to_csv(index=False))
    atomic_write_text(output_dir / "predictions.csv", predictions.to_csv(index=False))
    atomic_write_json(output_dir / "summary.json", {"summary": summary, "config": config_to_dict(config)})
    plot_backtest(predictions, windows, output_dir / "backtest.png", title=f"{series.name}: {config.algorithm}, state_key={config.state_key}")
    return {"summary": summary, "output_dir": str(output_dir), "windows": windows, "predictions": predictions}


def summarise(predictions, windows) -> dict[str, Any]:
    """Pooled MAE/RMSE per method, share of windows where the learner beats each baseline,
    and a Diebold-Mariano t statistic (absolute loss, one-step horizon) against each."""
    actual = predictions["actual"].to_numpy()
    out: dict[str, Any] = {"n_forecasts": int(actual.size), "methods": {}}
    learned_loss = np.abs(actual - predictions["learned"].to_numpy())
    for name in ("learned",) + BASELINES:
        errors = actual - predictions[name].to_numpy()
        entry = {"mae": float(np.mean(np.abs(errors))), "rmse": float(np.sqrt(np.mean(errors ** 2)))}
        if name != "learned":
            # d_t = |e_learned| - |e_baseline|; DM = mean(d) / (sd(d) / sqrt(n)); < -2 favours the learner.
            diff = learned_loss - np.abs(errors)
            sd = diff.std(ddof=1) if diff.size > 1 else float("nan")
            entry["dm_t_learned_minus_this"] = float(diff.mean() / (sd / np.sqrt(diff.size))) if sd and sd > 0 else float("nan")
            entry["windows_learned_better_mae"] = float(np.mean(windows["mae_learned"] < windows[f"mae_{name}"]))
        out["methods"][name] = entry
    return out


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"{summary['series']}  algorithm={summary['algorithm']}  state_key={summary['state_key']}  "
             f"windows={summary['n_windows']}  forecasts={summary['n_forecasts']}",
             f"{'method':<12} {'MAE':>8} {'RMSE':>8} {'DM t':>8} {'win%':>6}"]
    for name, entry in summary["methods"].items():
        dm = entry.get("dm_t_learned_minus_this")
        share = entry.get("windows_learned_better_mae")
        lines.append(f"{name:<12} {entry['mae']:8.4f} {entry['rmse']:8.4f} "
                     f"{'' if dm is None else f'{dm:8.2f}':>8} {'' if share is None else f'{100 * share:5.0f}%':>6}")
    lines.append("DM t: learned minus baseline absolute error (< -2: the learner is significantly better); win%: windows where the learner's MAE is lower")
    return "\n".join(lines)


def plot_backtest(predictions, windows, path: Path, *, title: str) -> Path:
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7))
    x = np.arange(len(predictions))
    top.plot(x, predictions["actual"], color="black", lw=1.5, label="actual")
    for name, style in (("learned", "-"), ("random_walk", ":"), ("ar1_diff", "--")):
        top.plot(x, predictions[name], style, lw=1, label=name)
    ticks = x[:: max(1, len(x) // 10)]
    top.set_xticks(ticks, [predictions["date"].iloc[i] for i in ticks], rotation=30, fontsize=8)
    top.set_title(title)
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    for name in ("learned",) + BASELINES:
        bottom.plot(windows["window"], windows[f"mae_{name}"], marker="o" if name == "learned" else None, ms=3, lw=1, label=name)
    bottom.set_xlabel("window")
    bottom.set_ylabel("out-of-sample MAE")
    bottom.legend(fontsize=8, ncol=5)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
