"""The statistics every bestk comparison uses: Student-t intervals, the paired t-test, the
sign-flip permutation test, Holm, and the power of the paired t-test.

One convention everywhere (the lab tables, ``bestk compare`` and ``docs/results/claims.json``):

* :func:`mean_ci` — mean and half-width ``t_{0.975, n-1} s / sqrt(n)`` of the two-sided 95%
  Student-t interval over ``n`` values (``s`` the sample standard deviation, ``ddof=1``). With a
  single value the half-width is ``nan`` (unknown, never 0): one seed says nothing about the
  spread between seeds.
* :func:`paired_test` — the two-sided paired t-test of ``a - b`` over seeds (pairs share the
  seed: same initial weights, prompts / minibatches), its mean difference, 95% interval and
  p-value (``scipy.stats``). When every difference is the same number ``c`` the t statistic
  is undefined (standard error 0) and the test is answered exactly instead: ``c = 0`` gives
  ``p = 1`` (identical runs carry no evidence); ``c != 0`` gives the exact two-sided sign-flip
  p-value ``2 / 2^n`` (of the ``2^n`` sign patterns only "all +" and "all -" reach ``|n c|``),
  never 0, so a constant difference over 8 seeds has ``p = 0.0078`` like any other difference
  whose signs all agree. The interval then has zero width and ``exact`` is true.
* :func:`sign_flip_p` — the two-sided paired permutation test of the mean difference: under
  the null each difference is symmetric about 0, so ``p = #{s in {-1, +1}^n : |sum s_i d_i| >=
  |sum d_i|} / 2^n``, enumerated exactly (meet in the middle) up to :data:`EXACT_MAX_N`
  pairs, else a seeded Monte Carlo estimate over :data:`MC_DRAWS` sign patterns. It needs no
  normality; its smallest possible value is ``2 / 2^n``.
* :func:`paired_mde` / :func:`seeds_needed` — the minimum detectable effect of the two-sided
  paired t-test (noncentral t) and the number of pairs it needs for a given effect.
* :func:`holm` — Holm's step-down adjustment of a family of p-values (controls the
  family-wise error rate at any dependence between the tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bestk._optional import require

__all__ = ["t_quantile", "mean_ci", "PairedTest", "paired_test", "holm", "sign_flip_p",
           "sign_flip_min_p", "paired_mde", "seeds_needed", "bimodality_coefficient",
           "BIMODAL_ABOVE", "EXACT_MAX_N", "MC_DRAWS"]

#: Up to this many pairs :func:`sign_flip_p` enumerates every sign pattern exactly.
EXACT_MAX_N = 32
#: Sign patterns drawn by :func:`sign_flip_p` above :data:`EXACT_MAX_N` pairs.
MC_DRAWS = 200_000


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided ``level`` Student-t quantile ``t_{(1+level)/2, df}`` (``scipy.stats.t.ppf``)."""
    stats = require("scipy.stats", extra="lab")

    if int(df) != df or df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(stats.t.ppf(0.5 + level / 2, int(df)))


def _values(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name} needs at least one value")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: values must be finite, got {a.tolist()}")
    return a


