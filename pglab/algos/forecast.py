"""The forecasting game's trainer, agent, evaluations and walk-forward backtest.

* :func:`train_forecast` -- Q-learning, WoLF-PHC or robust adversarial (RARL) training on a
  data source, inside the shared :class:`~pglab.run.shell.TrainingRun` (run directory,
  resume, logs, checkpoints, stops); at the end it writes the Q-table JSON (and the
  adversary's, for RARL).
* :class:`ForecastAgent` / :func:`agent_from_checkpoint` -- a training checkpoint as a
  :class:`pglab.agent.Agent` (what ``pglab.load_checkpoint`` returns for ``forecast-*``).
* :func:`evaluate_forecaster`, :func:`best_response_attack` -- greedy one-step forecasts on
  a row range, against the random walk facing the same perturbations.
* :func:`run_backtest` -- walk-forward windows (train on ``window_size`` rows, forecast the
  next ``step_size`` rows one step ahead, out of sample), learned forecaster vs random
  walk, AR(1), AR(1) on differences and ARX on differences fitted with statsmodels on the
  same window.

The learners are NumPy tables on the CPU; nothing here runs on a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pglab.agent import Agent, ObsSpec, check_observation
from pglab.algos.tabular.agents import QTableAgent, WoLFPHCAgent
from pglab.algos.tabular.loops import IterativeFeedbackLoop, RADversarialTrainer, TrainingLoop, train_best_response
from pglab.configs.forecast import (
    BacktestConfig,
    ForecastLearnerConfig,
    ForecastModelEvaluateConfig,
    ForecastTrainConfig,
)
from pglab.data import ForecastSeries, load_series
from pglab.envs.forecast_game import (
    ForecastState,
    StateEncoder,
    adversary_space,
    encoder_from_dict,
    forecaster_space,
    make_state_encoder,
    state_at,
)
from pglab.errors import CheckpointError, ConfigError, DataError, UsageError
from pglab.run.shell import TrainerSpec, TrainingRun

KINDS = ("forecast-q", "forecast-wolf", "forecast-rarl")

SPEC = TrainerSpec(
    system="forecast",
    config_class=ForecastTrainConfig,
    kinds=KINDS,
    kind_of=lambda config: config.kind,
    step_key="episode",
    # The budget, and where the final Q-table goes; anything else would change what is learned.
    resumable=frozenset({"episodes", "output"}),
    total_steps=lambda config: config.episodes,
    budget_field="episodes",
)


# --- building blocks ---------------------------------------------------------------------------
def load_data(config: ForecastLearnerConfig | ForecastModelEvaluateConfig) -> ForecastSeries:
    """The config's series."""
    return load_series(config.source, target=config.target, driver=config.driver, seed=config.data_seed)


def make_agents(config: ForecastLearnerConfig) -> tuple[QTableAgent, QTableAgent | None]:
    """``(forecaster, adversary or None)`` for ``config.algo``, untrained."""

    game = config.game
    space = forecaster_space(game)
    common = dict(
        alpha=config.alpha,
        gamma=config.gamma,
        epsilon=config.epsilon,
        epsilon_decay=config.epsilon_decay,
        epsilon_min=config.epsilon_min,
    )
    # An unseen state falls back to delta 0: the random-walk forecast, not a random guess.
    zero = space.delta_to_action(0.0)
    forecaster: QTableAgent
    if config.algo == "wolf":
        forecaster = WoLFPHCAgent(
            space,
            delta_win=config.delta_win,
            delta_lose=config.delta_lose,
            seed=config.seed,
            default_action=zero,
            **common,
        )
    else:
        forecaster = QTableAgent(space, seed=config.seed, default_action=zero, **common)
    adversary = None
    if config.algo == "rarl":
        opponent_space = adversary_space(game)
        adversary = QTableAgent(
            opponent_space,
            seed=config.seed + 1,
            default_action=opponent_space.delta_to_action(0.0),
            **common,
        )
    return forecaster, adversary


