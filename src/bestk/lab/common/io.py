"""What the lab experiments (and ``benchmarks/make_results.py``) write: atomic text / JSON
files, markdown tables, number formats, the keys of per-seed metrics. (Figures are saved by
:func:`bestk.figures.save_figure`, statistics are :mod:`bestk.stats`: both are shared with
``bestk compare``, a layer below the lab.)"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any, TypeAlias

from bestk._atomic import JSONValue, write_text_atomic
from bestk._optional import pyplot

__all__ = ["write_text_atomic", "write_json_atomic", "markdown_table", "fmt", "metric_key",
           "alloc_key", "pyplot", "TestbedData", "MethodData", "BiasRow"]

#: One testbed's per-seed data, as the lab commands write it (``testbeds.json``) and the claims
#: read it (``docs/results/data/<name>.json``): ``ks``, ``seeds``, ``n``, ``methods`` (label ->
#: ``{"config": its run configuration, "start" / "end": metric key -> per-seed values}``) and
#: ``sweep``; an exact testbed's ``bias`` rows or KAPPO ``cases`` instead. JSON values, read
#: by key.
TestbedData: TypeAlias = dict[str, Any]
#: One method's entry of a testbed's ``methods``: ``config`` (its run configuration: reward,
#: prompts, rollouts, lr, ...) and ``start`` / ``end`` (metric key -> per-seed values).
MethodData: TypeAlias = dict[str, Any]
#: One row of the exact bias table (``bestk lab bandit``; the ``bias`` rows of the ``bandit``
#: testbed data): ``bandit``, ``estimator``, ``N``, ``rel_bias``, ``implied_weight``, ...
BiasRow: TypeAlias = dict[str, Any]


def write_json_atomic(path: str | os.PathLike, obj: JSONValue) -> None:
    """JSON-dump ``obj`` (indent 1) atomically."""
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def fmt(x: float, digits: int = 3) -> str:
    """Compact number formatting for tables (scientific for tiny/huge magnitudes)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    ax = abs(x)
    if ax != 0 and (ax < 10 ** (-digits) or ax >= 10**5):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def metric_key(name: str, k: int | None = None) -> str:
    """The key of a metric in the per-seed data: ``"pass@4"``, ``"best@16"``, ``"alloc[.9,1]"``."""
    return name if k is None else f"{name}@{int(k)}"


def alloc_key(label: str) -> str:
    return f"alloc{label}"
