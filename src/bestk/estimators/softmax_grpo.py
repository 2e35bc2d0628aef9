"""SoftmaxGRPO: softmax group advantages (papers/softmaxgrpo-paper.md)."""

from __future__ import annotations

import math

import torch

from bestk.estimators._registry import register_estimator
from bestk.groups import Groups

__all__ = ["softmax_grpo"]


@register_estimator("softmax_grpo")
def softmax_grpo(rewards: torch.Tensor, groups: Groups, *, tau: float = 0.1) -> torch.Tensor:
    """SoftmaxGRPO advantages ``A_i = N softmax(r / tau)_i - 1`` within each group.

    Computed stably as ``N exp((r_i - max)/tau) / sum_j exp((r_j - max)/tau) - 1``; zero-sum
    per group, shift invariant, ``A = 0`` for groups of size 1 and for all-equal groups.

    **Not** an unbiased gradient of a fixed objective for finite ``tau``: on binary rewards it
    reweights prompts by ``omega_{N,tau}(p)`` (``bestk.theory.softmax_grpo_weight``), a
    bounded interpolation between the RL weight (``tau -> inf``) and MaxRL. As ``tau -> 0``
    on 0/1 rewards it tends to ``N r_i / K - 1``, i.e. ``argmaxrl`` with ``baseline="mean"``,
    which is unbiased for ``grad sum_{k=1}^{N-1} (1/k) pass@k``.
    """
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau):
        raise ValueError(f"softmax_grpo option tau must be a finite number > 0, got {tau!r}")
    if tau <= 0:
        raise ValueError(f"softmax_grpo option tau must be > 0, got {tau!r}")
    z = (rewards - groups.max(rewards)[groups.index]) / tau
    e = torch.exp(z)  # in (0, 1], the group maximum gives exactly 1
    denom = groups.sum(e)[groups.index]
    n = groups.sample_sizes.to(rewards.dtype)
    return n * e / denom - 1.0
