"""Data sources for the forecasting game.

``load_series(source, target=..., driver=...)`` with ``source`` one of

* ``synthetic`` -- a seeded mean-reverting series driven by an AR(1) exogenous signal;
* ``macrodata`` -- the US quarterly macro data shipped with statsmodels (1959Q1-2009Q3);
  default target ``unemp`` (unemployment rate, %), driver ``realgdp_growth``;
* ``csv:PATH`` -- a file in FRED's download format: a date column first (``DATE`` or
  ``observation_date``) and value columns, ``.`` marking a missing value; a file
  without a date column is refused, not read with its first values as dates;
* ``fred`` -- the FRED API through ``fredapi`` (needs ``FRED_API_KEY`` and the
  ``pglab[fred]`` extra); default target ``UNRATE``;
* ``auto`` -- ``fred`` when ``FRED_API_KEY`` is set, else ``macrodata``.

Column names may carry a suffix that derives a stationary driver from a level:
``NAME_growth`` = 100 * (log NAME_t - log NAME_{t-1}) (percent per period) and
``NAME_diff`` = NAME_t - NAME_{t-1}. Without a driver column the driver is the target's
own previous change, ``y_t - y_{t-1}``.

Rows with a missing target or driver are dropped (and counted in the series name).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pglab.data.series import ForecastSeries
from pglab.errors import DataError
from pglab.extras import require

SOURCES = ("auto", "synthetic", "macrodata", "fred", "csv:PATH")
MACRODATA_DEFAULTS = ("unemp", "realgdp_growth")
FRED_DEFAULT_TARGET = "UNRATE"


def resolve_source(source: str) -> str:
    """``auto`` -> ``fred`` if FRED_API_KEY is set, else ``macrodata``."""
    if source == "auto":
        return "fred" if os.environ.get("FRED_API_KEY") else "macrodata"
    return source


def check_source(source: str) -> None:
    """Raise DataError unless ``source`` names a known source (does not read it)."""
    if source in ("auto", "synthetic", "macrodata", "fred"):
        return
    if source.startswith("csv:") and len(source) > 4:
        return
    raise DataError(f"source: unknown; choose one of {', '.join(SOURCES)} (got {source!r})")


def load_series(
    source: str,
    *,
    target: str | None = None,
    driver: str | None = None,
    seed: int = 0,
    n_rows: int = 240,
) -> ForecastSeries:
    """Load a target series and its driver from ``source`` (see the module docstring)."""
    check_source(source)
    source = resolve_source(source)
    if source == "synthetic":
        return synthetic_series(n_rows=n_rows, seed=seed)
    if source == "macrodata":
        return macrodata_series(target=target, driver=driver)
    if source == "fred":
        return fred_series(target=target or FRED_DEFAULT_TARGET, driver=driver)
    return csv_series(source[len("csv:") :], target=target, driver=driver)


# --- synthetic -------------------------------------------------------------------------
def synthetic_series(
    *,
    n_rows: int = 240,
    seed: int = 0,
    mean: float = 5.0,
    reversion: float = 0.1,
    loading: float = 0.3,
    noise: float = 0.2,
    driver_ar: float = 0.8,
) -> ForecastSeries:
    """A seeded series whose next change depends on the level and on the driver::

        x_{t+1} = driver_ar * x_t + e_t,                     e_t ~ N(0, 1)
        y_{t+1} = y_t + reversion * (mean - y_t) + loading * x_t + noise * u_t,   u_t ~ N(0, 1)

    so a forecaster that reads ``x_t`` can beat the random walk by ~``loading * |x_t|``.
    """
    if n_rows < 3:
        raise DataError(f"n_rows: the synthetic source needs at least 3 rows (got {n_rows})")
    rng = np.random.default_rng(seed)
    shocks, driver_shocks = rng.standard_normal(n_rows), rng.standard_normal(n_rows)
    y, x = np.empty(n_rows), np.empty(n_rows)
    y[0], x[0] = mean, driver_shocks[0]
    for t in range(n_rows - 1):
        x[t + 1] = driver_ar * x[t] + driver_shocks[t + 1]
        y[t + 1] = y[t] + reversion * (mean - y[t]) + loading * x[t] + noise * shocks[t]
    return ForecastSeries(y, x, tuple(f"t{t}" for t in range(n_rows)), f"synthetic(seed={seed})")


# --- shared column logic -----------------------------------------------------------------
def _derived_column(frame: pd.DataFrame, name: str, where: str) -> pd.Series:
    if name in frame.columns:
        return frame[name].astype(float)
    for suffix in ("_growth", "_diff"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and base in frame.columns:
            level = frame[base].astype(float)
            if suffix == "_diff":
                return level.diff()
            if (level <= 0).any():
                raise DataError(f"{where}: {name} needs a positive {base} (log growth)")
            return 100.0 * np.log(level).diff()
    raise DataError(
        f"{where}: no column {name!r}; columns: {', '.join(map(str, frame.columns))} "
        "(add _growth or _diff to a column name for its log growth or first difference)"
    )


def _assemble(frame: pd.DataFrame, dates: pd.Index, target: str, driver: str | None, where: str) -> ForecastSeries:
    y = _derived_column(frame, target, where)
    if driver is None:
        x, driver_label = y.diff(), f"{target}_change"
    else:
        x, driver_label = _derived_column(frame, driver, where), driver
    keep = (y.notna() & x.notna()).to_numpy()
    dropped = int((~keep).sum())
    if keep.sum() < 3:
        raise DataError(f"{where}: only {int(keep.sum())} rows with both {target} and {driver_label}; need at least 3")
    labels = tuple(str(d) for d in np.asarray(dates)[keep])
    name = f"{where}:{target}~{driver_label}" + (f" ({dropped} rows dropped)" if dropped else "")
    return ForecastSeries(y.to_numpy()[keep], x.to_numpy()[keep], labels, name)


# --- macrodata ----------------------------------------------------------------------------
def macrodata_frame() -> tuple[pd.DataFrame, pd.Index]:
    from statsmodels.datasets import macrodata

    frame = macrodata.load_pandas().data
    dates = pd.Index([f"{int(y)}Q{int(q)}" for y, q in zip(frame["year"], frame["quarter"], strict=False)])
    return frame.reset_index(drop=True), dates


def macrodata_series(*, target: str | None = None, driver: str | None = None) -> ForecastSeries:
    """statsmodels' US macro data; default unemployment driven by real GDP growth."""
    frame, dates = macrodata_frame()
    return _assemble(frame, dates, target or MACRODATA_DEFAULTS[0], driver or MACRODATA_DEFAULTS[1], "macrodata")


