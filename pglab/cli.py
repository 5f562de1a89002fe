"""``pglab``: the single command-line entry point.

    pglab train {ghm,a2c,ppo,pso-tsp,maxk-pomo,forecast} [FLAGS]
    pglab evaluate CHECKPOINT [FLAGS]        (dispatched on the checkpoint's kind)
    pglab evaluate {pso-tsp,maxk-pomo,forecast} [FLAGS]
    pglab solve {ghm,ghm-credit-line} [FLAGS] (finite-difference HJB reference)
    pglab backtest [FLAGS]                   (walk-forward forecasting backtest)
    pglab plot RUN_DIR [FLAGS]               (learning curves of any run)
    pglab validate CHECKPOINT [FLAGS]        (HJB residual of a GHM agent vs the FD optimum)
    pglab compare RUN_DIR... [FLAGS]         (GHM solvers side by side: table, CSV, figure)
    pglab bench NAME [FLAGS]                 (speed benchmarks, see bench/)

Every sub-command parses its own flags from a frozen config dataclass (tyro), so
``pglab train ghm --help`` lists exactly the fields of that trainer's config. Flags may be
written ``--n_iterations`` or ``--n-iterations``.

Exit codes: 0 success; 1 failure; 2 usage or configuration error (bad flag or value,
malformed YAML, corrupt or mismatched checkpoint, unusable data).
"""
from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Sequence

from pglab.errors import EXIT_FAILURE, EXIT_USAGE, PglabError

Handler = str  # "module:function", imported lazily so `pglab --help` stays fast

TRAINERS: dict[str, Handler] = {
    "ghm": "pglab.commands.ghm:train",
    "a2c": "pglab.commands.a2c:train",
    "ppo": "pglab.commands.ppo:train",
    "pso-tsp": "pglab.commands.pso_tsp:train",
    "maxk-pomo": "pglab.commands.maxk:train",
    "forecast": "pglab.commands.forecast:train",
}

# `pglab evaluate NAME ...` for systems evaluated on generated instance sets.
NAMED_EVALUATORS: dict[str, Handler] = {
    "pso-tsp": "pglab.commands.pso_tsp:evaluate",
    "maxk-pomo": "pglab.commands.maxk:evaluate",
    "forecast": "pglab.commands.forecast:evaluate",
}

# `pglab evaluate CHECKPOINT ...`: the checkpoint's ``kind`` starts with one of these.
CHECKPOINT_EVALUATORS: dict[str, Handler] = {
    "ghm": "pglab.commands.ghm:evaluate",
    "a2c": "pglab.commands.a2c:evaluate",
    "ppo": "pglab.commands.ppo:evaluate",
    "pso-tsp": "pglab.commands.pso_tsp:evaluate_checkpoint",
    "maxk-pomo": "pglab.commands.maxk:evaluate_checkpoint",
    "forecast": "pglab.commands.forecast:evaluate_checkpoint",
}

SOLVERS: dict[str, Handler] = {"ghm": "pglab.commands.ghm:solve", "ghm-credit-line": "pglab.commands.ghm_credit_line:solve"}

SINGLE: dict[str, Handler] = {
    "backtest": "pglab.commands.forecast:backtest",
    "plot": "pglab.commands.plot:plot",
    "validate": "pglab.commands.validate:validate",
    "compare": "pglab.commands.compare:compare",
}

BENCHMARKS: dict[str, Handler] = {
    "ghm-rollout": "pglab.bench.ghm_rollout:main",
    "ghm-parallel": "pglab.bench.ghm_parallel:main",
    "a2c-stream": "pglab.bench.a2c_stream:main",
    "maxk": "pglab.bench.maxk:main",
    "tabular": "pglab.bench.tabular:main",
    "ppo-vs-sb3": "pglab.bench.ppo_vs_sb3:main",
}


def _load(handler: Handler) -> Callable[[list[str]], int]:
    module_name, function_name = handler.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def _usage() -> str:
    return (__doc__ or "").split("\n\n")[1] if __doc__ else "pglab COMMAND ..."


def _choose(table: dict[str, Handler], name: str | None, what: str) -> Handler:
    if name is None or name.startswith("-"):
        raise PglabUsage(f"{what}: choose one of {', '.join(table)}")
    if name not in table:
        raise PglabUsage(f"{what}={name!r}: unknown; choose one of {', '.join(table)}")
    return table[name]


class PglabUsage(PglabError):
    exit_code = EXIT_USAGE


def checkpoint_evaluator(path: str) -> Handler:
    """The evaluator for a checkpoint, chosen by the ``kind`` stored in it."""
    from pglab.run.checkpoint import load_checkpoint_file

    kind = load_checkpoint_file(path)["kind"]
    for system in sorted(CHECKPOINT_EVALUATORS, key=len, reverse=True):
        if kind == system or kind.startswith(system + "-"):
            return CHECKPOINT_EVALUATORS[system]
    raise PglabUsage(f"checkpoint {path}: kind={kind!r} has no evaluator")


def dispatch(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else EXIT_USAGE
    command, rest = args[0], args[1:]
    if command == "train":
        return _load(_choose(TRAINERS, rest[0] if rest else None, "train"))(rest[1:])
    if command == "solve":
        return _load(_choose(SOLVERS, rest[0] if rest else None, "solve"))(rest[1:])
    if command == "bench":
        return _load(_choose(BENCHMARKS, rest[0] if rest else None, "bench"))(rest[1:])
    if command == "evaluate":
        if not rest or rest[0] in ("-h", "--help"):
            print("usage: pglab evaluate CHECKPOINT [FLAGS] | pglab evaluate {" + ",".join(NAMED_EVALUATORS) + "} [FLAGS]")
            return 0 if rest else EXIT_USAGE
        if rest[0] in NAMED_EVALUATORS:
            return _load(NAMED_EVALUATORS[rest[0]])(rest[1:])
        return _load(checkpoint_evaluator(rest[0]))(rest)
    if command in SINGLE:
        return _load(SINGLE[command])(rest)
    commands = ["train", "evaluate", "solve", *SINGLE, "bench"]
    raise PglabUsage(f"command={command!r}: unknown; choose one of {', '.join(commands)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pglab``; returns (and, as a console script, exits with) the exit code."""
    try:
        code = dispatch(sys.argv[1:] if argv is None else argv)
    except PglabError as exc:
        print(f"pglab: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("pglab: interrupted", file=sys.stderr)
        code = 130
    except SystemExit as exc:  # tyro/argparse: 2 on a usage error, 0 after --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except Exception:  # a bug, not a usage error: keep the traceback
        traceback.print_exc()
        code = EXIT_FAILURE
    return int(code or 0)


def console_main() -> None:  # pragma: no cover - thin wrapper
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    console_main()
