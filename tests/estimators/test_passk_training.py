"""``passk_training`` (Chen et al. 2025, arXiv:2508.10751) against a naive transcription of the
paper's formula, a second derivation (centred PKPO credit over a Bernoulli std), its edge cases
and bad input. Its expected update is checked by exact enumeration in
``tests/estimators/test_unbiased.py``."""

import numpy as np
import pytest
import torch

import bestk
from bestk.estimators.passk_training import count_advantages
from tests._reference import passk_training_ref, per_group, pkpo_ref


def binary_ragged(seed, labels="str", n_groups=8, min_size=1, max_size=9):
    """Ragged, shuffled 0/1 groups: an all-0 and an all-1 group, one group of ``max_size``
    with a single success (live for any ``k < max_size``), the others random."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, max_size + 1, n_groups)
    lab = rng.permutation(np.repeat(np.arange(n_groups), sizes))
    rate = rng.random(n_groups)[lab]
    vals = (rng.random(lab.size) < rate).astype(float)
    vals[lab == 0] = 0.0  # a group without success
    vals[lab == 1] = 1.0  # a group without failure
    lab = np.append(lab, [n_groups] * max_size)
    vals = np.append(vals, [1.0] + [0.0] * (max_size - 1))
    if labels == "str":
        lab = [f"prompt-{x}" for x in lab]
    return vals, lab


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("k, eps", [(1, 1e-6), (2, 1e-6), (3, 1e-6), (4, 0.0), (2, 0.3)])
def test_matches_the_papers_formula_on_ragged_groups(k, eps, labels):
    vals, lab = binary_ragged(seed=10 * k + (labels == "str"), labels=labels, min_size=k,
                              max_size=k + 8)
    got = bestk.advantages("passk_training", vals, lab, k=k, eps=eps)
    want = per_group(lambda r: passk_training_ref(r, k, eps), vals, lab)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.abs(got).max() > 0.1  # not vacuous: some groups learn


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_is_pkpo_credit_centred_on_its_mean_over_the_bernoulli_std(k):
    """A second derivation: ``(s_i - mean s) / (k (sigma + eps))`` with ``s`` PKPO's unbiased
    per-sample pass@k credit (subset enumeration) and ``sigma`` the Bernoulli std of the
    group's pass@k estimate ``mean(s) / k``."""
    vals, lab = binary_ragged(seed=k, labels="int", min_size=k, max_size=8)

    def centred_pkpo(r):
        s = pkpo_ref(r, k, "s")
        rho = s.mean() / k  # sum_i s_i / N = k pass@k-hat
        sigma = np.sqrt(rho * (1 - rho))
        return (s - s.mean()) / (k * (sigma + 1e-6))

    got = bestk.advantages("passk_training", vals, lab, k=k)
    np.testing.assert_allclose(got, per_group(centred_pkpo, vals, lab), rtol=1e-9, atol=1e-9)


def test_k_1_is_grpo_with_the_population_std():
    vals, lab = binary_ragged(seed=3, labels="int", min_size=2)

    def grpo_pop(r):
        return (r - r.mean()) / (r.std(ddof=0) + 1e-6)

    np.testing.assert_allclose(bestk.advantages("passk_training", vals, lab, k=1),
                               per_group(grpo_pop, vals, lab), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_groups_with_zero_sigma_get_exactly_zero(eps):
    """No success, no failure, or fewer than k failures: R is 0 or 1, sigma = 0, and the
    numerators are 0 too (the authors' sigma + 1e-6 gives 0 there); never NaN, never -0.0."""
    r = [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0]
    lab = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4  # all fail, all pass, 1 failure (< k), live
    a = bestk.advantages("passk_training", r, lab, k=2, eps=eps)
    assert np.all(a[:12] == 0) and not np.signbit(a[:12]).any()
    np.testing.assert_allclose(a[12:], passk_training_ref(r[12:], 2, eps), rtol=1e-12)
    assert bestk.advantages("passk_training", [1.0], k=1, eps=eps)[0] == 0.0
    # N = k: every group has R in {0, 1}, so nothing ever learns
    assert not bestk.advantages("passk_training", [[1, 0, 0], [0, 0, 0]], k=3).any()


def test_sums_to_zero_and_counts_match_the_exact_table():
    """Zero-sum per group; the advantages equal the exact-integer table of
    ``count_advantages`` (which the prompt weight uses) for every success count."""
    n, k = 12, 3
    a_pos, a_neg = count_advantages(n, k)
    for K in range(n + 1):
        r = np.array([1.0] * K + [0.0] * (n - K))
        a = bestk.advantages("passk_training", r, k=k)
        assert abs(a.sum()) < 1e-12
        np.testing.assert_allclose(a[:K], a_pos[K], rtol=1e-12)
        np.testing.assert_allclose(a[K:], a_neg[K], rtol=1e-12, atol=1e-300)


def test_large_groups_are_finite_and_accurate():
    """N = 1024 with k up to 512: q = C(N_neg, k)/C(N, k) can be ~1e-300; log space keeps the
    advantages finite and close to the exact-rational reference."""
    rng = np.random.default_rng(0)
    r = (rng.random(1024) < 0.3).astype(float)
    for k in (1, 8, 64, 512):
        got = bestk.advantages("passk_training", r, k=k)
        want = passk_training_ref(r, k)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tensor_in_tensor_out(dtype):
    vals, lab = binary_ragged(seed=5, labels="int", min_size=2)
    t = torch.tensor(vals, dtype=dtype)
    a = bestk.advantages("passk_training", t, torch.tensor(lab), k=2)
    assert isinstance(a, torch.Tensor) and a.dtype == dtype
    np.testing.assert_allclose(a.double().numpy(), bestk.advantages("passk_training", vals, lab,
                                                                    k=2), rtol=1e-6)


@pytest.mark.parametrize("call, msg", [
    (lambda: bestk.advantages("passk_training", [1.0, 0.0]), "requires option.*k"),
    (lambda: bestk.advantages("passk_training", [1.0, 0.5], k=1), "needs binary 0/1 rewards"),
    (lambda: bestk.advantages("passk_training", [1.0, 0.0], k=0), "k must be >= 1"),
    (lambda: bestk.advantages("passk_training", [1.0, 0.0], k=2.0), "k must be an integer"),
    (lambda: bestk.advantages("passk_training", [1.0, 0, 1], ["a", "a", "b"], k=2),
     "k=2 is too large for group 'b' of size 1"),
    (lambda: bestk.advantages("passk_training", [1.0, 0.0], k=1, eps=-1e-3), "eps must be >= 0"),
    (lambda: bestk.advantages("passk_training", [1.0, 0.0], k=1, tau=1), "unknown option"),
])
def test_bad_input_is_a_clear_value_error(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_registry_entry():
    info = bestk.estimator_info("passk_training")
    assert info.reward_domain == "binary" and info.binary_rewards()
    assert info.objective is None and info.prompt_weight is not None
    assert info.fit_group({"k": 8}, 6) == {"k": 6}
    assert info.default_options == {"k": 4}
