"""``pglab sweep ghm``: comparative statics of the GHM model, learned against the FD truth.

A sweep is ``calibrations x solvers x seeds`` ordinary ``pglab train ghm`` runs::

    SWEEP_DIR/
      sweep.json                 the sweep's config and its list of runs (written first)
      runs/<calibration>-<algo>-s<seed>/   a run directory (pglab evaluate / load_checkpoint open it)
        trial.json               the run's row of the table, written when the run is done
      fd_lines.json              FD thresholds along each swept parameter (the figures' lines)
      sweep.csv, sweep.md        one row per run: % of V* at each c0, learned vs FD dividend
                                 barrier, learned vs FD issuance point, wall time
      statics_<param>.png        barrier and issuance point against each swept parameter

Resume: every run writes its ``trial.json`` atomically when it has finished, and a run
killed midway continues from its latest checkpoint (the training shell's exact resume:
same config and budget, so bit for bit). ``--resume SWEEP_DIR`` therefore reads the
finished runs, resumes the others and writes the same table (the timing columns aside) as
a sweep that was never interrupted.

Parallel runs (``--backend ray``, the default): one Ray task per run, one CPU and one
torch thread each, on a local Ray instance or the cluster at ``--ray-address`` (which must
see the same file system). Each run is a seeded single-threaded computation, so its
result does not depend on where or alongside what it ran: a Ray sweep is bit-identical to
``--backend serial``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import itertools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.configs.ghm import ONE_STATE_MODELS, GHMTrainConfig
from pglab.configs.sweep import (
    INTEGER_PARAMETERS,
    MAX_RUNS_WITHOUT_YES,
    SWEEP_RESUMABLE,
    SWEEPABLE,
    GHMSweepConfig,
    model_of_parameter,
)
from pglab.errors import ConfigError
from pglab.run.atomic import atomic_write_json, atomic_write_text
from pglab.run.config import config_from_dict, config_to_dict, read_yaml_mapping
from pglab.run.progress import progress_bar
from pglab.run.rundir import RunDirLock

SWEEP_FILE = "sweep.json"
TRIAL_FILE = "trial.json"
# Columns that measure time: they differ between two executions of the same sweep.
TIMING_COLUMNS = ("train_s",)


@dataclass(frozen=True)
class Trial:
    """One run of a sweep: a calibration, a solver and a seed."""

    name: str
    """directory name under runs/, e.g. ``sigma0.3_rho0.08-mc-s0``"""
    calibration: dict[str, float]
    """the swept parameters' values of this run"""
    algo: str
    seed: int
    config: dict[str, Any]
    """the run's full GHMTrainConfig as a plain dict (``log_dir`` absolute)"""


# -- the grid ---------------------------------------------------------------------------------


def calibrations(config: GHMSweepConfig) -> list[dict[str, float]]:
    """The calibrations of a sweep, in order: the product of the flags' lists, then the
    YAML grid's (a product of its lists, or its explicit ``calibrations:``). ``[{}]``
    (the base calibration alone) when nothing is swept."""
    grids: list[dict[str, float]] = []
    swept = config.swept()
    if swept:
        grids += [dict(zip(swept, values, strict=False)) for values in itertools.product(*swept.values())]
    if config.grid is not None:
        grids += _yaml_grid(Path(config.grid))
    unique: list[dict[str, float]] = []
    for calibration in grids:
        if calibration not in unique:
            unique.append(calibration)
    return unique or [{}]


def _yaml_grid(path: Path) -> list[dict[str, float]]:
    mapping = read_yaml_mapping(path)
    if "calibrations" in mapping:
        listed = mapping.pop("calibrations")
        if mapping:
            raise ConfigError("grid", str(path), f"has both calibrations: and parameter lists ({', '.join(mapping)})")
        if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
            raise ConfigError("grid", str(path), "calibrations: must be a list of mappings of parameter -> value")
        if not listed:
            raise ConfigError("grid", str(path), "calibrations: is empty; list at least one calibration")
        return [{name: _number(path, name, value) for name, value in item.items()} for item in listed]
    lists = {}
    for name, values in mapping.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError("grid", str(path), f"{name}: is an empty list; give at least one value")
        lists[name] = [_number(path, name, value) for value in values]
    return [dict(zip(lists, values, strict=False)) for values in itertools.product(*lists.values())]


