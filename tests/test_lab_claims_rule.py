"""bestk.lab.claims.rule: the verdict rule of one arm on given test results (no power
guard hides a significant opposite result, "not reproduced" is an equivalence-style
judgement against the SESOI, a baseline that did not train cannot judge a claim that it does
not train, and the robust flag is n/a where the sign-flip test cannot reach alpha)."""

from __future__ import annotations

import math

import pytest

from bestk.lab.claims.rule import (
    ALPHA,
    claimed_interval,
    inconclusive_reasons,
    robust_flag,
    sign_flip_floor_holm,
    stall_reasons,
    type_m_reasons,
    verdict,
)
from bestk.stats import holm, sign_flip_min_p

TYPE_M = ["MDE 0.191 > the paper's effect 0.020"]


def test_a_significant_opposite_difference_is_contradicted_whatever_the_mde():
    """kappo-apo-matches-pkpo n = 1 in the committed data: a - b + margin = -0.49
    [-0.56, -0.42], Holm p 1.9e-5, MDE 0.19 > the 0.02 margin: a type M guard protects a
    significant result in the claimed direction only, never one against the claim."""
    v, why = verdict(-0.49, 1.9e-5, "greater", ci95=(-0.56, -0.42), sesoi=0.02,
                     type_m=TYPE_M)
    assert v == "contradicted", why
    assert "whatever the power" in why and TYPE_M[0] in why
    # the same in a "less" claim: significantly higher than claimed
    v, _ = verdict(0.3, 1e-4, "less", ci95=(0.2, 0.4), sesoi=0.02, type_m=TYPE_M)
    assert v == "contradicted"
    # ... and on a claim that b fails to train, with b that did not train
    v, _ = verdict(-0.3, 1e-4, "greater", ci95=(-0.4, -0.2), sesoi=0.02, stalled=["b stalled"])
    assert v == "contradicted"
    # the guard still keeps a significant result in the claimed direction from standing
    v, why = verdict(0.49, 1.9e-5, "greater", ci95=(0.42, 0.56), sesoi=0.02, type_m=TYPE_M)
    assert v == "inconclusive" and "type M" in why
    # a design that cannot support any verdict (untuned rate, no training) hides both ways
    v, why = verdict(-0.49, 1.9e-5, "greater", design=["lr at the edge"])
    assert v == "inconclusive" and "opposite direction" in why


def test_not_reproduced_only_when_the_interval_ends_below_the_sesoi():
    """A non-significant primary: not reproduced when its 95% interval (claimed direction)
    ends below the SESOI, inconclusive when it reaches it, whatever the MDE."""
    straddle = verdict(0.005, 0.6, "greater", ci95=(-0.02, 0.03), sesoi=0.02)
    assert straddle[0] == "inconclusive" and "not excluded" in straddle[1]
    below = verdict(0.005, 0.6, "greater", ci95=(-0.01, 0.019), sesoi=0.02)
    assert below[0] == "not reproduced" and "every effect of interest is excluded" in below[1]
    # at the SESOI exactly an effect of interest is still possible
    assert verdict(0.005, 0.6, "greater", ci95=(-0.01, 0.02), sesoi=0.02)[0] == "inconclusive"
    # a "less" claim counts the interval of b - a: [-0.01, 0.03] -> reaches 0.03
    assert verdict(-0.005, 0.6, "less", ci95=(-0.03, 0.01), sesoi=0.02)[0] == "inconclusive"
    assert verdict(0.005, 0.6, "less", ci95=(-0.001, 0.01), sesoi=0.02)[0] == "not reproduced"
    # significant opposite intervals far below the SESOI are contradicted, not "not reproduced"
    assert verdict(-0.2, 0.001, "greater", ci95=(-0.3, -0.1), sesoi=0.02)[0] == "contradicted"
    # an underpowered reason (b's headroom, b did not move) keeps it inconclusive
    v, why = verdict(0.0, 0.6, "greater", ci95=(-0.01, 0.01), sesoi=0.02,
                     underpowered=["b did not move"])
    assert v == "inconclusive" and "absence" in why
    # an A/A control is never inconclusive and has no SESOI
    assert verdict(0.0, 0.6, "greater", control=True)[0] == "not reproduced"


def test_bad_input_to_the_rule_is_a_value_error():
    with pytest.raises(ValueError, match="pass ci95 and sesoi"):
        verdict(0.01, 0.5, "greater")
    with pytest.raises(ValueError, match="pass ci95 and sesoi"):
        verdict(0.01, 0.5, "greater", ci95=(-0.1, 0.1))
    for bad in (0.0, -0.02, math.nan, math.inf):
        with pytest.raises(ValueError, match="sesoi"):
            verdict(0.01, 0.5, "greater", ci95=(-0.1, 0.1), sesoi=bad)
    with pytest.raises(ValueError, match="ci95"):
        verdict(0.01, 0.5, "greater", ci95=(0.1, -0.1), sesoi=0.02)
    with pytest.raises(ValueError, match="ci95"):
        verdict(0.01, 0.5, "greater", ci95=(math.nan, 0.1), sesoi=0.02)
    with pytest.raises(ValueError, match="primary_p_holm"):
        verdict(0.01, 1.5, "greater", ci95=(-0.1, 0.1), sesoi=0.02)
    with pytest.raises(ValueError, match="direction"):
        claimed_interval((0.0, 1.0), "up")
    assert claimed_interval((-0.1, 0.3), "less") == (-0.3, 0.1)


