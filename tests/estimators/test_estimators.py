"""bestk.advantages against brute-force references, properties, types and bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bestk
from tests._reference import (
    argmaxrl_ref,
    grpo_ref,
    loo_max_ref,
    per_group,
    pkpo_ref,
    rloo_ref,
    softmax_ref,
)


def ragged(seed=0, labels="str", n_groups=6, max_size=6, min_size=1):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, max_size + 1, n_groups)
    lab = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(lab)
    vals = rng.integers(-4, 5, lab.size) / 4  # ties and negatives
    if labels == "str":
        lab = [f"prompt-{x}" for x in lab]
    return vals, lab


CASES = [
    ("argmaxrl", {}, lambda r: argmaxrl_ref(r, "loo")),
    ("argmaxrl", {"baseline": "mean"}, lambda r: argmaxrl_ref(r, "mean")),
    ("argmaxrl", {"baseline": "none"}, lambda r: argmaxrl_ref(r, "none")),
    ("grpo", {}, grpo_ref),
    ("grpo", {"scale": "none"}, lambda r: grpo_ref(r, "none")),
    ("grpo", {"eps": 0.5}, lambda r: grpo_ref(r, eps=0.5)),
    ("rloo", {}, rloo_ref),
    ("reinforce", {}, lambda r: np.asarray(r, float)),
    ("softmax_grpo", {}, softmax_ref),
    ("softmax_grpo", {"tau": 2.0}, lambda r: softmax_ref(r, 2.0)),
    ("pkpo", {"k": 1, "variant": "s"}, lambda r: pkpo_ref(r, 1, "s")),
    ("loo_max", {}, loo_max_ref),
    ("loo_max", {"scale": "std"}, lambda r: loo_max_ref(r, "std")),
    ("loo_max", {"scale": "std", "eps": 0.0}, lambda r: loo_max_ref(r, "std", eps=0.0)),
]


@pytest.mark.parametrize("name, opts, ref", CASES)
@pytest.mark.parametrize("labels", ["int", "str"])
def test_matches_reference_on_ragged_shuffled_groups(name, opts, ref, labels):
    # a seed fixed by the case (hash() of strings changes with PYTHONHASHSEED)
    seed = 10 * [c[:2] for c in CASES].index((name, opts)) + (labels == "str")
    vals, lab = ragged(seed=seed, labels=labels)
    got = bestk.advantages(name, vals, lab, **opts)
    want = per_group(ref, vals, lab)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("variant", ["s", "sloo", "sloo_minus_one"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pkpo_matches_subset_enumeration(variant, k):
    min_size = k + 1 if variant == "sloo" else k
    vals, lab = ragged(seed=10 * k, min_size=min_size, max_size=6)
    got = bestk.advantages("pkpo", vals, lab, k=k, variant=variant)
    want = per_group(lambda r: pkpo_ref(r, k, variant), vals, lab)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_pkpo_large_groups_are_finite_and_exact_for_k1():
    rng = np.random.default_rng(0)
    r = rng.random(1024)
    for k in (1, 2, 64, 512, 1023):
        a = bestk.advantages("pkpo", r, k=k, variant="sloo")
        assert np.isfinite(a).all()
    s = bestk.advantages("pkpo", r, k=1, variant="s")
    np.testing.assert_allclose(s, r, rtol=1e-12)
    # k = n: the only n-subset contains every sample, so s_i = max for all i: A = n * max.
    s_n = bestk.advantages("pkpo", r, k=1024, variant="s")
    np.testing.assert_allclose(s_n, 1024 * r.max(), rtol=1e-10)


def test_pkpo_s_sums_to_k_rho():
    """sum_i s_i = k * rho_k (each k-subset max counted once per member)."""
    r = np.random.default_rng(5).random(40)
    for k in (2, 7, 40):
        a = bestk.advantages("pkpo", r, k=k, variant="s") / len(r)
        rho = bestk.best_at_k(r, k)
        assert a.sum() == pytest.approx(k * rho, rel=1e-10)


def test_2d_input_equals_grouped_1d():
    r = np.random.default_rng(2).integers(0, 3, (8, 5)).astype(float)
    for name, opts in [("argmaxrl", {}), ("pkpo", {"k": 3}), ("grpo", {}), ("softmax_grpo", {})]:
        a2 = bestk.advantages(name, r, **opts)
        a1 = bestk.advantages(name, r.ravel(), np.repeat(np.arange(8), 5), **opts)
        assert a2.shape == r.shape
        np.testing.assert_allclose(a2.ravel(), a1, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- types
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tensor_in_tensor_out(dtype):
    vals, lab = ragged(seed=4, labels="int")
    t = torch.tensor(vals, dtype=dtype)
    a = bestk.advantages("argmaxrl", t, torch.tensor(lab))
    assert isinstance(a, torch.Tensor) and a.dtype == dtype and a.device == t.device
    ref = bestk.advantages("argmaxrl", vals, lab)
    np.testing.assert_allclose(a.numpy(), ref, rtol=1e-5 if dtype == torch.float32 else 1e-12)


def test_list_and_numpy_give_float64_numpy():
    a = bestk.advantages("rloo", [1, 0, 1, 1], ["a", "b", "a", "b"])
    assert isinstance(a, np.ndarray) and a.dtype == np.float64
    np.testing.assert_allclose(a, [0, -1, 0, 1])
    b = bestk.advantages("rloo", np.array([True, False]))
    np.testing.assert_allclose(b, [1, -1])


# ---------------------------------------------------------------------------- properties
reward_lists = st.lists(st.integers(-3, 3).map(lambda x: x / 2), min_size=1, max_size=9)
ALL = [
    ("argmaxrl", {}),
    ("argmaxrl", {"baseline": "mean"}),
    ("argmaxrl", {"baseline": "none"}),
    ("softmax_grpo", {"tau": 0.5}),
    ("grpo", {}),
    ("grpo", {"scale": "none"}),
    ("rloo", {}),
    ("reinforce", {}),
    ("pkpo", {"k": 1}),
    ("loo_max", {}),
    ("loo_max", {"scale": "std"}),
]
SHIFT_INVARIANT = [ALL[i] for i in (0, 1, 3, 4, 5, 6, 9, 10)]


@settings(max_examples=60, deadline=None)
@given(r=reward_lists, seed=st.integers(0, 2**16))
def test_permutation_equivariance_and_ties(r, seed):
    perm = np.random.default_rng(seed).permutation(len(r))
    r = np.array(r)
    for name, opts in ALL + [("pkpo", {"k": len(r), "variant": "s"})]:
        a = bestk.advantages(name, r, **opts)
        ap = bestk.advantages(name, r[perm], **opts)
        np.testing.assert_allclose(ap, a[perm], atol=1e-9, err_msg=name)
        for v in np.unique(r):  # tied rewards, identical advantages
            tied = a[r == v]
            np.testing.assert_allclose(tied, tied[0], atol=1e-9, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(r=reward_lists, c=st.floats(-50, 50))
def test_shift_invariance_of_baselined_estimators(r, c):
    r = np.array(r)
    for name, opts in SHIFT_INVARIANT:
        np.testing.assert_allclose(
            bestk.advantages(name, r + c, **opts),
            bestk.advantages(name, r, **opts),
            atol=1e-7,
            err_msg=name,
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=12))
def test_maxrl_is_argmaxrl_on_binary_and_k_form(bits):
    r = np.array(bits, dtype=float)
    n, K = len(r), r.sum()
    for baseline in ("loo", "mean", "none"):
        np.testing.assert_allclose(
            bestk.advantages("maxrl", r, baseline=baseline),
            bestk.advantages("argmaxrl", r, baseline=baseline),
        )
    expected_none = n * r / K if K else np.zeros(n)
    np.testing.assert_allclose(bestk.advantages("maxrl", r, baseline="none"), expected_none)
    if n > 1 and K:  # MaxRL practical form (r - mean) / mean
        np.testing.assert_allclose(
            bestk.advantages("maxrl", r, baseline="mean"), (r - r.mean()) / r.mean()
        )


def test_argmaxrl_loo_identity_and_weight_sum():
    """loo = mean + (r_(1) - r_(2)) on the top sample; sum of w equals r_(1)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        r = rng.normal(size=7)
        top = np.argmax(r)
        gap = np.sort(r)[-1] - np.sort(r)[-2]
        loo = bestk.advantages("argmaxrl", r)
        mean = bestk.advantages("argmaxrl", r, baseline="mean")
        diff = loo - mean
        assert diff[top] == pytest.approx(gap)
        np.testing.assert_allclose(np.delete(diff, top), 0, atol=1e-12)
        w = bestk.advantages("argmaxrl", r, baseline="none") / len(r)
        assert w.sum() == pytest.approx(r.max())


