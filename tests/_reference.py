"""Independent, deliberately naive reference implementations used by the tests.

Loops over groups, samples and subsets; exact arithmetic where it is cheap. Nothing here
imports bestk's math.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from math import comb

import numpy as np


def split_groups(rewards, group):
    """{label: (indices, values)} preserving sample order."""
    out: dict = {}
    for i, (r, g) in enumerate(zip(rewards, group, strict=True)):
        out.setdefault(g, ([], []))
        out[g][0].append(i)
        out[g][1].append(float(r))
    return out


def per_group(fn, rewards, group, **kw):
    """Apply ``fn(values) -> per-sample array`` group by group."""
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    for idx, vals in split_groups(rewards, group).values():
        out[idx] = fn(np.asarray(vals), **kw)
    return out


def argmaxrl_w_threshold(r):
    """ArgMaxRL weights from the layer-cake definition (blog): for r >= 0,
    w_i = int_0^{r_i} dtau / K_tau with K_tau = #{j : r_j > tau}. Negative rewards: shift by
    c = min(r, 0) and add c / N to every weight (a zero-mean term, see DESIGN 2.1)."""
    r = np.asarray(r, dtype=np.float64)
    c = min(r.min(), 0.0)
    x = r - c
    pts = sorted(set([0.0] + x.tolist()))
    w = np.zeros_like(x)
    for a, b in itertools.pairwise(pts):
        mid = (a + b) / 2
        above = x > mid
        K = above.sum()
        w[above] += (b - a) / K
    return w + c / len(r)


def argmaxrl_ref(r, baseline="loo"):
    r = np.asarray(r, dtype=np.float64)
    n = len(r)
    a = n * argmaxrl_w_threshold(r)
    if baseline == "none":
        return a
    if n == 1:
        return np.zeros(1)
    if baseline == "mean":
        return a - r.max()
    return np.array([a[i] - max(np.delete(r, i)) for i in range(n)])


def grpo_ref(r, scale="std", eps=1e-6):
    r = np.asarray(r, dtype=np.float64)
    if len(r) == 1:
        return np.zeros(1)
    d = r - r.mean()
    return d if scale == "none" else d / (r.std(ddof=1) + eps)


def rloo_ref(r):
    r = np.asarray(r, dtype=np.float64)
    n = len(r)
    if n == 1:
        return np.zeros(1)
    return np.array([r[i] - np.delete(r, i).mean() for i in range(n)])


def softmax_ref(r, tau=0.1):
    r = np.asarray(r, dtype=np.float64)
    e = np.exp((r - r.max()) / tau)
    return len(r) * e / e.sum() - 1


def maxk_subsets(g, k):
    """Mean over all k-subsets of the subset max (exact unbiased max@k)."""
    subs = list(itertools.combinations(range(len(g)), k))
    return sum(max(g[j] for j in s) for s in subs) / len(subs)


def pkpo_ref(g, k, variant="sloo_minus_one"):
    g = [float(x) for x in g]
    n = len(g)
    s = np.zeros(n)
    for i in range(n):
        subs = [S for S in itertools.combinations(range(n), k) if i in S]
        s[i] = sum(max(g[j] for j in S) for S in subs) / comb(n, k)
    if variant == "s":
        return n * s
    if n == 1:
        return np.zeros(1)
    if variant == "sloo":
        base = [k / (n - 1) * maxk_subsets(g[:i] + g[i + 1 :], k) for i in range(n)]
    elif k == 1:
        return np.array(rloo_ref(g))
    else:
        base = [k / n * maxk_subsets(g[:i] + g[i + 1 :], k - 1) for i in range(n)]
    return n * (s - np.array(base))


def passk_training_ref(r, k, eps=1e-6):
    """Chen et al. 2025 (arXiv:2508.10751), the analytical Pass@k Training advantage, as
    written: ``R = 1 - C(N_neg, k)/C(N, k)``, ``sigma = sqrt(R (1 - R))``,
    ``A_pos = (1 - R)/sigma``, ``A_neg = (1 - R - C(N_neg-1, k-1)/C(N-1, k-1))/sigma``, with
    the authors' ``sigma + eps`` in the denominators; exact rationals until the square root."""
    r = [float(x) for x in r]
    n = len(r)
    n_neg = sum(1 for x in r if x == 0.0)
    big_r = 1 - Fraction(comb(n_neg, k), comb(n, k))
    sigma = math.sqrt(float(big_r * (1 - big_r)))
    a_pos = float(1 - big_r) / (sigma + eps) if sigma + eps > 0 else 0.0
    if n_neg >= 1:
        num = 1 - big_r - Fraction(comb(n_neg - 1, k - 1), comb(n - 1, k - 1))
        a_neg = float(num) / (sigma + eps) if sigma + eps > 0 else 0.0
    else:
        a_neg = 0.0
    return np.array([a_pos if x == 1.0 else a_neg for x in r])


