"""Options of estimators, metrics and tasks: checked names, checked scalar values.

:func:`check_option_names` checks the option *names* given to anything that declares its
options as keyword parameters (an estimator, a task), against ``{name: default}``.
:func:`real_option` / :func:`int_option` check scalar option *values* (``tau``, ``eps``, ``k``).

Options arrive as Python numbers, numpy scalars (``np.float32(0.1)``), 0-d numpy arrays or 0-d
tensors; all are accepted and turned into a Python ``float`` / ``int``. Booleans are rejected
(``eps=True`` is almost certainly a mistake, not 1), as are strings, non-finite values and
non-integral ``int`` options; every error names the owner, the option and the value.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

import numpy as np
import torch

__all__ = ["check_option_names", "real_option", "int_option"]


def check_option_names(kind: str, name: str, given: Any, valid: dict[str, Any]) -> None:
    """Raise ``ValueError`` for option names of ``kind`` ``name`` (an estimator, a task...)
    that are unknown, or required (default ``inspect.Parameter.empty``) and missing.

    ``valid`` maps option names to defaults, as :func:`bestk.estimator_options` returns.
    """
    unknown = sorted(set(given) - set(valid))
    if unknown:
        listing = ", ".join(valid) if valid else "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {kind} {name!r}; "
            f"valid options: {listing}"
        )
    missing = [k for k, v in valid.items() if v is inspect.Parameter.empty and k not in given]
    if missing:
        raise ValueError(f"{kind} {name!r} requires option(s): {', '.join(missing)}")


def _unwrap(value: Any) -> Any:
    """0-d tensors / arrays -> their Python scalar; everything else unchanged."""
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def real_option(owner: str, name: str, value: Any, *, minimum: float | None = None,
                strict: bool = False) -> float:
    """``value`` as a finite ``float``; ``>= minimum`` (``> minimum`` when ``strict``)."""
    v = _unwrap(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise ValueError(f"{owner} option {name} must be a real number, got {_describe(value)}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"{owner} option {name} must be finite, got {v!r}")
    if minimum is not None and (f <= minimum if strict else f < minimum):
        raise ValueError(f"{owner} option {name} must be {'>' if strict else '>='} {minimum:g}, "
                         f"got {v!r}")
    return f


def int_option(owner: str, name: str, value: Any, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integers, 0-d integer arrays / tensors)."""
    v = _unwrap(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{owner} option {name} must be an integer, got {_describe(value)}")
    i = int(v)
    if minimum is not None and i < minimum:
        raise ValueError(f"{owner} option {name} must be >= {minimum}, got {i}")
    return i
