"""How every ``pglab train`` and ``pglab evaluate`` command ends: a short human summary on
stdout, or with ``--json`` one JSON document (the machine form) and nothing else on stdout.

A :class:`Summary` holds the few lines a person reads at the end of a run::

    result:    the headline figure(s) of the system
    reference: what they are judged against (FD optimum, random policy, optimal tour, ...)
    verdict:   whether a stated target is met (only where the system has one)
    run:       the run directory
    next:      the command to run next

Each command builds its Summary from what it already computed; :meth:`Summary.render` and
:meth:`Summary.as_json` are the one place that formats it. The machine form is the command's
existing report (the keys it printed or wrote before, unchanged) with the summary added under
``"summary"``.

This module imports neither torch nor numpy: ``--help`` stays fast.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON_FLAG = "--json"


@dataclass(frozen=True)
class Figure:
    """One labelled number (or word) of a summary: ``label value unit``."""

    label: str
    value: float | int | str | None
    fmt: str = ".4g"
    """how :meth:`text` formats a number (``format(value, fmt)``)"""
    unit: str = ""
    note: str = ""
    """words after the value, e.g. ``(10 episodes)``"""

    def text(self) -> str:
        if self.value is None:
            shown = "none"
        elif isinstance(self.value, str):
            shown = self.value
        elif isinstance(self.value, float) and math.isnan(self.value):
            shown = "n/a"
        else:
            shown = format(self.value, self.fmt)
        words = f"{self.label} {shown}{self.unit}"
        return f"{words} {self.note}" if self.note else words

    def machine(self) -> float | int | str | None:
        """The value as JSON holds it (NaN as ``None``: JSON has no NaN)."""
        if isinstance(self.value, float) and math.isnan(self.value):
            return None
        return self.value


@dataclass(frozen=True)
class Summary:
    """The end of a command: result, reference, verdict (if a target exists), run directory
    and the next command."""

    title: str
    """what ran, e.g. ``train ghm (mc), 200 iterations``"""
    result: Sequence[Figure]
    reference: Sequence[Figure] = ()
    verdict: str | None = None
    """e.g. ``>= 98% of V* at every initial cash: met``; ``None`` where no target exists"""
    run_dir: str | Path | None = None
    next: str | None = None
    notes: Sequence[str] = ()
    """one-line remarks that qualify the figures (shown after them)"""
    details: Mapping[str, Any] = field(default_factory=dict)
    """the command's full machine report (its top-level keys in :meth:`as_json`)"""

    def render(self) -> str:
        """The human form: a few lines, one per part present."""
        lines = [self.title]
        if self.result:
            lines.append("result:    " + "; ".join(figure.text() for figure in self.result))
        if self.reference:
            lines.append("reference: " + "; ".join(figure.text() for figure in self.reference))
        if self.verdict is not None:
            lines.append(f"verdict:   {self.verdict}")
        lines += [f"note:      {note}" for note in self.notes]
        if self.run_dir is not None:
            lines.append(f"run:       {self.run_dir}")
        if self.next is not None:
            lines.append(f"next:      {self.next}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """The machine form: ``details`` with ``"summary"`` added (the same figures as
        :meth:`render`, as numbers)."""
        summary = {
            "title": self.title,
            "result": {figure.label: figure.machine() for figure in self.result},
            "reference": {figure.label: figure.machine() for figure in self.reference},
            "verdict": self.verdict,
            "notes": list(self.notes),
            "run_dir": None if self.run_dir is None else str(self.run_dir),
            "next": self.next,
        }
        return {**self.details, "summary": summary}


def split_json_flag(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """``(--json given, the other arguments)``: the flag every train and evaluate command
    takes, read before the command's own flags."""
    rest = [arg for arg in argv if arg != JSON_FLAG]
    return len(rest) != len(argv), rest


def stderr_echo(*args: Any, **kwargs: Any) -> None:
    """``print`` to stderr: where a command's messages go while ``--json`` keeps stdout for
    the JSON document."""
    kwargs["file"] = sys.stderr
    print(*args, **kwargs)


def echo_for(as_json: bool) -> Callable[..., None]:
    """Where a trainer's messages go: stdout, or stderr under ``--json``."""
    return stderr_echo if as_json else print


def emit(summary: Summary, as_json: bool) -> None:
    """Print the summary on stdout: rendered, or as one JSON document."""
    text = json.dumps(summary.as_json(), default=_jsonable) if as_json else summary.render()
    print(text, flush=True)


def _jsonable(value: Any) -> Any:
    """Paths and numpy scalars in a report, as JSON can hold them."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def verdict(target: str, met: bool, detail: str = "") -> str:
    """``TARGET: met`` / ``TARGET: not met`` (with ``(detail)``)."""
    return f"{target}: {'met' if met else 'not met'}" + (f" ({detail})" if detail else "")


def evaluate_command(run_dir: str | Path) -> str:
    return f"pglab evaluate {run_dir}"


def resume_command(system: str, run_dir: str | Path) -> str:
    return f"pglab train {system} --resume {run_dir}"


def run_dir_of(checkpoint: str | Path) -> Path | None:
    """The run directory a checkpoint lies in (``None``: outside one)."""
    from pglab.errors import UsageError
    from pglab.run.rundir import find_run_dir

    try:
        return find_run_dir(checkpoint)
    except UsageError:
        return None


def warn_rounded_budget(field: str, asked: int, per_step: int, steps: int, step_name: str, per_step_name: str) -> None:
    """One warning line when a budget of ``asked`` is trained as ``steps`` whole steps of
    ``per_step`` each (``per_step_name`` says what fixes that size); nothing when it divides."""
    if asked % per_step == 0:
        return
    warnings.warn(
        f"{field} {asked} is not a whole number of {step_name} ({per_step_name} = {per_step} each): "
        f"training {steps} {step_name}, {steps * per_step} in all",
        UserWarning,
        stacklevel=2,
    )