def loo_max_ref(r, scale="none", eps=1e-6):
    """Tang et al. 2025 (arXiv:2503.19595): ``A_i = max_j r_j - max_{j != i} r_j`` sample by
    sample; ``scale="std"`` divides by the sample std (``n - 1``) plus ``eps``."""
    r = [float(x) for x in r]
    n = len(r)
    if n == 1:
        return np.zeros(1)
    a = np.array([max(r) - max(r[:i] + r[i + 1:]) for i in range(n)])
    if scale == "std":
        mean = math.fsum(r) / n
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in r) / (n - 1))
        a = np.array([x / (std + eps) if x > 0 else 0.0 for x in a])
    return a


def pass_at_k_exact(n, c, k):
    if n - c < k:
        return 1.0
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


# ---------------------------------------------------------------------------- fuzz references
# Per-group float64 references fast enough for thousands of random groups of up to 1024
# samples. Each is written from the defining formula, not from bestk's algorithm, and returns
# the value together with the magnitude its rounding error scales with.


def argmaxrl_layer_cake(r, baseline="loo"):
    """ArgMaxRL advantages from the layer-cake definition, vectorised over thresholds.

    ``w_i = c/N + int_0^{x_i} dtau / K_tau`` with ``x = r - c``, ``c = min(r, 0)`` and
    ``K_tau = #{j : x_j > tau}``; between consecutive distinct values ``K`` is constant.
    Returns ``(A, mag)`` with ``mag_i = N (|r_min| + r_i - r_min) + |baseline_i|``, a bound
    on the sum of the magnitudes that enter ``A_i``.
    """
    r = np.asarray(r, dtype=np.float64)
    n = r.size
    c = min(r.min(), 0.0)
    x = r - c
    pts = np.unique(np.append(x, 0.0))  # thresholds 0 = p_0 < p_1 < ...
    lengths = np.diff(pts)
    above = n - np.searchsorted(np.sort(x), pts[:-1], side="right")  # K on (p_j, p_j+1)
    layer = np.concatenate([[0.0], np.cumsum(lengths / above)])
    w = c / n + layer[np.searchsorted(pts, x)]
    a = n * w
    rmin = r.min()
    mag = n * (abs(rmin) + (r - rmin))
    if baseline == "none":
        return a, mag
    if n == 1:
        return np.zeros(1), mag
    top = r.max()
    if baseline == "mean":
        base = np.full(n, top)
    else:
        srt = np.sort(r)
        base = np.where((r == top) & (srt[-2] < top), srt[-2], top)
    return a - base, mag + np.abs(base)


def _log_comb(a, b):
    """``log C(a, b)`` (``-inf`` where ``b < 0`` or ``b > a``), via log-gamma."""
    from scipy.special import gammaln

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = (b >= 0) & (b <= a)
    out = gammaln(a + 1) - gammaln(np.where(ok, b, 0) + 1) - gammaln(np.where(ok, a - b, 0) + 1)
    return np.where(ok, out, -np.inf)


