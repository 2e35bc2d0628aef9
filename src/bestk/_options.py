"""Options of estimators, metrics and tasks: checked names, checked scalar values.

:func:`check_option_names` checks the option *names* given to anything that declares its
options as keyword parameters (an estimator, a task), against ``{name: default}``.
:func:`real_option` / :func:`int_option` check scalar option *values* (``tau``, ``eps``, ``k``).

Options arrive as Python numbers, numpy scalars (``np.float32(0.1)``), 0-d numpy arrays or 0-d
tensors; all are accepted and turned into a Python ``float`` / ``int``. Booleans are rejected
(``eps=True`` is almost certainly a mistake, not 1), as are strings, non-finite values and
non-integral ``int`` options; every error names the owner, the option and the value.

:func:`load_path_cached` loads a file-valued option (an estimator's ``path_options``, a KAPPO
calibration) once: ``loader(path)`` is cached by loader, absolute path, modification time
(``st_mtime_ns``) and size, so a trainer or a verl step calling it every step reads the file
once, and a rewritten file (another time or size) is read again.
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar, cast

import numpy as np
import torch

__all__ = ["check_option_names", "real_option", "int_option", "load_path_cached",
           "PATH_CACHE_SIZE"]

#: What a loader of :func:`load_path_cached` returns.
T = TypeVar("T")

#: Most files :func:`load_path_cached` keeps loaded (least recently used evicted first).
PATH_CACHE_SIZE = 32

#: (loader, absolute path) -> ((st_mtime_ns, st_size), loaded value), least recently used first.
_PATH_CACHE: OrderedDict[tuple[Callable[..., object], str], tuple[tuple[int, int], object]] = \
    OrderedDict()
_PATH_CACHE_LOCK = threading.Lock()


def load_path_cached(loader: Callable[[str | os.PathLike], T], path: str | os.PathLike) -> T:
    """``loader(path)``, cached by (``loader``, absolute path, ``st_mtime_ns``, ``st_size``).

    The file is read again when its modification time or size changes (one entry per loader
    and path: the new value replaces the old one); at most :data:`PATH_CACHE_SIZE` files stay
    loaded. A path that cannot be stat'ed is handed to ``loader`` uncached, so the error is the
    loader's own. The cached value is shared between callers: loaders should return values
    nobody mutates.
    """
    key = (loader, os.path.abspath(os.fspath(path)))
    try:
        hash(loader)
        st = os.stat(key[1])
    except (TypeError, OSError):  # an unhashable loader, a missing file: no caching
        return loader(path)
    stamp = (st.st_mtime_ns, st.st_size)
    with _PATH_CACHE_LOCK:
        hit = _PATH_CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            _PATH_CACHE.move_to_end(key)
            return cast(T, hit[1])  # stored by this loader
    value = loader(path)  # outside the lock: loaders may be slow
    with _PATH_CACHE_LOCK:
        _PATH_CACHE[key] = (stamp, value)
        _PATH_CACHE.move_to_end(key)
        while len(_PATH_CACHE) > PATH_CACHE_SIZE:
            _PATH_CACHE.popitem(last=False)
    return value


def check_option_names(kind: str, name: str, given: Iterable[str],
                       valid: Mapping[str, object]) -> None:
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


def _unwrap(value: object) -> object:
    """0-d tensors / arrays -> their Python scalar; everything else unchanged."""
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def real_option(owner: str, name: str, value: object, *, minimum: float | None = None,
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


def int_option(owner: str, name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integers, 0-d integer arrays / tensors)."""
    v = _unwrap(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{owner} option {name} must be an integer, got {_describe(value)}")
    i = int(v)
    if minimum is not None and i < minimum:
        raise ValueError(f"{owner} option {name} must be >= {minimum}, got {i}")
    return i
