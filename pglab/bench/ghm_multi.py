"""``pglab bench ghm-multi``: the GHM models with several states, trained with their defaults, against their exact V*.

For ``--model divisions`` (each of ``--divisions``), ``regimes`` or ``ou`` and each seed, one
``pglab train ghm --model MODEL --seed SEED --eval_quick_paths Q`` run (the trainer's
defaults otherwise), in a process of its own, one after the other. Reported per run:

* the final table's ``% of V*`` at every evaluation point (the simulated value of the
  learned deterministic policy over the exact reference: the sum of one-division FD
  solutions, the coupled per-regime FD solution, the 2-D FD solution) and its worst point;
* the run's wall-clock and CPU seconds (the trainer runs on one thread, so its CPU time is
  the wall-clock time the run takes on an idle machine), and the load average around it;
* ``perf/step_s`` (wall-clock seconds per iteration, from ``metrics.jsonl``): its median;
* the first quick check (``eval.jsonl``, every ``eval_interval`` iterations, ``Q`` paths per
  point) whose worst point reaches 98% of V*: its iteration and the run's wall-clock time
  then. The quick check simulates until the discounted tail is below 2% of the value, so it
  reads up to ~2 points below the final table: the iteration it gives is a late bound.

``--log-dir`` keeps the run directories; a run found there finished (its ``bench.json``) is
read instead of trained again, so a bench stopped midway continues where it stopped.
``--extend RECORD`` reads every run whose training command the record (one of this bench's)
holds from the record, trains the others, and rewrites the record with all of them and
the command that measures them from nothing, so a record grows by seeds on a machine
without its earlier runs.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pglab.bench import results_tables
from pglab.errors import ConfigError, UsageError
from pglab.run.config import parse_config
from pglab.validation import check_int, check_int_sequence, check_path

TARGET_PCT = 98.0
"""the % of V* a run must reach at every evaluation point"""
MEASUREMENT = "bench.json"
"""the file in each run directory that holds the bench's measurement of the run"""


@dataclass(frozen=True)
class GHMMultiBenchConfig:
    model: Literal["divisions", "regimes", "ou"] = "divisions"
    """the model with several states"""
    divisions: tuple[int, ...] = (2, 4, 8)
    """--model divisions: the numbers N of divisions, one set of runs each"""
    seeds: tuple[int, ...] = (601, 602, 603)
    """training seeds"""
    eval_quick_paths: int = 200
    """paths per evaluation point of the quick checks during training (the time to 98%)"""
    train_flags: str = ""
    """further flags of every run, as typed after pglab train ghm (default: none, the trainer's
    defaults), e.g. --train_flags="--sigma 0.3 --algo pathwise" """
    log_dir: Path | None = None
    """where the run directories go (default: a temporary folder, removed at the end); a
    finished run found there is read, not trained again"""
    extend: Path | None = None
    """a record of this bench (results/NAME.json): a run whose training command one of its
    runs has is read from it, not trained again; the record is then rewritten with this
    bench's runs and command (without --extend and --log-dir), its description kept"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        if self.model not in ("divisions", "regimes", "ou"):
            raise ConfigError("model", self.model, "must be divisions, regimes or ou")
        check_int_sequence("divisions", self.divisions)
        check_int_sequence("seeds", self.seeds, minimum=0)
        check_int("eval_quick_paths", self.eval_quick_paths, minimum=1)
        check_path("log_dir", self.log_dir)
        check_path("extend", self.extend)


def run_names(config: GHMMultiBenchConfig) -> list[tuple[str, list[str], dict[str, Any]]]:
    """``(run name, the model's flags, the row's keys)`` of every run, in order."""
    sizes: list[int | None] = list(config.divisions) if config.model == "divisions" else [None]
    runs = []
    for count in sizes:
        for seed in config.seeds:
            flags = ["--model", config.model, "--seed", str(seed), *shlex.split(config.train_flags)]
            keys: dict[str, Any] = {"model": config.model, "seed": seed}
            name = f"{config.model}-s{seed}"
            if count is not None:
                flags[2:2] = ["--divisions", str(count)]
                keys["divisions"] = count
                name = f"{config.model}-n{count}-s{seed}"
            runs.append((name, flags, keys))
    return runs


def training_argv(flags: list[str], eval_quick_paths: int) -> list[str]:
    """``pglab train ghm``'s arguments for a run (its log directory aside); their text is the
    run's ``command``, by which ``--extend`` finds it in a record."""
    return ["train", "ghm", *flags, "--eval_quick_paths", str(eval_quick_paths)]


