"""Runs and grids do not nest: a run directory (or a comparison's grid) inside another
comparison's grid is refused (:func:`check_outside_grids`).

A comparison (``bestk compare``, :mod:`bestk.compare.directory`) records its grid in
``OUT/compare.json`` (:data:`GRID_RECORD`) and refuses to continue once its directory holds
files it did not write, so a ``bestk train --out`` or a second grid inside it would stop the
grid; both are refused before they write anything. It lives here, below ``compare``, because
``bestk train`` checks it too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["GRID_RECORD", "grid_record_of", "check_outside_grids"]

#: The file that makes a directory a comparison's grid (its settings and methods).
GRID_RECORD = "compare.json"


def grid_record_of(out: Path) -> dict[str, Any] | None:
    """The grid record of ``out/compare.json`` (``None``: none, or not a comparison's: a
    comparison's record is a JSON object with a list of ``methods``)."""
    try:
        data = json.loads((out / GRID_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("methods"), list) else None


def check_outside_grids(out: str | os.PathLike[str], option: str = "--out") -> None:
    """Refuse, in one line, an ``out`` inside a comparison's grid (a folder above it holds
    the grid's ``compare.json``): a run or a grid written there is not the grid's own, so
    the grid would refuse to continue."""
    path = Path(os.path.realpath(out))
    grid = next((p for p in path.parents if grid_record_of(p) is not None), None)
    if grid is not None:
        raise ValueError(
            f"{option} {str(out)!r} is inside the comparison {str(grid)!r}: files written "
            "there are not the grid's own, and it would refuse to continue; choose a "
            "directory outside it (a comparison's runs are continued by the same "
            "`bestk compare` command)")
