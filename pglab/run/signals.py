"""SIGINT and SIGTERM: one way to stop, from the first instruction to the last.

The ``pglab`` command installs :data:`STOP` before it imports anything heavy. From then on
SIGINT and SIGTERM behave alike:

- **Outside a training loop** (start-up, a final evaluation, any other command) the
  signal raises :class:`Stopped` where the program is. A run that has not saved a
  checkpoint yet removes its directory on the way out; a run that has one keeps it, and
  ``--resume`` continues from it.
- **Inside a training loop** (:meth:`StopSignals.deferred`, entered by
  :meth:`pglab.run.shell.TrainingRun.steps`) the first signal only sets
  :attr:`StopSignals.requested`: the step ends, a checkpoint is saved and the loop
  stops. A second signal raises :class:`Stopped` at once; the previous checkpoint stays.

Either way the command exits with :data:`pglab.errors.EXIT_INTERRUPTED` (130).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int | None) -> str:
    if signum is None:
        return "a stop request"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised where the program was. ``note`` (set by whoever handled
    the stop on the way out, e.g. the training shell) says what was kept."""

    def __init__(self, signum: int | None):
        super().__init__(signal_name(signum))
        self.signum = signum
        self.note: str | None = None


def stop_in(error: BaseException | None) -> KeyboardInterrupt | None:
    """The stop behind ``error``: ``error`` itself, or a :class:`KeyboardInterrupt` it was
    raised from. Python wraps an exception raised at some points (a class body's
    ``__set_name__`` during an import, for one) in a ``RuntimeError``; the stop is still a stop."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class StopSignals:
    """The process's SIGINT/SIGTERM handler (see the module docstring).

    Attributes:
        signal: the first signal's number since :meth:`clear` (``None``: none arrived).
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        self._deferring = 0
        self._previous: dict[int, Any] = {}
        self._previous_unraisable = sys.unraisablehook

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM; ``False`` where that is impossible (not the main
        thread) or already done."""
        if self.installed:
            return False
        try:
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: signals stay with whoever has them
            self.uninstall()
            return False
        self._previous_unraisable = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        return True

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_unraisable

    def _unraisable(self, unraisable: Any) -> None:
        """A :class:`Stopped` raised where Python ignores exceptions (a weakref callback of
        the import system, a ``__del__``) is not printed as a traceback: the signal stays
        recorded in :attr:`signal`, so the training loop stops at the end of its step and
        a command that was past its last step finishes."""
        if isinstance(unraisable.exc_value, Stopped):
            return
        self._previous_unraisable(unraisable)

    def clear(self) -> None:
        """Forget a handled signal (a new run in the same process starts unsignalled)."""
        self.signal = None

    @contextlib.contextmanager
    def deferred(self) -> Iterator[StopSignals]:
        """Within this block the first signal only sets :attr:`requested`."""
        self._deferring += 1
        try:
            yield self
        finally:
            self._deferring -= 1

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signal is None
        if first:
            self.signal = signum
        if self._deferring and first:
            return
        raise Stopped(signum)


STOP = StopSignals()  # the process's one handler


class StopRequested:
    """Context manager for a process that only ever finishes its step (a DDP rank > 0):
    SIGINT/SIGTERM set ``requested`` (and ``signal``) and never raise. Previous handlers
    are restored on exit; outside the main thread it is a no-op."""

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequested:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        self.signal = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
