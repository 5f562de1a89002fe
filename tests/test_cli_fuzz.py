"""Property-based fuzz of every ``pglab`` sub-command's flags, run in-process.

Each example is a tiny-budget command line of one sub-command plus a few of its flags set to
edge values: integers (0, -1, 10**20, 2**63, non-numbers), floats (nan, inf, -0.0, 1e308),
strings and paths (empty, a component longer than 255 bytes, a path under a regular file, a
missing path, unicode), booleans with a stray value, literals (every choice and invalid ones)
and sequences of these. The flags come from each command's config dataclass, so a new field
is fuzzed without editing this file. Whatever the values, ``pglab`` must

- exit 0 or 2 (never 1, a bug, nor 130, an interruption nobody asked for);
- never print a traceback;
- on exit 2, print exactly one ``pglab: error:`` line (other stderr lines are
  ``pglab: warning:`` / ``pglab: note:`` lines) and leave no new file or directory behind,
  neither in the working directory nor in a run directory the command was given.

Examples are derandomized (the same command lines on every run, no example database) and
not shrunk, so a failing run reports the first failing command line as it was generated.
Ray (``--backend ray``, ``--simulator ray``) is left out of the generated choices: it starts
a cluster of processes, seconds each, beyond this file's time budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
import tyro
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pglab.cli import main as pglab_main
from pglab.commands.plot import PlotConfig
from pglab.configs.a2c import A2CEvaluateConfig, A2CTrainConfig
from pglab.configs.forecast import (
    BacktestConfig,
    ForecastEvaluateConfig,
    ForecastModelEvaluateConfig,
    ForecastTrainConfig,
)
from pglab.configs.ghm import (
    CompareConfig,
    CreditLineSolveConfig,
    GHMEvaluateConfig,
    GHMSolveConfig,
    GHMTrainConfig,
    ValidateConfig,
)
from pglab.configs.maxk import MaxKEvalConfig, MaxKPOMOTrainConfig
from pglab.configs.ppo import PPOConfig, PPOEvaluateConfig
from pglab.configs.pso_tsp import PSOTSPEvalConfig, PSOTSPTrainConfig
from pglab.configs.sweep import GHMSweepConfig

# A run that accepts its flags finishes in a second or two; one still running after this
# many seconds accepted a value that makes it unbounded (a finding, not a slow machine).
EXAMPLE_SECONDS = 30
EXCLUDED_CHOICES = {"ray"}  # see the module docstring

# --- values -----------------------------------------------------------------------------------

INTS = ["0", "-1", "1", "2", "3", str(10**20), str(2**63), "-9223372036854775809", "1.5", "abc", ""]
FLOATS = ["nan", "inf", "-inf", "-0.0", "0", "1e308", "-1e308", "1e-320", "-1", "0.5", "1", "2", "abc", ""]
LONG_NAME = "n" * 300  # one path component beyond the 255 bytes a file name may have
PATHS = [
    "",
    ".",
    "out",
    "new/deeper/out.json",
    "file.txt",
    "file.txt/under",
    "missing/thing",
    LONG_NAME,
    f"out/{LONG_NAME}/x",
    "ünïcødé/路径",
    "adir",
    "bad.yaml",
]
STRINGS = ["", "auto", "cpu", "cuda", "cuda:7", "x" * 300, "ünïcødé", "gym:NoSuchEnv-v0", "pglab:nope", "-", "None"]
WORKDIR_FILES = {
    "file.txt": "a regular file\n",
    "bad.yaml": "a: [1, 2\n",
    "list.yaml": "- 1\n- 2\n",
    "unknown.yaml": "no_such_field: 1\n",
    "binary.yaml": None,  # written as bytes: not UTF-8
    "sweep-train.yaml": (
        "n_trajectories: 8\nT: 0.1\ndt: 0.05\neval_dt: 0.05\neval_interval: 1000\neval_quick_paths: 0\neval_paths: 8\n"
        "plots: false\neval_cash: [0.5]\neval_tail_tolerance: 0.5\nfd_nodes: 200\npolicy_hidden_dims: [8]\n"
        "baseline_hidden_dims: [8]\n"
    ),
}
CONFIG_FILES = [
    "sweep-train.yaml",
    "bad.yaml",
    "list.yaml",
    "unknown.yaml",
    "binary.yaml",
    "file.txt",
    "adir",
    "missing.yaml",
    "",
]


def _strip(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """``annotation`` without ``Annotated[...]``, and its markers."""
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *markers = typing.get_args(annotation)
        return inner, tuple(markers)
    return annotation, ()


def _scalar_values(annotation: Any) -> list[str]:
    """Text values a user might type for one item of ``annotation``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        values: list[str] = []  # "None" (the default) is left out: it may mean a full-size run
        for option in typing.get_args(annotation):
            if option is not type(None):
                values += _scalar_values(option)
        return list(dict.fromkeys(values))
    if origin is Literal:
        choices = [str(c) for c in typing.get_args(annotation) if str(c) not in EXCLUDED_CHOICES]
        return [*choices, "bogus", "", choices[0].upper()]
    if annotation is int:
        return INTS
    if annotation is float:
        return FLOATS
    if annotation is str:
        return STRINGS
    if annotation is Path or (isinstance(annotation, type) and issubclass(annotation, os.PathLike)):
        return PATHS
    return STRINGS


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str  # as typed, without the leading --
    annotation: Any
    switch_only: bool = False  # FlagCreatePairsOff: --name only


