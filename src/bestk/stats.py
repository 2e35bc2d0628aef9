"""The statistics every bestk comparison uses: Student-t intervals, the paired t-test, Holm.

One convention everywhere (the lab tables, ``bestk compare`` and ``docs/results/claims.json``):

* :func:`mean_ci` — mean and half-width ``t_{0.975, n-1} s / sqrt(n)`` of the two-sided 95%
  Student-t interval over ``n`` values (``s`` the sample standard deviation, ``ddof=1``). With a
  single value the half-width is ``nan`` (unknown, never 0): one seed says nothing about the
  spread between seeds.
* :func:`paired_test` — the two-sided paired t-test of ``a - b`` over seeds (pairs share the
  seed: same initial weights, prompts / minibatches), its mean difference, 95% interval and
  p-value (``scipy.stats``). When every difference is the same number the standard error is 0:
  the p-value is then 1 if that number is 0 (identical runs carry no evidence) and 0 otherwise
  (a difference that never varies), and the interval has zero width.
* :func:`holm` — Holm's step-down adjustment of a family of p-values (controls the
  family-wise error rate at any dependence between the tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bestk._optional import require

__all__ = ["t_quantile", "mean_ci", "PairedTest", "paired_test", "holm"]


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided ``level`` Student-t quantile ``t_{(1+level)/2, df}`` (``scipy.stats.t.ppf``)."""
    stats = require("scipy.stats", extra="lab")

    if int(df) != df or df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(stats.t.ppf(0.5 + level / 2, int(df)))


def _values(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name} needs at least one value")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: values must be finite, got {a.tolist()}")
    return a


def mean_ci(x: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t interval over the values ``x``
    (half-width ``nan`` for a single value)."""
    a = _values(x, "mean_ci")
    m = float(a.mean())
    if a.size == 1:
        return m, float("nan")
    return m, t_quantile(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison ``a - b`` over seeds.

    ``diff`` is the mean of the per-seed differences, ``ci95`` its two-sided 95% t-interval
    ``(lo, hi)``, ``p`` the two-sided paired t-test p-value, ``n`` the number of pairs.
    """

    diff: float
    ci95: tuple[float, float]
    p: float
    n: int


def paired_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> PairedTest:
    """Two-sided paired t-test of ``a - b`` (``a[i]`` and ``b[i]`` share seed ``i``).

    Needs at least two pairs. Returns the mean difference, its 95% t-interval and the p-value
    (module docstring for the zero-variance case).
    """
    stats = require("scipy.stats", extra="lab")

    x, y = _values(a, "paired_test a"), _values(b, "paired_test b")
    if x.size != y.size:
        raise ValueError(f"paired_test: {x.size} values of a but {y.size} of b (pairs by seed)")
    if x.size < 2:
        raise ValueError(f"paired_test needs at least 2 pairs, got {x.size}")
    d = x - y
    m = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0 or not math.isfinite(sd) or sd <= 1e-15 * max(1.0, abs(m)):
        return PairedTest(m, (m, m), 1.0 if m == 0.0 else 0.0, int(d.size))
    half = t_quantile(d.size - 1) * sd / math.sqrt(d.size)
    p = float(stats.ttest_rel(x, y).pvalue)
    return PairedTest(m, (m - half, m + half), p, int(d.size))


def holm(pvalues: Sequence[float] | np.ndarray) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Sort ``p_(1) <= ... <= p_(m)``; ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``. A test
    is significant at family-wise level ``alpha`` when its adjusted p-value is ``< alpha``.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    if p.size == 0:
        return []
    if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError(f"holm: p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adj
    return out.tolist()