# --- FRED CSV -------------------------------------------------------------------------------
# A first column with one of these names (any case, or any name containing "date") holds
# the dates; otherwise its values must look like dates (_DATE_VALUE).
DATE_COLUMN_NAMES = ("date", "observation_date", "time", "period", "year", "quarter", "month", "week", "day")
# 2020-01-31, 2020/1/31, 2020-01 (with an optional time part), 1959Q1, 2020M01, 01/31/2020.
# A bare number is never taken for a date by its value (a year column must be named so):
# a file whose first column is a value column must fail, not be read as dates.
_DATE_VALUE = re.compile(r"^(\d{4}[-/]\d{1,2}([-/]\d{1,2})?([ T].*)?|\d{4}[QqMm]\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4})$")


def _check_date_column(frame: pd.DataFrame, where: str) -> str:
    """The name of the date column (the first one), or a DataError saying it is missing."""
    first = str(frame.columns[0])
    name = first.strip().lower()
    if name in DATE_COLUMN_NAMES or "date" in name:
        return frame.columns[0]
    values = frame[frame.columns[0]].str.strip()
    if values.map(lambda text: bool(_DATE_VALUE.match(text))).all():
        return frame.columns[0]
    example = next((v for v in values if not _DATE_VALUE.match(v)), "")
    raise DataError(
        f"{where}: no date column: the first column must hold the dates (named DATE or observation_date "
        f"in FRED downloads), but {first!r} is not a date column (it holds {example!r})"
    )


