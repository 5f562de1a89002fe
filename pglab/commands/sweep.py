"""``pglab sweep ghm``: train on a grid of calibrations and compare with the FD truth.

Only the torch-free config (:mod:`pglab.configs.sweep`) is imported before the command
line is parsed, so ``--help`` never imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pglab.configs.ghm import TARGET_PCT, THRESHOLD_TOLERANCE
from pglab.configs.sweep import GHMSweepConfig
from pglab.report import Figure, Summary, echo_for, emit, split_json_flag, verdict
from pglab.run.config import parse_flags
from pglab.validation import check_new_run_dir


def ghm(argv: list[str]) -> int:
    """``pglab sweep ghm --sigma 0.1 0.2 0.3 [--rho 0.08 0.1] [FLAGS]``: see :mod:`pglab.algos.ghm_sweep`."""
    as_json, argv = split_json_flag(argv)
    parsed = parse_flags(
        GHMSweepConfig,
        argv,
        prog="pglab sweep ghm",
        description="Comparative statics of the GHM model: learned policies against the FD optimum "
        "on a grid of calibrations.",
    )
    check_new_run_dir(parsed.config)
    from pglab.algos.ghm_sweep import missing_notes, run_sweep

    rows, sweep_dir = run_sweep(parsed.config, given=parsed.given, echo=echo_for(as_json))
    emit(sweep_summary(rows, sweep_dir, missing_notes(rows)), as_json)
    return 0


def sweep_summary(rows: list[dict[str, Any]], sweep_dir: Path, notes: list[str]) -> Summary:
    """How many runs reach the target of :data:`TARGET_PCT` at every initial state, the
    worst run, and how many runs' learned thresholds lie within :data:`THRESHOLD_TOLERANCE`
    of the FD ones (of the runs where both exist); the reference is each calibration's FD
    optimum."""
    worst = {row["run"]: min(value for key, value in row.items() if key.startswith("pct_")) for row in rows}
    met = sum(1 for value in worst.values() if value >= TARGET_PCT)
    worst_run = min(worst, key=lambda run: worst[run])
    return Summary(
        f"pglab sweep ghm: {len(rows)} runs",
        [
            Figure(f"runs at >= {TARGET_PCT:g}% of V* at every initial state", f"{met} of {len(rows)}"),
            Figure(f"worst % of V* ({worst_run})", worst[worst_run], ".2f", "%"),
            *threshold_counts(rows),
        ],
        [Figure("V* (each calibration's finite-difference optimum)", 100.0, ".0f", "%")],
        verdict=verdict(f"every run >= {TARGET_PCT:g}% of V*", met == len(rows), f"{met} of {len(rows)}"),
        notes=notes,
        run_dir=sweep_dir,
        details={"sweep_dir": str(sweep_dir), "totals": sweep_totals(rows, met, worst[worst_run]), "rows": rows},
    )


def sweep_totals(rows: list[dict[str, Any]], met: int, worst: float) -> dict[str, Any]:
    """The sweep's figures under fixed names (``--json``'s ``totals``): runs, runs at the
    target, the worst % of V*, and per threshold the runs within tolerance and the largest
    ``|learned - FD|`` (``None`` where no run has both)."""
    from pglab.commands.ghm import threshold_within_tolerance

    totals: dict[str, Any] = {"runs": len(rows), "runs_at_target": met, "worst_pct": worst}
    for key in ("barrier", "issuance"):
        pairs = [(row.get(f"{key}_rl"), row.get(f"{key}_fd")) for row in rows]
        found = [(float(learned), float(fd)) for learned, fd in pairs if learned is not None and fd is not None]
        totals[f"{key}_within_tolerance"] = sum(bool(threshold_within_tolerance(*pair)) for pair in found)
        totals[f"{key}_judged"] = len(found)
        totals[f"largest_{key}_error"] = max((abs(learned - fd) for learned, fd in found), default=None)
    return totals


def threshold_counts(rows: list[dict[str, Any]]) -> list[Figure]:
    """Per threshold, ``k of n``: the runs whose learned dividend barrier (issuance point)
    lies within :data:`THRESHOLD_TOLERANCE` of the FD one, of the ``n`` runs where both exist."""
    from pglab.commands.ghm import threshold_within_tolerance

    figures = []
    for key, name in (("barrier", "dividend barrier"), ("issuance", "issuance point")):
        judged = [threshold_within_tolerance(row.get(f"{key}_rl"), row.get(f"{key}_fd")) for row in rows]
        found = [within for within in judged if within is not None]
        if found:
            figures.append(
                Figure(f"runs with the {name} within {THRESHOLD_TOLERANCE:g} of FD", f"{sum(found)} of {len(found)}")
            )
    return figures
