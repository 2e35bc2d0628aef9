r"""Continuous win-rate KAPPO calibration (KAPPO Prop. 4.7, Eqs. 121-136, Algorithm 2).

For a continuous reference reward distribution, the reference win rate (quantile) of a
completion, :math:`Q(y) = F_{ref}(R(y,x)|x)`, is uniform on [0, 1] under :math:`\pi_{ref}`. The
KL-regularised max@k optimum for the win-rate reward is

.. math:: \pi^*(y|x) = \pi_{ref}(y|x)\,\exp(T(Q(y))/\beta),\qquad
          T(q) = \beta\log\Big(C + \frac{G(q)^k}{\beta}\Big),\quad G = \Psi^{-1},

with :math:`\Psi(z) = \int_0^z du / (C + u^k/\beta)` and the constant :math:`C > 0` fixed by
:math:`\Psi(1) = 1` (Eq. 131). The paper's Algorithm 2 prints :math:`u^{k/\beta}`; that is a
typesetting error -- the derivation (Eqs. 128-131) gives :math:`u^k/\beta`, used here.
Normalisation is built in: :math:`E_{ref}[\exp(T(Q)/\beta)] = \int_0^1 G'(q)\,dq = 1` (Eq. 136).

For :math:`k = 1` everything is closed form: :math:`\log C = -\log\beta - 1/\beta -
\log(1 - e^{-1/\beta})` and :math:`T(q) = q + \beta\log C`.

Numerics (:math:`k \ge 2`). With the length scale :math:`L = (\beta C)^{1/k}` the substitution
:math:`u = L v` gives :math:`\Psi(z) = (L/C)\, I_k(z/L)`, :math:`I_k(Y) = \int_0^Y dv/(1+v^k)`, and
for :math:`Y > 1`, :math:`I_k(Y) = I_k(1) + \int_{1/Y}^{1} w^{k-2}/(1+w^k)\,dw` (substituting
:math:`v = 1/w`). Both integrands are analytic on [0, 1], so composite Gauss-Legendre is exact to
float64 rounding even when :math:`\beta` is tiny and the integrand of :math:`\Psi` is a narrow
spike. :math:`C` is found by bisection in :math:`\log C` on the bracket :math:`[C_1, 1]`
(:math:`C_1` is the :math:`k = 1` constant: :math:`u^k \le u` gives :math:`C_k \ge C_1`;
:math:`\Psi(1) \le 1/C` gives :math:`C_k \le 1`),
and :math:`z_j = G(j/M)` by vectorised bisection on :math:`\Psi(z) = j/M`.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from bestk.kappo._validate import as_probability_array, check_k, check_positive

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from bestk._inputs import Numbers

__all__ = [
    "winrate_constant",
    "winrate_log_constant",
    "winrate_psi",
    "winrate_G",
    "winrate_T",
    "winrate_table",
]

_NODES = 16


@cache
def _gauss_legendre(panels: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes/weights on [0, 1] (``panels`` equal panels)."""
    x, w = np.polynomial.legendre.leggauss(_NODES)
    x = (x + 1) / 2
    w = w / 2
    offs = np.arange(panels)[:, None]
    nodes = ((offs + x[None, :]) / panels).reshape(-1)
    weights = np.tile(w / panels, panels)
    return nodes, weights


def _panels(k: int) -> int:
    # The integrands' nearest complex pole is e^{i pi/k}, about pi/k from the interval:
    # panels of width well below pi/k keep Gauss-Legendre at machine precision.
    return 32 + 4 * k


def _f(v: np.ndarray, k: int, second: bool) -> np.ndarray:
    vk = v**k
    return (v ** (k - 2)) / (1.0 + vk) if second else 1.0 / (1.0 + vk)


@lru_cache(maxsize=64)
def _panel_cumsum(k: int, second: bool) -> np.ndarray:
    """``int_0^{i/P} f`` at the P+1 panel edges (exact composite Gauss-Legendre)."""
    P = _panels(k)
    nodes, weights = _gauss_legendre(P)
    per_panel = (_f(nodes, k, second) * weights).reshape(P, _NODES).sum(1)
    return np.concatenate([[0.0], np.cumsum(per_panel)])


def _cum(k: int, x: np.ndarray, second: bool) -> np.ndarray:
    """``int_0^x f`` for x in [0, 1], f = 1/(1+v^k) or w^(k-2)/(1+w^k): whole panels from the
    cached cumulative sum plus one Gauss-Legendre rule on the partial panel (O(16) per x)."""
    P = _panels(k)
    x = np.asarray(x, dtype=np.float64)
    i = np.minimum(np.floor(x * P).astype(np.int64), P - 1)
    a = i / P
    x16, w16 = _gauss_legendre(1)
    v = a[..., None] + (x - a)[..., None] * x16
    part = (x - a) * (_f(v, k, second) * w16).sum(-1)
    return _panel_cumsum(k, second)[i] + part


def _I(k: int, Y: np.ndarray) -> np.ndarray:
    """``I_k(Y) = int_0^Y dv / (1 + v^k)`` for ``Y >= 0`` (``Y = inf`` allowed), k >= 2."""
    Y = np.asarray(Y, dtype=np.float64)
    small = Y <= 1
    first = _cum(k, np.where(small, Y, 1.0), second=False)
    with np.errstate(divide="ignore"):
        inv = np.where(small, 1.0, 1.0 / np.where(small, 1.0, Y))
    tail = _panel_cumsum(k, True)[-1] - _cum(k, inv, second=True)
    return np.where(small, first, first + tail)


