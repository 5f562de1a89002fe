"""pglab's exception types and the exit codes the CLI maps them to.

Every error a user can cause (a bad flag, a malformed YAML file, a corrupt checkpoint,
an unusable data file) is a subclass of :class:`UsageError` and makes ``pglab`` exit
with code 2. So does an error of the file system (a full disk, a name too long, no
permission, a file where a directory should be): :class:`FileSystemError`, one line
naming the path and the cause. Failures of the program itself exit with code 1.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
# SIGINT/SIGTERM during training: a checkpoint was saved, the run did not finish
# (128 + SIGINT, as shells report an interrupted command). The same for every trainer.
EXIT_INTERRUPTED = 130


class PglabError(Exception):
    """Base class of pglab's own errors."""

    exit_code = EXIT_FAILURE


class UsageError(PglabError):
    """The user asked for something that cannot be done as asked (exit code 2)."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError, ValueError):
    """A configuration field holds a value outside its allowed range; its message reads
    ``FIELD: what is wrong (got VALUE)``.

    It is a ``ValueError`` so that tyro, which builds configs from the command line,
    reports it as a parse error (exit code 2) with this message.
    """

    def __init__(self, field: str, value: Any, expected: str):
        self.field, self.value, self.expected = field, value, expected
        # The one error line of every pglab command: "FIELD: what is wrong (got VALUE)"
        # (a cause quoted from a library may span lines: they are joined)
        super().__init__(f"{field}: {' '.join(str(expected).split())} (got {value!r})")


class CheckpointError(UsageError):
    """A checkpoint file is missing, corrupt, or belongs to another kind of run."""


class DataError(UsageError, ValueError):
    """An input data file or series cannot be used (empty, non-numeric, too short)."""


def describe_os_error(error: OSError) -> str:
    """``PATH: cause`` of an ``OSError`` (``PATH -> PATH2`` for a rename)."""
    cause = error.strerror or str(error)
    if error.filename is None:
        return cause
    path = str(error.filename) + (f" -> {error.filename2}" if error.filename2 is not None else "")
    return f"{path}: {cause}"


class FileSystemError(UsageError):
    """An ``OSError`` met while reading or writing a file the user named (exit code 2)."""

    @classmethod
    def of(cls, error: OSError, *, kept: str | None = None) -> FileSystemError:
        """The one line for ``error``, with what the run kept (``kept``) appended."""
        return cls(describe_os_error(error) + (f"; {kept}" if kept else ""))


class TensorContractError(ValueError):
    """A tensor crossing a module boundary has the wrong shape, dtype or device.

    This is a programming error, not a usage error, so it keeps exit code 1.
    """


class WorkerError(PglabError, RuntimeError):
    """A parallel rollout worker died or failed."""


class MissingExtraError(UsageError, ImportError):
    """A command needs a package of one of pglab's optional extras (``pip install
    'pglab[EXTRA]'``), and it is not installed. An ``ImportError`` too, so code that falls
    back when a package is absent keeps catching it."""
