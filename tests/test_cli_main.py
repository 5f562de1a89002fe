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