def read_fred_csv(path: str | os.PathLike) -> tuple[pd.DataFrame, pd.Index]:
    """Read a FRED download: a date column then numeric columns, ``.`` = missing.

    The first column must be the dates: named ``DATE``/``observation_date`` (any name in
    :data:`DATE_COLUMN_NAMES` or containing "date"), or holding values that look like
    dates (``2020-01-01``, ``1959Q1``, ``01/31/2020``).

    Raises DataError for a missing, unreadable or empty file, a directory, a file without
    a date column or without value columns, or a value that is neither a number nor
    ``.`` (naming its row and column).
    """
    source = Path(path)
    where = f"csv:{source}"
    if source.is_dir():
        raise DataError(f"{where}: is a directory, not a CSV file")
    if not source.is_file():
        raise DataError(f"{where}: no such file")
    try:
        frame = pd.read_csv(source, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{where}: the file is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{where}: not a CSV file ({str(exc).splitlines()[0]})") from exc
    except OSError as exc:
        raise DataError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from exc
    if frame.shape[0] == 0:
        raise DataError(f"{where}: no data rows below the header")
    if frame.shape[1] < 2:
        raise DataError(f"{where}: needs a date column and at least one value column, got {list(frame.columns)}")
    date_column = _check_date_column(frame, where)
    values = frame.drop(columns=[date_column])
    numeric = {}
    for column in values.columns:
        text = values[column].str.strip()
        missing = text.isin([".", ""])
        parsed = pd.to_numeric(text.where(~missing), errors="coerce")
        bad = parsed.isna() & ~missing
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(
                f"{where}: column {column!r} row {row + 2} holds {values[column].iloc[row]!r}, "
                "not a number (FRED marks a missing value with '.')"
            )
        numeric[column] = parsed.astype(float)
    return pd.DataFrame(numeric), pd.Index(frame[date_column].str.strip())


def csv_series(path: str, *, target: str | None = None, driver: str | None = None) -> ForecastSeries:
    frame, dates = read_fred_csv(path)
    target = target or str(frame.columns[0])
    if driver is None and frame.shape[1] > 1:
        driver = next(str(c) for c in frame.columns if c != target)
    return _assemble(frame, dates, target, driver, f"csv:{path}")


# --- FRED API --------------------------------------------------------------------------------
def fred_series(
    *, target: str = FRED_DEFAULT_TARGET, driver: str | None = None, api_key: str | None = None
) -> ForecastSeries:
    """Download ``target`` (and ``driver``) from FRED with fredapi.

    ``driver`` may carry the ``_growth``/``_diff`` suffix (``INDPRO_growth``).
    """
    Fred = require("fredapi", needed_by="source='fred'").Fred
    key = api_key or os.environ.get("FRED_API_KEY")
    if not key:
        raise DataError("source='fred' needs an API key in FRED_API_KEY (or use --source macrodata)")
    client = Fred(api_key=key)
    ids = [target] + ([_base_id(driver)] if driver else [])
    columns = {}
    for series_id in dict.fromkeys(ids):
        try:
            columns[series_id] = client.get_series(series_id)
        except Exception as exc:  # fredapi raises ValueError/URLError/HTTPError alike
            raise DataError(f"fred: cannot download {series_id!r}: {exc}") from exc
    frame = pd.DataFrame(columns).sort_index()
    if frame.empty:
        raise DataError(f"fred: {target!r} returned no observations")
    dates = pd.Index([d.strftime("%Y-%m-%d") for d in frame.index])
    return _assemble(frame.reset_index(drop=True), dates, target, driver, "fred")


def _base_id(name: str) -> str:
    for suffix in ("_growth", "_diff"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
