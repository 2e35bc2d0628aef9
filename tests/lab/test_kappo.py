"""``bestk lab kappo``: every KAPPO method on exact bandits converges to its derived limit.

* all (kind, k, method) cases of the fast run: total variation to the derived limit <= 1e-3,
  and to the closed form (Props. 4.1/4.2, 4.7) <= 1e-3 for every method but std-normalised
  @k-GRPO, whose different fixed point is tested instead (and is far from p* for k > 1);
* the ingredients checked independently: p* by brentq, the win-rate cells, the std-GRPO
  weight against an enumeration of bestk's own ``grpo`` estimator, W_11 of RLOO / Dr.GRPO;
* the CLI writes results.json / results.md and fails in one line on bad options.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import bestk
from bestk.cli import app
from bestk.lab import kappo as lab
from tests._kappo_ref import p_star_ref


@pytest.fixture(scope="module")
def fast_result():
    return lab.kappo_convergence(lab.KappoLabConfig.fast())


def test_every_case_converges_within_tolerance(fast_result):
    cases = fast_result["cases"]
    got = {(c["kind"], c["k"], c["method"]) for c in cases}
    want = {("binary", k, m) for k in (1, 2, 4) for m in lab.METHODS}
    want |= {("winrate", k, m) for k in (1, 2, 4) for m in ("apo", "rloo", "drgrpo", "direct")}
    assert got == want
    assert {(s["kind"], s["method"]) for s in fast_result["skipped"]} == {
        ("winrate", "dpo"), ("winrate", "kappo_grpo")}
    for c in cases:
        assert c["converged"] and c["passed"], c
        assert c["error"] <= lab.TOLERANCE
        if c["claims_closed_form"]:
            assert c["closed_form_error"] <= lab.TOLERANCE, c
        if c["kind"] == "binary":  # binary: TV is exactly the pass-rate gap (class conditionals
            assert c["pass_rate_error"] == pytest.approx(c["closed_form_error"], abs=1e-12)


def test_std_grpo_converges_elsewhere_for_k_above_1(fast_result):
    std = {c["k"]: c for c in fast_result["cases"] if c["method"] == "kappo_grpo"}
    assert all(c["error"] <= 1e-6 for c in std.values())  # reaches its own fixed point ...
    assert std[2]["closed_form_error"] > 0.05 and std[4]["closed_form_error"] > 0.05  # not p*


def test_binary_closed_form_matches_an_independent_solve():
    cfg = lab.KappoLabConfig.fast()
    for k in (1, 2, 4):
        prob = lab.binary_problem(cfg, k)
        for q, p in zip(prob.q, prob.p_star, strict=True):
            assert p == pytest.approx(p_star_ref(q, k, cfg.beta_binary), abs=1e-12)
        pi = prob.closed_form
        torch.testing.assert_close(pi.sum(-1), torch.ones(len(prob.q), dtype=torch.float64))
        # pi* / pi_ref = exp(a_k R / beta) / Z: the log-ratio gap between classes is a_k / beta.
        ell = (pi / prob.ref).log()
        a = prob.calibration.get("a_k", prob.prompt_ids)
        np.testing.assert_allclose((ell[:, 0] - ell[:, -1]).numpy(), a / cfg.beta_binary,
                                   rtol=1e-9)


def test_winrate_problem_uses_the_calibration_exactly():
    cfg = lab.KappoLabConfig(winrate_arms=64)
    prob = lab.winrate_problem(cfg, 2)
    assert prob.closed_form.sum().item() == pytest.approx(1.0, abs=1e-12)
    table = bestk.kappo.winrate_table(64, 2, cfg.beta_winrate)
    np.testing.assert_allclose(prob.adaptive[0].numpy(), table[1:], rtol=1e-12)  # T_j, j = rank


def test_std_grpo_weight_matches_bestks_estimator_by_enumeration():
    """omega_std(p) = E[(1/n) sum_i A_i (R_i/p - (1-R_i)/(1-p))] over all 2^n reward vectors,
    with bestk's own grpo advantages: the derivation's z-score formula is right."""
    n = 5
    patterns = np.array([[(m >> i) & 1 for i in range(n)] for m in range(2**n)], dtype=float)
    adv = np.asarray(bestk.advantages("grpo", patterns, eps=1e-6))
    for p in (0.07, 0.4, 0.93):
        prob = np.prod(np.where(patterns == 1, p, 1 - p), axis=1)
        score = np.where(patterns == 1, 1 / p, -1 / (1 - p))
        want = float((prob * (adv * score).sum(1)).sum() / n)
        assert lab.grpo_std_weight(p, n) == pytest.approx(want, rel=1e-10)


def test_linear_estimators_weights():
    assert lab._linear_weight("rloo", 8) == pytest.approx(1.0)
    assert lab._linear_weight("grpo", 8, scale="none") == pytest.approx(7 / 8)
    with pytest.raises(ValueError, match="not linear"):
        lab._linear_weight("grpo", 8)


def test_dpo_population_loss_is_minimised_at_the_closed_form():
    """The @k-DPO population loss has zero gradient at pi* and is larger a step away."""
    cfg = lab.KappoLabConfig.fast()
    prob = lab.binary_problem(cfg, 4)
    dyn = lab.expected_update("dpo", prob, cfg)
    theta = prob.closed_form.log()
    assert float(dyn.field(theta).abs().max()) < 1e-12
    bump = torch.zeros_like(theta)
    bump[:, 0] = 0.1
    assert bool((dyn.loss(theta + bump) > dyn.loss(theta)).all())


def test_config_validation():
    with pytest.raises(ValueError, match="ks"):
        lab.kappo_convergence(lab.KappoLabConfig(ks=(0,)))
    with pytest.raises(ValueError, match="unknown methods"):
        lab.kappo_convergence(lab.KappoLabConfig(methods=("sgd",)))
    with pytest.raises(ValueError, match="strictly between 0 and bank_size"):
        lab.kappo_convergence(lab.KappoLabConfig(successes=(0, 3)))
    with pytest.raises(ValueError, match="beta_binary"):
        lab.kappo_convergence(lab.KappoLabConfig(beta_binary=-1.0))


def test_cli_writes_results_and_fails_in_one_line(tmp_path):
    runner = CliRunner()
    out = tmp_path / "lab"
    res = runner.invoke(app, ["lab", "kappo", "--fast", "--quiet", "--ks", "2",
                              "--methods", "apo,kappo_grpo", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "3/3 cases within tolerance" in res.output
    data = json.loads((out / "results.json").read_text())
    assert data["tolerance"] == lab.TOLERANCE and len(data["cases"]) == 3
    assert all(math.isfinite(c["error"]) for c in data["cases"])
    assert "## binary" in (out / "results.md").read_text()
    bad = runner.invoke(app, ["lab", "kappo", "--fast", "--methods", "sgd", "--out", str(out)])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1].startswith("error: unknown methods")


@pytest.mark.parametrize(("floor", "converged"), [(1.5e-9, True), (1e-8, False)])
def test_natural_descent_counts_a_float64_fixed_point_by_its_mean_residual(floor, converged):
    """A row that no representable step can improve (here: a field whose residual is stuck
    at ``floor`` and a merit that every move raises) stops as converged exactly when its mean
    residual ``floor / A`` is below ``tol`` (the rounding floor of many arms), never before
    its step size has shrunk below what float64 can represent as a move."""
    theta0 = torch.ones(1, 4, dtype=torch.float64)
    g = torch.full((1, 4), floor / 4, dtype=torch.float64)
    dyn = lab.Dynamics(field=lambda th: g, loss=lambda th: ((th - theta0) ** 2).sum(-1))
    theta, steps, done = lab.natural_descent(dyn, theta0, step=0.5, tol=1e-9, max_steps=5000)
    assert bool(done[0]) is converged
    assert torch.equal(theta, theta0)  # every move was rejected
    assert steps[0] == 5000 if not converged else 20 < steps[0] < 5000
