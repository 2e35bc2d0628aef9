r"""Discrete reconstruction of the max@k optimal reward distribution (KAPPO App. 15, Eqs. 98-110).

For graded rewards the KL-regularised max@k optimum (Prop. 4.5, Eq. 88) is
:math:`\pi^*(y|x) = c\,\pi_{ref}(y|x)\exp(H(R(y,x))/\beta)` with the score
:math:`H(r) = k\int_{-\infty}^{r} F_{\pi^*}(u|x)^{k-1}du` (Eq. 90), which depends on the unknown
optimal CDF. When the reference reward distribution is discrete -- distinct levels
:math:`r_1 < \dots < r_m` with reference masses :math:`q_j` (Eqs. 98-99), e.g. the empirical masses
of a bank of M reference rewards (Eq. 110) -- the optimum follows from the forward recursion
(Eq. 104), for a candidate :math:`c = 1/Z`:

.. math::
    H_1 = 0,\ p_1 = c q_1,\ P_1 = p_1;\qquad
    H_j = H_{j-1} + k (r_j - r_{j-1}) P_{j-1}^{k-1},\ p_j = c q_j e^{H_j/\beta},\
    P_j = P_{j-1} + p_j .

:math:`P_m(c)` is continuous and strictly increasing with :math:`P_m(0) = 0` and
:math:`P_m(1/q_1) \ge 1` (Eqs. 105-108), so the normalisation :math:`P_m(c) = 1` is solved by
bisection -- here in :math:`\log c` on the bracket :math:`[-k(r_m - r_1)/\beta - 1, -\log q_1]`
(at the lower end every :math:`P_j \le e^{-1}`), so tiny :math:`\beta` cannot overflow. Between
levels the score is linear, :math:`H(r) = H_j + k (r - r_j) P_j^{k-1}` (Eq. 109).

With two levels {0, 1} this is the binary pass@k solution: :math:`p_2 = p^*`, :math:`H_2 = a_k`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bestk.kappo._validate import check_k, check_positive

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from bestk._inputs import Numbers

__all__ = ["MaxAtKReconstruction", "reconstruct_max_at_k", "reconstruct_from_bank"]


@dataclass(frozen=True)
class MaxAtKReconstruction:
    """The reconstructed max@k optimum on the reward levels.

    Attributes
    ----------
    levels:
        Distinct reward levels :math:`r_1 < \\dots < r_m`.
    q:
        Reference masses :math:`q_j`.
    p:
        Optimal masses :math:`p_j` (sum to 1).
    cdf:
        Optimal CDF :math:`P_j` at the levels.
    H:
        Score :math:`H_j = H(r_j)` (Eq. 101); :math:`\\log(p_j/q_j) = \\log c + H_j/\\beta`.
    log_c:
        :math:`\\log c = -\\log Z`.
    k, beta:
        Objective parameters.
    """

    levels: np.ndarray
    q: np.ndarray
    p: np.ndarray
    cdf: np.ndarray
    H: np.ndarray
    log_c: float
    k: int
    beta: float

    def score(self, r: Numbers) -> np.ndarray:
        """:math:`H(r)` at arbitrary rewards, linear between levels (Eq. 109); 0 below ``r_1``."""
        r = np.asarray(r, dtype=np.float64)
        if not np.isfinite(r).all():
            raise ValueError("rewards passed to score() must be finite")
        j = np.searchsorted(self.levels, r, side="right") - 1
        below = j < 0
        jj = np.clip(j, 0, len(self.levels) - 1)
        h = self.H[jj] + self.k * (r - self.levels[jj]) * self.cdf[jj] ** (self.k - 1)
        return np.where(below, 0.0, h)


def _forward(log_c: float, levels: np.ndarray, q: np.ndarray, k: int, beta: float):
    """Eq. 104 for one candidate ``log c``; returns (P_m, p, P, H). Overflow gives inf (fine)."""
    m = len(levels)
    p = np.empty(m)
    P = np.empty(m)
    H = np.empty(m)
    H[0] = 0.0
    with np.errstate(over="ignore"):
        p[0] = math.exp(log_c) * q[0]
        P[0] = p[0]
        for j in range(1, m):  # sequential recursion over reward levels (m <= bank size)
            H[j] = H[j - 1] + k * (levels[j] - levels[j - 1]) * P[j - 1] ** (k - 1)
            ex = log_c + math.log(q[j]) + H[j] / beta if q[j] > 0 else -math.inf
            p[j] = math.exp(ex) if ex < 709 else math.inf
            P[j] = P[j - 1] + p[j]
    return P[-1], p, P, H


def reconstruct_max_at_k(levels: Numbers, q: Numbers, k: int, beta: float
                         ) -> MaxAtKReconstruction:
    """Solve Eqs. 104-105 for the max@k optimal distribution over discrete reward levels.

    Parameters
    ----------
    levels:
        Strictly increasing finite reward levels :math:`r_1 < \\dots < r_m` (m >= 1).
    q:
        Reference probabilities of the levels: positive, summing to 1 (within 1e-9).
    k:
        max@k parameter, integer >= 1 (k = 1 gives the ordinary tilt :math:`q_j e^{r_j/\\beta}/Z`).
    beta:
        KL strength > 0.
    """
    k = check_k(k)
    beta = check_positive(beta, "beta")
    r = np.asarray(levels, dtype=np.float64).reshape(-1)
    qa = np.asarray(q, dtype=np.float64).reshape(-1)
    if r.size == 0:
        raise ValueError("levels are empty")
    if r.shape != qa.shape:
        raise ValueError(f"levels ({r.size}) and q ({qa.size}) have different lengths")
    if not (np.isfinite(r).all() and np.isfinite(qa).all()):
        raise ValueError("levels and q must be finite")
    if (np.diff(r) <= 0).any():
        raise ValueError("levels must be strictly increasing")
    if (qa <= 0).any():
        raise ValueError("every reference mass q_j must be > 0 (drop levels with zero mass)")
    if abs(qa.sum() - 1.0) > 1e-9:
        raise ValueError(f"reference masses must sum to 1, got {qa.sum()!r}")
    qa = qa / qa.sum()
    lo = -k * (r[-1] - r[0]) / beta - 1.0
    hi = -math.log(qa[0])
    if r.size == 1:
        lo = hi  # a single level: c = 1/q_1 = 1
    for _ in range(300):
        if hi - lo <= 1e-15 * max(1.0, abs(lo)):
            break
        mid = 0.5 * (lo + hi)
        if _forward(mid, r, qa, k, beta)[0] < 1.0:
            lo = mid
        else:
            hi = mid
    log_c = 0.5 * (lo + hi)
    _, p, P, H = _forward(log_c, r, qa, k, beta)
    total = P[-1]
    return MaxAtKReconstruction(
        levels=r, q=qa, p=p / total, cdf=P / total, H=H, log_c=log_c, k=k, beta=beta
    )


def reconstruct_from_bank(rewards: Numbers, k: int, beta: float) -> MaxAtKReconstruction:
    """Reconstruction with the empirical masses of a reference bank (Eq. 110)."""
    x = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("reference bank is empty")
    if not np.isfinite(x).all():
        raise ValueError("reference rewards must be finite")
    levels, counts = np.unique(x, return_counts=True)
    return reconstruct_max_at_k(levels, counts / x.size, k, beta)
