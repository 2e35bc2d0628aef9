"""PKPO: pass@k / max@k policy optimisation (Walder & Karkhanis 2025).

For a group of ``n`` rewards sorted ascending ``g_(1) <= ... <= g_(n)``, the unbiased
estimate of ``max@k = E[max of k iid rewards]`` is

    rho_k(g) = sum_{i >= k} g_(i) C(i-1, k-1) / C(n, k),

and the per-sample value ``s_i`` averages, over the k-subsets containing ``i``, the subset max:

    s_(i) = [C(i-1, k-1) g_(i) + sum_{j > i} C(j-2, k-2) g_(j)] / C(n, k).

``sum_i s_i grad log pi(y_i)`` is an unbiased estimate of ``grad max@k``. The binomial ratios
come from the recursion ``W_n = k/n, W_{i-1} = W_i (i-k)/(i-1)`` for
``W_i = C(i-1,k-1)/C(n,k)``, run in log space as a segmented reverse cumulative sum, so
``n`` in the thousands neither overflows nor underflows to NaN; ``C(j-2,k-2)/C(n,k)`` is
``W_j (k-1)/(j-1)``.
"""

from __future__ import annotations

import numbers

import torch

from bestk.estimators._registry import register_estimator
from bestk.groups import Groups, SortedGroups

__all__ = ["pkpo", "maxk_weights"]

_VARIANTS = ("sloo_minus_one", "sloo", "s")


def maxk_weights(s: SortedGroups, k: int, dtype: torch.dtype, *, leave_one_out: bool = False):
    """``C(i-1, k-1) / C(n', k)`` at every position of an ascending sorted layout.

    ``i`` is the 1-based rank in the group and ``n'`` the group size, or the size minus one
    when ``leave_one_out`` (weights of the group with one member removed, indexed by the rank
    in the reduced group). Zero where ``i < k`` or ``i > n'``.
    """
    m = (s.rank + 1).to(dtype)
    n = s.size.to(dtype)
    one = torch.ones_like(m)
    # log of the recursion ratio (m-k)/(m-1), used for m > k only.
    ratio = torch.where(m > k, (m - k) / torch.maximum(m - 1, one), one)
    suffix = s.cumsum(torch.log(ratio), reverse=True, exclusive=True)  # sum_{j=i+1}^{n}
    n_eff = n
    if leave_one_out:
        last = torch.where(n > k, (n - k) / torch.maximum(n - 1, one), one)
        suffix = suffix - torch.log(last)  # drop the j = n term: sum_{j=i+1}^{n-1}
        n_eff = n - 1
    valid = (m >= k) & (m <= n_eff)
    logw = torch.log(k / torch.maximum(n_eff, one)) + suffix
    return torch.where(valid, torch.exp(torch.where(valid, logw, -one)), torch.zeros_like(m))


def _check_k(k: int, groups: Groups, variant: str) -> None:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"pkpo option k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ValueError(f"pkpo option k must be >= 1, got {k}")
    sizes = groups.sizes
    if variant == "s":
        limit = sizes
        too_big = k > limit
        need = "k <= group size"
    elif variant == "sloo":
        limit = sizes - 1
        too_big = (k > limit) & (sizes > 1)
        need = "k <= group size - 1 for variant 'sloo'"
    else:
        limit = sizes
        too_big = (k > limit) & (sizes > 1)
        need = "k <= group size"
    if bool(too_big.any()):
        g = int(torch.nonzero(too_big)[0])
        raise ValueError(
            f"pkpo option k={k} is too large for group {groups.label(g)!r} of size "
            f"{int(sizes[g])} (needs {need})"
        )


@register_estimator("pkpo")
def pkpo(
    rewards: torch.Tensor, groups: Groups, *, k: int, variant: str = "sloo_minus_one"
) -> torch.Tensor:
    """PKPO advantages for max@k (pass@k on 0/1 rewards); GRPO scaling ``(1/N) sum A_i S_i``.

    * ``variant="s"``: ``A_i = n s_i``. Unbiased for ``grad max@k``.
    * ``variant="sloo"``: ``A_i = n (s_i - k/(n-1) rho_k(g_{-i}))``; needs ``k <= n-1``.
      Unbiased for ``grad max@k`` (the baseline does not depend on ``y_i``).
    * ``variant="sloo_minus_one"`` (default): ``A_i = n (s_i - (k/n) rho_{k-1}(g_{-i}))``;
      RLOO when ``k = 1``. Unbiased for ``grad max@k``.

    ``k`` is required, ``1 <= k <= n`` for every group (``n - 1`` for ``sloo``). Groups of
    size 1 get ``A = 0`` from the ``sloo`` variants. Ties need no special care: every formula
    is a function of the sorted multiset.
    """
    if variant not in _VARIANTS:
        raise ValueError(f"unknown variant {variant!r} for pkpo; valid: {', '.join(_VARIANTS)}")
    _check_k(k, groups, variant)
    k = int(k)
    dt = rewards.dtype
    s = groups.sort(rewards, descending=False)
    g = s.gather(rewards)
    n = s.size.to(dt)
    m = (s.rank + 1).to(dt)
    w = maxk_weights(s, k, dt)
    if k >= 2:
        v = w * (k - 1) / torch.clamp(m - 1, min=1)
        s_val = w * g + s.cumsum(v * g, reverse=True, exclusive=True)
    else:
        s_val = w * g  # = g / n
    if variant == "s":
        return s.scatter(n * s_val)

    kk = k if variant == "sloo" else k - 1
    if kk == 0:  # sloo_minus_one with k = 1: RLOO
        total = s.cumsum(g, reverse=True)[s.start]  # group sums, per position
        a = n * s_val - (total - g) / torch.clamp(n - 1, min=1)
    else:
        u = maxk_weights(s, kk, dt, leave_one_out=True)  # u_m at rank m, group of n - 1
        u_prev = s.shift(u, -1, fill=0.0)  # u_{j-1} at rank j
        rho = s.cumsum(u * g, exclusive=True) + s.cumsum(u_prev * g, reverse=True, exclusive=True)
        coef = k / torch.clamp(n - 1, min=1) if variant == "sloo" else k / n
        a = n * (s_val - coef * rho)
    a = torch.where(s.size > 1, a, torch.zeros_like(a))
    return s.scatter(a)