def test_softmax_grpo_tends_to_maxrl_mean_as_tau_to_zero():
    r = np.array([[1, 0, 0, 1, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1, 0]], dtype=float)
    limit = bestk.advantages("argmaxrl", r, baseline="mean")
    for tau, tol in [(0.1, 1e-2), (0.02, 1e-9), (1e-3, 1e-12)]:
        np.testing.assert_allclose(bestk.advantages("softmax_grpo", r, tau=tau), limit, atol=tol)


def test_size_one_groups_get_zero_from_baselined_estimators():
    r = [3.0, -1.0, 2.0]
    lab = ["a", "b", "b"]
    for name, opts in [
        ("argmaxrl", {}),
        ("argmaxrl", {"baseline": "mean"}),
        ("grpo", {}),
        ("rloo", {}),
        ("softmax_grpo", {}),
        ("pkpo", {"k": 1}),
        ("pkpo", {"k": 2, "variant": "sloo_minus_one"}),
        ("loo_max", {}),
        ("loo_max", {"scale": "std"}),
    ]:
        assert bestk.advantages(name, r, lab, **opts)[0] == 0, name
    assert bestk.advantages("reinforce", r, lab)[0] == 3.0
    assert bestk.advantages("argmaxrl", r, lab, baseline="none")[0] == 3.0


