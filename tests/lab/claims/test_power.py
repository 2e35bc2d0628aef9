"""Seeds from power (bestk.lab.claims.power): a pilot's claims document gives each claim arm's
seeds, checked against a direct power computation of the paired t-test."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
from scipy import integrate, stats

from bestk.lab.claims import TESTBEDS, evaluate_claims, power_plan
from tests.lab.claims.conftest import synthetic_data


def t_test_power(sd: float, effect: float, alpha: float, n: int) -> float:
    """The power of the two-sided paired t-test with ``n`` pairs as an integral over the
    sample variance: T = (Z + lambda) / sqrt(V / df), V ~ chi2(df), Z ~ N(0, 1),
    lambda = effect sqrt(n) / sd (no noncentral-t routine)."""
    df, lam = n - 1, effect * np.sqrt(n) / sd
    tc = stats.t.ppf(1 - alpha / 2, df)

    def density(v: float) -> float:
        s = np.sqrt(v / df)
        return float(stats.chi2.pdf(v, df) * (stats.norm.sf(tc * s - lam)
                                              + stats.norm.cdf(-tc * s - lam)))

    return float(integrate.quad(density, 0, np.inf)[0])


@functools.cache
def _pilot_doc(noise: float, seeds: int, effect: float):
    data = synthetic_data(effect, seeds=seeds, noise=noise)
    tb = data["smollm2"]  # the pilot: its first seeds only
    tb["seeds"] = tb["seeds"][:seeds]
    for m in tb["methods"].values():
        for side in ("start", "end"):
            m[side] = {k: v[:seeds] for k, v in m[side].items()}
    return evaluate_claims(data, min_seeds=seeds)


def pilot_doc(noise: float, seeds: int = 6, effect: float = 0.01):
    """A claims document judged on a ``seeds``-seed pilot of the smollm2 testbed (synthetic
    data, every other testbed complete); a fresh copy each call."""
    return copy.deepcopy(_pilot_doc(noise, seeds, effect))


@pytest.mark.parametrize("noise", [0.004, 0.03])
def test_each_arm_s_seeds_match_a_direct_power_computation(noise):
    doc = pilot_doc(noise)
    minimum = TESTBEDS["smollm2"].min_seeds
    plan = power_plan(doc, "smollm2", minimum)
    assert plan["pilot_seeds"] == 6 and plan["minimum"] == minimum
    arms = {e["id"]: e for e in doc["claims"]}
    expected = {e["id"] for e in doc["claims"] if e["testbed"] == "smollm2" and not e["control"]
                and e["verdict"] != "dropped"}  # an arm an amendment dropped needs no seeds
    assert {r["arm"] for r in plan["arms"]} == expected and expected
    for r in plan["arms"]:
        e = arms[r["arm"]]
        d = np.subtract(e["primary"]["per_seed_a"], e["primary"]["per_seed_b"])
        assert r["diffs"] == pytest.approx(d.tolist(), abs=1e-15)
        assert r["sd_diff"] == pytest.approx(float(d.std(ddof=1)), rel=1e-12)
        assert r["metric"] == "pass@16" and r["sesoi"] == e["sesoi"] > 0
        # the least n whose t-test has the power (the power rises with n)
        n, args = r["seeds_needed"], (r["sd_diff"], r["sesoi"], r["alpha"])
        assert t_test_power(*args, n) >= r["power"]
        assert n == 2 or t_test_power(*args, n - 1) < r["power"]
    top = max(r["seeds_needed"] for r in plan["arms"])
    assert plan["seeds"] == max(minimum, top)
    if top > minimum:  # the noisy pilot: its noisiest arm sets the grid's seeds
        assert noise == 0.03
        assert next(r for r in plan["arms"] if r["arm"] == plan["set_by"])["seeds_needed"] == top
    else:
        assert noise == 0.004 and plan["set_by"] is None and plan["seeds"] == minimum


def test_the_family_level_is_the_testbed_family_s():
    """The pilot is judged beside every other testbed, and its arms' level is alpha over its
    own Holm family (the pretrained testbed's, declared with its 4 claim arms and its A/A
    control: 5 tests, one of them dropped by amendment 2 and counted as not rejected), not
    over the toy testbeds' family, which it does not dilute."""
    doc = pilot_doc(0.03)
    plan = power_plan(doc, "smollm2", 12)
    fam = doc["families"]["pretrained"]
    assert len(plan["arms"]) + 1 + fam["not_rejected_by_amendment"] == fam["size"] == 5
    assert {r["alpha"] for r in plan["arms"]} == {0.05 / fam["size"]}
    assert doc["family"]["name"] == "toy" and doc["family"]["size"] > fam["size"]
    assert not set(fam["members"]) & set(doc["family"]["members"])


def test_bad_pilots_are_refused():
    doc = pilot_doc(0.004)
    with pytest.raises(ValueError, match="minimum number of seeds"):
        power_plan(doc, "smollm2", 1)
    with pytest.raises(ValueError, match="no judged claim arm on testbed 'nope'"):
        power_plan(doc, "nope", 12)
    pending = evaluate_claims({})  # nothing ran: every arm pending, none judged
    with pytest.raises(ValueError, match="no judged claim arm on testbed 'smollm2'"):
        power_plan(pending, "smollm2", 12)


def test_an_unreachable_sesoi_is_listed_and_does_not_set_the_seeds():
    doc = pilot_doc(0.004)
    e = next(e for e in doc["claims"] if e["testbed"] == "smollm2" and not e["control"])
    e["sesoi"] = 1e-9  # beyond 10^7 pairs at this SD
    plan = power_plan(doc, "smollm2", 12)
    row = next(r for r in plan["arms"] if r["arm"] == e["id"])
    assert row["seeds_needed"] is None and row["why"].startswith("not reachable")
    assert plan["set_by"] != e["id"]


def test_constant_differences_leave_the_minimum():
    doc = pilot_doc(0.004)
    e = next(e for e in doc["claims"] if e["testbed"] == "smollm2" and not e["control"])
    e["power"]["sd_diff"] = 0.0
    row = next(r for r in power_plan(doc, "smollm2", 12)["arms"] if r["arm"] == e["id"])
    assert row["seeds_needed"] is None and "SD 0" in row["why"]
