"""Exact unbiasedness: enumerate every ordered group of N draws from a small softmax bandit.

For policy pi = softmax(theta) over K arms with fixed rewards, the expected estimate
E[(1/N) sum_i A_i grad log pi(a_i)] (grad log pi(a) = e_a - pi) is computed exactly by
enumerating all K^N draws, and compared with the autograd gradient of the objective each
estimator's registry entry claims (``bestk.estimator_info(name).objective_for(options)``),
written in closed form from the reward distribution.
"""

import itertools

import numpy as np
import pytest
import torch

import bestk
from bestk.estimators import ByOption, Objective, best_at, best_at_n, estimator_info, joint

BANDITS = {
    # arms' rewards: graded with ties and negatives; binary; all-negative graded
    "graded_ties_negative": (np.array([0.7, -0.4, 0.7, 1.3]), np.array([0.3, -0.2, 0.5, -1.0])),
    "binary": (np.array([1.0, 0.0, 0.0, 1.0]), np.array([-1.0, 0.4, 0.0, -0.6])),
    "negative": (np.array([-2.0, -0.5, -1.25]), np.array([0.2, 0.1, -0.3])),
}


def best_at_k_closed_form(logits: torch.Tensor, values: np.ndarray, k: int) -> torch.Tensor:
    """E[max of k iid draws] = sum_v v (F(v)^k - F(v-)^k) over distinct reward values v."""
    pi = torch.softmax(logits, 0)
    total = torch.zeros((), dtype=torch.float64)
    for v in np.unique(values):
        F = pi[torch.tensor(values <= v)].sum()
        F_minus = pi[torch.tensor(values < v)].sum()
        total = total + float(v) * (F**k - F_minus**k)
    return total


def objective(obj: Objective, N: int, logits: torch.Tensor, values: np.ndarray) -> torch.Tensor:
    """The closed form of an :class:`Objective`: ``sum_k c_k best@k`` at group size ``N``."""
    return obj.value(lambda k: best_at_k_closed_form(logits, values, k), N)


def exact_gradient(obj, N, logits_np, values):
    logits = torch.tensor(logits_np, dtype=torch.float64, requires_grad=True)
    objective(obj, N, logits, values).backward()
    return logits.grad.numpy()


def expected_estimate(name, opts, N, logits_np, values):
    """Sum over all K^N ordered draws of P(draw) (1/N) sum_i A_i (e_{a_i} - pi)."""
    K = len(values)
    pi = np.exp(logits_np - logits_np.max())
    pi /= pi.sum()
    draws = np.array(list(itertools.product(range(K), repeat=N)))  # (K^N, N)
    probs = pi[draws].prod(1)
    rewards = values[draws]  # one group per row
    A = bestk.advantages(name, rewards, **opts)  # (K^N, N), all groups at once
    score = np.eye(K)[draws] - pi  # (K^N, N, K)
    per_draw = (A[:, :, None] * score).mean(1)
    return probs @ per_draw


#: Option settings each built-in estimator is checked at: the claim of each setting is read
#: from the registry (``EstimatorInfo.objective_for``), never written here.
SETTINGS: dict[str, list[dict]] = {
    "argmaxrl": [{"baseline": "none"}, {"baseline": "loo"}, {"baseline": "mean"}],
    "maxrl": [{"baseline": "loo"}, {"baseline": "mean"}, {"baseline": "none"}],
    "rloo": [{}],
    "reinforce": [{}],
    "grpo": [{"scale": "none"}, {"scale": "std"}],
    "pkpo": [{"k": 2, "variant": "s"}, {"k": 2, "variant": "sloo"},
             {"k": 2, "variant": "sloo_minus_one"}, {"k": 3, "variant": "sloo_minus_one"},
             {"k": 1, "variant": "sloo_minus_one"}],
    "softmax_grpo": [{"tau": 0.1}],
    "loo_max": [{"scale": "none"}, {"scale": "std"}],
    "passk_training": [{"k": 2}, {"k": 3}],  # claims none: its prompt weight, tested below
    "kappo_grpo": [],  # needs a calibration: its own test below
}

