"""The release plumbing: ``pglab --version``, the one-line error of a missing extra, and
progress as plain lines off a terminal."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

import pglab
from pglab.cli import main
from pglab.errors import MissingExtraError
from pglab.extras import EXTRA_OF, missing_extra, require
from pglab.run.progress import PlainProgress, progress_bar

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# -- the version --------------------------------------------------------------------------------


def test_version_is_printed_and_single_sourced(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"pglab {pglab.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", pglab.__version__)
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pglab.__version__"}


# -- missing extras -----------------------------------------------------------------------------


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_") for r in requirements}


def test_every_package_of_an_extra_is_in_that_extra_of_pyproject():
    extras = _pyproject()["project"]["optional-dependencies"]
    for package, extra in EXTRA_OF.items():
        assert package.lower() in _requirement_names(extras[extra]), (package, extra)


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("rl4co", ["train", "maxk-pomo", "--device", "cpu"], "co"),
        ("rl4co", ["evaluate", "maxk-pomo", "--checkpoints", "{tmp}"], "co"),
        ("fredapi", ["backtest", "--source", "fred"], "fred"),
    ],
)
def test_a_command_without_its_extra_names_the_extra_in_one_line(blocked, argv, extra, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, blocked, None)  # `import blocked` fails as if it were not installed
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    flag = "--output" if argv[0] in ("backtest", "evaluate") else "--log-dir"
    assert main([*argv, flag, str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"pglab: error: {argv[1] if argv[0] != 'backtest' else 'source=' + repr('fred')} needs the '{extra}' "
        f"extra ({blocked} is not installed): pip install 'pglab[{extra}]'\n"
    )
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_require_names_the_missing_dependency_and_stays_an_import_error(monkeypatch):
    for name in ("ale_py", "ale_py.vector_env"):  # the submodule too, in case another test imported it
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"^Atari needs the 'atari' extra \(ale_py is not installed\)"):
        require("ale_py.vector_env", needed_by="Atari")
    fake = type(sys)("fredapi")
    monkeypatch.setitem(sys.modules, "fredapi", fake)
    assert require("fredapi", needed_by="x") is fake
    error = missing_extra("rl4co.envs", needed_by="TSP", missing="lightning.pytorch")
    assert isinstance(error, MissingExtraError) and error.exit_code == 2
    assert str(error) == "TSP needs the 'co' extra (lightning is not installed): pip install 'pglab[co]'"
    with pytest.raises(KeyError, match="numpy"):
        missing_extra("numpy", needed_by="x")


# -- progress off a terminal --------------------------------------------------------------------


class _Clock:
    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        return self.now


def _run_bar(steps: int, tick: float, **options) -> list[str]:
    clock, out = _Clock(tick), io.StringIO()
    with PlainProgress(steps, desc="train x", file=out, unit="step", clock=clock, **options) as bar:
        for _ in range(steps):
            clock.now += tick
            bar.update(1)
    return out.getvalue().splitlines()


def test_off_a_terminal_a_1000_step_bar_is_a_few_plain_lines(monkeypatch, capsys):
    monkeypatch.delenv("PGLAB_NO_PROGRESS", raising=False)
    with progress_bar(1000, desc="train x", unit="step") as bar:  # capsys' stderr is no terminal
        for _ in range(1000):
            bar.update(1)
        bar.set_postfix(ret=1.5)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()  # under 30 s: the start and the end
    assert len(lines) == 2 and lines[0].startswith("train x:   0% 0/1000")
    assert lines[1].startswith("train x: 100% 1000/1000") and lines[1].endswith("step/s, ret=1.5]")


def test_plain_lines_come_every_tenth_or_every_30_seconds_whichever_is_rarer():
    slow = _run_bar(1000, 1.0)  # a tenth takes 100 s: a line per tenth
    assert [line.split()[3] for line in slow] == [f"{n}/1000" for n in range(0, 1001, 100)]
    fast = _run_bar(1000, 0.125)  # 30 s take 240 steps: a line per 240 steps, and the end
    assert [line.split()[3] for line in fast] == [f"{n}/1000" for n in (0, 240, 480, 720, 960, 1000)]


def test_progress_is_silent_under_pglab_no_progress(monkeypatch, capsys):
    monkeypatch.setenv("PGLAB_NO_PROGRESS", "1")
    with progress_bar(10, desc="x") as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""
