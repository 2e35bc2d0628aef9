import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bestk
from bestk.metrics import gradient_allocation, resolve_ks
from tests._reference import maxk_subsets, pass_at_k_exact


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_matches_exact_binomials(nck):
    n, c, k = nck
    assert bestk.pass_at_k(n, c, k) == pytest.approx(pass_at_k_exact(n, c, k), abs=1e-12)


def test_pass_at_k_vectorised_large_and_scalar():
    n = np.array([1024, 1024, 5, 10**6])
    c = np.array([1, 1000, 0, 3])
    k = np.array([1, 64, 5, 1000])
    got = bestk.pass_at_k(n, c, k)
    assert got.shape == (4,)
    want = [pass_at_k_exact(int(a), int(b), int(d)) for a, b, d in zip(n, c, k, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert isinstance(bestk.pass_at_k(4, 2, 2), float)
    assert bestk.pass_at_k(16, np.arange(17)[:, None], np.array([1, 2])[None]).shape == (17, 2)


def test_pass_at_k_is_unbiased_by_enumeration():
    """E over Bin(n, p) of pass@k estimate == 1 - (1-p)^k."""
    from math import comb

    n, p = 8, 0.3
    for k in (1, 3, 8):
        e = sum(
            comb(n, c) * p**c * (1 - p) ** (n - c) * bestk.pass_at_k(n, c, k) for c in range(n + 1)
        )
        assert e == pytest.approx(1 - (1 - p) ** k, abs=1e-12)


@pytest.mark.parametrize(
    "args, msg",
    [
        ((0, 0, 1), "n must be >= 1"),
        ((5, 6, 1), "0 <= c <= n"),
        ((5, 1, 6), "1 <= k <= n"),
        ((5, 1.5, 1), "integers"),
        (([1, 2], [0, 0, 0], 1), "broadcast"),
        (([], [], 1), "empty"),
    ],
)
def test_pass_at_k_bad_input(args, msg):
    with pytest.raises(ValueError, match=msg):
        bestk.pass_at_k(*args)


def test_best_at_k_against_subsets_ragged_strings():
    rng = np.random.default_rng(0)
    lab = rng.permutation(np.repeat(["p", "q", "r"], [4, 6, 5]))
    r = rng.integers(-3, 4, lab.size) / 3
    for k in (1, 2, 4):
        got = bestk.best_at_k(r, k, lab)
        for gi, name in enumerate(["p", "q", "r"]):
            assert got[gi] == pytest.approx(maxk_subsets(list(r[lab == name]), k))
    t = bestk.best_at_k(torch.tensor(r, dtype=torch.float32), 2, lab)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32


def test_best_at_k_equals_pass_at_k_on_binary_and_is_unbiased():
    r = np.array([[1, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1]], dtype=float)
    for k in range(1, 7):
        np.testing.assert_allclose(
            bestk.best_at_k(r, k), bestk.pass_at_k(6, r.sum(1).astype(int), k), atol=1e-12
        )
    # Unbiased for E[max of k iid] on a 3-valued distribution, by enumeration of n = 4 draws.
    vals, probs, n, k = np.array([0.2, -1.0, 0.9]), np.array([0.5, 0.3, 0.2]), 4, 2
    draws = np.array(list(itertools.product(range(3), repeat=n)))
    est = (probs[draws].prod(1) * bestk.best_at_k(vals[draws], k)).sum()
    truth = sum(probs[a] * probs[b] * max(vals[a], vals[b]) for a in range(3) for b in range(3))
    assert est == pytest.approx(truth, abs=1e-12)


def test_best_at_k_bad_input():
    with pytest.raises(ValueError, match="exceeds the size 2 of group 'b'"):
        bestk.best_at_k([1.0, 2, 3, 4, 5], 3, ["a", "a", "a", "b", "b"])
    with pytest.raises(ValueError, match="k must be"):
        bestk.best_at_k([1.0], 0)
    with pytest.raises(ValueError, match="nan"):
        bestk.best_at_k([1.0, np.nan], 1)


def test_curves_and_bootstrap_ci():
    rng = np.random.default_rng(1)
    c = rng.integers(0, 17, 200)
    curve = bestk.pass_at_k_curve(16, c, "pow2", n_boot=500, seed=3)
    assert curve.ks.tolist() == [1, 2, 4, 8, 16]
    np.testing.assert_allclose(curve.mean, bestk.pass_at_k(16, c[:, None], curve.ks[None]).mean(0))
    assert np.all(curve.lo <= curve.mean) and np.all(curve.mean <= curve.hi)
    assert np.all(np.diff(curve.mean) >= 0)
    # CI width shrinks like 1/sqrt(P): 4x the prompts -> about half the width.
    big = bestk.pass_at_k_curve(16, np.tile(c, 4), "pow2", n_boot=500, seed=3)
    ratio = (big.hi - big.lo)[0] / (curve.hi - curve.lo)[0]
    assert 0.35 < ratio < 0.7
    assert curve.as_dict("pass") == {
        f"pass@{k}": pytest.approx(m) for k, m in zip(curve.ks, curve.mean, strict=True)
    }

    r = rng.random((30, 8))
    bc = bestk.best_at_k_curve(r, ks=[1, 3, 8])
    np.testing.assert_allclose(bc.mean[1], bestk.best_at_k(r, 3).mean())
    assert resolve_ks(None, 4).tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="1 <= k <= 4"):
        resolve_ks([5], 4)
    with pytest.raises(ValueError, match="ks must be"):
        resolve_ks("every", 4)


def test_gradient_allocation_by_pass_rate_bin():
    # Prompt pass rates: 0.0, 0.25, 0.5, 1.0 (4 samples each).
    r = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float)
    a = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [1, 1, 1, 1], [4, 4, 4, 4]], dtype=float)
    out = gradient_allocation(a, r)
    assert out["bins"] == ["[0,0.2)", "[0.2,0.5)", "[0.5,0.7)", "[0.7,0.9)", "[0.9,1]"]
    np.testing.assert_allclose(out["share"], np.array([4, 8, 4, 0, 16]) / 32)
    assert out["prompts"] == [1, 1, 1, 0, 1] and out["samples"] == [4, 4, 4, 0, 4]
    tokens = np.ones_like(a)
    tokens[3] = 0  # the solved prompt's completions have no tokens
    np.testing.assert_allclose(
        gradient_allocation(a, r, tokens=tokens)["share"], [0.25, 0.5, 0.25, 0, 0]
    )
    with pytest.raises(ValueError, match="advantages have 3"):
        gradient_allocation([1.0, 2.0, 3.0], r)