@dataclasses.dataclass
class ForecastLearners:
    """A run's players and the loop that trains them: Q-learning or WoLF-PHC alone
    (:class:`~pglab.algos.tabular.TrainingLoop`), or RARL's forecaster and adversary
    (:class:`~pglab.algos.tabular.RADversarialTrainer`)."""

    forecaster: QTableAgent
    adversary: QTableAgent | None
    loop: TrainingLoop | RADversarialTrainer

    @classmethod
    def build(cls, config: ForecastLearnerConfig) -> ForecastLearners:
        """Untrained learners for ``config.algo``, seeded from ``config.seed``."""
        forecaster, adversary = make_agents(config)
        loop: TrainingLoop | RADversarialTrainer
        if adversary is not None:
            loop = RADversarialTrainer(
                config.game,
                alternation_schedule=config.alternation_schedule,
                total_epochs=config.episodes,
                seed=config.seed,
            )
        else:
            loop = TrainingLoop(config.game, n_episodes=config.episodes, seed=config.seed)
        return cls(forecaster, adversary, loop)

    def players(self) -> dict[str, QTableAgent]:
        """The tables by role: ``forecaster`` and, for RARL, ``adversary``."""
        return {"forecaster": self.forecaster, **({"adversary": self.adversary} if self.adversary is not None else {})}

    def episode(self, series: ForecastSeries, encoder: StateEncoder) -> dict[str, float]:
        """Play the next episode (RARL: epoch), learn from it; return its metrics.

        Episode ``i`` (0-based) plays the game seeded with ``seed + i``, so one call per
        episode equals one long run, and a resumed loop continues where it stopped.
        """
        if self.adversary is not None:
            assert isinstance(self.loop, RADversarialTrainer)  # built together by build()
            return self.loop.episode(self.forecaster, self.adversary, series=series, encoder=encoder)
        assert isinstance(self.loop, TrainingLoop)
        return self.loop.episode(self.forecaster, series=series, encoder=encoder)

    def summary(self) -> dict[str, Any]:
        if isinstance(self.loop, RADversarialTrainer):
            return self.loop.summary()
        return self.loop.summary(self.forecaster)


# --- training ----------------------------------------------------------------------------------
def train_forecast(
    config: ForecastTrainConfig,
    *,
    given: frozenset[str] | None = None,
    echo: Callable[..., None] = print,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train a tabular forecaster (and, for RARL, its adversary) for ``config.episodes`` episodes.

    One step of the run is one episode of the game (one RARL epoch): play ``horizon``
    rounds, then update the learner(s) from the logged transitions.

    Returns:
        ``{"run_dir", "summary", "outputs", "interrupted", "exit_code", "config"}``;
        ``outputs`` lists the Q-table JSON files written (none after a stop); ``config`` is
        the run's own (a resumed run's, with what the resume applied).
    """
    from pglab.run.state import Value

    with TrainingRun(SPEC, config, given=given, echo=echo, stop_after=stop_after) as run:
        config = run.config
        # -- build: the training rows, the learners, the state key fitted on those rows ----
        series = training_series(config)
        learners = ForecastLearners.build(config)
        fitted_key = Value(make_state_encoder(config.game, series).to_dict())
        run.track(
            state={**learners.players(), "loop": learners.loop, "encoder": fitted_key},
            meta={"series": series.name},
            info={"rows": len(series)},
        )
        encoder = encoder_from_dict(fitted_key.value)  # a resumed run keeps the key it learned with
        run.counters.setdefault("env_steps", 0)

        # -- episodes: play, learn, log ---------------------------------------------------
        for episode in run.steps(config.episodes, desc=f"train forecast ({config.algo})", unit="ep"):
            metrics = learners.episode(series, encoder)
            run.counters["env_steps"] += config.game.horizon
            run.log(episode, metrics)
            run.set_postfix(reward=f"{metrics['reward/mean']:.3f}")

        # -- outputs: the Q-tables of a finished run ----------------------------------------
        summary = learners.summary()
        written = [] if run.interrupted else write_q_tables(config, learners, series, encoder, run.run_dir)
        run.finish({**summary, "outputs": written})
    if not run.interrupted:
        plot_training(run.run_dir)
    return {
        "run_dir": str(run.run_dir),
        "summary": summary,
        "outputs": written,
        "interrupted": run.interrupted,
        "exit_code": run.exit_code,
        "config": config,
    }


def training_series(config: ForecastTrainConfig) -> ForecastSeries:
    """The rows a run trains on: the first ``train_rows`` (default: all), at least an episode's worth."""
    series = load_data(config)
    if config.train_rows is not None:
        series.require_length(config.train_rows, f"train_rows={config.train_rows}")
        series = series.slice(0, config.train_rows)
    series.require_length(config.game.horizon + 2, f"horizon={config.game.horizon}")
    return series


def write_q_tables(
    config: ForecastTrainConfig,
    learners: ForecastLearners,
    series: ForecastSeries,
    encoder: StateEncoder,
    run_dir: Path,
) -> list[str]:
    """Write the forecaster's Q-table JSON (``config.output``, default ``RUN_DIR/forecaster.json``)
    and, for RARL, the adversary's beside it (``*.adversary.json``); return their paths."""
    from pglab.algos.tabular.serialization import save_q_table
    from pglab.run.config import config_to_dict

    metadata = {
        "state_encoder": encoder.to_dict(),
        "series": series.name,
        "rows": len(series),
        "algorithm": config.algo,
        "config": config_to_dict(dataclasses.replace(config, resume=None)),
    }
    output = Path(config.output) if config.output else run_dir / "forecaster.json"
    paths = {"forecaster": output, "adversary": output.with_name(output.stem + ".adversary.json")}
    written = []
    for role, agent in learners.players().items():
        save_q_table(agent, paths[role], metadata={**metadata, "role": role})
        written.append(str(paths[role]))
    return written


