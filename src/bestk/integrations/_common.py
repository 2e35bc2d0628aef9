"""Helpers shared by the framework adapters."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["load_calibration"]

_CALIBRATIONS: dict[tuple[str, int, int], Any] = {}


def load_calibration(value: Any) -> Any:
    """A :class:`bestk.kappo.Calibration` from itself or from a file path (cached)."""
    from bestk.kappo import Calibration

    if isinstance(value, Calibration):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(
            "kappo_grpo option 'calibration' must be a path to a `bestk calibrate` file or a "
            f"bestk.kappo.Calibration, got {type(value).__name__}"
        )
    path = os.path.abspath(os.fspath(value))
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"kappo_grpo calibration file {path!r} cannot be read: {e}") from None
    key = (path, st.st_mtime_ns, st.st_size)
    cal = _CALIBRATIONS.get(key)
    if cal is None:
        cal = Calibration.load(path)
        _CALIBRATIONS.clear()  # keep only the file in use
        _CALIBRATIONS[key] = cal
    return cal
