"""The training shell (pglab.run.shell), checkpoint integrity, the logger's no-loss rules
and the flag parser, tested on a toy trainer so that each property is pinned once,
independently of any system."""

from __future__ import annotations

import csv
import dataclasses
import errno
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from pglab.errors import EXIT_INTERRUPTED, CheckpointError, ConfigError, FileSystemError, UsageError
from pglab.run.checkpoint import build_checkpoint, load_checkpoint_file, save_checkpoint
from pglab.run.config import config_from_dict, parse_flags
from pglab.run.logger import MetricsLogger
from pglab.run.seeding import make_generator
from pglab.run.shell import TrainerSpec, TrainingRun
from pglab.run.signals import Stopped
from pglab.run.state import Value
from pglab.validation import check_device, check_int, check_positive


@dataclass(frozen=True)
class ToyConfig:
    """A trainer that adds lr * N(0, 1) draws to a running sum."""

    steps: int = 6
    """budget"""
    lr: float = 0.5
    """step size (not resumable)"""
    width: int = 3
    """draws per step (not resumable)"""
    eval_size: int = 2
    """evaluation size (resumable)"""
    seed: int = 0
    """seed"""
    device: str = "auto"
    """device"""
    threads: int = 0
    """threads"""
    save_interval: int = 2
    """steps between checkpoints"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (0: all)"""
    log_dir: Path | None = None
    """run directory"""
    resume: Path | None = None
    """run to continue"""
    tensorboard: bool = False
    """TensorBoard events"""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"n_steps": "steps", "old_lr": "lr"}

    def __post_init__(self):
        check_int("steps", self.steps, minimum=1)
        check_positive("lr", self.lr)
        check_int("width", self.width, minimum=1)
        check_int("eval_size", self.eval_size, minimum=1)
        check_device("device", self.device)
        check_int("save_interval", self.save_interval, minimum=1)
        if self.resume is None and self.steps < self.width:  # a budget cross-check, skipped on resume
            raise ConfigError("steps", self.steps, f"must be >= width ({self.width})")


SPEC = TrainerSpec(
    system="toy",
    config_class=ToyConfig,
    kinds=("toy",),
    step_key="step",
    resumable=frozenset({"steps", "eval_size"}),
    total_steps=lambda c: c.steps,
    budget_field="steps",
)


def train_toy(
    config: ToyConfig,
    *,
    given=None,
    stop_after=None,
    fail_at_build=False,
    echo=lambda *a, **k: None,
    signals: dict[str, int] | None = None,
):
    """``signals``: SIGTERMs sent to this process at a phase: ``build`` (before the first
    step), ``step<N>`` (inside step N) or ``final`` (after the loop, as during a final
    evaluation), e.g. ``{"step2": 2}`` sends two inside step 2."""

    def send(phase: str) -> None:
        for _ in range((signals or {}).get(phase, 0)):
            os.kill(os.getpid(), signal.SIGTERM)

    with TrainingRun(SPEC, config, given=given, stop_after=stop_after, echo=echo) as run:
        config = run.config
        if fail_at_build:
            raise RuntimeError("build failed")
        send("build")
        generator = make_generator(config.seed)
        total = Value(torch.zeros(()))
        # the shell restores both on a resume and checkpoints them from now on
        run.track(state={"total": total}, rngs={"toy": generator}, meta={"width": config.width})

        for step in run.steps(config.steps):
            send(f"step{step}")
            total.value += config.lr * torch.randn(config.width, generator=generator).sum()
            run.log(
                step,
                {
                    "total": total.value,
                    "stats/lr": config.lr,
                    **({"late/column": 1.0} if step >= 4 else {}),
                    "return/mean": float("nan") if step % 2 else 1.0,
                },
            )
        send("final")
        run.finish({"total": float(total.value)})
    return run, float(total.value)


def _csv_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _config(tmp_path, name="run", **changes):
    return ToyConfig(log_dir=tmp_path / name, **changes)


