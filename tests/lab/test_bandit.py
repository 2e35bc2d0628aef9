"""The bandit lab: exact enumeration checked by brute force and Monte Carlo, the bias table's
claims, closed-form best@k, and the learning curves."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import bestk
from bestk.estimators.objectives import best_at
from bestk.lab.bandit import (
    BANDITS,
    BIAS_SPECS,
    CURVE_SPECS,
    Bandit,
    BanditConfig,
    EstimatorSpec,
    bias_row,
    exact_moments,
    learning_curves,
    multisets,
    objective_gradient,
    ordered_moments,
)
from bestk.lab.common.exact import best_at_k_exact, j_objective

GRADED = torch.tensor([1.0, 0.5, 0.5, -0.25], dtype=torch.float64)
LOGITS = torch.tensor([-1.0, 0.3, 0.1, 0.6], dtype=torch.float64)


def test_multisets_are_all_count_vectors():
    for k_arms, n in [(3, 4), (4, 5), (8, 4)]:
        c = multisets(k_arms, n)
        assert c.shape == (math.comb(n + k_arms - 1, k_arms - 1), k_arms)
        assert bool((c.sum(1) == n).all()) and bool((c >= 0).all())
        assert len({tuple(r) for r in c.tolist()}) == c.shape[0]


@pytest.mark.parametrize(
    "spec",
    [
        EstimatorSpec("a", "argmaxrl", {"baseline": "loo"}),
        EstimatorSpec("g", "grpo", {}),
        EstimatorSpec("s", "softmax_grpo", {"tau": 0.3}),
        EstimatorSpec("p", "pkpo", {"k": 2, "variant": "sloo"}),
    ],
)
def test_multiset_reduction_matches_all_ordered_draws(spec):
    """Collapsing K^N ordered draws onto multisets (ties included) changes nothing."""
    a = exact_moments(spec, LOGITS, GRADED, 5)
    b = ordered_moments(spec, LOGITS, GRADED, 5)
    assert float(a["total_prob"]) == pytest.approx(1.0, abs=1e-12)
    assert float(b["total_prob"]) == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(a["mean"], b["mean"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(a["var"], b["var"], rtol=1e-10, atol=1e-12)


def test_exact_mean_matches_monte_carlo():
    """Independent of enumeration: the sample mean of g_hat over many groups."""
    spec = EstimatorSpec("a", "argmaxrl", {"baseline": "loo"})
    n, groups = 4, 200_000
    exact = exact_moments(spec, LOGITS, GRADED, n)
    probs = torch.softmax(LOGITS, -1)
    gen = torch.Generator().manual_seed(1)
    draws = torch.multinomial(probs.expand(groups, 4), n, replacement=True, generator=gen)
    adv = bestk.advantages("argmaxrl", GRADED[draws])
    score = torch.nn.functional.one_hot(draws, 4).double() - probs
    g = (adv[..., None] * score).sum(1) / n
    se = g.std(0) / math.sqrt(groups)
    assert bool(((g.mean(0) - exact["mean"]).abs() < 5 * se).all())
    # variance too (trace of the covariance), within a few percent
    assert float(g.var(0).sum()) == pytest.approx(float(exact["var"]), rel=0.03)


def test_best_at_k_exact_matches_brute_force():
    probs = torch.softmax(LOGITS, -1)
    for k in (1, 2, 3):
        brute = 0.0
        for t in itertools.product(range(4), repeat=k):
            brute += float(torch.prod(probs[list(t)])) * float(GRADED[list(t)].max())
        assert float(best_at_k_exact(probs, GRADED, [k])[0]) == pytest.approx(brute, abs=1e-12)
    # binary: pass@k = 1 - (1-p)^k
    v = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    p = float(probs[0] + probs[2])
    got = best_at_k_exact(probs, v, [1, 4, 16])
    torch.testing.assert_close(got, torch.tensor([1 - (1 - p) ** k for k in (1, 4, 16)],
                                                 dtype=torch.float64))
    # J_N = sum_k best@k / k
    j = sum(float(best_at_k_exact(probs, GRADED, [k])[0]) / k for k in range(1, 5))
    assert float(j_objective(probs, GRADED, 4)) == pytest.approx(j)
    with pytest.raises(ValueError, match="ks"):
        best_at_k_exact(probs, GRADED, [0])


def test_best_at_1_gradient_is_the_analytic_one():
    """d E[r] / d theta_a = pi_a (v_a - E[v]) for a softmax policy."""
    probs = torch.softmax(LOGITS, -1)
    expected = probs * (GRADED - (probs * GRADED).sum())
    torch.testing.assert_close(objective_gradient(best_at(1), LOGITS, GRADED, 4), expected)
    torch.testing.assert_close(objective_gradient(None, LOGITS, GRADED, 4), expected)


def test_bias_table_claims_hold_and_biased_ones_show():
    for b in BANDITS.values():
        for n in (4,):
            for spec in BIAS_SPECS:
                if not spec.applies(b, n):
                    continue
                row = bias_row(spec, b, n)
                if spec.objective is None or "vs J_N" in spec.label:
                    assert row["rel_bias"] > 0.01, (b.name, spec.label, row["rel_bias"])
                else:
                    assert row["rel_bias"] < 1e-9, (b.name, spec.label, row["rel_bias"])
                assert row["var"] > 0


def test_binary_implied_weights_match_table_1():
    """On binary rewards E[g_hat] = omega(p) grad p with known omega (SoftmaxGRPO Table 1):
    RLOO 1, Dr.GRPO 1 - 1/N, MaxRL(T=N) (1-(1-p)^N)/p, MaxRL mean-baseline T = N-1."""
    b = BANDITS["binary"]
    p = sum(pi for pi, r in zip(b.init_probs, b.rewards, strict=True) if r == 1.0)
    for n in (4, 8):
        w = {s.label: bias_row(s, b, n)["implied_weight"] for s in BIAS_SPECS if s.applies(b, n)}
        assert w["rloo"] == pytest.approx(1.0)
        assert w["grpo(scale=none)"] == pytest.approx(1 - 1 / n)
        assert w["maxrl"] == pytest.approx((1 - (1 - p) ** n) / p)
        assert w["argmaxrl(mean)"] == pytest.approx((1 - (1 - p) ** (n - 1)) / p)
        assert w["pkpo(k=2,s)"] == pytest.approx(2 * (1 - p))  # d pass@2 / dp


def test_every_predicted_prompt_weight_is_the_enumerated_one():
    """The registry's binary prompt weight (from each claimed objective, or SoftmaxGRPO's
    Eq. 4) equals the weight measured by exact enumeration, for every spec that has one; GRPO
    (std) has none."""
    b = BANDITS["binary"]
    for n in (4, 8):
        for spec in BIAS_SPECS:
            if not spec.applies(b, n):
                continue
            row = bias_row(spec, b, n)
            if spec.label == "grpo":
                assert row["theory_weight"] is None
            else:
                assert row["implied_weight"] == pytest.approx(row["theory_weight"], rel=1e-9), \
                    (spec.label, n)


def test_learning_curves_shape_determinism_and_progress():
    b = BANDITS["graded"]
    kw = dict(n=4, steps=40, seeds=4, lr=0.05, ks=(1, 4), eval_every=10, seed=3)
    a = learning_curves(b, CURVE_SPECS, **kw)
    again = learning_curves(b, CURVE_SPECS, **kw)
    assert a == again
    assert a["rollouts"] == [0, 40, 80, 120, 160]
    assert "maxrl" not in a["curves"]  # binary only
    for label, c in a["curves"].items():
        arr = np.asarray(c)
        assert arr.shape == (5, 4, 2)
        assert bool((arr[..., 1] >= arr[..., 0] - 1e-12).all())  # best@4 >= best@1
        assert arr[-1, :, 0].mean() > arr[0, :, 0].mean(), label


def test_bandit_validation():
    with pytest.raises(ValueError, match="unknown bandit"):
        BanditConfig(bandits=("nope",)).validate()
    with pytest.raises(ValueError, match="steps"):
        BanditConfig(steps=0).validate()
    with pytest.raises(ValueError, match="sum to 1"):
        Bandit("x", (1.0, 0.0), (0.5, 0.6), "bad")


def test_softmax_grpo_implied_weight_matches_theory_eq4():
    """The enumerated SoftmaxGRPO weight equals bestk.theory's finite-M omega (Eq. 4) / N."""
    b = BANDITS["binary"]
    for tau in (0.1, 0.3, 1.0):
        for n in (4, 8):
            row = bias_row(EstimatorSpec("s", "softmax_grpo", {"tau": tau}), b, n)
            assert row["implied_weight"] == pytest.approx(row["theory_weight"], rel=1e-9)