def _log_c1(beta: float) -> float:
    """``log C`` for k = 1: -log(beta) - 1/beta - log(1 - e^{-1/beta})."""
    return -math.log(beta) - 1.0 / beta - math.log(-math.expm1(-1.0 / beta))


def _psi(z: np.ndarray, log_c: float, k: int, beta: float) -> np.ndarray:
    """Psi(z) for k >= 2 in the scaled form (L/C) I_k(z/L)."""
    log_l = (math.log(beta) + log_c) / k
    with np.errstate(over="ignore"):
        Y = np.asarray(z, dtype=np.float64) * math.exp(-log_l) if log_l > -700 else None
    if Y is None:  # L below float range: every z > 0 is far in the tail
        Y = np.where(np.asarray(z) > 0, np.inf, 0.0)
    with np.errstate(over="ignore"):  # far below the root C: Psi is huge, inf compares fine
        scale = np.exp(log_l - log_c)
    return scale * _I(k, Y)


@lru_cache(maxsize=256)
def _log_constant(k: int, beta: float) -> float:
    if k == 1:
        return _log_c1(beta)
    lo, hi = _log_c1(beta), 0.0  # Psi(1) >= 1 at lo, <= 1 at hi
    one = np.ones(1)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _psi(one, mid, k, beta)[0] > 1.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def winrate_log_constant(k: int, beta: float) -> float:
    """:math:`\\log C` of Prop. 4.7 (finite even when :math:`C` underflows, e.g. k=1, tiny beta)."""
    return _log_constant(check_k(k), check_positive(beta, "beta"))


def winrate_constant(k: int, beta: float) -> float:
    """The constant :math:`C > 0` with :math:`\\int_0^1 du/(C + u^k/\\beta) = 1` (Eq. 131).

    For ``k = 1``: :math:`C = 1/(\\beta(e^{1/\\beta} - 1))`.
    """
    return math.exp(winrate_log_constant(k, beta))


def winrate_psi(z: Numbers, k: int, beta: float) -> np.ndarray:
    """:math:`\\Psi(z) = \\int_0^z du/(C + u^k/\\beta)` for ``z`` in [0, 1] (Eq. 130)."""
    k = check_k(k)
    beta = check_positive(beta, "beta")
    za = as_probability_array(z, "z")
    log_c = _log_constant(k, beta)
    if k == 1:
        # int_0^z du/(C + u/beta) = beta log(1 + z/(beta C))
        return beta * np.log1p(za * np.exp(-math.log(beta) - log_c))
    return _psi(za, log_c, k, beta)


def _G(q: np.ndarray, k: int, beta: float, log_c: float) -> np.ndarray:
    """G = Psi^{-1} on [0, 1] by vectorised safeguarded Newton iteration (k >= 2).

    Psi is increasing and concave with Psi'(z) = 1 / (C + z^k/beta), so Newton from z = 0
    (where Psi(0) = 0 <= q) increases monotonically to the root without overshooting; the
    iterate is clipped to [0, 1] as a safeguard.
    """
    c = math.exp(log_c)
    z = np.zeros_like(q)
    polish = False
    for _ in range(100):
        step = (q - _psi(z, log_c, k, beta)) * (c + z**k / beta)
        z_new = np.clip(z + step, 0.0, 1.0)
        small = bool(np.all(np.abs(z_new - z) <= 1e-12 * z_new))
        z = z_new
        if polish:
            break
        # quadratic convergence: one more step after 1e-12 reaches rounding level (a stricter
        # test can cycle at the last bit)
        polish = small
    return np.where(q <= 0, 0.0, np.where(q >= 1, 1.0, z))


def winrate_G(q: Numbers, k: int, beta: float) -> np.ndarray:
    """Optimal win-rate CDF :math:`G = \\Psi^{-1}` (Eq. 132), for ``q`` in [0, 1]."""
    k = check_k(k)
    beta = check_positive(beta, "beta")
    qa = as_probability_array(q, "q")
    log_c = _log_constant(k, beta)
    if k == 1:
        # G(q) = beta C (e^{q/beta} - 1)
        return np.exp(math.log(beta) + log_c) * np.expm1(qa / beta)
    return _G(qa, k, beta, log_c)


def winrate_T(q: Numbers, k: int, beta: float) -> np.ndarray:
    """Win-rate transform :math:`T(q) = \\beta\\log(C + G(q)^k/\\beta)` (Eq. 155), q in [0, 1].

    The transformed reward of a completion with reference quantile ``q`` (Eq. 12 / Eq. 134).
    """
    k = check_k(k)
    beta = check_positive(beta, "beta")
    qa = as_probability_array(q, "q")
    log_c = _log_constant(k, beta)
    if k == 1:
        return qa + beta * log_c
    z = _G(qa, k, beta, log_c)
    with np.errstate(divide="ignore"):
        log_zk = k * np.log(z) - math.log(beta)
    return beta * np.logaddexp(log_c, log_zk)


def winrate_table(M: int, k: int, beta: float) -> np.ndarray:
    """The shared table :math:`(T_0, \\ldots, T_M)`, :math:`T_j = T(j/M)` (Algorithm 2).

    ``T_0 = beta log C`` and ``T_M = beta log(C + 1/beta)``. An online reward ``r`` of prompt
    ``x`` is transformed to ``T_j`` with ``j = #{reference rewards of x <= r}`` (inclusive CDF).
    """
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
        raise ValueError(f"M must be an integer >= 1, got {M!r}")
    return winrate_T(np.arange(M + 1) / M, k, beta)
