"""bestk.stats against independent computations (closed forms, brute force)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special

from bestk.stats import (
    holm,
    mean_ci,
    paired_mde,
    paired_test,
    seeds_needed,
    sign_flip_min_p,
    sign_flip_p,
    t_quantile,
)


def test_t_quantile_matches_tables_and_the_normal_limit():
    # two-sided 95% quantiles from printed t tables
    for df, t in [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)]:
        assert t_quantile(df) == pytest.approx(t, abs=5e-4)
    assert t_quantile(100_000) == pytest.approx(1.95996, abs=1e-4)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)
    with pytest.raises(ValueError, match="level"):
        t_quantile(3, level=1.0)


def test_mean_ci_formula_and_single_value():
    x = np.array([0.1, 0.4, 0.35, 0.2, 0.3])
    m, h = mean_ci(x)
    assert m == pytest.approx(x.mean())
    assert h == pytest.approx(t_quantile(4) * x.std(ddof=1) / math.sqrt(5))
    m1, h1 = mean_ci([0.7])
    assert m1 == 0.7 and math.isnan(h1)  # one value: spread unknown, never 0
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])
    with pytest.raises(ValueError, match="finite"):
        mean_ci([1.0, float("nan")])


def _t_pvalue_by_beta(t: float, df: int) -> float:
    """Two-sided Student-t p-value through the regularised incomplete beta function."""
    return float(special.betainc(df / 2, 0.5, df / (df + t * t)))


def test_paired_test_against_the_textbook_formula():
    rng = np.random.default_rng(0)
    a = rng.normal(0.5, 0.1, 10)
    b = a - rng.normal(0.03, 0.05, 10)
    r = paired_test(a, b)
    d = a - b
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert r.diff == pytest.approx(d.mean())
    assert r.ci95[0] == pytest.approx(d.mean() - t_quantile(9) * se)
    assert r.ci95[1] == pytest.approx(d.mean() + t_quantile(9) * se)
    assert r.p == pytest.approx(_t_pvalue_by_beta(d.mean() / se, 9), rel=1e-9)
    assert r.n == 10 and r.ci95[0] < r.diff < r.ci95[1]
    # swapping a and b flips the sign and keeps the p-value
    s = paired_test(b, a)
    assert s.diff == pytest.approx(-r.diff) and s.p == pytest.approx(r.p)


def test_paired_test_zero_variance_cases_and_errors():
    same = paired_test([0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    assert same.diff == 0.0 and same.p == 1.0 and same.exact  # identical runs: no evidence
    # a constant nonzero difference is not p = 0: the exact sign-flip p of n agreeing signs
    shift = paired_test([0.2, 0.3, 0.4], [0.1, 0.2, 0.3])
    assert shift.diff == pytest.approx(0.1) and shift.p == pytest.approx(2 / 2**3)
    assert shift.exact and shift.ci95 == (shift.diff, shift.diff)
    eight = paired_test(np.full(8, 0.02), np.zeros(8))  # e.g. a margin added to equal runs
    assert eight.p == pytest.approx(2 / 2**8) == sign_flip_p(np.full(8, 0.02))
    assert eight.p > 0.05 / 47  # cannot pass a Holm family of 47 tests at alpha 0.05
    assert not paired_test([0.2, 0.3, 0.5], [0.1, 0.2, 0.3]).exact
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired_test([1.0], [0.0])
    with pytest.raises(ValueError, match="pairs by seed"):
        paired_test([1.0, 2.0], [0.0])


def test_paired_test_false_positive_rate_is_nominal():
    """Under a true null the two-sided test rejects at about 5% (Monte Carlo, 2000 trials)."""
    rng = np.random.default_rng(1)
    rej = sum(paired_test(rng.normal(size=8), rng.normal(size=8)).p < 0.05
              for _ in range(2000))
    assert 0.035 < rej / 2000 < 0.065


def _holm_brute_force(p: list[float]) -> list[float]:
    """Holm's adjusted p-value of H_i by its definition: the largest over sorted positions
    j <= rank(i) of (m - j + 1) p_(j), capped at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: (p[i], i))
    out = [0.0] * m
    for rank, i in enumerate(order):
        out[i] = min(1.0, max((m - j) * p[order[j]] for j in range(rank + 1)))
    return out


@pytest.mark.parametrize("p", [[0.01, 0.04, 0.03, 0.005], [0.5], [0.02, 0.02, 0.9],
                               [1e-6, 0.3, 0.049, 0.051, 0.2]])
def test_holm_matches_its_definition(p):
    assert holm(p) == pytest.approx(_holm_brute_force(p))


def test_holm_controls_the_family_wise_error_rate():
    """Closed testing check on all 0/1 patterns of 4 small p-values, and a Monte Carlo FWER."""
    for bits in itertools.product([0.001, 0.6], repeat=4):
        adj = holm(list(bits))
        assert all(a >= b for a, b in zip(adj, bits, strict=True))
    rng = np.random.default_rng(2)
    fw = sum(min(holm(rng.uniform(size=10).tolist())) < 0.05 for _ in range(2000))
    assert fw / 2000 < 0.065
    assert holm([]) == []
    with pytest.raises(ValueError, match="p-values"):
        holm([0.2, 1.5])


def _sign_flip_brute_force(d: np.ndarray) -> float:
    """Two-sided sign-flip p by enumerating every sign pattern with itertools."""
    t = abs(float(np.sum(d)))
    hits = sum(abs(float(np.dot(s, d))) >= t - 1e-12
               for s in itertools.product([-1.0, 1.0], repeat=d.size))
    return hits / 2**d.size


