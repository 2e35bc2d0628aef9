"""bestk.stats against independent computations (closed forms, brute force)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special

from bestk.stats import holm, mean_ci, paired_test, t_quantile


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
    assert same.diff == 0.0 and same.p == 1.0  # identical runs: no evidence
    shift = paired_test([0.2, 0.3, 0.4], [0.1, 0.2, 0.3])
    assert shift.diff == pytest.approx(0.1) and shift.p == 0.0
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
