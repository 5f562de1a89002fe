"""Machine-readable training logs: CSV, JSONL and TensorBoard, resumable exactly.

One :class:`MetricsLogger` serves every trainer. Each ``log(step, metrics)`` call writes
one row/record. On ``--resume`` the logger first drops the rows written after the
checkpoint being resumed (they describe work that will be redone), so a resumed run's
logs are identical to an uninterrupted run's.

No field is ever lost: a column that first appears in a later row extends the CSV header
(the file is rewritten atomically, earlier rows get an empty cell). A metric with no value
in an interval (``None`` or NaN, e.g. the mean return of an interval in which no episode
ended) is an empty CSV cell, is left out of that JSONL record and of TensorBoard.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import torch

from pglab.run.atomic import atomic_write_text


def to_float(value: Any) -> float:
    """Scalars from tensors, numpy values or numbers (a host sync for tensors)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().item())
    return float(value)


def _truncate_csv(path: Path, step_key: str, last_step: int) -> None:
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return
    header, body = rows[0], rows[1:]
    if step_key not in header:
        return
    column = header.index(step_key)
    kept = [row for row in body if row and float(row[column]) <= last_step]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(kept)
    atomic_write_text(path, buffer.getvalue())


def _truncate_jsonl(path: Path, step_key: str, last_step: int) -> None:
    kept = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            # A line torn by a kill mid-write: it was never part of the committed log.
            continue
        if step_key in record and record[step_key] > last_step:
            continue
        kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


class MetricsLogger:
    """Append-only metric logs in a run directory.

    Args:
        run_dir: the run directory.
        step_key: name of the counter column (``iteration``, ``opt_steps``...).
        csv_name / jsonl_name: file names, or ``None`` to skip that format.
        tensorboard_dir: sub-folder for TensorBoard events, or ``None``.
        resume_step: when resuming, the checkpoint's step; later rows are dropped.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        step_key: str = "iteration",
        csv_name: str | None = "metrics.csv",
        jsonl_name: str | None = None,
        tensorboard_dir: str | None = "tensorboard",
        resume_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.step_key = step_key
        self.csv_path = self.run_dir / csv_name if csv_name else None
        self.jsonl_path = self.run_dir / jsonl_name if jsonl_name else None
        if resume_step is not None:
            if self.csv_path is not None and self.csv_path.exists():
                _truncate_csv(self.csv_path, step_key, resume_step)
            if self.jsonl_path is not None and self.jsonl_path.exists():
                _truncate_jsonl(self.jsonl_path, step_key, resume_step)
        self._csv_handle: IO[str] | None = None
        self._csv_writer: csv.DictWriter | None = None
        self._csv_fields: list[str] | None = None
        if self.csv_path is not None and self.csv_path.exists() and self.csv_path.stat().st_size > 0:
            with open(self.csv_path, newline="") as handle:
                self._csv_fields = next(csv.reader(handle), None)
        self._jsonl_handle = open(self.jsonl_path, "a") if self.jsonl_path else None  # noqa: SIM115 - held open for the run, closed in close()
        self._tb = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step hides events written after the checkpoint by an earlier,
            # interrupted attempt.
            self._tb = SummaryWriter(
                str(self.run_dir / tensorboard_dir),
                purge_step=None if resume_step is None else resume_step + 1,
            )

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """Write ``{"meta": ...}`` as the JSONL file's first line (only if it is new)."""
        if self._jsonl_handle is None or self._jsonl_handle.tell() > 0:
            return
        self._jsonl_handle.write(json.dumps({"meta": meta}, default=str) + "\n")
        self._jsonl_handle.flush()

    def write_record(self, record: Mapping[str, Any]) -> None:
        """A free-form JSONL line (e.g. an error record)."""
        if self._jsonl_handle is None:
            return
        self._jsonl_handle.write(json.dumps(record, default=str) + "\n")
        self._jsonl_handle.flush()

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
        """Write one row. Tensor values are converted here (one host sync per log).

        Returns the row's values as floats (NaN where a metric had no value)."""
        values = {key: (math.nan if value is None else to_float(value)) for key, value in metrics.items()}
        present = {key: value for key, value in values.items() if not math.isnan(value)}
        row = {self.step_key: step, **present}
        if self.csv_path is not None:
            self._write_csv(row, columns=[self.step_key, *values])
        if self._jsonl_handle is not None:
            clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in row.items()}
            self._jsonl_handle.write(json.dumps(clean) + "\n")
            self._jsonl_handle.flush()
        if self._tb is not None:
            for key, value in present.items():
                self._tb.add_scalar(key, value, step)
        return values

    def _write_csv(self, row: dict[str, Any], *, columns: list[str]) -> None:
        assert self.csv_path is not None  # called only when the logger writes a CSV
        if self._csv_fields is None:
            self._csv_fields = list(columns)
            with open(self.csv_path, "a", newline="") as handle:
                csv.writer(handle, lineterminator="\n").writerow(self._csv_fields)
        new_columns = [name for name in columns if name not in self._csv_fields]
        if new_columns:
            self._extend_csv_header(new_columns)
        if self._csv_handle is None:
            handle = open(self.csv_path, "a", newline="")  # noqa: SIM115 - held open, closed in close()
            self._csv_handle = handle
            self._csv_writer = csv.DictWriter(handle, fieldnames=self._csv_fields, restval="", lineterminator="\n")
        assert self._csv_writer is not None and self._csv_handle is not None
        self._csv_writer.writerow(row)
        self._csv_handle.flush()

    def _extend_csv_header(self, new_columns: list[str]) -> None:
        """Add columns to the header; earlier rows get empty cells (atomic rewrite)."""
        assert self.csv_path is not None and self._csv_fields is not None
        if self._csv_handle is not None:
            self._csv_handle.close()
            self._csv_handle = self._csv_writer = None
        with open(self.csv_path, newline="") as handle:
            rows = list(csv.reader(handle))
        self._csv_fields = [*self._csv_fields, *new_columns]
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self._csv_fields)
        for body_row in rows[1:]:
            writer.writerow(body_row + [""] * (len(self._csv_fields) - len(body_row)))
        atomic_write_text(self.csv_path, buffer.getvalue())

    def add_figure(self, tag: str, figure: Any, step: int) -> None:
        if self._tb is not None:
            self._tb.add_figure(tag, figure, step, close=False)

    def close(self) -> None:
        for handle in (self._csv_handle, self._jsonl_handle):
            if handle is not None:
                handle.close()
        if self._tb is not None:
            self._tb.close()
        self._csv_handle = self._jsonl_handle = self._tb = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(run_dir: str | os.PathLike) -> Any:
    """Load a run's metrics (``metrics.csv`` or a ``*.jsonl`` log) as a pandas DataFrame."""
    import pandas as pd

    folder = Path(run_dir)
    csv_path = folder / "metrics.csv"
    if csv_path.exists():
        return pd.read_csv(csv_path)
    for jsonl in sorted(folder.glob("*.jsonl")):
        records = []
        for line in jsonl.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "meta" in record or "error" in record:
                continue
            records.append(record)
        return pd.DataFrame.from_records(records)
    from pglab.errors import UsageError

    raise UsageError(f"run directory {folder}: no metrics.csv or *.jsonl log found")
