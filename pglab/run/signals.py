"""Graceful stop on SIGINT/SIGTERM, shared by every trainer."""

from __future__ import annotations

import contextlib
import signal
from typing import Any


class StopRequested:
    """Context manager: SIGINT/SIGTERM set ``requested`` (and ``signal``, the signal number)
    instead of killing the process, so a training loop can finish its step, write a final
    checkpoint and exit cleanly. Previous handlers are restored on exit. Outside the main
    thread (where handlers cannot be installed) it is a no-op."""

    def __init__(self):
        self.requested = False
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequested:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
