"""bestk.kappo reconstruction (Eq. 104) and finite-bank error (Eq. 151)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from bestk.kappo import (
    binary_calibration,
    binomial_weights,
    dpo_beta_eff,
    finite_bank_error,
    reconstruct_from_bank,
    reconstruct_max_at_k,
    winrate_constant,
    winrate_T,
)

# -- discrete reconstruction ---------------------------------------------------------------


def max_at_k_objective(p, r, q, k, beta):
    P = np.cumsum(p)
    P_prev = np.concatenate([[0.0], P[:-1]])
    return np.sum(r * (P**k - P_prev**k)) - beta * np.sum(p * np.log(p / q))


@pytest.mark.parametrize("k,beta", [(1, 0.3), (2, 0.2), (4, 0.1), (3, 1.0)])
def test_reconstruction_matches_numerical_maximisation(k, beta):
    """E[max of k] - beta KL over distributions on 5 reward levels, maximised by BFGS."""
    r = np.array([0.0, 0.2, 0.5, 0.7, 1.0])
    q = np.array([0.4, 0.25, 0.15, 0.15, 0.05])

    def neg(z):
        p = np.exp(z - z.max())
        p /= p.sum()
        return -max_at_k_objective(p, r, q, k, beta)

    res = minimize(neg, np.log(q), method="BFGS", options={"gtol": 1e-12})
    p_num = np.exp(res.x - res.x.max())
    p_num /= p_num.sum()
    rec = reconstruct_max_at_k(r, q, k, beta)
    np.testing.assert_allclose(rec.p, p_num, atol=1e-6)
    assert rec.p.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(np.log(rec.p / q), rec.log_c + rec.H / beta, atol=1e-10)


def test_two_levels_is_binary_pass_at_k():
    for k, beta, q in [(4, 0.1, 1 / 30), (2, 0.5, 0.6), (8, 0.05, 0.2)]:
        rec = reconstruct_max_at_k([0.0, 1.0], [1 - q, q], k, beta)
        cal = binary_calibration(q, k, beta)
        assert rec.p[1] == pytest.approx(float(cal.p_star), rel=1e-9)
        assert rec.H[1] == pytest.approx(float(cal.a_k), rel=1e-9)
        assert -beta * rec.log_c == pytest.approx(float(cal.beta_log_z), rel=1e-9)


def test_k1_is_exponential_tilt():
    r = np.array([-1.0, 0.0, 2.0])
    q = np.array([0.5, 0.3, 0.2])
    rec = reconstruct_max_at_k(r, q, 1, 0.7)
    tilt = q * np.exp((r - r[0]) / 0.7)
    np.testing.assert_allclose(rec.p, tilt / tilt.sum(), rtol=1e-10)


def test_score_interpolation_eq109():
    rec = reconstruct_max_at_k([0.0, 1.0, 3.0], [0.5, 0.3, 0.2], 3, 0.5)
    np.testing.assert_allclose(rec.score(rec.levels), rec.H)
    mid = rec.score(2.0)
    assert mid == pytest.approx(rec.H[1] + 3 * 1.0 * rec.cdf[1] ** 2)
    assert rec.score(-5.0) == 0.0
    assert rec.score(10.0) == pytest.approx(rec.H[2] + 3 * 7.0 * rec.cdf[2] ** 2)


def test_tiny_beta_does_not_overflow():
    rec = reconstruct_max_at_k([0.0, 0.5, 1.0], [0.6, 0.3, 0.1], 3, 1e-3)
    assert np.all(np.isfinite(rec.p)) and rec.p.sum() == pytest.approx(1.0)
    assert rec.p[-1] > 0.9  # almost all mass moves to the top level


def test_from_bank_uses_empirical_masses():
    bank = [0.1, 0.5, 0.5, 0.9, 0.1, 0.5]
    rec = reconstruct_from_bank(bank, 2, 0.3)
    np.testing.assert_allclose(rec.levels, [0.1, 0.5, 0.9])
    np.testing.assert_allclose(rec.q, [2 / 6, 3 / 6, 1 / 6])


@pytest.mark.parametrize(
    "levels,q,match",
    [
        ([], [], "empty"),
        ([0, 1], [1.0], "different lengths"),
        ([1, 0], [0.5, 0.5], "strictly increasing"),
        ([0, 1], [0.0, 1.0], "> 0"),
        ([0, 1], [0.3, 0.3], "sum to 1"),
        ([0, np.nan], [0.5, 0.5], "finite"),
    ],
)
def test_reconstruction_bad_input(levels, q, match):
    with pytest.raises(ValueError, match=match):
        reconstruct_max_at_k(levels, q, 2, 0.1)


# -- finite-bank error ---------------------------------------------------------------------


def test_paper_numbers():
    # App. 22: Pr(q_hat = 1) = 0.99^30 ~ 0.740; Pr(q_hat = 0) = 0.9^30 ~ 0.042
    assert binomial_weights(0.99, 30)[-1] == pytest.approx(0.740, abs=5e-4)
    assert binomial_weights(0.1, 30)[0] == pytest.approx(0.042, abs=5e-4)
    # App. 22 "Implications": k = 4, p_ref = 0.1: bias of p_hat* is about -0.028
    err = finite_bank_error(0.1, 30, 4, 0.1, "p_star")
    assert float(err.bias) == pytest.approx(-0.028, abs=5e-4)


def test_binomial_weights_exact():
    M = 7
    w = binomial_weights([0.0, 0.3, 1.0], M)
    ref = [math.comb(M, j) * 0.3**j * 0.7 ** (M - j) for j in range(M + 1)]
    np.testing.assert_allclose(w[1], ref, rtol=1e-12)
    assert w[0, 0] == 1.0 and w[2, -1] == 1.0
    np.testing.assert_allclose(w.sum(-1), 1.0)


@pytest.mark.parametrize("quantity", ["p_star", "a_k", "beta_log_z", "beta_eff", "winrate"])
def test_against_monte_carlo_banks(quantity):
    # q = 0.5: Pr(N = 0) ~ 1e-9, so the a_k = k outlier cannot dominate the sample variance
    M, k, beta, q = 30, 4, 0.1, 0.5
    err = finite_bank_error(q, M, k, beta, quantity)
    rng = np.random.default_rng(1)
    n = rng.binomial(M, q, size=200_000)
    if quantity == "winrate":
        est = winrate_T(np.arange(M + 1) / M, k, beta)[n]
    elif quantity == "beta_eff":
        est = dpo_beta_eff(n, M, k, beta)
    else:
        est = getattr(binary_calibration(n / M, k, beta), quantity)
    se = est.std() / math.sqrt(est.size)
    assert abs(est.mean() - float(err.mean)) < 5 * se
    assert est.std() == pytest.approx(float(err.noise), rel=0.02)


def test_delta_method_large_bank_eq154():
    # sigma ~ |theta'| sqrt(q(1-q)/M) and b ~ q(1-q) theta'' / (2M) for large M
    M, k, beta, q, h = 4000, 4, 0.1, 0.3, 1e-4

    def a(x):
        return binary_calibration(x, k, beta).a_k

    d1 = (a(q + h) - a(q - h)) / (2 * h)
    d2 = (a(q + h) - 2 * a(q) + a(q - h)) / h**2
    err = finite_bank_error(q, M, k, beta, "a_k")
    assert float(err.noise) == pytest.approx(abs(d1) * math.sqrt(q * (1 - q) / M), rel=0.02)
    assert float(err.bias) == pytest.approx(q * (1 - q) * d2 / (2 * M), rel=0.05)


def test_winrate_bounds_lemma_k3():
    M, k, beta = 30, 4, 0.1
    q = np.linspace(0, 1, 21)
    err = finite_bank_error(q, M, k, beta, "winrate")
    assert np.all(err.noise <= k * np.sqrt(q * (1 - q) / M) + 1e-12)
    C = winrate_constant(k, beta)
    bound = k * (k - 1) * (C + 1 / beta) * q * (1 - q) / (2 * M)
    assert np.all(err.bias >= -1e-12) and np.all(err.bias <= bound + 1e-12)  # convex T


def test_relative_error_undefined_is_nan():
    err = finite_bank_error([0.0, 1.0], 30, 4, 0.1, "a_k")
    assert float(err.relative_noise[0]) == 0.0
    assert math.isnan(float(err.relative_noise[1]))  # a_k(1) = 0 for k > 1


def test_bank_error_bad_input():
    with pytest.raises(ValueError, match="unknown quantity"):
        finite_bank_error(0.3, 30, 4, 0.1, "nope")
    with pytest.raises(ValueError, match="M must"):
        finite_bank_error(0.3, 0, 4, 0.1)
    with pytest.raises(ValueError, match="not in"):
        finite_bank_error(1.3, 30, 4, 0.1)