def _number(path: Path, name: str, value: Any) -> float:
    if name not in SWEEPABLE:
        raise ConfigError("grid", str(path), f"{name!r} is not a model parameter; sweepable: {', '.join(SWEEPABLE)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, value, f"must be a number (in {path})")
    if name in INTEGER_PARAMETERS and value != int(value):
        raise ConfigError(name, value, f"must be a whole number (in {path})")
    return float(value)


def calibration_name(calibration: dict[str, float]) -> str:
    """``{"sigma": 0.3, "rho": 0.08}`` -> ``"sigma0.3_rho0.08"`` (``"base"`` for ``{}``)."""
    return "_".join(f"{name}{value:g}" for name, value in calibration.items()) or "base"


def base_fields(config: GHMSweepConfig) -> dict[str, Any]:
    """The ``pglab train ghm`` settings shared by every run of the sweep."""
    fields: dict[str, Any] = read_yaml_mapping(config.train_config) if config.train_config is not None else {}
    for name in ("log_dir", "resume"):
        if name in fields:
            raise ConfigError(
                "train_config", str(config.train_config), f"must not set {name} (the sweep places its runs)"
            )
    if fields.get("final_eval") is False:
        raise ConfigError(
            "train_config",
            str(config.train_config),
            "sets final_eval: false, but the sweep's table is read from every run's final evaluation",
        )
    if config.n_iterations is not None:
        fields["n_iterations"] = config.n_iterations
    return fields


def check_sweep_size(config: GHMSweepConfig) -> None:
    """Refuse a sweep of more than :data:`MAX_RUNS_WITHOUT_YES` runs unless ``--yes`` is given
    (before any run's config is built or anything written)."""
    grid, solvers, seeds = len(calibrations(config)), len(config.algo), len(config.seeds)
    runs = grid * solvers * seeds
    if runs > MAX_RUNS_WITHOUT_YES and not config.yes:
        raise ConfigError(
            "yes",
            False,
            f"the sweep has {runs:,} runs ({grid} calibrations x {solvers} solvers x {seeds} seeds), more than "
            f"{MAX_RUNS_WITHOUT_YES}; give --yes to start it",
        )


def build_trials(config: GHMSweepConfig, sweep_dir: Path) -> list[Trial]:
    """Every run of the sweep, validated as ``pglab train ghm`` would (a calibration that
    makes the model ill-posed, e.g. rho <= r, is a ConfigError naming the field)."""
    base = base_fields(config)
    trials = []
    for calibration in calibrations(config):
        for name in calibration:  # --grid YAML files are checked here, flags in the config
            owner = model_of_parameter(name)
            if owner is not None and owner != config.model:
                raise ConfigError(name, calibration[name], f"is a parameter of --model {owner}")
        for algo in config.algo:
            for seed in config.seeds:
                name = f"{calibration_name(calibration)}-{algo}-s{seed}"
                fields = {
                    **base,
                    **{
                        name: int(value) if name in INTEGER_PARAMETERS else value for name, value in calibration.items()
                    },
                    "model": config.model,
                    "algo": algo,
                    "seed": seed,
                    "device": config.device,
                    "threads": 1,
                    "log_dir": str((sweep_dir / "runs" / name).resolve()),
                }
                try:
                    train_config = config_from_dict(GHMTrainConfig, fields)
                except ConfigError as exc:
                    raise ConfigError(
                        exc.field, exc.value, f"{exc.expected} [calibration {calibration_name(calibration)}]"
                    ) from exc
                trials.append(Trial(name, dict(calibration), algo, seed, config_to_dict(train_config)))
    return trials


# -- one run ----------------------------------------------------------------------------------


def run_trial(trial: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume, or read) one run and return its row of the table.

    ``trial`` is a :class:`Trial` as a dict (what a Ray task receives). Idempotent: a run
    whose ``trial.json`` exists is read, not retrained."""
    from pglab.algos.ghm_train import train_ghm

    config = config_from_dict(GHMTrainConfig, trial["config"])
    assert config.log_dir is not None  # build_trials gives every trial its run directory
    run_dir = Path(config.log_dir)
    done = run_dir / TRIAL_FILE
    if done.exists():
        return json.loads(done.read_text())
    given: frozenset[str] | None = None
    if (run_dir / "config.json").exists():  # started before a kill: continue it exactly
        config = config_from_dict(GHMTrainConfig, {**trial["config"], "log_dir": None, "resume": str(run_dir)})
        given = frozenset({"resume"})
    with _quiet():
        result = train_ghm(config, given=given, echo=lambda *args, **kwargs: None)
    if result.interrupted:  # SIGINT/SIGTERM: the run saved its checkpoint; the sweep stops with it
        from pglab.run.signals import STOP, Stopped

        stopped = Stopped(STOP.signal)
        stopped.note = f"run {trial['name']} saved its checkpoint; continue the sweep with --resume"
        raise stopped
    row = trial_row(trial, run_dir)
    atomic_write_json(done, row)
    return row


@contextlib.contextmanager
def _quiet():
    """No per-run progress bars inside a sweep (the sweep shows its own)."""
    before = os.environ.get("PGLAB_NO_PROGRESS")
    os.environ["PGLAB_NO_PROGRESS"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PGLAB_NO_PROGRESS", None)
        else:
            os.environ["PGLAB_NO_PROGRESS"] = before


def trial_row(trial: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The table row of a finished run, from its evaluation.json and summary.json."""
    from pglab.algos.ghm_train import row_label

    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    config = trial["config"]
    row: dict[str, Any] = {"run": trial["name"], "model": config["model"], "algo": trial["algo"], "seed": trial["seed"]}
    row.update(
        {name: _parameter(config, name) for name in SWEEPABLE if model_of_parameter(name) in (None, config["model"])}
    )
    for entry in evaluation["rows"]:
        row[f"pct_{row_label(entry)}"] = entry["pct_of_optimum"]
    for entry in evaluation["rows"]:  # the exact (FD) value of the same policy, when evaluated
        if "exact_pct_of_optimum" in entry:
            row[f"exact_pct_{row_label(entry)}"] = entry["exact_pct_of_optimum"]
    learned, fd = evaluation.get("learned_thresholds", {}), evaluation.get("fd_thresholds", {})
    row.update(
        {
            "barrier_rl": learned.get("dividend_rate"),
            "barrier_fd": fd.get("dividend_rate"),
            "issuance_rl": learned.get("issuance_rate"),
            "issuance_fd": fd.get("issuance_rate"),
            "train_s": summary.get("counters", {}).get("wall_time"),
        }
    )
    return row


def _parameter(config: dict[str, Any], name: str) -> float:
    """A model parameter of a run's config dict: in ``params``, or top-level (the other models')."""
    return config["params"][name] if name in config["params"] else config[name]


# -- the comparative-statics lines ----------------------------------------------------------


def fd_lines(
    config: GHMSweepConfig, trials: list[Trial], sweep_dir: Path, echo: Callable[..., None]
) -> dict[str, list[dict[str, Any]]]:
    """FD dividend barrier and issuance point along each swept parameter (others held at
    each of their swept combinations), cached in ``fd_lines.json``; none for a model whose
    state has more than one variable (its thresholds are not one number)."""
    cache = sweep_dir / "fd_lines.json"
    if cache.exists():
        return json.loads(cache.read_text())
    if trials[0].config["model"] not in ONE_STATE_MODELS:
        atomic_write_json(cache, {})
        return {}
    from pglab.algos.ghm_train import build_model, thresholds_in_cash
    from pglab.envs.ghm import GHMModel
    from pglab.hjb.fd import solve_hjb_1d_extrapolated

    base = trials[0].config  # the model, its parameters and the FD grid's x_max
    x_max = base["fd_x_max"]
    swept = _swept_values(trials)
    jobs: list[tuple[str, dict[str, float], float]] = []
    for name, values in swept.items():
        if len(values) < 2:
            continue
        points = sorted(
            set(values)
            | (set(_linspace(min(values), max(values), config.fd_line_points)) if config.fd_line_points else set())
        )
        for others in _slices(trials, name):
            jobs += [(name, others, value) for value in points]
    lines: dict[str, list[dict[str, Any]]] = {name: [] for name in swept}
    bar = progress_bar(len(jobs), desc="FD comparative statics", unit="solve")
    for name, others, value in jobs:
        # the flat names (sigma, credit_limit) override the base run's
        model = build_model(config_from_dict(GHMTrainConfig, {**base, **others, name: value}))
        assert isinstance(model, GHMModel)  # a one-state model (checked above)
        solution = solve_hjb_1d_extrapolated(model, x_max=x_max, num_nodes=config.fd_line_nodes)
        thresholds = thresholds_in_cash(model, solution.thresholds())  # in cash, as the runs' thresholds
        lines[name].append(
            {
                "others": others,
                "value": value,
                "barrier": thresholds.get("dividend_rate"),
                "issuance": thresholds.get("issuance_rate"),
            }
        )
        bar.update(1)
    bar.close()
    atomic_write_json(cache, lines)
    return lines


def _linspace(low: float, high: float, count: int) -> list[float]:
    return [low + (high - low) * i / (count - 1) for i in range(count)]


def _swept_values(trials: list[Trial]) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for trial in trials:
        for name, value in trial.calibration.items():
            if value not in values.setdefault(name, []):
                values[name].append(value)
    return values


def _slices(trials: list[Trial], name: str) -> list[dict[str, float]]:
    """The combinations of the other swept parameters that ``name`` is swept across."""
    slices: list[dict[str, float]] = []
    for trial in trials:
        others = {key: value for key, value in trial.calibration.items() if key != name}
        if name in trial.calibration and others not in slices:
            slices.append(others)
    return slices


THRESHOLD_NAMES = {"barrier": "dividend barrier", "issuance": "issuance point"}


def missing_thresholds(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many runs have no learned dividend barrier / issuance point (their policy pays no
    dividend, or never issues, on the evaluated cash range): ``{"barrier": n, "issuance": m}``."""
    return {key: sum(1 for row in rows if row.get(f"{key}_rl") is None) for key in THRESHOLD_NAMES}


def missing_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per threshold some runs lack: the figures leave those runs' points out."""
    return [
        f"{count} of {len(rows)} runs have no learned {THRESHOLD_NAMES[key]}: not drawn in the statics figures"
        for key, count in missing_thresholds(rows).items()
        if count
    ]


def statics_figures(
    rows: list[dict[str, Any]], lines: dict[str, list[dict[str, Any]]], trials: list[Trial], sweep_dir: Path
) -> list[Path]:
    """``statics_<param>.png``: barrier and issuance point against each swept parameter,
    FD as lines, the learned policies as points (mean and spread over seeds, per solver)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pglab.run.plots import save_figure

    by_run = {row["run"]: row for row in rows}
    paths = []
    for name, line in lines.items():
        if not line:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        algos = sorted({trial.algo for trial in trials})
        for index, others in enumerate(_slices(trials, name)):
            colour = f"C{index % 10}"  # a calibration's FD line and its learned points share a colour
            label = calibration_name(others)
            points = sorted((entry for entry in line if entry["others"] == others), key=lambda entry: entry["value"])
            for axis, key in zip(axes, ("barrier", "issuance"), strict=False):
                xs = [entry["value"] for entry in points if entry[key] is not None]
                ys = [entry[key] for entry in points if entry[key] is not None]
                axis.plot(xs, ys, "-", color=colour, label=f"FD {label}" if label != "base" else "FD")
            for marker, algo in zip("os^Dv", algos, strict=False):
                for axis, key in zip(axes, ("barrier", "issuance"), strict=False):
                    groups: dict[float, list[float]] = {}
                    for trial in trials:
                        rest = {k: v for k, v in trial.calibration.items() if k != name}
                        row = by_run.get(trial.name)
                        if trial.algo != algo or rest != others or row is None or row.get(f"{key}_rl") is None:
                            continue
                        groups.setdefault(trial.calibration[name], []).append(row[f"{key}_rl"])
                    if groups:
                        xs = sorted(groups)
                        means = [sum(groups[x]) / len(groups[x]) for x in xs]
                        spread = [(max(groups[x]) - min(groups[x])) / 2 for x in xs]
                        axis.errorbar(
                            xs,
                            means,
                            yerr=spread,
                            fmt=marker,
                            color=colour,
                            capsize=3,
                            label=f"RL {algo} {label}".replace(" base", ""),
                        )
        missing = missing_thresholds(rows)
        for axis, title, key in zip(
            axes,
            ("dividend barrier (half the maximal rate)", "issuance point (upper end)"),
            THRESHOLD_NAMES,
            strict=False,
        ):
            if missing[key]:
                axis.text(
                    0.02,
                    0.02,
                    f"{missing[key]} of {len(rows)} runs have no learned {THRESHOLD_NAMES[key]} (not drawn)",
                    transform=axis.transAxes,
                    fontsize=7,
                    color="tab:red",
                )
            axis.set_xlabel(name)
            axis.set_ylabel("cash")
            axis.set_title(title)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
        fig.suptitle(
            f"GHM comparative statics in {name}: FD optimum (lines) vs learned policies (points, spread over seeds)",
            fontsize=9,
        )
        fig.tight_layout()
        paths.append(save_figure(fig, sweep_dir / f"statics_{name}.png"))
    return paths


# -- the table --------------------------------------------------------------------------------


def write_table(rows: list[dict[str, Any]], sweep_dir: Path) -> None:
    """``sweep.csv`` (every column) and ``sweep.md`` (the readable subset)."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ("" if row.get(key) is None else row[key]) for key in columns})
    atomic_write_text(sweep_dir / "sweep.csv", buffer.getvalue())
    swept = [name for name in SWEEPABLE if len({row.get(name) for row in rows}) > 1]
    pct = [key for key in columns if key.startswith("pct_")]
    shown = ["run", *swept, "algo", "seed", *pct, "barrier_rl", "barrier_fd", "issuance_rl", "issuance_fd", "train_s"]

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(row.get(key)) for key in shown) + " |" for row in rows]
    atomic_write_text(sweep_dir / "sweep.md", "\n".join(lines) + "\n")