def _singleton_options():
    """Every built-in estimator with each option value that changes its smallest group."""
    from bestk.kappo import calibrate

    cal = calibrate({0: [1, 0, 0, 1], 1: [0, 0, 0, 1], 2: [1, 1, 0, 1]}, k=2, beta=0.1)
    return [
        ("argmaxrl", {}), ("argmaxrl", {"baseline": "mean"}), ("argmaxrl", {"baseline": "none"}),
        ("maxrl", {}), ("maxrl", {"baseline": "none"}), ("grpo", {}), ("grpo", {"scale": "none"}),
        ("rloo", {}), ("reinforce", {}), ("softmax_grpo", {}), ("loo_max", {}),
        ("loo_max", {"scale": "std"}), ("pkpo", {"k": 1}), ("pkpo", {"k": 1, "variant": "s"}),
        ("pkpo", {"k": 1, "variant": "sloo"}), ("passk_training", {"k": 1}),
        ("kappo_grpo", {"calibration": cal}),
    ]


def test_min_group_says_whether_a_group_of_one_trains():
    """An estimator's registered ``min_group`` (the trainer refuses a smaller ``rollout.n``)
    is 2 exactly when every sample alone in its group gets advantage 0, whatever its reward;
    every built-in estimator is covered."""
    cases = _singleton_options()
    assert {name for name, _ in cases} >= {
        "argmaxrl", "maxrl", "grpo", "rloo", "reinforce", "softmax_grpo", "loo_max", "pkpo",
        "passk_training", "kappo_grpo"}
    for name, opts in cases:
        info = bestk.estimator_info(name)
        rewards = [1.0, 0.0, 1.0]  # three groups of one sample (0/1: any domain takes them)
        a = bestk.advantages(name, rewards, [0, 1, 2], **opts)
        need = info.min_group_size({k: v for k, v in opts.items() if k != "calibration"})
        assert need == (2 if np.all(a == 0) else 1), (name, opts, a)


