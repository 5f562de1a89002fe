"""The `pglab` process as a user's shell sees it: `python -m pglab` and a closed pipe."""

import subprocess
import sys


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
