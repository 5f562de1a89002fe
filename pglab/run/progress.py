"""Console progress bars (tqdm), silenced with PGLAB_NO_PROGRESS=1 (the test suite)."""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def progress_bar(total: int, *, desc: str, initial: int = 0, unit: str = "it"):
    disable = os.environ.get("PGLAB_NO_PROGRESS", "") not in ("", "0")
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
