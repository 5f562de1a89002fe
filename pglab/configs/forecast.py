"""Configs of the forecasting game's commands (torch-free, so every ``--help`` is fast).

* :class:`ForecastTrainConfig` -- ``pglab train forecast``;
* :class:`ForecastEvaluateConfig` -- ``pglab evaluate CHECKPOINT`` for a forecast run;
* :class:`ForecastModelEvaluateConfig` -- ``pglab evaluate forecast --model F.json``;
* :class:`BacktestConfig` -- ``pglab backtest``.

The learners are NumPy tables on the CPU. ``--device`` is accepted and resolved like
everywhere else (``cuda`` without a GPU is refused), but the tables stay on the CPU:
only the tensors an agent returns from ``act``/``value`` follow their input's device.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import tyro

from pglab.errors import ConfigError, DataError
from pglab.validation import (
    check_choice,
    check_int,
    check_memory,
    check_path,
    check_path_fields,
    check_positive,
    check_range,
    check_seed,
    check_threads,
)

ALGORITHMS = ("q", "wolf", "rarl")
StateKeyName = Literal["hash", "scaled"]


TABLE_ROWS = 64
"""Rows a tabular learner allocates first (pglab.algos.tabular.agents; more as states appear)."""
TABLES_PER_LEARNER = 3
"""float64 tables of shape [rows, actions] a learner keeps at most (WoLF-PHC: Q, the policy
and the average policy)."""


def table_bytes(actions: int) -> int:
    """A learner's first tables: ``64 rows x actions x 3 tables x 8`` bytes (a lower bound)."""
    return TABLE_ROWS * actions * TABLES_PER_LEARNER * 8


@dataclasses.dataclass(frozen=True)
class SimulationConfig:
    """Settings of the game (the data source is chosen by the command, not here); the
    action spaces they describe are built by :func:`pglab.envs.forecast_game.forecaster_space`
    and :func:`~pglab.envs.forecast_game.adversary_space`."""

    horizon: int = 80
    """rounds per episode"""
    n_bins: int = 21
    """forecaster actions: deltas evenly spaced in [-max_delta, max_delta]"""
    max_delta: float = 1.0
    """largest forecast delta, in target units"""
    adversary_bins: int = 11
    """adversary actions: perturbations evenly spaced in [-adversary_max, adversary_max]"""
    adversary_max: float = 0.25
    """largest perturbation of the realised value, in target units"""
    state_key: StateKeyName = "scaled"
    """state discretisation: 'scaled' (quantiles of change and driver, fitted on the training data) or 'hash'
    (fixed-width buckets of level and driver)"""
    hash_buckets: int = 50
    """buckets per dimension of the 'hash' key"""
    scaled_buckets: int = 3
    """quantile buckets per dimension of the 'scaled' key"""

    def __post_init__(self):
        check_int("horizon", self.horizon, minimum=1)
        check_int("n_bins", self.n_bins, minimum=2)
        check_positive("max_delta", self.max_delta)
        check_int("adversary_bins", self.adversary_bins, minimum=2)
        check_positive("adversary_max", self.adversary_max)
        check_choice("state_key", self.state_key, ("hash", "scaled"))
        check_int("hash_buckets", self.hash_buckets, minimum=1)
        check_int("scaled_buckets", self.scaled_buckets, minimum=1)
        check_memory("n_bins", self.n_bins, table_bytes(self.n_bins), "the forecaster's tables")
        check_memory("adversary_bins", self.adversary_bins, table_bytes(self.adversary_bins), "the adversary's tables")


def check_device(device: str) -> None:
    """The ``--device`` spelling (whether CUDA is there is checked when a run starts)."""
    if device not in ("auto", "cpu") and not (
        device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())
    ):
        raise ConfigError("device", device, "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")


@dataclasses.dataclass(frozen=True)
class ForecastLearnerConfig:
    """Fields shared by training and backtesting: data, game and learner settings."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"algorithm": "algo"}

    algo: str = "q"
    """learner: 'q' (Q-learning), 'wolf' (WoLF-PHC) or 'rarl' (a Q-learning forecaster trained against a learning
    adversary)"""
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
    # -- the game: --horizon, --n-bins, --max-delta, --adversary-bins, --adversary-max, --state-key, ...
    game: Annotated[SimulationConfig, tyro.conf.OmitArgPrefixes] = dataclasses.field(default_factory=SimulationConfig)
    """the game's settings (SimulationConfig)"""
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
    device: str = "auto"
    """auto, cpu or cuda[:N]; the Q-tables are NumPy arrays on the CPU whatever the device"""

    def __post_init__(self):
        check_choice("algo", self.algo, ALGORITHMS)
        from pglab.data import check_source

        try:
            check_source(self.source)
        except DataError as exc:
            raise ConfigError("source", self.source, str(exc).split(": ", 1)[1]) from exc
        if self.source.startswith("csv:"):
            check_path("source", self.source[len("csv:") :])
        check_seed("seed", self.seed)
        check_seed("data_seed", self.data_seed)
        check_int("episodes", self.episodes, minimum=1)
        check_int("alternation_schedule", self.alternation_schedule, minimum=1)
        check_range("alpha", self.alpha, 0.0, 1.0, low_inclusive=False)
        check_range("gamma", self.gamma, 0.0, 1.0)
        check_range("epsilon", self.epsilon, 0.0, 1.0)
        check_range("epsilon_decay", self.epsilon_decay, 0.0, 1.0, low_inclusive=False)
        check_range("epsilon_min", self.epsilon_min, 0.0, 1.0)
        check_range("delta_win", self.delta_win, 0.0, 1.0, low_inclusive=False)
        check_range("delta_lose", self.delta_lose, 0.0, 1.0, low_inclusive=False)
        check_device(self.device)
        if not isinstance(self.game, SimulationConfig):  # it validates its own fields
            raise ConfigError("game", self.game, "must be a SimulationConfig")