def plot_training(run_dir: Path) -> None:
    """``plots/learning_curves.png`` of a finished run (skipped where no figure can be drawn)."""
    from pglab.run.plots import plot_learning_curves

    with contextlib.suppress(UsageError):
        plot_learning_curves(run_dir, keys=["reward/mean", "stats/abs_td_error"], smooth=10)


# --- the agent ---------------------------------------------------------------------------------
class ForecastAgent(Agent):
    """A trained forecaster (and, for RARL, its adversary) as a pglab agent.

    Observations, batch-first, as tensors (``act``/``value``) or NumPy arrays (``predict``):

    * int ``[B]``: state keys, i.e. Q-table rows as the run's state key numbers them
      (``agent.encoder(state)``), each in ``0 .. key_count - 1``;
    * float ``[B, 3]``: raw observations ``(y_t, x_t, y_t - y_{t-1})`` = (level, driver,
      last change), finite, which the run's fitted state key turns into state keys
      (:meth:`observation` builds one from a :class:`ForecastState`). They are read in
      float64 (a float32 cast could move a value across a state-key edge); integers are
      cast to float64.

    Anything else (another type or shape, booleans, float keys, a key out of range, a
    NaN/inf) raises :class:`~pglab.agent.ObservationError`.

    ``act`` gives int64 ``[B]`` action indices (the forecast is ``y_t + deltas[a]``, see
    :meth:`forecast`); ``value`` gives float64 ``[B]``: ``max_a Q(s, a)`` (the state's
    value under the greedy policy) for Q-learning and RARL forecasters, ``sum_a pi(s, a)
    Q(s, a)`` (the expected Q under the mixed policy) for WoLF-PHC. Q is the expected
    one-round reward ``-|error|`` when ``gamma = 0`` (the CLI default). A state never seen
    in training has value 0 (the table's initial value) and acts with delta 0 (the random
    walk).

    The tables are NumPy arrays on the CPU; the tensors returned are on the device of
    ``obs``. ``deterministic=True`` is the greedy action (the mode of pi for WoLF-PHC) used
    by every evaluation; as there, an exact tie between actions (common only in states
    barely visited) is broken by the table's own RNG. ``deterministic=False`` samples as
    in training (epsilon-greedy, or pi for WoLF-PHC).

    Attributes:
        kind, config: the checkpoint kind and its :class:`ForecastTrainConfig`.
        policy: the forecaster's :class:`~pglab.algos.tabular.QTableAgent` (or WoLF-PHC).
        encoder: the fitted state key.
        adversary: the RARL adversary's table, else ``None``.
    """

    def __init__(self, *, kind: str, config: ForecastTrainConfig, policy, encoder, adversary=None):
        import torch

        self.kind, self.config = kind, config
        self.policy, self.encoder, self.adversary = policy, encoder, adversary
        self.device = torch.device("cpu")

    # -- observations -----------------------------------------------------------------
    @staticmethod
    def observation(state) -> np.ndarray:
        """float64[3]: ``(value, exogenous, change)`` of a :class:`ForecastState`."""
        return np.array([state.value, state.exogenous, state.change], dtype=np.float64)

    @property
    def key_count(self) -> int:
        """How many state keys the run's state key can give: keys are ``0 .. key_count - 1``
        (``n_buckets`` per dimension, two dimensions)."""
        return int(self.encoder.n_buckets) ** 2

    def obs_specs(self) -> tuple[ObsSpec, ObsSpec]:
        """``(keys, rows)``: what :meth:`act` and :meth:`value` read, int state keys ``[B]``
        or float64 observations ``[B, 3]``."""
        import torch

        last = self.key_count - 1
        keys = ObsSpec(("B",), "keys", high=self.key_count, hint="or float observations [B, 3]")
        rows = ObsSpec(
            ("B", 3), "real", torch.float64, hint=f"level, driver, last change; or int keys [B] in 0..{last}"
        )
        return keys, rows

    def state_keys(self, obs: Any, method: str = "act") -> list[int]:
        """The Q-table keys of a batch: int ``[B]`` keys as they are, float ``[B, 3]``
        observations through the state key (both checked, see the class docstring)."""
        keys, rows = self.obs_specs()
        where = f"ForecastAgent.{method}"
        if getattr(obs, "ndim", None) == 1:
            return [int(key) for key in check_observation(obs, keys, where=where).tolist()]
        checked = check_observation(obs, rows, where=where).tolist()
        return [
            self.encoder(ForecastState(float(value), float(exogenous), 0, float(change)))
            for value, exogenous, change in checked
        ]

    # -- the Agent API ----------------------------------------------------------------
    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """int64 ``[B]``: the forecaster's actions (greedy when ``deterministic``) for
        ``obs``, a tensor of int state keys ``[B]`` or float observations ``[B, 3]``."""
        import torch

        actions = [self.policy.act(key, explore=not deterministic) for key in self.state_keys(obs, "act")]
        return torch.tensor(actions, dtype=torch.int64, device=getattr(obs, "device", None))

    def value(self, obs: Any) -> Any:
        """float64 ``[B]``: ``max_a Q(s, a)`` (Q-learning) or ``pi(s) . Q(s)`` (WoLF-PHC)."""
        import torch

        values = [self.policy.state_value(key) for key in self.state_keys(obs, "value")]
        return torch.tensor(values, dtype=torch.float64, device=getattr(obs, "device", None))

    # -- forecasts --------------------------------------------------------------------
    def forecast(self, state) -> float:
        """The greedy one-step forecast ``y_t + delta`` of ``y_{t+1}`` (target units)."""
        action = self.policy.act(self.encoder(state), explore=False)
        return state.value + self.policy.action_space.action_to_delta(action)


