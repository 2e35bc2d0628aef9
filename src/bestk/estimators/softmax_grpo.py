"""SoftmaxGRPO: softmax group advantages.

Hernandez, Koo, Xiao, Wei and Ordonez, "SoftmaxGRPO: Learning to Reason using Softmax Advantage
Group Estimation", 2026, arXiv:2608.09271: advantages Eq. (1), binary-reward prompt weight
Eq. (4), low-temperature (MaxRL) limit Eq. (5).
"""

from __future__ import annotations

import torch

from bestk._options import real_option
from bestk.estimators._registry import register_estimator
from bestk.groups import Groups
from bestk.theory import softmax_grpo_weight

__all__ = ["softmax_grpo"]

_QUARTER_MAX = float(torch.finfo(torch.float64).max) / 4


def _prompt_weight(p: float, n: int, *, tau: float) -> float:
    """Eq. (4)'s ``omega_{N,tau}(p)`` in the ``(1/N) sum_i A_i S_i`` scaling (Eq. (4) is written
    for ``sum_i A_i S_i``, hence ``/ n``)."""
    return float(softmax_grpo_weight(p, n, tau)) / n


@register_estimator("softmax_grpo", objective=None, prompt_weight=_prompt_weight, min_group=2)
def softmax_grpo(rewards: torch.Tensor, groups: Groups, *, tau: float = 0.1) -> torch.Tensor:
    """SoftmaxGRPO advantages ``A_i = N softmax(r / tau)_i - 1`` within each group (Eq. (1)).

    Computed stably as ``N exp((r_i - max)/tau) / sum_j exp((r_j - max)/tau) - 1``; zero-sum
    per group, shift invariant, ``A = 0`` for groups of size 1 and for all-equal groups.
    ``tau`` is any finite real ``> 0`` (Python, numpy or 0-d tensor). When ``r_i - max`` could
    overflow (rewards beyond a quarter of the float64 range) it is formed as
    ``2 ((r_i/2 - max/2) / tau)``, which is the same number wherever both are finite.

    **Not** an unbiased gradient of a fixed objective for finite ``tau``: on binary rewards it
    reweights prompts by ``omega_{N,tau}(p)`` (Eq. (4), ``bestk.theory.softmax_grpo_weight``), a
    bounded interpolation between the RL weight (``tau -> inf``) and MaxRL. As ``tau -> 0``
    on 0/1 rewards it tends to ``N r_i / K - 1`` (Eq. (5)), i.e. ``argmaxrl`` with
    ``baseline="mean"``,
    which is unbiased for ``grad sum_{k=1}^{N-1} (1/k) pass@k``.
    """
    tau = real_option("softmax_grpo", "tau", tau, minimum=0.0, strict=True)
    top = groups.broadcast(groups.max(rewards))
    lo, hi = torch.aminmax(rewards)
    if max(-float(lo), float(hi)) <= _QUARTER_MAX:
        z = (rewards - top) / tau
    else:
        z = ((rewards * 0.5 - top * 0.5) / tau) * 2.0
    e = torch.exp(z)  # in [0, 1], the group maximum gives exactly 1
    denom = groups.broadcast(groups.sum(e))
    n = groups.sample_sizes.to(rewards.dtype)
    return n * e / denom - 1.0