# -- resume semantics ------------------------------------------------------------------
def test_split_run_equals_one_run_bit_for_bit(tmp_path):
    _, whole = train_toy(_config(tmp_path, "whole"))
    first, _ = train_toy(_config(tmp_path, "split"), stop_after=3)
    assert first.interrupted and first.exit_code == EXIT_INTERRUPTED
    assert load_checkpoint_file(tmp_path / "split")["counters"]["step"] == 3
    second, resumed = train_toy(ToyConfig(resume=tmp_path / "split"), given=frozenset({"resume"}))
    assert second.exit_code == 0 and resumed == whole
    assert json.loads((tmp_path / "split" / "summary.json").read_text())["status"] == "completed"
    rows = _csv_rows(tmp_path / "split" / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]


def test_given_resumable_flag_applies_even_when_it_equals_the_default(tmp_path):
    train_toy(_config(tmp_path, eval_size=7, steps=4))
    parsed = parse_flags(ToyConfig, ["--resume", str(tmp_path / "run"), "--eval-size", "2", "--steps", "6"], prog="toy")
    assert parsed.given == {"resume", "eval_size", "steps"}
    run, _ = train_toy(parsed.config, given=parsed.given)
    assert run.config.eval_size == 2 and run.config.steps == 6  # 2 is the default: still applied


def test_given_non_resumable_flag_is_refused_even_when_it_equals_the_default(tmp_path):
    train_toy(_config(tmp_path, lr=1e-3, steps=4))
    parsed = parse_flags(ToyConfig, ["--resume", str(tmp_path / "run"), "--lr", "0.5"], prog="toy")
    with pytest.raises(ConfigError, match=r"lr: differs from the resumed run's value 0.001.*\(got 0.5\)"):
        train_toy(parsed.config, given=parsed.given)
    # The same value as stored is not a change.
    parsed = parse_flags(ToyConfig, ["--resume", str(tmp_path / "run"), "--lr", "1e-3", "--steps", "5"], prog="toy")
    run, _ = train_toy(parsed.config, given=parsed.given)
    assert run.config.lr == 1e-3 and run.counters["step"] == 5


def test_a_log_dir_given_with_resume_must_be_the_resumed_run(tmp_path):
    # it was ignored without a word: the run continued in its own directory
    train_toy(_config(tmp_path, steps=4))
    parsed = parse_flags(
        ToyConfig, ["--resume", str(tmp_path / "run"), "--log-dir", str(tmp_path / "other"), "--steps", "5"], prog="toy"
    )
    with pytest.raises(
        ConfigError, match=r"log_dir: a resumed run continues in its own directory .*run.*\(got '.*other'\)"
    ):
        train_toy(parsed.config, given=parsed.given)
    assert not (tmp_path / "other").exists()
    parsed = parse_flags(
        ToyConfig, ["--resume", str(tmp_path / "run"), "--log-dir", str(tmp_path / "run"), "--steps", "5"], prog="toy"
    )
    run, _ = train_toy(parsed.config, given=parsed.given)
    assert run.counters["step"] == 5


def test_flags_not_given_keep_the_stored_values_and_budget_checks_use_the_merged_config(tmp_path):
    train_toy(_config(tmp_path, width=1, steps=2))
    # steps=2 < default width 3 would fail a fresh run; on resume the stored width 1 applies.
    parsed = parse_flags(ToyConfig, ["--resume", str(tmp_path / "run"), "--steps", "2"], prog="toy")
    run, _ = train_toy(parsed.config, given=parsed.given)
    assert run.config.width == 1
    with pytest.raises(
        ConfigError, match=r"steps: the resumed run has already done step 2; this budget ends at step 1 \(got 1\)"
    ):
        lines: list[str] = []
        train_toy(ToyConfig(resume=tmp_path / "run", steps=1), given=frozenset({"resume", "steps"}), echo=lines.append)
    assert lines == []  # no "resume: continuing ..." line for a resume that is refused


