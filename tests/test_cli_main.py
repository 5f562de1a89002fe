"""The `pglab` process as a user's shell sees it: `python -m pglab`, a closed pipe, an OS error."""

import subprocess
import sys

import pytest

from pglab.cli import main


def test_python_m_pglab_runs_the_command_and_a_closed_pipe_is_not_a_traceback():
    # `pglab --help | head -1`: the reader closes the pipe after one line
    process = subprocess.Popen(
        [sys.executable, "-m", "pglab", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0
    assert b"pglab" in first
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "/tmp/" + "x" * 300],
        ["plot", "/tmp/" + "y" * 300 + "/run"],
        ["train", "forecast", "--log-dir", "runs/" + "z" * 300],
    ],
)
def test_an_os_error_is_one_line_naming_the_path_and_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pglab: error:"), err
    assert "too long" in lines[0] or "(the limit is 255)" in lines[0], err
    assert not any(tmp_path.iterdir())  # nothing left behind


def test_a_stop_that_python_wrapped_in_another_error_still_exits_130_in_one_line(monkeypatch, capsys):
    # a signal raised inside a class body's __set_name__ (mid-import) reaches the command as
    # RuntimeError(...) from Stopped: still a stop, not a bug
    import signal as signals

    import pglab.cli
    from pglab.run.signals import Stopped

    def wrapped(argv):
        try:
            raise Stopped(signals.SIGTERM)
        except Stopped as stop:
            raise RuntimeError("Error calling __set_name__") from stop

    monkeypatch.setattr(pglab.cli, "dispatch", wrapped)
    assert main(["train", "ghm"]) == 130
    assert capsys.readouterr().err.strip() == "pglab: stopped by SIGTERM"