def mean_ci(x: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t interval over the values ``x``
    (half-width ``nan`` for a single value)."""
    a = _values(x, "mean_ci")
    m = float(a.mean())
    if a.size == 1:
        return m, float("nan")
    return m, t_quantile(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison ``a - b`` over seeds.

    ``diff`` is the mean of the per-seed differences, ``ci95`` its two-sided 95% t-interval
    ``(lo, hi)``, ``p`` the two-sided paired t-test p-value, ``n`` the number of pairs.
    ``exact`` is true when every difference was the same number: the t statistic is then
    undefined and ``p`` is the exact sign-flip p-value (module docstring).
    """

    diff: float
    ci95: tuple[float, float]
    p: float
    n: int
    exact: bool = False


def paired_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> PairedTest:
    """Two-sided paired t-test of ``a - b`` (``a[i]`` and ``b[i]`` share seed ``i``).

    Needs at least two pairs. Returns the mean difference, its 95% t-interval and the p-value
    (module docstring for the zero-variance case).
    """
    stats = require("scipy.stats", extra="lab")

    x, y = _values(a, "paired_test a"), _values(b, "paired_test b")
    if x.size != y.size:
        raise ValueError(f"paired_test: {x.size} values of a but {y.size} of b (pairs by seed)")
    if x.size < 2:
        raise ValueError(f"paired_test needs at least 2 pairs, got {x.size}")
    d = x - y
    m = float(d.mean())
    sd = float(d.std(ddof=1))
    if _constant(d):
        p0 = 1.0 if m == 0.0 else sign_flip_min_p(d.size)
        return PairedTest(m, (m, m), p0, int(d.size), exact=True)
    half = t_quantile(d.size - 1) * sd / math.sqrt(d.size)
    p = float(stats.ttest_rel(x, y).pvalue)
    return PairedTest(m, (m - half, m + half), p, int(d.size))


def holm(pvalues: Sequence[float] | np.ndarray) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Sort ``p_(1) <= ... <= p_(m)``; ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``. A test
    is significant at family-wise level ``alpha`` when its adjusted p-value is ``< alpha``.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    if p.size == 0:
        return []
    if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError(f"holm: p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adj
    return out.tolist()


def _constant(d: np.ndarray) -> bool:
    """Whether the differences ``d`` are one number up to float round-off (sample SD below
    ``1e-15 max(1, |mean|)``)."""
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    return sd <= 1e-15 * max(1.0, abs(float(d.mean())))


def sign_flip_min_p(n: int) -> float:
    """The smallest two-sided p-value the sign-flip test can give with ``n`` pairs:
    ``2 / 2^n`` (all signs agree), 1 for a single pair."""
    if int(n) != n or n < 1:
        raise ValueError(f"sign_flip_min_p needs a positive number of pairs, got {n}")
    return min(1.0, 2.0 ** (1 - int(n)))


def _sign_sums(d: np.ndarray) -> np.ndarray:
    """``sum_i s_i d_i`` for all ``2^len(d)`` sign patterns ``s`` (unordered), built one
    difference at a time: ``S_{i+1} = (S_i - d_i) u (S_i + d_i)``."""
    sums = np.zeros(1)
    for v in d:
        sums = np.concatenate([sums - v, sums + v])
    return sums


def sign_flip_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None = None,
                *, exact_max_n: int = EXACT_MAX_N, draws: int = MC_DRAWS,
                seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation p-value of the mean of ``d = a - b`` (``d = a``
    when ``b`` is None).

    Under the null hypothesis each ``d_i`` is symmetric about 0, so every sign pattern
    ``s in {-1, +1}^n`` is equally likely and

        p = #{s : |sum_i s_i d_i| >= |sum_i d_i|} / 2^n,

    counted exactly for ``n <= exact_max_n``: the sums over the first ``h = n // 2`` and the
    last ``n - h`` differences are enumerated separately (``2^h + 2^(n-h)`` values) and the
    pairs reaching ``|T|`` are counted with a sorted search. Ties count as reaching (``>=``
    within ``1e-10 sum |d_i|`` of float round-off). Above ``exact_max_n`` the p-value is the
    Monte Carlo estimate ``(1 + #hits) / (1 + draws)`` over ``draws`` sign patterns drawn
    with ``numpy.random.default_rng(seed)`` (never 0, deterministic for a given seed).
    All differences 0 give ``p = 1``; the smallest value is ``2 / 2^n``
    (:func:`sign_flip_min_p`).
    """
    x = _values(a, "sign_flip_p a")
    if b is not None:
        y = _values(b, "sign_flip_p b")
        if x.size != y.size:
            raise ValueError(f"sign_flip_p: {x.size} values of a but {y.size} of b "
                             "(pairs by seed)")
        x = x - y
    if int(draws) != draws or draws < 1:
        raise ValueError(f"sign_flip_p: draws must be a positive integer, got {draws}")
    n = x.size
    scale = float(np.abs(x).sum())
    if scale == 0.0:
        return 1.0
    target = abs(float(x.sum())) - 1e-10 * scale
    if n <= exact_max_n:
        h = n // 2
        left = _sign_sums(x[:h]) if h else np.zeros(1)
        right = np.sort(_sign_sums(x[h:]))
        # |l + r| >= target  <=>  r >= target - l  or  r <= -target - l
        hi = right.size - np.searchsorted(right, target - left, side="left")
        lo = np.searchsorted(right, -target - left, side="right")
        hits = int(np.sum(hi + lo))
        if target <= 0:  # T = 0 within round-off: every pattern reaches it
            hits = 2**n
        return min(1.0, hits / 2.0**n)
    rng = np.random.default_rng(seed)
    hits, left_to_draw = 0, int(draws)
    while left_to_draw:
        m = min(left_to_draw, 20_000)
        s = rng.integers(0, 2, size=(m, n), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
        hits += int(np.sum(np.abs(s @ x) >= target))
        left_to_draw -= m
    return (1 + hits) / (1 + int(draws))


def _power(nc: float, df: int, t_crit: float) -> float:
    """``P(T > t_c) + P(T < -t_c)`` for ``T ~ t'(df, nc)``; the lower tail as ``P(T' > t_c)``
    with ``T' ~ t'(df, -nc)`` (symmetry), where scipy's ``nct.cdf`` can return nan."""
    stats = require("scipy.stats", extra="lab")
    pw = float(stats.nct.sf(t_crit, df, nc) + stats.nct.sf(t_crit, df, -nc))
    if not math.isfinite(pw):
        raise ValueError(f"power of the paired t-test not finite at df={df}, nc={nc}")
    return pw


def paired_mde(sd: float, n: int, alpha: float, power: float = 0.8) -> float:
    """Minimum detectable effect of the two-sided paired t-test: the mean difference ``delta``
    that ``n`` pairs with difference SD ``sd`` detect with probability ``power`` at level
    ``alpha``.

    With ``t_c = t_{1-alpha/2, n-1}`` and the noncentral t statistic ``T ~ t'(n-1, lambda)``,
    ``lambda = delta sqrt(n) / sd``, the power is ``P(T > t_c) + P(T < -t_c)``; ``delta`` solves
    power = ``power`` (``scipy.stats.nct``, Brent's method). For large ``n`` it approaches the
    normal approximation ``(z_{1-alpha/2} + z_power) sd / sqrt(n)``.
    """
    opt = require("scipy.optimize", extra="lab")

    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"paired_mde needs a positive finite SD of the differences, got {sd} "
                         "(a zero SD has no t-test: use the sign-flip test)")
    if int(n) != n or n < 2:
        raise ValueError(f"paired_mde needs at least 2 pairs, got {n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not alpha < power < 1:
        raise ValueError(f"power must lie in (alpha, 1), got {power}")
    df = int(n) - 1
    t_crit = t_quantile(df, 1.0 - alpha)
    hi = 1.0
    while _power(hi, df, t_crit) < power:
        hi *= 2.0
        if hi > 1e9:
            raise ValueError(f"paired_mde: no effect reaches power {power} with n = {n}")
    nc = float(opt.brentq(lambda lam: _power(lam, df, t_crit) - power, 0.0, hi, xtol=1e-10))
    return nc * float(sd) / math.sqrt(int(n))


def seeds_needed(sd: float, effect: float, alpha: float, power: float = 0.8,
                 max_n: int = 10_000_000) -> int:
    """The smallest number of pairs ``n >= 2`` with ``paired_mde(sd, n, alpha, power) <=
    effect`` (the MDE decreases in ``n``; bisection). Raises when even ``max_n`` is not
    enough."""
    if not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"seeds_needed needs a positive finite effect, got {effect}")
    stats = require("scipy.stats", extra="lab")

    if paired_mde(sd, 2, alpha, power) <= effect:
        return 2
    # the t-test needs at least the pairs of the normal approximation (its MDE is larger)
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    lo = max(2, math.ceil((z * sd / effect) ** 2) - 1)
    if paired_mde(sd, lo, alpha, power) <= effect:
        lo = 2
    step = max(2, lo // 8)
    hi = lo + step
    while paired_mde(sd, hi, alpha, power) > effect:
        lo, step = hi, 2 * step
        hi = lo + step
        if hi > max_n:
            raise ValueError(f"seeds_needed: more than {max_n} pairs for effect {effect} at "
                             f"SD {sd}")
    while hi - lo > 1:  # mde(lo) > effect >= mde(hi)
        mid = (lo + hi) // 2
        if paired_mde(sd, mid, alpha, power) <= effect:
            hi = mid
        else:
            lo = mid
    return hi


#: Sarle's threshold: the bimodality coefficient of a uniform distribution, 5/9.
BIMODAL_ABOVE = 5.0 / 9.0


def bimodality_coefficient(x: Sequence[float] | np.ndarray) -> float | None:
    """Sarle's bimodality coefficient of the values ``x`` (n >= 4):

        BC = (g^2 + 1) / (K + 3 (n - 1)^2 / ((n - 2)(n - 3))),

    with ``g`` the bias-corrected sample skewness and ``K`` the bias-corrected sample excess
    kurtosis (SAS / Pfister et al. 2013, "Good things peak in pairs", Front. Psychol. 4:700).
    ``BC`` lies in (0, 1]; a uniform distribution gives 5/9 (:data:`BIMODAL_ABOVE`), a normal
    one about 1/3, two well-separated clusters close to 1. ``None`` when the values do not
    vary (no shape to measure)."""
    a = _values(x, "bimodality_coefficient")
    n = a.size
    if n < 4:
        raise ValueError(f"bimodality_coefficient needs >= 4 values, got {n}")
    d = a - a.mean()
    m2 = float(np.mean(d**2))
    if m2 == 0.0:
        return None
    g1 = float(np.mean(d**3)) / m2**1.5
    k1 = float(np.mean(d**4)) / m2**2 - 3.0
    g = g1 * math.sqrt(n * (n - 1)) / (n - 2)
    k = ((n + 1) * k1 + 6.0) * (n - 1) / ((n - 2) * (n - 3))
    return (g * g + 1.0) / (k + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))