def flags_of(cls: type, prefix: str = "") -> list[Flag]:
    """Every command-line flag of a config dataclass, nested configs included (their fields
    carry the ``nested.`` prefix unless the field is marked ``OmitArgPrefixes``)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    flags: list[Flag] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        inner, markers = _strip(hints[field.name])
        if any(m is tyro.conf.Positional for m in markers):
            continue  # given by the command's base argv
        if dataclasses.is_dataclass(inner):
            nested_omit = any(m is tyro.conf.OmitArgPrefixes for m in markers)
            flags += flags_of(inner, prefix="" if nested_omit else f"{prefix}{field.name}.")
            continue
        name = (prefix + field.name).replace("_", "-")
        flags.append(Flag(name, inner, switch_only=any(m is tyro.conf.FlagCreatePairsOff for m in markers)))
    return flags


@st.composite
def flag_argv(draw: st.DrawFn, flag: Flag) -> list[str]:
    """One flag with a generated value, as argv items."""
    annotation = flag.annotation
    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    if annotation is bool or (typing.get_origin(annotation) in (typing.Union, types.UnionType) and inner == [bool]):
        if flag.switch_only:
            forms = [[f"--{flag.name}"], [f"--{flag.name}=maybe"]]
        else:
            forms = [[f"--{flag.name}"], [f"--no-{flag.name}"], [f"--{flag.name}=maybe"], [f"--{flag.name}", "0"]]
        return draw(st.sampled_from(forms))
    sequence = next(
        (a for a in [annotation, *inner] if typing.get_origin(a) in (tuple, list)),
        None,
    )
    if sequence is not None:
        item = typing.get_args(sequence)[0]
        values = draw(st.lists(st.sampled_from(_scalar_values(item)), max_size=3))
        return [f"--{flag.name}", *values]
    value = draw(st.sampled_from(_scalar_values(annotation)))
    return draw(st.sampled_from([[f"--{flag.name}", value], [f"--{flag.name}={value}"]]))


# --- sub-commands -----------------------------------------------------------------------------

GHM_TINY = [
    *("--n-trajectories", "8", "--T", "0.1", "--fd-nodes", "400", "--eval-interval", "1000"),
    *("--eval-paths", "8", "--eval-cash", "0.5", "--eval-tail-tolerance", "0.5", "--eval-dt", "0.05"),
    *("--policy-hidden-dims", "8", "--baseline-hidden-dims", "8"),
]
PSO_TINY = ["--num-cities", "6", "--n-particles", "4", "--pso-iterations", "3"]
PSO_TRAIN = [
    *PSO_TINY,
    *("--knn", "3", "--emb-dim", "8", "--num-heads", "2", "--node-layers", "1", "--instances-per-iteration", "2"),
    *("--eval-instances", "4", "--eval-interval", "0", "--tune-candidates", "2", "--tune-instances", "2"),
    *("--es-pairs", "1"),
]
MAXK_TINY = ["--num-loc", "6", "--k", "3", "--batch-size", "4", "--embed-dim", "16", "--num-encoder-layers", "1"]
MAXK_EVAL = ["--k", "3", "--episodes", "2", "--batch-size", "2", "--optimal", "none"]
FORECAST_TINY = ["--source", "synthetic", "--horizon", "5", "--episodes", "2"]
CPU = ["--device", "cpu"]


@dataclasses.dataclass(frozen=True)
class Command:
    """``pglab PREFIX [RUN] BASE FUZZED...``. ``run`` names the system of the fixture run the
    command reads: its directory is the first argument after the prefix (``positional``), or
    the base refers to it as ``{run}``. The base alone is a valid, tiny command line."""

    prefix: tuple[str, ...]
    config: type
    base: tuple[str, ...]
    run: str | None = None
    positional: bool = True
    max_examples: int = 8  # fewer where an accepted example renders figures (seconds each)
    base_runs: bool = True  # run the base alone first (off where it takes tens of seconds)


def _cmd(prefix: str, config: type, base: list[str], **kw: Any) -> Command:
    return Command(tuple(prefix.split()), config, tuple(base), **kw)


def _train(system: str, config: type, base: list[str], **kw: Any) -> Command:
    return _cmd(f"train {system}", config, [*base, *CPU, "--log-dir", "run"], **kw)


COMMANDS: dict[str, Command] = {
    "train ghm": _train("ghm", GHMTrainConfig, ["--n-iterations", "1", *GHM_TINY], max_examples=2),
    "train a2c": _train(
        "a2c",
        A2CTrainConfig,
        ["--num-envs", "4", "--update-every", "1", "--pixel-goal.grid-size", "4", "--hidden", "8"]
        + ["--total-env-steps", "8"],
    ),
    "train ppo": _train(
        "ppo",
        PPOConfig,
        ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--ppo-epochs", "1", "--hidden-dims", "8"]
        + ["--no-tensorboard", "--total-steps", "16", "--eval-episodes", "1"],
    ),
    "train pso-tsp": _train("pso-tsp", PSOTSPTrainConfig, [*PSO_TRAIN, "--n-iterations", "2"]),
    "train maxk-pomo": _train("maxk-pomo", MaxKPOMOTrainConfig, [*MAXK_TINY, "--num-heads", "2", "--n-steps", "2"]),
    "train forecast": _train("forecast", ForecastTrainConfig, FORECAST_TINY),
    "evaluate ghm-run": _cmd(
        "evaluate",
        GHMEvaluateConfig,
        ["--episodes", "8", "--cash", "0.5", "--tail-tolerance", "0.5", "--dt", "0.5", *CPU],
        run="ghm",
    ),
    "evaluate a2c-run": _cmd("evaluate", A2CEvaluateConfig, ["--episodes", "2", "--num-envs", "2", *CPU], run="a2c"),
    "evaluate ppo-run": _cmd("evaluate", PPOEvaluateConfig, ["--episodes", "1", *CPU], run="ppo"),
    "evaluate pso-tsp-run": _cmd(
        "evaluate", PSOTSPEvalConfig, ["--episodes", "2", "--no-optimal", "--no-equal-time", *CPU], run="pso-tsp"
    ),
    "evaluate maxk-pomo-run": _cmd("evaluate", MaxKEvalConfig, [*MAXK_EVAL, *CPU], run="maxk-pomo"),
    "evaluate forecast-run": _cmd("evaluate", ForecastEvaluateConfig, CPU, run="forecast"),
    "evaluate pso-tsp": _cmd(
        "evaluate pso-tsp", PSOTSPEvalConfig, [*PSO_TINY, "--episodes", "2", "--no-optimal", "--no-equal-time", *CPU]
    ),
    "evaluate maxk-pomo": _cmd(
        "evaluate maxk-pomo",
        MaxKEvalConfig,
        ["--checkpoints", "{run}", *MAXK_EVAL, *CPU],
        run="maxk-pomo",
        positional=False,
    ),
    "evaluate forecast": _cmd(
        "evaluate forecast",
        ForecastModelEvaluateConfig,
        ["--model", "{run}/forecaster.json", "--source", "synthetic", *CPU],
        run="forecast",
        positional=False,
    ),
    "solve ghm": _cmd("solve ghm", GHMSolveConfig, ["--nodes", "400", "--cash", "0.5"]),
    "solve ghm-credit-line": _cmd(
        "solve ghm-credit-line", CreditLineSolveConfig, ["--nodes", "400", "--cash", "0.5"], max_examples=4
    ),
    "sweep ghm": _cmd(
        "sweep ghm",
        GHMSweepConfig,
        ["--sigma", "0.2", "--backend", "serial", "--n-iterations", "1", "--train-config", "sweep-train.yaml"]
        + ["--fd-line-points", "2", "--fd-line-nodes", "200", *CPU, "--log-dir", "run"],
        max_examples=2,
        base_runs=False,  # a sweep trains GHM runs (see train ghm) and solves an FD line: ~20 s
    ),
    "backtest": _cmd(
        "backtest",
        BacktestConfig,
        ["--source", "synthetic", "--horizon", "3", "--episodes", "1", "--windows", "1", "--window-size", "6"],
        max_examples=4,
    ),
    "plot": _cmd("plot", PlotConfig, ["--keys", "return/mean"], run="ppo", max_examples=4),
    "validate": _cmd("validate", ValidateConfig, ["--n-points", "51"], run="ghm", max_examples=3),
    "compare": _cmd("compare", CompareConfig, ["--no-residual"], run="ghm", max_examples=3),
}
# the run each fixture trains: the train command's base, into the fixture's directory
FIXTURE_RUNS = {
    system: COMMANDS[f"train {system}"] for system in ("ghm", "a2c", "ppo", "pso-tsp", "maxk-pomo", "forecast")
}


def test_every_subcommand_is_fuzzed():
    """The table above covers every train, evaluate, solve and sweep name and single command."""
    from pglab.cli import SINGLE, SOLVERS, SWEEPS, _system_table

    expected = {f"train {name}" for name in _system_table("train")}
    expected |= {f"evaluate {name}-run" for name in _system_table("evaluate_checkpoint")}
    expected |= {f"evaluate {name}" for name in _system_table("evaluate_named")}
    expected |= {f"solve {name}" for name in SOLVERS} | {f"sweep {name}" for name in SWEEPS} | set(SINGLE)
    assert set(COMMANDS) == expected


# --- running one example ----------------------------------------------------------------------


class ExampleTimeout(BaseException):
    """Raised by SIGALRM: a BaseException, so that pglab's catch-all does not swallow it."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise ExampleTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def tree(root: Path) -> set[str]:
    """Every file and directory below ``root``, as paths relative to it."""
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def prepare_workdir(path: Path) -> None:
    path.mkdir(parents=True)
    for name, text in WORKDIR_FILES.items():
        if text is None:
            (path / name).write_bytes(b"\xff\xfe\x00 not text")
        else:
            (path / name).write_text(text)
    (path / "adir").mkdir()