def agent_from_checkpoint(checkpoint: dict[str, Any], *, device: Any = "cpu") -> ForecastAgent:
    """Rebuild the agents of a loaded forecast checkpoint: the tables of the run's config,
    restored from ``extra["forecaster"]`` (``extra["adversary"]`` for RARL) with the state
    key ``extra["encoder"]``. ``device`` is accepted for the common loader signature; the
    tables are NumPy arrays on the CPU."""
    from pglab.run.config import config_from_dict

    source = checkpoint.get("path", "<checkpoint>")
    if checkpoint.get("kind") not in KINDS:
        raise CheckpointError(
            f"checkpoint {source}: kind={checkpoint.get('kind')!r}, expected one of {', '.join(KINDS)}"
        )
    config = config_from_dict(ForecastTrainConfig, {**checkpoint["config"], "resume": None})
    learners = ForecastLearners.build(config)
    extra = checkpoint.get("extra", {})
    try:
        for role, agent in learners.players().items():
            agent.load_state_dict(extra[role])
        encoder = encoder_from_dict(extra["encoder"])
    except (KeyError, TypeError, ValueError, ConfigError) as exc:
        raise CheckpointError(f"checkpoint {source}: forecast agents missing or unreadable ({exc!r})") from exc
    return ForecastAgent(
        kind=checkpoint["kind"],
        config=config,
        policy=learners.forecaster,
        encoder=encoder,
        adversary=learners.adversary,
    )


# --- evaluation --------------------------------------------------------------------------------
def load_player(path: Path, role: str):
    """``(agent, state key, metadata)`` of a Q-table JSON written by ``pglab train forecast``."""
    from pglab.algos.tabular.serialization import load_q_table_with_metadata

    agent, metadata = load_q_table_with_metadata(path)
    if "state_encoder" not in metadata:
        raise UsageError(
            f"{role}={str(path)!r}: the Q-table has no state_encoder metadata (not written by pglab train forecast)"
        )
    return agent, encoder_from_dict(metadata["state_encoder"]), metadata


def evaluate_forecaster(
    series, forecaster, encoder, rows: range, adversary=None, adversary_encoder=None
) -> dict[str, Any]:
    """Greedy one-step forecasts of ``series.target[t]`` from row ``t - 1`` for ``t`` in ``rows``.

    With an adversary, the realised value is ``y_t + perturbation`` for both the model
    and the random walk, so the comparison is like for like.
    """
    forecasts, naive, realised = [], [], []
    for t in rows:
        state = state_at(series, t - 1)
        forecasts.append(
            state.value + forecaster.action_space.action_to_delta(forecaster.act(encoder(state), explore=False))
        )
        naive.append(state.value)
        perturbation = 0.0
        if adversary is not None:
            perturbation = adversary.action_space.action_to_delta(
                adversary.act(adversary_encoder(state), explore=False)
            )
        realised.append(series.target[t] + perturbation)
    model_error = np.asarray(realised) - np.asarray(forecasts)
    naive_error = np.asarray(realised) - np.asarray(naive)
    return {
        "n": len(rows),
        "mae": float(np.mean(np.abs(model_error))),
        "rmse": float(np.sqrt(np.mean(model_error**2))),
        "mae_random_walk": float(np.mean(np.abs(naive_error))),
        "rmse_random_walk": float(np.sqrt(np.mean(naive_error**2))),
    }


