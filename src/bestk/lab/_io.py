"""Small output helpers shared by the lab experiments: atomic writes, CIs, markdown tables."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bestk._atomic import write_text_atomic

__all__ = ["write_text_atomic", "write_json_atomic", "t95", "mean_ci", "markdown_table", "fmt"]

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom (normal beyond).
_T95 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
]


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """JSON-dump ``obj`` (indent 1) atomically."""
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile for ``df`` degrees of freedom (normal beyond 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.960


def mean_ci(x: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t interval over the values ``x``
    (half-width ``nan`` for a single value)."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError("mean_ci needs at least one value")
    m = float(a.mean())
    if a.size == 1:
        return m, float("nan")
    return m, float(t95(a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))


def fmt(x: float, digits: int = 3) -> str:
    """Compact number formatting for tables (scientific for tiny/huge magnitudes)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    ax = abs(x)
    if ax != 0 and (ax < 10 ** (-digits) or ax >= 10**5):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