def test_min_group_must_be_a_size_or_a_function():
    from bestk.estimators import register_estimator

    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="min_group must be an integer >= 1 or a function"):
            register_estimator("test_bad_min_group", min_group=bad)
    assert "test_bad_min_group" not in bestk.ESTIMATORS
    assert bestk.estimator_info("reinforce").min_group_size() == 1
    assert bestk.estimator_info("grpo").min_group_size({"scale": "none"}) == 2


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: bestk.advantages("nope", [1.0]), "unknown estimator 'nope'.*argmaxrl"),
        (lambda: bestk.advantages("grpo", [1.0], tau=1), "unknown option.*'tau'.*grpo"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0]), "requires option.*k"),
        (lambda: bestk.advantages("argmaxrl", [1.0, np.nan]), "index 1 is nan"),
        (lambda: bestk.advantages("argmaxrl", [[1.0, np.inf]]), r"index \(0, 1\) is inf"),
        (lambda: bestk.advantages("argmaxrl", []), "empty"),
        (lambda: bestk.advantages("argmaxrl", np.zeros((2, 2, 2))), "3-D"),
        (lambda: bestk.advantages("argmaxrl", [1.0, 2.0], [0]), "1 labels but rewards have 2"),
        (lambda: bestk.advantages("argmaxrl", [[1.0]], [0]), "group must be None"),
        (lambda: bestk.advantages("argmaxrl", ["a", "b"]), "numbers"),
        (lambda: bestk.advantages("argmaxrl", [[1.0], [1.0, 2.0]]), "1-D or 2-D"),
        (lambda: bestk.advantages("argmaxrl", [1.0], baseline="max"), "baseline 'max'"),
        (lambda: bestk.advantages("maxrl", [1.0, 0.5]), "index 1 is 0.5"),
        (lambda: bestk.advantages("softmax_grpo", [1.0], tau=0), "tau must be > 0"),
        (
            lambda: bestk.advantages("softmax_grpo", [1.0], tau="x"),
            "tau must be a real number, got str 'x'",
        ),
        (lambda: bestk.advantages("grpo", [1.0], scale="mad"), "scale 'mad'"),
        (lambda: bestk.advantages("grpo", [1.0], eps=-1), "eps must be"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0], k=0), "k must be >= 1"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0], k=2.5), "integer"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0], k=2, variant="sloo"), "too large"),
        (
            lambda: bestk.advantages("pkpo", [1.0, 2, 3], ["x", "x", "y"], k=2, variant="s"),
            "group 'y' of size 1",
        ),
        (lambda: bestk.advantages("pkpo", [1.0], k=1, variant="z"), "variant 'z'"),
    ],
)
def test_bad_input_raises_clear_value_error(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_register_user_estimator_and_options_listing():
    @bestk.register_estimator("test_centered_x2")
    def centered(rewards, groups, *, factor: float = 2.0):
        return factor * (rewards - groups.mean(rewards)[groups.index])

    try:
        a = bestk.advantages("test_centered_x2", [1.0, 3.0, 5.0, 5.0], [0, 0, 1, 1], factor=1)
        np.testing.assert_allclose(a, [-1, 1, 0, 0])
        assert bestk.estimator_options("test_centered_x2") == {"factor": 2.0}
        with pytest.raises(ValueError, match="already registered"):
            bestk.register_estimator("test_centered_x2")(lambda r, g: r)
        with pytest.raises(ValueError, match="positionally"):
            bestk.register_estimator("test_bad_sig")(lambda r: r)
    finally:
        bestk.ESTIMATORS.pop("test_centered_x2", None)


def test_argmaxrl_reward_shift_adds_c_over_n_to_every_weight():
    r = np.random.default_rng(11).normal(size=6)
    shifted = bestk.advantages("argmaxrl", r + 1.7, baseline="none")
    np.testing.assert_allclose(
        (shifted - bestk.advantages("argmaxrl", r, baseline="none")) / 6, 1.7 / 6
    )


# ---------------------------------------------------------------------------- hardening
def _close(got, want, rtol=4e-16, atol=0.0):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol)


def test_a_huge_reward_does_not_corrupt_the_small_ones():
    """Ragged path: [1e17, 3, 2, 1] in group a; brute force gives [4e17, 13/3, 7/3, 1]."""
    a = bestk.advantages("argmaxrl", [1e17, 3.0, 2.0, 1.0, 0.0], ["a"] * 4 + ["b"],
                         baseline="none")
    _close(a[:4], [4e17, 13 / 3, 7 / 3, 1.0])
    _close(a[:4], per_group(lambda r: argmaxrl_ref(r, "none"), [1e17, 3, 2, 1], [0] * 4))
    block = bestk.advantages("argmaxrl", [1e17, 3.0, 2.0, 1.0], baseline="none")
    np.testing.assert_array_equal(a[:4], block)  # ragged and block layouts agree bit for bit