def best_response_attack(
    series, forecaster, encoder, start: int, end: int, episodes: int, metadata: dict[str, Any]
) -> dict[str, Any]:
    """Train a fresh adversary (the run's game settings) against the frozen forecaster on
    rows ``start - 1 .. end - 1``, then evaluate the forecaster under its greedy attack."""
    from pglab.run.config import config_from_dict

    # The run's settings, without where it wrote (config_from_dict maps deprecated names).
    stored = {k: v for k, v in (metadata.get("config") or {}).items() if k not in ("output", "log_dir", "resume")}
    run = config_from_dict(ForecastTrainConfig, stored)
    window = series.slice(start - 1, end)
    game = dataclasses.replace(run.game, horizon=min(run.game.horizon, len(window) - 2))
    space = adversary_space(game)
    adversary = QTableAgent(
        space,
        alpha=run.alpha,
        gamma=0.0,
        epsilon=1.0,
        epsilon_decay=run.epsilon_decay,
        epsilon_min=run.epsilon_min,
        seed=run.seed + 7,
        default_action=space.delta_to_action(0.0),
    )
    history = train_best_response(
        forecaster, adversary, game, series=window, encoder=encoder, episodes=episodes, seed=run.seed
    )
    return {
        "episodes": episodes,
        "final_training_error": history[-1],
        **evaluate_forecaster(series, forecaster, encoder, range(start, end), adversary, encoder),
    }


def evaluate_model(config: ForecastModelEvaluateConfig) -> dict[str, Any]:
    """``pglab evaluate forecast``: a Q-table JSON (and optionally an adversary's) on rows
    ``start_row .. end_row - 1`` of a source."""
    forecaster, encoder, metadata = load_player(config.model, "model")
    adversary, adversary_encoder, _ = (
        load_player(config.adversary, "adversary") if config.adversary else (None, None, None)
    )
    series = load_data(config)
    end = len(series) if config.end_row is None else config.end_row
    if end > len(series):
        raise DataError(f"end_row: the series {series.name} has only {len(series)} rows (got {end})")
    result = {
        "model": str(config.model),
        "series": series.name,
        "rows": [config.start_row, end],
        "clean": evaluate_forecaster(series, forecaster, encoder, range(config.start_row, end)),
    }
    if adversary is not None:
        result["adversary"] = str(config.adversary)
        result["attacked"] = evaluate_forecaster(
            series, forecaster, encoder, range(config.start_row, end), adversary, adversary_encoder
        )
    if config.best_response_episodes > 0:
        result["best_response"] = best_response_attack(
            series, forecaster, encoder, config.start_row, end, config.best_response_episodes, metadata
        )
    return result


# --- the game's references: its Nash equilibrium and AR(1) --------------------------------------
def learned_rule(forecaster: QTableAgent, keys: tuple[int, ...]) -> dict[int, int]:
    """The forecaster's greedy action in each of ``keys``, as every evaluation acts (an exact
    tie broken by the table's RNG), with the RNG put back: the rule read from a checkpoint
    is the same wherever it is read, and later draws do not move."""
    saved = forecaster.rng.bit_generator.state
    try:
        return {key: forecaster.act(key, explore=False) for key in keys}
    finally:
        forecaster.rng.bit_generator.state = saved


AR_MIN_ROWS = 6
"""The fewest training rows the AR baselines are fitted on (ARX on differences: 3
parameters from ``rows - 2`` changes, one more than it needs)."""


def one_step_baselines(
    train: ForecastSeries, series: ForecastSeries, start: int, end: int
) -> dict[str, np.ndarray] | None:
    """:func:`baseline_forecasts` fitted on ``train``, forecasting ``series.target[t]`` for
    ``t`` in ``start .. end - 1`` (rows before row 0 read as row 0: no change before the
    first row, as in :func:`~pglab.envs.forecast_game.state_at`); ``None`` when ``train``
    has fewer than :data:`AR_MIN_ROWS` rows."""
    if len(train) < AR_MIN_ROWS:
        return None
    history = np.maximum(np.arange(start - 2, end), 0)
    return baseline_forecasts(train.target, train.exogenous, series.target[history], series.exogenous[history])