CASES = [
    (name, opts, bandit, N)
    for name, settings in SETTINGS.items()
    for opts in settings
    if estimator_info(name).objective_for(opts) is not None
    for bandit in BANDITS
    for N in (3, 4)
    # an estimator of the binary reward domain (maxrl) only on the binary bandit
    if bandit == "binary" or not estimator_info(name).binary_rewards()
]


def test_every_claim_of_the_registry_is_enumerated():
    """Every built-in estimator is in :data:`SETTINGS`, and every objective its registry entry
    can claim (each case of a ByOption) is reached by some setting: no claim goes unchecked."""
    builtin = {name for name in bestk.ESTIMATORS if not name.startswith("test_")}
    assert builtin == set(SETTINGS)
    for name, settings in SETTINGS.items():
        obj = estimator_info(name).objective
        if isinstance(obj, ByOption):
            covered = {opts.get(obj.option, estimator_info(name).with_defaults()[obj.option])
                       for opts in settings}
            assert set(obj.cases) <= covered, (name, set(obj.cases) - covered)
    assert len(CASES) >= 40


@pytest.mark.parametrize("name, opts, bandit, N", CASES)
def test_estimator_is_unbiased_for_its_registered_objective(name, opts, bandit, N):
    values, logits = BANDITS[bandit]
    claim = estimator_info(name).objective_for(opts)
    got = expected_estimate(name, opts, N, logits, values)
    want = exact_gradient(claim, N, logits, values)
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-10)


def test_mean_baseline_is_biased_for_J_N_and_grpo_for_E_r():
    """The checks above can fail: the biased forms do not match the other objective."""
    values, logits = BANDITS["graded_ties_negative"]
    N = 4
    mean = expected_estimate("argmaxrl", {"baseline": "mean"}, N, logits, values)
    assert np.abs(mean - exact_gradient(joint(), N, logits, values)).max() > 1e-3
    grpo = expected_estimate("grpo", {}, N, logits, values)
    g_r = exact_gradient(best_at(1), N, logits, values)
    cos = grpo @ g_r / np.linalg.norm(grpo) / np.linalg.norm(g_r)
    assert np.abs(grpo - g_r).max() > 1e-3 and cos > 0.5  # same direction, not the gradient


def test_softmax_grpo_limit_expectation_is_maxrl_mean_objective():
    values, logits = BANDITS["binary"]
    N = 4
    got = expected_estimate("softmax_grpo", {"tau": 1e-3}, N, logits, values)
    np.testing.assert_allclose(got, exact_gradient(joint(lag=1), N, logits, values), atol=1e-10)
    warm = expected_estimate("softmax_grpo", {"tau": 1.0}, N, logits, values)
    assert np.abs(warm - exact_gradient(joint(lag=1), N, logits, values)).max() > 1e-3


def test_kappo_grpo_expectation_is_a_k_times_grpo_and_not_a_pass_at_k_gradient():
    """kappo_grpo makes no unbiasedness claim; what it does claim (binary calibration): its
    expected update is GRPO's scaled by the prompt's a_k."""
    from bestk.kappo import calibrate

    values, logits = BANDITS["binary"]
    N, K = 4, len(values)
    D = K**N
    cal = calibrate({p: [1, 0, 0, 1, 0, 0, 0, 1] for p in range(D)}, k=2, beta=0.1)
    a_k = float(cal.get("a_k", [0])[0])
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    draws = np.array(list(itertools.product(range(K), repeat=N)))
    rewards = values[draws].reshape(-1)
    labels = np.repeat(np.arange(D), N)  # one calibrated prompt id per draw (group)
    A = bestk.advantages("kappo_grpo", rewards, labels, calibration=cal).reshape(D, N)
    score = np.eye(K)[draws] - pi
    got = pi[draws].prod(1) @ (A[:, :, None] * score).mean(1)
    grpo = expected_estimate("grpo", {}, N, logits, values)
    np.testing.assert_allclose(got, a_k * grpo, atol=1e-12, rtol=1e-12)
    pass2 = exact_gradient(best_at(2), N, logits, values)
    assert np.abs(got - pass2).max() > 1e-3 and np.abs(got / a_k - pass2).max() > 1e-3


