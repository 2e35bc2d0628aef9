"""Independent, deliberately naive reference implementations used by the tests.

Loops over groups, samples and subsets; exact arithmetic where it is cheap. Nothing here
imports bestk's math.
"""

from __future__ import annotations

import itertools
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


def pass_at_k_exact(n, c, k):
    if n - c < k:
        return 1.0
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))
