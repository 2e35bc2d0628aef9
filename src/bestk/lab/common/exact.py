"""Closed-form @k quantities of a categorical policy over arms with fixed rewards.

A policy ``pi`` puts probability ``pi_a`` on arm ``a`` whose reward is ``v_a`` (deterministic).
Sort the arms by reward, ``v_(1) <= ... <= v_(K)``, with cumulative probabilities
``F_j = sum_{l <= j} pi_(l)`` (``F_0 = 0``). The maximum of ``k`` i.i.d. draws is
``<= v_(j)`` with probability ``F_j^k``, so

    best@k = E[max of k draws] = sum_j v_(j) (F_j^k - F_{j-1}^k).

Tied rewards need no care (their terms telescope), negative rewards are fine, and on 0/1
rewards this is ``pass@k = 1 - (1 - p)^k``. The expression is differentiable in ``pi`` (the
sort permutes by the rewards only), so ``torch.autograd`` gives the exact gradient of any
objective built from it, e.g. the ArgMaxRL objective (ArgMaxRL blog, docs/references.md)

    J_N = sum_{k=1}^{N} best@k / k.

These are population values, not estimates: the lab uses them as the ground truth the
estimators' exact expectations (:mod:`bestk.lab.bandit`) and the trained policies
(:mod:`bestk.lab.digits`) are compared with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["best_at_k_exact", "j_objective"]


def best_at_k_exact(probs: torch.Tensor, values: torch.Tensor, ks: Sequence[int]) -> torch.Tensor:
    """Exact ``best@k`` for each ``k`` in ``ks``.

    Parameters
    ----------
    probs:
        ``(..., K)`` probabilities of the arms (rows sum to 1).
    values:
        ``(..., K)`` or ``(K,)`` reward of each arm (broadcast against ``probs``).
    ks:
        Positive integers.

    Returns
    -------
    ``(..., len(ks))`` tensor, differentiable with respect to ``probs``.
    """
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be a non-empty list of positive integers, got {ks}")
    if probs.ndim < 1:
        raise ValueError("probs must have at least one dimension (the arms)")
    values = values.to(probs.dtype).expand_as(probs)
    if not bool(torch.isfinite(values).all()):
        raise ValueError("arm rewards must be finite")
    v_sorted, order = torch.sort(values, dim=-1)
    p_sorted = torch.gather(probs, -1, order)
    cdf = torch.cumsum(p_sorted, dim=-1).clamp(0.0, 1.0)
    cdf_prev = torch.cat([torch.zeros_like(cdf[..., :1]), cdf[..., :-1]], dim=-1)
    k = torch.tensor(ks, dtype=probs.dtype, device=probs.device)
    mass = cdf.unsqueeze(-1) ** k - cdf_prev.unsqueeze(-1) ** k  # (..., K, len(ks))
    return (v_sorted.unsqueeze(-1) * mass).sum(-2)


def j_objective(probs: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """``J_n = sum_{k=1}^{n} best@k / k`` (``J_0 = 0``), the objective ArgMaxRL / MaxRL estimate
    without bias (ArgMaxRL blog, "Joint Best@k Gradient Estimator")."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0:
        return torch.zeros(probs.shape[:-1], dtype=probs.dtype, device=probs.device)
    ks = list(range(1, n + 1))
    b = best_at_k_exact(probs, values, ks)
    inv = 1.0 / torch.tensor(ks, dtype=probs.dtype, device=probs.device)
    return (b * inv).sum(-1)