def test_a_resume_that_changes_stored_values_says_which(tmp_path):
    # e.g. the same --config file given again raising the budget: one line names the change
    train_toy(_config(tmp_path, steps=3))
    lines = []
    train_toy(
        ToyConfig(resume=tmp_path / "run", steps=5, eval_size=2),
        given=frozenset({"resume", "steps", "eval_size"}),
        echo=lambda *args, **kwargs: lines.append(" ".join(map(str, args))),
    )
    assert [line for line in lines if line.startswith("resume:")] == [
        f"resume: continuing {tmp_path / 'run'} with steps 3 -> 5"
    ]


def test_resume_from_a_named_checkpoint_file_must_be_the_latest(tmp_path):
    train_toy(_config(tmp_path, steps=6))  # checkpoints at steps 2, 4 and 6
    checkpoints = tmp_path / "run" / "checkpoints"
    numbered = sorted(p for p in checkpoints.glob("*.pt") if "latest" not in p.name)
    assert len(numbered) >= 2
    # an earlier checkpoint file is refused by name: a run continues from its latest
    with pytest.raises(ConfigError, match=r"resume: is step 4, not the run's latest checkpoint \(step 6"):
        train_toy(ToyConfig(resume=numbered[-2], steps=8), given=frozenset({"resume", "steps"}))
    # the latest, by its own name or as the numbered file of the same step, continues; so
    # does any other file of the run (config.json: the run directory)
    for name in (checkpoints / "checkpoint_latest.pt", numbered[-1], tmp_path / "run" / "config.json"):
        run, _ = train_toy(ToyConfig(resume=name, steps=6), given=frozenset({"resume", "steps"}))
        assert run.counters["step"] == 6 and run.exit_code == 0


def test_a_signal_inside_a_step_ends_it_saves_and_exits_130(tmp_path):
    _, whole = train_toy(_config(tmp_path, "whole"))
    run, _ = train_toy(_config(tmp_path, steps=6), signals={"step3": 1})
    assert run.interrupted and run.exit_code == EXIT_INTERRUPTED
    assert load_checkpoint_file(tmp_path / "run")["counters"]["step"] == 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    resumed, total = train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))
    assert resumed.exit_code == 0 and total == whole


def test_a_second_signal_inside_a_step_stops_at_once_keeping_the_last_checkpoint(tmp_path):
    with pytest.raises(Stopped) as stopped:
        train_toy(_config(tmp_path, steps=6), signals={"step3": 2})
    assert "the checkpoint of step 2 is intact" in stopped.value.note
    assert load_checkpoint_file(tmp_path / "run")["counters"]["step"] == 2
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    _, whole = train_toy(_config(tmp_path, "whole"))
    _, total = train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))
    assert total == whole


def test_a_signal_before_the_first_checkpoint_leaves_nothing(tmp_path):
    with pytest.raises(Stopped) as stopped:
        train_toy(_config(tmp_path), signals={"build": 1})
    assert "nothing was kept" in stopped.value.note
    assert not (tmp_path / "run").exists()
    with pytest.raises(Stopped):  # the first step's signal waits for its end, when no checkpoint is due yet
        train_toy(_config(tmp_path, save_interval=2), signals={"step1": 2})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("phase", ["step6", "final"])
def test_a_signal_in_the_last_step_or_after_the_loop_stops_at_once_and_resume_finishes(tmp_path, phase):
    # no final evaluation holds up the exit: the final checkpoint is saved, the process
    # stops, and --resume runs what was left (here the summary)
    with pytest.raises(Stopped):
        train_toy(_config(tmp_path, steps=6), signals={phase: 1})
    assert load_checkpoint_file(tmp_path / "run")["counters"]["step"] == 6
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    _, whole = train_toy(_config(tmp_path, "whole"))
    resumed, total = train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))
    assert resumed.exit_code == 0 and total == whole
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_device_given_on_resume_is_applied(tmp_path):
    train_toy(_config(tmp_path, device="auto", steps=3))
    run, _ = train_toy(
        ToyConfig(resume=tmp_path / "run", device="cpu", steps=4), given=frozenset({"resume", "device", "steps"})
    )
    assert run.config.device == "cpu"
    assert load_checkpoint_file(tmp_path / "run")["config"]["device"] == "cpu"


