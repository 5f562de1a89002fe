"""Data sources for the forecasting game: synthetic, statsmodels macrodata, FRED CSV, FRED API."""

from pglab.data.series import ForecastSeries
from pglab.data.sources import check_source, load_series, read_fred_csv, resolve_source

__all__ = ["ForecastSeries", "check_source", "load_series", "read_fred_csv", "resolve_source"]