@contextlib.contextmanager
def restored_torch_state() -> Iterator[None]:
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)


def run_cli(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int | str, str, str]:
    """``pglab argv`` in-process: (exit code or "timeout", stdout, stderr)."""
    capfd.readouterr()
    code: int | str
    with restored_torch_state():
        try:
            with time_limit(EXAMPLE_SECONDS):
                code = pglab_main(argv)
        except ExampleTimeout:
            code = f"still running after {EXAMPLE_SECONDS} s"
    out, err = capfd.readouterr()
    return code, out, err


def check_outcome(argv: list[str], code: int | str, out: str, err: str, before: dict[Path, set[str]]) -> None:
    shown = " ".join(repr(a) if (not a or " " in a) else a for a in argv)
    context = f"\n  pglab {shown}\n  exit {code}\n  stderr (last 1500 chars):\n{err[-1500:]}"
    assert code in (0, 2), "exit code is neither 0 nor 2:" + context
    assert "Traceback" not in err and "Traceback" not in out, "a traceback:" + context
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("pglab: error:")]
    if code == 0:
        assert not errors, "exit 0 with an error line:" + context
        return
    assert len(errors) == 1, f"{len(errors)} 'pglab: error:' lines:" + context
    others = [line for line in lines if line not in errors and not line.startswith(("pglab: warning:", "pglab: note:"))]
    assert not others, "stderr lines other than the error and warnings:" + context
    for root, paths in before.items():
        left = sorted(tree(root) - paths)
        assert not left, f"exit 2 left behind in {root}: {left[:5]}" + context