def train(run_dir: Path, flags: list[str], eval_quick_paths: int) -> dict[str, Any]:
    """Train one run in a process of its own; return its wall-clock and CPU seconds and the
    load average before and after (also written to the run's ``bench.json``)."""
    arguments = training_argv(flags, eval_quick_paths)
    argv = [sys.executable, "-m", "pglab", *arguments, "--log_dir", str(run_dir)]
    env = {**os.environ, "PGLAB_NO_PROGRESS": "1"}
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    log = run_dir.with_name(run_dir.name + ".log")
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise UsageError(f"{' '.join(argv[1:])} exited with {done.returncode} (its output: {log})")
    measurement = {
        "command": "pglab " + " ".join(arguments),
        "wall_s": wall_s,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
    }
    (run_dir / MEASUREMENT).write_text(json.dumps(measurement, indent=2) + "\n", encoding="utf-8")
    return measurement


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_row(run_dir: Path, measurement: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    """One run's row: the final table's % of V* at each point, its worst, the times."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    points = [
        {
            "label": row["label"],
            "state": row["initial_state"],
            "pct_of_optimum": row["pct_of_optimum"],
            "stderr_pct": 100.0 * row["stderr"] / row["fd_optimum"],
            "fd_optimum": row["fd_optimum"],
        }
        for row in summary["evaluation"]
    ]
    worst = min(points, key=lambda point: point["pct_of_optimum"])
    step_s = [row["perf/step_s"] for row in _jsonl(run_dir / "metrics.jsonl") if "perf/step_s" in row]
    checks = [row for row in _jsonl(run_dir / "eval.jsonl") if "eval/pct_optimal_min" in row]
    reached = next((row for row in checks if row["eval/pct_optimal_min"] >= TARGET_PCT), None)
    iterations = int(summary["counters"]["iteration"])
    return {
        **keys,
        "iterations": iterations,
        "points": len(points),
        "worst_pct": worst["pct_of_optimum"],
        "worst_label": worst["label"],
        "reaches_target": worst["pct_of_optimum"] >= TARGET_PCT,
        "wall_s": measurement["wall_s"],
        "cpu_s": measurement["cpu_s"],
        "load_average": [measurement["load_average_before"], measurement["load_average_after"]],
        "step_s_median": statistics.median(step_s),
        "quick_checks": [
            {"iteration": row["iteration"], "wall_s": row["wall_time"], "worst_pct": row["eval/pct_optimal_min"]}
            for row in checks
        ],
        "quick_check_iteration_to_target": None if reached is None else reached["iteration"],
        "quick_check_wall_s_to_target": None if reached is None else reached["wall_time"],
        "evaluation": points,
        "command": measurement["command"],
    }


def measure(
    config: GHMMultiBenchConfig, folder: Path, echo, recorded: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every run's row: read from ``recorded`` (rows by their training command) or from a run
    finished in ``folder``, else trained there."""
    rows = []
    for name, flags, keys in run_names(config):
        run_dir = folder / name
        command = "pglab " + " ".join(training_argv(flags, config.eval_quick_paths))
        if recorded is not None and command in recorded:
            echo(f"{name}: read from {config.extend}")
            rows.append(recorded[command])
            continue
        if (run_dir / MEASUREMENT).is_file():
            measurement = json.loads((run_dir / MEASUREMENT).read_text(encoding="utf-8"))
        elif run_dir.exists():
            raise UsageError(f"{run_dir}: holds a run the bench did not finish (remove it, or train it to the end)")
        else:
            echo(f"training {name} ...")
            measurement = train(run_dir, flags, config.eval_quick_paths)
        rows.append(run_row(run_dir, measurement, keys))
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst point over every run, how many runs reach the target, per N (divisions)."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.get("divisions"), []).append(row)
    by_size = [
        {
            "divisions": size,
            "runs": len(group),
            "runs_at_target": sum(row["reaches_target"] for row in group),
            "worst_pct": min(row["worst_pct"] for row in group),
            "step_s_median": statistics.median(row["step_s_median"] for row in group),
            "cpu_s_mean": statistics.fmean(row["cpu_s"] for row in group),
        }
        for size, group in groups.items()
    ]
    return {
        "target_pct": TARGET_PCT,
        "runs": len(rows),
        "runs_at_target": sum(row["reaches_target"] for row in rows),
        "worst_pct": min(row["worst_pct"] for row in rows),
        "points_per_run": min(row["points"] for row in rows),
        "by_size": by_size,
    }


def format_rows(rows: list[dict[str, Any]]) -> str:
    header = f"{'run':<22} {'worst % of V*':>13} {'at':>9} {'wall s':>8} {'CPU s':>8} {'step s':>7} {'98% at':>7}"
    lines = [header]
    for row in rows:
        name = f"{row['model']}" + (f" N={row['divisions']}" if "divisions" in row else "") + f" s{row['seed']}"
        reached = row["quick_check_iteration_to_target"]
        lines.append(
            f"{name:<22} {row['worst_pct']:>13.2f} {row['worst_label']:>9} {row['wall_s']:>8.0f} "
            f"{row['cpu_s']:>8.0f} {row['step_s_median']:>7.3f} {'-' if reached is None else reached:>7}"
        )
    return "\n".join(lines)


def recorded_runs(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The record at ``path`` and its runs by training command (``--extend``)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return record, {row["command"]: row for row in record["figures"]["runs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"extend: {path}: not a record of this bench ({type(exc).__name__}: {exc})") from exc


def bench_command(config: GHMMultiBenchConfig) -> str:
    """The command that measures ``config``'s runs from nothing (``--extend`` and ``--log-dir``
    left out: where the runs are kept is not part of the measurement)."""
    parts = ["python bench/ghm_multi.py", "--model", config.model]
    if config.model == "divisions":
        parts += ["--divisions", *map(str, config.divisions)]
    parts += ["--seeds", *map(str, config.seeds)]
    if config.eval_quick_paths != GHMMultiBenchConfig.eval_quick_paths:
        parts += ["--eval_quick_paths", str(config.eval_quick_paths)]
    if config.train_flags:
        plain = not any(char in config.train_flags for char in '"\\$`')
        parts.append(
            f'--train_flags="{config.train_flags}"' if plain else "--train_flags=" + shlex.quote(config.train_flags)
        )
    return " ".join([*parts, "--json"])


def write_record(
    path: Path, record: dict[str, Any], config: GHMMultiBenchConfig, figures: dict[str, Any], measured: dict[str, Any]
) -> None:
    """Rewrite the record at ``path``: its description kept, this bench's command and
    figures, and ``measured`` (the date, commit, machine and wall-clock seconds)."""
    tables = results_tables()
    updated = {
        **{field: record[field] for field in tables.DESCRIBED},
        "command": bench_command(config),
        **measured,
        "figures": figures,
    }
    temporary = path.with_name(path.name + ".tmp")
    try:
        tables.check_record(updated, path.name)
        temporary.write_text(json.dumps(updated, indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)
    except (tables.RecordError, OSError) as exc:
        raise UsageError(f"extend: {path}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    config = parse_config(
        GHMMultiBenchConfig,
        sys.argv[1:] if argv is None else argv,
        prog="pglab bench ghm-multi",
        description=(__doc__ or "").splitlines()[0],
    )
    echo = (lambda *args: print(*args, file=sys.stderr)) if config.json else print
    start, measured = time.perf_counter(), {}
    try:
        record, recorded = recorded_runs(config.extend) if config.extend is not None else ({}, None)
        if config.extend is not None:
            tables = results_tables()
            measured = {"date": tables.now(), "commit": tables.commit(), "machine": tables.machine()}
        if config.log_dir is None:
            with tempfile.TemporaryDirectory(prefix="pglab-ghm-multi-") as tmp:
                rows = measure(config, Path(tmp), echo, recorded)
        else:
            config.log_dir.mkdir(parents=True, exist_ok=True)
            rows = measure(config, config.log_dir, echo, recorded)
        figures = {"summary": summarise(rows), "runs": rows}
        if config.extend is not None:
            measured["wall_s"] = round(time.perf_counter() - start, 1)
            write_record(config.extend, record, config, figures, measured)
    except UsageError as exc:
        print(f"pglab: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures, indent=2) if config.json else format_rows(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
