"""Independent references for the KAPPO tests: the pass@k optimum solved with scipy's brentq."""

from __future__ import annotations

import math

from scipy.optimize import brentq


def p_star_ref(q: float, k: int, beta: float) -> float:
    """Root of k(1-p)^(k-1) = beta log(p(1-q)/(q(1-p))) in (q, 1) (KAPPO Eq. 6), by brentq."""
    f = lambda p: k * (1 - p) ** (k - 1) - beta * math.log(p * (1 - q) / (q * (1 - p)))  # noqa: E731
    return brentq(f, q, 1 - 1e-15, xtol=1e-15, rtol=1e-15)


def a_k_ref(q: float, k: int, beta: float) -> float:
    """The reward multiplier a_k = k(1-p*)^(k-1) (Eq. 7)."""
    return k * (1 - p_star_ref(q, k, beta)) ** (k - 1)
