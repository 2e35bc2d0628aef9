r"""Exact finite-bank noise and bias of KAPPO calibration (KAPPO App. 22, Eqs. 151-156).

A bank of M reference samples estimates a probability :math:`q` (the pass rate, or the
reference CDF at a reward threshold) by :math:`\hat q = N/M`, :math:`N \sim \mathrm{Bin}(M, q)`.
For a calibrated quantity :math:`\theta(q)` with bank estimate :math:`\hat\theta_N` the exact
mean, noise and signed bias are (Eq. 151), with :math:`w_j(q) = \binom{M}{j} q^j (1-q)^{M-j}`:

.. math:: \mu_\theta = \sum_{j=0}^{M} w_j \hat\theta_j,\quad
          \sigma_\theta = \Big(\sum_j w_j (\hat\theta_j - \mu_\theta)^2\Big)^{1/2},\quad
          b_\theta = \mu_\theta - \theta(q).

Quantities (Eqs. 152-155): ``"p_star"``, ``"a_k"``, ``"beta_log_z"`` (estimates at
:math:`\hat q = j/M`), ``"beta_eff"`` (the finite @k-DPO estimate of Eq. 153,
:math:`\min\{\beta/a_k(j/(M+0.5)), 2\}`, compared with the exact :math:`\beta/a_k(q)` -- the
unsmoothed estimate is infinite with probability :math:`q^M`), and ``"winrate"``
(:math:`T(j/M)` against :math:`T(q)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bestk._inputs import Numbers
from bestk.kappo._validate import as_probability_array, check_k, check_positive
from bestk.kappo.binary import binary_calibration, dpo_beta_eff
from bestk.kappo.winrate import winrate_T

__all__ = ["BankError", "finite_bank_error", "binomial_weights", "QUANTITIES"]

QUANTITIES = ("p_star", "a_k", "beta_eff", "beta_log_z", "winrate")


@dataclass(frozen=True)
class BankError:
    """Exact finite-bank statistics (arrays shaped like ``q``).

    ``relative_noise``/``relative_bias`` divide by :math:`|\\theta(q)|` and are ``nan`` where
    :math:`\\theta(q)` is 0 or infinite. ``weights[..., j]`` is :math:`\\Pr(N = j)`.
    """

    q: np.ndarray
    exact: np.ndarray
    mean: np.ndarray
    noise: np.ndarray
    bias: np.ndarray
    relative_noise: np.ndarray
    relative_bias: np.ndarray
    weights: np.ndarray
    estimates: np.ndarray


def binomial_weights(q: Numbers, M: int) -> np.ndarray:
    """``(..., M+1)`` array of :math:`\\Pr(N = j)`, :math:`N \\sim \\mathrm{Bin}(M, q)`."""
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
        raise ValueError(f"M must be an integer >= 1, got {M!r}")
    qa = as_probability_array(q, "q")[..., None]
    j = np.arange(M + 1, dtype=np.float64)
    lg = torch.lgamma(torch.arange(M + 2, dtype=torch.float64) + 1).numpy()  # lg[i] = log i!
    log_binom = lg[M] - lg[: M + 1] - lg[M::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.where(j > 0, j * np.log(qa), 0.0)
        l1q = np.where(j < M, (M - j) * np.log1p(-qa), 0.0)
    return np.exp(log_binom + lq + l1q)


def finite_bank_error(q: Numbers, M: int, k: int, beta: float, quantity: str = "a_k"
                      ) -> BankError:
    """Exact noise and bias of a bank-of-``M`` calibration of ``quantity`` at true ``q`` (Eq. 151).

    Examples
    --------
    >>> err = finite_bank_error(0.99, M=30, k=4, beta=0.1, quantity="winrate")
    >>> round(float(err.weights[-1]), 3)  # Pr(q_hat = 1) = 0.99**30
    0.74
    """
    k = check_k(k)
    beta = check_positive(beta, "beta")
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; valid: {', '.join(QUANTITIES)}")
    qa = as_probability_array(q, "q")
    w = binomial_weights(qa, M)
    grid = np.arange(M + 1) / M
    if quantity == "winrate":
        est = winrate_T(grid, k, beta)
        exact = winrate_T(qa, k, beta)
    elif quantity == "beta_eff":
        est = dpo_beta_eff(np.arange(M + 1), M, k, beta)
        exact = binary_calibration(qa, k, beta).beta_eff
    else:
        est = getattr(binary_calibration(grid, k, beta), quantity)
        exact = getattr(binary_calibration(qa, k, beta), quantity)
    mean = (w * est).sum(-1)
    noise = np.sqrt((w * (est - mean[..., None]) ** 2).sum(-1))
    bias = mean - exact
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = np.isfinite(exact) & (exact != 0)
        denom = np.where(ok, np.abs(exact), 1.0)
        rel_noise = np.where(ok, noise / denom, np.nan)
        rel_bias = np.where(ok, bias / denom, np.nan)
        bias = np.where(np.isfinite(exact), bias, np.nan)
    return BankError(
        q=qa, exact=exact, mean=mean, noise=noise, bias=bias,
        relative_noise=rel_noise, relative_bias=rel_bias, weights=w, estimates=est,
    )
