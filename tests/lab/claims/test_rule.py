"""bestk.lab.claims.rule: the verdict rule of one arm on given test results (no power
guard hides a significant opposite result, "not reproduced" is an equivalence-style
judgement against the SESOI, a claim that b fails to train has that premise judged as part
of it, a significant effect below the SESOI is labelled so, a ceiling is not a null, and the
robust flag is n/a where the sign-flip test cannot reach alpha)."""

from __future__ import annotations

import math

import pytest

from bestk.lab.claims.rule import (
    ALPHA,
    claimed_interval,
    inconclusive_reasons,
    robust_flag,
    seed_headroom,
    sign_flip_floor_holm,
    stall_premise,
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
    # ... and on a claim that b fails to train, whatever b's progress
    for status in ("holds", "refuted", "undecided"):
        v, _ = verdict(-0.3, 1e-4, "greater", ci95=(-0.4, -0.2), sesoi=0.02,
                       premise=(status, "b's progress"))
        assert v == "contradicted", status
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


def test_the_premise_that_b_fails_to_train_is_judged_as_part_of_the_claim():
    """A claim that b (REINFORCE) fails to make progress where a learns. The old rule made
    an arm whose b did not train inconclusive (sparse-n16: RLOO moved 1.9e-4 [7.7e-5, 3.1e-4]
    in pass@1, the premise holding, so the arm could never be reproduced) and judged an arm
    whose b trained as any other (sparse-n64: "reproduced" although b trained). Now the
    premise is part of the claim."""
    holds = stall_premise((7.7e-5, 3.1e-4), 0.02, "greater")
    assert holds[0] == "holds" and "below the SESOI" in holds[1]
    assert stall_premise((0.025, 0.04), 0.02, "greater")[0] == "refuted"
    assert stall_premise((0.0196, 0.0235), 0.02, "greater")[0] == "undecided"  # sparse-n64
    assert stall_premise((-0.04, -0.03), 0.02, "less")[0] == "refuted"  # a "less" metric
    assert stall_premise(None, 0.02, "greater") is None  # no start to compare with
    worse_secondary = [("pass@64", -0.01, 1e-6, "greater")]
    # the premise holds: a - b decides, b's (untrained) secondaries judge nothing
    v, why = verdict(0.036, 8.6e-13, "greater", worse_secondary, ci95=(0.033, 0.039),
                     sesoi=0.02, premise=holds)
    assert v == "reproduced" and "premise holds" in why, why
    # without the premise (another claim) the worse secondary still counts
    assert verdict(0.036, 8.6e-13, "greater", worse_secondary)[0] == "not reproduced"
    # b trained: the claim's premise is refuted, whatever a - b shows
    refuted = stall_premise((0.03, 0.05), 0.02, "greater")
    v, why = verdict(0.07, 4e-13, "greater", ci95=(0.06, 0.08), sesoi=0.02, premise=refuted)
    assert v == "not reproduced" and "refuted" in why
    # b's progress undecided: inconclusive, significant or not
    undecided = stall_premise((0.0196, 0.0235), 0.02, "greater")
    for p, ci in ((4e-13, (0.06, 0.08)), (0.6, (-0.001, 0.003))):
        v, why = verdict(0.07, p, "greater", ci95=ci, sesoi=0.02, premise=undecided)
        assert v == "inconclusive" and "neither shown nor refuted" in why
    # the premise holds and a - b is null: judged against the SESOI as usual
    v, _ = verdict(0.001, 0.6, "greater", ci95=(-0.001, 0.003), sesoi=0.02, premise=holds)
    assert v == "not reproduced"


def test_a_significant_effect_below_its_sesoi_is_not_plainly_reproduced():
    """kappo-grpo-binary-passk@digits-binary in the committed data: +0.017 [0.007, 0.028],
    Holm p 0.043, SESOI 0.02: significant, but smaller than the smallest effect of interest.
    The old rule said "reproduced"."""
    v, why = verdict(0.0172, 0.043, "greater", ci95=(0.0065, 0.0278), sesoi=0.02)
    assert v == "significant, below SESOI" and "below the SESOI 0.020" in why
    # at or above the SESOI: reproduced; a "less" claim counts b - a
    assert verdict(0.021, 0.01, "greater", ci95=(0.01, 0.03), sesoi=0.02)[0] == "reproduced"
    assert verdict(-0.01, 0.01, "less", ci95=(-0.02, -0.002),
                   sesoi=0.02)[0] == "significant, below SESOI"
    # non-inferiority primaries (a - b + margin) and A/A controls keep their own labels
    assert verdict(0.01, 0.01, "greater", ci95=(0.002, 0.02), sesoi=0.02,
                   margin_claim=True)[0] == "reproduced"
    assert verdict(0.01, 0.01, "greater", ci95=(0.002, 0.02), control=True)[0] == "reproduced"


def test_a_ceiling_is_not_a_null():
    """argmaxrl-bestk@bandit-negative in the committed data: b's mean best@32 leaves 0.029 to
    the bound 0.5, but its median seed only 0.017 (most seeds sit at 0.47-0.49, a few far
    below): no effect of interest fits the typical seed, so a null there is a ceiling. The
    old rule took the mean's headroom and said "not reproduced"."""
    b = [0.484] * 40 + [0.47] * 14 + [0.34, 0.32, 0.41, 0.40, 0.45, 0.46, 0.44, 0.43, 0.42,
                                      0.45]
    mean_room = 0.5 - sum(b) / len(b)
    assert mean_room > 0.02
    room = seed_headroom(b, (-2.0, 0.5), "greater")
    assert room == pytest.approx(0.5 - 0.484) and room < 0.02
    assert "no effect of interest fits" in inconclusive_reasons(room, True, 0.02)[0]
    assert inconclusive_reasons(mean_room, True, 0.02) == []  # the old rule's input
    # symmetric: a "less" claim measures the room to the lower bound; the mean can be the
    # smaller one too
    assert seed_headroom([0.1, 0.1, 0.9], (0.0, 1.0), "less") == pytest.approx(0.1)
    assert seed_headroom([0.5, 0.6, 0.9], (0.0, 1.0), "greater") == pytest.approx(1 - 2 / 3)
    with pytest.raises(ValueError, match="no seeds"):
        seed_headroom([], (0.0, 1.0), "greater")


def test_the_guards_of_the_rule():
    assert type_m_reasons(0.19, 0.02) == ["MDE 0.190 > the paper's effect 0.020"]
    assert type_m_reasons(0.01, 0.02) == [] and type_m_reasons(0.3, None) == []
    # b's headroom below the SESOI: no effect of interest fits (not on "a matches b" claims)
    assert "no effect of interest fits" in inconclusive_reasons(0.014, True, 0.02)[0]
    assert inconclusive_reasons(0.014, True, 0.02, margin_claim=True) == []
    assert inconclusive_reasons(0.2, True, 0.02) == []
    with pytest.raises(ValueError, match="sesoi"):
        stall_premise((0.0, 0.1), -1.0, "greater")


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