@dataclasses.dataclass(frozen=True)
class ForecastTrainConfig(ForecastLearnerConfig):
    """``pglab train forecast``."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"algorithm": "algo", "checkpoint_every": "save_interval"}

    train_rows: int | None = None
    """train on the first N rows only (default: all); evaluate later rows out of sample"""
    output: Path | None = None
    """forecaster Q-table JSON (default RUN_DIR/forecaster.json; RARL also writes *.adversary.json)"""
    log_dir: Path | None = None
    """run directory (default runs/forecast-<YYYYmmdd-HHMMSS>)"""
    resume: Path | None = None
    """continue the run in this directory from its latest checkpoint (--episodes may extend it)"""
    save_interval: int = 50
    """episodes between checkpoints (the last episode and a stop are always saved)"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    threads: int = 0
    """torch CPU threads (0: torch's default); the tabular learners themselves are single-threaded NumPy"""

    def __post_init__(self):
        super().__post_init__()
        check_path_fields(self)
        if self.train_rows is not None:
            check_int("train_rows", self.train_rows, minimum=3)
        check_int("save_interval", self.save_interval, minimum=1)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        check_threads("threads", self.threads)

    @property
    def kind(self) -> str:
        """The checkpoint kind: ``forecast-q``, ``forecast-wolf`` or ``forecast-rarl``."""
        return f"forecast-{self.algo}"


@dataclasses.dataclass(frozen=True)
class ForecastEvaluateConfig:
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
    device: str = "auto"
    """auto, cpu or cuda[:N]; the Q-tables are NumPy arrays on the CPU whatever the device"""

    def __post_init__(self):
        check_path_fields(self)
        if self.start_row is not None:
            check_int("start_row", self.start_row, minimum=1)
        if self.end_row is not None:
            check_int("end_row", self.end_row, minimum=(self.start_row or 1) + 1)
        check_device(self.device)


@dataclasses.dataclass(frozen=True)
class ForecastModelEvaluateConfig:
    """``pglab evaluate forecast``: a saved Q-table JSON on any row range of a source."""

    model: Path
    """forecaster Q-table JSON written by pglab train forecast"""
    adversary: Path | None = None
    """adversary Q-table JSON (from --algo rarl): perturbs the realised values"""
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
    """if > 0: train a fresh adversary for this many episodes against the frozen forecaster on the evaluated rows,
    then report the error under its attack (exploitability)"""
    output: Path | None = None
    """write the results as JSON here"""
    device: str = "auto"
    """auto, cpu or cuda[:N]; the Q-tables are NumPy arrays on the CPU whatever the device"""

    def __post_init__(self):
        check_path_fields(self)
        if isinstance(self.source, str) and self.source.startswith("csv:"):
            check_path("source", self.source[len("csv:") :])
        check_seed("data_seed", self.data_seed)
        check_int("best_response_episodes", self.best_response_episodes, minimum=0)
        check_int("start_row", self.start_row, minimum=1)
        if self.end_row is not None:
            check_int("end_row", self.end_row, minimum=self.start_row + 1)
        check_device(self.device)


@dataclasses.dataclass(frozen=True)
class BacktestConfig(ForecastLearnerConfig):
    """``pglab backtest``: walk-forward evaluation against random-walk and AR baselines."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"algorithm": "algo", "output_dir": "output"}

    # Shorter training episodes than pglab train forecast's: a window holds window_size rows.
    game: Annotated[SimulationConfig, tyro.conf.OmitArgPrefixes] = dataclasses.field(
        default_factory=lambda: SimulationConfig(horizon=40)
    )
    """the game's settings (SimulationConfig; --horizon at most window_size - 2)"""
    windows: int | None = None
    """maximum number of walk-forward windows (default: as many as the data allow)"""
    window_size: int = 80
    """training rows per window"""
    step_size: int = 4
    """rows between windows = out-of-sample rows forecast per window"""
    feedback: bool = True
    """update the forecaster online from each realised test value (IterativeFeedbackLoop)"""
    output: Path | None = None
    """folder for windows.csv, predictions.csv, summary.json, backtest.png (default runs/backtest-<YYYYmmdd-HHMMSS>)"""

    def __post_init__(self):
        super().__post_init__()
        check_path_fields(self)
        if self.windows is not None:
            check_int("windows", self.windows, minimum=1)
        check_int("window_size", self.window_size, minimum=4)
        check_int("step_size", self.step_size, minimum=1)
        if self.game.horizon > self.window_size - 2:
            raise ConfigError(
                "horizon",
                self.game.horizon,
                f"must be <= window_size - 2 = {self.window_size - 2} (an episode needs horizon + 2 rows)",
            )
