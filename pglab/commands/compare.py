"""``pglab compare RUN_DIR...``: one table and one figure comparing GHM solvers.

For each run directory (``pglab train ghm --algo mc|pathwise|actor-critic``) and for the
finite-difference optimum, the table has:

* the deterministic policy's value at the final evaluation's initial-cash grid as % of
  ``V*`` (from the run's ``evaluation.json``: >= 10,000 paths, tail-bounded);
* the policy thresholds (dividend barrier, highest cash with issuance) against the FD
  ones;
* the HJB residual ``max |rho V - max_u H|`` on the interior and ``V(0)``
  (:func:`pglab.commands.validate.validate_checkpoint`, computed afresh; not written into
  the runs);
* wall-clock seconds and simulated path-steps (``env_steps``) of training, and those needed to first
  reach 95% / 99% of ``V*`` at every quick-check point (from ``eval.csv``: the quick
  checks run every ``eval_interval`` iterations, so these are resolved to that interval;
  they use the exact FD value of the policy, ``exact/pct_optimal_min``, where the run logged
  it, and the simulated quick check, with its Monte Carlo noise, for older runs).

Writes ``comparison.md``, ``comparison.csv`` and ``comparison.png`` into ``--output`` (a
new directory; an existing comparison is never overwritten). The figure's numbers come
from :func:`comparison_plot_data`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from pglab.configs.ghm import TARGET_PCT, CompareConfig
from pglab.errors import UsageError
from pglab.run.config import parse_flags
from pglab.validation import check_output_path

__all__ = ["CompareConfig", "compare", "comparison_plot_data", "comparison_table", "plot_comparison", "summarize_run"]


def _quick_check_min(row: dict[str, str]) -> str:
    """A quick check's worst point (% of V*): exact (FD) where logged, else simulated."""
    value = row.get("exact/pct_optimal_min", "")
    return value if value not in (None, "", "nan") else row.get("eval/pct_optimal_min", "")


def _env_steps(row: dict[str, str]) -> float:
    """A quick check's simulated path-steps so far (``env_steps``; ``sim_steps`` in the
    eval.csv of runs made by an older pglab)."""
    return float(row.get("env_steps", row.get("sim_steps", "nan")))


def _first_reaching(eval_rows: list[dict[str, str]], target: float) -> tuple[float | None, float | None]:
    """(wall-clock s, simulated steps) of the first quick check whose worst point is >= target %."""
    for row in eval_rows:
        value = _quick_check_min(row)
        if value not in ("", "nan") and float(value) >= target:
            return float(row["wall_time"]), _env_steps(row)
    return None, None


def summarize_run(run_dir: Path, config: CompareConfig) -> dict[str, Any]:
    """The comparison row of one run directory (reads only)."""
    from pglab.configs.ghm import GHM_KINDS, ONE_STATE_MODELS

    run_dir = Path(run_dir)
    config_path, evaluation_path, eval_csv = run_dir / "config.json", run_dir / "evaluation.json", run_dir / "eval.csv"
    for path in (config_path, evaluation_path, eval_csv):
        if not path.exists():
            hint = (
                " (the run was interrupted or trained with --no-final-eval; finish it with --resume)"
                if path is evaluation_path
                else ""
            )
            raise UsageError(f"run_dirs: {str(run_dir)!r} has no {path.name}{hint}")
    stored = json.loads(config_path.read_text())
    if stored.get("kind") not in GHM_KINDS:
        raise UsageError(
            f"run_dirs: {str(run_dir)!r} holds a {stored.get('kind')!r} run, not a GHM run ({', '.join(GHM_KINDS)})"
        )
    model = stored["config"].get("model", "ghm")
    if model not in ONE_STATE_MODELS:
        raise UsageError(
            f"run_dirs: {str(run_dir)!r} trained --model {model}, whose state has more than one variable; pglab "
            f"compare compares runs of the one-state models ({', '.join(ONE_STATE_MODELS)})"
        )
    evaluation = json.loads(evaluation_path.read_text())
    eval_rows = list(csv.DictReader(eval_csv.open()))
    last = eval_rows[-1] if eval_rows else {}
    row: dict[str, Any] = {
        "run": str(run_dir),
        "solver": stored["config"]["algo"],
        "seed": stored["config"].get("seed"),
        "iterations": evaluation["iteration"],
        "wall_time_s": float(last.get("wall_time", "nan")),
        "env_steps": _env_steps(last) if last else math.nan,
        "dividend_threshold": evaluation["learned_thresholds"]["dividend_rate"],
        "issuance_below": evaluation["learned_thresholds"]["issuance_rate"],
    }
    for point in evaluation["rows"]:
        row[f"pct_c{point['initial_cash']:g}"] = point["pct_of_optimum"]
    row["pct_min"] = min(point["pct_of_optimum"] for point in evaluation["rows"])
    for target in config.targets:
        row[f"wall_s_to_{target:g}"], row[f"steps_to_{target:g}"] = _first_reaching(eval_rows, target)
    if config.residual:
        from pglab.commands.validate import ValidateConfig, validate_checkpoint

        payload, _, _, _ = validate_checkpoint(ValidateConfig(checkpoint=run_dir / "checkpoints"))
        learned = payload["learned"]
        row["hjb_residual_max"] = learned["residual_optimal"]["max"] if learned["residual_optimal"] else None
        row["hjb_residual_rms"] = learned["residual_optimal"]["rms"] if learned["residual_optimal"] else None
        row["value_at_zero"] = learned["value_at_zero"]
        row["fd_residual_max"] = payload["fd_reference"]["residual_optimal"]["max"]
    row["fd_thresholds"] = evaluation["fd_thresholds"]
    row["eval_cash"] = [point["initial_cash"] for point in evaluation["rows"]]
    return row


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, spec)


