"""The @1 baselines the @k methods are measured against: GRPO, Dr.GRPO, RLOO, REINFORCE.

All use the GRPO scaling convention: the per-group gradient estimate is
``(1/N) sum_i A_i grad log pi(y_i | x)``. Deviations are taken about the group maximum
(:meth:`bestk.groups.Groups.center`), so a constant group gets exactly ``A = 0``, and groups
whose ``4 N max|r|`` would leave the float64 range are first divided by an exact power of two.
"""

from __future__ import annotations

import torch

from bestk._options import real_option
from bestk.estimators._registry import register_estimator
from bestk.estimators.objectives import ByOption, best_at
from bestk.groups import Groups

__all__ = ["grpo", "rloo", "reinforce"]

_SCALES = ("std", "none")


@register_estimator(
    "grpo", objective=ByOption("scale", {"std": None, "none": best_at(1, centred=True)}),
    min_group=2,  # A_i = r_i - mean: 0 for a group of one
)
def grpo(
    rewards: torch.Tensor, groups: Groups, *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO group-standardised advantages (Shao et al. 2024); Dr.GRPO with ``scale="none"``.

    * ``scale="std"``: ``A_i = (r_i - mean) / (std + eps)``, ``std`` with ``N - 1``
      (Shao et al. 2024, Eq. 3's outcome-supervision advantage).
      **Not** an unbiased gradient of any fixed objective: dividing by the group's own std
      couples the samples (on 0/1 rewards it approximates the prompt weight
      ``1/sqrt(p(1-p))`` of SoftmaxGRPO Table 1).
    * ``scale="none"`` (Dr.GRPO, Liu et al. 2025): ``A_i = r_i - mean``
      ``= ((N-1)/N) (r_i - mean_{j != i} r_j)``, an unbiased gradient of
      ``((N-1)/N) E[r]``.

    Groups of size 1 and constant groups get ``A = 0``. ``eps`` must be a finite real
    ``>= 0`` (``eps = 0`` is safe: a constant group's deviations are exactly 0). The std is
    computed on the deviations divided by the group's spread, so rewards near the float64
    limits (``[-1.7e308, 1.7e308]`` gives ``-0.707, 0.707``) or far below 1 do not overflow
    or underflow.
    """
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r} for grpo; valid: {', '.join(_SCALES)}")
    eps = real_option("grpo", "eps", eps, minimum=0.0)
    if scale == "none":
        return groups.center(rewards)[0]
    return groups.standardize(rewards, eps, ddof=1)


@register_estimator("rloo", objective=best_at(1), min_group=2)
def rloo(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): ``A_i = r_i - mean_{j != i} r_j``.

    Unbiased gradient of ``E[r]`` (pass@1 / best@1): the baseline does not depend on ``y_i``.
    Computed as ``x_i - (sum_j x_j - x_i) / (N - 1)`` with ``x = r - max`` (exact for
    constant groups). Groups of size 1 get ``A = 0``.
    """
    r, scale = groups.descaled(rewards)
    x = r - groups.broadcast(groups.max(r))
    n = groups.sample_sizes
    total = groups.broadcast(groups.sum(x))
    a = x - (total - x) / (n - 1).clamp_min(1).to(r.dtype)
    a = torch.where(n > 1, a, torch.zeros_like(a))
    return a if scale is None else a * groups.broadcast(scale)


@register_estimator("reinforce", objective=best_at(1), min_group=1)
def reinforce(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Plain REINFORCE: ``A_i = r_i``. Unbiased gradient of ``E[r]``, no baseline."""
    return rewards.clone()
