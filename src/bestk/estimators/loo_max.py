"""The leave-one-out max estimator of best@N (Tang et al. 2025; verl's ``grpo_passk``).

Tang, Zheng, Synnaeve and Munos, "Optimizing Language Models for Inference Time Objectives
using Reinforcement Learning", ICML 2025, arXiv:2503.19595 (the leave-one-out gradient of a
k-sample objective, here ``f = max`` with ``k = N``).

For a group of ``N`` rewards, ``max_i r_i`` is an unbiased estimate of ``best@N = E[max of N
iid rewards]``, and its score-function gradient with the leave-one-out control variate
``max_{j != i} r_j`` (which does not depend on sample ``i``) is

    sum_i (max_j r_j - max_{j != i} r_j) grad log pi(y_i | x),

unbiased for ``grad best@N``. The difference is non-zero only for a *unique* best sample,
which gets ``r_(1) - r_(2)`` (the best minus the second best); every other sample, and every
sample of a group whose best reward is tied, gets 0.
"""

from __future__ import annotations

import torch

from bestk._options import real_option
from bestk.estimators._registry import register_estimator
from bestk.estimators.objectives import ByOption, best_at_n
from bestk.groups import Groups

__all__ = ["loo_max"]

_SCALES = ("none", "std")


@register_estimator("loo_max", objective=ByOption("scale", {"none": best_at_n(), "std": None}),
                    min_group=2)
def loo_max(
    rewards: torch.Tensor, groups: Groups, *, scale: str = "none", eps: float = 1e-6
) -> torch.Tensor:
    """Leave-one-out max (Tang et al. 2025): ``A_i = max_j r_j - max_{j != i} r_j``.

    Only a group's unique best sample gets a non-zero advantage, ``r_(1) - r_(2)``; a tie at
    the top gives the whole group 0 (the two tied samples are each other's leave-one-out max).

    * ``scale="none"`` (default; the paper's estimator): with the GRPO scaling
      ``(1/N) sum_i A_i grad log pi`` it is an unbiased gradient of ``best@N / N`` for groups of
      ``N >= 2`` (the ``k = n`` case of the paper's leave-one-out estimator).
    * ``scale="std"``: ``A_i / (std + eps)`` with the group's reward std (``N - 1`` in the
      denominator). **Not** an unbiased gradient of any fixed objective (the std depends on
      every sample). With ``eps=1e-6`` this is verl's ``grpo_passk``
      (``compute_grpo_passk_outcome_advantage``) under ``norm_adv_by_std_in_grpo=True``;
      ``scale="none"`` is ``grpo_passk`` under ``norm_adv_by_std_in_grpo=False``.

    Groups of size 1 get ``A = 0`` (verl's ``grpo_passk`` refuses them). ``eps`` must be a
    finite real ``>= 0``. Groups whose ``4 N max|r|`` would leave the float64 range are first
    divided by an exact power of two, so the std neither overflows nor underflows.
    """
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r} for loo_max; valid: {', '.join(_SCALES)}")
    eps = real_option("loo_max", "eps", eps, minimum=0.0)
    r, pow2 = groups.descaled(rewards)
    top = groups.broadcast(groups.max(r))
    # loo_max is the group max except at a unique maximiser (the second best there); -inf for
    # a sample alone in its group, which gets 0 instead.
    others = groups.loo_max(r)
    single = groups.sample_sizes < 2
    gap = torch.where(single, torch.zeros_like(r), top - torch.where(single, top, others))
    if scale == "std":
        std = groups.broadcast(groups.std(r, ddof=1))
        eps_t = torch.as_tensor(eps, dtype=r.dtype, device=r.device)
        denom = std + (eps_t if pow2 is None else eps_t / groups.broadcast(pow2))
        # gap > 0 implies a non-constant group of N >= 2, so std > 0 wherever it is used
        return torch.where(gap > 0, gap / torch.where(gap > 0, denom, torch.ones_like(denom)),
                           torch.zeros_like(gap))
    return gap if pow2 is None else gap * groups.broadcast(pow2)
