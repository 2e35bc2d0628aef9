"""The @1 baselines the @k methods are measured against: GRPO, Dr.GRPO, RLOO, REINFORCE.

All use the GRPO scaling convention: the per-group gradient estimate is
``(1/N) sum_i A_i grad log pi(y_i | x)``.
"""

from __future__ import annotations

import math

import torch

from bestk.estimators._registry import register_estimator
from bestk.groups import Groups

__all__ = ["grpo", "rloo", "reinforce"]

_SCALES = ("std", "none")


@register_estimator("grpo")
def grpo(
    rewards: torch.Tensor, groups: Groups, *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO group-standardised advantages (Shao et al. 2024); Dr.GRPO with ``scale="none"``.

    * ``scale="std"``: ``A_i = (r_i - mean) / (std + eps)``, ``std`` with ``N - 1``.
      **Not** an unbiased gradient of any fixed objective: dividing by the group's own std
      couples the samples (on 0/1 rewards it approximates the prompt weight
      ``1/sqrt(p(1-p))`` of SoftmaxGRPO Table 1).
    * ``scale="none"`` (Dr.GRPO, Liu et al. 2025): ``A_i = r_i - mean``
      ``= ((N-1)/N) (r_i - mean_{j != i} r_j)``, an unbiased gradient of
      ``((N-1)/N) E[r]``.

    Groups of size 1 get ``A = 0``. ``eps`` must be a finite number ``>= 0``; a group whose
    std and ``eps`` are both 0 gets ``A = 0``.
    """
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r} for grpo; valid: {', '.join(_SCALES)}")
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"grpo option eps must be a finite number >= 0, got {eps!r}")
    dev = rewards - groups.mean(rewards)[groups.index]
    if scale == "none":
        return dev
    denom = groups.std(rewards, ddof=1)[groups.index] + eps
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, dev / safe, torch.zeros_like(dev))


@register_estimator("rloo")
def rloo(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): ``A_i = r_i - mean_{j != i} r_j``.

    Unbiased gradient of ``E[r]`` (pass@1 / best@1): the baseline does not depend on ``y_i``.
    Groups of size 1 get ``A = 0``.
    """
    n = groups.sample_sizes
    total = groups.sum(rewards)[groups.index]
    loo_mean = (total - rewards) / (n - 1).clamp_min(1).to(rewards.dtype)
    a = rewards - loo_mean
    return torch.where(n > 1, a, torch.zeros_like(a))


@register_estimator("reinforce")
def reinforce(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Plain REINFORCE: ``A_i = r_i``. Unbiased gradient of ``E[r]``, no baseline."""
    return rewards.clone()
