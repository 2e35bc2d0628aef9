"""Argument checks shared by the KAPPO modules (clear ``ValueError`` messages)."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from bestk._inputs import Numbers


def check_k(k: object, name: str = "k") -> int:
    """``k`` must be an integer >= 1 (bools rejected)."""
    if isinstance(k, bool) or not isinstance(k, Real):  # Real includes Integral
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
    if isinstance(k, Integral):
        n = int(k)
    else:  # a real number that is an integer (3.0), not 3.5, inf or nan
        x = float(k)
        if not x.is_integer():
            raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
        n = int(x)
    if n < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
    return n


def check_positive(x: object, name: str) -> float:
    """``x`` must be a finite real number > 0."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    x = float(x)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return x


def as_probability_array(q: Numbers, name: str = "q") -> np.ndarray:
    """Float64 array of values in [0, 1] (any shape, scalars become 0-d)."""
    try:
        if hasattr(q, "detach"):  # torch tensor
            q = q.detach().cpu().numpy()
        arr = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers in [0, 1]") from None
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        idx = np.argwhere(bad)[0]
        where = tuple(int(i) for i in idx) if arr.ndim else ()
        label = f"{name}{list(where) if where else ''}"
        raise ValueError(f"{label} = {arr[tuple(idx)]!r} is not in [0, 1]")
    return arr
