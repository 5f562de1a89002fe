"""``pglab``: the single command-line entry point.

    pglab train {ghm,a2c,ppo,pso-tsp,maxk-pomo,forecast} [FLAGS]
    pglab evaluate CHECKPOINT [FLAGS]        (dispatched on the checkpoint's kind)
    pglab evaluate {pso-tsp,maxk-pomo,forecast} [FLAGS]
    pglab solve {ghm,ghm-credit-line} [FLAGS] (finite-difference HJB reference)
    pglab sweep ghm [FLAGS]                  (comparative statics: train on a grid of calibrations)
    pglab backtest [FLAGS]                   (walk-forward forecasting backtest)
    pglab plot RUN_DIR [FLAGS]               (learning curves of any run)
    pglab validate CHECKPOINT [FLAGS]        (HJB residual of a GHM agent vs the FD optimum)
    pglab compare RUN_DIR... [FLAGS]         (GHM solvers side by side: table, CSV, figure)
    pglab bench NAME [FLAGS]                 (speed benchmarks, see bench/)
    pglab --version                          (the installed version)

Every sub-command parses its own flags from a frozen config dataclass (tyro), so
``pglab train ghm --help`` lists exactly the fields of that trainer's config. Flags may be
written ``--n_iterations`` or ``--n-iterations``.

Exit codes: 0 success; 1 failure; 2 usage or configuration error (bad flag or value,
malformed YAML, corrupt or mismatched checkpoint, unusable data, a file-system error such
as a full disk); 130 stopped by SIGINT/SIGTERM (a training run keeps its last checkpoint
and continues with --resume; one stopped before its first checkpoint leaves nothing).

``pglab --help``, ``pglab train --help``, ``pglab evaluate --help`` and every
``pglab ... NAME --help`` list what exists without importing torch.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Sequence

from pglab.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PglabError, describe_os_error
from pglab.run.signals import STOP, STOP_SIGNALS, Stopped, signal_name, stop_in

Handler = str  # "module:function", imported lazily so `pglab --help` stays fast


def _system_table(attribute: str) -> dict[str, Handler]:
    from pglab.systems import SYSTEMS

    return {name: getattr(system, attribute) for name, system in SYSTEMS.items() if getattr(system, attribute)}


SOLVERS: dict[str, Handler] = {
    "ghm": "pglab.commands.ghm:solve",
    "ghm-credit-line": "pglab.commands.ghm_credit_line:solve",
}

SWEEPS: dict[str, Handler] = {"ghm": "pglab.commands.sweep:ghm"}

SINGLE: dict[str, Handler] = {
    "backtest": "pglab.commands.forecast:backtest",
    "plot": "pglab.commands.plot:plot",
    "validate": "pglab.commands.validate:validate",
    "compare": "pglab.commands.compare:compare",
}

BENCHMARKS: dict[str, Handler] = {
    "ghm-rollout": "pglab.bench.ghm_rollout:main",
    "ghm-parallel": "pglab.bench.ghm_parallel:main",
    "ghm-divisions": "pglab.bench.ghm_divisions:main",
    "ghm-multi": "pglab.bench.ghm_multi:main",
    "a2c-stream": "pglab.bench.a2c_stream:main",
    "maxk": "pglab.bench.maxk:main",
    "tabular": "pglab.bench.tabular:main",
    "ppo-vs-sb3": "pglab.bench.ppo_vs_sb3:main",
    "minatar": "pglab.bench.minatar_throughput:main",
}

SUMMARIES = {
    "sweep": {"ghm": "train GHM solvers on a grid of calibrations; thresholds against the FD optimum"},
    "solve": {
        "ghm": "finite-difference HJB solution of the GHM model",
        "ghm-credit-line": "finite-difference HJB solution of the GHM model with a credit line",
    },
    "bench": {
        "ghm-rollout": "GHM rollout iteration time (idle and beside a CPU-bound process)",
        "ghm-parallel": "GHM rollouts in parallel workers",
        "ghm-divisions": "GHM divisions: time per training iteration against the number of states",
        "ghm-multi": "GHM models with several states trained with their defaults, against their exact V*",
        "a2c-stream": "streaming A2C environment steps per second",
        "maxk": "Max@K estimator time per call, MaxKPOMO step overhead",
        "tabular": "tabular learners' episodes per second",
        "ppo-vs-sb3": "pglab PPO against Stable-Baselines3, side by side",
        "minatar": "batched MinAtar steps per second against the minatar package (and gymnax)",
    },
}

SHARED_TRAIN_FLAGS = """shared flags of every trainer:
  --log-dir DIR        run directory (default runs/<system>-<YYYYmmdd-HHMMSS>); never overwritten
  --resume DIR         continue a run (its directory, checkpoints/ folder or a checkpoint file)
  --device auto|cpu|cuda[:N]   (default auto)
  --threads N          torch CPU threads (0: torch's default)
  --seed N             same seed + config on the CPU: bit-identical run
  --save-interval N    steps between checkpoints (the last step and a stop are always saved)
  --keep-checkpoints N numbered checkpoints kept, the newest (default 3; 0 keeps all)
  --config FILE.yaml   defaults < YAML < flags
  --json               end with one JSON document on stdout instead of the summary"""

SHARED_EVAL_FLAGS = """shared flags of the evaluators:
  --device auto|cpu|cuda[:N]  --output FILE      every evaluator
  --json                                         one JSON document on stdout instead of the summary
  --episodes N  --seed N  --threads N            every evaluator that samples episodes, instances
                                                 or paths (not forecast, which replays a series)"""


def _load(handler: Handler) -> Callable[[list[str]], int]:
    from pglab.systems import resolve

    return resolve(handler)


def _usage() -> str:
    return (__doc__ or "").split("\n\n")[1] if __doc__ else "pglab COMMAND ..."


def _listing(title: str, table: dict[str, str], summaries: dict[str, str]) -> str:
    width = max(map(len, table)) + 2
    rows = "\n".join(f"  {name:<{width}}{summaries.get(name, '')}" for name in table)
    return f"{title}\n{rows}"


def _print_help(command: str, table: dict[str, Handler]) -> int:
    from pglab.systems import SYSTEMS

    summaries = SUMMARIES.get(command) or {name: system.summary for name, system in SYSTEMS.items()}
    print(
        _listing(
            f"usage: pglab {command} NAME [FLAGS]   (pglab {command} NAME --help lists NAME's flags)\n\n"
            "NAME is one of:",
            table,
            summaries,
        )
    )
    if command == "train":
        print("\n" + SHARED_TRAIN_FLAGS)
        print("\nexit codes: 0 done; 1 failure; 2 usage/config error; 130 stopped by SIGINT/SIGTERM (checkpoint saved)")
    return EXIT_OK


def _evaluate_help() -> int:
    from pglab.systems import SYSTEMS

    print("usage: pglab evaluate CHECKPOINT [FLAGS]    the evaluator is chosen by the checkpoint's kind")
    print("       pglab evaluate NAME [FLAGS]          NAME: " + ", ".join(_system_table("evaluate_named")))
    print("\nCHECKPOINT: a checkpoint file, a run's checkpoints/ folder or a run directory.")
    print("pglab evaluate CHECKPOINT --help lists the flags of that checkpoint's evaluator.\n")
    print(SHARED_EVAL_FLAGS)
    print("\nsystems with checkpoint evaluators:")
    for name, system in SYSTEMS.items():
        print(f"  {name:<11}{system.summary}")
    return EXIT_OK


def _choose(table: dict[str, Handler], name: str | None, what: str) -> Handler:
    if name is None or name.startswith("-"):
        raise PglabUsage(f"{what}: choose one of {', '.join(table)} (got {name or 'nothing'})")
    if name not in table:
        raise PglabUsage(f"{what}: unknown {what} {name!r}; choose one of {', '.join(table)}")
    return table[name]


class PglabUsage(PglabError):
    exit_code = EXIT_USAGE


def _peek_kind(path: str, *, help_asked: bool) -> str:
    """A checkpoint's kind: from its run's config.json when there is one (no torch import,
    so ``pglab evaluate RUN --help`` stays fast), else from the checkpoint itself."""
    import json
    from pathlib import Path

    candidate = Path(path)
    if help_asked:
        folder = candidate if candidate.is_dir() else candidate.parent
        for config_path in (folder / "config.json", folder.parent / "config.json"):
            if config_path.is_file():
                try:
                    kind = json.loads(config_path.read_text()).get("kind")
                except (OSError, ValueError, AttributeError):
                    kind = None
                if isinstance(kind, str):
                    return kind
    from pglab.run.checkpoint import load_checkpoint_file

    return load_checkpoint_file(path)["kind"]


def checkpoint_evaluator(path: str, *, help_asked: bool = False) -> Handler:
    """The evaluator for a checkpoint, chosen by the ``kind`` stored in it."""
    from pglab.systems import system_of_kind

    kind = _peek_kind(path, help_asked=help_asked)
    system = system_of_kind(kind)
    if system is None:
        raise PglabUsage(f"checkpoint: kind {kind!r} has no evaluator (got {path})")
    return system.evaluate_checkpoint


def dispatch(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return EXIT_USAGE
    if args[0] in ("-h", "--help"):
        print(__doc__)
        return EXIT_OK
    if args[0] in ("-V", "--version"):
        from pglab import __version__

        print(f"pglab {__version__}")
        return EXIT_OK
    command, rest = args[0], args[1:]
    help_asked = bool(rest) and rest[0] in ("-h", "--help")
    if not any(arg in ("-h", "--help") for arg in rest):
        import_torch()  # every command but --help needs it
    tables = {
        "train": lambda: _system_table("train"),
        "solve": lambda: SOLVERS,
        "sweep": lambda: SWEEPS,
        "bench": lambda: BENCHMARKS,
    }
    if command in tables:
        table = tables[command]()
        if help_asked:
            return _print_help(command, table)
        return _load(_choose(table, rest[0] if rest else None, command))(rest[1:])
    if command == "evaluate":
        if help_asked:
            return _evaluate_help()
        if not rest:
            raise PglabUsage(
                "evaluate: give a CHECKPOINT (file, checkpoints/ folder or run directory) or one of "
                + ", ".join(_system_table("evaluate_named"))
                + " (got nothing)"
            )
        named = _system_table("evaluate_named")
        if rest[0] in named:
            return _load(named[rest[0]])(rest[1:])
        return _load(checkpoint_evaluator(rest[0], help_asked=any(a in ("-h", "--help") for a in rest[1:])))(rest)
    if command in SINGLE:
        return _load(SINGLE[command])(rest)
    commands = ["train", "evaluate", "solve", "sweep", *SINGLE, "bench"]
    raise PglabUsage(f"command: unknown command {command!r}; choose one of {', '.join(commands)}")


def import_torch() -> None:
    """``import torch`` with SIGINT/SIGTERM deferred, then the stop raised if one came.
    torch's import runs Python inside its C++ extension; a stop raised there cannot
    unwind through it and aborts the process (exit -6) instead of ending it with 130."""
    with STOP.deferred():
        import torch  # noqa: F401
    if STOP.requested:
        raise Stopped(STOP.signal)


def _one_line_warnings() -> Callable[..., None]:
    """A ``warnings.showwarning`` for one command: warnings as ``pglab: warning: ...`` lines,
    not Python's file:line + source excerpt (which reads like a crash to a command-line
    user), each text once (a library may warn the same from several places, e.g. Gymnasium
    for every environment it makes). Terminal colour codes in the message (Gymnasium colours
    its own warnings) are dropped: the line may go to a log file."""
    shown: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(message))
        if text not in shown:
            shown.add(text)
            print(f"pglab: warning: {text}", file=sys.stderr if file is None else file)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pglab``; returns (and, as a console script, exits with) the exit code."""
    import warnings

    installed = STOP.install()  # SIGINT/SIGTERM: exit 130 from here on (pglab.run.signals)
    STOP.clear()
    previous_showwarning, warnings.showwarning = warnings.showwarning, _one_line_warnings()
    try:
        code = _run(argv)
    finally:
        warnings.showwarning = previous_showwarning
        if installed:
            STOP.uninstall()
    return code