def game_reference(agent: ForecastAgent) -> dict[str, Any]:
    """The learned forecaster in the game it trained in (its training rows, each round
    weighted as the episodes play it) against the game's Nash equilibrium
    (:mod:`pglab.envs.forecast_equilibrium`) and against AR(1) fitted on the same rows.

    Returns mean absolute errors per round (``learned_mae``, ``nash_mae``, ``ar1_mae``:
    ``None`` below :data:`AR_MIN_ROWS` training rows),
    ``nash_gap`` (the learned rule's exploitability: its mean absolute error minus the
    equilibrium's), ``states`` and ``states_at_nash`` (states where the rule plays an
    equilibrium action); for RARL also ``robust_learned_mae`` (against a best-responding
    adversary), ``robust_nash_mae`` and ``robust_nash_gap`` (the game with the adversary).
    """
    from pglab.envs.forecast_equilibrium import forecast_equilibrium, round_weights

    series, game = training_series(agent.config), agent.config.game
    clean = forecast_equilibrium(series, agent.encoder, game, adversary=False)
    rule = learned_rule(agent.policy, clean.games.keys)
    weights = round_weights(len(series), game.horizon)[1:-1]  # rounds t = 1 .. n - 2 forecast rows 2 .. n - 1
    baselines = one_step_baselines(series, series, 2, len(series))
    reference: dict[str, Any] = {
        "learned_mae": -clean.guaranteed(rule),
        "nash_mae": -clean.value,
        "nash_gap": clean.exploitability(rule),
        "states": len(clean.games.keys),
        "states_at_nash": clean.at_equilibrium(rule),
        "ar1_mae": None
        if baselines is None
        else float(weights @ np.abs(series.target[2:] - baselines["ar1"]) / weights.sum()),
    }
    if agent.adversary is not None:
        robust = forecast_equilibrium(series, agent.encoder, game, adversary=True)
        reference |= {
            "robust_learned_mae": -robust.guaranteed(rule),
            "robust_nash_mae": -robust.value,
            "robust_nash_gap": robust.exploitability(rule),
        }
    return reference


def reference_errors(agent: ForecastAgent, series: ForecastSeries, rows: range) -> dict[str, float]:
    """Out-of-sample references on ``rows``: AR(1) and AR(1) on differences fitted on the
    training rows (MAE, RMSE; where there are :data:`AR_MIN_ROWS`), and the MAE of the
    training game's Nash forecast rule (its expected absolute error where it mixes; delta 0
    in a state the training rows never showed, as the learners)."""
    from pglab.envs.forecast_equilibrium import forecast_equilibrium

    train = training_series(agent.config)
    actual = series.target[rows.start : rows.stop]
    baselines = one_step_baselines(train, series, rows.start, rows.stop)
    errors: dict[str, float] = {}
    for name, forecasts in (baselines or {}).items():
        if name not in ("ar1", "ar1_diff"):
            continue
        error = actual - forecasts
        errors |= {f"mae_{name}": float(np.mean(np.abs(error))), f"rmse_{name}": float(np.sqrt(np.mean(error**2)))}
    nash = forecast_equilibrium(train, agent.encoder, agent.config.game, adversary=False)
    space = forecaster_space(agent.config.game)
    strategy = dict(zip(nash.games.keys, nash.forecaster, strict=True))
    zero = np.eye(space.n)[space.delta_to_action(0.0)]
    expected = [
        strategy.get(agent.encoder(state_at(series, t - 1)), zero)
        @ np.abs(series.target[t] - series.target[t - 1] - space.deltas)
        for t in rows
    ]
    return errors | {"mae_nash": float(np.mean(expected))}


def evaluate_agent(
    agent: ForecastAgent,
    *,
    start_row: int | None = None,
    end_row: int | None = None,
    with_adversary: bool = True,
    checkpoint: str = "",
) -> dict[str, Any]:
    """``pglab evaluate CHECKPOINT``: the agent on its run's own data, by default out of
    sample (from ``train_rows`` on)."""
    series = load_data(agent.config)
    start = start_row if start_row is not None else (agent.config.train_rows or 1)
    end = len(series) if end_row is None else end_row
    if not 1 <= start < end <= len(series):
        raise DataError(
            f"rows {start}..{end}: must satisfy 1 <= start_row < end_row <= {len(series)} (rows of {series.name})"
        )
    rows = range(start, end)
    game = game_reference(agent)  # from the checkpoint's tables as they were stored, as pglab train reports it
    result: dict[str, Any] = {
        "checkpoint": checkpoint,
        "series": series.name,
        "rows": [start, end],
        "clean": evaluate_forecaster(series, agent.policy, agent.encoder, rows),
    }
    if agent.adversary is not None and with_adversary:
        result["attacked"] = evaluate_forecaster(
            series, agent.policy, agent.encoder, rows, agent.adversary, agent.encoder
        )
    result["clean"] |= reference_errors(agent, series, rows)
    result["game"] = game
    return result


# --- walk-forward backtest ---------------------------------------------------------------------
BASELINES = ("random_walk", "ar1", "ar1_diff", "arx_diff")