def comparison_table(rows: list[dict[str, Any]], config: CompareConfig) -> tuple[str, str]:
    """``(markdown, csv)`` of the comparison, the FD optimum as the last row."""
    cash = rows[0]["eval_cash"]
    fd = rows[0]["fd_thresholds"]
    headers = (
        ["solver", "run"]
        + [f"% V* c={c:g}" for c in cash]
        + ["dividend barrier", "issues below", "HJB residual max", "V(0)", "wall s", "sim steps"]
        + [f"wall s to {t:g}%" for t in config.targets]
        + [f"steps to {t:g}%" for t in config.targets]
    )
    body = []
    for row in rows:
        body.append(
            [row["solver"], Path(row["run"]).name]
            + [_fmt(row.get(f"pct_c{c:g}"), ".2f") for c in cash]
            + [
                _fmt(row["dividend_threshold"], ".3f"),
                _fmt(row["issuance_below"], ".3f"),
                _fmt(row.get("hjb_residual_max"), ".2e"),
                _fmt(row.get("value_at_zero"), ".3f"),
                _fmt(row["wall_time_s"], ".0f"),
                _fmt(row["env_steps"], ".3g"),
            ]
            + [_fmt(row[f"wall_s_to_{t:g}"], ".0f") for t in config.targets]
            + [_fmt(row[f"steps_to_{t:g}"], ".3g") for t in config.targets]
        )
    fd_residual = rows[0].get("fd_residual_max")
    body.append(
        ["FD optimum", "(reference)"]
        + ["100.00" for _ in cash]
        + [
            _fmt(fd.get("dividend_rate"), ".3f"),
            _fmt(fd.get("issuance_rate"), ".3f"),
            _fmt(fd_residual, ".2e"),
            "0.000",
            "—",
            "—",
        ]
        + ["—"] * (2 * len(config.targets))
    )
    markdown = "\n".join(
        ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
        + ["| " + " | ".join(line) + " |" for line in body]
    )
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(headers)
    writer.writerows(body)
    return markdown, buffer.getvalue()


def _axis_range(values: list[float]) -> tuple[float, float]:
    """A % of V* axis that shows all the data and the target (:data:`TARGET_PCT`) in context: from
    ``min(90, lowest - 2)`` (not below 0) to ``max(101, highest + 1)``."""
    low = min([90.0] + [v - 2.0 for v in values])
    high = max([101.0] + [v + 1.0 for v in values])
    return max(0.0, low), high