def maxk_weight_table(n, k):
    """``C(i-1, k-1) / C(n, k)`` for ``i = 1..n`` from log-gamma (independent of recursions)."""
    i = np.arange(1, n + 1)
    return np.exp(_log_comb(i - 1, k - 1) - _log_comb(n, k))


def best_at_k_formula(g, k):
    g = np.sort(np.asarray(g, dtype=np.float64))
    return math.fsum(maxk_weight_table(g.size, k) * g)


def _suffix_excl(v):
    """``sum_{j > i} v_j`` for each ``i``."""
    c = np.cumsum(v[::-1])[::-1]
    return np.append(c[1:], 0.0)


def _prefix_excl(v):
    """``sum_{j < i} v_j`` for each ``i``."""
    return np.append(0.0, np.cumsum(v)[:-1])


def pkpo_formula(g, k, variant="sloo_minus_one"):
    """PKPO advantages from the per-sample subset-max formula with log-gamma binomials.

    ``s_(i) = [C(i-1,k-1) g_(i) + sum_{j>i} C(j-2,k-2) g_(j)] / C(n,k)`` and, for the
    baselines, ``rho_m(g_{-i}) = sum_{j != i} g_j C(rank'_j - 1, m - 1) / C(n - 1, m)`` with
    ``rank'_j`` the rank of ``j`` among the other ``n - 1`` samples (``j`` below ``i``, else
    ``j - 1``). (Use :func:`pkpo_ref`, subset enumeration, for small groups.)
    """
    g0 = np.asarray(g, dtype=np.float64)
    order = np.argsort(g0, kind="stable")
    g = g0[order]
    n = g.size
    i = np.arange(1, n + 1)
    lc = _log_comb(n, k)
    own = np.exp(_log_comb(i - 1, k - 1) - lc)
    pair = np.exp(_log_comb(i - 2, k - 2) - lc) if k >= 2 else np.zeros(n)
    s = own * g + _suffix_excl(pair * g)
    if variant == "s":
        a = n * s
    elif n == 1:
        a = np.zeros(1)
    else:
        m = k if variant == "sloo" else k - 1
        if m == 0:
            a = n * s - (_prefix_excl(g) + _suffix_excl(g)) / (n - 1)
        else:
            u = np.exp(_log_comb(i - 1, m - 1) - _log_comb(n - 1, m))  # weight of rank' = i
            u_prev = np.append(0.0, u[:-1])  # rank' = j - 1 for j above i
            rho = _prefix_excl(u * g) + _suffix_excl(u_prev * g)
            coef = k / (n - 1) if variant == "sloo" else k / n
            a = n * (s - coef * rho)
    out = np.empty(n)
    out[order] = a
    return out


def exact_center(r):
    """Deviations ``r_i - mean`` and the variance (``n - 1``), in exact rational arithmetic."""
    fr = [Fraction(float(v)) for v in r]
    n = len(fr)
    mean = sum(fr, Fraction(0)) / n
    dev = [v - mean for v in fr]
    var = sum((d * d for d in dev), Fraction(0)) / (n - 1) if n > 1 else Fraction(0)
    return dev, var


def grpo_exact(r, scale="std", eps=1e-6):
    """GRPO / Dr.GRPO from exact deviations and variance (one rounding each, then sqrt)."""
    n = len(r)
    if n == 1:
        return np.zeros(1)
    dev, var = exact_center(r)
    d = np.array([float(v) for v in dev])
    if scale == "none":
        return d
    std = math.sqrt(float(var))
    denom = std + eps
    return d / denom if denom > 0 else np.zeros(n)


def rloo_exact(r):
    n = len(r)
    if n == 1:
        return np.zeros(1)
    fr = [Fraction(float(v)) for v in r]
    tot = sum(fr, Fraction(0))
    return np.array([float(v - (tot - v) / (n - 1)) for v in fr])


def softmax_fsum(r, tau):
    r = np.asarray(r, dtype=np.float64)
    z = (r - r.max()) / tau
    e = np.exp(z)
    return r.size * e / math.fsum(e) - 1, np.abs(z).max()