# --- fixtures: one tiny run of each system ----------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "runs").mkdir()
    return root


_RUNS: dict[str, Path] = {}


def fixture_run(system: str, root: Path) -> Path:
    """The run directory of a tiny ``pglab train SYSTEM`` run, trained once per module."""
    if system not in _RUNS:
        command = FIXTURE_RUNS[system]
        run_dir = root / "runs" / system
        argv = [*command.prefix, *command.base[:-1], str(run_dir)]  # the base ends with --log-dir run
        with contextlib.redirect_stdout(None):
            code = pglab_main(argv)
        assert code == 0, f"fixture run failed: pglab {' '.join(argv)}"
        _RUNS[system] = run_dir
    return _RUNS[system]


def positional_run(run_dir: Path) -> st.SearchStrategy[str]:
    """Mostly the run itself (its directory, its checkpoints/ folder), sometimes any path."""
    good = st.sampled_from([str(run_dir), str(run_dir / "checkpoints")])
    return st.one_of(good, good, good, st.sampled_from(PATHS))


def base_argv(command: Command, run_dir: Path | None) -> list[str]:
    head = [*command.prefix, *([str(run_dir)] if run_dir is not None and command.positional else [])]
    return [*head, *(item.replace("{run}", str(run_dir)) for item in command.base)]


