r"""Pass@k Training with analytical derivation (Chen et al. 2025).

Chen, Qin, Wu, Ling, Ye, Zhao and Shi, "Pass@k Training for Adaptively Balancing Exploration
and Exploitation of Large Reasoning Models", 2025, arXiv:2508.10751 (Sec. 4, the analytical
advantage; the authors' verl code divides by ``sigma + 1e-6``).

A group of ``N`` 0/1 rewards with ``N_neg`` failures and ``K = N - N_neg`` successes:

    q = C(N_neg, k) / C(N, k)                 (1 - the group's unbiased pass@k, R = 1 - q)
    sigma = sqrt(R (1 - R)) = sqrt(q (1 - q))
    A_pos = (1 - R) / sigma = q / sigma
    A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma.

Since ``C(N_neg-1, k-1)/C(N-1, k-1) = (N / N_neg) q``, ``A_neg = -(K / N_neg) q / sigma``: the
advantages sum to 0 over the group and equal

    A_i = t (r_i - K/N) / sigma,   t = C(N_neg - 1, k - 1) / C(N - 1, k - 1),

Dr.GRPO's centred reward times a per-group factor ``t / sigma``. Equivalently ``A_i =
(s_i - mean s) / (k sigma)`` with ``s_i`` PKPO's unbiased pass@k credit (``pkpo`` with
``variant="s"``): the credit centred on its own group mean (which includes the sample) and
divided by the Bernoulli std of the group's pass@k -- a prompt reweighting, not an unbiased
gradient of pass@k (see :func:`prompt_weight`). ``k = 1`` is GRPO with the ``N``-denominator std.

``q`` is computed in log space from log-gamma functions (``log C(a, k)`` for ``a >= k``), so
neither large groups nor tiny ``q`` overflow or underflow.
"""

from __future__ import annotations

import math

import torch

from bestk._options import int_option, real_option
from bestk.estimators._registry import register_estimator
from bestk.groups import Groups

__all__ = ["passk_training", "count_advantages", "prompt_weight"]


def count_advantages(n: int, k: int, eps: float = 1e-6) -> tuple[list[float], list[float]]:
    """``(a_pos, a_neg)``: the advantage of a success and of a failure in a group of ``n`` with
    ``K = 0..n`` successes (index ``K``), from exact integer binomials (``math.comb``).

    A group with ``sigma = 0`` (``K = 0``, or fewer than ``k`` failures) gets 0: there the
    numerators are exactly 0, as they are in the authors' ``(...) / (sigma + 1e-6)``.
    """
    total = math.comb(n, k)
    a_pos, a_neg = [], []
    for K in range(n + 1):
        q = math.comb(n - K, k) / total  # exact integers, one correctly rounded division
        sigma = math.sqrt(q * (1.0 - q))
        if q in (0.0, 1.0):
            a_pos.append(0.0)
            a_neg.append(0.0)
            continue
        a_pos.append(q / (sigma + eps))
        a_neg.append(-(K / (n - K)) * q / (sigma + eps))
    return a_pos, a_neg


def prompt_weight(p: float, n: int, *, k: int, eps: float = 1e-6) -> float:
    """The prompt weight ``omega(p)`` of ``passk_training``'s expected update on 0/1 rewards:
    ``E[(1/N) sum_i A_i grad log pi(y_i)] = omega(p) grad p`` for a prompt of pass rate ``p``.

    By symmetry the expectation is ``E[A_1 grad log pi(y_1)]``; conditioning on ``y_1`` leaves
    ``a(r) = E[A_1 | r_1 = r]`` over the other ``n - 1`` draws (``K' ~ Binomial(n - 1, p)``), and
    ``E[a(r(y)) grad log pi(y)] = (a(1) - a(0)) grad p``:

        omega(p) = sum_{K'=0}^{n-1} C(n-1, K') p^K' (1-p)^(n-1-K') (A_pos(K'+1) - A_neg(K')).

    Compare ``grad pass@k = k (1-p)^(k-1) grad p``: the ratio of the two is the per-prompt
    weight the estimator puts on pass@k's gradient; it is not constant in ``p``.
    """
    a_pos, a_neg = count_advantages(n, k, eps)
    return float(math.fsum(
        math.comb(n - 1, j) * p**j * (1.0 - p) ** (n - 1 - j) * (a_pos[j + 1] - a_neg[j])
        for j in range(n)
    ))