# -- the sweep --------------------------------------------------------------------------------


def resolve_sweep(config: GHMSweepConfig, given: frozenset[str] | None) -> tuple[GHMSweepConfig, Path, bool]:
    """The sweep's config and directory: a fresh one, or the stored one on ``--resume``
    (where only where/how runs execute may change; anything else is refused, exit 2)."""
    if config.resume is None:
        from pglab.run.rundir import default_run_dir

        sweep_dir = Path(config.log_dir) if config.log_dir is not None else default_run_dir("sweep-ghm")
        if (sweep_dir / SWEEP_FILE).exists():
            raise ConfigError("log_dir", str(sweep_dir), "already holds a sweep; continue it with --resume")
        return config, sweep_dir, False
    sweep_dir = Path(config.resume)
    if not (sweep_dir / SWEEP_FILE).is_file():
        raise ConfigError("resume", str(sweep_dir), f"not a sweep directory (no {SWEEP_FILE})")
    stored = config_from_dict(
        GHMSweepConfig, {**json.loads((sweep_dir / SWEEP_FILE).read_text())["config"], "resume": None, "log_dir": None}
    )
    given = (
        given
        if given is not None
        else frozenset(
            name
            for name, value in config_to_dict(config).items()
            if value != config_to_dict(GHMSweepConfig()).get(name)
        )
    )
    changes = {}
    for name in sorted(given - {"resume", "log_dir"}):
        new, old = getattr(config, name), getattr(stored, name)
        if config_to_dict(config)[name] == config_to_dict(stored)[name]:
            continue
        if name not in SWEEP_RESUMABLE:
            raise ConfigError(
                name,
                new,
                f"differs from the resumed sweep's value {old!r}; a resume may change only "
                f"{', '.join(sorted(SWEEP_RESUMABLE - {'resume', 'log_dir'}))}",
            )
        changes[name] = new
    return dataclasses.replace(stored, **changes), sweep_dir, True


