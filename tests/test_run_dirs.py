"""Default run directories: ``runs/<kind>-<YYYYmmdd-HHMMSS>``, one flat level, never inside
another run directory."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from test_run_shell import ToyConfig, train_toy

from pglab.errors import UsageError
from pglab.run.rundir import default_run_dir

NOON = datetime.datetime(2026, 1, 2, 12, 30, 5)


def test_default_run_dir_names_the_kind_and_the_time(tmp_path):
    runs = tmp_path / "runs"
    assert default_run_dir("ppo", root=runs, now=NOON) == runs / "ppo-20260102-123005"
    assert default_run_dir("ghm-mc", root=runs, now=NOON) == runs / "ghm-mc-20260102-123005"
    (runs / "ppo-20260102-123005").mkdir(parents=True)  # a start in the same second
    assert default_run_dir("ppo", root=runs, now=NOON) == runs / "ppo-20260102-123005-2"
    (runs / "ppo-20260102-123005-2").mkdir()
    assert default_run_dir("ppo", root=runs, now=NOON) == runs / "ppo-20260102-123005-3"


def test_a_default_run_lands_beside_a_named_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    named, _ = train_toy(ToyConfig(log_dir=Path("runs/toy")))
    default, _ = train_toy(ToyConfig())
    assert default.run_dir.parent == Path("runs")
    assert default.run_dir.name.startswith("toy-") and (default.run_dir / "config.json").exists()
    assert not any(path.is_dir() and path.name.startswith("toy-") for path in named.run_dir.iterdir())


def test_a_default_never_lands_inside_a_run(tmp_path, monkeypatch):
    named, _ = train_toy(ToyConfig(log_dir=tmp_path / "runs" / "toy"))
    before = sorted(named.run_dir.rglob("*"))
    monkeypatch.chdir(named.run_dir)  # the working directory inside a run: runs/ would nest
    with pytest.raises(UsageError, match=r"log_dir: .* inside the run directory"):
        train_toy(ToyConfig())
    monkeypatch.chdir(named.run_dir / "checkpoints")  # or deeper inside it
    with pytest.raises(UsageError, match=r"log_dir: .* inside the run directory"):
        default_run_dir("ppo")
    assert sorted(named.run_dir.rglob("*")) == before  # nothing written into the run
    assert [path.name for path in (tmp_path / "runs").iterdir()] == ["toy"]
    # a folder that merely has a config.json of its own is no run directory
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "config.json").write_text('{"name": "not a run"}')
    monkeypatch.chdir(tmp_path / "project")
    assert default_run_dir("ppo", now=NOON) == Path("runs/ppo-20260102-123005")
