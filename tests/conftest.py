"""Fixtures shared by the test modules."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest


@pytest.fixture
def hide_modules(monkeypatch) -> Callable[..., None]:
    """``hide_modules("sklearn", ...)``: make ``import sklearn`` (and its submodules) raise
    ``ModuleNotFoundError`` for the rest of the test, as if the package were not installed.

    Sets ``sys.modules[name] = None`` for each name and each of its imported submodules
    (Python's own way to block an import); monkeypatch restores them afterwards.
    """

    def hide(*names: str) -> None:
        for name in names:
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                monkeypatch.setitem(sys.modules, key, None)
            monkeypatch.setitem(sys.modules, name, None)

    return hide