def run_sweep(
    config: GHMSweepConfig, *, given: frozenset[str] | None = None, echo: Callable[..., None] = print
) -> tuple[list[dict[str, Any]], Path]:
    """Run (or continue) a sweep; returns the table's rows in the sweep's order and the
    sweep's directory."""
    config, sweep_dir, resumed = resolve_sweep(config, given)
    if not resumed:
        check_sweep_size(config)
    trials = build_trials(config, sweep_dir)
    if not resumed:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    lock = RunDirLock(sweep_dir).acquire()  # one sweep per directory (its runs lock their own)
    try:
        if not resumed:
            atomic_write_json(
                sweep_dir / SWEEP_FILE, {"config": config_to_dict(config), "runs": [trial.name for trial in trials]}
            )
        return _run_trials(config, trials, sweep_dir, echo), sweep_dir
    finally:
        lock.release()


def _run_trials(
    config: GHMSweepConfig, trials: list[Trial], sweep_dir: Path, echo: Callable[..., None]
) -> list[dict[str, Any]]:
    """Train the trials not done yet, then write the table, the FD lines and the figures."""
    pending = [trial for trial in trials if not (Path(trial.config["log_dir"]) / TRIAL_FILE).exists()]
    echo(f"sweep {sweep_dir}: {len(trials)} runs ({len(trials) - len(pending)} done), backend {config.backend}")
    started = time.perf_counter()
    payloads = [dataclasses.asdict(trial) for trial in pending]
    if config.backend == "ray":
        _run_on_ray(config, payloads)
    else:
        bar = progress_bar(len(payloads), desc="sweep ghm", unit="run")
        for payload in payloads:
            run_trial(payload)
            bar.update(1)
        bar.close()
    rows = [json.loads((Path(trial.config["log_dir"]) / TRIAL_FILE).read_text()) for trial in trials]
    write_table(rows, sweep_dir)
    lines = fd_lines(config, trials, sweep_dir, echo)
    figures = statics_figures(rows, lines, trials, sweep_dir)
    echo((sweep_dir / "sweep.md").read_text())
    echo(
        f"{len(pending)} runs in {time.perf_counter() - started:.1f} s; table {sweep_dir / 'sweep.csv'}"
        + (f"; figures {', '.join(str(path) for path in figures)}" if figures else "")
    )
    for note in missing_notes(rows) if figures else []:
        echo(f"note: {note}")
    return rows


