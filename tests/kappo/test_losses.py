"""bestk.kappo.losses: @k-A*PO and @k-DPO against hand computation and the closed-form optimum."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bestk.kappo import binary_calibration, calibrate, kappo_apo_loss, kappo_dpo_loss


def test_apo_loss_by_hand_and_gradient():
    logp = torch.tensor([-3.0, -1.5, -7.25], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-2.0, -2.5, -7.0], dtype=torch.float64)
    tgt = torch.tensor([0.3, -0.05, 0.0], dtype=torch.float64)
    beta = 0.1
    hand = [(t - beta * (lp - rf)) ** 2 for t, lp, rf in zip(
        [0.3, -0.05, 0.0], [-3.0, -1.5, -7.25], [-2.0, -2.5, -7.0], strict=True)]
    loss = kappo_apo_loss(logp, ref, tgt, beta)
    assert loss.item() == pytest.approx(sum(hand) / 3, rel=1e-14)
    np.testing.assert_allclose(
        kappo_apo_loss(logp, ref, tgt, beta, reduction="none").detach().numpy(), hand, rtol=1e-14
    )
    assert kappo_apo_loss(logp, ref, tgt, beta, reduction="sum").item() == pytest.approx(sum(hand))
    loss.backward()
    resid = tgt - beta * (logp.detach() - ref)
    np.testing.assert_allclose(logp.grad.numpy(), (-2 * beta * resid / 3).numpy(), rtol=1e-13)


@pytest.mark.parametrize("k,beta", [(4, 0.1), (2, 0.5), (1, 0.2)])
def test_apo_loss_vanishes_exactly_at_pass_at_k_optimum(k, beta):
    """For pi = pi* = pi_ref exp((a_k R - beta log Z)/beta), every residual is zero; any other
    policy has positive loss (Eq. 14 with the KAPPO reward)."""
    rng = np.random.default_rng(k)
    pi_ref = rng.dirichlet(np.ones(8))
    R = np.array([1, 0, 1, 0, 0, 0, 1, 0.0])
    cal = binary_calibration(pi_ref @ R, k, beta)
    target = torch.tensor(cal.a_k * R - cal.beta_log_z)
    log_star = np.log(pi_ref) + (cal.a_k * R - cal.beta_log_z) / beta
    assert np.exp(log_star).sum() == pytest.approx(1.0, abs=1e-12)  # pi* is normalised
    ref = torch.tensor(np.log(pi_ref))
    at_opt = kappo_apo_loss(torch.tensor(log_star), ref, target, beta)
    assert at_opt.item() < 1e-28
    assert kappo_apo_loss(ref.clone(), ref, target, beta).item() > 1e-6


def test_apo_targets_from_calibration():
    bank = {"a": [1, 0, 0, 0], "b": [1, 1, 1, 0]}
    cal = calibrate(bank, 2, 0.1)
    ids, r = ["a", "b", "b"], np.array([1.0, 0.0, 1.0])
    tgt = torch.as_tensor(cal.regression_target(ids, r))
    logp = torch.zeros(3, dtype=torch.float64)
    loss = kappo_apo_loss(logp, logp, tgt, 0.1, reduction="none")
    np.testing.assert_allclose(loss.numpy(), tgt.numpy() ** 2)


def test_dpo_loss_by_hand_with_per_prompt_beta():
    cw = torch.tensor([-1.0, -4.0], requires_grad=True, dtype=torch.float64)
    cl = torch.tensor([-2.0, -3.0], dtype=torch.float64)
    rw = torch.tensor([-1.5, -3.5], dtype=torch.float64)
    rl = torch.tensor([-1.5, -3.5], dtype=torch.float64)
    be = torch.tensor([0.5, 2.0], dtype=torch.float64)
    loss = kappo_dpo_loss(cw, cl, rw, rl, be, reduction="none")
    for i in range(2):
        m = (cw[i].item() - rw[i].item()) - (cl[i].item() - rl[i].item())
        assert loss[i].item() == pytest.approx(math.log1p(math.exp(-be[i].item() * m)), rel=1e-13)
    # scalar beta_eff broadcasts; mean reduction
    assert kappo_dpo_loss(cw, cl, rw, rl, 0.5).item() == pytest.approx(
        kappo_dpo_loss(cw, cl, rw, rl, torch.full((2,), 0.5, dtype=torch.float64)).item()
    )
    loss.sum().backward()
    sig = torch.sigmoid(-be * ((cw.detach() - rw) - (cl - rl)))
    np.testing.assert_allclose(cw.grad.numpy(), (-be * sig).numpy(), rtol=1e-12)


def test_dpo_loss_is_stable_for_large_margins():
    x = torch.tensor([500.0, -500.0], dtype=torch.float64)
    z = torch.zeros(2, dtype=torch.float64)
    loss = kappo_dpo_loss(x, z, z, z, 2.0, reduction="none")
    assert torch.isfinite(loss).all()
    assert loss[0].item() == pytest.approx(0.0, abs=1e-300)
    assert loss[1].item() == pytest.approx(1000.0)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: kappo_apo_loss(t([0.0, 1.0]), t([0.0]), t([0.0, 0.0]), 0.1), "ref_logps"),
        (lambda: kappo_apo_loss(t([0.0, math.nan]), t([0.0, 0.0]), t([0.0, 0.0]), 0.1), "finite"),
        (lambda: kappo_apo_loss(t([[0.0]]), t([[0.0]]), t([[0.0]]), 0.1), "1-D"),
        (lambda: kappo_apo_loss(t([]), t([]), t([]), 0.1), "empty"),
        (lambda: kappo_apo_loss(t([0.0]), t([0.0]), t([0.0]), 0.0), "beta"),
        (lambda: kappo_apo_loss(t([0.0]), t([0.0]), t([0.0]), 0.1, reduction="max"), "reduction"),
        (lambda: kappo_dpo_loss(t([0.0]), t([0.0]), t([0.0]), t([0.0]), -1.0), "beta_eff"),
        (lambda: kappo_dpo_loss(t([0.0]), t([0.0, 1.0]), t([0.0]), t([0.0]), 1.0), "rejected"),
        (lambda: kappo_dpo_loss(t([0.0]), t([0.0]), t([0.0]), t([math.inf]), 1.0), "finite"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_reexported_from_bestk_losses():
    import bestk.losses

    assert bestk.losses.kappo_apo_loss is kappo_apo_loss
    assert bestk.losses.kappo_dpo_loss is kappo_dpo_loss