def test_sweep_a_a_control_and_per_seed_data(tmp_path):
    from bestk.lab.bandit import run_bandit, testbed_data

    cfg = BanditConfig.fast()
    res = run_bandit(cfg, tmp_path, progress=False)
    data = testbed_data(json_roundtrip(res))
    assert {"bandit-binary", "bandit-graded", "bandit-negative", "bandit-exact"} == set(data)
    tb = data["bandit-binary"]
    sweep = res["sweep"]["binary"]
    assert set(sweep["selected"]) == set(tb["methods"])
    for lb, m in tb["methods"].items():
        grid = sweep["grids"][m["config"].get("control_of") or lb]
        assert m["config"]["lr"] == sweep["selected"][lb] and m["config"]["lr"] in grid
        assert len(m["end"]["pass@4"]) == cfg.seeds
        # the metric is best@k averaged over the learning curve, start = initial policy
        arr = np.asarray(res["curves"]["binary"]["curves"][lb])[:, :, 1]
        assert m["end"]["best@4"] == pytest.approx(arr.mean(0).tolist())
        assert m["start"]["best@4"] == pytest.approx(arr[0].tolist())
    aa, grpo = tb["methods"]["grpo (A/A)"], tb["methods"]["grpo"]
    assert aa["config"]["lr"] == grpo["config"]["lr"] and aa["config"]["control_of"] == "grpo"
    assert aa["start"] == grpo["start"] and aa["end"] != grpo["end"]
    assert "pass@4" not in data["bandit-graded"]["methods"]["grpo"]["end"]  # not 0/1 rewards
    assert all("expected_grad" not in r for r in data["bandit-exact"]["bias"])