def _run(argv: Sequence[str] | None) -> int:
    """:func:`dispatch`, with every way it can end mapped to one line and an exit code."""
    try:
        try:
            code = dispatch(sys.argv[1:] if argv is None else argv)
        except PglabError as exc:
            print(f"pglab: error: {exc}", file=sys.stderr)
            code = exc.exit_code
        except BrokenPipeError:  # the reader went away (`pglab ... | head`): not an error of pglab's
            # Python would report the pipe again when it flushes stdout at exit; point it at devnull
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = EXIT_OK
        except OSError as exc:  # a full disk, a name too long, no permission: the path and the cause
            print(f"pglab: error: {describe_os_error(exc)}", file=sys.stderr)
            code = EXIT_USAGE
        except SystemExit as exc:  # tyro/argparse: 2 on a usage error, 0 after --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        except Exception as exc:  # a bug, not a usage error: keep the traceback
            stop = stop_in(exc)
            if stop is not None:  # a stop that Python wrapped on its way up (see stop_in)
                raise stop from None
            traceback.print_exc()
            code = EXIT_FAILURE
    except KeyboardInterrupt as exc:  # SIGINT/SIGTERM, also while an error above was reported
        note = getattr(exc, "note", None)
        name = signal_name(getattr(exc, "signum", None) or STOP.signal or signal.SIGINT)
        print(f"pglab: stopped by {name}" + (f": {note}" if note else ""), file=sys.stderr)
        code = EXIT_INTERRUPTED
    return int(code or 0)


def console_main() -> None:  # pragma: no cover - thin wrapper
    STOP.install()  # before anything heavy is imported
    code = main()
    try:
        with STOP.deferred():  # the work is done: a signal now is recorded, and exits 130
            # Everything pglab wrote is closed by now. The interpreter's final garbage
            # collection would walk every object torch's compiler stack created (seconds
            # after a signal, when the exit should be prompt); frozen objects are skipped.
            gc.freeze()
            # Finalisation restores the default action of a handled signal (killing the
            # process, exit -15); ignored signals stay ignored.
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt:  # a second signal before the handlers were replaced
        pass
    sys.exit(EXIT_INTERRUPTED if STOP.requested else code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