@st.composite
def command_line(draw: st.DrawFn, command: Command, run_dir: Path | None) -> list[str]:
    """The base command line with one to three of the command's flags appended (the last
    occurrence of a flag wins), sometimes with ``--config FILE``; its run argument is mostly
    the fixture run, sometimes any path."""
    flags = flags_of(command.config)
    chosen = draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3, unique_by=lambda f: f.name))
    fuzzed = [item for flag in chosen for item in draw(flag_argv(flag))]
    if draw(st.integers(0, 5)) == 0:  # every command reads --config FILE.yaml (defaults < YAML < flags)
        fuzzed += ["--config", draw(st.sampled_from(CONFIG_FILES))]
    argv = base_argv(command, run_dir)
    if run_dir is not None and command.positional:
        argv[len(command.prefix)] = draw(positional_run(run_dir))
    return [*argv, *fuzzed]


def fuzz_settings(max_examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        print_blob=False,
    )


def run_example(argv: list[str], workdir: Path, run_dir: Path | None, capfd: pytest.CaptureFixture[str]) -> int | str:
    """Run ``pglab argv`` in a fresh ``workdir`` and check the properties; the exit code."""
    prepare_workdir(workdir)
    before = {root: tree(root) for root in [workdir, *([run_dir] if run_dir is not None else [])]}
    with working_directory(workdir):
        code, out, err = run_cli(argv, capfd)
    check_outcome(argv, code, out, err, before)
    return code


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_fuzzed_flags_exit_0_or_2_with_one_line_and_leave_nothing_behind(
    name: str, fuzz_root: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    command = COMMANDS[name]
    run_dir = fixture_run(command.run, fuzz_root) if command.run else None
    workdirs = (fuzz_root / "work" / f"{name.replace(' ', '_')}-{i}" for i in range(10**6))
    # the base alone runs: the fuzz explores around a command line that is accepted
    if command.base_runs:
        assert run_example(base_argv(command, run_dir), next(workdirs), run_dir, capfd) == 0

    @fuzz_settings(command.max_examples)
    @given(argv=command_line(command, run_dir))
    def example(argv: list[str]) -> None:
        run_example(argv, next(workdirs), run_dir, capfd)

    example()
