"""bestk.kappo.binary: the pass@k closed form against the paper and a numerical optimiser."""

from __future__ import annotations

import decimal
import math
from decimal import Decimal as D

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from bestk.kappo import binary_calibration, dpo_beta_eff, solve_p_star


def eq6_residual(p, q, k, beta):
    return k * (1 - p) ** (k - 1) - beta * np.log(p * (1 - q) / (q * (1 - p)))


def test_paper_number_fig5():
    # KAPPO App. 22: g(1/30) ~ 0.553 for k = 4, beta = 0.1.
    cal = binary_calibration(1 / 30, 4, 0.1)
    assert abs(float(cal.p_star) - 0.553) < 5e-4
    assert abs(eq6_residual(cal.p_star, 1 / 30, 4, 0.1)) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("beta", [1e-3, 0.1, 2.0])
def test_root_solves_eq6(k, beta):
    q = np.array([1e-6, 0.01, 0.2, 0.5, 0.8, 0.99, 1 - 1e-6])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        cal = binary_calibration(q, k, beta)
    # p* > q; near q = 1 the gap a_k/beta in log-odds can fall below float resolution
    assert np.all(cal.p_star >= q) and np.all(cal.p_star[q < 0.9] > q[q < 0.9])
    # Eq. 6 in log-odds: k (1-p)^{k-1} = beta (t - t_q), 1 - p = 1 / (1 + e^t)
    t = cal.logit_p_star
    t_q = np.log(q) - np.log1p(-q)
    lhs = k * np.exp(-(k - 1) * np.logaddexp(0.0, t))
    rhs = beta * (t - t_q)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(cal.a_k, lhs, rtol=1e-12)
    np.testing.assert_allclose(cal.p_star, 1 / (1 + np.exp(-t)), rtol=1e-14)
    np.testing.assert_allclose(cal.beta_eff, beta / cal.a_k, rtol=1e-12)
    # beta log Z = beta log(1 - q + q e^{a/beta}) in 60-digit decimal arithmetic
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        ref = [
            float(D(beta) * (1 - D(qi) + D(qi) * (D(a) / D(beta)).exp()).ln())
            for qi, a in zip(q.tolist(), cal.a_k.tolist(), strict=True)
        ]
    np.testing.assert_allclose(cal.beta_log_z, ref, rtol=1e-12)
    assert np.all(np.isfinite(cal.beta_log_z))


def test_boundaries_eq148():
    for k in (1, 3):
        c0 = binary_calibration(0.0, k, 0.1)
        assert (float(c0.p_star), float(c0.a_k), float(c0.beta_log_z)) == (0.0, k, 0.0)
    c1 = binary_calibration(1.0, 1, 0.1)
    assert (float(c1.p_star), float(c1.a_k), float(c1.beta_log_z)) == (1.0, 1.0, 1.0)
    c4 = binary_calibration(1.0, 4, 0.1)
    assert (float(c4.p_star), float(c4.a_k), float(c4.beta_log_z)) == (1.0, 0.0, 0.0)
    assert math.isinf(float(c4.beta_eff))


def test_k1_is_plain_tilt():
    # k = 1: a_k = 1 and p* = q e^{1/beta} / (1 - q + q e^{1/beta})
    q = np.linspace(0.05, 0.95, 7)
    cal = binary_calibration(q, 1, 0.5)
    np.testing.assert_allclose(cal.a_k, 1.0)
    e = math.exp(2.0)
    np.testing.assert_allclose(cal.p_star, q * e / (1 - q + q * e), rtol=1e-12)


