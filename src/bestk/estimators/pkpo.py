"""PKPO: pass@k / max@k policy optimisation.

Walder and Karkhanis, "Pass@K Policy Optimization: Solving Harder Reinforcement Learning
Problems", 2025, arXiv:2505.15201.


For a group of ``n`` rewards sorted ascending ``g_(1) <= ... <= g_(n)``, the unbiased
estimate of ``max@k = E[max of k iid rewards]`` is

    rho_k(g) = sum_{i >= k} g_(i) C(i-1, k-1) / C(n, k),

and the per-sample value ``s_i`` sums the subset maxima over the k-subsets containing ``i``,
divided by ``C(n, k)``:

    s_(i) = [C(i-1, k-1) g_(i) + sum_{j > i} C(j-2, k-2) g_(j)] / C(n, k).

``sum_i s_i grad log pi(y_i)`` is an unbiased estimate of ``grad max@k``. The binomial ratios
come from the recursion ``W_n = k/n, W_{i-1} = W_i (i-k)/(i-1)`` for
``W_i = C(i-1,k-1)/C(n,k)``, run in log space as a segmented reverse cumulative sum, so
``n`` in the thousands neither overflows nor underflows to NaN; ``C(j-2,k-2)/C(n,k)`` is
``W_j (k-1)/(j-1)``.

Every sum is a segment-local scan over one group; leave-one-out sums are a prefix scan plus a
suffix scan that both leave the element out (nothing is subtracted from a total), and each run
of tied rewards gets the value computed at one canonical position, so tied samples get
bit-identical advantages.
"""

from __future__ import annotations

import torch

from bestk._options import int_option
from bestk.estimators._registry import register_estimator
from bestk.estimators.objectives import best_at
from bestk.groups import Groups, Rows
from bestk.metrics import maxk_weights

__all__ = ["pkpo"]

_VARIANTS = ("sloo_minus_one", "sloo", "s")


def _check_k(k, groups: Groups, variant: str) -> int:
    k = int_option("pkpo", "k", k, minimum=1)
    sizes = groups.sizes
    if variant == "s":
        too_big = k > sizes
        need = "k <= group size"
    elif variant == "sloo":
        too_big = (k > sizes - 1) & (sizes > 1)
        need = "k <= group size - 1 for variant 'sloo'"
    else:
        too_big = (k > sizes) & (sizes > 1)
        need = "k <= group size"
    if bool(too_big.any()):
        g = int(torch.nonzero(too_big)[0])
        raise ValueError(
            f"pkpo option k={k} is too large for group {groups.label(g)!r} of size "
            f"{int(sizes[g])} (needs {need})"
        )
    return k


@register_estimator(
    "pkpo",
    objective=best_at("k"),
    default_options={"k": 4},  # what `bestk compare` uses when no option gives k
    group_bounded=("k",),  # max@k of the N samples of a group: k <= N
    min_group=lambda options: 1 if options["variant"] == "s" else 2,  # sloo*: 0 for one sample
)
def pkpo(
    rewards: torch.Tensor, groups: Groups, *, k: int, variant: str = "sloo_minus_one"
) -> torch.Tensor:
    """PKPO advantages for max@k (pass@k on 0/1 rewards); GRPO scaling ``(1/N) sum A_i S_i``.

    * ``variant="s"``: ``A_i = n s_i``. Unbiased for ``grad max@k``.
    * ``variant="sloo"``: ``A_i = n (s_i - k/(n-1) rho_k(g_{-i}))``; needs ``k <= n-1``.
      Unbiased for ``grad max@k`` (the baseline does not depend on ``y_i``).
    * ``variant="sloo_minus_one"`` (default): ``A_i = n (s_i - (k/n) rho_{k-1}(g_{-i}))``;
      RLOO when ``k = 1``. Unbiased for ``grad max@k``.

    (``s_i`` and ``rho_k`` as in the module docstring.) ``k`` is required, an integer with
    ``1 <= k <= n`` for every group (``n - 1`` for ``sloo``). Groups of size 1 get ``A = 0``
    from the ``sloo`` variants. Tied rewards get bit-identical advantages.
    """
    if variant not in _VARIANTS:
        raise ValueError(f"unknown variant {variant!r} for pkpo; valid: {', '.join(_VARIANTS)}")
    k = _check_k(k, groups, variant)

    def advantage(rows: Rows) -> torch.Tensor:
        g = rows.values
        n = rows.n
        m = rows.rank
        w = maxk_weights(rows, k)
        if k >= 2:
            v = w * (k - 1) / torch.clamp(m - 1, min=1)
            s_val = w * g + rows.rcumsum(v * g, exclusive=True)
        else:
            s_val = w * g  # = g / n
        if variant == "s":
            return rows.tie_canonical(n * s_val)
        kk = k if variant == "sloo" else k - 1
        if kk == 0:  # sloo_minus_one with k = 1: RLOO
            others = rows.cumsum(g, exclusive=True) + rows.rcumsum(g, exclusive=True)
            a = n * s_val - others / _at_least_one(n - 1)
        else:
            u = maxk_weights(rows, kk, leave_one_out=True)  # u_m at rank m, group of n - 1
            u_prev = rows.prev(u)  # u_{j-1} at rank j
            rho = rows.cumsum(u * g, exclusive=True) + rows.rcumsum(u_prev * g, exclusive=True)
            coef = _div(k, _at_least_one(n - 1) if variant == "sloo" else n)
            a = n * (s_val - coef * rho)
        return rows.tie_canonical(rows.zero_singletons(a))

    # Rows whose 4 N max|r| nears the float64 range are divided by a power of two.
    return groups.sort(rewards).scatter_rows(lambda rows: rows.apply_descaled(advantage, 4.0))


def _at_least_one(x):
    return max(x, 1.0) if isinstance(x, float) else torch.clamp(x, min=1)


def _div(a: float, b):
    """``a / b`` for a number ``a``, correctly rounded also when ``b`` is a tensor (torch
    computes ``number / tensor`` as ``number * reciprocal(tensor)``, two roundings)."""
    return a / b if isinstance(b, float) else torch.full_like(b, a) / b