@pytest.mark.parametrize("seed", range(6))
def test_sign_flip_p_matches_brute_force_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = [3, 5, 8, 10, 12, 13][seed]
    d = rng.normal(0.4 * (seed % 3), 1.0, n)
    assert sign_flip_p(d) == pytest.approx(_sign_flip_brute_force(d), abs=1e-15)
    # two-sample form, sign symmetry, ties (integer differences with repeats)
    b = rng.normal(size=n)
    assert sign_flip_p(d + b, b) == pytest.approx(sign_flip_p(d), abs=1e-15)
    assert sign_flip_p(-d) == sign_flip_p(d)
    ties = rng.integers(-2, 4, n).astype(float)
    assert sign_flip_p(ties) == pytest.approx(_sign_flip_brute_force(ties), abs=1e-15)


def test_sign_flip_p_extremes_monte_carlo_and_errors():
    for n in (1, 2, 8, 10, 20):
        assert sign_flip_p(np.full(n, 0.3)) == pytest.approx(sign_flip_min_p(n)) == \
            pytest.approx(min(1.0, 2.0 ** (1 - n)))
    assert sign_flip_p(np.zeros(5)) == 1.0
    assert sign_flip_p([1.0, -1.0, 2.0, -2.0]) == 1.0  # sum 0: every pattern reaches it
    # Monte Carlo (forced) agrees with the exact count within 4 binomial standard errors
    d = np.random.default_rng(7).normal(0.5, 1.0, 14)
    exact = sign_flip_p(d)
    mc = sign_flip_p(d, exact_max_n=0, draws=40_000, seed=3)
    assert abs(mc - exact) < 4 * math.sqrt(exact * (1 - exact) / 40_000) + 1e-4
    assert mc == sign_flip_p(d, exact_max_n=0, draws=40_000, seed=3)  # seeded
    assert 0 < sign_flip_p(np.full(40, 1.0), draws=1000) == pytest.approx(1 / 1001)
    with pytest.raises(ValueError, match="pairs by seed"):
        sign_flip_p([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        sign_flip_p([1.0, float("inf")])
    with pytest.raises(ValueError, match="draws"):
        sign_flip_p([1.0, 2.0], draws=0)
    with pytest.raises(ValueError, match="positive number of pairs"):
        sign_flip_min_p(0)


def test_sign_flip_false_positive_rate_is_at_most_nominal():
    rng = np.random.default_rng(11)
    rej = sum(sign_flip_p(rng.normal(size=9)) < 0.05 for _ in range(1500))
    assert rej / 1500 < 0.065


@pytest.mark.parametrize(("n", "alpha"), [(8, 0.05), (10, 0.01), (5, 0.05)])
def test_paired_mde_has_the_stated_power_by_simulation(n, alpha):
    """At delta = mde the two-sided paired t-test rejects in 80% of simulated experiments."""
    sd = 0.07
    mde = paired_mde(sd, n, alpha)
    rng = np.random.default_rng(n)
    d = rng.normal(mde, sd, (40_000, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    power = float(np.mean(np.abs(t) > t_quantile(n - 1, 1 - alpha)))
    assert power == pytest.approx(0.8, abs=0.012)
    # below it the power is lower, and more seeds or a larger alpha shrink the MDE
    assert paired_mde(sd, n + 4, alpha) < mde < paired_mde(sd, n, alpha / 10)
    assert paired_mde(2 * sd, n, alpha) == pytest.approx(2 * mde)


def test_paired_mde_normal_limit_and_seeds_needed():
    from scipy import stats

    alpha = 0.05 / 47
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(0.8)
    assert paired_mde(0.3, 20_000, alpha) == pytest.approx(z * 0.3 / math.sqrt(20_000), rel=1e-3)
    n = seeds_needed(0.05, 0.023, alpha)
    assert paired_mde(0.05, n, alpha) <= 0.023 < paired_mde(0.05, n - 1, alpha)
    assert seeds_needed(0.001, 1.0, alpha) == 2
    with pytest.raises(ValueError, match="positive finite SD"):
        paired_mde(0.0, 8, 0.05)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired_mde(1.0, 1, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        paired_mde(1.0, 8, 0.0)
    with pytest.raises(ValueError, match="positive finite effect"):
        seeds_needed(1.0, 0.0, 0.05)


def test_bimodality_coefficient_matches_scipys_moments():
    from scipy import stats as sps

    from bestk.stats import BIMODAL_ABOVE, bimodality_coefficient

    rng = np.random.default_rng(3)
    for x in (rng.normal(size=12), rng.exponential(size=40), [0, 0, 1, 1, 1, 5.0]):
        x = np.asarray(x, dtype=float)
        n = x.size
        g, k = sps.skew(x, bias=False), sps.kurtosis(x, bias=False)
        want = (g**2 + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))
        assert bimodality_coefficient(x) == pytest.approx(want, rel=1e-12)
    two = np.r_[rng.normal(0, 0.05, 20), rng.normal(1, 0.05, 20)]
    assert bimodality_coefficient(two) > BIMODAL_ABOVE > bimodality_coefficient(
        rng.normal(size=400))
    assert bimodality_coefficient([2.0] * 5) is None
    with pytest.raises(ValueError, match=">= 4 values"):
        bimodality_coefficient([1.0, 2.0, 3.0])
