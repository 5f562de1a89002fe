"""Console progress bars, silenced with PGLAB_NO_PROGRESS=1 (the test suite).

On a terminal the bar is tqdm's, redrawn in place. Anywhere else (a log file, a pipe, a
batch job) carriage-return redraws would pile up as one endless line, so the progress
comes as a few whole lines instead: one at the start, one each time the bar has moved by
a tenth of its total *and* 30 seconds have passed since the previous line (whichever is
rarer), and one at the end.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm.auto import tqdm

LINE_FRACTION = 0.1  # a plain line at most every tenth of the total ...
LINE_SECONDS = 30.0  # ... and at most every 30 seconds
PLAIN_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def progress_bar(total: int, *, desc: str, initial: int = 0, unit: str = "it"):
    """A progress bar over ``total`` steps on stderr: tqdm's on a terminal, plain lines
    (:class:`PlainProgress`) elsewhere, a silent tqdm under ``PGLAB_NO_PROGRESS=1``."""
    disable = os.environ.get("PGLAB_NO_PROGRESS", "") not in ("", "0")
    if not disable and not _is_terminal(sys.stderr):
        return PlainProgress(total, desc=desc, initial=initial, unit=unit, file=sys.stderr)
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        dynamic_ncols=True,
        mininterval=0.5,
        file=sys.stderr,
        disable=disable,
    )


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class PlainProgress:
    """Progress as whole lines, with the part of tqdm's interface pglab uses (``update``,
    ``set_postfix``, ``refresh``, ``close``, ``n``, ``total``, a context manager).

    A line is written at the start, then when the count has moved by ``fraction`` of the
    total since the last line and ``seconds`` have passed since it, and at :meth:`close`
    (unless the last line already shows the final count). ``clock`` is for tests.
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str,
        file: TextIO,
        initial: int = 0,
        unit: str = "it",
        fraction: float = LINE_FRACTION,
        seconds: float = LINE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.file, self.clock, self.seconds = file, clock, seconds
        self.every = max(1, math.ceil(fraction * total))
        self.postfix = ""
        self.closed = False
        self._start = clock()
        self._initial = initial
        self._line_n = initial
        self._line_time = self._start
        self._write_line()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.n - self._line_n >= self.every and self.clock() - self._line_time >= self.seconds:
            self._write_line()

    def set_postfix(self, **values: Any) -> None:
        """Values shown at the end of the following lines, formatted as tqdm formats them."""
        shown = (tqdm.format_num(v) if isinstance(v, (int, float)) else str(v).strip() for v in values.values())
        self.postfix = ", ".join(f"{key}={text}" for key, text in zip(values, shown, strict=True))

    def refresh(self) -> None:
        """Lines keep their own schedule; the final state is written by :meth:`close`."""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.n != self._line_n:
            self._write_line()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_line(self) -> None:
        now = self.clock()
        elapsed = now - self._start
        rate = (self.n - self._initial) / elapsed if elapsed > 0 else None
        line = tqdm.format_meter(
            self.n,
            self.total,
            elapsed,
            prefix=self.desc,
            unit=self.unit,
            rate=rate,
            postfix=self.postfix or None,
            bar_format=PLAIN_FORMAT,
            initial=self._initial,
        )
        print(line, file=self.file, flush=True)
        self._line_n, self._line_time = self.n, now
