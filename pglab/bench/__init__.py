"""Benchmark implementations behind ``pglab bench NAME`` and ``bench/*.py``."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""the checkout's root (the benches that write records run from a clone)"""


def results_tables() -> Any:
    """``tools/results_tables.py`` of this checkout, as a module: the record format, the
    machine and the commit of a measurement."""
    spec = importlib.util.spec_from_file_location("results_tables", ROOT / "tools" / "results_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nan_as_none(value: Any) -> Any:
    """``value`` with every NaN float replaced by ``None`` (JSON has no NaN), through dicts and lists."""
    if isinstance(value, dict):
        return {key: nan_as_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nan_as_none(item) for item in value]
    return None if isinstance(value, float) and math.isnan(value) else value