def json_roundtrip(x):
    import json

    return json.loads(json.dumps(x))


def test_exploratory_arms_leave_the_other_curves_as_they_were(tmp_path, monkeypatch):
    """The exploratory arms (no claim names them) are swept and trained as a batch of their
    own on seed streams of their own: the other estimators' sweeps and curves are the same,
    bit for bit, with and without them; binary-only passk_training runs on the binary bandit
    only; their per-seed data are marked exploratory."""
    from bestk.lab import bandit as lab_bandit

    cfg = BanditConfig.fast()
    res = json_roundtrip(lab_bandit.run_bandit(cfg, tmp_path / "with", progress=False))
    monkeypatch.setattr(lab_bandit, "EXPLORATORY_SPECS", [])
    alone = json_roundtrip(lab_bandit.run_bandit(cfg, tmp_path / "without", progress=False))
    for b in cfg.bandits:
        labels = set(alone["curves"][b]["curves"])
        for lb in labels:
            assert res["curves"][b]["curves"][lb] == alone["curves"][b]["curves"][lb], (b, lb)
            assert res["sweep"][b]["selected"][lb] == alone["sweep"][b]["selected"][lb]
        for lb, scores in alone["sweep"][b]["scores"].items():
            assert res["sweep"][b]["scores"][lb] == scores, (b, lb)
        extra = set(res["curves"][b]["curves"]) - labels
        assert extra == ({"passk_training(k=4)", "loo_max"} if b == "binary" else {"loo_max"})
        for lb in extra:
            assert res["sweep"][b]["selected"][lb] in res["sweep"][b]["grids"][lb]
    monkeypatch.undo()
    data = lab_bandit.testbed_data(res)
    for tid in ("bandit-binary", "bandit-graded"):
        methods = data[tid]["methods"]
        assert methods["loo_max"]["config"]["exploratory"] is True
        assert methods["grpo"]["config"]["exploratory"] is False
