"""``pglab train forecast``, ``pglab evaluate forecast``, ``pglab evaluate CHECKPOINT`` (forecast
runs) and ``pglab backtest``: parse the flags, call :mod:`pglab.algos.forecast`, print.

Only the torch-free configs (:mod:`pglab.configs.forecast`) are imported before the flags
are parsed, so ``--help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from pglab.configs.forecast import (
    BacktestConfig,
    ForecastEvaluateConfig,
    ForecastModelEvaluateConfig,
    ForecastTrainConfig,
)
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, run_dir_of, split_json_flag
from pglab.validation import check_new_run_dir, check_output_file, check_output_path


# --- train -------------------------------------------------------------------------------------
def train(argv: list[str]) -> int:
    """``pglab train forecast [FLAGS]``."""
    from pglab.run.config import parse_flags

    as_json, argv = split_json_flag(argv)
    parsed = parse_flags(
        ForecastTrainConfig,
        argv,
        prog="pglab train forecast",
        description="Train a tabular forecaster (Q-learning, WoLF-PHC or RARL) on a macro series.",
    )
    check_new_run_dir(parsed.config)
    check_output_file("output", parsed.config.output)
    from pglab.algos.forecast import train_forecast

    result = train_forecast(parsed.config, given=parsed.given, echo=echo_for(as_json))
    if not result["interrupted"]:
        emit(train_summary(result, trained_game_reference(result["run_dir"])), as_json)
    return result["exit_code"]


def trained_game_reference(run_dir: str) -> dict[str, Any]:
    """:func:`~pglab.algos.forecast.game_reference` of the run's final checkpoint."""
    from pglab.algos.forecast import KINDS, agent_from_checkpoint, game_reference
    from pglab.run.checkpoint import load_checkpoint_file

    return game_reference(agent_from_checkpoint(load_checkpoint_file(run_dir, kinds=KINDS)))


def game_figures(game: dict[str, Any]) -> tuple[list[Figure], list[Figure]]:
    """``(result, reference)`` figures of :func:`~pglab.algos.forecast.game_reference`:
    the learned rule's mean absolute error in its training game beside the game's Nash
    equilibrium and AR(1) on the same rounds (and, for RARL, with the adversary)."""
    states = f"{game['states_at_nash']} of {game['states']}"
    result = [
        Figure("training game: learned rule MAE", game["learned_mae"], ".4f"),
        Figure("gap to the Nash equilibrium", game["nash_gap"], ".4f", note=f"(Nash action in {states} states)"),
    ]
    reference = [Figure("Nash equilibrium MAE", game["nash_mae"], ".4f")]
    if game["ar1_mae"] is not None:  # None: too few training rows to fit it
        reference.append(Figure("AR(1) MAE", game["ar1_mae"], ".4f"))
    if "robust_nash_mae" in game:
        result.append(
            Figure("against a best-responding adversary: learned rule MAE", game["robust_learned_mae"], ".4f")
        )
        reference.append(Figure("Nash equilibrium with the adversary MAE", game["robust_nash_mae"], ".4f"))
    return result, reference


def train_summary(result: dict[str, Any], game: dict[str, Any]) -> Summary:
    """The learner's mean reward over its last episodes, and its rule in the training game
    against the game's Nash equilibrium and AR(1) (:func:`game_figures`; no target: no
    verdict); ``pglab evaluate RUN`` judges its forecasts out of sample."""
    brief = {k: v for k, v in result["summary"].items() if k not in ("rewards_history", "epoch_results")}
    figures = [Figure(key.replace("_", " "), value, ".4f") for key, value in brief.items() if "mean_reward" in key]
    epochs = result["summary"].get("epoch_results") or []
    if epochs:  # RARL: the last epoch's mean reward, and which player learned in it
        last = epochs[-1]
        figures.append(
            Figure(f"mean reward of the last epoch ({last['training']} learning)", last["mean_reward"], ".4f")
        )
    run_dir = result["run_dir"]
    game_result, reference = game_figures(game)
    algo = result["config"].algo  # the run's own (a resumed run's)
    return Summary(
        f"pglab train forecast ({algo}): {brief.get('n_episodes', brief.get('total_epochs'))} episodes",
        figures + game_result,
        reference,
        notes=[
            "training game: the training rows, each round weighted as the episodes play it; Nash equilibrium: "
            "the best forecast delta of each state (exact); pglab evaluate RUN judges the forecasts out of sample"
        ],
        run_dir=run_dir,
        next=evaluate_command(run_dir),
        details={**brief, "outputs": result["outputs"], "run_dir": run_dir, "game": game},
    )


