"""ArgMaxRL and its binary special case MaxRL (papers/argmaxrl-blog.md).

Sort a group descending ``r_(1) >= ... >= r_(N)`` and set ``r_(N+1) = 0``. The ArgMaxRL weight
of the sample at rank ``j`` is the reverse cumulative sum

    w_(j) = sum_{m=j}^{N} (r_(m) - r_(m+1)) / m,

and ``sum_i w_i grad log pi(y_i)`` is an unbiased estimate of ``grad J_N`` with
``J_N = sum_{k=1}^{N} (1/k) best@k`` (blog, "Joint Best@k Gradient Estimator": the layer-cake
integral of binary MaxRL estimators over thresholds). ``sum_i w_i = r_(1)``; tied rewards get
identical weights (the difference term between them is exactly 0); on 0/1 rewards
``w_i = r_i / K`` with ``K`` the number of successes, which is MaxRL.
"""

from __future__ import annotations

import torch

from bestk.estimators._registry import register_estimator
from bestk.groups import Groups

__all__ = ["argmaxrl", "maxrl", "argmaxrl_weights"]

_BASELINES = ("loo", "mean", "none")


def argmaxrl_weights(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Per-sample ArgMaxRL weights ``w_i`` (unscaled; ``sum_i w_i S_i`` estimates grad J_N).

    One within-group descending sort and one segmented reverse cumulative sum.
    """
    s = groups.sort(rewards, descending=True)
    r_sorted = s.gather(rewards)
    r_next = s.shift(r_sorted, 1, fill=0.0)  # r_(m+1), 0 past the group's last sample
    rank1 = (s.rank + 1).to(rewards.dtype)  # m = 1..N
    w_sorted = s.cumsum((r_sorted - r_next) / rank1, reverse=True)
    return s.scatter(w_sorted)


def _check_baseline(baseline: str) -> None:
    if baseline not in _BASELINES:
        raise ValueError(
            f"unknown baseline {baseline!r} for argmaxrl/maxrl; valid: {', '.join(_BASELINES)}"
        )


@register_estimator("argmaxrl")
def argmaxrl(rewards: torch.Tensor, groups: Groups, *, baseline: str = "loo") -> torch.Tensor:
    """ArgMaxRL advantages ``A_i`` (GRPO scaling: the gradient estimate is (1/N) sum A_i S_i).

    * ``baseline="none"``: ``A_i = N w_i``. Unbiased for ``grad J_N``,
      ``J_N = sum_{k=1}^{N} (1/k) best@k``; its variance grows with the reward offset.
    * ``baseline="mean"``: ``A_i = N w_i - r_(1)`` (zero-sum; MaxRL's practical form
      ``(r - mean)/mean`` on 0/1 rewards). **Not** unbiased for ``grad J_N``: the subtracted
      ``r_(1) = max of the group`` depends on ``y_i``; its expectation removes
      ``(1/N) grad best@N``, so it is unbiased for ``grad J_{N-1}``.
    * ``baseline="loo"`` (default): ``A_i = N w_i - max_{j != i} r_j``. Unbiased for
      ``grad J_N`` (the baseline does not depend on ``y_i``), invariant to a reward shift, and
      near-centred. It equals the ``mean`` form plus ``r_(1) - r_(2)`` on the top sample.

    Rewards may be negative: a shift ``r + c`` changes only the last difference
    ``r_(N) - 0``, so it adds ``c/N`` to every ``w_i``: the term ``(c/N) sum_i S_i`` has zero
    mean. Groups of size 1 get ``A = 0`` with the ``loo``/``mean``
    baselines.
    """
    _check_baseline(baseline)
    w = argmaxrl_weights(rewards, groups)
    n = groups.sample_sizes.to(rewards.dtype)
    a = n * w
    if baseline == "none":
        return a
    if baseline == "mean":
        a = a - groups.max(rewards)[groups.index]
    else:
        a = a - groups.loo_max(rewards)
    return torch.where(groups.sample_sizes > 1, a, torch.zeros_like(a))


@register_estimator("maxrl")
def maxrl(rewards: torch.Tensor, groups: Groups, *, baseline: str = "loo") -> torch.Tensor:
    """MaxRL advantages: :func:`argmaxrl` restricted to binary 0/1 rewards.

    With ``K`` successes in a group of ``N``: ``w_i = r_i / K`` (0 when ``K = 0``), so
    ``baseline="none"`` gives ``A_i = N r_i / K``, unbiased for
    ``grad sum_{k=1}^{N} (1/k) pass@k``; ``baseline="mean"`` gives ``(r_i - mean)/mean``
    (``N r_i / K - 1``), unbiased for the same sum truncated at ``N - 1``; ``baseline="loo"``
    is unbiased for the full sum. Rewards other than 0/1 raise ``ValueError``.
    """
    _check_baseline(baseline)
    bad = (rewards != 0) & (rewards != 1)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"maxrl needs binary 0/1 rewards; reward at index {i} is {rewards[i].item()} "
            "(use argmaxrl for graded rewards)"
        )
    return argmaxrl(rewards, groups, baseline=baseline)