def test_resume_accepts_a_checkpoint_file_and_refuses_other_kinds(tmp_path):
    train_toy(_config(tmp_path, steps=3))
    ckpt = tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt"
    run, _ = train_toy(ToyConfig(resume=ckpt, steps=4), given=frozenset({"resume", "steps"}))
    assert run.run_dir == tmp_path / "run"
    other = dataclasses.replace(SPEC, kinds=("other",))
    with pytest.raises(CheckpointError, match="holds a 'toy' run"):
        TrainingRun(other, ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))


# -- run-directory lifecycle -----------------------------------------------------------
def test_failed_start_leaves_nothing_behind(tmp_path):
    with pytest.raises(RuntimeError):
        train_toy(_config(tmp_path, "nested/run"), fail_at_build=True)
    assert not (tmp_path / "nested").exists()
    with pytest.raises(ConfigError, match="device"):
        train_toy(_config(tmp_path, device="cuda:7"))
    assert not (tmp_path / "run").exists()
    # An existing empty directory is kept, but nothing this run wrote stays in it.
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError):
        train_toy(_config(tmp_path, "empty"), fail_at_build=True)
    assert list((tmp_path / "empty").iterdir()) == []
    run, _ = train_toy(_config(tmp_path, "empty", steps=3))  # and a retry starts cleanly
    assert run.counters["step"] == 3


def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_zero(tmp_path):
    from pglab.run.rundir import write_run_config

    run_dir = tmp_path / "killed"
    run_dir.mkdir()
    write_run_config(run_dir, dataclasses.asdict(ToyConfig()) | {"log_dir": None, "resume": None}, kind="toy")
    (run_dir / "metrics.csv").write_text("step,total\n1,0.5\n")  # a row from the killed attempt
    lines = []
    run, resumed = train_toy(
        ToyConfig(resume=run_dir),
        given=frozenset({"resume"}),
        echo=lambda *args, **kwargs: lines.append(" ".join(map(str, args))),
    )
    _, fresh = train_toy(_config(tmp_path, "fresh"))
    assert resumed == fresh and run.counters["step"] == 6
    # said, not silent: the user may have expected a checkpoint there
    assert f"resume: {run_dir} holds no checkpoint; training starts again from step 0" in lines
    assert [r["step"] for r in _csv_rows(run_dir / "metrics.csv")] == ["1", "2", "3", "4", "5", "6"]


def test_an_existing_run_is_never_overwritten_and_an_empty_log_dir_is_refused(tmp_path):
    train_toy(_config(tmp_path, steps=3))
    with pytest.raises(ConfigError, match="already holds a run"):
        train_toy(_config(tmp_path, steps=3))
    for bad in ("", "."):
        with pytest.raises(ConfigError, match="log_dir"):
            train_toy(ToyConfig(log_dir=Path(bad)))


# -- logs ------------------------------------------------------------------------------
def test_logs_lose_no_field_and_write_no_nan(tmp_path):
    train_toy(_config(tmp_path))
    rows = _csv_rows(tmp_path / "run" / "metrics.csv")
    assert "late/column" in rows[0]  # first seen at step 4: the header was extended
    assert [r["late/column"] for r in rows] == ["", "", "", "1.0", "1.0", "1.0"]
    assert [r["return/mean"] for r in rows] == ["", "1.0", "", "1.0", "", "1.0"]
    assert "nan" not in (tmp_path / "run" / "metrics.csv").read_text().lower()
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["meta"]["kind"] == "toy" and lines[0]["meta"]["width"] == 3  # the shell's first line
    records = lines[1:]
    assert "return/mean" not in records[0] and records[1]["return/mean"] == 1.0
    assert records[3]["late/column"] == 1.0