def _check_k(k: object, groups: Groups) -> int:
    k = int_option("passk_training", "k", k, minimum=1)
    too_big = k > groups.sizes
    if bool(too_big.any()):
        g = int(torch.nonzero(too_big)[0])
        raise ValueError(
            f"passk_training option k={k} is too large for group {groups.label(g)!r} of size "
            f"{int(groups.sizes[g])} (needs k <= group size)"
        )
    return k


def _log_fail_fraction(neg: torch.Tensor, n: torch.Tensor, k: int) -> torch.Tensor:
    """``log C(neg, k) / C(n, k)`` for ``k <= neg <= n`` (float64 tensors), as two
    differences of log-gammas of similar size (``k!`` cancels)."""
    return (torch.lgamma(neg + 1) - torch.lgamma(n + 1)) + (
        torch.lgamma(n - k + 1) - torch.lgamma(neg - k + 1))


@register_estimator(
    "passk_training",
    objective=None,
    reward_domain="binary",
    prompt_weight=prompt_weight,
    default_options={"k": 4},  # what `bestk compare` uses when no option gives k
    group_bounded=("k",),  # C(N, k) needs k <= N
    min_group=2,  # centred on the group: 0 for a group of one
)
def passk_training(
    rewards: torch.Tensor, groups: Groups, *, k: int, eps: float = 1e-6
) -> torch.Tensor:
    """Pass@k Training's analytical advantages (Chen et al. 2025) on 0/1 rewards.

    ``A_pos = (1 - R) / (sigma + eps)``, ``A_neg = (1 - R - C(N_neg-1, k-1)/C(N-1, k-1)) /
    (sigma + eps)`` with ``R = 1 - C(N_neg, k)/C(N, k)`` and ``sigma = sqrt(R (1 - R))``;
    ``eps = 1e-6`` as in the authors' code. Zero-sum per group; a group with ``sigma = 0`` (no
    success, or fewer than ``k`` failures) gets 0 (its numerators are exactly 0), also with
    ``eps = 0``.

    **Not** an unbiased gradient of pass@k, nor of any objective of the registry: it is PKPO's
    unbiased pass@k credit centred on the group mean and divided by the group's Bernoulli std.
    Its expected update on a prompt of pass rate ``p`` is ``omega(p) grad p``
    (:func:`prompt_weight`, checked by exact enumeration), i.e. pass@k's gradient
    ``k (1-p)^(k-1) grad p`` reweighted per prompt by ``omega(p) / (k (1-p)^(k-1))``.

    ``k`` is required, an integer with ``1 <= k <= N`` for every group.
    """
    k = _check_k(k, groups)
    eps = real_option("passk_training", "eps", eps, minimum=0.0)
    n = groups.sizes.to(rewards.dtype)
    succ = groups.sum(rewards)  # exact: 0/1 rewards, fewer than 2**53 per group
    neg = n - succ
    live = (neg >= k) & (succ > 0)  # sigma > 0: 0 < q < 1
    safe_neg = torch.where(live, neg, torch.full_like(neg, float(k)))
    safe_n = torch.where(live, n, torch.full_like(n, float(k + 1)))
    # q = prod_{j<k} (N_neg - j)/(N - j) <= N_neg/N: the bound keeps a rounded log q below 0
    # (and is q itself, to the last bit, for k = 1)
    log_q = torch.minimum(_log_fail_fraction(safe_neg, safe_n, k),
                          torch.log1p(-(safe_n - safe_neg) / safe_n))
    log_sigma = 0.5 * (log_q + torch.log(-torch.expm1(log_q)))
    if eps > 0:
        log_denom = torch.logaddexp(log_sigma, torch.full_like(log_sigma, math.log(eps)))
    else:
        log_denom = log_sigma
    a_pos = torch.where(live, torch.exp(log_q - log_denom), torch.zeros_like(log_q))
    a_neg = 0.0 - (succ / safe_neg) * a_pos  # 0.0 - 0 = +0.0 in dead groups
    return torch.where(rewards > 0, groups.broadcast(a_pos), groups.broadcast(a_neg))