def _run_on_ray(config: GHMSweepConfig, payloads: list[dict[str, Any]]) -> None:
    """One Ray task per run (one CPU each), with a progress bar over finished runs."""
    if not payloads:
        return
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is in the [dist] extra
        raise ConfigError("backend", "ray", "needs Ray: pip install 'pglab[dist]' (or --backend serial)") from exc
    started_here = not ray.is_initialized()
    if started_here:
        if config.ray_address is not None:
            ray.init(address=config.ray_address, log_to_driver=False)
        else:  # "local": a fresh instance even if RAY_ADDRESS points elsewhere
            ray.init(
                address="local",
                num_cpus=config.max_parallel or os.cpu_count() or 1,
                include_dashboard=False,
                log_to_driver=False,
            )
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_trial)
        refs = [task.remote(payload) for payload in payloads]
        bar = progress_bar(len(refs), desc="sweep ghm (ray)", unit="run")
        while refs:
            finished, refs = ray.wait(refs, num_returns=1)
            ray.get(finished)  # re-raises a run's error here
            bar.update(len(finished))
        bar.close()
    finally:
        if started_here:
            ray.shutdown()


__all__ = [
    "Trial",
    "build_trials",
    "calibrations",
    "calibration_name",
    "run_sweep",
    "run_trial",
    "trial_row",
    "write_table",
    "fd_lines",
    "statics_figures",
    "TIMING_COLUMNS",
]