def test_resumed_logger_keeps_columns_first_seen_after_the_checkpoint(tmp_path):
    with MetricsLogger(tmp_path, step_key="step", jsonl_name="m.jsonl", tensorboard_dir=None) as logger:
        logger.log(1, {"a": 1.0})
        logger.log(2, {"a": 2.0, "b": 5.0})
    with MetricsLogger(tmp_path, step_key="step", jsonl_name="m.jsonl", tensorboard_dir=None, resume_step=1) as logger:
        logger.log(2, {"a": 2.0, "b": 6.0, "c": 7.0})
    rows = _csv_rows(tmp_path / "metrics.csv")
    assert rows == [{"step": "1", "a": "1.0", "b": "", "c": ""}, {"step": "2", "a": "2.0", "b": "6.0", "c": "7.0"}]


# -- checkpoints -----------------------------------------------------------------------
def _saved(tmp_path):
    state = build_checkpoint(
        kind="toy", config={}, counters={"step": 1}, models={"net": {"weight": torch.arange(4096, dtype=torch.float32)}}
    )
    return save_checkpoint(tmp_path / "ckpt.pt", state)


def test_checkpoint_digest_catches_flipped_bytes_in_the_weights(tmp_path):
    path = _saved(tmp_path)
    assert torch.equal(load_checkpoint_file(path)["models"]["net"]["weight"], torch.arange(4096, dtype=torch.float32))
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 400] = bytes(b ^ 0xFF for b in raw[middle : middle + 400])
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupt|integrity check failed"):
        load_checkpoint_file(path)


def test_garbage_and_truncated_files_are_checkpoint_errors(tmp_path):
    garbage = tmp_path / "g" / "checkpoint.pt"
    garbage.parent.mkdir()
    garbage.write_text("hello\n")
    with pytest.raises(CheckpointError, match="not a readable checkpoint") as info:
        load_checkpoint_file(garbage)
    assert "weights_only" not in str(info.value)
    path = _saved(tmp_path)
    path.write_bytes(path.read_bytes()[:-500])
    with pytest.raises(CheckpointError):
        load_checkpoint_file(path)


def test_checkpoint_loads_with_device_auto(tmp_path):
    loaded = load_checkpoint_file(_saved(tmp_path), map_location="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert loaded["models"]["net"]["weight"].device.type == expected


# -- flags -----------------------------------------------------------------------------
def test_deprecated_names_work_in_flags_yaml_and_stored_configs(tmp_path, capsys):
    parsed = parse_flags(ToyConfig, ["--n_steps", "9", "--old-lr=0.25"], prog="toy")
    assert parsed.config.steps == 9 and parsed.config.lr == 0.25 and parsed.given == {"steps", "lr"}
    assert capsys.readouterr().err.count("deprecated") == 2
    assert config_from_dict(ToyConfig, {"n_steps": 7}).steps == 7
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("n_steps: 8\neval_size: 3\n")
    parsed = parse_flags(ToyConfig, ["--config", str(yaml_file)], prog="toy")
    assert parsed.config.steps == 8 and parsed.given == {"steps", "eval_size"}


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--lr", "-1"], r"lr: must be > 0 \(got -1.0\)"),
        (["--bogus", "1"], "bogus: unknown flag"),
        (["--steps"], "steps: needs a value"),
        (["--steps", "x"], "steps"),
        (["--steps", "3", "stray"], r"argument: unexpected value \(got stray\)"),
    ],
)
def test_flag_errors_are_one_line_config_errors(argv, expected):
    with pytest.raises(ConfigError, match=expected) as info:
        parse_flags(ToyConfig, argv, prog="toy")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--fused-update", "maybe"], r"fused_update: --fused-update takes no value \(got 'maybe'\)"),
        (["--no-fused-update=1"], r"fused_update: --no-fused-update takes no value \(got '1'\)"),
        (["--normalize-obs", "true"], r"normalize_obs: --normalize-obs takes no value \(got 'true'\)"),
        (["--seed", "2", "--fused-update", "2"], r"fused_update: --fused-update takes no value \(got '2'\)"),
    ],
)
def test_a_value_given_to_a_switch_names_the_switch(argv, expected):
    # it once said only "argument: unexpected value (got maybe)"
    from pglab.configs.ppo import PPOConfig

    with pytest.raises(ConfigError, match=expected):
        parse_flags(PPOConfig, argv, prog="pglab train ppo")


