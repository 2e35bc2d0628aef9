"""bestk.kappo.winrate: Prop. 4.7 / Algorithm 2 against scipy quadrature and the ODE."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.optimize import brentq

from bestk.kappo import (
    reconstruct_max_at_k,
    winrate_constant,
    winrate_G,
    winrate_log_constant,
    winrate_psi,
    winrate_T,
    winrate_table,
)

CASES = [(1, 0.1), (1, 2.0), (2, 0.01), (2, 0.1), (4, 0.1), (4, 1.0), (8, 0.05), (3, 5.0)]


def psi_quad(z, C, k, beta):
    peak = min(1.0, (beta * C) ** (1 / k))  # width of the integrand's spike at u = 0
    pts = [p for p in (peak, 10 * peak) if p < z]
    val, _ = quad(lambda u: 1 / (C + u**k / beta), 0, z, points=pts or None, limit=500,
                  epsabs=1e-14, epsrel=1e-13)
    return val


@pytest.mark.parametrize("k,beta", CASES)
def test_constant_solves_eq131(k, beta):
    C = winrate_constant(k, beta)
    assert 0 < C <= 1
    assert psi_quad(1.0, C, k, beta) == pytest.approx(1.0, abs=1e-10)
    assert float(winrate_psi(1.0, k, beta)) == pytest.approx(1.0, abs=1e-12)


def test_k1_closed_form():
    for beta in (0.05, 0.5, 3.0):
        expected = 1 / (beta * math.expm1(1 / beta))
        assert winrate_constant(1, beta) == pytest.approx(expected, rel=1e-13)
        q = np.linspace(0, 1, 11)
        np.testing.assert_allclose(winrate_T(q, 1, beta), q + beta * math.log(expected), rtol=1e-12)
    # C underflows for tiny beta, log C stays exact: -log beta - 1/beta - log(1 - e^{-1/beta})
    assert winrate_log_constant(1, 1e-3) == pytest.approx(math.log(1e3) - 1e3, rel=1e-14)


@pytest.mark.parametrize("k,beta", CASES)
def test_table_matches_independent_quadrature(k, beta):
    M = 10
    table = winrate_table(M, k, beta)
    C = winrate_constant(k, beta)
    assert table.shape == (M + 1,)
    assert table[0] == pytest.approx(beta * math.log(C), rel=1e-12, abs=1e-15)
    assert table[-1] == pytest.approx(beta * math.log(C + 1 / beta), rel=1e-12)
    for j in range(1, M):
        z = brentq(lambda z, t=j / M: psi_quad(z, C, k, beta) - t, 0, 1, xtol=1e-15, rtol=1e-14)
        assert table[j] == pytest.approx(beta * math.log(C + z**k / beta), rel=1e-8, abs=1e-11)
    assert np.all(np.diff(table) > 0)


@pytest.mark.parametrize("k,beta", [(2, 0.1), (4, 0.1), (4, 1.0), (6, 0.3)])
def test_G_solves_ode_eq129(k, beta):
    C = winrate_constant(k, beta)
    q = np.linspace(0.02, 0.98, 25)
    h = 1e-5
    G = winrate_G(q, k, beta)
    dG = (winrate_G(q + h, k, beta) - winrate_G(q - h, k, beta)) / (2 * h)
    np.testing.assert_allclose(dG, C + G**k / beta, rtol=1e-6)
    assert float(winrate_G(0.0, k, beta)) == 0.0 and float(winrate_G(1.0, k, beta)) == 1.0


@pytest.mark.parametrize("k,beta", [(1, 0.1), (2, 0.2), (4, 0.1), (8, 1.0)])
def test_normalisation_eq136(k, beta):
    # E_{U ~ Unif}[exp(T(U)/beta)] = 1: midpoint rule on 20,000 cells and Monte Carlo.
    n = 20_000
    u = (np.arange(n) + 0.5) / n
    assert np.mean(np.exp(winrate_T(u, k, beta) / beta)) == pytest.approx(1.0, abs=1e-6)
    rng = np.random.default_rng(0)
    mc = np.exp(winrate_T(rng.random(20_000), k, beta) / beta)
    assert abs(mc.mean() - 1.0) < 5 * mc.std() / math.sqrt(mc.size)


def test_tiny_beta_is_finite():
    for k in (1, 2, 4):
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            t = winrate_table(30, k, 1e-3)
        assert np.all(np.isfinite(t)) and np.all(np.diff(t) >= 0)
        assert t[-1] == pytest.approx(1e-3 * math.log(winrate_constant(k, 1e-3) + 1e3))


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 32), log_beta=st.floats(-5 * math.log(10), 3 * math.log(10)))
def test_property_wide_parameter_range(k, log_beta):
    beta = math.exp(log_beta)
    C = winrate_constant(k, beta)
    assert 0 <= C <= 1
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        t = winrate_table(16, k, beta)
    assert np.all(np.isfinite(t)) and np.all(np.diff(t) >= 0)
    lc = winrate_log_constant(k, beta)
    assert t[0] == pytest.approx(beta * lc, rel=1e-12, abs=1e-300)
    assert t[-1] == pytest.approx(beta * np.logaddexp(lc, -math.log(beta)), rel=1e-12)
    if k >= 2:
        assert psi_quad(1.0, C, k, beta) == pytest.approx(1.0, abs=1e-8)


def test_transform_is_maxatk_optimum_of_winrate_reward():
    """Prop. 4.7 vs the independent discrete max@k reconstruction (Eq. 104) on m equally likely
    win-rate levels: the optimal CDF converges to G, the density ratio to exp(T/beta)."""
    k, beta, m = 3, 0.2, 800
    levels = np.arange(1, m + 1) / m
    rec = reconstruct_max_at_k(levels, np.full(m, 1 / m), k, beta)
    G = winrate_G(np.arange(m + 1) / m, k, beta)
    assert np.abs(rec.cdf - G[1:]).max() < 1e-4
    np.testing.assert_allclose(rec.p, np.diff(G), rtol=1e-4)  # mass of each win-rate cell
    # density ratio on cell j vs exp(T/beta) at the cell midpoint
    expected = np.exp(winrate_T((np.arange(m) + 0.5) / m, k, beta) / beta)
    np.testing.assert_allclose(rec.p / rec.q, expected, rtol=1e-4)


@pytest.mark.parametrize(
    "fn,args,match",
    [
        (winrate_constant, (0, 0.1), "k must"),
        (winrate_constant, (2, 0.0), "beta"),
        (winrate_constant, (2, float("nan")), "beta"),
        (winrate_table, (0, 2, 0.1), "M must"),
        (winrate_table, (2.5, 2, 0.1), "M must"),
        (winrate_T, (1.5, 2, 0.1), "not in"),
        (winrate_G, (-0.5, 2, 0.1), "not in"),
        (winrate_psi, ([], 2, 0.1), "empty"),
    ],
)
def test_bad_input(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)