def test_other_groups_do_not_change_a_groups_advantages():
    r, g = [1e20, 0.0, 1.0, 2.0, 3.0], ["a", "a", "b", "b", "b"]
    _close(bestk.advantages("argmaxrl", r, g, baseline="none")[2:], [1.0, 2.5, 5.5])
    _close(bestk.advantages("pkpo", r, g, k=2, variant="s")[2:], [5.0, 5.0, 6.0], rtol=2e-15)
    for name, opts in ALL + [("pkpo", {"k": 2, "variant": "s"}), ("maxrl", {})]:
        vals = [1.0, 0.0, 1.0, 0.0, 1.0] if name == "maxrl" else r
        alone = bestk.advantages(name, vals[2:], **opts)
        np.testing.assert_array_equal(bestk.advantages(name, vals, g, **opts)[2:], alone, name)


@pytest.mark.parametrize(
    "name, opts", ALL + [("pkpo", {"k": 2}), ("pkpo", {"k": 3, "variant": "s"})]
)
def test_tied_rewards_get_bit_identical_advantages(name, opts):
    """~25% of tie sets differed with the global-cumsum scan; now every one is identical."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(3, 40, 300)
    lab = rng.permutation(np.repeat(np.arange(300), sizes))
    r = rng.integers(0, 4, lab.size) * 10.0 ** rng.integers(-3, 4, lab.size)
    r[rng.random(lab.size) < 0.01] = 1e17  # a few huge rewards in some groups
    a = bestk.advantages(name, r, lab, **opts)
    _, inv = np.unique(np.stack([lab, r]), axis=1, return_inverse=True)  # (group, reward)
    first = np.full(inv.max() + 1, -1)
    first[inv[::-1]] = np.arange(lab.size)[::-1]
    np.testing.assert_array_equal(a, a[first[inv]])


def test_zero_dimensional_rewards_are_rejected():
    with pytest.raises(ValueError, match="0-d scalar 2.0"):
        bestk.advantages("argmaxrl", 2.0)
    with pytest.raises(ValueError, match="0-d tensor"):
        bestk.advantages("argmaxrl", torch.tensor(2.0))


def test_kappo_grpo_requires_explicit_prompt_ids():
    from bestk.kappo import calibrate

    cal = calibrate({0: [1, 0, 0, 1], 1: [0, 0, 0, 1]}, k=2, beta=0.1)
    with pytest.raises(ValueError, match="needs the prompt ids"):
        bestk.advantages("kappo_grpo", [1.0, 0.0, 1.0], calibration=cal)
    with pytest.raises(ValueError, match="needs the prompt ids"):
        bestk.advantages("kappo_grpo", [[1.0, 0.0], [0.0, 1.0]], calibration=cal)
    a = bestk.advantages("kappo_grpo", [1.0, 0.0, 1.0, 0.0], [1, 1, 0, 0], calibration=cal)
    a_k = cal.get("a_k", [0, 1])
    grpo = bestk.advantages("grpo", [1.0, 0.0, 1.0, 0.0], [1, 1, 0, 0])
    _close(a, grpo * np.repeat(a_k[::-1], 2), rtol=1e-15)


@pytest.mark.parametrize(
    "rewards, opts, msg",
    [
        # N * 1000 = 128000 > 65504: float16 cannot hold the top advantage
        (torch.tensor([1000.0] + [0.0] * 127, dtype=torch.float16), {}, "float16.*65504"),
        # 3 * 3e38 / 2 = 4.5e38 > 3.4e38
        (torch.tensor([3e38, 3e38, 0.0], dtype=torch.float32), {"baseline": "none"},
         "4.5e\\+38.*float32"),
        # the true advantage 2 * 2.55e308 exceeds float64 itself
        (torch.tensor([1.7e308, -1.7e308], dtype=torch.float64), {"baseline": "none"},
         "exceed the float64 range"),
    ],
)
def test_results_a_dtype_cannot_hold_are_a_value_error(rewards, opts, msg):
    with pytest.raises(ValueError, match=msg):
        bestk.advantages("argmaxrl", rewards, **opts)


def test_narrow_dtypes_are_computed_in_float64_and_fit_when_they_can():
    r16 = torch.tensor([1000.0] + [0.0] * 15, dtype=torch.float16)  # 16 * 1000 fits
    a = bestk.advantages("argmaxrl", r16, baseline="none")
    assert a.dtype == torch.float16 and torch.isfinite(a).all()
    _close(a.double(), argmaxrl_ref(r16.double().numpy(), "none"), rtol=1e-3)
    r32 = torch.tensor([3e38, 3e38, 0.0], dtype=torch.float32)
    for name, opts in [("argmaxrl", {}), ("grpo", {}), ("softmax_grpo", {}), ("rloo", {})]:
        got = bestk.advantages(name, r32, **opts)
        want = bestk.advantages(name, r32.double(), **opts).float()
        assert got.dtype == torch.float32
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)


def test_grpo_at_the_float64_limits():
    _close(bestk.advantages("grpo", [-1.7e308, 1.7e308]), [-(0.5**0.5), 0.5**0.5], rtol=1e-15)
    _close(bestk.advantages("grpo", [1.7e308, 1.7e308, 1.6e308]),
           grpo_ref([1.7, 1.7, 1.6], eps=0.0), rtol=1e-12)
    _close(bestk.advantages("grpo", [1e-310, 3e-310], eps=0.0), [-(0.5**0.5), 0.5**0.5],
           rtol=1e-6)
    _close(bestk.advantages("grpo", [-1.7e308, 1.7e308], scale="none"), [-1.7e308, 1.7e308])
    with pytest.raises(ValueError, match="exceed the float64 range"):
        bestk.advantages("rloo", [-1.7e308, 1.7e308])  # the true A = +-3.4e308
    _close(bestk.advantages("rloo", [-0.8e308, 0.8e308]), [-1.6e308, 1.6e308], rtol=1e-15)
    _close(bestk.advantages("softmax_grpo", [-1.7e308, 1.7e308], tau=1e308),
           softmax_ref([-1.7, 1.7], tau=1.0), rtol=1e-12)
    # intermediate values (N w = 2.2e308) overflow; the advantages do not
    _close(bestk.advantages("argmaxrl", [1.7e308, 1.6e308, 1e308], baseline="loo"),
           argmaxrl_ref([1.7, 1.6, 1.0], "loo") * 1e308, rtol=1e-12)
    _close(bestk.advantages("pkpo", [1.7e308, 1.6e308, 1e308], k=2),
           pkpo_ref([1.7, 1.6, 1.0], 2) * 1e308, rtol=1e-12)


def test_grpo_constant_groups_are_exactly_zero_even_with_eps_zero():
    """sum/n of [0.1] * 3 is not 0.1; the deviations about the maximum are exactly 0."""
    for eps in (0.0, 1e-6):
        assert np.all(bestk.advantages("grpo", [0.1, 0.1, 0.1], eps=eps) == 0)
    assert np.all(bestk.advantages("rloo", [0.1, 0.1, 0.1]) == 0)
    assert np.all(bestk.advantages("grpo", [0.1, 0.1, 0.1], scale="none") == 0)


@pytest.mark.parametrize(
    "value", [np.float32(0.1), np.float64(0.1), torch.tensor(0.1), np.array(0.1), 0.1, 1]
)
def test_scalar_options_accept_any_real_number_type(value):
    want = bestk.advantages("softmax_grpo", [1.0, 2.0, 4.0], tau=float(value))
    np.testing.assert_array_equal(bestk.advantages("softmax_grpo", [1.0, 2.0, 4.0], tau=value),
                                  want)
    assert np.isfinite(bestk.advantages("grpo", [1.0, 2.0], eps=value)).all()


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: bestk.advantages("grpo", [1.0, 2.0], eps=True), "eps must be a real.*bool"),
        (lambda: bestk.advantages("softmax_grpo", [1.0], tau=np.bool_(True)), "got bool"),
        (lambda: bestk.advantages("softmax_grpo", [1.0], tau=torch.tensor([0.1, 0.2])),
         "tau must be a real number, got Tensor"),
        (lambda: bestk.advantages("softmax_grpo", [1.0], tau=float("inf")), "must be finite"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0], k=True), "k must be an integer, got bool"),
        (lambda: bestk.advantages("pkpo", [1.0, 2.0], k=2.0), "k must be an integer, got float"),
        (lambda: bestk.advantages("argmaxrl", np.array([2**60, 1])), "2\\*\\*53"),
    ],
)
def test_bad_option_types(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_integer_like_options_from_numpy_and_tensors():
    r = [1.0, 3.0, 2.0, 5.0]
    want = bestk.advantages("pkpo", r, k=2)
    for k in (np.int64(2), np.array(2), torch.tensor(2)):
        np.testing.assert_array_equal(bestk.advantages("pkpo", r, k=k), want)
