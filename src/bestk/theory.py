r"""Closed-form prompt weights of binary-reward objectives (SoftmaxGRPO Sec. 3, Table 1).

Under binary rewards, the expected update of a group estimator on a prompt with pass rate
:math:`p` is :math:`\omega(p)\,\nabla_\theta p_\theta(x)`: the weight :math:`\omega(p)` says how
much of the learning signal the prompt gets as a function of its difficulty.

* :func:`softmax_grpo_weight` -- SoftmaxGRPO (:math:`A_i = M\,\mathrm{softmax}(r/\tau)_i - 1`),
  exact for a group of :math:`M` samples, with :math:`c = e^{1/\tau}` and
  :math:`s \sim \mathrm{Bin}(M-1, p)` the successes among the other samples:

  .. math:: \omega_{M,\tau}(p) = M\,E_s\Big[\frac{Mc}{M+(s+1)(c-1)} - \frac{M}{M+s(c-1)}\Big]
            = M\,E_s\Big[\frac{M d\,(M-1+sd)}{(M+(s+1)d)(M+sd)}\Big],\quad d = c - 1 .

  (The second form has no cancellation; it is evaluated in log space with
  :math:`\log d = 1/\tau + \log(1-e^{-1/\tau})`, so :math:`\tau` down to 1e-3 and below is
  finite and accurate.) As :math:`\tau\to 0` it tends to :math:`M(1-(1-p)^{M-1})/p`, i.e.
  :math:`M` times MaxRL with :math:`T = M-1` (SoftmaxGRPO Eq. 5).
* :func:`softmax_grpo_weight_large_m` -- the large-M shape :math:`(c-1)/(1-p+pc)` (Table 1):
  :math:`\omega_{M,\tau}(p)/M \to (c-1)/(1-p+pc)` as :math:`M \to \infty`.
* Table 1: :func:`reinforce_weight` (1), :func:`ml_weight` (:math:`1/p`), :func:`grpo_weight`
  (:math:`1/\sqrt{p(1-p)}`), :func:`maxrl_weight` (:math:`(1-(1-p)^T)/p`), and
  :func:`table1_weights` for all of them at once. Weights are "up to a positive
  p-independent scale", as in the paper.

All functions are vectorised over ``p`` (number, array or tensor); a tensor in gives a float64
tensor out, anything else a float64 numpy array. ``p`` outside [0, 1] is a ``ValueError``.
:math:`1/p` and :math:`1/\sqrt{p(1-p)}` are ``inf`` at the endpoints where they diverge.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import overload

import numpy as np
import torch

from bestk._inputs import ArrayInput, Numbers, NumbersOut

__all__ = [
    "softmax_grpo_weight",
    "softmax_grpo_weight_large_m",
    "maxrl_weight",
    "reinforce_weight",
    "ml_weight",
    "grpo_weight",
    "table1_weights",
]


def _prob(p: Numbers) -> tuple[torch.Tensor, bool]:
    is_t = isinstance(p, torch.Tensor)
    try:
        t = p.detach().to(torch.float64) if isinstance(p, torch.Tensor) else \
            torch.as_tensor(np.asarray(p, np.float64))
    except (TypeError, ValueError):
        raise ValueError("p must be a number or an array of numbers in [0, 1]") from None
    if t.numel() == 0:
        raise ValueError("p is empty")
    bad = ~torch.isfinite(t) | (t < 0) | (t > 1)
    if bool(bad.any()):
        v = t[bad].reshape(-1)[0].item()
        raise ValueError(f"p = {v!r} is not a probability in [0, 1]")
    return t, is_t


def _out(t: torch.Tensor, is_t: bool) -> NumbersOut:
    return t if is_t else t.cpu().numpy()


def _check_int(x: object, name: str, lo: int) -> int:
    if isinstance(x, bool) or not isinstance(x, Integral) or int(x) < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}")
    return int(x)


def _check_tau(tau: object) -> float:
    if isinstance(tau, bool) or not isinstance(tau, Real) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    return float(tau)


def _log_d(tau: float) -> float:
    """log(e^{1/tau} - 1) without overflow."""
    x = 1.0 / tau
    return x + math.log(-math.expm1(-x))


@overload
def softmax_grpo_weight(p: torch.Tensor, M: int, tau: float) -> torch.Tensor: ...


@overload
def softmax_grpo_weight(p: ArrayInput, M: int, tau: float) -> np.ndarray: ...


def softmax_grpo_weight(p: Numbers, M: int, tau: float) -> NumbersOut:
    """Exact SoftmaxGRPO prompt weight :math:`\\omega_{M,\\tau}(p)` (see the module docstring).

    The expected SoftmaxGRPO update of a group of ``M`` binary-reward samples is
    ``softmax_grpo_weight(p, M, tau) * grad p`` (with the update written as
    :math:`\\sum_i A_i \\nabla\\log\\pi(y_i)`, :math:`A_i = M\\,\\mathrm{softmax}(r/\\tau)_i - 1`).
    """
    M = _check_int(M, "M", 1)
    tau = _check_tau(tau)
    pt, is_t = _prob(p)
    flat = pt.reshape(-1, 1)
    s = torch.arange(M, dtype=torch.float64)  # successes among the other M-1 samples
    n = M - 1
    # one lgamma implementation for all three terms, so the end terms cancel exactly
    lg_n = torch.lgamma(torch.full_like(s, n + 1.0))
    log_binom = lg_n - torch.lgamma(s + 1) - torch.lgamma(n - s + 1)
    log_pmf = log_binom + torch.xlogy(s, flat) + torch.xlogy(n - s, 1 - flat)  # (P, M)
    ld = _log_d(tau)
    log_m = math.log(M)
    lt = torch.full_like(s, ld)

    def log_lin(a: float, b: torch.Tensor) -> torch.Tensor:
        # log(a + b d) for a >= 0, b >= 0, via logaddexp
        la = torch.full_like(b, math.log(a) if a > 0 else -math.inf)
        lb = torch.log(b) + lt  # log 0 = -inf drops the term
        return torch.logaddexp(la, lb)

    # term(s) = M d (M - 1 + s d) / ((M + (s+1) d) (M + s d))
    log_term = log_m + ld + log_lin(M - 1, s) - log_lin(M, s + 1) - log_lin(M, s)
    w = torch.logsumexp(log_pmf + log_term, dim=1).exp() * M
    return _out(w.reshape(pt.shape), is_t)


@overload
def softmax_grpo_weight_large_m(p: torch.Tensor, tau: float) -> torch.Tensor: ...


@overload
def softmax_grpo_weight_large_m(p: ArrayInput, tau: float) -> np.ndarray: ...


def softmax_grpo_weight_large_m(p: Numbers, tau: float) -> NumbersOut:
    """Large-group SoftmaxGRPO shape :math:`(c-1)/(1-p+pc)`, :math:`c = e^{1/\\tau}` (Table 1).

    Computed as :math:`(1 - e^{-1/\\tau}) / ((1-p)e^{-1/\\tau} + p)`; at p = 0 it is
    :math:`c - 1 = e^{1/\\tau} - 1` (``inf`` if that overflows float64).
    """
    tau = _check_tau(tau)
    pt, is_t = _prob(p)
    ic = math.exp(-1.0 / tau)
    num = -math.expm1(-1.0 / tau)
    den = (1 - pt) * ic + pt
    with np.errstate(divide="ignore"):
        w = torch.where(den > 0, num / den, torch.full_like(pt, math.inf))
    return _out(w, is_t)


@overload
def maxrl_weight(p: torch.Tensor, T: int) -> torch.Tensor: ...


@overload
def maxrl_weight(p: ArrayInput, T: int) -> np.ndarray: ...


def maxrl_weight(p: Numbers, T: int) -> NumbersOut:
    """MaxRL(T) weight :math:`(1-(1-p)^T)/p` (= T at p = 0), via ``expm1``/``log1p``."""
    T = _check_int(T, "T", 1)
    pt, is_t = _prob(p)
    num = -torch.expm1(T * torch.log1p(-pt))
    safe = torch.where(pt > 0, pt, torch.ones_like(pt))
    # For p T < 1e-6 use the series T - T(T-1)p/2 (relative error < (pT)^2/6): the closed form
    # loses everything for subnormal p.
    series = T - 0.5 * T * (T - 1) * pt
    w = torch.where(pt * T < 1e-6, series, num / safe)
    return _out(w, is_t)


@overload
def reinforce_weight(p: torch.Tensor) -> torch.Tensor: ...


@overload
def reinforce_weight(p: ArrayInput) -> np.ndarray: ...


def reinforce_weight(p: Numbers) -> NumbersOut:
    """REINFORCE weight: 1 (uniform over difficulty)."""
    pt, is_t = _prob(p)
    return _out(torch.ones_like(pt), is_t)


@overload
def ml_weight(p: torch.Tensor) -> torch.Tensor: ...


@overload
def ml_weight(p: ArrayInput) -> np.ndarray: ...


def ml_weight(p: Numbers) -> NumbersOut:
    """Maximum-likelihood weight :math:`1/p` (``inf`` at p = 0)."""
    pt, is_t = _prob(p)
    with np.errstate(divide="ignore"):
        return _out(1.0 / pt, is_t)


@overload
def grpo_weight(p: torch.Tensor) -> torch.Tensor: ...


@overload
def grpo_weight(p: ArrayInput) -> np.ndarray: ...


def grpo_weight(p: Numbers) -> NumbersOut:
    """GRPO weight :math:`1/\\sqrt{p(1-p)}` (``inf`` at p = 0 and p = 1)."""
    pt, is_t = _prob(p)
    return _out(torch.rsqrt(pt * (1 - pt)), is_t)


def table1_weights(p: torch.Tensor | ArrayInput, *, T: int = 7, tau: float = 0.1
                   ) -> dict[str, NumbersOut]:
    """All Table-1 weights at ``p``: REINFORCE, ML, GRPO, MaxRL(T), SoftmaxGRPO (large M)."""
    return {
        "reinforce": reinforce_weight(p),
        "ml": ml_weight(p),
        "grpo": grpo_weight(p),
        f"maxrl(T={T})": maxrl_weight(p, T),
        f"softmax_grpo(tau={tau})": softmax_grpo_weight_large_m(p, tau),
    }
