"""``pglab train maxk-pomo``, ``pglab evaluate maxk-pomo`` and ``pglab evaluate CHECKPOINT``.

Argument parsing and printing only: the trainer is :mod:`pglab.algos.maxk_train`, the
model, its agent and the test-set evaluation are :mod:`pglab.algos.maxk_pomo`, the
configs :mod:`pglab.configs.maxk` (torch-free, so ``--help`` never imports torch).
See ``docs/maxk.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

from pglab.configs.maxk import MaxKEvalConfig, MaxKPOMOTrainConfig
from pglab.errors import UsageError
from pglab.extras import require
from pglab.report import Figure, Summary, echo_for, emit, evaluate_command, run_dir_of, split_json_flag
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir, check_output_file


def _require_co() -> None:
    """rl4co is the optional ``co`` extra: say so in one line instead of an ImportError."""
    require("rl4co", needed_by="maxk-pomo")


def train(argv: list[str]) -> int:
    """``pglab train maxk-pomo [FLAGS]``; 0, or 130 after SIGINT/SIGTERM (checkpoint saved)."""
    as_json, argv = split_json_flag(argv)
    parsed = parse_flags(
        MaxKPOMOTrainConfig, argv, prog="pglab train maxk-pomo", description=MaxKPOMOTrainConfig.__doc__
    )
    check_new_run_dir(parsed.config)
    _require_co()
    from pglab.algos.maxk_train import train_maxk_pomo

    result = train_maxk_pomo(parsed.config, given=parsed.given, echo=echo_for(as_json))
    if not result["interrupted"]:
        emit(train_summary(result), as_json)
    return result["exit_code"]


def train_summary(result: dict[str, Any]) -> Summary:
    """The last logged batch's mean and best-of-n tour lengths; the gap to the optimal tour
    (elkai) is ``pglab evaluate RUN``'s."""
    last, config, run_dir = result["last"], result["config"], result["run_dir"]
    figures = []
    if "stats/tour_length" in last:
        figures = [
            Figure("mean tour length (last batch)", last["stats/tour_length"], ".4f"),
            Figure(f"best of {config.num_loc}", last["stats/best_of_n_tour_length"], ".4f"),
        ]
    return Summary(
        f"pglab train maxk-pomo: {result['step']} steps",
        figures,
        notes=["the gap to the optimal tour (elkai): pglab evaluate RUN"],
        run_dir=run_dir,
        next=evaluate_command(run_dir),
        details={"run_dir": str(run_dir), "step": result["step"], "last": last},
    )


def evaluate_summary(rows: list[dict[str, Any]], run_dir: Any) -> Summary:
    """Each model's max@k tour length (and gap to the elkai reference where computed); the
    reference is elkai's tour. No target: no verdict."""
    has_gap = "maxk_gap_pct" in rows[0]
    k = rows[0]["k"]
    result = []
    for row in rows:
        result.append(Figure(f"{row['label']} max@{k} tour", row["maxk_length"], ".4f"))
        if has_gap:
            result.append(Figure("gap to elkai", row["maxk_gap_pct"], ".2f", "%"))
    reference = [Figure("elkai (LKH) tour", rows[0]["reference_length"], ".4f")] if has_gap else []
    return Summary(
        f"pglab evaluate maxk-pomo: TSP{rows[0]['num_loc']}, {rows[0]['num_instances']} instances",
        result,
        reference,
        notes=[] if has_gap else ["no optimal reference computed (elkai not installed)"],
        run_dir=run_dir,
        details={"rows": rows},
    )


def format_rows(rows: list[dict[str, Any]]) -> str:
    k = rows[0]["k"]
    n = rows[0]["num_loc"]
    columns = [
        ("greedy", "greedy"),
        (f"max@{k}", "maxk"),
        (f"best of {n}", "sample_best"),
        ("sample mean", "sample_mean"),
    ]
    has_gap = "greedy_gap_pct" in rows[0]
    header = f"{'model':<24} {'steps':>6} " + " ".join(f"{title:>19}" for title, _ in columns)
    lines = [
        f"TSP{n}, {rows[0]['num_instances']} instances; tour length" + (" (gap % to elkai)" if has_gap else ""),
        header,
    ]
    for row in rows:
        cells = []
        for _, key in columns:
            cell = f"{row[key + '_length']:.4f}"
            if has_gap:
                cell += f" ({row[key + '_gap_pct']:.2f}%)"
            cells.append(f"{cell:>19}")
        lines.append(f"{row['label']:<24} {row['step']:>6} " + " ".join(cells))
    if has_gap:
        lines.append(f"{'elkai (LKH)':<24} {'':>6} {rows[0]['reference_length']:>19.4f}")
    if len(rows) > 1:
        lines.append(f"paired difference to {rows[0]['label']} (mean ± standard error over instances; < 0: shorter)")
        for row in rows[1:]:
            cells = [f"{row[key + '_diff_vs_first']:+.4f} ± {row[key + '_diff_vs_first_se']:.4f}" for _, key in columns]
            lines.append(f"{row['label']:<24} {row['step']:>6} " + " ".join(f"{cell:>19}" for cell in cells))
    return "\n".join(lines)


def evaluate(argv: list[str]) -> int:
    """``pglab evaluate maxk-pomo --checkpoints RUN [RUN ...] [FLAGS]``."""
    as_json, argv = split_json_flag(argv)
    config = parse_flags(
        MaxKEvalConfig, argv, prog="pglab evaluate maxk-pomo", description=MaxKEvalConfig.__doc__
    ).config
    check_output_file("output", config.output)  # before minutes of evaluation, not after
    _require_co()
    from pglab.algos.maxk_pomo import evaluate_models

    rows = evaluate_models(config, echo=echo_for(as_json))
    echo_for(as_json)(format_rows(rows))
    if config.output is not None:
        from pglab.run.atomic import atomic_write_json
        from pglab.run.config import config_to_dict

        atomic_write_json(config.output, {"rows": rows, "config": config_to_dict(config)})
    run_dir = run_dir_of(config.checkpoints[0]) if len(config.checkpoints) == 1 else None
    emit(evaluate_summary(rows, run_dir), as_json)
    return 0


def evaluate_checkpoint(argv: list[str]) -> int:
    """``pglab evaluate CHECKPOINT [FLAGS]`` for a checkpoint of kind ``maxk-pomo``."""
    if not argv:
        raise UsageError("evaluate: give a checkpoint path")
    return evaluate(["--checkpoints", argv[0], *argv[1:]])


# Names re-exported from pglab.algos (imported on first use, so that importing this
# module stays torch-free).
_MOVED = {
    "train_maxk_pomo": "pglab.algos.maxk_train",
    "agent_from_checkpoint": "pglab.algos.maxk_pomo",
    "build_model": "pglab.algos.maxk_pomo",
    "load_model": "pglab.algos.maxk_pomo",
    "evaluate_models": "pglab.algos.maxk_pomo",
    "reference_tour_lengths": "pglab.algos.maxk_pomo",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["train", "evaluate", "evaluate_checkpoint", "format_rows", "MaxKPOMOTrainConfig", "MaxKEvalConfig"]
