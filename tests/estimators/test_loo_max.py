"""``loo_max`` (Tang et al. 2025, arXiv:2503.19595) against a naive sample-by-sample
reference, its ties, extremes and bad input. Its unbiasedness for ``best@N / N`` is checked by
exact enumeration in ``tests/estimators/test_unbiased.py``; its equality with verl's
``grpo_passk`` in ``tests/integrations/test_verl.py``."""

import numpy as np
import pytest
import torch

import bestk
from tests._reference import loo_max_ref, per_group


def test_only_a_unique_best_sample_gets_the_gap_to_the_second():
    np.testing.assert_array_equal(bestk.advantages("loo_max", [1.0, 3.0, 2.0, -4.0]),
                                  [0.0, 1.0, 0.0, 0.0])
    # a tie at the top: each tied sample is the other's leave-one-out max, so all get 0
    assert not bestk.advantages("loo_max", [3.0, 1.0, 3.0]).any()
    assert not bestk.advantages("loo_max", [3.0, 1.0, 3.0], scale="std").any()
    # a tie below the top changes nothing
    np.testing.assert_array_equal(bestk.advantages("loo_max", [2.0, 2.0, 5.0]), [0, 0, 3.0])
    std = np.std([2.0, 2.0, 5.0], ddof=1)
    np.testing.assert_allclose(bestk.advantages("loo_max", [2.0, 2.0, 5.0], scale="std"),
                               [0, 0, 3.0 / (std + 1e-6)], rtol=1e-15)


@pytest.mark.parametrize("scale", ["none", "std"])
def test_matches_reference_on_ragged_groups_with_ties(scale):
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 9, 40)
    lab = rng.permutation(np.repeat(np.arange(40), sizes))
    r = rng.integers(-3, 4, lab.size) / 2.0  # many ties, also at the top
    got = bestk.advantages("loo_max", r, [f"u{x}" for x in lab], scale=scale)
    want = per_group(lambda g: loo_max_ref(g, scale), r, list(lab))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert (got > 0).sum() > 5 and (got > 0).sum() <= 40  # at most one sample per group


def test_extreme_rewards():
    # the gap 3.4e308 itself exceeds float64: a ValueError, never inf
    with pytest.raises(ValueError, match="exceed the float64 range"):
        bestk.advantages("loo_max", [-1.7e308, 1.7e308])
    np.testing.assert_allclose(bestk.advantages("loo_max", [-0.8e308, 0.8e308]), [0, 1.6e308],
                               rtol=1e-15)
    # std scaling: the ratio is computed on power-of-two scaled values, no overflow
    np.testing.assert_allclose(bestk.advantages("loo_max", [-1.7e308, 1.7e308], scale="std"),
                               [0, 2**0.5], rtol=1e-15)
    np.testing.assert_allclose(bestk.advantages("loo_max", [1e-310, 3e-310], scale="std",
                                                eps=0.0), [0, 2**0.5], rtol=1e-6)


def test_float32_rewards_give_float32_advantages():
    r = torch.tensor([0.25, 1.5, -2.0, 1.0], dtype=torch.float32)
    a = bestk.advantages("loo_max", r, scale="std")
    assert a.dtype == torch.float32
    np.testing.assert_allclose(a.numpy(), loo_max_ref(r.double().numpy(), "std"), rtol=1e-6)


@pytest.mark.parametrize("call, msg", [
    (lambda: bestk.advantages("loo_max", [1.0, 2.0], scale="mad"), "unknown scale 'mad'"),
    (lambda: bestk.advantages("loo_max", [1.0, 2.0], eps=-1.0), "eps must be >= 0"),
    (lambda: bestk.advantages("loo_max", [1.0, 2.0], eps=True), "eps must be a real number"),
    (lambda: bestk.advantages("loo_max", [1.0, 2.0], k=2), "unknown option"),
])
def test_bad_input_is_a_clear_value_error(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_registry_entry():
    info = bestk.estimator_info("loo_max")
    assert info.describe_objective() == "best@N / N (scale=none); none (scale=std)"
    assert info.objective_for({}).terms(5) == [(5, 0.2)]
    assert info.objective_for({"scale": "std"}) is None
    assert info.reward_domain == "any" and not info.needs_prompt_ids
