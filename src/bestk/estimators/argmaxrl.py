"""ArgMaxRL and its binary special case MaxRL.

"ArgMaxRL: Generalizing MaxRL to Continuous Rewards" (blog post, 2026), building on MaxRL
(Tajwar, Zeng, Zhou, Song, Arora, Jiang, Schneider, Salakhutdinov, Feng and Zanette, "Maximum
Likelihood Reinforcement Learning", 2026).

Sort a group descending ``r_(1) >= ... >= r_(N)`` and set ``r_(N+1) = 0``. The ArgMaxRL weight
of the sample at rank ``j`` is the reverse cumulative sum

    w_(j) = sum_{m=j}^{N} (r_(m) - r_(m+1)) / m,

and ``sum_i w_i grad log pi(y_i)`` is an unbiased estimate of ``grad J_N`` with
``J_N = sum_{k=1}^{N} (1/k) best@k`` (blog, "Joint Best@k Gradient Estimator" and its Theorem
"Continuous Gradient Estimator-Objective Equivalence": the layer-cake integral over thresholds
of the binary MaxRL estimator, unbiased by Tajwar et al.'s Theorem 2). ``sum_i w_i = r_(1)``;
tied rewards get identical weights; on 0/1 rewards ``w_i = r_i / K`` with ``K`` the number of
successes, which is MaxRL.

Computation: one ascending within-group sort ``g_(1) <= ... <= g_(N)`` (``g_(i) = r_(N-i+1)``)
and one segment-local prefix sum,

    N w at ascending rank i = sum_{i'=1}^{i} (g_(i') - g_(i'-1)) N / (N - i' + 1),   g_(0) = 0,

so each weight only sums the differences of the values at or below it (a huge reward cannot
swamp the weights of the small ones). Inside a run of tied rewards the increments are exactly
0, so tied rewards get bit-identical weights (:meth:`bestk.groups.Rows.tied_prefix_sums`).
Groups whose ``4 N max|r|`` would leave the float64 range are first divided by an exact power
of two.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from bestk.estimators._registry import register_estimator
from bestk.estimators.objectives import ByOption, joint
from bestk.groups import Groups, Rows

__all__ = ["argmaxrl", "maxrl", "argmaxrl_weights"]

_BASELINES = ("loo", "mean", "none")

#: J_N with the ``loo`` / ``none`` baselines, J_{N-1} with ``mean`` (docstring of argmaxrl).
_OBJECTIVE = ByOption("baseline", {"loo": joint(), "none": joint(), "mean": joint(lag=1)})


def _min_group(options: Mapping[str, object]) -> int:
    """A group of one gets ``A = N w = r`` without a baseline, 0 with the ``loo`` / ``mean``
    ones (the sample is its group's maximum)."""
    return 1 if options["baseline"] == "none" else 2


def _scaled_weights(rows: Rows, offset: torch.Tensor | None = None) -> torch.Tensor:
    """``N w - offset`` on a padded ascending matrix (ties canonical): the prefix sums of
    ``(g_(i) - g_(i-1)) N / (N - i + 1)``, ``g_(0) = 0``, with ``offset`` (``(R, 1)``)
    subtracted from the first term (one pass less than subtracting it afterwards)."""
    g = rows.values
    t = torch.empty_like(g)
    torch.sub(g[:, 1:], g[:, :-1], out=t[:, 1:])  # g_(i) - g_(i-1): exactly 0 between ties
    t.mul_(rows.n_over_remaining)  # * N / (N - i + 1), i = col + 1 (the first factor is 1)
    t[:, :1] = g[:, :1] if offset is None else g[:, :1] - offset
    return rows.tied_prefix_sums(t, lambda: g[:, 1:] == g[:, :-1])


def argmaxrl_weights(rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Per-sample ArgMaxRL weights ``w_i`` (unscaled; ``sum_i w_i S_i`` estimates grad J_N).

    One within-group sort and one segment-local prefix sum (see the module docstring).
    """
    return groups.sort(rewards).scatter_rows(lambda rows: _scaled_weights(rows).div_(rows.n))


def _check_baseline(baseline: str) -> None:
    if baseline not in _BASELINES:
        raise ValueError(
            f"unknown baseline {baseline!r} for argmaxrl/maxrl; valid: {', '.join(_BASELINES)}"
        )


@register_estimator("argmaxrl", objective=_OBJECTIVE, min_group=_min_group)
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

    def advantage(rows: Rows) -> torch.Tensor:
        if baseline == "none":
            return _scaled_weights(rows)  # N w_i
        top = rows.at(rows.values)  # r_(1), the group maximum
        a = _scaled_weights(rows, top)  # N w_i - r_(1)
        if baseline == "loo":  # max_{j != i} r_j is r_(1), but r_(2) at the top position
            gap = top - rows.at(rows.values, 1)
            if isinstance(rows.size, int):  # uniform: the top is the last column
                a[:, -1:] += gap
            else:
                a.scatter_add_(1, (rows.size - 1).clamp_min(0), gap)
        return rows.zero_singletons(a)

    # Rows whose 4 N max|r| nears the float64 range are divided by a power of two.
    return groups.sort(rewards).scatter_rows(
        lambda rows: rows.apply_descaled(advantage, 4.0), consume=True
    )


@register_estimator("maxrl", objective=_OBJECTIVE, reward_domain="binary",
                    min_group=_min_group)
def maxrl(rewards: torch.Tensor, groups: Groups, *, baseline: str = "loo") -> torch.Tensor:
    """MaxRL advantages: :func:`argmaxrl` restricted to binary 0/1 rewards.

    With ``K`` successes in a group of ``N``: ``w_i = r_i / K`` (0 when ``K = 0``), so
    ``baseline="none"`` gives ``A_i = N r_i / K``, unbiased for
    ``grad sum_{k=1}^{N} (1/k) pass@k``; ``baseline="mean"`` gives ``(r_i - mean)/mean``
    (``N r_i / K - 1``), unbiased for the same sum truncated at ``N - 1``; ``baseline="loo"``
    is unbiased for the full sum. Its reward domain is ``binary``: :func:`bestk.advantages`
    refuses rewards other than 0/1 (use argmaxrl for graded rewards).
    """
    return argmaxrl(rewards, groups, baseline=baseline)
