"""bestk.theory: SoftmaxGRPO prompt weights vs the actual estimator, limits, Table-1 weights."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bestk
from bestk import theory


def enumerated_weight(p: float, M: int, tau: float) -> float:
    """E[sum_i A_i d/dp log P(r_i)] over all 2^M binary groups, with A from the real
    ``softmax_grpo`` estimator: the coefficient of grad p in the expected update."""
    groups = np.array(list(itertools.product([0.0, 1.0], repeat=M)))
    adv = bestk.advantages("softmax_grpo", groups, tau=tau)  # (2^M, M)
    n1 = groups.sum(1)
    prob = p**n1 * (1 - p) ** (M - n1)
    score = groups / p - (1 - groups) / (1 - p)
    return float(np.sum(prob * np.sum(adv * score, axis=1)))


@pytest.mark.parametrize("M", [2, 3, 6])
@pytest.mark.parametrize("tau", [0.05, 0.3, 2.0])
def test_exact_weight_matches_enumerated_estimator(M, tau):
    for p in (0.07, 0.5, 0.93):
        assert float(theory.softmax_grpo_weight(p, M, tau)) == pytest.approx(
            enumerated_weight(p, M, tau), rel=1e-10
        )


def test_weight_matches_monte_carlo_of_estimator():
    """Sampled groups: the mean of sum_i A_i dlogP/dp estimates omega(p) (within 5 SE)."""
    M, tau, p = 8, 0.3, 0.2
    rng = np.random.default_rng(0)
    r = (rng.random((40_000, M)) < p).astype(float)
    adv = bestk.advantages("softmax_grpo", r, tau=tau)
    g = np.sum(adv * (r / p - (1 - r) / (1 - p)), axis=1)
    se = g.std() / math.sqrt(g.size)
    assert abs(g.mean() - float(theory.softmax_grpo_weight(p, M, tau))) < 5 * se


@pytest.mark.parametrize("M", [2, 8, 32])
def test_low_temperature_limit_is_maxrl(M):
    p = np.array([0.0, 1e-4, 0.01, 0.3, 0.9, 1.0])
    for tau in (1e-3, 1e-5):
        w = theory.softmax_grpo_weight(p, M, tau)
        assert np.all(np.isfinite(w))
        np.testing.assert_allclose(w, M * theory.maxrl_weight(p, M - 1), rtol=1e-9)


def test_large_group_limit():
    p = np.array([0.1, 0.5, 0.9, 1.0])
    for tau in (0.3, 1.0):
        lim = theory.softmax_grpo_weight_large_m(p, tau)
        for M, tol in ((500, 2e-2), (5000, 2e-3)):
            np.testing.assert_allclose(theory.softmax_grpo_weight(p, M, tau) / M, lim, rtol=tol)
        # p = 0: s = 0 surely, omega/M = d (M-1)/(M+d) with d = c-1, which tends to d
        d = math.expm1(1 / tau)
        for M in (10, 5000):
            w0 = float(theory.softmax_grpo_weight(0.0, M, tau)) / M
            assert w0 == pytest.approx(d * (M - 1) / (M + d), rel=1e-12)
        assert float(theory.softmax_grpo_weight_large_m(0.0, tau)) == pytest.approx(d)
    # closed form of the large-M shape
    c = math.exp(1 / 0.3)
    expected = (c - 1) / (1 - p + p * c)
    np.testing.assert_allclose(theory.softmax_grpo_weight_large_m(p, 0.3), expected)


def test_high_temperature_is_reinforce_shape():
    w = theory.softmax_grpo_weight(np.array([0.05, 0.5, 0.95]), 8, 1e3)
    np.testing.assert_allclose(w / w[1], 1.0, rtol=1e-3)


def test_single_sample_group_has_zero_weight():
    np.testing.assert_array_equal(theory.softmax_grpo_weight([0.1, 0.9], 1, 0.3), [0.0, 0.0])


@settings(max_examples=40, deadline=None)
@given(p=st.floats(0.0, 1.0), M=st.integers(2, 64), tau=st.floats(1e-3, 100.0))
def test_weight_bounds_property(p, M, tau):
    """omega is finite, positive and at most its tau -> 0 (MaxRL) value."""
    w = float(theory.softmax_grpo_weight(p, M, tau))
    assert math.isfinite(w) and w > 0
    assert w <= M * float(theory.maxrl_weight(p, M - 1)) * (1 + 1e-9)


def test_table1_weights():
    p = np.array([0.0, 0.25, 1.0])
    w = theory.table1_weights(p, T=3, tau=0.5)
    np.testing.assert_array_equal(w["reinforce"], [1, 1, 1])
    np.testing.assert_array_equal(w["ml"], [math.inf, 4.0, 1.0])
    np.testing.assert_allclose(w["grpo"], [math.inf, 1 / math.sqrt(0.25 * 0.75), math.inf])
    np.testing.assert_allclose(w["maxrl(T=3)"], [3.0, (1 - 0.75**3) / 0.25, 1.0])
    assert set(w) == {"reinforce", "ml", "grpo", "maxrl(T=3)", "softmax_grpo(tau=0.5)"}
    # MaxRL(T) interpolates between REINFORCE-like (T = 1) and ML (T -> infinity)
    np.testing.assert_allclose(theory.maxrl_weight(p[1:], 1), 1.0)
    np.testing.assert_allclose(theory.maxrl_weight(0.25, 2000), 4.0, rtol=1e-12)
    assert float(theory.maxrl_weight(1e-12, 50)) == pytest.approx(50.0, rel=1e-9)
    assert float(theory.maxrl_weight(5e-324, 2)) == 2.0  # subnormal p
    # the small-p series and the closed form agree where they switch (p T = 1e-6)
    for T in (2, 50, 10_000):
        p0 = 1e-6 / T
        lo, hi = theory.maxrl_weight(np.array([p0 * (1 - 1e-9), p0 * (1 + 1e-9)]), T)
        assert lo == pytest.approx(hi, rel=1e-11)


def test_tensor_in_tensor_out():
    p = torch.tensor([0.2, 0.7])
    out = theory.softmax_grpo_weight(p, 4, 0.1)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    assert isinstance(theory.grpo_weight([0.5]), np.ndarray)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: theory.softmax_grpo_weight(1.5, 4, 0.1), "probability"),
        (lambda: theory.softmax_grpo_weight(math.nan, 4, 0.1), "probability"),
        (lambda: theory.softmax_grpo_weight([], 4, 0.1), "empty"),
        (lambda: theory.softmax_grpo_weight(0.5, 0, 0.1), "M must"),
        (lambda: theory.softmax_grpo_weight(0.5, 2.5, 0.1), "M must"),
        (lambda: theory.softmax_grpo_weight(0.5, 4, 0.0), "tau"),
        (lambda: theory.softmax_grpo_weight_large_m(0.5, -1.0), "tau"),
        (lambda: theory.maxrl_weight(0.5, 0), "T must"),
        (lambda: theory.ml_weight(-0.1), "probability"),
        (lambda: theory.grpo_weight("x"), "p must"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