def test_config_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        parse_flags(ToyConfig, ["--config", str(tmp_path)], prog="toy")
    unreadable = tmp_path / "u.yaml"
    unreadable.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot be read|not valid YAML"):
        parse_flags(ToyConfig, ["--config", str(unreadable)], prog="toy")


# -- the command line ------------------------------------------------------------------
def _pglab(*argv):
    return subprocess.run([sys.executable, "-m", "pglab.cli", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "argv", [["--help"], ["train", "--help"], ["solve", "--help"], ["bench", "--help"], ["evaluate", "--help"]]
)
def test_help_exits_zero_and_lists_what_exists(argv):
    result = _pglab(*argv)
    assert result.returncode == 0, result.stderr
    if argv[0] == "train":
        assert all(
            name in result.stdout for name in ("ghm", "a2c", "ppo", "pso-tsp", "maxk-pomo", "forecast", "--log-dir")
        )
    if argv[0] == "evaluate":
        assert "--episodes" in result.stdout and "--output" in result.stdout


def test_top_level_help_does_not_import_torch():
    code = (
        "import sys\nfrom pglab.cli import main\n"
        "for argv in (['--help'], ['train', '--help'], ['evaluate', '--help'], ['solve', '--help'],\n"
        "             ['bench', '--help']):\n"
        "    assert main(argv) == 0\n"
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr


def test_garbage_checkpoint_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "checkpoint.pt").write_text("hello\n")
    result = _pglab("evaluate", str(tmp_path / "g" / "checkpoint.pt"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("pglab: error: checkpoint")
    assert "Traceback" not in result.stderr and "weights_only" not in result.stderr


def test_plot_output_may_be_a_directory_and_leaves_no_temporary(tmp_path):
    from pglab.run.plots import plot_learning_curves

    train_toy(_config(tmp_path))
    out = tmp_path / "figures"
    out.mkdir()
    written = plot_learning_curves(tmp_path / "run", output=out)
    assert written == out / "learning_curves.png" and written.stat().st_size > 0
    assert sorted(p.name for p in out.iterdir()) == ["learning_curves.png"]
    result = _pglab("plot", str(tmp_path / "run"), "--output", str(tmp_path / "fig.txt"))
    assert result.returncode == 2 and "output" in result.stderr


def test_a_field_missing_from_an_old_stored_config_takes_the_specs_stored_default(tmp_path):
    """A run made before `width` existed resumes with the value it was trained with
    (TrainerSpec.stored_defaults), not with today's default."""
    import pglab.run.shell as shell_module
    from pglab.run.checkpoint import save_checkpoint

    train_toy(ToyConfig(log_dir=tmp_path / "old", width=1), stop_after=2)
    path = (tmp_path / "old" / "checkpoints" / "checkpoint_latest.pt").resolve()
    checkpoint = load_checkpoint_file(path)
    checkpoint.pop("path")
    del checkpoint["config"]["width"]  # written before the field existed
    save_checkpoint(path, checkpoint)
    meta = json.loads((tmp_path / "old" / "config.json").read_text())
    del meta["config"]["width"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(meta))
    old_spec = dataclasses.replace(SPEC, stored_defaults={"width": 1})
    resumed = shell_module.resolve_resume(old_spec, ToyConfig(resume=tmp_path / "old"), frozenset({"resume"}))[0]
    assert resumed.width == 1
    assert shell_module.resolve_resume(SPEC, ToyConfig(resume=tmp_path / "old"), frozenset({"resume"}))[0].width == 3


def test_warnings_reach_the_command_line_user_as_one_line_each_once(monkeypatch, capsys):
    # Python's default shows file:line and a source excerpt, which reads like a crash
    import warnings

    import pglab.cli as cli

    def warns(argv):
        warnings.warn("the environment could not be checkpointed", UserWarning, stacklevel=1)
        warnings.warn("\x1b[33mWARN: Taxi-v3 is out of date\x1b[0m", UserWarning, stacklevel=1)  # Gymnasium's colours
        warnings.warn("WARN: Taxi-v3 is out of date", UserWarning, stacklevel=1)  # the same text again: not repeated
        return 0

    monkeypatch.setattr(cli, "dispatch", warns)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        previous = warnings.showwarning
        assert cli.main([]) == 0
        assert warnings.showwarning is previous  # restored for the library user
    err = capsys.readouterr().err
    assert (
        err
        == "pglab: warning: the environment could not be checkpointed\npglab: warning: WARN: Taxi-v3 is out of date\n"
    )


# -- the state a trainer registers (TrainingRun.track) ---------------------------------
def _edit_latest(tmp_path, edit):
    stored = (tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt").resolve()
    checkpoint = load_checkpoint_file(stored)
    edit(checkpoint)
    save_checkpoint(stored, {k: v for k, v in checkpoint.items() if k != "path"})


def test_a_resume_with_other_meta_is_refused_naming_it(tmp_path):
    train_toy(_config(tmp_path), stop_after=2)
    _edit_latest(tmp_path, lambda checkpoint: checkpoint["extra"].update(width=5))
    with pytest.raises(CheckpointError, match="its width 5 differs from this run's 3"):
        train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))


def test_a_checkpoint_without_a_registered_entry_is_refused_naming_it(tmp_path):
    train_toy(_config(tmp_path), stop_after=2)
    _edit_latest(tmp_path, lambda checkpoint: checkpoint["extra"].pop("total"))
    with pytest.raises(CheckpointError, match="holds no extra entry 'total'"):
        train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))


