"""PEP 562 lazy attributes of a package: names that import their module on first use.

``bestk``, ``bestk.kappo`` and ``bestk.train`` declare a table ``_LAZY = {name: module}``
(full dotted module paths) and take ``__getattr__`` / ``__dir__`` from :func:`lazy_attributes`,
so ``import bestk`` and ``bestk --help`` import no torch. The import-graph test
(``tests/test_imports.py``) reads the same tables: ``from bestk import advantages`` counts as
an import of ``bestk.estimators``, the module that defines it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, table: Mapping[str, str], exported: list[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: attribute ``name`` of ``table`` is
    ``getattr(import_module(table[name]), name)``, or the module itself when ``table[name]`` is
    ``f"{package}.{name}"`` (a lazily imported submodule); it is then cached in the package's
    namespace so later lookups bypass ``__getattr__``."""

    def __getattr__(name: str) -> object:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(table[name])
        value = module if table[name] == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exported))

    return __getattr__, __dir__
