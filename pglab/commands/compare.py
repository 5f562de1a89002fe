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
* wall-clock seconds and simulated state-steps of training, and those needed to first
  reach 95% / 99% of ``V*`` at every quick-check point (from ``eval.csv``: the quick
  checks run every ``eval_interval`` iterations on fewer paths, so these are resolved to
  that interval and carry the quick checks' Monte Carlo noise).

Writes ``comparison.md``, ``comparison.csv`` and ``comparison.png`` into ``--out`` (a new
directory; an existing comparison is never overwritten).
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import tyro

from pglab.errors import ConfigError, UsageError
from pglab.run.config import parse_config
from pglab.validation import check_range


@dataclass(frozen=True)
class CompareConfig:
    run_dirs: Annotated[tuple[Path, ...], tyro.conf.Positional]
    """GHM run directories (each with config.json, eval.csv, evaluation.json, checkpoints/)"""
    out: Path | None = None
    """new folder for comparison.md/.csv/.png (default runs/compare-<timestamp>)"""
    targets: tuple[float, ...] = (95.0, 99.0)
    """% of V* whose first attainment (wall-clock, simulated steps) is reported"""
    residual: bool = True
    """compute each run's HJB residual (pglab validate's defaults)"""

    def __post_init__(self):
        if len(self.run_dirs) == 0:
            raise ConfigError("run_dirs", self.run_dirs, "give at least one run directory")
        for target in self.targets:
            check_range("targets", target, 0.0, 100.0, low_inclusive=False)


def _first_reaching(eval_rows: list[dict[str, str]], target: float) -> tuple[float | None, float | None]:
    """(wall-clock s, simulated steps) of the first quick check whose worst point is >= target %."""
    for row in eval_rows:
        value = row.get("eval/pct_optimal_min", "")
        if value not in ("", "nan") and float(value) >= target:
            return float(row["wall_time"]), float(row["sim_steps"])
    return None, None


def summarize_run(run_dir: Path, config: CompareConfig) -> dict[str, Any]:
    """The comparison row of one run directory (reads only)."""
    from pglab.algos.ghm_train import GHM_KINDS

    run_dir = Path(run_dir)
    config_path, evaluation_path, eval_csv = run_dir / "config.json", run_dir / "evaluation.json", run_dir / "eval.csv"
    for path in (config_path, evaluation_path, eval_csv):
        if not path.exists():
            hint = " (the run was interrupted or trained with --no-final_eval; finish it with --resume)" if path is evaluation_path else ""
            raise UsageError(f"run_dirs: {str(run_dir)!r} has no {path.name}{hint}")
    stored = json.loads(config_path.read_text())
    if stored.get("kind") not in GHM_KINDS:
        raise UsageError(f"run_dirs: {str(run_dir)!r} holds a {stored.get('kind')!r} run, not a GHM run ({', '.join(GHM_KINDS)})")
    evaluation = json.loads(evaluation_path.read_text())
    eval_rows = list(csv.DictReader(eval_csv.open()))
    last = eval_rows[-1] if eval_rows else {}
    row: dict[str, Any] = {
        "run": str(run_dir), "solver": stored["config"]["algo"], "iterations": evaluation["iteration"],
        "wall_time_s": float(last.get("wall_time", "nan")), "sim_steps": float(last.get("sim_steps", "nan")),
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
    headers = (["solver", "run"] + [f"% V* c={c:g}" for c in cash]
               + ["dividend barrier", "issues below", "HJB residual max", "V(0)", "wall s", "sim steps"]
               + [f"wall s to {t:g}%" for t in config.targets] + [f"steps to {t:g}%" for t in config.targets])
    body = []
    for row in rows:
        body.append([row["solver"], Path(row["run"]).name] + [_fmt(row.get(f"pct_c{c:g}"), ".2f") for c in cash]
                    + [_fmt(row["dividend_threshold"], ".3f"), _fmt(row["issuance_below"], ".3f"),
                       _fmt(row.get("hjb_residual_max"), ".2e"), _fmt(row.get("value_at_zero"), ".3f"),
                       _fmt(row["wall_time_s"], ".0f"), _fmt(row["sim_steps"], ".3g")]
                    + [_fmt(row[f"wall_s_to_{t:g}"], ".0f") for t in config.targets]
                    + [_fmt(row[f"steps_to_{t:g}"], ".3g") for t in config.targets])
    fd_residual = rows[0].get("fd_residual_max")
    body.append(["FD optimum", "(reference)"] + ["100.00" for _ in cash]
                + [_fmt(fd.get("dividend_rate"), ".3f"), _fmt(fd.get("issuance_rate"), ".3f"),
                   _fmt(fd_residual, ".2e"), "0.000", "—", "—"] + ["—"] * (2 * len(config.targets)))
    markdown = "\n".join(["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
                         + ["| " + " | ".join(line) + " |" for line in body])
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(headers)
    writer.writerows(body)
    return markdown, buffer.getvalue()


def plot_comparison(rows: list[dict[str, Any]], output: Path) -> Path:
    """Left: worst-point % of V* at the quick checks against wall-clock; right: % of V*
    at each initial cash in the final evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pglab.run.atomic import atomic_write_bytes

    figure, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for row in rows:
        eval_rows = list(csv.DictReader((Path(row["run"]) / "eval.csv").open()))
        points = [(float(r["wall_time"]), float(r["eval/pct_optimal_min"])) for r in eval_rows
                  if r.get("eval/pct_optimal_min") not in (None, "", "nan")]
        if points:
            curves.plot(*zip(*points), marker="o", label=f"{row['solver']} ({Path(row['run']).name})")
    curves.axhline(97.0, color="grey", linestyle="--", linewidth=0.8)
    curves.set_xlabel("training wall-clock (s)")
    curves.set_ylabel("worst % of V* (quick checks)")
    curves.set_ylim(bottom=max(0.0, min([c.get_ydata().min() for c in curves.lines[:-1]] + [80.0]) - 2))
    curves.legend(fontsize=8)
    cash = rows[0]["eval_cash"]
    width = 0.8 / len(rows)
    for index, row in enumerate(rows):
        positions = np.arange(len(cash)) + index * width
        bars.bar(positions, [row.get(f"pct_c{c:g}", 0.0) for c in cash], width=width, label=row["solver"])
    bars.set_xticks(np.arange(len(cash)) + 0.4 - width / 2, [f"c={c:g}" for c in cash])
    bars.axhline(100.0, color="black", linewidth=0.8)
    bars.axhline(97.0, color="grey", linestyle="--", linewidth=0.8)
    bars.set_ylim(min(min(row.get(f"pct_c{c:g}", 100.0) for c in cash) for row in rows) - 3, 101)
    bars.set_ylabel("% of V* (final evaluation)")
    bars.legend(fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return atomic_write_bytes(output, buffer.getvalue())


def compare(argv: list[str]) -> int:
    """``pglab compare RUN_DIR... [--out DIR]``."""
    from pglab.run.atomic import atomic_write_text

    config = parse_config(CompareConfig, argv, prog="pglab compare",
                          description="Compare GHM solver runs with each other and with the FD optimum.")
    rows = [summarize_run(run_dir, config) for run_dir in config.run_dirs]
    cash = rows[0]["eval_cash"]
    for row in rows[1:]:
        if row["eval_cash"] != cash:
            raise UsageError(f"run_dirs: {row['run']!r} was evaluated at initial cash {row['eval_cash']}, "
                             f"{rows[0]['run']!r} at {cash}; compare runs evaluated on the same grid")
    out = Path(config.out) if config.out is not None else Path("runs") / f"compare-{datetime.now():%Y%m%d-%H%M%S}"
    if (out / "comparison.md").exists():
        raise UsageError(f"out={str(out)!r}: already holds a comparison; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    markdown, table_csv = comparison_table(rows, config)
    atomic_write_text(out / "comparison.csv", table_csv)
    plot_comparison(rows, out / "comparison.png")
    atomic_write_text(out / "comparison.md", markdown + "\n")
    print(markdown)
    print(f"wrote {out / 'comparison.md'}, comparison.csv and comparison.png")
    return 0