def baseline_forecasts(
    train_y: np.ndarray, train_x: np.ndarray, history_y: np.ndarray, history_x: np.ndarray
) -> dict[str, np.ndarray]:
    """One-step forecasts of ``y_t`` from ``y_{t-1}`` (and ``y_{t-2}``, ``x_{t-1}``), fitted on the window.

    Args:
        train_y, train_x: float64[W], the training window.
        history_y, history_x: float64[K + 2]: the two rows before each of the K test
            targets are ``history[k]`` (t-2) and ``history[k + 1]`` (t-1).

    Models (parameters estimated by statsmodels on the window only):
        random_walk: y_t = y_{t-1}
        ar1:         y_t = c + phi y_{t-1}                         (AutoReg, lags=1)
        ar1_diff:    dy_t = c + phi dy_{t-1}, y_t = y_{t-1} + dy_t (AutoReg on differences
                     = ARIMA(1,1,0) with drift, conditional MLE)
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


def window_bounds(n_rows: int, window_size: int, step_size: int, max_windows: int | None) -> list[tuple[int, int, int]]:
    """``(train_start, train_end, test_end)`` per window; rows ``train_end..test_end-1`` are forecast.

    The first window starts at row 1 so that its first state has a previous change.
    """
    if window_size + 2 > n_rows:
        raise DataError(
            f"window_size: the series has only {n_rows} rows; a window needs window_size + 2 rows "
            f"(a training window and at least one row to forecast) (got {window_size})"
        )
    bounds: list[tuple[int, int, int]] = []
    start = 1
    while start + window_size < n_rows and (max_windows is None or len(bounds) < max_windows):
        bounds.append((start, start + window_size, min(start + window_size + step_size, n_rows)))
        start += step_size
    return bounds


def run_backtest(config: BacktestConfig) -> dict[str, Any]:
    """Walk-forward backtest; writes ``windows.csv``, ``predictions.csv``, ``summary.json``
    and ``backtest.png`` to ``config.output`` and returns ``{"summary", "output", "windows",
    "predictions"}``."""
    import pandas as pd

    from pglab.run.device import resolve_device
    from pglab.run.progress import progress_bar
    from pglab.run.rundir import default_run_dir

    resolve_device(config.device)  # refuses cuda without a GPU; the tables themselves stay on the CPU
    series = load_data(config)
    bounds = window_bounds(len(series), config.window_size, config.step_size, config.windows)
    output_dir = Path(config.output or default_run_dir("backtest"))
    output_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    window_rows: list[dict[str, Any]] = []
    prediction_rows: list[dict[str, Any]] = []
    bar = progress_bar(len(bounds), desc=f"backtest ({config.algo}, {config.game.state_key})", unit="win")
    for index, (train_start, train_end, test_end) in enumerate(bounds):
        window_row, window_predictions = backtest_window(config, series, index, train_start, train_end, test_end)
        window_rows.append(window_row)
        prediction_rows.extend(window_predictions)
        bar.update(1)
    bar.close()
    predictions, windows = pd.DataFrame(prediction_rows), pd.DataFrame(window_rows)
    summary = {
        **summarise(predictions, windows),
        "series": series.name,
        "algorithm": config.algo,
        "state_key": config.game.state_key,
        "n_windows": len(bounds),
        "window_size": config.window_size,
        "step_size": config.step_size,
        "episodes": config.episodes,
        "feedback": config.feedback,
        "wall_s": time.perf_counter() - started,
    }
    write_backtest(output_dir, config, series, summary, windows, predictions)
    return {"summary": summary, "output": str(output_dir), "windows": windows, "predictions": predictions}


def backtest_window(
    config: BacktestConfig, series: ForecastSeries, index: int, train_start: int, train_end: int, test_end: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Window ``index``: train fresh learners on rows ``train_start..train_end-1``, then
    forecast rows ``train_end..test_end-1`` one step ahead with them and with the
    baselines fitted on the same rows. Returns the window's row of ``windows.csv`` and
    its rows of ``predictions.csv``."""
    window = series.slice(train_start, train_end)
    encoder = make_state_encoder(config.game, window)
    # Each window gets fresh learners and its own seeds: nothing learned on one window
    # leaks into another's out-of-sample rows except through its training data.
    learners = ForecastLearners.build(dataclasses.replace(config, seed=config.seed + 1000 * index))
    for _ in range(config.episodes):
        learners.episode(window, encoder)
    rows = range(train_end, test_end)
    learned = forecast_out_of_sample(series, rows, learners.forecaster, encoder, feedback=config.feedback)
    baselines = baseline_forecasts(
        window.target,
        window.exogenous,
        series.target[train_end - 2 : test_end],
        series.exogenous[train_end - 2 : test_end],
    )
    actual = series.target[train_end:test_end]
    methods = {"learned": learned, **baselines}
    window_row: dict[str, Any] = {
        "window": index,
        "train_start": series.dates[train_start],
        "train_end": series.dates[train_end - 1],
        "test_start": series.dates[train_end],
        "test_end": series.dates[test_end - 1],
        "n": len(rows),
        "states_seen": learners.forecaster.n_states,
    }
    for name, forecasts in methods.items():
        errors = actual - forecasts
        window_row[f"mae_{name}"] = float(np.mean(np.abs(errors)))
        window_row[f"rmse_{name}"] = float(np.sqrt(np.mean(errors**2)))
    predictions = [
        {
            "window": index,
            "date": series.dates[t],
            "actual": float(actual[k]),
            **{name: float(forecasts[k]) for name, forecasts in methods.items()},
        }
        for k, t in enumerate(rows)
    ]
    return window_row, predictions