@pytest.mark.parametrize("k,beta", [(2, 0.3), (4, 0.1), (3, 1.0)])
def test_closed_form_matches_numerical_maximisation(k, beta):
    """Maximise 1-(1-p_pi)^k - beta KL(pi||pi_ref) over a 6-outcome categorical policy."""
    rng = np.random.default_rng(k)
    pi_ref = rng.dirichlet(np.ones(6))
    R = np.array([1, 1, 0, 0, 0, 0.0])
    q = pi_ref @ R

    def neg_obj(z):
        pi = np.exp(z - z.max())
        pi /= pi.sum()
        p = pi @ R
        return -(1 - (1 - p) ** k - beta * np.sum(pi * np.log(pi / pi_ref)))

    res = minimize(neg_obj, np.log(pi_ref), method="BFGS", options={"gtol": 1e-11})
    pi_num = np.exp(res.x - res.x.max())
    pi_num /= pi_num.sum()
    cal = binary_calibration(q, k, beta)
    tilt = pi_ref * np.exp(cal.a_k * R / beta)
    z = tilt.sum()
    pi_closed = tilt / z
    np.testing.assert_allclose(pi_num, pi_closed, atol=2e-6)
    assert abs(pi_num @ R - cal.p_star) < 2e-6
    assert abs(beta * math.log(z) - cal.beta_log_z) < 1e-12
    assert -res.fun <= -neg_obj(np.log(pi_closed)) + 1e-12  # closed form is at least as good


@settings(max_examples=60, deadline=None)
@given(
    q=st.floats(1e-9, 1 - 1e-9),
    k=st.integers(1, 16),
    beta=st.floats(1e-3, 10.0),
)
@example(q=0.999999999, k=1, beta=1.0)  # 1 - p* = 3.7e-10: the check's log-odds are ill-conditioned
def test_property_root_and_monotone(q, k, beta):
    cal = binary_calibration([q, min(q * 1.01, 1 - 1e-12)], k, beta)
    p = cal.p_star
    assert q <= p[0] <= 1
    assert p[1] >= p[0]  # p*(q) is increasing
    if p[0] < 1:
        t = math.log(p[0] / (1 - p[0]))
        tq = math.log(q / (1 - q))
        lhs = k * math.exp(-(k - 1) * math.log1p(math.exp(t)))
        # p* is a float64 near 1 at large log-odds: rounding p to the nearest double moves the
        # log-odds recomputed from it by up to eps / (p (1 - p)), which is the test's own error.
        cond = beta * 2 * np.finfo(float).eps / (p[0] * (1 - p[0]))
        assert abs(beta * (t - tq) - lhs) <= 1e-9 * max(1.0, lhs, beta * abs(t)) + cond


def test_shapes_and_scalar():
    assert binary_calibration(0.3, 2, 0.1).p_star.shape == ()
    assert binary_calibration(np.full((2, 3), 0.3), 2, 0.1).a_k.shape == (2, 3)
    assert float(solve_p_star(1 / 30, 4, 0.1)) == pytest.approx(0.5527, abs=1e-4)


def test_dpo_beta_eff_eq153():
    M, k, beta = 30, 4, 0.1
    n = np.arange(M + 1)
    got = dpo_beta_eff(n, M, k, beta)
    q = n / (M + 0.5)
    ref = np.minimum(beta / binary_calibration(q, k, beta).a_k, 2.0)
    np.testing.assert_allclose(got, ref)
    assert got[0] == pytest.approx(beta / k)
    assert np.all(np.isfinite(got)) and got.max() <= 2.0
    assert got[-1] == 2.0  # N = M hits the cap for k > 1
    assert np.all(np.diff(got) >= 0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(q=-0.1, k=2, beta=0.1), "not in"),
        (dict(q=1.5, k=2, beta=0.1), "not in"),
        (dict(q=float("nan"), k=2, beta=0.1), "not in"),
        (dict(q=[], k=2, beta=0.1), "empty"),
        (dict(q="x", k=2, beta=0.1), "q must be"),
        (dict(q=0.3, k=0, beta=0.1), "k must be"),
        (dict(q=0.3, k=1.5, beta=0.1), "k must be"),
        (dict(q=0.3, k=True, beta=0.1), "k must be"),
        (dict(q=0.3, k=2, beta=0.0), "beta"),
        (dict(q=0.3, k=2, beta=-1.0), "beta"),
        (dict(q=0.3, k=2, beta=float("inf")), "beta"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        binary_calibration(**kwargs)


def test_dpo_bad_input():
    with pytest.raises(ValueError, match="n_success"):
        dpo_beta_eff(31, 30, 2, 0.1)
    with pytest.raises(ValueError, match="M must"):
        dpo_beta_eff(0, 0, 2, 0.1)
    with pytest.raises(ValueError, match="alpha"):
        dpo_beta_eff(1, 30, 2, 0.1, alpha=-1)