def test_a_baseline_that_did_not_train_cannot_judge_a_claim_that_it_does_not_train():
    """sparse-n16 in the committed data: RLOO moved 1.9e-4 [7.7e-5, 3.1e-4] in pass@1 from its
    uniform start, far below the 0.02 SESOI; SoftmaxGRPO beat it on pass@1 and lost pass@64 to
    its untrained spread, which made the arm "not reproduced" before."""
    stalled = stall_reasons((7.7e-5, 3.1e-4), 0.02, "greater")
    assert len(stalled) == 1 and "below the SESOI" in stalled[0]
    assert stall_reasons((0.0196, 0.0235), 0.02, "greater") == []  # sparse-n64: it trained
    assert stall_reasons((-0.03, -0.01), 0.02, "less") == []  # a "less" metric falling 0.03
    assert stall_reasons(None, 0.02, "greater") == []  # no start to compare with
    worse_secondary = [("pass@64", -0.01, 1e-6, "greater")]
    assert verdict(0.036, 8.6e-13, "greater", worse_secondary)[0] == "not reproduced"
    v, why = verdict(0.036, 8.6e-13, "greater", worse_secondary, stalled=stalled)
    assert v == "inconclusive" and "did not train" in why and "claimed direction" in why
    v, _ = verdict(0.001, 0.6, "greater", ci95=(-0.001, 0.003), sesoi=0.02, stalled=stalled)
    assert v == "inconclusive"


def test_the_guards_of_the_rule():
    assert type_m_reasons(0.19, 0.02) == ["MDE 0.190 > the paper's effect 0.020"]
    assert type_m_reasons(0.01, 0.02) == [] and type_m_reasons(0.3, None) == []
    # b's headroom below the SESOI: no effect of interest fits (not on "a matches b" claims)
    assert "no effect of interest fits" in inconclusive_reasons(0.014, True, 0.02)[0]
    assert inconclusive_reasons(0.014, True, 0.02, margin_claim=True) == []
    assert inconclusive_reasons(0.2, True, 0.02) == []
    with pytest.raises(ValueError, match="sesoi"):
        stall_reasons((0.0, 0.1), -1.0, "greater")


@pytest.mark.parametrize("n", range(1, 11))
def test_the_sign_flip_floor_and_the_robust_flag_at_alpha(n):
    """The smallest two-sided sign-flip p with n seeds is 2/2^n, so at alpha = 0.05 it cannot
    be significant with n <= 5 seeds whatever the data: robust is then n/a, not yes."""
    floor = sign_flip_min_p(n)
    assert floor == pytest.approx(min(1.0, 2.0 / 2**n))
    alone = sign_flip_floor_holm([0.5], 0, floor)  # a family of one: no correction
    assert alone == pytest.approx(floor)
    same = robust_flag("not reproduced", "not reproduced", alone, n, 0.05)
    differ = robust_flag("reproduced", "not reproduced", alone, n, 0.05)
    if n <= 5:
        assert same == differ == f"n/a (cannot reach α with {n} seeds)"
    else:
        assert same is True and differ is False


def test_the_floor_after_holm_depends_on_the_rest_of_the_family():
    """8 seeds (floor 2/256 = 0.0078) in a family of 45: behind 20 smaller p-values Holm
    multiplies it by 25 (0.195, n/a); as the only test it stays 0.0078 (reachable)."""
    family = [1e-9] * 20 + [0.5] * 25
    got = sign_flip_floor_holm(family, 30, sign_flip_min_p(8))
    assert got == pytest.approx(25 * 2 / 256)
    assert got == pytest.approx(holm([*family[:30], 2 / 256, *family[31:]])[30])
    assert robust_flag("reproduced", "reproduced", got, 8) == "n/a (cannot reach α with 8 seeds)"
    assert robust_flag("reproduced", "reproduced", 2 / 256, 8) is True
    assert ALPHA == 0.05
    with pytest.raises(ValueError, match="index"):
        sign_flip_floor_holm(family, 45, 0.01)
    with pytest.raises(ValueError, match="floor"):
        sign_flip_floor_holm(family, 0, 0.0)
    with pytest.raises(ValueError, match="seeds"):
        robust_flag("reproduced", "reproduced", 0.01, 0)