def forecast_out_of_sample(
    series: ForecastSeries, rows: range, forecaster: QTableAgent, encoder: StateEncoder, *, feedback: bool
) -> np.ndarray:
    """float64[len(rows)]: the greedy one-step forecasts of ``series.target[t]`` from row
    ``t - 1``; with ``feedback``, the forecaster learns from each value once it is realised
    (:class:`~pglab.algos.tabular.IterativeFeedbackLoop`)."""
    online = IterativeFeedbackLoop(encoder=encoder)
    learned = []
    for t in rows:
        state = state_at(series, t - 1)
        forecast = state.value + forecaster.action_space.action_to_delta(forecaster.act(encoder(state), explore=False))
        learned.append(forecast)
        if feedback:
            online.update_from_realized(forecaster, [(state, forecast, float(series.target[t]))])
    return np.asarray(learned)


def write_backtest(
    output_dir: Path,
    config: BacktestConfig,
    series: ForecastSeries,
    summary: dict[str, Any],
    windows: Any,
    predictions: Any,
) -> None:
    """``windows.csv``, ``predictions.csv``, ``summary.json`` and ``backtest.png`` in ``output_dir``, atomically."""
    from pglab.run.atomic import atomic_write_json, atomic_write_text
    from pglab.run.config import config_to_dict

    atomic_write_text(output_dir / "windows.csv", windows.to_csv(index=False))
    atomic_write_text(output_dir / "predictions.csv", predictions.to_csv(index=False))
    atomic_write_json(output_dir / "summary.json", {"summary": summary, "config": config_to_dict(config)})
    plot_backtest(
        predictions,
        windows,
        output_dir / "backtest.png",
        title=f"{series.name}: {config.algo}, state_key={config.game.state_key}",
        target_label=target_label(series),
    )


def summarise(predictions, windows) -> dict[str, Any]:
    """Pooled MAE/RMSE per method, share of windows where the learner beats each baseline,
    and a Diebold-Mariano t statistic (absolute loss, one-step horizon) against each."""
    actual = predictions["actual"].to_numpy()
    out: dict[str, Any] = {"n_forecasts": int(actual.size), "methods": {}}
    learned_loss = np.abs(actual - predictions["learned"].to_numpy())
    for name in ("learned",) + BASELINES:
        errors = actual - predictions[name].to_numpy()
        entry = {"mae": float(np.mean(np.abs(errors))), "rmse": float(np.sqrt(np.mean(errors**2)))}
        if name != "learned":
            # d_t = |e_learned| - |e_baseline|; DM = mean(d) / (sd(d) / sqrt(n)); < -2 favours the learner.
            diff = learned_loss - np.abs(errors)
            sd = diff.std(ddof=1) if diff.size > 1 else float("nan")
            entry["dm_t_learned_minus_this"] = (
                float(diff.mean() / (sd / np.sqrt(diff.size))) if sd and sd > 0 else float("nan")
            )
            entry["windows_learned_better_mae"] = float(np.mean(windows["mae_learned"] < windows[f"mae_{name}"]))
        out["methods"][name] = entry
    return out


def target_label(series) -> str:
    """The target's column name from a series name (``macrodata:unemp~realgdp_growth`` ->
    ``unemp``), or ``y`` for sources without one (synthetic)."""
    head = series.name.split(" (", 1)[0]
    return head.rsplit(":", 1)[-1].split("~", 1)[0] if "~" in head else "y"


def backtest_figure(predictions, windows, *, title: str, target_label: str = "y"):
    """The backtest figure: actual and one-step forecasts (top), per-window MAE (bottom).

    Returns the matplotlib Figure (two axes, both with labelled x and y axes).
    """
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
    top.set_xlabel("forecast date (out of sample)")
    top.set_ylabel(f"{target_label} (series units)")
    top.set_title(title)
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    for name in ("learned",) + BASELINES:
        bottom.plot(
            windows["window"], windows[f"mae_{name}"], marker="o" if name == "learned" else None, ms=3, lw=1, label=name
        )
    bottom.set_xlabel("window")
    bottom.set_ylabel(f"out-of-sample MAE ({target_label} units)")
    bottom.legend(fontsize=8, ncol=5)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_backtest(predictions, windows, path: Path, *, title: str, target_label: str = "y") -> Path:
    """Write :func:`backtest_figure` to ``path`` (PNG, atomically)."""
    import os

    import matplotlib.pyplot as plt

    fig = backtest_figure(predictions, windows, title=title, target_label=target_label)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    os.replace(tmp, path)
    return path