def test_every_row_carries_the_shells_perf_metrics(tmp_path):
    train_toy(_config(tmp_path))
    rows = _csv_rows(tmp_path / "run" / "metrics.csv")
    assert all(float(row["perf/step_s"]) > 0 for row in rows)
    assert "perf/env_steps_per_s" not in rows[0]  # the toy counts no environment steps


# -- one owner per run directory ---------------------------------------------------------
def _hold_lock(run_dir: Path) -> subprocess.Popen:
    """Another process that owns ``run_dir`` (holds its lock) until killed."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pglab.run.rundir import RunDirLock; "
            "RunDirLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(600)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_a_run_directory_in_use_is_refused_naming_its_owner_and_taken_over_after_it_dies(tmp_path):
    train_toy(_config(tmp_path, steps=4))
    run_dir = tmp_path / "run"
    rows_before = (run_dir / "metrics.csv").read_text()
    holder = _hold_lock(run_dir)
    try:
        with pytest.raises(UsageError, match=rf"in use by process {holder.pid}\b"):
            train_toy(ToyConfig(resume=run_dir, steps=6), given=frozenset({"resume", "steps"}))
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        holder_of_fresh = _hold_lock(fresh)
        try:
            with pytest.raises(UsageError, match=rf"in use by process {holder_of_fresh.pid}\b"):
                train_toy(_config(tmp_path, "fresh"))
            assert sorted(p.name for p in fresh.iterdir()) == [".lock"]  # nothing of the refused run
        finally:
            holder_of_fresh.kill()
            holder_of_fresh.wait()
    finally:
        holder.kill()  # kill -9: the kernel releases the lock
        holder.wait()
    assert (run_dir / "metrics.csv").read_text() == rows_before  # the refused resume wrote nothing
    run, _ = train_toy(ToyConfig(resume=run_dir, steps=6), given=frozenset({"resume", "steps"}))
    assert run.counters["step"] == 6
    steps = [int(row["step"]) for row in _csv_rows(run_dir / "metrics.csv")]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_keep_checkpoints_keeps_the_newest_numbered_files_and_zero_keeps_all(tmp_path):
    def numbered(name):
        return sorted(p.name for p in (tmp_path / name / "checkpoints").glob("checkpoint_iter_*.pt"))

    train_toy(_config(tmp_path, "three", steps=12))
    assert numbered("three") == [f"checkpoint_iter_{step:06d}.pt" for step in (8, 10, 12)]
    train_toy(_config(tmp_path, "one", steps=12, keep_checkpoints=1))
    assert numbered("one") == ["checkpoint_iter_000012.pt"]
    train_toy(_config(tmp_path, "all", steps=12, keep_checkpoints=0))
    assert len(numbered("all")) == 6
    assert load_checkpoint_file(tmp_path / "one")["counters"]["step"] == 12


# -- file-system errors ------------------------------------------------------------------
def _full_disk_at(monkeypatch, fragment: str) -> None:
    """``fsync`` of any file whose name contains ``fragment`` fails as on a full disk."""
    real_fsync = os.fsync

    def fsync(fd):
        if fragment in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps descriptors to paths through /proc")
def test_a_full_disk_during_a_checkpoint_ends_in_one_line_and_the_last_checkpoint_resumes(tmp_path, monkeypatch):
    _, whole = train_toy(_config(tmp_path, "whole", steps=6))
    _full_disk_at(monkeypatch, "checkpoint_iter_000004")
    with pytest.raises(FileSystemError) as error:
        train_toy(_config(tmp_path, steps=6))
    message = str(error.value)
    assert "No space left on device" in message and "\n" not in message
    assert f"the checkpoint of step 2 is intact; continue with --resume {tmp_path / 'run'}" in message
    checkpoints = tmp_path / "run" / "checkpoints"
    assert not [p for p in checkpoints.iterdir() if ".tmp-" in p.name]  # no torn temporary left
    assert load_checkpoint_file(checkpoints)["counters"]["step"] == 2
    monkeypatch.undo()
    run, total = train_toy(ToyConfig(resume=tmp_path / "run"), given=frozenset({"resume"}))
    assert total == whole
    assert [int(row["step"]) for row in _csv_rows(tmp_path / "run" / "metrics.csv")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps descriptors to paths through /proc")
def test_a_full_disk_at_the_start_leaves_nothing_and_the_cli_prints_one_line(tmp_path, monkeypatch, capsys):
    from pglab.cli import main

    _full_disk_at(monkeypatch, "config.json")
    with pytest.raises(FileSystemError, match="No space left on device; nothing was kept"):
        train_toy(_config(tmp_path))
    assert not (tmp_path / "run").exists()
    monkeypatch.chdir(tmp_path)
    code = main(["train", "ppo", "--total-steps", "64", "--num-envs", "2", "--num-steps", "32", "--log-dir", "p"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("pglab: error:")] == [
        "pglab: error: p/config.json: No space left on device; "
        "nothing was kept (p holds no checkpoint, so it was removed)"
    ]
    assert not (tmp_path / "p").exists()


def test_resume_names_what_it_cannot_continue(tmp_path):
    train_toy(_config(tmp_path, steps=3))
    with pytest.raises(
        UsageError, match=r"resume: give a run directory, .* checkpoint file \(\.pt\) \(got '.*metrics.csv'\)"
    ):
        train_toy(ToyConfig(resume=tmp_path / "run" / "metrics.csv"), given=frozenset({"resume"}))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=r"config.json does not describe a pglab run \(no kind\)"):
        train_toy(ToyConfig(resume=tmp_path / "empty"), given=frozenset({"resume"}))