def comparison_plot_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The numbers and labels of ``comparison.png``.

    Returns a dict with ``title``; ``target`` (:data:`TARGET_PCT`) and ``target_label``; ``curves``: per
    run ``{"label", "wall_time", "pct"}`` (the quick checks' worst-point % of V* against
    training wall-clock, from eval.csv); ``bars``: per run ``{"label", "pct"}`` (% of V*
    at each of ``cash`` in the final evaluation); ``curve_ylim`` and ``bar_ylim``. Labels
    name the solver and its seed (``mc, seed 42``); runs alike in both get ``#2``, ``#3``.
    """
    labels: list[str] = []
    for row in rows:
        label = f"{row['solver']}, seed {row.get('seed')}"
        repeats = sum(1 for previous in labels if previous.split(" #")[0] == label)
        labels.append(label if repeats == 0 else f"{label} #{repeats + 1}")
    curves: list[dict[str, Any]] = []
    curve_values: list[float] = []
    for label, row in zip(labels, rows, strict=False):
        with (Path(row["run"]) / "eval.csv").open() as handle:
            eval_rows = list(csv.DictReader(handle))
        points = [
            (float(r["wall_time"]), float(_quick_check_min(r)))
            for r in eval_rows
            if _quick_check_min(r) not in (None, "", "nan")
        ]
        curves.append({"label": label, "wall_time": [p[0] for p in points], "pct": [p[1] for p in points]})
        curve_values += [p[1] for p in points]
    cash = rows[0]["eval_cash"]
    bars = [
        {"label": label, "pct": [row.get(f"pct_c{c:g}") for c in cash]}
        for label, row in zip(labels, rows, strict=False)
    ]
    bar_values = [float(v) for bar in bars for v in bar["pct"] if v is not None]
    runs = f"{len(rows)} run{'' if len(rows) == 1 else 's'}"
    return {
        "title": f"GHM solvers against the finite-difference optimum V* ({runs})",
        "target": TARGET_PCT,
        "target_label": f"target {TARGET_PCT:g} % of V*",
        "cash": cash,
        "curves": curves,
        "bars": bars,
        "curve_ylim": _axis_range(curve_values),
        "bar_ylim": _axis_range(bar_values),
    }


def plot_comparison(rows: list[dict[str, Any]], output: Path) -> Path:
    """Left: worst-point % of V* at the quick checks against wall-clock; right: % of V*
    at each initial cash in the final evaluation (data: :func:`comparison_plot_data`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pglab.run.atomic import atomic_write_bytes

    data = comparison_plot_data(rows)
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.8))
    for curve in data["curves"]:
        if curve["pct"]:
            curves.plot(curve["wall_time"], curve["pct"], marker="o", label=curve["label"])
    curves.axhline(data["target"], color="grey", linestyle="--", linewidth=0.8, label=data["target_label"])
    curves.set_xlabel("training wall-clock (s)")
    curves.set_ylabel("worst % of V* over the initial cash (quick checks)")
    curves.set_title("During training")
    curves.set_ylim(*data["curve_ylim"])
    curves.legend(fontsize=8)
    cash = data["cash"]
    width = 0.8 / len(data["bars"])
    for index, bar in enumerate(data["bars"]):
        positions = np.arange(len(cash)) + index * width
        bars.bar(positions, [0.0 if v is None else v for v in bar["pct"]], width=width, label=bar["label"])
    bars.set_xticks(np.arange(len(cash)) + 0.4 - width / 2, [f"c={c:g}" for c in cash])
    bars.axhline(100.0, color="black", linewidth=0.8, label="V* (FD optimum)")
    bars.axhline(data["target"], color="grey", linestyle="--", linewidth=0.8, label=data["target_label"])
    bars.set_ylim(*data["bar_ylim"])
    bars.set_ylabel("% of V* (final evaluation)")
    bars.set_title("Final evaluation")
    bars.legend(fontsize=8)
    figure.suptitle(data["title"])
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return atomic_write_bytes(output, buffer.getvalue())


def compare(argv: list[str]) -> int:
    """``pglab compare RUN_DIR... [--output DIR]``."""
    config = parse_flags(
        CompareConfig,
        argv,
        prog="pglab compare",
        description="Compare GHM solver runs with each other and with the FD optimum.",
    ).config
    check_output_path("output", config.output, folder=True)
    from pglab.run.atomic import atomic_write_text

    rows = [summarize_run(run_dir, config) for run_dir in config.run_dirs]
    cash = rows[0]["eval_cash"]
    for row in rows[1:]:
        if row["eval_cash"] != cash:
            raise UsageError(
                f"run_dirs: {row['run']!r} was evaluated at initial cash {row['eval_cash']}, "
                f"{rows[0]['run']!r} at {cash}; compare runs evaluated on the same grid"
            )
    from pglab.run.rundir import default_run_dir  # imports torch: not at --help time

    out = Path(config.output) if config.output is not None else default_run_dir("compare")
    if (out / "comparison.md").exists():
        raise UsageError(f"output: already holds a comparison; choose another --output (got {str(out)!r})")
    out.mkdir(parents=True, exist_ok=True)
    markdown, table_csv = comparison_table(rows, config)
    atomic_write_text(out / "comparison.csv", table_csv)
    plot_comparison(rows, out / "comparison.png")
    atomic_write_text(out / "comparison.md", markdown + "\n")
    print(markdown)
    print(f"wrote {out / 'comparison.md'}, comparison.csv and comparison.png")
    return 0