def evaluate_summary(title: str, result: dict[str, Any], run_dir: Any = None) -> Summary:
    """Forecast errors (MAE, RMSE) on the evaluated rows beside the random walk's (the
    previous value as the forecast) on the same rows, clean and, where an adversary
    played, attacked; for a training checkpoint also beside AR(1), AR(1) on differences and
    the training game's Nash rule (clean), and the learned rule in its training game
    (:func:`game_figures`). No target: no verdict."""
    figures, reference = [], []
    for name in ("clean", "attacked", "best_response"):
        part = result.get(name)
        if not isinstance(part, dict) or "mae" not in part:
            continue
        label = "" if name == "clean" else f"{name.replace('_', ' ')} "
        figures += [Figure(f"{label}MAE", part["mae"], ".4f"), Figure(f"{label}RMSE", part["rmse"], ".4f")]
        reference += [
            Figure(f"random walk {label}MAE", part["mae_random_walk"], ".4f"),
            Figure(f"random walk {label}RMSE", part["rmse_random_walk"], ".4f"),
        ]
    clean = result.get("clean") or {}
    if "mae_ar1" in clean:  # absent: too few training rows to fit it
        reference += [
            Figure("AR(1) MAE", clean["mae_ar1"], ".4f"),
            Figure("AR(1) RMSE", clean["rmse_ar1"], ".4f"),
            Figure("AR(1) on differences MAE", clean["mae_ar1_diff"], ".4f"),
        ]
    if "mae_nash" in clean:
        reference.append(Figure("Nash rule MAE", clean["mae_nash"], ".4f"))
    if "game" in result:
        game_result, game_reference = game_figures(result["game"])
        figures += game_result
        reference += [Figure(f"training game: {figure.label}", figure.value, figure.fmt) for figure in game_reference]
    rows = result.get("rows")
    where = f", rows {rows[0]}..{rows[1] - 1}" if isinstance(rows, list) and len(rows) == 2 else ""
    return Summary(f"{title} ({result['series']}{where})", figures, reference, run_dir=run_dir, details=result)


# --- evaluate ----------------------------------------------------------------------------------
def evaluate(argv: list[str]) -> int:
    """``pglab evaluate forecast --model PATH [--adversary PATH] [FLAGS]``."""
    from pglab.run.config import parse_config

    as_json, argv = split_json_flag(argv)
    config = parse_config(
        ForecastModelEvaluateConfig,
        argv,
        prog="pglab evaluate forecast",
        description="Evaluate a saved forecaster (optionally against a saved adversary).",
    )
    check_output_file("output", config.output)
    from pglab.algos.forecast import evaluate_model
    from pglab.run.atomic import atomic_write_json
    from pglab.run.device import resolve_device

    resolve_device(config.device)  # refuses cuda without a GPU; the tables stay on the CPU
    result = evaluate_model(config)
    if config.output is not None:
        atomic_write_json(config.output, result)
    emit(evaluate_summary(f"pglab evaluate forecast --model {config.model}", result), as_json)
    return 0


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]`` for checkpoints of kind ``forecast-*``."""
    from pglab.run.config import parse_config

    as_json, argv = split_json_flag(argv)
    config = parse_config(
        ForecastEvaluateConfig,
        argv,
        prog="pglab evaluate CHECKPOINT",
        description="Evaluate a forecast training checkpoint on its run's data (out of sample by default).",
    )
    check_output_file("output", config.output)
    from pglab.algos.forecast import KINDS, agent_from_checkpoint, evaluate_agent
    from pglab.run.atomic import atomic_write_json
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.device import resolve_device

    device = resolve_device(config.device)
    agent = agent_from_checkpoint(load_checkpoint_file(config.checkpoint, kinds=KINDS), device=device)
    result = evaluate_agent(
        agent,
        start_row=config.start_row,
        end_row=config.end_row,
        with_adversary=config.with_adversary,
        checkpoint=str(config.checkpoint),
    )
    if config.output is not None:
        atomic_write_json(config.output, result)
    emit(evaluate_summary(f"pglab evaluate {config.checkpoint}", result, run_dir_of(config.checkpoint)), as_json)
    return 0


# --- backtest ----------------------------------------------------------------------------------
def backtest(argv: list[str]) -> int:
    """``pglab backtest [FLAGS]``."""
    from pglab.run.config import parse_config

    config = parse_config(
        BacktestConfig,
        argv,
        prog="pglab backtest",
        description="Walk-forward backtest of a tabular forecaster against random-walk and AR baselines.",
    )
    check_output_path("output", config.output, folder=True)
    from pglab.algos.forecast import run_backtest

    result = run_backtest(config)
    print(format_summary(result["summary"]))
    print(f"results in {result['output']}")
    return 0


def format_summary(summary: dict[str, Any]) -> str:
    """The backtest's table: pooled MAE/RMSE per method, DM t and win share against the learner."""
    lines = [
        f"{summary['series']}  algo={summary['algorithm']}  state_key={summary['state_key']}  "
        f"windows={summary['n_windows']}  forecasts={summary['n_forecasts']}",
        f"{'method':<12} {'MAE':>8} {'RMSE':>8} {'DM t':>8} {'win%':>6}",
    ]
    for name, entry in summary["methods"].items():
        dm = entry.get("dm_t_learned_minus_this")
        share = entry.get("windows_learned_better_mae")
        lines.append(
            f"{name:<12} {entry['mae']:8.4f} {entry['rmse']:8.4f} "
            f"{'' if dm is None else f'{dm:8.2f}':>8} {'' if share is None else f'{100 * share:5.0f}%':>6}"
        )
    lines.append(
        "DM t: learned minus baseline absolute error (< -2: the learner is significantly better); "
        "win%: windows where the learner's MAE is lower"
    )
    return "\n".join(lines)
