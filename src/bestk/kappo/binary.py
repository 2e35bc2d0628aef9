r"""Binary-reward KAPPO calibration: the pass@k optimal policy in closed form.

For a binary reward :math:`R \in \{0, 1\}`, reference pass rate :math:`q = p_{ref}(x)`,
objective parameter :math:`k \ge 1` and KL strength :math:`\beta > 0`, the maximiser of the
KL-regularised pass@k objective

.. math:: J_{k,x}(\pi) = 1 - (1 - p_\pi(x))^k - \beta\,\mathrm{KL}(\pi \,\|\, \pi_{ref})

is (KAPPO Prop. 4.1, Eq. 4) :math:`\pi^*(y|x) \propto \pi_{ref}(y|x)\exp(a_k R(y,x)/\beta)` with the
prompt-adaptive multiplier :math:`a_k = k(1-p^*)^{k-1}` (Eq. 7 / Eq. 138), where the optimal pass
rate :math:`p^*` is the unique root in :math:`(q, 1)` of (Prop. 4.2, Eq. 6)

.. math:: k(1-p)^{k-1} = \beta \log\frac{p(1-q)}{q(1-p)} .

In log-odds :math:`t = \mathrm{logit}(p)` the equation reads
:math:`\beta(t - t_q) = k\,\sigma(-t)^{k-1}`; the left side increases and the right side
decreases in :math:`t`, and the root lies in the bracket :math:`[t_q, t_q + k/\beta]` (the right
side is in :math:`(0, k]`). We bisect that bracket, vectorised over :math:`q`, to full float64
precision. Derived quantities:

* :math:`\beta_{eff} = \beta / a_k` (Eq. 5 / Eq. 54), the effective regularisation strength;
* :math:`\beta \log Z = \beta \log(1 - q + q e^{a_k/\beta})` (Alg. 1 line 13), computed with
  ``logaddexp`` so it never overflows for small :math:`\beta`.

Boundaries (Algorithm 1 / Eq. 148): :math:`q = 0 \Rightarrow (p^*, a_k, \beta\log Z) = (0, k, 0)`;
:math:`q = 1 \Rightarrow p^* = 1`, :math:`a_k = 1` if :math:`k = 1` else :math:`0`,
:math:`\beta \log Z = a_k`.

@k-DPO (Eq. 149 / Eq. 153) uses a failure pseudo-count, :math:`\hat q_D = N/(M + 0.5)`, and a capped
coefficient :math:`\hat\beta_{eff} = \min\{\beta / a_k(\hat q_D), 2\}` (:func:`dpo_beta_eff`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bestk.kappo._validate import as_probability_array, check_k, check_positive

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from bestk._inputs import Numbers

__all__ = ["BinaryCalibration", "binary_calibration", "solve_p_star", "dpo_beta_eff"]

_BISECT_ITERS = 200  # bracket width <= k/beta; 200 halvings reach float64 resolution


@dataclass(frozen=True)
class BinaryCalibration:
    """Closed-form pass@k quantities for reference pass rate(s) ``q`` (arrays shaped like ``q``).

    Attributes
    ----------
    q:
        The reference pass rates.
    p_star:
        Optimal pass rate :math:`p^*` (root of Eq. 6; boundaries of Eq. 148).
    a_k:
        Reward multiplier :math:`a_k = k(1-p^*)^{k-1}` (Eq. 7).
    beta_eff:
        Effective KL strength :math:`\\beta / a_k` (Eq. 5); ``inf`` where :math:`a_k = 0`
        (``q = 1`` and ``k > 1``: the prompt is frozen at the reference policy).
    beta_log_z:
        :math:`\\beta \\log Z = \\beta\\log(1 - q + q e^{a_k/\\beta})`, the A*PO regression offset.
    logit_p_star:
        :math:`\\log(p^*/(1-p^*))`, the solver's variable (exact even where ``p_star`` rounds
        to 1); ``-inf`` / ``inf`` at q = 0 / 1.
    k, beta:
        The objective parameters.
    """

    q: np.ndarray
    p_star: np.ndarray
    a_k: np.ndarray
    beta_eff: np.ndarray
    beta_log_z: np.ndarray
    logit_p_star: np.ndarray
    k: int
    beta: float


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    """``log(1 / (1 + exp(-x)))`` without overflow."""
    return -np.logaddexp(0.0, -x)


def _solve_logodds(t_q: np.ndarray, k: int, beta: float) -> np.ndarray:
    """Root ``t`` of ``beta (t - t_q) = k sigmoid(-t)^(k-1)`` (vectorised bisection)."""
    if k == 1:  # the right side is the constant 1
        return t_q + 1.0 / beta
    lo = t_q.copy()
    hi = t_q + k / beta
    for _ in range(_BISECT_ITERS):
        mid = 0.5 * (lo + hi)
        rhs = k * np.exp((k - 1) * _log_sigmoid(-mid))
        f = beta * (mid - t_q) - rhs
        up = f < 0
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
        if np.all(hi - lo <= 4 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(mid))):
            break
    return 0.5 * (lo + hi)


def solve_p_star(q: Numbers, k: int, beta: float) -> np.ndarray:
    """The optimal pass rate :math:`p^*(q)` of Eq. 6 (boundaries as in Eq. 148)."""
    return binary_calibration(q, k, beta).p_star


def binary_calibration(q: Numbers, k: int, beta: float) -> BinaryCalibration:
    """Solve the KAPPO binary calibration for reference pass rate(s) ``q``.

    Parameters
    ----------
    q:
        Reference pass rate, a number or array of numbers in [0, 1] (e.g. ``N(x)/M`` from a
        reference bank of ``M`` samples with ``N(x)`` successes).
    k:
        The pass@k objective parameter, an integer >= 1.
    beta:
        KL strength > 0.

    Returns
    -------
    :class:`BinaryCalibration` with float64 arrays shaped like ``q``.

    Examples
    --------
    >>> cal = binary_calibration(1 / 30, k=4, beta=0.1)
    >>> round(float(cal.p_star), 3)
    0.553
    """
    k = check_k(k)
    beta = check_positive(beta, "beta")
    qa = as_probability_array(q, "q")
    shape = qa.shape
    qf = qa.reshape(-1)
    interior = (qf > 0) & (qf < 1)
    qi = qf[interior]

    p_star = np.where(qf >= 1, 1.0, 0.0)
    a_k = np.where(qf >= 1, 1.0 if k == 1 else 0.0, float(k))
    beta_log_z = np.where(qf >= 1, a_k, 0.0)
    logit = np.where(qf >= 1, np.inf, -np.inf)

    if qi.size:
        t_q = np.log(qi) - np.log1p(-qi)
        t = _solve_logodds(t_q, k, beta)
        log_one_minus_p = _log_sigmoid(-t)
        a_i = k * np.exp((k - 1) * log_one_minus_p)
        p_star[interior] = np.exp(_log_sigmoid(t))
        logit[interior] = t
        a_k[interior] = a_i
        # beta log(1 - q + q e^{a/beta}): log1p(q expm1(a/beta)) is exact for small a/beta;
        # logaddexp(log(1-q), log q + a/beta) cannot overflow for large a/beta.
        x = a_i / beta
        small = beta * np.log1p(qi * np.expm1(np.minimum(x, 1.0)))
        large = beta * np.logaddexp(np.log1p(-qi), np.log(qi) + x)
        beta_log_z[interior] = np.where(x <= 1.0, small, large)

    with np.errstate(divide="ignore"):
        beta_eff = np.where(a_k > 0, beta / np.where(a_k > 0, a_k, 1.0), np.inf)
    return BinaryCalibration(
        q=qa,
        p_star=p_star.reshape(shape),
        a_k=a_k.reshape(shape),
        beta_eff=beta_eff.reshape(shape),
        beta_log_z=beta_log_z.reshape(shape),
        logit_p_star=logit.reshape(shape),
        k=k,
        beta=beta,
    )


def dpo_beta_eff(
    n_success: Numbers, M: Numbers, k: int, beta: float, *, alpha: float = 0.5, cap: float = 2.0
) -> np.ndarray:
    """@k-DPO coefficient :math:`\\min\\{\\beta / a_k(N/(M+\\alpha)), \\text{cap}\\}` (Eq. 149/153).

    The failure pseudo-count ``alpha`` keeps :math:`\\hat q_D < 1`, so the coefficient is finite;
    the cap limits the very large values near that boundary. ``n_success`` and ``M`` broadcast.
    """
    k = check_k(k)
    beta = check_positive(beta, "beta")
    cap = check_positive(cap, "cap")
    if isinstance(alpha, bool) or not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    n = np.asarray(n_success, dtype=np.float64)
    m = np.asarray(M, dtype=np.float64)
    if not (np.isfinite(n).all() and np.isfinite(m).all()):
        raise ValueError("n_success and M must be finite")
    if (m <= 0).any():
        raise ValueError("M must be > 0")
    if ((n < 0) | (n > m)).any():
        raise ValueError("n_success must lie in [0, M]")
    q = n / (m + alpha)
    cal = binary_calibration(q, k, beta)
    return np.minimum(cal.beta_eff, cap)