def test_loo_max_std_scaling_is_not_the_best_at_n_gradient():
    """The std-normalised leave-one-out max (verl's grpo_passk default) claims nothing: its
    expectation is measurably not ``grad best@N / N``, though it points the same way."""
    values, logits = BANDITS["graded_ties_negative"]
    N = 4
    got = expected_estimate("loo_max", {"scale": "std"}, N, logits, values)
    want = exact_gradient(best_at_n(), N, logits, values)
    cos = got @ want / np.linalg.norm(got) / np.linalg.norm(want)
    assert np.abs(got - want).max() > 1e-3 and cos > 0.5


def binary_pass_rate(logits_np: np.ndarray, values: np.ndarray) -> tuple[float, np.ndarray]:
    """``(p, grad p)`` of a binary bandit: the success probability and its autograd gradient."""
    logits = torch.tensor(logits_np, dtype=torch.float64, requires_grad=True)
    p = best_at_k_closed_form(logits, values, 1)
    p.backward()
    return p.item(), logits.grad.numpy()


def passk_training_update(k, eps, N, logits):
    """``(expected update, omega(p) grad p, grad pass@k, p)`` on the binary bandit."""
    values = BANDITS["binary"][0]
    p, grad_p = binary_pass_rate(logits, values)
    opts = {"k": k, "eps": eps}
    got = expected_estimate("passk_training", opts, N, logits, values)
    omega = estimator_info("passk_training").binary_prompt_weight(p, N, opts)
    return got, omega * grad_p, exact_gradient(best_at(k), N, logits, values), p


PASS_RATE_LOGITS = (BANDITS["binary"][1], np.array([0.8, 0.1, -0.5, 0.3]))


@pytest.mark.parametrize("k, N, eps", [(1, 4, 1e-6), (2, 4, 1e-6), (2, 4, 0.0), (2, 5, 1e-6),
                                       (3, 5, 1e-6), (3, 5, 0.0)])
def test_passk_training_expectation_is_its_prompt_weight_not_grad_pass_at_k(k, N, eps):
    """passk_training claims no objective; what it claims (its registry's prompt weight): the
    exact expected update on 0/1 rewards is ``omega(p) grad p``. For ``N >= k + 2`` that is
    not pass@k's gradient ``k (1-p)^(k-1) grad p``, nor a fixed multiple of it: the ratio
    changes with ``p`` (a per-prompt reweighting)."""
    assert estimator_info("passk_training").objective_for({"k": k}) is None
    ratios = []
    for logits in PASS_RATE_LOGITS:
        got, predicted, pass_k, p = passk_training_update(k, eps, N, logits)
        np.testing.assert_allclose(got, predicted, atol=1e-12, rtol=1e-10)
        assert np.abs(got - pass_k).max() > 1e-3
        ratios.append(float(np.linalg.norm(got) / np.linalg.norm(pass_k)))
    assert abs(ratios[0] - ratios[1]) > 1e-3 * max(ratios)


@pytest.mark.parametrize("k", [2, 3])
def test_passk_training_is_a_multiple_of_grad_pass_at_k_at_n_k_plus_1_and_zero_at_n_k(k):
    """The edge cases of the group size: with ``N = k + 1`` only groups with one success have
    ``sigma > 0``, so the update is a constant multiple ``A_pos(K=1) / k`` of ``grad pass@k``;
    with ``N = k`` every group has ``R`` in {0, 1}: no update at all."""
    from bestk.estimators.passk_training import count_advantages

    N = k + 1
    scale = count_advantages(N, k)[0][1] / k  # A_pos of a group with one success, over k
    for logits in PASS_RATE_LOGITS:
        got, predicted, pass_k, _ = passk_training_update(k, 1e-6, N, logits)
        np.testing.assert_allclose(got, predicted, atol=1e-12, rtol=1e-10)
        np.testing.assert_allclose(got, scale * pass_k, atol=1e-12, rtol=1e-10)
        zero, omega_zero, _, _ = passk_training_update(k, 1e-6, k, logits)
        assert not zero.any() and not omega_zero.any()