# ---------------------------------------------------------------------------- hardening
def test_gradient_allocation_bins_by_a_given_pass_rate():
    # two groups of 4; their own means (0.25, 1.0) would put them in [.2,.5) and [.9,1]
    r = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    a = [3.0, -1.0, -1.0, -1.0, 0.5, 0.5, -0.5, -0.5]
    out = gradient_allocation(a, r, [0] * 4 + [1] * 4, pass_rate=[0.95, 0.1])
    assert out["share"] == pytest.approx([2 / 8, 0, 0, 0, 6 / 8])
    assert out["prompts"] == [1, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="pass_rate has 3 entries but there are 2 groups"):
        gradient_allocation(a, r, [0] * 4 + [1] * 4, pass_rate=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="outside the bins"):
        gradient_allocation(a, r, [0] * 4 + [1] * 4, pass_rate=[0.1, 1.5])


def test_best_at_k_returns_a_float_for_a_single_group():
    got = bestk.best_at_k([1.0, 3.0, 2.0], 2)
    assert isinstance(got, float) and got == pytest.approx((3 + 3 + 2) / 3)
    t = bestk.best_at_k(torch.tensor([1.0, 3.0, 2.0]), 2)
    assert isinstance(t, torch.Tensor) and t.ndim == 0 and t.dtype == torch.float32
    rows = bestk.best_at_k(np.array([[1.0, 3.0, 2.0]]), 2)  # 2-D: one entry per row
    assert isinstance(rows, np.ndarray) and rows.shape == (1,)
    labelled = bestk.best_at_k([1.0, 3.0, 2.0], 2, ["a", "a", "a"])
    assert isinstance(labelled, np.ndarray) and labelled.shape == (1,)


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: bestk.best_at_k(3.0, 1), "0-d scalar 3.0"),
        (lambda: bestk.best_at_k([1.0, 2.0], True), "k must be an integer >= 1"),
        (lambda: bestk.pass_at_k(1e300, 1, 1), "n must hold integers in the int64 range"),
        (lambda: bestk.pass_at_k(2**64, 1, 1), "n must hold integers in the int64 range"),
        (lambda: bestk.pass_at_k(np.uint64(2**63), 1, 1), "int64 range"),
        (lambda: bestk.pass_at_k(10**15, 10**12, 10**12), "product terms"),
    ],
)
def test_metric_bad_input_messages(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_best_at_k_ragged_is_segment_local_and_tie_order_free():
    """Each group's estimate equals the group alone, bit for bit, whatever else is in the
    batch and however the batch is permuted."""
    rng = np.random.default_rng(4)
    sizes = [5, 1000, 3, 7]
    lab = rng.permutation(np.repeat(np.arange(4), sizes))
    r = rng.integers(0, 3, lab.size) * 10.0 ** rng.integers(-10, 20, lab.size)
    got = bestk.best_at_k(r, 3, lab)
    for g in range(4):
        assert got[g] == bestk.best_at_k(r[lab == g], 3)
    perm = rng.permutation(lab.size)
    np.testing.assert_array_equal(bestk.best_at_k(r[perm], 3, lab[perm]), got)
    np.testing.assert_allclose(got[[0, 2, 3]], [maxk_subsets(list(r[lab == g]), 3)
                                                for g in (0, 2, 3)], rtol=1e-14)


def test_best_at_k_float16_input_fits():
    r = torch.tensor([60000.0, 65504.0, 100.0], dtype=torch.float16)
    got = bestk.best_at_k(r, 2)
    assert got.dtype == torch.float16 and torch.isfinite(got)


# -- one rule for integer parameters: k of pass_at_k, best_at_k and pkpo, curve options ------------
@pytest.mark.parametrize("k", [2.0, np.float64(2.0), True, "2", torch.tensor(2.0)])
def test_k_follows_one_rule_in_pass_at_k_best_at_k_and_pkpo(k):
    """An integral float, a bool, a string: refused by all three, naming k."""
    with pytest.raises(ValueError, match="pass_at_k: k must be an integer"):
        bestk.pass_at_k(4, 1, k)
    with pytest.raises(ValueError, match="best_at_k: k must be an integer"):
        bestk.best_at_k([0.0, 1.0, 1.0, 0.0], k)
    with pytest.raises(ValueError, match="pkpo option k must be an integer"):
        bestk.advantages("pkpo", [0.0, 1.0, 1.0, 0.0], k=k)


def test_k_accepts_integer_scalars_and_arrays_counts_accept_integral_floats():
    want = bestk.pass_at_k(4, 1, 2)
    for k in (np.int64(2), torch.tensor(2), np.array(2)):
        assert bestk.pass_at_k(4, 1, k) == want
    assert bestk.pass_at_k(4.0, np.float32(1.0), 2) == want  # counts: data, e.g. a float sum
    with pytest.raises(ValueError, match="pass_at_k: k must hold integers .*float64"):
        bestk.pass_at_k(4, 1, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="ks must hold integers"):
        bestk.pass_at_k_curve(4, [1, 2], ks=[1.0, 2.0])


@pytest.mark.parametrize("curve", ["pass", "best"])
@pytest.mark.parametrize("option, value, msg", [
    ("n_boot", True, "n_boot must be an integer, got bool True"),
    ("n_boot", 2.5, "n_boot must be an integer, got float 2.5"),
    ("n_boot", 0, "n_boot must be >= 1, got 0"),
    ("seed", -1, "seed must be >= 0, got -1"),
    ("seed", False, "seed must be an integer, got bool False"),
    ("ci", 1.0, r"ci must be in \(0, 1\), got 1.0"),
    ("ci", "0.9", "ci must be a real number, got str '0.9'"),
])
def test_curve_options_are_named_in_the_error(curve, option, value, msg):
    if curve == "pass":
        call = lambda: bestk.pass_at_k_curve(4, [1, 2], **{option: value})  # noqa: E731
    else:
        call = lambda: bestk.best_at_k_curve([[0.0, 1.0], [1.0, 1.0]], **{option: value})  # noqa: E731
    with pytest.raises(ValueError, match=f"{curve}_at_k_curve option {msg}"):
        call()


def test_curve_shapes_that_do_not_match_name_both_arguments():
    with pytest.raises(ValueError, match=r"pass_at_k_curve: n has shape \(3,\) but c has shape "
                       r"\(2,\)"):
        bestk.pass_at_k_curve([4, 4, 4], [1, 2])
    with pytest.raises(ValueError, match="group has 2 labels but rewards have 3 samples"):
        bestk.best_at_k_curve([1.0, 0.0, 1.0], [0, 0])
    per_prompt = bestk.pass_at_k_curve(np.array([4, 5]), np.array([[1], [2]]))  # same size
    assert per_prompt.num_prompts == 2


@pytest.mark.parametrize("rewards, msg", [
    ([2.0, 2.0, 0.0, 0.0], "reward at index 0 is 2.0; rewards must lie in \\[0, 1\\]"),
    ([0.5, 0.5, -0.25, 0.0], "reward at index 2 is -0.25"),
])
def test_gradient_allocation_refuses_rewards_outside_0_1(rewards, msg):
    with pytest.raises(ValueError, match=f"gradient_allocation: {msg}"):
        gradient_allocation([1.0, 1.0, 1.0, 1.0], rewards, [0, 0, 1, 1])


def test_gradient_allocation_refuses_pass_rates_outside_the_bins():
    with pytest.raises(ValueError, match="group 1 has pass rate 0, outside the bins \\[0.1, 1\\]"):
        gradient_allocation([1.0] * 4, [1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1], bins=(0.1, 0.5, 1.0))
